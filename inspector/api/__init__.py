"""The Python API (`import inspector`): load a model, prefill and step runs, read what every forward
recorded, draw the page's views, save and open trace files, run the CLI's analyses.

`model.py` (load, Model, the levers as keywords), `run.py` (Run), `views.py` (the page's builders),
`speculative.py`, `analyses.py`, `traces.py` (open_trace), `lab_figures.py` (analysis results drawn),
`options.py` (keywords checked as the CLI's flags). `inspector/__init__.py` exports the names lazily.
"""

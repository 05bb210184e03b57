"""Benchmark scripts: each prints markdown tables, with a peer measured in the same run.

Run them as modules from the repository root, e.g. `python -m bench.engine --help`; the root is then on
sys.path, so `inspector` is this checkout's and `harness.*` (the server plumbing they share with the tests)
imports too. Nothing here imports `tests` (tests/unit/generation/test_one_loop.py checks).
"""

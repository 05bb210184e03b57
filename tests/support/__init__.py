"""What the tests share, one module per kind of help; test files import from here and never from each other
(tests/unit/package/test_layout_of_tests.py checks). Fixtures are imported explicitly where used
(`from tests.support.viz_records import tiny_loaded  # noqa: F401`); the few every test may take (the real
default model, the served app, chromium's launch arguments) are in tests/conftest.py.

- tiny: tiny random checkpoints on disk (any family, a tokenizer, a GGUF), their fixtures, the bench runner
- engine_fixtures: a transformers model and our Transformer on the same random weights (`hf_pair`)
- families: the family configs the parity tests build; generation: the loop run by hand; heads: the head
  atlas's scores by hand; parity: a converted checkpoint against transformers; serving: solo greedy runs
- viz_records: a real session over a tiny model, prefilled and stepped, and a fake prefill record
- lab_context: a page without a browser (its panels and run); handlers: bare handlers and their status line
- json_compare: the API's results against the CLI's --json; fuzz_inputs: the fuzz tests' seed and odd text;
  api_fuzz: the API fuzz's cases, servers and checks
- ui_server: the served apps (`start_app`, counted; `tiny_moe_app`; caps put in place on a live app) and where
  screenshots go; space_app: the Space bundle's app in its own venv; browser: what a browser test does on the
  page; number_boxes: the number-box tests' values, messages and the served app's log
- imports: what a Python file imports (the layering tests)
"""

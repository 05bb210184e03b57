"""The plumbing the tests and the bench scripts share (nothing here imports `tests` or pytest, so bench/ needs
nothing from tests/): `net` (free ports, waiting for a URL), `server_proc` (the app as a subprocess, its
memory, sessions driven through gradio_client), `app_server` (the app served in this process)."""

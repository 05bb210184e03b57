"""Start the Inference Inspector web app: `python app.py` (Hugging Face Spaces runs this file too).

Checks the INSPECTOR_* settings, loads the model once (`inspector.ui.app_model.load_app_model()`), builds
the page and launches it on 127.0.0.1:7860 unless GRADIO_SERVER_NAME / GRADIO_SERVER_PORT say otherwise.
Analytics off. A bad model source or INSPECTOR_* setting prints one line and exits 1.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from inspector.errors import InspectorError  # noqa: E402
from inspector.ui.app_model import check_settings  # noqa: E402


def main() -> None:
    try:
        check_settings()  # before torch and Gradio are imported: a bad setting is named at once, not after them
        from inspector.ui.app import build_app, launch_kwargs, queue_app

        demo = build_app()  # checks the settings again (as for every caller), then loads the model (load_app_model)
    except InspectorError as exc:  # a bad INSPECTOR_* setting or model source: one line, no traceback
        sys.exit(f"error: {exc}")
    queue_app(demo)
    demo.launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        run_history=False,  # UI_NOTES: saves 100-250 ms per event
        footer_links=["api"],
        **launch_kwargs(),
    )


if __name__ == "__main__":
    main()

"""The Gradio web app: `build_app()` in `inspector.ui.app`; handlers, session store and API beside it."""

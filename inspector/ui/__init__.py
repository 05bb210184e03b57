"""The Gradio web app: `build_app()` in `inspector.ui.app`; handlers, visitor store and API beside it."""

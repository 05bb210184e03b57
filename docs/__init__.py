"""Documentation helpers: `python -m docs.screenshots` (from the repository root) refreshes docs/img/*.png."""

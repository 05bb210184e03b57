"""The app served in this process on a free port of 127.0.0.1, as the browser tests and bench/ui.py serve it.

- `launch_here(demo)`: launch any Blocks on 127.0.0.1:<free port> in this process (no thread lock, quiet);
  returns it (`.local_url`; `.close()` stops it).
- `start_app(loaded)`: build the app and launch it so (its queue as `python app.py` has it: `queue_app`).
- `TOUR_SEEN_JS`: a page init script that marks the guided tour seen, so its card never covers what a
  script clicks (static/tour.js opens it on a browser's first visit).
"""

from __future__ import annotations

from harness.net import HOST, free_port

# The guided tour opens on a browser's first visit (static/tour.js). Pages that test other parts mark it seen
# (`page.add_init_script(TOUR_SEEN_JS)`), as a returning visitor, so its card never covers what they click.
TOUR_SEEN_JS = "try { localStorage.setItem('inspector-tour-seen', '1'); } catch (e) {}"


def launch_here(demo, **kwargs):
    """`demo` launched on 127.0.0.1:<free port> in this process, with no thread lock and quietly; `kwargs` go to
    `demo.launch`. Returns `demo`."""
    demo.launch(server_name=HOST, server_port=free_port(), prevent_thread_lock=True, quiet=True, **kwargs)
    return demo


def start_app(loaded):
    """Build and launch the app on 127.0.0.1:<free port>; returns the Blocks (`.local_url`, `.store`)."""
    from inspector.ui.app import build_app, launch_kwargs, queue_app

    demo = build_app(loaded)
    queue_app(demo)
    return launch_here(demo, run_history=False, **launch_kwargs())

"""The scripts that must run in the page before Gradio's own, and the ASGI middleware that puts them there.

- `HEAD_SCRIPTS`: files of static/ that work around Gradio's frontend. queue_stream.js keeps Gradio's stream of
  answers open while an event joined still waits for its answer (it must wrap `fetch` before Gradio's first
  join); loading_timer.js ends the frame loop that Gradio's loading screen leaves running (it must wrap
  requestAnimationFrame before Gradio's status tracker module keeps that function). Each file says why.
- `head_script(name)`: one of them as an inline <script>; `page_head()`: all of them, in order.
- `FirstInHead`: ASGI middleware that puts an HTML snippet first in the <head> of the app's page (GET of the
  root path, a text/html answer), so that it runs before the module scripts Gradio's page loads. Gradio's own
  `launch(head=...)` cannot do that: it sends the head in the page's config, and its frontend adds it once the
  app has loaded, after those modules ran. Every other request and answer passes through untouched.
  `head_middleware()` is the one the app launches with (`launch(app_kwargs={"middleware": [...]})`); the app
  sends `page_head()` as Gradio's head too, for pages whose HTML does not come through it
  (`inspector.ui.app.launch_kwargs`).
"""

from __future__ import annotations

from pathlib import Path

from starlette.middleware import Middleware

STATIC = Path(__file__).resolve().parents[2] / "static"
HEAD_SCRIPTS = ("queue_stream.js", "loading_timer.js")


def head_script(name: str) -> str:
    """static/<name> as an inline <script> for a page's <head>."""
    return f"<script>{(STATIC / name).read_text(encoding='utf-8')}</script>"


def page_head() -> str:
    """HEAD_SCRIPTS as inline <script>s, in order."""
    return "\n".join(head_script(name) for name in HEAD_SCRIPTS)


class FirstInHead:
    """ASGI middleware: `html` inserted right after the first `<head>` of the app page's HTML answer (a GET of
    the root path answered with text/html). The answer's body is read whole (the page is about 12 KB) and its
    Content-Length set again; every other request and answer passes through as it came."""

    def __init__(self, app, html: str) -> None:
        self.app = app
        self.html = html.encode("utf-8")

    @staticmethod
    def is_page(scope) -> bool:
        root = scope.get("root_path", "").rstrip("/")
        return scope["type"] == "http" and scope["method"] == "GET" and scope["path"] in ("/", root, root + "/")

    async def __call__(self, scope, receive, send) -> None:
        if not self.is_page(scope):
            await self.app(scope, receive, send)
            return
        start: dict | None = None  # the answer's start, held while its HTML body is read
        passing = False  # the answer is not HTML: passed through as it comes
        parts: list[bytes] = []

        async def send_with_head(message) -> None:
            nonlocal start, passing
            if message["type"] == "http.response.start":
                content_type = dict(message.get("headers", [])).get(b"content-type", b"")
                if content_type.startswith(b"text/html"):
                    start = message
                else:
                    passing = True
                    await send(message)
                return
            if passing or start is None or message["type"] != "http.response.body":
                await send(message)
                return
            parts.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(parts).replace(b"<head>", b"<head>" + self.html, 1)
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, send_with_head)


def head_middleware() -> Middleware:
    """`FirstInHead` with `page_head()`, for `launch(app_kwargs={"middleware": [head_middleware()]})`."""
    return Middleware(FirstInHead, html=page_head())

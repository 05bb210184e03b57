"""inspector.ui.page_head: the head scripts reach the page's HTML ahead of Gradio's module scripts, and the
middleware touches nothing else."""

from __future__ import annotations

import gradio as gr
import httpx
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from harness.app_server import launch_here
from inspector.ui.app import launch_kwargs
from inspector.ui.page_head import HEAD_SCRIPTS, FirstInHead, head_script, page_head

PAGE = "<!doctype html><html><head><title>t</title></head><body><head></head></body></html>"


def client() -> TestClient:
    async def page(request):
        return HTMLResponse(PAGE)

    async def api(request):
        return JSONResponse({"head": "<head>"})

    async def text(request):
        return PlainTextResponse("<head>")

    app = Starlette(routes=[Route("/", page, methods=["GET", "POST"]), Route("/other", page),
                            Route("/api", api), Route("/text", text)])
    return TestClient(FirstInHead(app, html="<script>S</script>"))


def test_the_page_gets_the_snippet_first_in_its_head_once():
    answer = client().get("/")
    assert answer.text == PAGE.replace("<head>", "<head><script>S</script>", 1)
    assert answer.headers["content-length"] == str(len(answer.content))


def test_every_other_answer_passes_untouched():
    c = client()
    assert c.get("/other").text == PAGE  # HTML, not the page's path
    assert c.post("/").text == PAGE  # the page's path, not a GET
    assert c.get("/api").json() == {"head": "<head>"}  # the page's path family, not HTML
    assert c.get("/text").text == "<head>"


def test_page_head_is_every_head_script_in_order():
    head = page_head()
    positions = [head.index(head_script(name)) for name in HEAD_SCRIPTS]
    assert positions == sorted(positions) and len(HEAD_SCRIPTS) == 2


def test_the_served_page_runs_the_head_scripts_before_gradios_modules():
    with gr.Blocks() as demo:
        gr.Button("Go")
    launch_here(demo, **launch_kwargs())
    try:
        html = httpx.get(demo.local_url, timeout=30).text
    finally:
        demo.close()
    # in the HTML's own <head>, before Gradio's config (where `launch(head=...)` would put them, for its frontend
    # to add later) and before its first module script
    first = min(html.index("window.gradio_config"), html.index('<script type="module"'))
    for marker in ("window.iiQueueStream", "window.iiLoadingTimer"):
        assert html.index(marker) < first, marker

"""static/queue_stream.js: an event joined while Gradio's stream of answers is being closed still gets its
answer. A page script (RACE_JS, loaded before the page's own scripts) makes the race happen every time: it holds
the first stream's text until the server has ended it and a second event has been joined and answered, then
hands it over. Gradio's client then reads its join's answer with the stream still open (so it opens none) and
then the `close_stream`; the second event's messages wait on the server with no stream."""

from __future__ import annotations

import time
from collections.abc import Callable

import gradio as gr
import pytest
from playwright.sync_api import Page, expect

from harness.app_server import launch_here
from inspector.ui.page_head import head_script

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# Below every other wrapper of `fetch` (an init script runs before the page's scripts): the first stream of
# answers is read whole (the server ends it after the first event's answer, as no other event is pending), then
# button B is clicked and its join answered, and only then does the page get the first stream's text.
RACE_JS = """(() => {
  const fetch0 = window.fetch;
  let held = false;
  window.iiJoinsAnswered = 0;
  window.fetch = function (input, init) {
    const url = String((input && input.url) || input);
    const reply = fetch0.apply(this, arguments);
    if (url.includes('/queue/join')) reply.then(() => { window.iiJoinsAnswered += 1; });
    if (!url.includes('/queue/data') || held) return reply;
    held = true;
    return reply.then(async (response) => {
      const text = await response.text();
      const joined = window.iiJoinsAnswered;
      document.querySelector('#b-btn').click();
      while (window.iiJoinsAnswered === joined) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 300));  // the client takes the join's answer: its stream looks open
      return new Response(text, { status: response.status, headers: response.headers });
    });
  };
})();"""


def two_buttons(head: str | None) -> gr.Blocks:
    """A page whose button A answers after 0.2 s and whose button B answers at once, both through the queue."""
    with gr.Blocks() as demo:
        a_out, b_out = gr.Textbox(elem_id="a-out"), gr.Textbox(elem_id="b-out")
        gr.Button("A", elem_id="a-btn").click(lambda: time.sleep(0.2) or "A answered", None, a_out)
        gr.Button("B", elem_id="b-btn").click(lambda: "B answered", None, b_out)
    return launch_here(demo, head=head)


def race(page: Page, head: str | None, then: Callable[[], None]) -> None:
    """Click A on a two-button page with RACE_JS, wait until B has been joined and answered, then `then()` (while
    the page's server still runs)."""
    demo = two_buttons(head)
    try:
        page.add_init_script(RACE_JS)
        page.goto(demo.local_url)
        page.locator("#a-btn").click()
        expect(page.locator("#a-out textarea")).to_have_value("A answered", timeout=15_000)
        page.wait_for_function("window.iiJoinsAnswered >= 2", timeout=15_000)  # B was joined and answered
        then()
    finally:
        demo.close()


def test_an_event_joined_while_the_stream_closes_gets_its_answer(page: Page):
    def answered() -> None:
        expect(page.locator("#b-out textarea")).to_have_value("B answered", timeout=5000)
        assert page.evaluate("window.iiQueueStream.reopened") == 1
        assert page.evaluate("window.iiQueueStream.unanswered.size") == 0

    race(page, head_script("queue_stream.js"), answered)


def test_without_it_gradio_strands_that_event(page: Page):
    """The race is real in the Gradio installed: without static/queue_stream.js, B's answer never arrives. If
    this fails, Gradio carries such an event itself now, and static/queue_stream.js can go."""
    def stranded() -> None:
        page.wait_for_timeout(3000)  # time for B's answer to arrive, if anything were to carry it
        assert page.locator("#b-out textarea").input_value() == ""

    race(page, None, stranded)

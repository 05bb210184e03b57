"""Run links: URL query parameters <-> the page's settings, and the page-load handlers that run them."""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qsl

import gradio as gr
import pytest

from inspector.ui.link_handlers import link_fill, link_run
from inspector.errors import InputError
from inspector.ui.run_links import RunLink, link_query, parse_link
from tests.support.handlers import make, status
from tests.support.viz_records import tiny_loaded  # noqa: F401


def test_round_trip_and_defaults():
    link = RunLink(prompt="Why is the sky blue? ü 🌈 & more", chat=False, system="Be brief.", temperature=0.7,
                   top_k=40, top_p=0.9, min_p=0.05, seed=3, max_new=16, steps=5)
    assert parse_link(dict(parse_qsl(link_query(link)))) == link
    assert parse_link({"prompt": "hi"}) == RunLink(prompt="hi")
    assert parse_link({}) is None and parse_link({"prompt": "  ", "seed": "x"}) is None  # a plain visit
    assert parse_link({"prompt": "hi", "utm_source": "x"}) == RunLink(prompt="hi")


@pytest.mark.parametrize("query, message", [
    ({"temperature": "hot"}, "link parameter temperature: temperature must be 0 or a number in"),
    ({"temperature": "3"}, r"in \[1e-06, 2\]"),  # the page's slider range, not clamped
    ({"top_p": "0"}, "top-p"),
    ({"seed": "1.5"}, "link parameter seed: seed must be a whole number"),
    ({"steps": "-1"}, "steps must be a whole number >= 0"),
    ({"max_new": "nan"}, "link parameter max_new: max new tokens must be a whole number"),
    ({"chat": "maybe"}, "chat must be 1 or 0"),
])
def test_bad_values_name_the_parameter(query, message):
    with pytest.raises(InputError, match=message):
        parse_link({"prompt": "hi", **query})


def request(query: dict):
    return SimpleNamespace(query_params=query)


def test_page_load_runs_the_linked_run(tiny_loaded):
    h, store = make(tiny_loaded)
    link = RunLink(prompt="The quick brown fox", chat=False, temperature=0.8, seed=5, max_new=8, steps=3)
    filled = link_fill(request(dict(parse_qsl(link_query(link)))))
    assert filled[0] == "The quick brown fox" and filled[1] is False and filled[-2] == 8
    sid = store.new_id()
    out = link_run(h, sid, filled[-1], 0, 0)
    assert out[0] == sid and "opened from a link: prefill + 3 steps" in status(out[1:])
    linked = store.get(sid).session.generated_ids

    # the same run by the buttons gives the same tokens (seeded per position)
    sid2, *_ = h.prefill(None, "The quick brown fox", False, "", 0.8, 0, 1.0, 0.0, 5, 8, 0, 0)
    for _ in range(3):
        h.step(sid2, 0.8, 0, 1.0, 0.0, 5, 0, 0)
    assert store.get(sid2).session.generated_ids == linked and len(linked) == 4

    skipped = link_run(h, sid, None, 0, 0)  # no link: every output left as it is
    assert skipped[0] == gr.skip() and skipped[1] == {}
    bad = link_fill(request({"prompt": "x", "top_k": "many"}))
    out = link_run(h, sid, bad[-1], 0, 0)
    assert "link parameter top_k: top-k must be a whole number" in status(out[1:]) and set(out[1]) == {"status"}
    out = link_run(h, sid, link_fill(request({"prompt": "x" * 100_000}))[-1], 0, 0)
    assert "ii-error" in status(out[1:])  # the prompt caps hold for links too

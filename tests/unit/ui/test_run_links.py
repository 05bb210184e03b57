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


def test_a_link_carries_a_decoding_setting_through_the_request(tiny_loaded):  # noqa: F811
    """A run with a penalty and a stop string from the settings panel: its link holds the run's `RunRequest`
    fields under their own names (no `decoding` JSON), reads back as the same request, and opens to the same
    run with the same request kept."""
    import json

    from inspector.ui.decoding_controls import apply
    from inspector.ui.link_handlers import link_query_for
    from inspector.ui.run_links import link_request

    h, store = make(tiny_loaded)
    sid = store.new_id()
    apply(store, sid, "1.3", "0", "0", "0", "", "", "0", "END", "none", "", "4", "1")
    sid, _ = h.prefill(sid, "The quick brown fox", False, "", 0.8, 0, 1.0, 0.0, 5, 8, 0, 0)
    h.step(sid, 0.8, 0, 1.0, 0.0, 5, 0, 0)
    ran = store.get(sid).session
    query, _ = link_query_for(h, sid)
    params = dict(parse_qsl(query[1:]))
    assert params["repetition_penalty"] == "1.3" and json.loads(params["stop"]) == ["END"]
    assert params["max_new_tokens"] == "8" and "decoding" not in params and "num_beams" not in params
    assert link_request(parse_link(params)).to_json() == ran.request  # the link is the run's request
    sid2 = store.new_id()
    out = link_run(h, sid2, link_fill(request(params))[-1], 0, 0)
    assert "opened from a link: prefill + 1 steps" in status(out[1:])
    opened = store.get(sid2).session
    assert opened.request == ran.request and opened.decoding.repetition_penalty == 1.3
    assert opened.generated_ids == ran.generated_ids


def test_a_link_refuses_what_the_page_does_not_run():
    with pytest.raises(InputError, match="link parameter quant: the page's run does not take it"):
        parse_link({"prompt": "hi", "quant": "int8"})
    with pytest.raises(InputError, match="link parameter stop is a JSON list of strings"):
        parse_link({"prompt": "hi", "stop": "END"})
    with pytest.raises(InputError) as err:  # one line per bad parameter
        parse_link({"prompt": "hi", "top_k": "many", "repetition_penalty": "0"})
    assert str(err.value).splitlines() == [
        "link parameter top_k: top-k must be a whole number from 0 to 200 (0 = off), got 'many'",
        "link parameter repetition_penalty: repetition-penalty must be a number > 0 (1 = off; > 1 discourages "
        "repeats), got '0'"]


def test_a_link_is_parsed_and_checked_once(tiny_loaded, monkeypatch):  # noqa: F811
    """Opening a link checks its run once, when the URL is read (`parse_link`): the run it prefills is that
    checked run (`RunLink.checked`), with no second parse of the values nor a second check, by the page's
    handlers or by the session they start."""
    from inspector.generation.request_checks import Checked
    from inspector.quant.requested import RunRequest

    h, store = make(tiny_loaded)
    from inspector.engine.config import SamplingParams

    checks, validated = [], []
    real = RunRequest.checked
    monkeypatch.setattr(RunRequest, "checked", lambda self, *a, **k: (checks.append(self), real(self, *a, **k))[1])
    real_validate = SamplingParams.validate
    monkeypatch.setattr(SamplingParams, "validate", lambda self: (validated.append(self), real_validate(self))[1])
    link = RunLink(prompt="The quick brown fox", chat=False, temperature=0.8, seed=5, max_new=8, steps=2)
    filled = link_fill(request(dict(parse_qsl(link_query(link)))))
    assert len(checks) == 1 and isinstance(filled[-1].checked, Checked)
    assert filled[-1] == link  # the checked run and tree ride beside the link's value, not in it
    started = []
    real_start = type(h).start
    monkeypatch.setattr(type(h), "start", lambda self, sid, c: (started.append(c), real_start(self, sid, c))[1])
    out = link_run(h, store.new_id(), filled[-1], 0, 0)
    assert "opened from a link: prefill + 2 steps" in status(out[1:])
    assert len(checks) == 1  # not checked again
    assert validated == []  # nor its sampling params, by the session's prefill and steps (`checked=True`)
    assert started[0].request == filled[-1].checked.request and started[0].params == filled[-1].checked.params

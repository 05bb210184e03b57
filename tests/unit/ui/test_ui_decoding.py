"""The settings panel's parsing, run links that carry decoding settings, and applying them to a session."""

from __future__ import annotations

import json

import pytest

from inspector.errors import InputError
from inspector.generation.settings import DecodingSettings
from inspector.ui.decoding_controls import apply, link_values, settings_from_controls, step_settings
from inspector.ui.run_links import RunLink, link_query, parse_link
from tests.support.viz_records import tiny_loaded  # noqa: F401 (fixture)

DEFAULTS = ["1", "0", "0", "0", "", "", "0", "", "none", "", "4", "1"]


def values(**changes) -> list:
    names = ["rep", "pres", "freq", "ngram", "bias", "bad", "min_new", "stop", "kind", "text", "beams", "lp"]
    out = dict(zip(names, DEFAULTS))
    out.update(changes)
    return [out[n] for n in names]


def test_panel_values_become_settings():
    s = settings_from_controls(*values(rep="1.3", bias="5=-2, 9=1.5", bad="foo\nbar baz", stop="END", kind="regex",
                                       text="[a-z]+", ngram="3"))
    assert s == DecodingSettings(repetition_penalty=1.3, no_repeat_ngram_size=3, logit_bias=((5, -2.0), (9, 1.5)),
                                 bad_words=("foo", "bar baz"), stop=("END",), regex="[a-z]+", num_beams=4)
    with pytest.raises(InputError, match="beam search runs without a grammar constraint"):
        settings_from_controls(*values(kind="regex", text="[a-z]+"), for_beams=True)


@pytest.mark.parametrize("changes, message", [
    (dict(rep="0"), "repetition-penalty must be a number > 0"),
    (dict(rep=""), "repetition-penalty is empty"),
    (dict(pres="abc"), "presence-penalty must be a number in [-2, 2]"),
    (dict(beams="17"), "num-beams must be a whole number from 1 to 16"),
    (dict(bias="5"), "logit bias must be ID=VALUE"),
    (dict(kind="regex", text=""), "the regex constraint is empty"),
    (dict(kind="regex", text="a(b"), "the regex does not compile"),
    (dict(kind="JSON schema", text="{nope"), "the JSON schema is not valid JSON"),
    (dict(kind="bogus"), "constraint must be one of"),
])
def test_bad_panel_values_are_one_line(changes, message):
    with pytest.raises(InputError) as err:
        settings_from_controls(*values(**changes))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_run_link_carries_the_decoding_settings():
    s = DecodingSettings(repetition_penalty=1.3, no_repeat_ngram_size=3, stop=("END",), choices=("yes", "no"),
                         num_beams=4)
    link = RunLink(prompt="hi", temperature=0.7, seed=3, decoding=json.dumps(s.to_dict()))
    query = dict(kv.split("=", 1) for kv in link_query(link).split("&"))
    from urllib.parse import unquote_plus

    back = parse_link({k: unquote_plus(v) for k, v in query.items()})
    assert back == link and DecodingSettings.from_dict(json.loads(back.decoding)) == s
    assert back.checked.settings == s  # the run parse_link checked: what the page runs, not parsed again
    filled = link_values(back)
    assert filled[0] == "1.3" and filled[8] == "choice" and filled[9] == "yes\nno" and filled[10] == "4"
    assert settings_from_controls(*filled) == s
    assert parse_link({"prompt": "hi"}).decoding == ""  # older links: the defaults


@pytest.mark.parametrize("text, message", [
    ("{", "link parameter decoding is not JSON"),
    ('{"repetition_penalty": 0}', "link parameter decoding: repetition-penalty must be a number > 0"),
    ('{"frobnicate": 1}', "unknown decoding setting 'frobnicate'"),
    ("[1]", "must be a JSON object"),
])
def test_a_bad_decoding_link_parameter_names_it(text, message):
    with pytest.raises(InputError) as err:
        parse_link({"prompt": "hi", "decoding": text})
    assert message in str(err.value)


def test_apply_keeps_settings_for_the_next_prefill(tiny_loaded):  # noqa: F811
    from inspector.engine.config import SamplingParams
    from inspector.ui.app_model import app_limits
    from inspector.ui.visitors import Visitors, new_ui_session

    store = Visitors(lambda: new_ui_session(tiny_loaded), app_limits())
    sid = store.new_id()
    html = apply(store, sid, *values(rep="1.5", bad="the"))
    assert "repetition penalty 1.5" in html and "next Prefill" in html and "data-decoding" in html
    visitor = store.get(sid)
    assert step_settings(visitor).num_beams == 1
    session = visitor.session
    session.set_decoding(step_settings(visitor))
    session.prefill("the cat", SamplingParams(), max_new_tokens=3)
    assert session.records[-1].sample.stages == ["repetition penalty", "bad words"]
    assert "must be a number &gt; 0" in apply(store, sid, *values(rep="-1"))
    assert store.get(sid).decoding.repetition_penalty == 1.5  # a refused change keeps the last good one

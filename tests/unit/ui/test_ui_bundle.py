"""The view bundle: handler outputs -> one JSON update per event; slots for every view; plotly.js served locally."""

from __future__ import annotations

import json

import gradio as gr
import numpy as np

from inspector.ui.bundle import PLOTLY_JS, ViewBundle, ViewSlot, bundled, encode, pack, serve_plotly_js
from inspector.viz.common import figure
from tests.support.viz_records import tiny_loaded  # noqa: F401


def test_encode_writes_figures_as_plotly_json_and_html_as_strings():
    z = np.arange(6, dtype=np.uint8).reshape(2, 3)
    fig = figure([{"type": "heatmap", "z": z}], "A title", 300)
    out = json.loads(encode({"status": '<div id="s">step "1"</div>', "resid_heat": fig,
                             "kv_bars": fig.to_plotly_json()}))
    assert out["status"] == '<div id="s">step "1"</div>'
    heat = out["resid_heat"]["data"][0]
    assert out["resid_heat"]["layout"]["title"]["text"] == "A title"
    assert heat["z"]["dtype"] == "u1" and heat["z"]["shape"] == "2, 3"  # numpy goes as a base64 typed array
    assert out["kv_bars"]["layout"]["height"] == 300
    assert ViewBundle().postprocess({"text": "hi"}) == '{"text":"hi"}'
    assert ViewBundle().postprocess(None) is None


def test_pack_keeps_only_changed_views():
    assert pack({"a": "x", "b": gr.skip(), "c": "z"}) == {"a": "x", "c": "z"}
    assert pack({"a": gr.skip(), "b": gr.skip()}) == gr.skip()  # nothing changed: no update at all
    assert pack({}) == gr.skip()


def test_bundled_adapts_functions_and_generators():
    def handler(sid, x):
        return sid, {"status": f"<b>{x}</b>", "text": gr.skip()}

    def stream(x):
        yield {"status": x, "text": gr.skip()}
        yield {"status": gr.skip(), "text": x + 1}

    wrapped = bundled(handler, lead=1)
    assert wrapped("id-1", 5) == ["id-1", {"status": "<b>5</b>"}]
    streaming = bundled(stream)
    import inspect

    assert inspect.isgeneratorfunction(streaming)  # Gradio streams it as before
    assert list(streaming(1)) == [{"status": 1}, {"text": 2}]
    assert inspect.signature(wrapped).parameters.keys() == {"sid", "x"}  # Gradio reads the inputs from it


def test_the_app_has_one_slot_per_view_and_one_bundle_output(tiny_loaded):
    from inspector.ui.app import build_app
    from tests.support.lab_context import make_page

    demo = build_app(tiny_loaded)
    slots = [b for b in demo.blocks.values() if isinstance(b, ViewSlot)]
    keys = sorted(s.html_template.split('data-view="')[1].split('"')[0] for s in slots)
    assert keys == sorted([*make_page(tiny_loaded).handlers.render.view_keys, "drawn"])  # the views of this model's page
    plots = {s.elem_id for s in slots if "ii-plot" in s.html_template}
    assert plots == {"resid-position", "attn-pattern", "kv-bars", "kv-growth", "sampling-bars",
                     "timing-chart"}  # the residual heatmap and the attention overview are images (HTML)
    # plots and heavy HTML views are drawn while in sight (inspector.ui.panel.Slot); the run's own views always
    lazy = {s.elem_id for s in slots if " data-lazy" in s.html_template}
    assert lazy == plots | {"resid-heatmap", "logit-lens-view", "attn-overview"}
    bundles = [b for b in demo.blocks.values() if isinstance(b, ViewBundle)]
    assert len(bundles) == 1
    step = next(d for d in demo.fns.values() if d.api_name == "ui_step")
    assert [o._id for o in step.outputs] == [bundles[0]._id]  # one output, whatever the number of views


def test_the_page_loads_plotly_js_from_the_plotly_package():
    url = serve_plotly_js()
    assert PLOTLY_JS.is_file() and PLOTLY_JS.stat().st_size > 1_000_000
    assert url == f"gradio_api/file={PLOTLY_JS.as_posix()}"
    import gradio.utils

    assert gradio.utils.is_static_file(PLOTLY_JS)  # served as is, never copied to Gradio's cache
    # loaded by the bundle's own script, never as a component's `head` (Gradio runs none of a component's script
    # when its head fails to load: tests/browser/test_ui_page.py fails the first load)
    script = ViewBundle().js_on_load
    assert f"script.src = {json.dumps(url)};" in script and "Plotly.react" in script
    assert ViewBundle().head is None and ViewSlot("k", "e", plot=True).head is None


def test_big_hover_values_travel_as_a_file_of_the_same_float32_values(tiny_loaded):
    import base64
    import html
    import json
    import re
    from pathlib import Path

    from inspector.ui import bundle_parts
    from inspector.viz import attention as va

    rng = np.random.default_rng(0)
    rows = rng.random((3, 9, 700), dtype=np.float32)  # 3 layers x 9 heads x 700 keys: above the inline limit
    rows /= rows.sum(-1, keepdims=True)
    big = va.overview_html(rows, [f"t{i}" for i in range(700)], 3, 699, 0, 0)
    small = va.overview_html(rows[:, :, :8], [f"t{i}" for i in range(8)], 3, 7, 0, 0)
    inline = re.search(r'data-z="([^"]+)"', big).group(1)
    assert len(inline) > bundle_parts.HOVER_INLINE_MAX >= len(re.search(r'data-z="([^"]+)"', small).group(1))
    files = bundle_parts.HoverFiles()
    out = files.carry("visitor-1", {"attn_overview": big, "small": small, "status": "<b>x</b>"})
    assert out["small"] == small and out["status"] == "<b>x</b>"  # small values stay inside the HTML
    src = re.search(r'data-z-src="gradio_api/file=([^"]+)"', out["attn_overview"]).group(1)
    names_src = re.search(r'data-names-src="gradio_api/file=([^"]+)"', out["attn_overview"]).group(1)
    assert "data-z=" not in out["attn_overview"]
    assert "data-rows=" not in out["attn_overview"] and "data-cols=" not in out["attn_overview"]
    named = re.search(r" data-rows='[^']*' data-cols='[^']*'", big).group(0)
    assert out["attn_overview"].replace(f' data-z-src="gradio_api/file={src}"', f' data-z="{inline}"').replace(
        f' data-names-src="gradio_api/file={names_src}"', named) == big  # the rest of the HTML as it was
    path = Path(src)
    files.flush()  # the writer thread writes it beside the update
    assert path.parent == files.folder() and path.read_text(encoding="ascii") == inline  # the same text, lossless
    values = np.frombuffer(base64.b64decode(path.read_bytes()), "<f4")
    np.testing.assert_array_equal(values.reshape(27, 700), rows.reshape(27, 700))
    # the names the HTML held, unescaped: the row per layer and head, the column per key
    names = json.loads(Path(names_src).read_text(encoding="utf-8"))
    assert names["rows"] == json.loads(html.unescape(re.search(r"data-rows='([^']*)'", big).group(1)))
    assert len(names["rows"]) == 27 and names["rows"][0].startswith("L0·H0")
    assert names["cols"] == json.loads(html.unescape(re.search(r"data-cols='([^']*)'", big).group(1)))
    assert len(names["cols"]) == 700 and names["cols"][5] == "key 5:t5"
    # a view keeps its newest HOVER_KEEP files; older ones are deleted
    carried = [files.carry("visitor-1", {"attn_overview": big})["attn_overview"]
               for _ in range(bundle_parts.HOVER_KEEP)]
    later = [Path(m) for html_ in carried for m in re.findall(r'-src="gradio_api/file=([^"]+)"', html_)]
    files.flush()
    assert len(later) == 2 * bundle_parts.HOVER_KEEP
    assert not path.exists() and not Path(names_src).exists() and all(p.exists() for p in later)


def test_a_long_prompts_chips_travel_once_and_go_back_in_place():
    from inspector.ui import bundle_parts
    from inspector.viz import tokens as vtok
    from inspector.viz.tokens import CHIP_START

    n_prompt = bundle_parts.PART_MIN_ITEMS + 10
    ids = list(range(n_prompt + 3))
    pieces = [f"w{i}" for i in ids]

    def chips(selected=None, n=len(ids)):
        return vtok.token_chips_html(ids[:n], pieces[:n], [False] * n, n_prompt, selected)

    def sent(sender, owner, selected=None, n=len(ids), prompt_len=n_prompt):  # as the renderer sends them
        parts_of = vtok.token_chips_parts(ids[:n], pieces[:n], [False] * n, n_prompt, selected)
        return sender.join(owner, *parts_of, prompt_len)

    def rebuilt(views, parts):
        value = views["chips"]
        digest = value.split("<!--ii-part:")[1].split("-->")[0]
        return value.replace(f"<!--ii-part:{digest}-->", parts[digest])

    parts = {}
    sender = bundle_parts.PromptParts()
    first = sent(sender, "v1")
    parts.update({k[5:]: v for k, v in first.items() if k.startswith("part:")})
    assert len(parts) == 1 and rebuilt(first, parts) == chips()
    assert next(iter(parts.values())).count(CHIP_START) == n_prompt  # the prompt's chips, the generated ones stay
    again = sent(sender, "v1", n=len(ids) - 1)  # the same prompt chips: the marker alone
    assert set(again) == {"chips"} and rebuilt(again, parts) == chips(n=len(ids) - 1)
    assert len(again["chips"]) < len(first["chips"]) + len(next(iter(parts.values()))) // 10
    other = sent(sender, "v2")  # another browser session gets the part
    assert any(k.startswith("part:") for k in other)
    picked = sent(sender, "v1", selected=5)  # a prompt chip selected: a new part
    parts.update({k[5:]: v for k, v in picked.items() if k.startswith("part:")})
    assert len(parts) == 2 and rebuilt(picked, parts) == chips(selected=5)
    only_prompt = chips(n=n_prompt)
    alone = sent(sender, "v3", n=n_prompt)  # no generated chip yet: the part ends before </div>
    parts.update({k[5:]: v for k, v in alone.items() if k.startswith("part:")})
    assert rebuilt(alone, parts) == only_prompt
    short = sent(bundle_parts.PromptParts(), "v1", prompt_len=bundle_parts.PART_MIN_ITEMS - 1)
    assert short == {"chips": chips()}  # a short prompt's chips go whole


def test_the_chips_parts_join_to_the_whole_and_only_the_prompts_travel_apart():
    from inspector.ui import bundle_parts
    from inspector.viz import tokens as vtok
    from inspector.viz.tokens import CHIP_START

    n_prompt = bundle_parts.PART_MIN_ITEMS + 4
    ids = list(range(n_prompt + 2))
    pieces, special = [f"w{i}" for i in ids], [i == 0 for i in ids]
    before, part, after = vtok.token_chips_parts(ids, pieces, special, n_prompt, None, {n_prompt + 1: (3, True)})
    whole = vtok.token_chips_html(ids, pieces, special, n_prompt, None, {n_prompt + 1: (3, True)})
    assert before + part + after == whole and part.count(CHIP_START) == n_prompt
    joined = bundle_parts.PromptParts().join("v1", before, part, after, n_prompt)
    digest = bundle_parts.hashlib.blake2b(part.encode(), digest_size=12).hexdigest()
    assert joined == {"chips": f"{before}<!--ii-part:{digest}-->{after}", f"part:{digest}": part}
    assert len(joined) == 2 and joined["chips"].count(CHIP_START) == 2  # the generated chips stay in the view
    short = bundle_parts.PromptParts().join("v1", before, part, after, bundle_parts.PART_MIN_ITEMS - 1)
    assert short == {"chips": whole}  # a short prompt's chips go whole


def test_a_long_prompts_chips_are_built_once_per_prompt_and_selection(tiny_loaded, monkeypatch):
    import html

    from inspector.ui import bundle_parts
    from inspector.viz import tokens as vtok
    from tests.support.handlers import SAMPLING, make

    monkeypatch.setenv("INSPECTOR_RUN_AHEAD", "0")
    monkeypatch.setattr(bundle_parts, "PART_MIN_ITEMS", 16)  # the tiny model's context is 256 tokens
    built = []
    monkeypatch.setattr(vtok, "prompt_chips_html",
                        lambda *a, _f=vtok.prompt_chips_html: built.append(a[3:]) or _f(*a))
    h, store = make(tiny_loaded)
    words = " ".join(f"w{i}" for i in range(12))
    sid, first = h.prefill(None, words, False, "", *SAMPLING, 6, 0, 0)
    assert sid is not None, first["status"]
    s, parts = store.get(sid).session, {}

    def shown(views):  # the chips view as the page shows it: the part put back in place of its marker
        parts.update({k[5:]: v for k, v in views.items() if k.startswith("part:")})
        value = views["chips"]
        for digest, part in parts.items():
            value = value.replace(f"<!--ii-part:{digest}-->", part)
        return value

    def fresh(selected=None):  # the chips built whole, as for a short prompt (not counted in `built`)
        ids, n = list(s.prompt_ids) + list(s.generated_ids), len(built)
        whole = vtok.token_chips_html(ids, s.token_pieces(), [tiny_loaded.tokenizer.is_special(i) for i in ids],
                                      len(s.prompt_ids), selected, vtok.decided_layers(s.records))
        del built[n:]
        return whole

    n_prompt = len(s.prompt_ids)
    assert n_prompt >= bundle_parts.PART_MIN_ITEMS and shown(first) == fresh()
    for _ in range(2):
        step = h.step(sid, *SAMPLING, 0, 0)
        assert not any(k.startswith("part:") for k in step)  # the same part: the marker alone
        assert shown(step) == fresh()
    assert built == [(n_prompt, None)]  # the prompt's chips were built at the prefill only
    picked = h.select(sid, 3, 0, 0)  # a prompt chip selected: its chips again, with the outline
    assert shown(picked) == fresh(3) and 'ii-selected" data-pos="3"' in html.unescape(shown(picked))
    h.select(sid, n_prompt + 1, 0, 0)  # a generated chip selected: the prompt's chips as at the prefill
    assert built == [(n_prompt, None), (n_prompt, 3)]


def test_unescape_inverts_html_escape_on_every_character_it_escapes():
    import html

    from inspector.ui.bundle_parts import unescape

    text = "a & b < c > d \" e ' f &amp; g &quot; · ✓ \\u00b7"  # entity-like text given in is kept as it was
    assert unescape(html.escape(text, quote=True)) == text == html.unescape(html.escape(text, quote=True))

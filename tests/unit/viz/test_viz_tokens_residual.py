"""Token chips, header/status and residual-stream builders on records from a tiny model."""

from __future__ import annotations

import base64
import html
import io
import json
import re

import numpy as np
from PIL import Image

from inspector.viz import header as vh
from inspector.viz import residual as vr
from inspector.viz import tokens as vt
from inspector.viz.common import show_piece
from tests.support.viz_records import STEPS, tiny_loaded, tiny_run  # noqa: F401


def test_chips_one_per_position_with_roles_and_specials(tiny_run, tiny_loaded):
    s = tiny_run
    ids = s.prompt_ids + s.generated_ids
    special = [tiny_loaded.tokenizer.is_special(i) for i in ids]
    special[0] = True  # mark one to check the class
    html = vt.token_chips_html(ids, s.token_pieces(), special, len(s.prompt_ids), selected=2)
    positions = [int(p) for p in re.findall(r'data-pos="(\d+)"', html)]
    assert positions == list(range(len(ids)))
    assert html.count("ii-chip ii-prompt") == len(s.prompt_ids)
    assert html.count("ii-chip ii-gen") == len(s.generated_ids) == STEPS + 1
    assert html.count("ii-special") == sum(special)
    assert html.count("ii-selected") == 1
    assert f'title="position 2 · id {ids[2]} · prompt' in html
    assert f'data-generated="{STEPS + 1}"' in html


def test_chips_escape_html_and_show_whitespace():
    html = vt.token_chips_html([5, 6], ["<b>", " a\n"], [False, False], 1)
    assert "<b>" not in html.replace('<b id', '') and "&lt;b&gt;" in html
    assert "␣a↵" in html
    assert show_piece("x" * 40, 10) == "x" * 9 + "…"


def test_generated_text_and_finish_reason():
    html = vt.generated_text_html("a < b", "eos")
    assert "a &lt; b" in html and "EOS" in html


def test_residual_heatmap_covers_layers_by_positions(tiny_run):
    s = tiny_run
    n_pos = len(s.prompt_ids) + STEPS  # the newest sampled token is not processed yet
    z = vr.residual_norms(s.records)
    assert z.shape == (s.config.num_hidden_layers, n_pos) and z.dtype == np.float32
    out = vr.residual_heatmap(s.records, s.token_pieces(), selected=1)
    pngs = re.findall(r'src="data:image/png;base64,([^"]+)"', out)
    assert len(pngs) == 1
    decoded = Image.open(io.BytesIO(base64.b64decode(pngs[0])))
    assert decoded.mode == "P"  # a palette image: one byte per cell to compress
    image = np.asarray(decoded.convert("RGB"))  # (layers, positions, 3): the colors the page shows
    assert image.shape == (*z.shape, 3)
    values = np.frombuffer(base64.b64decode(re.search(r'data-z="([^"]+)"', out).group(1)), "<f4").reshape(z.shape)
    np.testing.assert_array_equal(values, z[::-1])  # hover reports true norms; the last layer is the top row
    rows = json.loads(html.unescape(re.search(r"data-rows='([^']+)'", out).group(1)))
    cols = json.loads(html.unescape(re.search(r"data-cols='([^']+)'", out).group(1)))
    assert rows[0] == f"layer {s.config.num_hidden_layers - 1}" and rows[-1] == "layer 0"
    assert len(cols) == n_pos and cols[0].startswith("pos 0:")
    # colors: the norm scaled to the clip value, the brightest Viridis color for the largest norm
    assert tuple(image.reshape(-1, 3)[np.argmax(z[::-1])]) == tuple(vr.HEAT_LUT[255])
    assert f"{n_pos} positions" in out
    assert out.count('class="ii-hm-col"') == 1  # the selected-position marker


def test_position_chart_matches_record_columns(tiny_run):
    s = tiny_run
    last = s.records[-1]
    pos = last.start_pos
    fig = vr.position_chart(s.records, pos, "x")
    names = [t.name for t in fig.data]
    assert any("attention" in n for n in names) and any("MLP" in n for n in names)
    assert np.allclose(fig.data[2].y, last.resid_post[:, 0])
    rec, col = vr.locate(s.records, 1)
    assert rec.kind == "prefill" and col == 1


def test_locate_rejects_unprocessed_position(tiny_run):
    import pytest
    n = tiny_run.records[-1].start_pos + 1
    with pytest.raises(ValueError):
        vr.locate(tiny_run.records, n)


def test_logit_lens_table_rows_per_layer_and_last_is_real(tiny_run):
    rec = tiny_run.records[-1]
    html = vr.logit_lens_html(rec, rec.sample.token_piece)
    assert html.split("<tbody>")[1].count("<tr>") == len(rec.logit_lens) == tiny_run.config.num_hidden_layers
    assert "(= real logits)" in html
    assert f"position {rec.start_pos}" in html


def test_status_and_header(tiny_loaded):
    st = vh.status_html("decode step 2 of 8", {"ttft_ms": 12.4, "last_tpot_ms": 5.0, "tok_s": 200.0}, "oops", True)
    assert 'data-phase="decode step 2 of 8"' in st and "12 ms" in st and "ii-error" in st
    assert vh.phase_text(0, 0, 8, None, False) == "idle"
    assert vh.phase_text(3, 3, 8, None, True) == "decode step 2 (token 3 of 8) · playing"
    assert vh.phase_text(3, 3, 8, "eos", False) == "finished: EOS"
    head = vh.model_header_html("tiny", 1234, "float32", tiny_loaded.config, 4936)
    assert "tiny" in head and f"{tiny_loaded.config.num_attention_heads} / {tiny_loaded.config.num_key_value_heads}" in head

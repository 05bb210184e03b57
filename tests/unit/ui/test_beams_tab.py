"""The Beams tab's handlers without a browser, over a tiny model: Run, then the "tree after step" slider
redraws the tree at each step and refuses, by name, a value outside the run's steps."""

from __future__ import annotations

import html


from tests.support.lab_context import make_ctx
from tests.support.viz_records import tiny_loaded  # noqa: F401

# the settings panel's decoding boxes: penalties off, 3 beams, length penalty 1
DECODING = ("1", "0", "0", "0", "", "", "0", "", "none", "", "3", "1")


def test_the_step_slider_redraws_the_tree_and_refuses_a_bad_step(tiny_loaded):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    sid = ctx.store.new_id()
    beams = ctx.panels["beams"]
    assert "press Run beam search first" in html.unescape(beams.show_step(sid, 1)["status"])
    out = beams.search(sid, "Hello there", False, "", 4, *DECODING)
    assert 'data-error="0"' in out["status"], out["status"]
    n = len(ctx.store.get(sid).labs["beams"].record.steps)
    shown = beams.show_step(sid, 1)
    status, tree = shown["status"], shown["tree"]
    assert 'data-error="0"' in status and len(tree.data[2].x) < len(out["tree"].data[2].x)  # fewer nodes after step 1
    for bad, message in [(None, "tree after step is empty"), ("", "tree after step is empty"),
                         ("abc", "tree after step must be a whole number from 1 to"), (-5, f"from 1 to {n}, got -5"),
                         (float("inf"), "tree after step must be"), (n + 1, f"got {n + 1}")]:
        shown = beams.show_step(sid, bad)
        status = shown["status"]
        assert 'data-error="1"' in status and message in html.unescape(status), (bad, status)
        assert "tree" not in shown  # the tree stays as it is

"""Prefix caching and chunked prefill compared on one workload (`inspector.serving.prefix_compare`), its
table and figure, and the Serving lab's Compare handler, over tiny models: four configurations with the same
outputs (each equal to its solo greedy run), hits and shared blocks only with prefix caching, fewer prompt
tokens computed by exactly the reused ones, more steps with small chunks, and bad input as one line."""

from __future__ import annotations

import html

import pytest
import torch

from inspector.serving.prefix_compare import SYSTEM, compare
from inspector.viz import prefix_cache as vp
from tests.support.lab_context import make_ctx
from tests.support.serving import SYSTEM as SYSTEM_IDS
from tests.support.serving import solo_greedy, tiny_loaded  # noqa: F401 (fixture)
from tests.support.viz_records import tiny_loaded as tiny_chat_loaded  # noqa: F401 (fixture)

PROMPTS = [SYSTEM_IDS + tail for tail in ([100, 101], [102, 103, 104], [105], [106, 107, 108, 109, 110])]


def test_four_configurations_on_a_shared_prefix(tiny_loaded):  # noqa: F811
    runs = compare(tiny_loaded.model, tiny_loaded.config, torch.float32, PROMPTS, 5, chunk=3, block_size=4,
                   max_batch=2)
    plain, prefix, chunked, both = runs
    assert [r.label for r in runs] == ["plain", "prefix caching", "chunked prefill 3", "both (chunk 3)"]
    assert all(r.same_outputs for r in runs) and all(len(r.ttft_ms) == len(PROMPTS) for r in runs)
    assert plain.hit_rate == chunked.hit_rate == 0 and plain.blocks_shared == chunked.blocks_shared == 0
    assert prefix.hit_rate > 0 and prefix.blocks_shared > 0 and both.hit_rate > 0
    fed = sum(len(p) for p in PROMPTS)
    assert plain.prompt_tokens_computed == chunked.prompt_tokens_computed == fed
    # each later request finds the system prompt's 3 full blocks of 4 cached: 12 tokens it does not compute
    assert fed - prefix.prompt_tokens_computed == 12 * (len(PROMPTS) - 1)
    # in chunks of 3 the first prompt is still being prefilled when the second arrives: fewer blocks are ready
    assert 0 < fed - both.prompt_tokens_computed <= 12 * (len(PROMPTS) - 1)
    assert chunked.steps > plain.steps  # a 14-token prompt in chunks of 3 takes 5 steps to prefill


def test_outputs_equal_solo_runs(tiny_loaded):  # noqa: F811
    from inspector.serving.prefix_compare import serve

    solo = [solo_greedy(tiny_loaded.model, p, 4) for p in PROMPTS]
    for chunk in (None, 5):
        _, outputs = serve(tiny_loaded.model, tiny_loaded.config, torch.float32, PROMPTS, 4, prefix_caching=True,
                           chunk=chunk, block_size=4, max_batch=3)
        assert outputs == solo


def test_table_and_figure(tiny_loaded):  # noqa: F811
    runs = compare(tiny_loaded.model, tiny_loaded.config, torch.float32, PROMPTS[:2], 3, chunk=4, block_size=4)
    table = vp.table_html(runs)
    assert table.count("<tr data-config=") == 4 and table.count("same as plain") == 4
    fig = vp.ttft_tpot_figure(runs)
    assert [t.name for t in fig.data] == ["TTFT mean (ms)", "TPOT mean (ms)"] and len(fig.data[0].y) == 4


def status(out) -> str:
    return html.unescape(out["status"])


def test_compare_handler(tiny_chat_loaded):  # noqa: F811
    ctx = make_ctx(tiny_chat_loaded)
    out = ctx.panels["serving"].compare.run_compare("s1", 3, 2, 16, "You are the help desk of a public library. Be brief.")
    assert 'data-error="0"' in status(out) and "3 requests of" in status(out) and "served 4 ways" in status(out)
    assert out["table"].count("<tr data-config=") == 4 and len(out["figure"].data) == 2


@pytest.mark.parametrize("args,message", [
    ((1, 2, 16, SYSTEM), "requests must be a whole number from 2 to 12"),
    (("x", 2, 16, SYSTEM), "requests must be a whole number"),
    ((3, 0, 16, SYSTEM), "max new tokens must be > 0"),
    ((3, 2, 0, SYSTEM), "prefill chunk must be a whole number from 1 to 100000, got 0"),
    ((3, 2, None, SYSTEM), "prefill chunk is empty"),
    ((3, 2, 16, "  "), "the shared system prompt is empty"),
    ((3, 2, 16, SYSTEM), "the model's context window is 256 tokens"),  # the tiny model's context
])
def test_bad_input_is_one_line(tiny_chat_loaded, args, message):  # noqa: F811
    out = make_ctx(tiny_chat_loaded).panels["serving"].compare.run_compare("s1", *args)
    assert 'data-error="1"' in status(out) and message in status(out), status(out)

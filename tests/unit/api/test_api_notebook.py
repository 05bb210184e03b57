"""docs/inspector_tour.ipynb runs top to bottom in a fresh kernel on the default model: no cell errors, and
every cell that draws a view shows a plotly figure. The notebook is committed without outputs (they
depend on the run: timings, the sampled text); this test is what executes it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOK = ROOT / "docs" / "inspector_tour.ipynb"
PLOTLY = "application/vnd.plotly.v1+json"


def test_committed_without_outputs():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.slow
def test_tour_runs_and_draws_every_figure():
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel starts in the repository root, so it imports this checkout's `inspector`
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors[0]["evalue"] if errors else ""
    drawing = [c for c in code if "figure(" in c.source]
    assert len(drawing) >= 7  # timing, residual, attention x2, KV cache, sampling, attribution
    for c in drawing:
        shown = [o for o in c.outputs if o.output_type in ("execute_result", "display_data") and PLOTLY in o.data]
        assert shown, f"no figure from: {c.source.splitlines()[0]}"
    text = "".join(o.get("text", "") for c in code for o in c.outputs if o.output_type == "stream")
    assert "True" in text and "bytes per token: True" in text  # the KV formula matched the cache's bytes
    check_research_cells(text)


def check_research_cells(text: str) -> None:
    """The numbers the tour's last cells print (ids in, the cache, a write hook, an induction experiment) equal
    `transformers`' on the same weights (eager attention; its forward hooks play the hooks' part)."""
    import re

    import numpy as np
    import torch
    import transformers

    import inspector

    loaded = inspector.load().loaded
    tok = loaded.tokenizer
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(loaded.weights_path), dtype=torch.float32,
                                                           attn_implementation="eager").eval()

    def forward(ids, hooks=()):
        outs = []
        handles = [hf.model.layers[-1].register_forward_hook(
            lambda m, a, o: outs.append((o[0] if isinstance(o, tuple) else o)[0]))]
        handles += [h() for h in hooks]
        try:
            with torch.no_grad():
                out = hf(torch.tensor([list(ids)]), output_attentions=True)
        finally:
            for h in handles:
                h.remove()
        return out, outs[0]

    def number(pattern: str) -> list[float]:
        found = re.search(pattern, text)
        assert found, pattern
        return [float(g) for g in found.groups()]

    ids = tok.encode("The Eiffel Tower is in the city of")
    paris = tok.encode(" Paris")[0]
    out, last = forward(ids)
    (norm,) = number(r"residual norm ([\d.]+)")
    assert abs(norm - float(last[-1].norm())) <= 1e-3 * norm
    plain, doubled = number(r"' Paris' logit ([-\d.]+); with layer 10's MLP doubled ([-\d.]+)")
    assert abs(plain - float(out.logits[0, -1, paris])) < 1e-3
    double = lambda: hf.model.layers[10].mlp.register_forward_hook(lambda m, a, o: 2 * o)  # noqa: E731
    out2, _ = forward(ids, [double])
    assert abs(doubled - float(out2.logits[0, -1, paris])) < 1e-3 and abs(doubled - plain) > 1e-3

    seq = np.random.default_rng(0).integers(1000, 20000, 20)
    ids = np.concatenate([seq, seq]).tolist()
    n = len(seq)
    out, _ = forward(ids)
    scores = np.stack([a[0][:, list(range(n, 2 * n)), [i - n + 1 for i in range(n, 2 * n)]].mean(-1).numpy()
                       for a in out.attentions])  # (layers, heads): each head's mean over the repeat
    layer, head, score = number(r"strongest induction head (\d+)\.(\d+): score ([\d.]+)")
    assert (int(layer), int(head)) == np.unravel_index(scores.argmax(), scores.shape)
    assert abs(score - scores.max()) < 1e-4

    def repeat_loss(logits):
        logp = torch.log_softmax(logits[0], -1)
        return -float(torch.stack([logp[i, ids[i + 1]] for i in range(n, 2 * n - 1)]).mean())

    d = hf.config.head_dim if getattr(hf.config, "head_dim", None) else hf.config.hidden_size // hf.config.num_attention_heads

    def head_off(module, args):
        x = args[0].clone()
        x[..., int(head) * d:(int(head) + 1) * d] = 0
        return (x,)

    off = lambda: hf.model.layers[int(layer)].self_attn.o_proj.register_forward_pre_hook(head_off)  # noqa: E731
    out_off, _ = forward(ids, [off])
    loss, loss_off = number(r"loss on the repeat: ([\d.]+) nats; with head \d+\.\d+ off: ([\d.]+)")
    assert abs(loss - repeat_loss(out.logits)) < 1e-3 and abs(loss_off - repeat_loss(out_off.logits)) < 1e-3

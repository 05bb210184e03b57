"""The guided tour: one step per stage of the pipeline strip, in the order the data flows, with this run's numbers.

`tour_html(facts, rec, new_piece)` is a pure function of the model's numbers (`TourFacts`, built from its
config by the UI) and the newest `ForwardRecord` (None before the first prefill). It returns one HTML string:
a `<section class="ii-tour-step">` per step, each 2-4 plain sentences; the page's script shows one at a time.
A step that explains a view names that view's tab (`data-tab`, its label; `data-tab-id`, its elem_id: both the
registry of views', `inspector.viz.registry`), so the
"?" beside a view opens the tour at its step and the tour can open the view.

The KV-cache step's bytes are `facts.kv_bytes_per_token × cached positions`: the per-token bytes are the one
formula's (`inspector.engine.kv_cache.kv_bytes`), so they equal the KV view's formula line. The weights step
says why a decode step at batch 1 is memory-bound: its weight products' FLOPs per byte (2 per weight read)
against the ridge point, this machine's when `facts.ridge` is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inspector.session.records import ForwardRecord
from inspector.units import format_bytes
from inspector.viz.common import esc, show_piece
from inspector.viz import registry as views
from inspector.viz.glossary import glossary_html
from inspector.viz.registry import SLIDING

# (key, title, the view it shows: a key of the registry of views, or "") in the order of the pipeline strip
# (inspector/viz/pipeline.py), then the two views that are not a stage of it, then the shortcuts and glossary.
# A registered view with tour text of its own gets a step before the last (`steps`).
STEPS: tuple[tuple[str, str, str], ...] = (
    ("text", "Text in", ""),
    ("tokens", "Tokens", ""),
    ("embed", "Embeddings: the residual stream begins", "residual"),
    ("layers", "Layers: attention, then an MLP", "attention"),
    ("kv", "The KV cache", "kv"),
    ("norm", "Final norm", "residual"),
    ("logits", "Logits", "sampling"),
    ("sampling", "Sampling", "sampling"),
    ("token", "The new token", "sampling"),
    ("piece", "Back to text, and again", ""),
    ("weights", "The weights", "inventory"),
    ("timing", "Where the time goes", "timing"),
    ("keys", "Keys and words", ""),
)


def steps() -> list[tuple[str, str, str]]:
    """Every step: `STEPS`, with a step for each registered view that has tour text before the last one."""
    own = [(f"{v.key}_view", v.title, v.key) for v in views.tabs() if v.tour]
    return [*STEPS[:-1], *own, STEPS[-1]]


def tab_of(view_key: str) -> tuple[str, str]:
    """(tab label, tab elem_id) of a registered view ("", "" for none)."""
    v = views.VIEWS.get(view_key) if view_key else None
    return (v.title, v.tab_id) if v is not None else ("", "")


def view_steps() -> dict[str, str]:
    """The step a view's "?" opens, by tab elem_id: the first step that names the view's tab."""
    return {tab_of(view)[1]: key for key, _t, view in reversed(steps()) if view}


VIEW_STEP = view_steps()

SHORTCUTS = (("→", "one decode step (Step)"), ("space", "Play / Pause"),
             ("Enter on a pipeline stage", "open its view"))


@dataclass(frozen=True)
class TourFacts:
    """The model numbers the tour names (from its config and dtype); the optional ones add a sentence when known."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    bytes_per_element: int
    kv_bytes_per_token: int  # kv_bytes(config, 1, bytes_per_element): every layer's K and V of one position
    dtype: str = "float32"
    precision_note: str = ""  # where the weights came from, when that changes what "fp32" means
    weight_bytes: int = 0  # the weights' bytes in memory (the Tensor inventory's total); 0: not given
    ridge: float | None = None  # this machine's ridge point, FLOP per byte (the Serving lab's Peaks.ridge)
    window: int | None = None  # a sliding-window layer's window, when the model has such layers
    local_layers: int = 0  # how many of its layers are sliding-window (local) ones
    num_experts: int = 0  # a mixture of experts' experts per layer (0: a dense model)
    experts_per_token: int = 0  # k: the experts each token is routed to in each layer

    @classmethod
    def from_config(cls, cfg: Any, bytes_per_element: int, kv_bytes_per_token: int, dtype: str = "float32",
                    precision_note: str = "", weight_bytes: int = 0, ridge: float | None = None) -> TourFacts:
        """Every number from a model config (a `ModelConfig`, read by attribute), so none is typed in by hand."""
        local = sum(cfg.layer_type(i) == SLIDING for i in range(cfg.num_hidden_layers))
        moe = bool(getattr(cfg, "moe", False))
        return cls(cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
                   cfg.head_dim, cfg.vocab_size, bytes_per_element, kv_bytes_per_token, dtype, precision_note,
                   weight_bytes, ridge, cfg.sliding_window if local else None, local,
                   cfg.num_experts if moe else 0, cfg.num_experts_per_tok if moe else 0)


def kv_total(facts: TourFacts, positions: int) -> int:
    """The KV cache's bytes for `positions` cached positions (what the KV view's formula line shows)."""
    return facts.kv_bytes_per_token * positions


def _kv_text(facts: TourFacts, positions: int | None) -> str:
    f = facts
    share = f.num_heads // max(1, f.num_kv_heads)
    factors = (f"{f.num_layers} layers × 2 (K and V) × {f.num_kv_heads} KV heads × {f.head_dim} numbers × "
               f"{f.bytes_per_element} bytes")
    why = (f"because {f.num_heads} query heads share {f.num_kv_heads} KV heads (grouped-query attention), the cache is "
           f"{share}× smaller than with one KV head per query head" if share > 1
           else "every query head has its own KV head here")
    if positions is None:
        return (f"Every layer keeps the key and value of each position it has seen, so a later token computes K "
                f"and V for itself only. One token costs {factors} = {f.kv_bytes_per_token:,} bytes; {why}. "
                f"Press Prefill to fill it.")
    total = kv_total(f, positions)
    return (f'The KV cache now holds <b id="tour-kv-tokens" data-tokens="{positions}">{positions} tokens</b> × '
            f'{factors} = <b id="tour-kv-bytes" data-bytes="{total}">{total:,} bytes ({format_bytes(total)})</b>, '
            f"{why}. Each decode step adds one position: {f.kv_bytes_per_token:,} bytes.")


def intensity(bytes_per_element: int, tokens: int = 1) -> float:
    """FLOPs per byte of weights read by the weight products of a forward over `tokens` new tokens: each weight
    read once does one multiply-add (2 FLOPs) per token."""
    return 2 * tokens / bytes_per_element


def _weights_text(f: TourFacts, prefill_tokens: int | None) -> str:
    """Why a decode step at batch 1 waits on memory: its FLOPs per byte against the ridge point (roofline)."""
    held = f" ({format_bytes(f.weight_bytes)} here)" if f.weight_bytes else ""
    decode = intensity(f.bytes_per_element)
    if f.num_experts:  # a mixture of experts reads only the experts its tokens were routed to
        first = (f"A forward reads once each weight it uses, held as {esc(f.dtype)}, {f.bytes_per_element} bytes a "
                 f"number: the shared weights (attention, routers, norms, the LM head; of an untied embedding only "
                 f"its tokens' rows) and, in each layer, only the experts its tokens were routed to, "
                 f"{f.experts_per_token} of the {f.num_experts} for a decode step's one token (memory holds them "
                 f"all{held}).")
    else:
        first = (f"A forward reads every weight once{held}, held as {esc(f.dtype)}, {f.bytes_per_element} bytes a "
                 f"number, whether it feeds one token or a whole prompt (of an untied embedding, only its tokens' "
                 f"rows).")
    if f.ridge is not None:  # this machine's, measured
        side = "below" if decode < f.ridge else "above"
        bound = "memory" if decode < f.ridge else "compute"
        where = (f"{side} this machine's ridge point of {f.ridge:.1f} FLOP/byte (peak FLOP/s ÷ memory bandwidth, "
                 f"as the Serving lab measured them), so at batch 1 decode is {bound}-bound")
    else:
        where = ("below the ridge point (peak FLOP/s ÷ memory bandwidth) of current CPUs and GPUs for 16- and "
                 "32-bit weights, so at batch 1 decode waits on memory, not on arithmetic" if decode <= 1 else
                 "and decode at batch 1 waits on memory wherever that is below the ridge point (peak FLOP/s ÷ "
                 "memory bandwidth)")
    second = f"A decode step's weight products do 2 FLOPs per weight read, {decode:g} FLOP per byte: {where}."
    t = prefill_tokens
    of, products = ((" of the shared weights (an expert's weights fewer: 2 FLOPs each per token routed to that "
                     "expert)", "its products with the shared weights") if f.num_experts
                    else (" of weights", "its weight products"))
    if t and f.ridge is not None:
        bound = "compute" if intensity(f.bytes_per_element, t) >= f.ridge else "memory"
        third = (f"This prefill's {t} tokens did {intensity(f.bytes_per_element, t):g} FLOP per byte{of}, so "
                 f"{products} were {bound}-bound here; a longer prompt does more per byte.")
    elif t:
        third = (f"This prefill's {t} tokens did {intensity(f.bytes_per_element, t):g} FLOP per byte{of}: a "
                 "long enough prompt makes the prefill compute-bound.")
    else:
        third = ("A prefill of T tokens reuses each shared weight T times (2T FLOPs per weight; an expert's weights "
                 "only for the tokens routed to it): it can be compute-bound." if f.num_experts else
                 "A prefill of T tokens reuses each weight T times (2T FLOPs per weight): it can be compute-bound.")
    text = f"{first} {second} {third}"
    return f"{text} {esc(f.precision_note)}" if f.precision_note else text


def _timing_text(f: TourFacts, rec: ForwardRecord, kv_len: int) -> str:
    """This forward's times, what TTFT / TPOT add up to here, and why a decode step grows with the cache."""
    clock = "Times are wall clock of the forward as the page ran it, recorder on (no logit lens, no drawing)."
    if rec.kind == "prefill":
        ttft = rec.tokenize_ms + rec.forward_ms + rec.sample_ms
        return (f"Time to first token (TTFT) here: tokenizing {rec.tokenize_ms:.1f} ms + this forward "
                f"{rec.forward_ms:.0f} ms + the draw {rec.sample_ms:.1f} ms = {ttft:.0f} ms. Each decode step then "
                f"feeds one token; its forward + draw is the time per output token (TPOT). {clock}")
    grow = (f"; at {kv_len} positions the cache is {kv_total(f, kv_len) / f.weight_bytes:.1%} of the bytes of "
            f"{'every weight held' if f.num_experts else 'the weights'}" if f.weight_bytes else "")
    weights = (f"the shared weights and {f.experts_per_token} experts per layer (which ones, its token's router "
               "decides)" if f.num_experts else "the same weights")
    return (f"This decode step's forward took {rec.forward_ms:.0f} ms and the draw {rec.sample_ms:.1f} ms: "
            f"{rec.forward_ms + rec.sample_ms:.0f} ms, its time per output token (TPOT). Each step reads {weights} "
            f"plus every cached K and V ({f.kv_bytes_per_token:,} bytes per position{grow}), so TPOT grows "
            f"with the context. {clock}")


def _texts(facts: TourFacts, rec: ForwardRecord | None, new_piece: str) -> dict[str, str]:
    """Each step's sentences (HTML): with this run's numbers once there is a record."""
    f = facts
    glossary = glossary_html()
    keys = "".join(f"<li><kbd>{esc(k)}</kbd> {esc(what)}</li>" for k, what in SHORTCUTS)
    keys_html = (f'<ul id="tour-shortcuts" class="ii-tour-keys">{keys}</ul><p>The keys act when no text box has '
                 f"the focus. The words the views use:</p>{glossary}")
    if rec is None:
        n_txt = "Your prompt"
        return {
            "text": f"{n_txt} goes in as plain text. With the chat template on, it is wrapped in the template's "
                    "markers (and a system prompt, when you set one or the template has a default) first, so the "
                    "model sees a conversation.",
            "tokens": f"The tokenizer cuts the text into tokens, each an id below {f.vocab_size:,}. The chips on the "
                      "left show them after Prefill; click one to select its position.",
            "embed": f"Each token id picks one row of the embedding matrix: {f.hidden_size} numbers per token. "
                     "That vector per position is the residual stream every layer reads and adds to.",
            "layers": _layers_text(f),
            "kv": _kv_text(f, None),
            "norm": "After the last layer, the newest position's residual is RMS-normalised: divided by its "
                    "root-mean-square, then scaled by learned weights.",
            "logits": f"The LM head turns that vector into {f.vocab_size:,} logits, one score per vocabulary entry.",
            "sampling": "Any penalties or constraint you set edit the logits first; then temperature divides them, "
                        "top-k, top-p and min-p cut the tail, and one token is drawn from the softmax of what is "
                        "left (temperature 0: the top one, no draw).",
            "token": "The drawn token is the step's output. Step (→) feeds it back for the next one.",
            "piece": "The token's bytes are appended to the text. Then the loop repeats: one token in, one forward "
                     "reading the KV cache, one token out.",
            "weights": _weights_text(f, None),
            "timing": "The prefill handles all prompt tokens in one forward: with tokenizing and the first draw, "
                      "that is the time to first token (TTFT). Each decode step handles one token: its forward and "
                      "draw are the time per output token (TPOT).",
            "keys": keys_html,
        }
    n, end = rec.n_new, rec.start_pos + rec.n_new
    prefill = rec.kind == "prefill"
    kv_len = rec.kv[0].length if rec.kv else end
    norm = float(rec.resid_post[-1, -1]) if rec.resid_post.size else 0.0
    s = rec.sample
    what = (f"This prefill fed all {n} prompt tokens (positions 0–{end - 1}) in one forward" if prefill
            else f"Decode step {rec.step} fed one token, the one sampled before, at position {rec.start_pos}")
    texts = {
        "text": ("Your prompt went in as plain text" + (f", tokenized in {rec.tokenize_ms:.1f} ms" if rec.tokenize_ms
                                                        else "") + ". With the chat template on, it is wrapped in the "
                 "template's markers (and a system prompt, when you set one or the template has a default) first, "
                 "so the model sees a conversation." if prefill else
                 "In a decode step no new text goes in. The input is the token the step before produced, fed back "
                 "as one id."),
        "tokens": f"{what}. Every token is an id below {f.vocab_size:,}; the chips on the left show them (click one "
                  "to select its position).",
        "embed": f"Each token id picks one row of the embedding matrix: {n} × {f.hidden_size} numbers this "
                 "forward. That vector per position is the residual stream every layer reads and adds to.",
        "layers": _layers_text(f),
        "kv": _kv_text(f, kv_len),
        "norm": f"After the last layer, the newest position's residual has length ‖x‖ = {norm:.0f}, so its "
                f"root-mean-square is ‖x‖/√{f.hidden_size} = {norm / f.hidden_size ** 0.5:.2f}; RMSNorm divides "
                "it by that (with a small ε added under the root) and multiplies each number by a learned weight "
                "(Gemma: by 1 + that weight).",
        "logits": f"The LM head turns that vector into {f.vocab_size:,} logits, one score per vocabulary entry. "
                  "Softmax makes them probabilities that add up to 1.",
        "timing": _timing_text(f, rec, kv_len),
        "weights": _weights_text(f, n if prefill else None),
        "keys": keys_html,
    }
    if s is None:
        texts.update(sampling="No token was drawn in this forward.", token="No token was drawn in this forward.",
                     piece="Nothing was added to the text.")
        return texts
    chosen = next((c for c in s.candidates if c.id == s.token_id), None)
    t = s.params.temperature
    how = ("Temperature 0 means greedy: the highest logit (after any penalties or constraint) wins, no draw." if t == 0
           else f"After any penalties or constraint, temperature {t:g} divides the logits, top-k / top-p / min-p cut "
                f"the tail, and {s.survivors:,} tokens survive for the draw.")
    if chosen is None:
        p = ""
    elif t == 0:
        p = f", to which the model gave probability {chosen.prob_raw:.2f}"
    else:
        p = f", drawn with probability {chosen.prob_final:.2f} (the model's own: {chosen.prob_raw:.2f})"
    texts.update(
        sampling=f"Softmax turns the logits into probabilities. {how}",
        token=f"This step chose “{esc(show_piece(s.token_piece, 20))}” (id {s.token_id}){p}. Step (→) feeds it back "
              "for the next one; the Sampling view can force another candidate instead.",
        piece=(f"The token added “{esc(show_piece(new_piece, 20))}” to the text." if new_piece else
               "The token holds part of a character: the text waits for the next bytes.")
              + " Then the loop repeats: one token in, one forward reading the KV cache, one token out.",
    )
    return texts


def _layers_text(f: TourFacts) -> str:
    share = f.num_heads // max(1, f.num_kv_heads)
    local = (f" {f.local_layers} of the {f.num_layers} layers {'is' if f.local_layers == 1 else 'are'} local: each "
             f"position there sees only the newest {f.window:,} positions." if f.local_layers and f.window else "")
    mlp = (f"a mixture of {f.num_experts} expert MLPs, of which a router picks {f.experts_per_token} per token"
           if f.num_experts else "an MLP")
    return (f"Each of the {f.num_layers} layers runs attention and then {mlp}, adding both outputs to the residual "
            f"stream. Attention has {f.num_heads} query heads reading {f.num_kv_heads} key/value heads "
            f"({f'{share} query heads per KV head' if share > 1 else 'one per KV head'}): each position attends to "
            f"itself and the positions before it.{local}")


def tour_html(facts: TourFacts, rec: ForwardRecord | None, new_piece: str = "") -> str:
    """Every tour step as a section (the page's script shows one); numbers of `rec` when given."""
    texts = _texts(facts, rec, new_piece)
    listed = steps()
    total = len(listed)
    sections = []
    for i, (key, title, view_key) in enumerate(listed):
        tab, tab_id = tab_of(view_key)
        text = texts[key] if key in texts else esc(views.VIEWS[view_key].tour)
        view = (f' <a class="ii-tour-open" href="#" data-tab="{esc(tab)}">show the {esc(tab)} view</a>' if tab
                else "")
        sections.append(
            f'<section class="ii-tour-step" data-stage="{key}" data-i="{i}" data-tab="{esc(tab)}" '
            f'data-tab-id="{tab_id}"><h4><small>{i + 1} / {total}</small> {esc(title)}</h4>'
            f'<div class="ii-tour-text">{text}</div>{view}</section>')
    kind = rec.kind if rec is not None else "idle"
    return f'<div id="tour-steps" data-kind="{kind}" data-count="{total}">{"".join(sections)}</div>'

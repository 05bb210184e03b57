"""`inspector info [--model SOURCE] [--json]`: what model is loaded, its architecture and every tensor.

`--json` prints one object, a stable contract for scripts: name, source, source_format, source_bytes (the
source weight files' size on disk), dtype, config (HF config.json keys), params (every weight tensor's numbers, a
tied LM head counted once), bytes (those tensors' bytes in memory), weights_path, tied_to (the embedding a
tied LM head reuses, else null), groups (per group: tensors, params, bytes), tensors (each with name, shape,
dtype, params, bytes, group, layer; a one-expert tensor also its `expert` index; and precision when
quantized) and params_active (the parameters one token's forward uses: all of a dense model's; a mixture of
experts' shared weights plus k of its E experts per layer). Sizes in the text output are in binary units
(1 MiB = 2^20 bytes).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from inspector.commands.flags import json_flags, model_flags
from inspector.units import format_bytes

MOE_NOTE = ("Mixtures of experts (Mixtral, Qwen3-MoE, OLMoE, Granite-MoE) show their experts per layer and the "
            "parameters one token uses. The smallest real one, ibm-granite/granite-3.0-1b-a400m-instruct (1.3 B "
            "parameters in total, 0.4 B active per token, 2.5 GiB of weights in bf16), loads from a directory or "
            "the Hub like any family and is small enough for a laptop CPU in bf16 (`--model ... --dtype bf16` in "
            "`inspector run`).")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("info", help="show the model: architecture, parameters, tensor inventory",
                                   description=__doc__.split("\n\n")[0],
                                   epilog=__doc__.split("\n\n", 1)[1] + "\n\n" + MOE_NOTE,
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   parents=[model_flags(), json_flags()])
    parser.set_defaults(func=main)


def info_dict(loaded: Any, inv: Any) -> dict[str, Any]:
    """The `--json` object."""
    return {
        "name": loaded.name,
        "source": loaded.source,
        "source_format": loaded.source_format,
        "source_bytes": loaded.source_bytes,
        "dtype": str(loaded.dtype).removeprefix("torch."),
        "config": loaded.config.to_hf(),
        "weights_path": str(loaded.weights_path),
        **inv.to_json(),
        "params_active": active_params(loaded.config),
    }


def active_params(config: Any) -> int:
    """Parameters one token's forward uses (`inspector.serving.experts.count_active_params`)."""
    from inspector.serving.experts import count_active_params

    return count_active_params(config)


def _table(header: list[str], rows: list[list[Any]], right: set[int]) -> str:
    cells = [header] + [[f"{c:,}" if isinstance(c, int) else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def family_line(c: Any) -> str:
    """What the model's family adds to a Llama block, and its local/global layers ("" for Llama, Qwen2)."""
    from inspector.engine.arch import FAMILY_FEATURES
    from inspector.engine.config import SLIDING

    parts = list(FAMILY_FEATURES.get(c.model_type, ()))
    sliding = sum(c.layer_type(i) == SLIDING for i in range(c.num_hidden_layers))
    if sliding:
        parts.append(f"window {c.sliding_window:,} on {sliding} of {c.num_hidden_layers} layers"
                     + (f" (their rope theta {c.rope_local_theta:g})" if c.rope_local_theta else ""))
    return "; ".join(parts)


def human(loaded: Any, inv: Any) -> str:
    c = loaded.config
    arch = (f"{c.model_type}: {c.num_hidden_layers} layers, hidden {c.hidden_size}, FFN {c.intermediate_size}, "
            f"{c.num_attention_heads} heads, {c.num_key_value_heads} KV heads "
            f"({f'GQA {c.n_rep}:1' if c.n_rep > 1 else 'MHA'}), head_dim {c.head_dim}, "
            f"vocab {c.vocab_size}, context {c.max_position_embeddings}, rope theta {c.rope_theta:g}"
            + (f", rope scaling {c.rope_scaling['rope_type']}" if c.rope_scaling else "")
            + (", tied embeddings" if c.tie_word_embeddings else ", separate LM head"))
    dtype = str(loaded.dtype).removeprefix("torch.")
    out = [
        f"{loaded.name}",
        f"  source:       {loaded.source} ({loaded.source_format}, {format_bytes(loaded.source_bytes)} on disk)",
        f"  weights:      {loaded.weights_path}",
        f"  architecture: {arch}",
        *([f"  family adds:  {family}"] if (family := family_line(c)) else []),
        f"  parameters:   {inv.params:,} ({format_bytes(inv.bytes)} in {dtype}"
        + ("; the tied LM head is the embedding, counted once)" if inv.tied_to else ")"),
        *([f"  experts:      {c.num_experts} per layer, {c.num_experts_per_tok} per token: one token uses "
           f"{active_params(c):,} parameters ({active_params(c) / inv.params:.0%}); memory holds them all"]
          if c.moe else []),
        "",
        _table(["group", "tensors", "params", "bytes"],
               [[g.group, g.tensors, g.params, format_bytes(g.bytes) if g.bytes else "0 (tied)" if g.group == "lm_head" else "0"]
                for g in inv.groups] + [["total", len(inv.entries), inv.params, format_bytes(inv.bytes)]],
               right={1, 2, 3}),
        "",
        _table(["tensor", "shape", "dtype", "params", "bytes", "group"], inv.rows(), right={3, 4}),
    ]
    return "\n".join(out)


def main(args: argparse.Namespace) -> int:
    from inspector.api.model import load

    model = load(args.model, device=args.device)
    inv = model.inventory()  # `inspector.models.inventory.Inventory`
    print(json.dumps(info_dict(model.loaded, inv), indent=2) if args.json else human(model.loaded, inv))
    return 0

"""`inspector memory --config NAME|PATH [--context N] [--batch B] [--dtype D] [--kv-dtype D] [--memory SIZE]`:
weights and KV-cache memory of a model from its config alone (no weights are read).

NAME is a shipped configuration's Hub repo id (case-insensitive; `--list` names them), PATH a local
config.json or HF model directory. `--json` prints one object, a stable contract for scripts: params,
weight_bytes, kv_bytes_per_token, kv_bytes, total_bytes (weights + KV for context × batch), and besides
them config, source, dtype, kv_dtype, context, batch, params_by_group, mha (the same five keys for the
model with full multi-head KV, and fits_requests), attention_heads, kv_heads, tied_embeddings,
memory_bytes and fits_requests (requests of this context that fit after the weights; null without
--memory), max_position_embeddings, sliding_window, kv_bytes_windowed (a cache keeping only the window in
the sliding layers, exact; null without sliding layers), layout_note (the engine family the model is counted as,
when not its own; else null) and published_params (null unless shipped).
Parameters: params_total (every weight held, = params) and params_active (what one token's forward uses: all
of a dense model's; a mixture of experts' shared weights plus k of its E experts per layer), and
published_active_params (null unless shipped and published). `experts` is null for a dense model; for a
mixture of experts: num_experts (E per layer), experts_per_token (k), expert_params (every expert of every
layer: memory holds them all), params_per_expert (one expert of one layer), shared_params, active_weight_bytes
(shared weights plus k experts per layer in the weights' dtype: about what a batch-1 decode step reads, the
whole embedding table counted), batch_expected_experts (distinct experts per layer that `batch` tokens, one
decode step of `batch` requests, go to when routing is uniform: E·(1 − (1 − k/E)^batch)) and
batch_weight_bytes (the shared weights plus that many experts per layer).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from typing import Any

from inspector.commands.flags import json_flags
from inspector.errors import InputError
from inspector.serving import experts as moe
from inspector.serving import memory as mem
from inspector.units import format_bytes
from inspector.validate import Bound

UNITS = {"": 1e9, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


CONTEXT = Bound("context", True, 1)
BATCH = Bound("batch", True, 1)
MEMORY = Bound("memory", False, 0, lo_open=True, note="of bytes with a unit, such as 80GB or 80GiB (no unit: GB)")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("memory", help="memory of a model's weights and KV cache, from its config alone",
                              description=__doc__.split("\n\n")[0], parents=[json_flags()])
    p.add_argument("--config", metavar="NAME|PATH", help="shipped Hub repo id (see --list), config.json or model dir")
    p.add_argument("--list", action="store_true", help="name the shipped configurations and exit")
    p.add_argument("--context", type=CONTEXT.argparse, metavar="N",
                   help=f"tokens per request, {CONTEXT.allowed} (default: the model's max_position_embeddings)")
    p.add_argument("--batch", type=BATCH.argparse, metavar="B", default=1,
                   help=f"requests held at once, {BATCH.allowed} (default 1)")
    p.add_argument("--dtype", metavar="D", help=f"weights: {', '.join(mem.WEIGHT_DTYPES)} "
                                                "(default: the config's torch_dtype, else bf16); int8 and int4 are "
                                                "counted as GGUF's Q8_0 / Q4_0 blocks, one fp16 scale per 32 "
                                                "weights: 8.5 and 4.5 bits a weight (`inspector run --quant` holds "
                                                "int8 with a scale per row, int4 with a scale and minimum per group)")
    p.add_argument("--kv-dtype", metavar="D", help=f"KV cache: {', '.join(mem.KV_DTYPES)} "
                                                   "(default: the weights' float type; bf16 under int8/int4)")
    p.add_argument("--memory", type=size_arg, metavar="SIZE",
                   help="device memory for the fits-in-memory count, e.g. 80GB, 80GiB (a plain number is GB)")
    p.set_defaults(func=main)


def parse_size(text: str) -> int:
    """"80GB" -> 80e9, "80GiB" -> 80 × 2**30, "24" -> 24e9 bytes; InputError naming the range otherwise."""
    m = re.fullmatch(r"\s*(.*?)\s*([a-zA-Z]*)\s*", str(text), flags=re.DOTALL)
    if m is None or m.group(2).lower() not in UNITS:
        raise MEMORY.refuse(text)
    try:
        size = MEMORY.parse(m.group(1)) * UNITS[m.group(2).lower()]
    except InputError:
        raise MEMORY.refuse(text) from None  # the whole text in the message, unit included
    if not 1 <= size < math.inf:  # under one byte, or past the double range once the unit multiplies it
        raise MEMORY.refuse(text)
    return int(size)


def size_arg(text: str) -> int:
    """`parse_size` as an argparse `type=`: a bad size is a usage error."""
    try:
        return parse_size(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def result_dict(rc: mem.ResolvedConfig, context: int, batch: int, dtype: str, kv_dtype: str,
                memory_bytes: int | None) -> dict[str, Any]:
    """The `--json` object."""
    cfg = rc.config
    gqa = mem.estimate(cfg, context, batch, dtype, kv_dtype, memory_bytes)
    mha = mem.estimate(mem.with_full_mha(cfg), context, batch, dtype, kv_dtype, memory_bytes)
    return {
        "config": rc.name, "source": rc.source, "dtype": dtype, "kv_dtype": kv_dtype,
        "context": context, "batch": batch,
        **gqa.to_json(),
        "params_by_group": {g: {"params": p, "bytes": b} for g, (p, b) in mem.param_groups(cfg, dtype).items()},
        "attention_heads": cfg.num_attention_heads, "kv_heads": cfg.num_key_value_heads,
        "tied_embeddings": cfg.tie_word_embeddings,
        "mha": mha.to_json(),
        "memory_bytes": memory_bytes,
        "max_position_embeddings": cfg.max_position_embeddings,
        "sliding_window": rc.sliding_window,
        "kv_bytes_windowed": mem.windowed_kv_bytes(cfg, context, batch, kv_dtype),
        "layout_note": rc.layout_note,
        "published_params": rc.shipped.published_params if rc.shipped else None,
        "params_total": gqa.params, "params_active": moe.count_active_params(cfg),
        "published_active_params": rc.shipped.published_active if rc.shipped else None,
        "experts": experts_dict(cfg, dtype, batch),
    }


def experts_dict(cfg: Any, dtype: str, batch: int) -> dict[str, Any] | None:
    """The `experts` object of `--json` (None for a dense model)."""
    c = moe.expert_costs(cfg, dtype)
    if c is None:
        return None
    return {"num_experts": c.num_experts, "experts_per_token": c.top_k, "expert_params": c.expert_params,
            "params_per_expert": c.params_per_expert, "shared_params": c.shared_params,
            "active_weight_bytes": round(c.step_bytes(1)),
            "batch_expected_experts": moe.expected_experts(c.num_experts, c.top_k, batch),
            "batch_weight_bytes": round(c.step_bytes(batch))}


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def human(rc: mem.ResolvedConfig, out: dict[str, Any]) -> str:
    c, mha = rc.config, out["mha"]
    fb = format_bytes
    memory_label = fb(out["memory_bytes"] or 0)
    if out["memory_bytes"] and out["memory_bytes"] % 2**30 == 0:
        memory_label = f"{out['memory_bytes'] // 2**30:,} GiB ({memory_label})"
    published = f"; published {rc.shipped.published_label}" if rc.shipped else ""
    lines = [
        f"{rc.name}  (config: {rc.source})",
        f"  architecture: {c.num_hidden_layers} layers, hidden {c.hidden_size}, FFN {c.intermediate_size}, "
        f"{c.num_attention_heads} heads, {c.num_key_value_heads} KV heads (GQA {c.n_rep}:1), head_dim {c.head_dim}, "
        f"vocab {c.vocab_size}, " + ("tied embeddings" if c.tie_word_embeddings else "separate LM head"),
        f"  parameters:   {out['params']:,} ({out['params'] / 1e9:.3f} B{published})",
        f"  weights {out['dtype']}, KV cache {out['kv_dtype']}; context {out['context']:,} × batch {out['batch']}",
        "",
        *_table([["group", "params", f"bytes ({out['dtype']})"]]
                + [[g, f"{v['params']:,}", fb(v["bytes"])] for g, v in out["params_by_group"].items()]),
        "",
        *_table([["", f"{'GQA' if c.n_rep > 1 else 'as configured'} ({c.num_key_value_heads} KV heads)",
                  f"MHA ({c.num_attention_heads} KV heads)"],
                 ["parameters", f"{out['params']:,}", f"{mha['params']:,}"],
                 ["weights", fb(out["weight_bytes"]), fb(mha["weight_bytes"])],
                 ["KV per token", f"{out['kv_bytes_per_token']:,} B", f"{mha['kv_bytes_per_token']:,} B"],
                 [f"KV cache ({out['context']:,} × {out['batch']})", fb(out["kv_bytes"]), fb(mha["kv_bytes"])],
                 ["total", fb(out["total_bytes"]), fb(mha["total_bytes"])]]
                + ([[f"requests that fit in {memory_label}", f"{out['fits_requests']:,}",
                     f"{mha['fits_requests']:,}"]] if out["memory_bytes"] is not None else [])),
    ]
    if out["memory_bytes"] is not None and out["weight_bytes"] > out["memory_bytes"]:
        lines.append(f"  (the weights alone exceed {memory_label})")
    if out["context"] > c.max_position_embeddings:
        lines.append(f"  note: context {out['context']:,} is past the model's max_position_embeddings "
                     f"{c.max_position_embeddings:,}")
    if out["layout_note"]:
        lines.append(f"  note: {out['layout_note']}")
    if out["experts"] is not None:
        lines += experts_lines(out)
    if out["kv_bytes_windowed"] is not None:
        w, kinds = out["sliding_window"], [c.layer_type(i) for i in range(c.num_hidden_layers)]
        n_local = kinds.count("sliding_attention")
        lines.append(f"  note: sliding_window {w:,} in {n_local} of {len(kinds)} layers: a cache keeping only the window "
                     f"there holds {fb(out['kv_bytes_windowed'])} for {out['context']:,} × {out['batch']}; counted "
                     f"above is a full cache, as the engine's")
    return "\n".join(lines)


def experts_lines(out: dict[str, Any]) -> list[str]:
    """What a mixture of experts holds against what its steps read (human output)."""
    e, fb = out["experts"], format_bytes
    share = out["params_active"] / out["params_total"]
    return [
        "",
        f"  mixture of experts: {e['num_experts']} experts per layer, {e['experts_per_token']} per token",
        f"    memory holds every expert: {out['params_total']:,} parameters, "
        f"{fb(out['weight_bytes'])} in {out['dtype']}",
        f"    one token uses {out['params_active']:,} ({share:.0%}): a batch-1 decode step reads about "
        f"{fb(e['active_weight_bytes'])} of weights",
        f"    a step over {out['batch']} tokens reads the union of their experts: "
        f"{e['batch_expected_experts']:.1f} of {e['num_experts']} per layer expected if routing were uniform, "
        f"about {fb(e['batch_weight_bytes'])}",
    ]


def list_dicts() -> list[dict[str, Any]]:
    """The `--list --json` rows: each shipped configuration with its counts and sources."""
    rows = []
    for s in mem.shipped_configs().values():
        cfg = mem.config_from_hf(s.config, s.repo_id)
        rows.append({"repo_id": s.repo_id, "params": mem.count_params(cfg),
                     "params_active": moe.count_active_params(cfg),
                     "published_params": s.published_params, "published_active_params": s.published_active,
                     "published_label": s.published_label,
                     "bf16_weight_bytes": mem.weight_bytes(cfg, "bf16"),
                     "bf16_kv_bytes_per_token": mem.kv_bytes_per_token(cfg, "bf16"),
                     "config_sources": list(s.config_sources), "published_source": s.published_source})
    return rows


def human_list(rows: list[dict[str, Any]]) -> str:
    return "\n".join(_table([["config", "params", "active per token", "published", "bf16 weights", "KV/token (bf16)"]]
                            + [[r["repo_id"], f"{r['params']:,}", f"{r['params_active']:,}", r["published_label"],
                                format_bytes(r["bf16_weight_bytes"]), f"{r['bf16_kv_bytes_per_token']:,} B"]
                               for r in rows]))


def main(args: argparse.Namespace) -> int:
    if args.list:
        rows = list_dicts()
        print(json.dumps(rows, indent=2) if args.json else human_list(rows))
        return 0
    if not args.config:
        raise InputError("memory needs --config NAME|PATH (or --list to name the shipped configurations)")
    # argparse has checked the numbers; the dtypes too are checked before reading the config.
    batch, context, memory_bytes = args.batch, args.context, args.memory
    dtype = mem.dtype_name(args.dtype) if args.dtype else None
    kv_dtype = mem.dtype_name(args.kv_dtype, kv=True) if args.kv_dtype else None
    rc = mem.resolve_config(args.config)
    dtype = dtype or rc.torch_dtype or "bf16"
    out = result_dict(rc, context or rc.config.max_position_embeddings, batch, dtype,
                      kv_dtype or mem.default_kv_dtype(dtype), memory_bytes)
    print(json.dumps(out, indent=2) if args.json else human(rc, out))
    return 0

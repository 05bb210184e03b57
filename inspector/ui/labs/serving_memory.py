"""The Serving lab's memory calculator: weights + KV cache of real model configurations, no model work.

A shipped config (`inspector.serving.memory.shipped_configs`), the context, batch, weights dtype and a
memory budget -> the figure of `inspector.viz.serving.memory_figure` (weights and KV cache per attention
layout) and one line of numbers; each control's change redraws it. For a mixture of experts (Mixtral,
Qwen3-MoE, OLMoE, Granite-MoE) the line adds its total and active parameters and what each costs: memory
holds every expert, a batch-1 decode step reads about the active ones, a batch of B tokens the union of their
experts; the second figure is that union against B (`inspector.viz.routing.experts_read_curve`: E·(1 − (1 −
k/E)^B) experts per layer for uniform routing). Bad values are one line.
"""

from __future__ import annotations

from typing import Any

from inspector.serving.experts import count_active_params, expected_experts, expert_costs
from inspector.serving.memory import (count_params, default_kv_dtype, dtype_name, resolve_config, shipped_configs,
                                      windowed_kv_bytes)
from inspector.serving.view import memory_bars
from inspector.ui.fields import MEM_BATCH, MEM_CONTEXT, MEM_GIB, slider
from inspector.ui.figure import Figure
from inspector.ui.panel import Panel
from inspector.ui.refusals import refuses
from inspector.viz import serving as vs
from inspector.viz.common import empty_figure, esc
from inspector.viz.routing import experts_read_curve

MEMORY_DTYPES = ["bf16", "fp16", "fp32", "int8", "int4"]


class MemoryCalculator(Panel):
    """Part of the Serving lab (see the module docstring)."""

    key, title, tab_id = "serving_memory", "Memory calculator", "serving-mem-info"

    def refusal(self, message: str, sid: Any = None) -> dict[str, Any]:
        """Its status is the line under the figure."""
        return {"line": self.status(message, error=True)}

    def layout(self) -> None:
        import gradio as gr

        gr.Markdown("### Memory calculator: weights + KV cache of real model configurations")
        configs = [c.repo_id for c in shipped_configs().values()]
        with gr.Row():
            self.config = gr.Dropdown(configs, value=configs[0], label="config", elem_id="serving-mem-config")
            self.dtype = gr.Dropdown(MEMORY_DTYPES, value="bf16", label="weights dtype", elem_id="serving-mem-dtype")
            self.context = slider(MEM_CONTEXT, 4096, 128, "context (tokens)", "serving-mem-context")
            self.batch = slider(MEM_BATCH, 8, 1, "batch", "serving-mem-batch")
            self.gib = slider(MEM_GIB, 80, 1, "memory (GiB)", "serving-mem-gib")
        first = self.memory_view(configs[0], 4096, 8, "bf16", 80)
        self.show("figure", Figure(first["figure"], elem_id="serving-mem-fig", show_label=False))
        self.show("line", gr.HTML(first["line"], elem_id="serving-mem-info"))
        self.show("experts", Figure(first["experts"], elem_id="serving-mem-experts", show_label=False))

    def wire(self) -> None:
        self.on([self.config.change, self.dtype.change, self.context.release, self.batch.release, self.gib.release],
                self.memory_view, [self.config, self.context, self.batch, self.dtype, self.gib],
                trigger_mode="always_last")

    @refuses
    def memory_view(self, config: Any, context: Any, batch: Any, dtype: Any, memory_gib: Any) -> dict[str, Any]:
        """The calculator's figure and one line of numbers (no model work)."""
        context, batch = MEM_CONTEXT.parse(context), MEM_BATCH.parse(batch)
        memory = MEM_GIB.parse(memory_gib) * 2**30
        bars = memory_bars(str(config), context, batch, str(dtype), memory)
        saved = bars[1].kv_bytes / bars[0].kv_bytes if bars[0].kv_bytes else 1.0
        line = (f"{config}, {dtype}{vs.format_note(str(dtype))}: weights {bars[0].weight_bytes / 2**30:.2f} GiB; "
                f"KV cache for {batch} x {context} tokens {bars[0].kv_bytes / 2**30:.2f} GiB (full MHA would need "
                f"{saved:.1f}x as much); "
                f"{bars[0].fits_requests} requests of {context} tokens fit in {memory // 2**30} GiB")
        cfg = resolve_config(str(config)).config
        windowed = windowed_kv_bytes(cfg, context, batch, default_kv_dtype(dtype_name(str(dtype))))
        if windowed is not None:
            line += (f"; counted as a full cache, as this engine keeps; keeping only the window "
                     f"({cfg.sliding_window:,}) in the sliding layers it would be {windowed / 2**30:.2f} GiB")
        costs = expert_costs(cfg, dtype_name(str(dtype)))
        if costs is None:
            experts = empty_figure(f"{config} is dense: every step reads every weight")
        else:
            total, active = count_params(cfg), count_active_params(cfg)
            line += (f". A mixture of experts: {total / 1e9:.2f} B parameters in all, {active / 1e9:.2f} B active per "
                     f"token ({costs.top_k} of {costs.num_experts} experts per layer); memory holds them all "
                     f"({bars[0].weight_bytes / 2**30:.2f} GiB), a batch-1 decode step reads about the active ones "
                     f"({costs.step_bytes(1) / 2**30:.2f} GiB), a step over {batch} tokens the union of their experts "
                     f"(about {expected_experts(costs.num_experts, costs.top_k, batch):.1f} per layer if routing is "
                     f"uniform: {costs.step_bytes(batch) / 2**30:.2f} GiB)")
            sizes = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, batch})
            experts = experts_read_curve(costs.num_experts, costs.top_k,
                                         [(b, expected_experts(costs.num_experts, costs.top_k, b)) for b in sizes])
        return {"figure": vs.memory_figure(bars, memory), "line": f'<div id="serving-mem-line">{esc(line)}</div>',
                "experts": experts}

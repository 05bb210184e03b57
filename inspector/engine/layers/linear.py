"""The model's Linear module and the hook-free call every layer module uses.

`Linear` is `nn.Linear` whose product runs through `inspector.engine.linear.project` (the form this CPU
runs fastest); `NoHooks`, mixed into every module of the model, makes calling a module run its `forward`
directly (the engine records through its recorder argument, never through torch's module hooks).
"""

from __future__ import annotations

import torch
from torch import nn

from inspector.engine.linear import project


class NoHooks:
    """Mixed into the model's modules: calling one runs its `forward` directly.

    nn.Module.__call__ also looks for forward/pre hooks, which this engine never uses (it records
    through its recorder argument); that check costs ~5 us a call, over 1 ms of a 30-layer decode step."""

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


class Linear(NoHooks, nn.Linear):
    """nn.Linear computed by `project` (the weight product in the form this CPU runs fastest)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return project(x, self.weight, self.bias)


"""Tensors that keep float32 through a module's cast to half precision.

``model.to(torch.bfloat16)`` (or ``.half()``) rounds every floating tensor. For most weights that is the point; for
a few the rounding grows with the position: rotary frequencies (an angle error that grows with the lag: 8 % off at
positions 3,000-4,000) and the poles and steps of a diagonal state space model (S4D's imaginary parts, up to ~100,
stored in steps of 0.5: phase errors of radians by lag 100, 17-26 % off). A module lists them in
``float32_tensors``: they move with the module to any device but keep their values in float32 (or wider) through a
cast to half precision (a float32 or float64 cast applies to them as to the rest); the module computes with them
in float32 and casts its output.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from markovformer.ops.precision import compute_dtype


class KeepsFloat32(nn.Module):
    """A module whose ``float32_tensors`` (parameter or buffer names) keep their dtype through a half-precision cast;
    device moves and float32 and float64 casts apply to them as to the rest."""

    float32_tensors: ClassVar[tuple[str, ...]] = ()

    def _apply(self, fn, recurse: bool = True):
        # detached now: a parameter's conversion replaces its .data in place, and the old storage holds the values
        kept = {name: getattr(self, name).detach() for name in self.float32_tensors}
        super()._apply(fn, recurse)
        for name, before in kept.items():
            after = getattr(self, name)
            # a cast to half precision only: one to float32 narrows a float64 model's as it does the rest
            bits = torch.finfo(after.dtype).bits if after.is_floating_point() else None
            halved = bits is not None and bits < min(32, torch.finfo(before.dtype).bits)
            if not halved or before.is_meta or after.is_meta:
                continue
            restored = before.to(after.device)
            if isinstance(after, nn.Parameter):
                after.data = restored
            else:
                setattr(self, name, restored)
        return self


def kept_float_dtype() -> torch.dtype:
    """The dtype ``float32_tensors`` are made in: the default dtype, float32 at least (transformers builds a bf16
    load under a bf16 default; a float64 default gets float64 ones)."""
    return compute_dtype(torch.get_default_dtype())


__all__ = ["KeepsFloat32", "kept_float_dtype"]

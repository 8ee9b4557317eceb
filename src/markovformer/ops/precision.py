"""Precision guards shared by the hand-written autograd Functions."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

F = TypeVar("F", bound=Callable)


def autocast_off(function: F) -> F:
    """``function`` run with autocast off on the device of its first tensor argument.

    For the autograd Functions that compute in float32 by design (their wrappers cast the inputs up): under an
    active autocast (Lightning's ``bf16-mixed``) their plain matrix products would come out in bfloat16 and meet
    float32 ``out=`` buffers and saved tensors (products written with ``out=`` or in place, as every one of the
    chunked path's, are left alone by autocast). Decorate both the wrapper that calls ``apply`` and ``backward``.
    """

    @functools.wraps(function)
    def guarded(*args, **kwargs):
        device = next((arg.device for arg in args if isinstance(arg, Tensor)), torch.device("cpu"))
        with torch.autocast(device.type, enabled=False):
            return function(*args, **kwargs)

    return guarded  # type: ignore[return-value]


def compute_dtype(values: Tensor | torch.dtype) -> torch.dtype:
    """The dtype to accumulate ``values`` (a tensor or a dtype) in: half precision is raised to float32,
    float32/float64 kept."""
    dtype = values.dtype if isinstance(values, Tensor) else values
    return torch.promote_types(dtype, torch.float32)


__all__ = ["autocast_off", "compute_dtype"]

"""Causal WKV by the RWKV-4 authors' numerically stable recurrence (their CUDA kernel, as a loop over time): a
state (a, b) of weighted sums of v and 1, kept relative to a running exponent p so no exponential overflows."""

from __future__ import annotations

import torch
from torch import Tensor

WKVState = tuple[Tensor, Tensor, Tensor]  # (numerator, denominator, exponent), each (B, C)


def check_inputs(w: Tensor, u: Tensor, k: Tensor, v: Tensor, initial_state: WKVState | None = None,
                 **masks: Tensor | None) -> None:  # fmt: skip
    """ValueError naming the first input that is not w, u (C,); k, v (B, T, C); a state of three (B, C); and each
    of ``masks`` (attention_mask, segment_ids) (B, T)."""
    if k.dim() != 3:
        raise ValueError(f"k must be (B, T, C), got shape {tuple(k.shape)}")
    if v.shape != k.shape:
        raise ValueError(f"v must match k {tuple(k.shape)} (B, T, C), got shape {tuple(v.shape)}")
    batch, length, channels = k.shape
    for name, per_channel in (("w", w), ("u", u)):
        if tuple(per_channel.shape) != (channels,):
            raise ValueError(f"{name} must be one value per channel, (C,) = ({channels},); "
                             f"got shape {tuple(per_channel.shape)}")  # fmt: skip
    for name, mask in masks.items():
        if mask is not None and tuple(mask.shape) != (batch, length):
            raise ValueError(f"{name} must be (B, T) = {(batch, length)}, got shape {tuple(mask.shape)}")
    if initial_state is not None and (len(initial_state) != 3 or any(
            tuple(part.shape) != (batch, channels) for part in initial_state)):  # fmt: skip
        shapes = [tuple(part.shape) for part in initial_state]
        raise ValueError(f"initial_state must be (numerator, denominator, exponent), each (B, C) = "
                         f"{(batch, channels)}; got shapes {shapes}")  # fmt: skip


def wkv_recurrent(
    w: Tensor, u: Tensor, k: Tensor, v: Tensor, initial_state: WKVState | None = None,
    output_final_state: bool = False,
) -> Tensor | tuple[Tensor, WKVState]:  # fmt: skip
    """The RWKV-4 stable recurrence (the authors' CUDA kernel, as a loop): causal WKV, (B, T, C).

    The state after position t is (N, D, p) with N = Σ_{i<=t} e^{-(t-i)w + k_i - p} v_i and D the same sum of 1:
    ``initial_state`` (zeros and p = -inf when None) in, and with ``output_final_state`` the state after T-1 out.
    """
    check_inputs(w, u, k, v, initial_state)
    if initial_state is None:
        numerator = torch.zeros_like(k[:, 0])
        denominator = torch.zeros_like(k[:, 0])
        exponent = torch.full_like(k[:, 0], float("-inf"))
    else:
        numerator, denominator, exponent = initial_state
    outputs = []
    for k_t, v_t in zip(k.unbind(1), v.unbind(1), strict=True):
        bonus = u + k_t
        top = torch.maximum(exponent, bonus)
        old, new = torch.exp(exponent - top), torch.exp(bonus - top)
        outputs.append((old * numerator + new * v_t) / (old * denominator + new))
        decayed = exponent - w
        top = torch.maximum(decayed, k_t)
        old, new = torch.exp(decayed - top), torch.exp(k_t - top)
        numerator, denominator, exponent = old * numerator + new * v_t, old * denominator + new, top
    output = torch.stack(outputs, dim=1)
    return (output, (numerator, denominator, exponent)) if output_final_state else output


__all__ = ["WKVState", "check_inputs", "wkv_recurrent"]

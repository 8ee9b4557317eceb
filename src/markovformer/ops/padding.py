"""Padding masks: what a valid ``attention_mask`` (B, T) is (1 = real token, 0 = padding), the right-padding rule of
the parts that read a sequence in order (recurrences, CTC), and the zero-in, zero-out rule of the baseline mixers.

Every baseline mixer zeroes padded positions on the way in and on the way out (``zero_padding``), so they add
nothing to real tokens' states and return zeros themselves. Convolutions and decayed recurrences depend only on
lags, so a run of padding at either end of a row (left or right padding) leaves the real tokens' outputs exactly
as without it.
"""

from __future__ import annotations

import torch
from torch import Tensor


def right_padded(attention_mask: Tensor) -> Tensor:
    """() bool tensor: whether every row of a (B, T) mask is ones then zeros (right padding, or none); read on the
    device, for a choice made by tensor ops inside ``torch.compile``."""
    real = attention_mask.bool()
    return (real[:, 1:] <= real[:, :-1]).all()


def is_right_padded(attention_mask: Tensor) -> bool:
    """``right_padded`` read back to the host."""
    return bool(right_padded(attention_mask))


def right_padded_lengths(attention_mask: Tensor, who: str) -> Tensor:
    """Lengths (B,) of a right-padded (B, T) mask (ones then zeros in every row); ValueError naming ``who`` else."""
    if not is_right_padded(attention_mask):
        raise ValueError(f"{who} needs a right-padded attention_mask (ones then zeros in every row)")
    return attention_mask.long().sum(-1)


def real_runs(attention_mask: Tensor, who: str) -> tuple[Tensor, Tensor]:
    """Start and length (B,) of the one run of real tokens in each row of a (B, T) mask (padding on the left, the
    right or both); ValueError naming ``who`` when a row has padding between real tokens."""
    real = attention_mask.bool()
    lengths = real.long().sum(-1)
    starts = torch.where(lengths > 0, real.long().argmax(-1), torch.zeros_like(lengths))
    positions = torch.arange(real.shape[-1], device=real.device)[None]
    run = (positions >= starts[:, None]) & (positions < (starts + lengths)[:, None])
    if not torch.equal(real, run):
        raise ValueError(f"{who} needs padding only before or after the real tokens of a row (left or right padding)")
    return starts, lengths


def roll_rows(x: Tensor, shifts: Tensor) -> Tensor:
    """Row b of x (B, T, ...) rolled left by ``shifts[b]`` along dim 1 (entry t becomes entry t + shift mod T):
    left-padded rows become right-padded; ``roll_rows(x, -shifts)`` undoes it."""
    length = x.shape[1]
    index = (torch.arange(length, device=x.device)[None] + shifts[:, None]) % length
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


def check_attention_mask(attention_mask: Tensor, shape: tuple[int, ...]) -> None:
    """ValueError unless ``attention_mask`` is (B, T) = ``shape`` and holds only 0 (padding) and 1 (real token):
    a mask of 0.5 or 2 would otherwise be read as a real token by some paths and a weight by others. Inside
    ``torch.compile`` the values are asserted on the device (RuntimeError, without the bad value) instead: a
    model's own ``compile`` runs this check eagerly before the graph (``models.inputs.check_input_values``)."""
    if tuple(attention_mask.shape) != tuple(shape):
        raise ValueError(f"attention_mask must be (B, T) = {tuple(shape)}; got {tuple(attention_mask.shape)}")
    if attention_mask.dtype != torch.bool:
        bad = (attention_mask != 0) & (attention_mask != 1)
        if torch.compiler.is_compiling():  # reading the values back would break the graph: a device-side assertion
            torch._assert_async(~bad.any(), "attention_mask must hold only 0 (padding) and 1 (real token)")
        elif bool(bad.any()):
            raise ValueError(f"attention_mask must hold only 0 (padding) and 1 (real token); got "
                             f"{attention_mask[bad].flatten()[0].item()!r}")  # fmt: skip


def reverse_within_lengths(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse the first ``lengths[b]`` entries of each row b along dim 1, leaving the padding after them in place:
    x (B, T, ...), lengths (B,). Applying it twice is the identity."""
    positions = torch.arange(x.shape[1], device=x.device)[None]
    index = torch.where(positions < lengths[:, None], lengths[:, None] - 1 - positions, positions)
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


def zero_padding(x: Tensor, attention_mask: Tensor | None, time_dim: int = 1) -> Tensor:
    """``x`` with every position whose ``attention_mask`` (B, T) entry is 0 set to zero; ``x`` itself when no mask.

    x: (B, T, ...) with ``time_dim=1``, or heads (B, H, T, Dh) with ``time_dim=2``.
    """
    if attention_mask is None:
        return x
    shape = [attention_mask.shape[0]] + [1] * (x.dim() - 1)
    shape[time_dim] = attention_mask.shape[1]
    return x * attention_mask.reshape(shape).to(x.dtype)


def real_token_positions(attention_mask: Tensor, seen: Tensor | int = 0) -> Tensor:
    """(B, T): each token's position counting only its row's real tokens (1 in ``attention_mask`` (B, T)), after
    ``seen`` (B,) earlier ones: the position it would have with its row unpadded (padding takes the position of the
    real token before it, 0 before the first)."""
    if isinstance(seen, Tensor):
        seen = seen[:, None]
    return (attention_mask.long().cumsum(-1) + seen - 1).clamp_min(0)


def has_real_before(attention_mask: Tensor | None, batch: int, seq_len: int, device: torch.device) -> Tensor:
    """(B, T) bool: whether a real token lies strictly before each position (t > 0 when there is no mask)."""
    if attention_mask is None:
        return (torch.arange(seq_len, device=device) > 0).expand(batch, seq_len)
    real = attention_mask.long()
    return (real.cumsum(-1) - real) > 0

"""Stable WKV in parallel form: the recurrence's stabilisation, as a ``linear_scan`` with gates in [0, 1].

With m_t = max_{i<=t}(k_i - (t-i)w) (a cumulative max, computed detached: any reference gives the same value, this
one keeps every exponent <= 0), the sums relative to e^{m_t} obey N_t = e^{m_{t-1}-w-m_t} N_{t-1} + e^{k_t-m_t} v_t.
Non-causal WKV runs the same sums over the reversed sequence for the strictly-future part.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.padding import has_real_before, zero_padding
from markovformer.ops.precision import compute_dtype
from markovformer.ops.scan import linear_scan
from markovformer.ops.segments import segment_starts
from markovformer.ops.wkv.recurrent import WKVState, check_inputs


def _past_sums(
    w: Tensor, k: Tensor, v: Tensor, attention_mask: Tensor | None, segment_ids: Tensor | None = None
) -> tuple[tuple[Tensor, Tensor, Tensor], WKVState]:
    """Σ_{i<t} e^{-(t-1-i)w + k_i - r_t} (v_i and 1) over real i, and the reference exponent r_t (B, T, C); and the
    sums over every i <= T-1 in the state form of ``wkv_recurrent``.

    r_t is the largest exponent among those terms when some real token lies before t; where none does, the sums
    are zero and r_t = -inf. ``segment_ids`` (B, T), packed documents: i ranges over t's document only (the
    cumulative max restarts at each document, lifted by a per-document offset, and the scan's gate is 0 there).
    """
    batch, length, _ = k.shape
    reference = k.detach()
    if attention_mask is not None:
        real = attention_mask.bool()[..., None]
        lowest = reference.masked_fill(~real, float("inf")).amin(1, keepdim=True)
        # padded keys weigh nothing; for the reference they take the row's lowest real key, so they never lead it
        reference = torch.where(real, reference, torch.where(torch.isfinite(lowest), lowest, 0.0))
        v = zero_padding(v, attention_mask)
    steps = torch.arange(length, device=k.device, dtype=torch.float64)[:, None]
    decay64 = w.detach().double()
    # m_t = max_{i<=t}(k_i - (t-i)w) as a cumulative max; float64 because k_i + i·w grows with t
    lifted = reference.double() + steps * decay64
    starts = lift = None
    if segment_ids is not None:  # each document's values lie above every earlier one's: the cummax restarts
        starts = segment_starts(segment_ids)[..., None]
        span = (lifted.amax() - lifted.amin()).clamp_min(0) + 1.0
        lift = starts.double().cumsum(1) * span
    top = (lifted + (0 if lift is None else lift)).cummax(1).values - (0 if lift is None else lift)
    top = (top - steps * decay64).to(k.dtype)
    top_before = torch.cat([top[:, :1] + w.detach(), top[:, :-1]], dim=1)  # the gate at t = 0 is then 1
    gate = torch.exp(top_before - w - top)
    if starts is not None:
        gate = gate.masked_fill(starts, 0.0)
    exponent = k - top
    if attention_mask is not None:  # a padded key may lie far above the real ones that set top: e^{+big} * 0 = NaN
        exponent = exponent.masked_fill(~real, float("-inf"))
    weight = torch.exp(exponent)
    states, _ = linear_scan(torch.cat([gate, gate], -1), torch.cat([weight * v, weight], -1))
    numerator, denominator = F.pad(states[:, :-1], (0, 0, 1, 0)).chunk(2, dim=-1)
    history = has_real_before(attention_mask, batch, length, k.device)[..., None]
    if starts is not None:
        history = history & ~starts
    final = (*states[:, -1].chunk(2, dim=-1), top[:, -1])
    return (numerator, denominator, torch.where(history, top_before, float("-inf"))), final


def _carried(w: Tensor, state: WKVState, length: int) -> tuple[Tensor, Tensor, Tensor]:
    """A state's share of the history of steps 0..length-1, in ``_past_sums``'s form: it decays by e^{-w} a step."""
    numerator, denominator, exponent = state
    steps = torch.arange(length, device=w.device, dtype=w.dtype)[:, None]
    reference = exponent[:, None] - steps * w
    return numerator[:, None].expand_as(reference), denominator[:, None].expand_as(reference), reference


def _joined(first: WKVState, second: WKVState) -> WKVState:
    """The sums of two states with one reference exponent (their larger one)."""
    top = torch.maximum(first[2], second[2])
    top = torch.where(torch.isfinite(top), top, 0.0)
    scale_first, scale_second = torch.exp(first[2] - top), torch.exp(second[2] - top)
    return (scale_first * first[0] + scale_second * second[0], scale_first * first[1] + scale_second * second[1],
            torch.maximum(first[2], second[2]))  # fmt: skip


def wkv_scan(
    w: Tensor, u: Tensor, k: Tensor, v: Tensor, causal: bool = True, attention_mask: Tensor | None = None,
    initial_state: WKVState | None = None, output_final_state: bool = False, segment_ids: Tensor | None = None,
) -> Tensor | tuple[Tensor, WKVState]:  # fmt: skip
    """Stable WKV in parallel form (see this module's docstring). w, u (C,); k, v (B, T, C); attention_mask (B, T):
    padded keys add nothing and padded positions read 0 (``ops.padding``'s zero-in, zero-out rule). Half-precision
    inputs are computed in float32. Returns (B, T, C) in k's dtype.

    Causal WKV carries ``wkv_recurrent``'s state: ``initial_state`` in, and with ``output_final_state`` the
    output and the state after the last step out (in the compute dtype). ``segment_ids`` (B, T): packed documents
    (``ops.segments``), each read alone."""
    check_inputs(w, u, k, v, initial_state, attention_mask=attention_mask, segment_ids=segment_ids)
    if not causal and (initial_state is not None or output_final_state):
        raise ValueError("bidirectional WKV reads the whole sequence: it carries no state")
    if segment_ids is not None and (initial_state is not None or output_final_state):
        raise ValueError("packed documents (segment_ids) carry no WKV state between calls")
    dtype = k.dtype
    compute = compute_dtype(dtype)
    w, u, k, v = (x.to(compute) for x in (w, u, k, v))
    past, final = _past_sums(w, k, v, attention_mask, segment_ids)
    parts = [past]
    if initial_state is not None:
        initial_state = tuple(x.to(compute) for x in initial_state)
        parts.append(_carried(w, initial_state, k.shape[1]))
        final = _joined(final, (initial_state[0], initial_state[1], initial_state[2] - k.shape[1] * w))
    if not causal:
        flip_mask = None if attention_mask is None else attention_mask.flip(1)
        flip_ids = None if segment_ids is None else segment_ids.flip(1)
        parts.append(tuple(x.flip(1) for x in _past_sums(w, k.flip(1), v.flip(1), flip_mask, flip_ids)[0]))
    bonus = u + k
    top = bonus.detach()
    for _, _, reference in parts:
        top = torch.maximum(top, reference)
    current = torch.exp(bonus - top)
    numerator, denominator = current * v, current
    for part_numerator, part_denominator, reference in parts:
        scale = torch.exp(reference - top)  # 0 where there is no history
        numerator = numerator + scale * part_numerator
        denominator = denominator + scale * part_denominator
    # the current term alone keeps the denominator >= 1 for real tokens; the clamp only guards padded rows
    output = zero_padding(numerator / denominator.clamp_min(torch.finfo(compute).tiny), attention_mask).to(dtype)
    return (output, final) if output_final_state else output


__all__ = ["wkv_scan"]

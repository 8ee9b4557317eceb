"""minGRU (Feng et al., 2024, "Were RNNs All We Needed?"): h_t = (1 - z_t) ⊙ h_{t-1} + z_t ⊙ h̃_t.

The gate z_t = σ(gate_logits_t) and the candidate h̃_t come from the input at t alone, never from h_{t-1}, so the
recurrence is the linear scan with a_t = 1 - z_t = σ(-gate_logits_t) and b_t = z_t ⊙ h̃_t and trains in parallel
(``linear_scan``), unlike nn.GRU. Masked (padded) steps are the identity, a_t = 1 and b_t = 0: they never change
the carried state, wherever they sit, so right padding needs no packing and a reversed scan over right-padded rows
starts from a zero state at each row's last real step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.ops.scan.dispatch import linear_scan


def _check(gate_logits: Tensor, candidates: Tensor, mask: Tensor | None, initial_state: Tensor | None = None,
           resets: Tensor | None = None) -> None:  # fmt: skip
    if gate_logits.dim() != 3:
        raise ValueError(f"gate_logits must be (B, T, D), got shape {tuple(gate_logits.shape)}")
    if candidates.shape != gate_logits.shape:
        raise ValueError(f"candidates must match gate_logits {tuple(gate_logits.shape)}, got {tuple(candidates.shape)}")
    if mask is not None and tuple(mask.shape) != tuple(gate_logits.shape[:2]):
        raise ValueError(f"mask must be (B, T) = {tuple(gate_logits.shape[:2])}, got shape {tuple(mask.shape)}")
    if resets is not None and tuple(resets.shape) != tuple(gate_logits.shape[:2]):
        raise ValueError(f"resets must be (B, T) = {tuple(gate_logits.shape[:2])}, got shape {tuple(resets.shape)}")
    state_shape = (gate_logits.shape[0], gate_logits.shape[2])
    if initial_state is not None and tuple(initial_state.shape) != state_shape:
        raise ValueError(f"initial_state must be (B, D) = {state_shape}, got shape {tuple(initial_state.shape)}")


def min_gru_scan_inputs(gate_logits: Tensor, candidates: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The linear scan's (a, b), both (B, T, D), for minGRU; masked steps get (1, 0), the identity."""
    decay = torch.sigmoid(-gate_logits)  # 1 - σ(x), without the cancellation of 1 - σ(x) near σ(x) = 1
    update = torch.sigmoid(gate_logits) * candidates
    if mask is not None:
        keep = mask.bool()[..., None]
        decay = torch.where(keep, decay, torch.ones_like(decay))
        update = torch.where(keep, update, torch.zeros_like(update))
    return decay, update


def min_gru(
    gate_logits: Tensor, candidates: Tensor, mask: Tensor | None = None, reverse: bool = False, backend: str = "auto",
    initial_state: Tensor | None = None, output_final_state: bool = False, resets: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
    """All minGRU states from h_{-1} = ``initial_state`` (B, D) (zeros when None), by one linear scan.

    gate_logits, candidates (B, T, D); mask (B, T) with 1 for real steps, 0 for padding (any pattern), or None.
    ``reverse`` runs from t = T-1 down to 0 (the backward direction of a bidirectional layer).
    Returns h (B, T, D); at a masked step h is the state carried from the previous real step. With
    ``output_final_state``: (h, the state after the last step read (B, D)), the next call's ``initial_state``.
    ``backend``: a ``linear_scan`` backend. ``resets`` (B, T) bool: steps whose state starts afresh (a_t = 0; packed
    documents: each document's first step, or its last with ``reverse``).
    """
    _check(gate_logits, candidates, mask, initial_state, resets)
    decay, update = min_gru_scan_inputs(gate_logits, candidates, mask)
    if resets is not None:
        decay = decay.masked_fill(resets.bool()[..., None], 0.0)
    if reverse:
        decay, update = decay.flip(1), update.flip(1)
    states, final = linear_scan(decay, update, initial_state, backend=backend)
    states = states.flip(1) if reverse else states
    return (states, final) if output_final_state else states


def min_gru_naive(
    gate_logits: Tensor, candidates: Tensor, mask: Tensor | None = None, reverse: bool = False,
    initial_state: Tensor | None = None, output_final_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
    """The definition, one step per Python iteration: the reference ``min_gru`` is tested against.

    Same arguments and result as ``min_gru``; a masked step keeps the previous state.
    """
    _check(gate_logits, candidates, mask, initial_state)
    order = range(gate_logits.shape[1] - 1, -1, -1) if reverse else range(gate_logits.shape[1])
    state = torch.zeros_like(candidates[:, 0]) if initial_state is None else initial_state
    states = [None] * gate_logits.shape[1]
    for t in order:
        z = torch.sigmoid(gate_logits[:, t])
        stepped = (1 - z) * state + z * candidates[:, t]
        state = stepped if mask is None else torch.where(mask[:, t].bool()[:, None], stepped, state)
        states[t] = state
    states = torch.stack(states, dim=1)
    return (states, state) if output_final_state else states

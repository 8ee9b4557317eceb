"""Causal retention (RetNet, Sun et al. 2023 §2.1) in its two obviously correct forms, the references:

    parallel:   O = (Q Kᵀ ⊙ D) V,   D_{nm} = γ^{n-m} if n >= m else 0   (dense T×T; γ^{|n-m|} when not causal)
    recurrent:  S_n = γ S_{n-1} + k_nᵀ v_n,   o_n = q_n S_n               (a loop over time)

Both take q, k (B, H, T, Dk), v (B, H, T, Dv) and the per-head decays gamma (H,).
"""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.ops.precision import compute_dtype
from markovformer.ops.segments import same_segment


def decay_powers(gamma: Tensor, exponents: Tensor | int) -> Tensor:
    """γ_h^n for gamma (H,) and integer exponents n >= 0 (any shape): (H, *exponents.shape), in gamma's dtype.

    A power, not exp(n·log γ): at γ = 0 (a head without memory) the latter is exp(0·-inf) = NaN on the diagonal,
    where γ^0 = 1; the power's gradient there is finite too."""
    exponents = torch.as_tensor(exponents, device=gamma.device)
    return gamma.reshape(-1, *([1] * exponents.dim())) ** exponents


def decay_matrix(gamma: Tensor, length: int, causal: bool, device: torch.device) -> Tensor:
    """(H, T, T): γ^{n-m} for n >= m (and γ^{m-n} for n < m when not causal), else 0; in gamma's dtype."""
    steps = torch.arange(length, device=device)
    lag = steps[:, None] - steps[None, :]
    allowed = lag >= 0 if causal else torch.ones_like(lag, dtype=torch.bool)
    return torch.where(allowed, decay_powers(gamma.to(device), lag.abs()), 0.0)


def retention_weights(q: Tensor, k: Tensor, gamma: Tensor, causal: bool = True,
                      segment_ids: Tensor | None = None) -> Tensor:  # fmt: skip
    """Q Kᵀ ⊙ D, (B, H, T, T): output = weights @ v. q, k (B, H, T, Dk); gamma (H,)."""
    decay = decay_matrix(gamma, q.shape[-2], causal, q.device).to(q.dtype)
    if segment_ids is not None:  # packed documents: no weight across a document boundary
        decay = decay * same_segment(segment_ids.to(q.device)).to(q.dtype)
    return (q @ k.transpose(-1, -2)) * decay


def retention_parallel(q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, causal: bool = True,
                       segment_ids: Tensor | None = None) -> Tensor:  # fmt: skip
    """(Q Kᵀ ⊙ D) V. q, k (B, H, T, Dk); v (B, H, T, Dv); gamma (H,). Returns (B, H, T, Dv)."""
    return retention_weights(q, k, gamma, causal, segment_ids) @ v


def retention_recurrent(
    q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, initial_state: Tensor | None = None,
    output_final_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
    """Causal retention one step at a time: S_n = γ S_{n-1} + k_nᵀ v_n, o_n = q_n S_n (the reference loop).

    q, k (B, H, T, Dk); v (B, H, T, Dv); gamma (H,); initial_state S_{-1} (B, H, Dk, Dv) (zeros when None).
    Returns (B, H, T, Dv), and with ``output_final_state`` also S_{T-1} (B, H, Dk, Dv). The decay and the state
    are at least float32 whatever q's dtype: γ_h = 1 - 2^(-5-h) lies within 2^-12 of 1, which bf16 rounds to 1 (the
    heads stopped decaying, and decoding drifted from the full forward); the output comes back in q's dtype.
    """
    compute = compute_dtype(q)
    decay = gamma.to(compute)[:, None, None]
    state = (q.new_zeros(q.shape[0], q.shape[1], q.shape[-1], v.shape[-1], dtype=compute) if initial_state is None
             else initial_state.to(compute))  # fmt: skip
    outputs = []
    for q_n, k_n, v_n in zip(q.unbind(2), k.unbind(2), v.unbind(2), strict=True):
        state = decay * state + k_n[..., :, None].to(compute) * v_n[..., None, :].to(compute)
        outputs.append((q_n[..., None, :].to(compute) @ state).squeeze(-2).to(q.dtype))
    output = torch.stack(outputs, dim=2)
    return (output, state) if output_final_state else output


__all__ = ["decay_matrix", "decay_powers", "retention_parallel", "retention_recurrent", "retention_weights"]

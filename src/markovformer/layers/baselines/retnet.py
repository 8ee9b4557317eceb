"""Multi-scale retention, the RetNet sequence mixer (Sun et al. 2023, "Retentive Network: A Successor to
Transformer for Large Language Models", §2.1-2.2).

Per head h with decay γ_h = 1 - 2^{-5-h}, causal retention of queries q, keys k (scaled by Dh^{-1/2}) and values v:

    parallel:   O = (Q Kᵀ ⊙ D) V,   D_{nm} = γ^{n-m} if n >= m else 0
    recurrent:  S_n = γ S_{n-1} + k_nᵀ v_n,   o_n = q_n S_n
    chunkwise:  inside a chunk the parallel form, across chunks the recurrence on chunk states (a ``linear_scan``)

The three forms are the same function (tests pin them together). Rotary position on q and k is the paper's
xPos-style rotation Θ (without xPos's extra length scaling). Each head is normalised (GroupNorm with one group per
head), gated by swish(X W_G) and projected by W_O. Non-causal layers use D_{nm} = γ^{|n-m|}: the causal form run
forwards and backwards, minus the doubly counted diagonal. Values keep width d (the paper widens them to 2d).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.layers.baselines.padding import zero_padding
from markovformer.ops.scan import linear_scan

RETENTION_FORMS = ("parallel", "recurrent", "chunkwise")


def retention_decays(n_heads: int) -> Tensor:
    """γ_h = 1 - 2^{-5-h}, h = 0..n_heads-1 (float64)."""
    return 1 - 2.0 ** (-5 - torch.arange(n_heads, dtype=torch.float64))


def _decay_matrix(gamma: Tensor, length: int, causal: bool, device: torch.device) -> Tensor:
    """(H, T, T): γ^{n-m} for n >= m (and γ^{m-n} for n < m when not causal), else 0; float64."""
    steps = torch.arange(length, device=device)
    lag = steps[:, None] - steps[None, :]
    allowed = lag >= 0 if causal else torch.ones_like(lag, dtype=torch.bool)
    log_gamma = torch.log(gamma.to(device))[:, None, None]
    return torch.where(allowed, torch.exp(lag.abs() * log_gamma), 0.0)


def retention_weights(q: Tensor, k: Tensor, gamma: Tensor, causal: bool = True) -> Tensor:
    """Q Kᵀ ⊙ D, (B, H, T, T): output = weights @ v. q, k (B, H, T, Dk); gamma (H,)."""
    decay = _decay_matrix(gamma, q.shape[-2], causal, q.device).to(q.dtype)
    return (q @ k.transpose(-1, -2)) * decay


def retention_parallel(q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, causal: bool = True) -> Tensor:
    """(Q Kᵀ ⊙ D) V. q, k (B, H, T, Dk); v (B, H, T, Dv); gamma (H,). Returns (B, H, T, Dv)."""
    return retention_weights(q, k, gamma, causal) @ v


def retention_recurrent(q: Tensor, k: Tensor, v: Tensor, gamma: Tensor) -> Tensor:
    """Causal retention one step at a time: S_n = γ S_{n-1} + k_nᵀ v_n, o_n = q_n S_n (the reference loop)."""
    decay = gamma.to(q.dtype)[:, None, None]
    state = q.new_zeros(q.shape[0], q.shape[1], q.shape[-1], v.shape[-1])
    outputs = []
    for q_n, k_n, v_n in zip(q.unbind(2), k.unbind(2), v.unbind(2), strict=True):
        state = decay * state + k_n[..., :, None] * v_n[..., None, :]
        outputs.append((q_n[..., None, :] @ state).squeeze(-2))
    return torch.stack(outputs, dim=2)


def retention_chunkwise(q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, chunk_size: int = 64) -> Tensor:
    """Causal retention by chunks of C: the parallel form inside, the state recurrence R_i = γ^C R_{i-1} + Kᵢᵀ(Vᵢ ⊙ ζ)
    across (one ``linear_scan`` over T/C chunk states of size Dk·Dv). Time O(T·C + T·Dk·Dv), no T×T matrix."""
    batch, heads, length, key_dim = q.shape
    value_dim = v.shape[-1]
    chunks = -(-length // chunk_size)
    pad = chunks * chunk_size - length  # zero keys and values add nothing; padded queries are cropped
    q, k, v = (F.pad(x, (0, 0, 0, pad)).unflatten(2, (chunks, chunk_size)) for x in (q, k, v))
    log_gamma = torch.log(gamma.to(q.device))[:, None]  # (H, 1), float64
    steps = torch.arange(chunk_size, device=q.device)
    inner_decay = _decay_matrix(gamma, chunk_size, True, q.device).to(q.dtype)[:, None]  # (H, 1, C, C)
    query_decay = torch.exp((steps + 1) * log_gamma).to(q.dtype)[:, None, :, None]  # γ^{j+1}
    key_decay = torch.exp((chunk_size - 1 - steps) * log_gamma).to(q.dtype)[:, None, :, None]  # γ^{C-1-j}
    inner = ((q @ k.transpose(-1, -2)) * inner_decay) @ v
    chunk_states = (k * key_decay).transpose(-1, -2) @ v  # (B, H, n, Dk, Dv): each chunk's own contribution
    flat = chunk_states.permute(0, 2, 1, 3, 4).reshape(batch, chunks, heads * key_dim * value_dim)
    carry = torch.exp(chunk_size * log_gamma).to(q.dtype).expand(heads, key_dim * value_dim).reshape(1, 1, -1)
    states, _ = linear_scan(carry.expand_as(flat), flat)  # state after each chunk
    previous = F.pad(states[:, :-1], (0, 0, 1, 0)).view(batch, chunks, heads, key_dim, value_dim).transpose(1, 2)
    cross = (q * query_decay) @ previous
    return (inner + cross).flatten(2, 3)[:, :, :length]


def retention(
    q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, causal: bool = True, form: str = "chunkwise",
    chunk_size: int = 64,
) -> Tensor:  # fmt: skip
    """Retention in one of RETENTION_FORMS; the non-causal (γ^{|n-m|}) layer = forwards + backwards - diagonal."""
    if form not in RETENTION_FORMS:
        raise ValueError(f"form={form!r}: expected one of {RETENTION_FORMS}")
    if form == "parallel":
        return retention_parallel(q, k, v, gamma, causal)

    def causal_form(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if form == "recurrent":
            return retention_recurrent(q, k, v, gamma)
        return retention_chunkwise(q, k, v, gamma, chunk_size)

    output = causal_form(q, k, v)
    if causal:
        return output
    backward = causal_form(q.flip(2), k.flip(2), v.flip(2)).flip(2)
    return output + backward - (q * k).sum(-1, keepdim=True) * v


class RetentionCore(nn.Module):
    """Retention of already-projected heads, GroupNorm per head and the swish gate (its own W_G projection)."""

    def __init__(
        self, *, d_model: int, n_heads: int, causal: bool = True, form: str = "chunkwise", chunk_size: int = 64
    ) -> None:
        super().__init__()
        if form not in RETENTION_FORMS:
            raise ValueError(f"form={form!r}: expected one of {RETENTION_FORMS}")
        self.n_heads, self.head_dim, self.causal = n_heads, d_model // n_heads, causal
        self.form, self.chunk_size = form, chunk_size
        self.gate = nn.Linear(d_model, d_model, bias=False)
        self.norm_weight = nn.Parameter(torch.ones(n_heads, 1, self.head_dim))
        self.norm_bias = nn.Parameter(torch.zeros(n_heads, 1, self.head_dim))

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None) -> CoreOutput:
        """x (B, T, D); q, k, v (B, H, T, Dh). Returns heads (B, H, T, Dh) and, when asked, Q Kᵀ ⊙ D (B, H, T, T)."""
        batch, heads, length, head_dim = q.shape
        k = zero_padding(k * head_dim**-0.5, attention_mask, time_dim=2)
        v = zero_padding(v, attention_mask, time_dim=2)
        gamma = retention_decays(heads).to(q.device)  # float64 whatever the model's dtype: γ is within 2^-12 of 1
        retained = retention(q, k, v, gamma, self.causal, self.form, self.chunk_size)
        normed = F.layer_norm(retained, (head_dim,)) * self.norm_weight + self.norm_bias
        gate = F.silu(self.gate(x)).view(batch, length, heads, head_dim).transpose(1, 2)
        output = zero_padding(normed * gate, attention_mask, time_dim=2)
        weights = None
        if return_weights:
            weights = zero_padding(retention_weights(q, k, gamma, self.causal), attention_mask, time_dim=2)
        return CoreOutput(output, {}, weights)


class RetNetAttention(SelfAttention):
    """Multi-scale retention in the shared attention frame (QKV, rotary, W_O); ``form`` picks the computation."""

    def __init__(
        self, *, d_model: int, n_heads: int, causal: bool = True, rotary: bool = True, chunk_size: int = 64,
        form: str = "chunkwise",
    ) -> None:  # fmt: skip
        core = RetentionCore(d_model=d_model, n_heads=n_heads, causal=causal, form=form, chunk_size=chunk_size)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary)

    @property
    def form(self) -> str:
        return self.cores[0].form

    @form.setter
    def form(self, value: str) -> None:
        if value not in RETENTION_FORMS:
            raise ValueError(f"form={value!r}: expected one of {RETENTION_FORMS}")
        self.cores[0].form = value


__all__ = [
    "RETENTION_FORMS",
    "RetNetAttention",
    "RetentionCore",
    "retention",
    "retention_chunkwise",
    "retention_decays",
    "retention_parallel",
    "retention_recurrent",
    "retention_weights",
]

"""Multi-scale retention, the RetNet sequence mixer (Sun et al. 2023, "Retentive Network: A Successor to
Transformer for Large Language Models", §2.1-2.2).

Per head h a decay γ_h = 1 - 2^{-5-h} (``retention_decays``); the retention of queries q, keys k (scaled by
Dh^{-1/2}) and values v is ``ops.retention`` (parallel, recurrent or chunkwise form, the same function):
O = (Q Kᵀ ⊙ D) V with D_{nm} = γ^{n-m} for n >= m, else 0. Rotary position on q and k is the paper's
xPos-style rotation Θ (without xPos's extra length scaling). Each head is normalised (GroupNorm with one group per
head), gated by swish(X W_G) and projected by W_O. Non-causal layers use D_{nm} = γ^{|n-m|}. Values keep width d
(the paper widens them to 2d).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.ops.padding import zero_padding
from markovformer.ops.retention import check_form, retention, retention_weights


def retention_decays(n_heads: int) -> Tensor:
    """γ_h = 1 - 2^{-5-h}, h = 0..n_heads-1 (float64)."""
    return 1 - 2.0 ** (-5 - torch.arange(n_heads, dtype=torch.float64))


class RetentionCore(nn.Module):
    """Retention of already-projected heads, GroupNorm per head and the swish gate (its own W_G projection).
    Decodes from the recurrent state S (``state["retention"]``): the recurrent form for one token, the chunkwise
    form for longer inputs (prompts)."""

    supports_state = True
    honours_segments = True  # packed documents: decay masked inside a chunk, the chunk state restarts per document

    def __init__(
        self, *, d_model: int, n_heads: int, causal: bool = True, form: str = "chunkwise", chunk_size: int = 64
    ) -> None:
        super().__init__()
        check_form(form)
        self.n_heads, self.head_dim, self.causal = n_heads, d_model // n_heads, causal
        self.form, self.chunk_size = form, chunk_size
        self.gate = nn.Linear(d_model, d_model, bias=False)
        self.norm_weight = nn.Parameter(torch.ones(n_heads, 1, self.head_dim))
        self.norm_bias = nn.Parameter(torch.zeros(n_heads, 1, self.head_dim))

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None,
                segment_ids=None) -> CoreOutput:  # fmt: skip
        """x (B, T, D); q, k, v (B, H, T, Dh). Returns heads (B, H, T, Dh) and, when asked, Q Kᵀ ⊙ D (B, H, T, T)."""
        batch, heads, length, head_dim = q.shape
        k = zero_padding(k * head_dim**-0.5, attention_mask, time_dim=2)
        v = zero_padding(v, attention_mask, time_dim=2)
        gamma = retention_decays(heads).to(q.device)  # float64 whatever the model's dtype: γ is within 2^-12 of 1
        if state is None:
            retained = retention(q, k, v, gamma, self.causal, self.form, self.chunk_size, segment_ids=segment_ids)
        else:
            form = "recurrent" if length == 1 else "chunkwise"
            retained, state["retention"] = retention(q, k, v, gamma, True, form, self.chunk_size,
                                                     state.get("retention"), output_final_state=True)  # fmt: skip
        normed = F.layer_norm(retained, (head_dim,)) * self.norm_weight + self.norm_bias
        gate = F.silu(self.gate(x)).view(batch, length, heads, head_dim).transpose(1, 2)
        output = zero_padding(normed * gate, attention_mask, time_dim=2)
        weights = None
        if return_weights:
            weights = zero_padding(retention_weights(q, k, gamma, self.causal, segment_ids), attention_mask,
                                   time_dim=2)  # fmt: skip
        return CoreOutput(output, {}, weights)


class RetNetAttention(SelfAttention):
    """Multi-scale retention in the shared attention frame (QKV, rotary, W_O); ``form`` picks the computation."""

    def __init__(
        self, *, d_model: int, n_heads: int, causal: bool = True, rotary: bool = True, attention_bias: bool = False,
        chunk_size: int = 64, form: str = "chunkwise",
    ) -> None:  # fmt: skip
        core = RetentionCore(d_model=d_model, n_heads=n_heads, causal=causal, form=form, chunk_size=chunk_size)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)

    @property
    def form(self) -> str:
        return self.cores[0].form

    @form.setter
    def form(self, value: str) -> None:
        check_form(value)
        self.cores[0].form = value


__all__ = ["RetNetAttention", "RetentionCore", "retention_decays"]

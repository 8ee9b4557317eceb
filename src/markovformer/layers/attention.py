"""The frame every self-attention kind shares: QKV projection, rotary position, per-head cores, output projection.

An attention kind is one or more *cores*, each a module that maps already-projected heads
``(x, q, k, v) -> heads`` for a slice of the heads. The frame splits the heads among its cores (hybrid "split"
attention has two), runs them and concatenates their outputs. To add a kind: write a core (read
``softmax_attention.SoftmaxCore``, the simplest: no bias, a key/value cache, packed documents; then
``markov_attention.MarkovCore`` for one with gates and a bias), a small ``SelfAttention`` subclass that builds it
(``SoftmaxAttention``), and register it in ``layers.registry``; docs/extending.md lists the rest
(options, tests, the decoding cases in ``tests/models/test_generate.py``).

A core declares ``causal`` (an attribute), ``supports_state`` and ``honours_segments`` (class attributes): the layer
decodes incrementally only when every core has both ``supports_state`` and ``causal`` (resolved once, when the frame
is built), and keeps packed documents apart itself only when every core honours them, taking ``segment_ids``.

Decoding state (the fla contract): ``forward(x, ..., state=s)`` with a dict ``s`` ({} at the first call) reads the
state the previous call left there and leaves the state for the next call; the positions of x follow those already
seen (rotary positions included) and ``attention_mask`` covers x only. The frame keeps the position count; each
core keeps its own part (``s["cores"][i]``): a key/value cache (``layers.kv_cache``) or a recurrent state. A core
that cannot decode incrementally sets ``supports_state = False``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from markovformer.layers.position import RotaryEmbedding
from markovformer.ops.attention_inputs import check_layer_input
from markovformer.ops.segments import Segments


class AttentionOutput(NamedTuple):
    """What a block returns, and an attention layer asked for gates or weights: ``output`` (B, T, D); ``gates``,
    when asked and the kind has them, per direction ("past", "future") the order gates (B, H_markov, T, K, plus the
    null slot when the layer has one), else None; ``weights``, when asked, the dense attention probabilities
    (B, H, T, T), else None."""

    output: Tensor  # (B, T, D)
    gates: dict[str, Tensor] | None  # direction -> (B, H_markov, T, K [+1]), when asked and the kind has gates
    weights: Tensor | None  # dense attention probabilities (B, H, T, T), when asked (small T only)


class CoreOutput(NamedTuple):
    heads: Tensor  # (B, h, T, Dh)
    gates: dict[str, Tensor]
    weights: Tensor | None  # (B, h, T, T) when asked


class SelfAttention(nn.Module):
    """Projections and head bookkeeping around one or more attention cores.

    Args:
        d_model, n_heads: model width and number of heads (Dh = d_model / n_heads).
        cores: modules with ``forward(x, q, k, v, attention_mask, return_weights, q_raw, state=None) -> CoreOutput``
            and a class attribute ``supports_state``.
        heads_per_core: how many heads each core owns, in order; sums to n_heads.
        rotary: apply rotary position embedding to q and k before the cores.
        attention_bias: the qkv and output projections have biases (GPT-2's); none by default.
    """

    def __init__(
        self, *, d_model: int, n_heads: int, cores: list[nn.Module], heads_per_core: list[int], rotary: bool,
        attention_bias: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if sum(heads_per_core) != n_heads or len(cores) != len(heads_per_core):
            raise ValueError(f"heads_per_core {heads_per_core} must assign all {n_heads} heads to the cores")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=attention_bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=attention_bias)
        self.rotary = RotaryEmbedding(self.head_dim) if rotary else None
        self.cores = nn.ModuleList(cores)
        self.heads_per_core = [h for h in heads_per_core]
        # the cores that own heads, with their heads (a slice, or None for all of them: no slicing per call)
        parts, start = [], 0
        for index, count in enumerate(heads_per_core):
            if count:
                parts.append((index, None if count == n_heads else slice(start, start + count)))
            start += count
        self._parts = parts
        # whether this layer decodes incrementally (every core carries a state and is causal), resolved once
        self.supports_state = all(core.supports_state and core.causal for core in self.cores)

    @property
    def honours_segments(self) -> bool:
        """Whether this layer keeps packed documents apart itself: every core declares ``honours_segments``
        (otherwise the block runs each document alone, see ``layers.block``)."""
        return all(getattr(core, "honours_segments", False) for core in self.cores)

    def forward(
        self,
        x: Tensor,
        attention_mask: Tensor | None = None,
        return_gates: bool = False,
        return_weights: bool = False,
        state: dict | None = None,
        position_ids: Tensor | None = None,
        segments: Segments | None = None,
    ) -> Tensor | AttentionOutput:
        """x: (B, T, D); attention_mask: (B, T), 1 = real token. Returns (B, T, D) or an AttentionOutput.
        ``state``: the decoding state, read and updated in place (see the module docstring). ``position_ids``
        (B, T): the rotary positions (default 0..T-1); ``segments``: packed documents (``ops.segments``), passed to
        the cores as ``segment_ids`` (only when every core ``honours_segments``)."""
        check_layer_input(type(self).__name__, x, self.d_model, attention_mask)
        if segments is not None:
            if not self.honours_segments:
                raise ValueError(f"{type(self).__name__} cannot keep packed documents apart itself")
            position_ids = segments.position_ids
        packed = {} if segments is None else {"segment_ids": segments.ids}
        batch, seq_len, _ = x.shape
        position = 0
        if state is not None:
            if not self.supports_state:
                raise ValueError(f"{type(self).__name__} cannot decode incrementally (it carries no state)")
            position = state.get("length", 0)
            state["length"] = position + seq_len
            core_states = state.setdefault("cores", [{} for _ in self.cores])
        qkv = self.qkv(x).view(batch, seq_len, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q_raw, k, v = qkv.unbind(0)
        q = q_raw
        if self.rotary is not None:
            q, k = self.rotary(qkv[:2], position, position_ids).unbind(0)  # queries and keys in one product
        heads, gates, weights = [], {}, []
        for index, part in self._parts:
            core_state = None if state is None else core_states[index]
            core_inputs = (q, k, v, q_raw) if part is None else (q[:, part], k[:, part], v[:, part], q_raw[:, part])
            result = self.cores[index](x, *core_inputs[:3], attention_mask, return_weights, core_inputs[3],
                                       state=core_state, **packed)  # fmt: skip
            heads.append(result.heads)
            gates.update(result.gates)
            weights.append(result.weights)
        merged = heads[0] if len(heads) == 1 else torch.cat(heads, dim=1)
        output = self.out_proj(merged.transpose(1, 2).reshape(batch, seq_len, self.d_model))
        if not (return_gates or return_weights):
            return output
        return AttentionOutput(
            output,
            gates if return_gates else None,
            torch.cat(weights, dim=1) if return_weights else None,
        )

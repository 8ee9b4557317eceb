"""The pre-LN block: x += Attn(LN1 x); x += W_gru GRU(x) (optional); x += FFN(LN2 x), LN a LayerNorm or an RMSNorm
(``layers.norm``).

The block only passes decoding states along: ``state["mixer"]`` to its sequence mixer, ``state["injection"]`` to
its recurrent injection; each keeps its own (see ``layers.attention``).

Packed documents (``segments``, from ``position_ids``; see ``ops.segments``): a mixer or injection that declares
``honours_segments = True`` receives ``segments`` and keeps every document to itself; for any other (the default)
the block re-batches the documents into one padded row each, runs it there with an attention mask, and scatters the
result back (index arithmetic, no loop over documents). Either way no information crosses a document boundary.
Native: softmax, markov, rff, both hybrids, alibi, forgetting, t5_bias, dynamic_bias, stick_breaking, cope, retnet,
rwkv, scan and the minGRU injection; run per document: linformer, s4d, h3, hyena, gru, selective, forgetting with
kv_shift and the GRU injection."""

from __future__ import annotations

import inspect

from torch import Tensor, nn

from markovformer.layers.attention import AttentionOutput
from markovformer.layers.norm import build_norm
from markovformer.ops.segments import Segments


def honours_segments(module: nn.Module) -> bool:
    """Whether ``module`` keeps packed documents apart itself (its declared ``honours_segments``; default False)."""
    return bool(getattr(module, "honours_segments", False))


def _takes(module: nn.Module, argument: str) -> bool:
    return argument in inspect.signature(module.forward).parameters


def _per_document(module: nn.Module, x: Tensor, segments: Segments, *args) -> tuple:
    """Run ``module(x, mask, *args)`` with each document of the packed x (B, T, D) alone, as the rows of a padded
    batch (positions restarting at each document's first ``position_ids``); the output scattered back to (B, T, D)
    (zeros at padding), with its gates, if any, scattered back to (B, h, T, s) and its attention weights, if any,
    to block-diagonal (B, h, T, T)."""
    layout = segments.layout
    extra = {"position_ids": layout.pack(segments.position_ids)} if _takes(module, "position_ids") else {}
    result = module(layout.pack(x), layout.mask, *args, **extra)
    if not isinstance(result, AttentionOutput):
        return layout.unpack(result), None, None
    gates = None if result.gates is None else {k: layout.unpack(v, time_dim=2) for k, v in result.gates.items()}
    weights = None if result.weights is None else layout.unpack_pairs(result.weights)
    return layout.unpack(result.output), gates, weights


class PreLNBlock(nn.Module):
    """The pre-LN block of the module docstring around a sequence mixer ``attention`` (any attention kind's layer),
    a position-wise ``ffn`` and an optional recurrent injection ``gru``, all of width ``d_model``; ``dropout`` on
    each sublayer's output while training; ``norm``: the two norms' kind (``layers.norm.NORMS``); ``bias=False``:
    LayerNorms without an additive bias (nanoGPT's ``bias=False``; an RMSNorm has none)."""

    def __init__(
        self,
        d_model: int,
        attention: nn.Module,
        ffn: nn.Module,
        gru: nn.Module | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        norm: str = "layernorm",
    ) -> None:
        super().__init__()
        self.attention_norm = build_norm(norm, d_model, bias)
        self.attention = attention
        self.gru = gru
        self.ffn_norm = build_norm(norm, d_model, bias)
        self.ffn = ffn
        self.dropout = nn.Dropout(dropout)
        # whether the block decodes incrementally (its mixer and its injection, if any, carry states), resolved once
        self.supports_state = bool(getattr(attention, "supports_state", False)) and (
            gru is None or bool(getattr(gru, "supports_state", False))
        )
        self._mixer_takes_positions = _takes(attention, "position_ids")

    def forward(
        self, x: Tensor, attention_mask: Tensor | None = None, return_gates: bool = False, return_weights: bool = False,
        state: dict | None = None, segments: Segments | None = None, position_ids: Tensor | None = None,
    ) -> AttentionOutput:  # fmt: skip
        """Returns an AttentionOutput whose ``output`` is the block's output (B, T, D). ``state``: the block's
        decoding state ({} at the first call), read and updated in place. ``segments``: the documents of a packed
        batch (see the module docstring). ``position_ids`` (B, T): the rotary positions of a padded batch (each
        row's real tokens from 0), for a mixer that rotates; others ignore them."""
        mixer, injection = {}, {}
        if segments is not None:
            if state is not None:
                raise ValueError("packed documents (position_ids) cannot be decoded incrementally")
            return self._packed(x, attention_mask, return_gates, return_weights, segments)
        if state is not None:
            if not self.supports_state:
                raise ValueError(f"a block of {type(self.attention).__name__} cannot decode incrementally")
            mixer = {"state": state.setdefault("mixer", {})}
            injection = {"state": state.setdefault("injection", {})}
        if position_ids is not None and self._mixer_takes_positions:
            mixer["position_ids"] = position_ids
        attended = self.attention(self.attention_norm(x), attention_mask, return_gates, return_weights, **mixer)
        if not isinstance(attended, AttentionOutput):
            attended = AttentionOutput(attended, None, None)
        dropout = self.dropout if self.training and self.dropout.p else _identity  # no call per step when off
        x = x + dropout(attended.output)
        if self.gru is not None:
            x = x + dropout(self.gru(x, attention_mask, **injection))
        x = x + dropout(self.ffn(self.ffn_norm(x)))
        return AttentionOutput(x, attended.gates, attended.weights)

    def _packed(self, x: Tensor, attention_mask, return_gates: bool, return_weights: bool, segments: Segments):
        """The forward pass over packed documents: each sublayer natively or through ``_per_document``."""
        normed = self.attention_norm(x)
        if honours_segments(self.attention):
            attended = self.attention(normed, attention_mask, return_gates, return_weights, segments=segments)
            if not isinstance(attended, AttentionOutput):
                attended = AttentionOutput(attended, None, None)
        else:
            attended = AttentionOutput(*_per_document(self.attention, normed, segments, return_gates, return_weights))
        x = x + self.dropout(attended.output)
        if self.gru is not None:
            if honours_segments(self.gru):
                injected = self.gru(x, attention_mask, segments=segments)
            else:
                injected = _per_document(self.gru, x, segments)[0]
            x = x + self.dropout(injected)
        x = x + self.dropout(self.ffn(self.ffn_norm(x)))
        return AttentionOutput(x, attended.gates, attended.weights)

def _identity(x: Tensor) -> Tensor:
    return x

"""The pre-LN block: x += Attn(LN1 x); x += W_gru GRU(x) (optional); x += FFN(LN2 x).

The block only passes decoding states along: ``state["mixer"]`` to its sequence mixer, ``state["injection"]`` to
its recurrent injection; each keeps its own (see ``layers.attention``)."""

from __future__ import annotations

from torch import Tensor, nn

from markovformer.layers.attention import AttentionOutput


class PreLNBlock(nn.Module):
    def __init__(
        self, d_model: int, attention: nn.Module, ffn: nn.Module, gru: nn.Module | None = None, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(d_model)
        self.attention = attention
        self.gru = gru
        self.ffn_norm = nn.LayerNorm(d_model)
        self.ffn = ffn
        self.dropout = nn.Dropout(dropout)
        # whether the block decodes incrementally (its mixer and its injection, if any, carry states), resolved once
        self.supports_state = bool(getattr(attention, "supports_state", False)) and (
            gru is None or bool(getattr(gru, "supports_state", False))
        )

    def forward(
        self, x: Tensor, attention_mask: Tensor | None = None, return_gates: bool = False, return_weights: bool = False,
        state: dict | None = None,
    ) -> AttentionOutput:  # fmt: skip
        """Returns an AttentionOutput whose ``output`` is the block's output (B, T, D). ``state``: the block's
        decoding state ({} at the first call), read and updated in place."""
        mixer, injection = {}, {}
        if state is not None:
            if not self.supports_state:
                raise ValueError(f"a block of {type(self.attention).__name__} cannot decode incrementally")
            mixer = {"state": state.setdefault("mixer", {})}
            injection = {"state": state.setdefault("injection", {})}
        attended = self.attention(self.attention_norm(x), attention_mask, return_gates, return_weights, **mixer)
        if not isinstance(attended, AttentionOutput):
            attended = AttentionOutput(attended, None, None)
        dropout = self.dropout if self.training and self.dropout.p else _identity  # no call per step when off
        x = x + dropout(attended.output)
        if self.gru is not None:
            x = x + dropout(self.gru(x, attention_mask, **injection))
        x = x + dropout(self.ffn(self.ffn_norm(x)))
        return AttentionOutput(x, attended.gates, attended.weights)


def _identity(x: Tensor) -> Tensor:
    return x

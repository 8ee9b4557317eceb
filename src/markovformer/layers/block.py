"""The pre-LN block: x += Attn(LN1 x); x += W_gru GRU(x) (optional); x += FFN(LN2 x).

The block only passes decoding states along: ``state["mixer"]`` to its sequence mixer, ``state["injection"]`` to
its recurrent injection; each keeps its own (see ``layers.attention``)."""

from __future__ import annotations

from torch import Tensor, nn

from markovformer.layers.attention import AttentionOutput


class PreLNBlock(nn.Module):
    def __init__(
        self,
        d_model: int,
        attention: nn.Module,
        ffn: nn.Module,
        gru: nn.Module | None = None,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        """``bias=False``: LayerNorms without an additive bias (nanoGPT's ``bias=False``)."""
        super().__init__()
        self.attention_norm = nn.LayerNorm(d_model, bias=bias)
        self.attention = attention
        self.gru = gru
        self.ffn_norm = nn.LayerNorm(d_model, bias=bias)
        self.ffn = ffn
        self.dropout = nn.Dropout(dropout)

    @property
    def supports_state(self) -> bool:
        """Whether the block decodes incrementally: its mixer and its injection (if any) carry states."""
        return bool(getattr(self.attention, "supports_state", False)) and (
            self.gru is None or bool(getattr(self.gru, "supports_state", False))
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
        x = x + self.dropout(attended.output)
        if self.gru is not None:
            x = x + self.dropout(self.gru(x, attention_mask, **injection))
        x = x + self.dropout(self.ffn(self.ffn_norm(x)))
        return AttentionOutput(x, attended.gates, attended.weights)

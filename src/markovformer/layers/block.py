"""The pre-LN block: x += Attn(LN1 x); x += W_gru GRU(x) (optional); x += FFN(LN2 x)."""

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

    def forward(
        self, x: Tensor, attention_mask: Tensor | None = None, return_gates: bool = False, return_weights: bool = False
    ) -> AttentionOutput:
        """Returns an AttentionOutput whose ``output`` is the block's output (B, T, D)."""
        attended = self.attention(self.attention_norm(x), attention_mask, return_gates, return_weights)
        if not isinstance(attended, AttentionOutput):
            attended = AttentionOutput(attended, None, None)
        x = x + self.dropout(attended.output)
        if self.gru is not None:
            x = x + self.dropout(self.gru(x, attention_mask))
        x = x + self.dropout(self.ffn(self.ffn_norm(x)))
        return AttentionOutput(x, attended.gates, attended.weights)

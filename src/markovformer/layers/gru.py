"""GRU injection (Eq. 4-5): x <- x + W_gru · GRU(x), a recurrent path beside attention.

``INJECTION_KINDS`` names the recurrences that can fill the role: ``"gru"`` (nn.GRU, sequential) and
``"min_gru"`` (``layers.min_gru``, trains in parallel on the linear scan); ``build_injection`` makes one.
nn.GRU stays the default: in Table I's speech cell (configs/speech_digits.yaml, 1000 steps, validation WER, seeds
0/1/2) minGRU reached 0.333/0.286/0.305 (mean 0.308) against nn.GRU's 0.243/0.286/0.265 (mean 0.265), worse or
level in every seed, though it trained 2.3-3x faster there (56-60 s against 127-185 s, CPU, shared machine).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from markovformer.layers.min_gru import MinGRUInjection
from markovformer.ops.attention_inputs import check_layer_input
from markovformer.ops.padding import real_runs, roll_rows

INJECTION_KINDS = ("gru", "min_gru")


class GRUInjection(nn.Module):
    """A GRU over the sequence, projected back to d_model. Bidirectional only in bidirectional models.

    Padded positions (attention_mask 0, before or after each row's real tokens) never reach the real tokens'
    states; their outputs are zero. A unidirectional one decodes from its hidden state (``state["hidden"]``,
    (1, B, d_model)), which padded positions leave unchanged.
    """

    def __init__(self, d_model: int, bidirectional: bool = False) -> None:
        super().__init__()
        self.d_model = d_model
        self.gru = nn.GRU(d_model, d_model, batch_first=True, bidirectional=bidirectional)
        self.proj = nn.Linear(d_model * (2 if bidirectional else 1), d_model, bias=False)

    @property
    def supports_state(self) -> bool:
        """Whether it decodes from its hidden state, one token per call: a unidirectional one does."""
        return not self.gru.bidirectional

    def forward(self, x: Tensor, attention_mask: Tensor | None = None, state: dict | None = None) -> Tensor:
        check_layer_input(type(self).__name__, x, self.d_model, attention_mask)
        if state is not None and not self.supports_state:
            raise ValueError("a bidirectional GRU reads the whole sequence: it cannot decode incrementally")
        initial = None if state is None else state.get("hidden")
        if attention_mask is None or bool(attention_mask.all()):
            states, final = self._recur(x, initial)
        else:
            starts, lengths = real_runs(attention_mask, "the GRU")
            packed = pack_padded_sequence(roll_rows(x, starts), lengths.clamp_min(1).cpu(), batch_first=True,
                                          enforce_sorted=False)  # fmt: skip
            states, final = self._recur(packed, initial)
            states, _ = pad_packed_sequence(states, batch_first=True, total_length=x.shape[1])
            states = roll_rows(states, -starts) * attention_mask[..., None].to(x.dtype)
            if state is not None:  # a row with no real token here keeps its state
                kept = torch.zeros_like(final) if initial is None else initial
                final = torch.where((lengths > 0)[None, :, None], final, kept)
        if state is not None:
            state["hidden"] = final
        return self.proj(states)

    def _recur(self, inputs, initial):
        """``nn.GRU``; off cuDNN where cuDNN has no backward (an eval-mode model differentiated on a GPU, as in
        saliency or gradient inspection)."""
        if not self.training and torch.is_grad_enabled() and self.gru.weight_ih_l0.is_cuda:
            with torch.backends.cudnn.flags(enabled=False):
                return self.gru(inputs, initial)
        return self.gru(inputs, initial)


def build_injection(kind: str, d_model: int, bidirectional: bool = False) -> nn.Module:
    """The recurrent injection of one block: ``kind`` one of INJECTION_KINDS."""
    if kind == "gru":
        return GRUInjection(d_model, bidirectional=bidirectional)
    if kind == "min_gru":
        return MinGRUInjection(d_model, bidirectional=bidirectional)
    raise ValueError(f"injection kind {kind!r}: expected one of {INJECTION_KINDS}")

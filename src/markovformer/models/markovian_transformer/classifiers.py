"""The Markovian Transformer's heads that label what it reads: a sequence, each position, or frames (CTC)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.models.inputs import check_rows_have_tokens
from markovformer.models.markovian_transformer.config import MarkovianTransformerConfig
from markovformer.models.markovian_transformer.modeling import _WithBackbone
from markovformer.ops.losses import check_labels, token_cross_entropy
from markovformer.ops.padding import check_attention_mask, right_padded_lengths
from markovformer.ops.precision import compute_dtype


def _for_loss(logits: Tensor) -> Tensor:
    """Losses in at least float32: half-precision logits are upcast, float64 ones kept."""
    return logits.to(compute_dtype(logits))


class MarkovianTransformerForSequenceClassification(_WithBackbone):
    """One label per sequence from pooled hidden states (``pooling``: mean over real tokens, last real token, or a
    learned [CLS] vector put before each row's first real token, after its left padding if any, as a tokenizer
    padding on the left puts its [CLS] token)."""

    def __init__(self, config: MarkovianTransformerConfig) -> None:
        if config.pooling == "cls" and config.causal:
            raise ValueError("MarkovianTransformerConfig.pooling='cls' needs causal=False (use 'last' when causal)")
        super().__init__(config)
        self.cls = nn.Parameter(torch.zeros(config.d_model)) if config.pooling == "cls" else None
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.init_weights(self.classifier)

    def forward(
        self, input_ids=None, input_features=None, attention_mask=None, labels=None, return_gates=False,
        return_weights=False,
    ):  # fmt: skip
        """Token ids or feature frames (B, T), ``attention_mask`` (B, T) (0 at padding, on either side; a row of
        padding only, with nothing to classify, is refused) -> ``logits`` (B, num_labels) of the pooled hidden states;
        with ``labels`` (B,) class ids (-100: not scored), ``loss``: their mean cross-entropy."""
        inputs = self.model.given_inputs(input_ids, input_features, attention_mask)
        positions = None if inputs is None else self.model.positions(inputs.shape[:2], attention_mask)
        hidden = self.model.embed_inputs(input_ids, input_features, position_ids=positions, below_end=True)
        batch, seq_len = hidden.shape[:2]
        if attention_mask is not None:  # checked before _with_cls reads it (0.5 was read as 0, a short one cut tokens)
            check_attention_mask(attention_mask, (batch, seq_len))
            check_rows_have_tokens(attention_mask, "attention_mask")  # 'last' read a padding token's output
        mask = attention_mask if attention_mask is not None else hidden.new_ones(batch, seq_len)
        if self.cls is not None:
            hidden, mask, cls_at = self._with_cls(hidden, mask)
            positions = None if attention_mask is None else self.model.positions(mask.shape, mask)
        output = self.model.encode(hidden, mask, return_gates, return_weights, positions=positions)
        states = output.last_hidden_state
        if self.config.pooling == "cls":
            pooled = states[torch.arange(batch, device=states.device), cls_at]
        elif self.config.pooling == "last":
            # the last real token under left or right padding: the first 1 of the reversed mask
            last = mask.shape[1] - 1 - mask.long().flip(-1).argmax(-1)
            pooled = states[torch.arange(batch, device=states.device), last]
        else:
            weights = mask[..., None].to(states.dtype)
            pooled = (states * weights).sum(1) / weights.sum(1).clamp_min(1.0)
        output.logits = self.classifier(pooled)
        if labels is not None:  # one class id per sequence, or -100 (a batch of -100 only has loss 0, not nan)
            output.loss = token_cross_entropy(output.logits, labels)
        return output

    def _with_cls(self, hidden: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """hidden (B, T, D) and mask (B, T) with the [CLS] vector inserted before each row's first real token
        (B, T + 1, D), their mask (B, T + 1) and where the vector is (B,)."""
        batch, seq_len = mask.shape
        cls_at = mask.long().argmax(-1)  # the first real token (0 in a row of padding only)
        columns = torch.arange(seq_len + 1, device=mask.device)[None]
        is_cls = columns == cls_at[:, None]
        source = columns - (columns > cls_at[:, None]).long()  # column j reads input j before the vector, j - 1 after
        source = source.clamp_max(seq_len - 1)
        moved = hidden.gather(1, source[..., None].expand(-1, -1, hidden.shape[-1]))
        hidden = torch.where(is_cls[..., None], self.cls.to(hidden.dtype), moved)
        return hidden, mask.long().gather(1, source).masked_fill(is_cls, 1).to(mask.dtype), cls_at


class _PerPositionHead(_WithBackbone):
    """A linear classifier over every position's hidden state; subclasses define the loss."""

    def __init__(self, config: MarkovianTransformerConfig) -> None:
        super().__init__(config)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.init_weights(self.classifier)

    def loss(self, logits: Tensor, labels: Tensor, attention_mask: Tensor | None) -> Tensor:
        """The scalar loss ``forward`` reports: ``logits`` (B, T, num_labels) against ``labels`` (-100 not scored)."""
        raise NotImplementedError

    def forward(
        self, input_ids=None, input_features=None, attention_mask=None, labels=None, return_gates=False,
        return_weights=False, position_ids=None,
    ):  # fmt: skip
        """``position_ids``: packed documents (see ``MarkovianTransformerModel.forward``)."""
        output = self._encode(input_ids, input_features, attention_mask, return_gates, return_weights,
                              position_ids=position_ids)  # fmt: skip
        output.logits = self.classifier(output.last_hidden_state)
        if labels is not None:
            output.loss = self.loss(output.logits, labels, attention_mask)
        return output


class MarkovianTransformerForTokenClassification(_PerPositionHead):
    """One label per position; label -100 is ignored."""

    def loss(self, logits: Tensor, labels: Tensor, attention_mask: Tensor | None) -> Tensor:
        return token_cross_entropy(logits, labels)


class MarkovianTransformerForCTC(_PerPositionHead):
    """Frame-level CTC over ``num_labels`` symbols, index 0 the blank. ``labels`` (B, L) padded with -100."""

    blank = 0

    def __init__(self, config: MarkovianTransformerConfig) -> None:
        if config.num_labels < 2:
            raise ValueError("MarkovianTransformerConfig.num_labels must count the blank and at least one symbol")
        super().__init__(config)

    def loss(self, logits: Tensor, labels: Tensor, attention_mask: Tensor | None) -> Tensor:
        batch, frames = logits.shape[:2]
        if attention_mask is not None:
            input_lengths = right_padded_lengths(attention_mask, "CTC")
        else:
            input_lengths = torch.full((batch,), frames, dtype=torch.long, device=labels.device)
        check_labels(labels, self.config.num_labels)
        if labels.dim() != 2 or labels.shape[0] != batch:  # ctc_loss's own error names none of them
            raise ValueError(f"labels must be (B, L) = ({batch}, L), padded with -100; got {tuple(labels.shape)}")
        target_mask = labels != -100
        if bool((labels[target_mask] == self.blank).any()):
            raise ValueError("CTC labels must not contain the blank index 0")
        log_probs = _for_loss(logits).log_softmax(-1).transpose(0, 1)  # (T, B, C)
        # an utterance with too few frames for its labels has no alignment: infinite loss. Training skips it (its
        # gradient would be nan); scoring reports it, where it counted as 0 nats and lowered the validation loss
        return F.ctc_loss(
            log_probs, labels.clamp_min(0), input_lengths, target_mask.long().sum(-1), blank=self.blank,
            zero_infinity=self.training,
        )  # fmt: skip

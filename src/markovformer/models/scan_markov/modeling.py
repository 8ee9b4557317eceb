"""The scan Markov model: a gated linear recurrence over token + position embeddings, decoded through a
LayerNorm, an MLP and the tied embedding matrix.

    e_t = E[x_t] + P[pos_t];  [A_t, B_t] = σ(gate_proj(e_t));  h_t = A_t ⊙ h_{t-1} + B_t ⊙ e_t, h_{-1} = 0
    logits_t = decode(LayerNorm(h_t)) Eᵀ

``h_{-1} = 0`` makes h_0 = B_0 ⊙ e_0: the first step has no A gate. In markov mode every position t has its own
window of the last n tokens, with positions 0.. counted from the window start (or, as an option, back from its
end), all computed in parallel; in recurrent mode h runs over the whole prefix with absolute positions. Generation
feeds tokens through ``step``, which is the same recurrence token by token (the seed's generator differed from its
trainer; this one does not).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from markovformer.models.generation import GenerationMixin, Step
from markovformer.models.inputs import check_token_ids
from markovformer.models.pretrained import PreTrainedModel
from markovformer.models.scan_markov.config import ScanMarkovConfig, check_order
from markovformer.ops.losses import token_cross_entropy
from markovformer.ops.padding import check_attention_mask, right_padded_lengths
from markovformer.ops.scan import linear_scan, window_offsets, windowed_linear_scan
from markovformer.ops.segments import Segments, document_starts


@dataclass
class ScanMarkovOutput:
    logits: Tensor | None = None  # (B, T, V): next-token logits at every position
    loss: Tensor | None = None  # mean next-token cross-entropy over labels != -100
    hidden_states: Tensor | None = None  # (B, T, D): the states h_t, before the LayerNorm


@dataclass
class ScanMarkovState:
    """Where incremental decoding stands after ``position`` tokens of every row.

    Recurrent mode keeps ``hidden``, h after the last token (B, D); markov mode keeps ``window``, the last
    min(n, position) tokens (B, L), since its state is recomputed from exactly those.
    """

    position: int = 0
    hidden: Tensor | None = None
    window: Tensor | None = None


class ScanMarkovForCausalLM(GenerationMixin, PreTrainedModel):
    """Next-token prediction with the scan recurrence. ``labels`` are the inputs (shifted inside); -100 is ignored."""

    config_class = ScanMarkovConfig

    def __init__(self, config: ScanMarkovConfig) -> None:
        super().__init__(config)
        width, hidden = config.d_model, config.ffn_mult * config.d_model
        self.embed = nn.Embedding(config.vocab_size, width)
        self.position_embedding = nn.Embedding(config.max_positions, width)
        self.dropout = nn.Dropout(config.dropout)
        self.gate_proj = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, 2 * width))
        self.norm = nn.LayerNorm(width)
        decoder_dropout = config.dropout if config.decoder_dropout is None else config.decoder_dropout
        self.decoder = nn.Sequential(
            nn.Linear(width, hidden), nn.GELU(), nn.Dropout(decoder_dropout), nn.Linear(hidden, width)
        )
        self.lm_head = nn.Linear(width, config.vocab_size, bias=False)
        self.init_weights()
        self.lm_head.weight = self.embed.weight

    def window_size(self, order: int | None = None) -> int | None:
        """The window n of a call: ``order`` if given, else the config's; None in recurrent mode."""
        if self.config.context_mode == "recurrent":
            if order is not None:
                raise ValueError(f"order={order!r}: only meaningful with context_mode='markov'")
            return None
        if order is None:
            return self.config.order
        check_order(order, self.config.max_positions, "order")
        return order

    def gated_inputs(self, embeddings: Tensor) -> tuple[Tensor, Tensor]:
        """The recurrence inputs (a, b) = (A, B ⊙ e) with [A, B] = σ(gate_proj(e)); e (..., D) -> two (..., D)."""
        decay, inject = torch.sigmoid(self.gate_proj(embeddings)).chunk(2, dim=-1)
        return decay, inject * embeddings

    def skip_context_tokens(self, decay: Tensor, inject: Tensor) -> tuple[Tensor, Tensor]:
        """In training, skip each recurrence step (decay, inject) (..., D) with probability ``context_dropout``:
        (A, B ⊙ e) becomes (1, 0), so h passes through it unchanged. The identity otherwise."""
        if not (self.training and self.config.context_dropout > 0):
            return decay, inject
        skipped = torch.rand(decay.shape[:-1], device=decay.device)[..., None] < self.config.context_dropout
        return decay.masked_fill(skipped, 1.0), inject.masked_fill(skipped, 0.0)

    def recurrent_states(self, input_ids: Tensor) -> Tensor:
        """h over the whole prefix, absolute positions: input_ids (B, T) -> (B, T, D)."""
        length = input_ids.shape[1]
        if length > self.config.max_positions:
            raise ValueError(
                f"input_ids has length {length} > max_positions={self.config.max_positions}: the recurrent mode "
                "has no position embedding beyond it"
            )
        positions = self.position_embedding(torch.arange(length, device=input_ids.device))
        decay, inject = self.skip_context_tokens(*self.gated_inputs(self.dropout(self.embed(input_ids) + positions)))
        return linear_scan(decay, inject, backend=self.config.backend)[0]

    def markov_states(self, input_ids: Tensor, window: int) -> Tensor:
        """h over the last ``window`` tokens at every position: (B, T) -> (B, T, D).

        Token s seen from the window ending at t has position s - max(0, t - window + 1) (``window_positions="end"``:
        t - s), so its embedding, gates and input differ per window: they are built for all (t, offset) pairs,
        (B, T, window, D), then scanned.
        Without active dropout they depend on (token, position) only, so when that table (V × window) is smaller
        than the pairs, the gates run on the table once and are gathered: the same values, window times cheaper.
        """
        source, position, _ = window_offsets(input_ids.shape[1], window, input_ids.device)
        if self.config.window_positions == "end":  # offset o of the window ending at t holds step t - window + 1 + o
            position = (window - 1 - torch.arange(window, device=input_ids.device)).expand_as(position)
        tokens = input_ids[:, source]  # (B, T, window)
        dropout_active = self.training and self.dropout.p > 0
        if dropout_active or self.config.vocab_size * window >= tokens.numel():
            embeddings = self.embed(tokens) + self.position_embedding(position)
            decay, inject = self.gated_inputs(self.dropout(embeddings))
        else:
            table = self.embed.weight[:, None] + self.position_embedding.weight[None, :window]  # (V, window, D)
            decay_table, inject_table = (part.flatten(0, 1) for part in self.gated_inputs(table))
            pair = tokens * window + position
            decay, inject = decay_table[pair], inject_table[pair]
        decay, inject = self.skip_context_tokens(decay, inject)
        backend = "naive" if self.config.backend == "naive" else "auto"
        return windowed_linear_scan(decay, inject, window, backend=backend)

    def logits_from_states(self, states: Tensor) -> Tensor:
        """decode(LayerNorm(h)) Eᵀ: states (..., D) -> logits (..., V)."""
        return self.lm_head(self.decoder(self.norm(states)))

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        order: int | None = None,
        label_smoothing: float = 0.0,
        position_ids: Tensor | None = None,
    ) -> ScanMarkovOutput:
        """input_ids (B, T); attention_mask (B, T) right-padded, 1 = real (padding follows every real token, so it
        never reaches one through the causal recurrence); labels (B, T) aligned with the inputs.
        ``order`` overrides the markov window n for this call (e.g. to train on a mixture of n).
        ``position_ids`` (B, T): packed documents (positions restarting at 0 at each): each document is run alone
        (re-batched, one padded row per document) and its first token is not scored.
        """
        if position_ids is not None:
            if tuple(position_ids.shape) != tuple(input_ids.shape):
                raise ValueError(f"position_ids must be (B, T) = {tuple(input_ids.shape)}; "
                                 f"got {tuple(position_ids.shape)}")  # fmt: skip
            layout = Segments.from_positions(position_ids, attention_mask).layout
            alone = self(layout.pack(input_ids), layout.mask, order=order)
            output = ScanMarkovOutput(layout.unpack(alone.logits), None, layout.unpack(alone.hidden_states))
            if labels is not None:
                targets = labels[:, 1:].masked_fill(document_starts(position_ids)[:, 1:], -100)
                output.loss = token_cross_entropy(output.logits[:, :-1], targets, label_smoothing)
            return output
        check_token_ids(input_ids, self.config.vocab_size)
        if attention_mask is not None:
            check_attention_mask(attention_mask, input_ids.shape)
            right_padded_lengths(attention_mask, "ScanMarkovForCausalLM")
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={label_smoothing!r}: must lie in [0, 1)")
        window = self.window_size(order)
        states = self.recurrent_states(input_ids) if window is None else self.markov_states(input_ids, window)
        output = ScanMarkovOutput(logits=self.logits_from_states(states), hidden_states=states)
        if labels is not None:
            if tuple(labels.shape) != tuple(input_ids.shape):
                raise ValueError(f"labels must be (B, T) = {tuple(input_ids.shape)}, got {tuple(labels.shape)}")
            output.loss = token_cross_entropy(output.logits[:, :-1], labels[:, 1:], label_smoothing)
        return output

    def step(
        self, input_ids: Tensor, state: ScanMarkovState | None = None, order: int | None = None
    ) -> tuple[Tensor, ScanMarkovState]:
        """Feed one token per row, input_ids (B,); returns the next-token logits (B, V) and the new state.

        Equal to ``forward`` on the whole sequence at the same position. Recurrent mode: h = A ⊙ h + B ⊙ e at
        position ``state.position``. Markov mode: h recomputed over the last n tokens (keep n fixed per sequence).
        """
        check_token_ids(input_ids, self.config.vocab_size, dims=1)
        state = state if state is not None else ScanMarkovState()
        window = self.window_size(order)
        if window is None:
            if state.position >= self.config.max_positions:
                raise ValueError(
                    f"position {state.position} is beyond max_positions={self.config.max_positions}: the recurrent "
                    "mode has no position embedding there"
                )
            embeddings = self.embed(input_ids) + self.position_embedding.weight[state.position]
            decay, inject = self.gated_inputs(self.dropout(embeddings))
            hidden = inject if state.hidden is None else torch.addcmul(inject, decay, state.hidden)
            return self.logits_from_states(hidden), ScanMarkovState(state.position + 1, hidden=hidden)
        tokens = input_ids[:, None] if state.window is None else torch.cat([state.window, input_ids[:, None]], 1)
        tokens = tokens[:, -window:]
        hidden = self.markov_states(tokens, window)[:, -1]
        return self.logits_from_states(hidden), ScanMarkovState(state.position + 1, window=tokens)

    def start_decoding(
        self, input_ids: Tensor, attention_mask: Tensor | None, max_new_tokens: int
    ) -> tuple[Tensor, Step]:
        """``GenerationMixin``'s start: every prompt token goes through ``step``, the training recurrence, and so
        does every chosen token. Prompts must be unpadded (the recurrence has no padding steps)."""
        check_token_ids(input_ids, self.config.vocab_size)
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ValueError("ScanMarkovForCausalLM generates from unpadded prompts: give rows of equal length, or "
                             "one prompt at a time")  # fmt: skip
        fed = input_ids.shape[1] + max_new_tokens - 1
        if self.window_size() is None and fed > self.config.max_positions:
            raise ValueError(
                f"a prompt of {input_ids.shape[1]} tokens plus max_new_tokens={max_new_tokens} needs {fed} positions "
                f"but max_positions={self.config.max_positions}"
            )
        state = None
        for token in input_ids.unbind(1):
            logits, state = self.step(token, state)
        states = [state]

        def feed(tokens: Tensor) -> Tensor:
            next_logits, states[0] = self.step(tokens, states[0])
            return next_logits

        return logits, feed

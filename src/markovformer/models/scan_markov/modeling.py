"""The scan Markov model: a gated linear recurrence over token + position embeddings, decoded through a
LayerNorm, an MLP and the tied embedding matrix.

    e_t = E[x_t] + P[pos_t];  [A_t, B_t] = σ(gate_proj(e_t));  h_t = A_t ⊙ h_{t-1} + B_t ⊙ e_t, h_{-1} = 0
    logits_t = decode(LayerNorm(h_t)) Eᵀ

``h_{-1} = 0`` makes h_0 = B_0 ⊙ e_0: the first step has no A gate. In markov mode every position t has its own
window of the last n tokens, with positions 0.. counted from the window start (or, as an option, back from its
end), all computed in parallel; in recurrent mode h runs over the whole prefix with absolute positions. Decoding
continues a sequence through ``forward(..., state=)``, the training computation over the new tokens only (the seed's
generator differed from its trainer; this one does not): recurrent mode carries h after the last token, markov
mode the last n - 1 tokens, from which each new position's window state is recomputed.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from markovformer.models.generation import GenerationMixin, Step
from markovformer.models.inputs import check_input_values, check_token_ids
from markovformer.models.pretrained import PreTrainedModel, model_output
from markovformer.models.scan_markov.config import ScanMarkovConfig, check_order
from markovformer.models.scoring import ScoredInSlices
from markovformer.ops.losses import next_token_cross_entropy
from markovformer.ops.padding import check_attention_mask, right_padded_lengths
from markovformer.ops.scan import linear_scan, window_offsets, windowed_linear_scan
from markovformer.ops.segments import SegmentBatch, Segments


@model_output
class ScanMarkovOutput:
    """What ``ScanMarkovForCausalLM.forward`` returns: ``logits`` (B, T, V), the next-token logits at every
    position; ``loss``, given labels, their mean cross-entropy in nats (-100 not scored); ``hidden_states``
    (B, T, D), the states h_t before the LayerNorm."""

    logits: Tensor | None = None  # (B, T, V): next-token logits at every position
    loss: Tensor | None = None  # mean next-token cross-entropy over labels != -100
    hidden_states: Tensor | None = None  # (B, T, D): the states h_t, before the LayerNorm


class ScanMarkovForCausalLM(ScoredInSlices, GenerationMixin, PreTrainedModel):
    """Next-token prediction with the scan recurrence. ``labels`` are the inputs (shifted inside); -100 is ignored."""

    config_class = ScanMarkovConfig
    config: ScanMarkovConfig  # the family's own fields, to a type checker (PreTrainedModel declares the base)

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

    def vocabulary_modules(self) -> tuple[str, ...]:
        return ("embed", "lm_head")

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

    def recurrent_states(
        self, input_ids: Tensor, start: int = 0, initial: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """h over the prefix, absolute positions: input_ids (B, T) at positions start.. after the state ``initial``
        (B, D) (h_{-1} = 0 when None) -> every h (B, T, D) and the last (B, D)."""
        end = start + input_ids.shape[1]
        if end > self.config.max_positions:
            raise ValueError(
                f"input_ids reach position {end} > max_positions={self.config.max_positions}: the recurrent mode "
                "has no position embedding beyond it"
            )
        positions = self.position_embedding(torch.arange(start, end, device=input_ids.device))
        decay, inject = self.skip_context_tokens(*self.gated_inputs(self.dropout(self.embed(input_ids) + positions)))
        return linear_scan(decay, inject, initial, backend=self.config.backend)

    def markov_states(self, input_ids: Tensor, window: int, last: int | None = None) -> Tensor:
        """h over the last ``window`` tokens at every position: (B, T) -> (B, T, D); with ``last``, at the last
        ``last`` positions only, (B, last, D) (a decoding step: its window alone, not every carried token's).

        Token s seen from the window ending at t has position s - max(0, t - window + 1) (``window_positions="end"``:
        t - s), so its embedding, gates and input differ per window: they are built for all (t, offset) pairs,
        (B, T, window, D), then scanned.
        Without active dropout they depend on (token, position) only, so when that table (V × window) is smaller
        than the pairs, the gates run on the table once and are gathered: the same values, window times cheaper.
        """
        source, position, present = window_offsets(input_ids.shape[1], window, input_ids.device)
        if self.config.window_positions == "end":  # offset o of the window ending at t holds step t - window + 1 + o
            position = (window - 1 - torch.arange(window, device=input_ids.device)).expand_as(position)
        if last is not None:
            source, position, present = source[-last:], position[-last:], present[-last:]
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
        if last is not None:  # each window's offsets in turn; an absent one (before the sequence) adds nothing
            inject, states = inject * present[..., None], torch.zeros_like(inject[:, :, 0])
            for offset in range(window):
                states = torch.addcmul(inject[:, :, offset], decay[:, :, offset], states)
            return states
        backend = "naive" if self.config.backend == "naive" else "auto"
        return windowed_linear_scan(decay, inject, window, backend=backend)

    def logits_from_states(self, states: Tensor) -> Tensor:
        """decode(LayerNorm(h)) Eᵀ: states (..., D) -> logits (..., V)."""
        # under autocast the scan hands back float32 states, which CPU autocast leaves beside a bf16 model's LayerNorm
        return self.lm_head(self.decoder(self.norm(states.to(self.norm.weight.dtype))))

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        order: int | None = None,
        label_smoothing: float = 0.0,
        position_ids: Tensor | None = None,
        state: dict | None = None,
    ) -> ScanMarkovOutput:
        """input_ids (B, T); attention_mask (B, T) right-padded, 1 = real (padding follows every real token, so it
        never reaches one through the causal recurrence); labels (B, T) aligned with the inputs.
        ``order`` overrides the markov window n for this call (e.g. to train on a mixture of n).
        ``position_ids`` (B, T): packed documents (positions restarting at 0 at each): each document is run alone
        (re-batched, one padded row per document) and its first token is not scored.
        ``state``: a decoding state ({} to start one), read and updated in place: the inputs continue the sequence
        it holds (its ``length`` tokens), and the logits are those of the whole sequence's forward at their
        positions. It holds tensors, batch first (beam search reorders their rows): recurrent mode h after the last
        token (``hidden``, (B, D)), markov mode the last n - 1 tokens (``tokens``). No padding while decoding.
        """
        if position_ids is not None:
            if state is not None:
                raise ValueError("position_ids (packed documents) cannot be combined with a decoding state")
            layout = self._documents(input_ids, attention_mask, position_ids)
            alone = self(layout.pack(input_ids), layout.mask, order=order)
            output = ScanMarkovOutput(layout.unpack(alone.logits), None, layout.unpack(alone.hidden_states))
            if labels is not None:
                output.loss = next_token_cross_entropy(output.logits, labels, position_ids, label_smoothing)
            return output
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={label_smoothing!r}: must lie in [0, 1)")
        states = self._states(input_ids, attention_mask, order, state)
        output = ScanMarkovOutput(logits=self.logits_from_states(states), hidden_states=states)
        if labels is not None:
            if tuple(labels.shape) != tuple(input_ids.shape):
                raise ValueError(f"labels must be (B, T) = {tuple(input_ids.shape)}, got {tuple(labels.shape)}")
            output.loss = next_token_cross_entropy(output.logits, labels, label_smoothing=label_smoothing)
        return output

    def check_input_values(self, inputs: dict) -> None:
        check_input_values(inputs, self.config.vocab_size, self.config.vocab_size, next_token=True)

    def final_states(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                     position_ids: Tensor | None = None, order: int | None = None) -> Tensor:  # fmt: skip
        """The states h (B, T, D) of forward's arguments without a decoding state (given ``position_ids``, each
        packed document's run alone): ``logits_from_states`` of them are its logits."""
        if position_ids is not None:
            layout = self._documents(input_ids, attention_mask, position_ids)
            return layout.unpack(self.final_states(layout.pack(input_ids), layout.mask, order=order))
        return self._states(input_ids, attention_mask, order)

    @staticmethod
    def _documents(input_ids: Tensor, attention_mask: Tensor | None, position_ids: Tensor) -> SegmentBatch:
        """The layout that runs each packed document of ``position_ids`` (B, T) alone, one padded row each."""
        if tuple(position_ids.shape) != tuple(input_ids.shape):
            raise ValueError(f"position_ids must be (B, T) = {tuple(input_ids.shape)}; "
                             f"got {tuple(position_ids.shape)}")  # fmt: skip
        return Segments.from_positions(position_ids, attention_mask).layout

    def _states(self, input_ids: Tensor, attention_mask: Tensor | None, order: int | None,
                state: dict | None = None) -> Tensor:  # fmt: skip
        """The states h (B, T, D) of unpacked inputs: of the whole sequence, or continuing a decoding ``state``."""
        check_token_ids(input_ids, self.config.vocab_size)
        if attention_mask is not None:
            check_attention_mask(attention_mask, input_ids.shape)
            if state is None:
                right_padded_lengths(attention_mask, "ScanMarkovForCausalLM")
            elif not bool(attention_mask.bool().all()):
                raise ValueError("ScanMarkovForCausalLM decodes unpadded sequences: give rows of equal length, or "
                                 "one sequence at a time")  # fmt: skip
        window = self.window_size(order)
        if state is not None:
            return self._continued_states(input_ids, window, state)
        return self.recurrent_states(input_ids)[0] if window is None else self.markov_states(input_ids, window)

    def _continued_states(self, input_ids: Tensor, window: int | None, state: dict) -> Tensor:
        """The states of the next T tokens of the sequence ``state`` holds (see ``forward``), which it then holds."""
        seen = state.get("length", 0)
        if window is None:
            states, state["hidden"] = self.recurrent_states(input_ids, seen, state.get("hidden"))
        else:
            if state.setdefault("order", window) != window:
                raise ValueError(f"order={window}: this decoding state was started with order {state['order']}")
            carried = state.get("tokens")
            tokens = input_ids if carried is None else torch.cat([carried, input_ids], dim=1)
            states = self.markov_states(tokens, window, last=input_ids.shape[1])
            state["tokens"] = tokens[:, max(0, tokens.shape[1] - (window - 1)) :]  # a window's older tokens
        state["length"] = seen + input_ids.shape[1]
        return states

    def start_decoding(
        self, input_ids: Tensor, attention_mask: Tensor | None, max_new_tokens: int
    ) -> tuple[Tensor, Step]:
        """``GenerationMixin``'s start: the prompt in one pass with a fresh decoding state, then one token per step
        through the same ``forward``. Prompts must be unpadded (the recurrence has no padding steps)."""
        fed = input_ids.shape[1] + max_new_tokens - 1
        if self.window_size() is None and fed > self.config.max_positions:
            raise ValueError(
                f"a prompt of {input_ids.shape[1]} tokens plus max_new_tokens={max_new_tokens} needs {fed} positions "
                f"but max_positions={self.config.max_positions}"
            )
        state: dict = {}

        def step(tokens: Tensor) -> Tensor:
            return self(tokens[:, None], state=state).logits[:, -1]

        return self(input_ids, attention_mask, state=state).logits[:, -1], step



"""MAT: a pre-LN Transformer encoder-decoder whose decoder self-attention can be order-k banded and
transparent (keys and values from the decoder's layer-0 input E in every layer), which makes it exactly k-th order
Markov at any depth. The building blocks here are shared with incremental decoding in ``generation.py``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.layers.position import sinusoidal_positions
from markovformer.models.generation import GenerationConfig, GenerationMixin, next_tokens
from markovformer.models.inputs import check_input_values, check_rows_have_tokens, check_token_ids
from markovformer.models.markov_translator.config import MarkovTranslatorConfig
from markovformer.models.markov_translator.generation import generate
from markovformer.models.markov_translator.masks import decoder_self_allowed, key_padding_allowed
from markovformer.models.pretrained import PreTrainedModel, model_output
from markovformer.models.scoring import Score, ScoresOutsideForward
from markovformer.ops.losses import sliced_token_cross_entropy, token_cross_entropy
from markovformer.ops.masked_softmax import masked_sdpa
from markovformer.ops.padding import real_token_positions, right_padded_lengths


class Attention(nn.Module):
    """Multi-head attention whose queries and keys/values come from separate inputs (self, cross or transparent)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads, self.head_dim, self.dropout = n_heads, d_model // n_heads, dropout
        self.query = nn.Linear(d_model, d_model)
        self.key_value = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def _heads(self, x: Tensor) -> Tensor:
        return x.view(*x.shape[:2], self.n_heads, self.head_dim).transpose(1, 2)

    def keys_values(self, source: Tensor) -> tuple[Tensor, Tensor]:
        """(B, Tk, D) -> keys and values, each (B, H, Tk, Dh)."""
        keys, values = self.key_value(source).chunk(2, dim=-1)
        return self._heads(keys), self._heads(values)

    def forward(self, x: Tensor, keys: Tensor, values: Tensor, allowed: Tensor | None) -> Tensor:
        """x: (B, Tq, D) normalised queries' input -> (B, Tq, D)."""
        heads = masked_sdpa(self._heads(self.query(x)), keys, values, allowed, self.dropout if self.training else 0.0)
        return self.out(heads.transpose(1, 2).reshape(x.shape))


class FeedForward(nn.Module):
    """Linear–ReLU–Linear of hidden width d_ff: the Transformer-base FFN the paper trains (any width, not a
    multiple of d_model as in ``layers.ffn``)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(F.relu(self.up(x))))


class EncoderLayer(nn.Module):
    """Pre-LN: x + SelfAttn(LN x) (bidirectional, key padding), then x + FFN(LN x)."""

    def __init__(self, config: MarkovTranslatorConfig) -> None:
        super().__init__()
        self.self_norm = nn.LayerNorm(config.d_model)
        self.self_attention = Attention(config.d_model, config.n_heads, config.dropout)
        self.ffn_norm = nn.LayerNorm(config.d_model)
        self.ffn = FeedForward(config.d_model, config.d_ff, config.dropout)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, hidden: Tensor, allowed: Tensor | None) -> Tensor:
        normed = self.self_norm(hidden)
        hidden = hidden + self.dropout(self.self_attention(normed, *self.self_attention.keys_values(normed), allowed))
        return hidden + self.dropout(self.ffn(self.ffn_norm(hidden)))


class DecoderLayer(nn.Module):
    """Pre-LN: self-attention, cross-attention over the source memory, FFN.

    Its self-attention keys/values come from :meth:`self_keys_values`: from LN(hidden) as usual, or, when
    ``transparent``, from the layer's own LayerNorm of the decoder's layer-0 input E.
    """

    def __init__(self, config: MarkovTranslatorConfig) -> None:
        super().__init__()
        self.transparent = config.transparent
        self.self_norm = nn.LayerNorm(config.d_model)
        self.embedding_norm = nn.LayerNorm(config.d_model) if config.transparent else None
        self.self_attention = Attention(config.d_model, config.n_heads, config.dropout)
        self.cross_norm = nn.LayerNorm(config.d_model)
        self.cross_attention = Attention(config.d_model, config.n_heads, config.dropout)
        self.ffn_norm = nn.LayerNorm(config.d_model)
        self.ffn = FeedForward(config.d_model, config.d_ff, config.dropout)
        self.dropout = nn.Dropout(config.dropout)

    def self_keys_values(self, hidden: Tensor | None, embedded: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values (B, H, T, Dh) for the positions of ``embedded`` (B, T, D); ``hidden`` (B, T, D) is this
        layer's input, unused (may be None) when transparent."""
        if self.transparent:
            return self.self_attention.keys_values(self.embedding_norm(embedded))
        return self.self_attention.keys_values(self.self_norm(hidden))

    def forward(
        self,
        hidden: Tensor,
        self_keys: Tensor,
        self_values: Tensor,
        self_allowed: Tensor | None,
        memory_keys: Tensor,
        memory_values: Tensor,
        memory_allowed: Tensor | None,
    ) -> Tensor:
        """hidden: (B, Tq, D) queries' stream; keys/values (B, H, Tk, Dh) and (B, H, S, Dh) -> (B, Tq, D)."""
        attended = self.self_attention(self.self_norm(hidden), self_keys, self_values, self_allowed)
        hidden = hidden + self.dropout(attended)
        attended = self.cross_attention(self.cross_norm(hidden), memory_keys, memory_values, memory_allowed)
        hidden = hidden + self.dropout(attended)
        return hidden + self.dropout(self.ffn(self.ffn_norm(hidden)))


@model_output
class MarkovTranslatorOutput:
    """What ``MarkovTranslatorForConditionalGeneration.forward`` returns: ``logits`` (B, T_tgt, V); ``loss``, given
    labels, their mean token cross-entropy in nats (-100 not scored; smoothed by ``label_smoothing``);
    ``encoder_last_hidden_state`` (B, S, D), the memory."""

    logits: Tensor  # (B, T_tgt, V)
    loss: Tensor | None = None  # mean token cross-entropy over labels != -100
    encoder_last_hidden_state: Tensor | None = None  # (B, S, D): the memory


class MarkovTranslatorForConditionalGeneration(ScoresOutsideForward, GenerationMixin, PreTrainedModel):
    """Encoder-decoder translator over a joint vocabulary. ``tgt_ids`` is the shifted-right decoder input
    (bos, y_1, ..., y_{T-1}); ``labels`` are aligned with it (y_1, ..., y_T), -100 ignored. Masks are (B, T) with
    1 = real token; a source may be padded on either side (its positions count its real tokens), a target only on
    the right (checked)."""

    config_class = MarkovTranslatorConfig
    config: MarkovTranslatorConfig  # the family's own fields, to a type checker (PreTrainedModel declares the base)

    def __init__(self, config: MarkovTranslatorConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model)
        table = sinusoidal_positions(config.max_positions, config.d_model)
        self.register_buffer("position_table", table, persistent=False)  # derived, so not saved
        self.dropout = nn.Dropout(config.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.encoder_norm = nn.LayerNorm(config.d_model)
        self.decoder_layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.decoder_norm = nn.LayerNorm(config.d_model)
        self.init_weights()

    def vocabulary_modules(self) -> tuple[str, ...]:
        return ("embed",)  # also the output over the vocabulary (tied)

    def embed_tokens(self, ids: Tensor, start: int = 0, name: str = "input_ids", positions: Tensor | None = None,
                     ) -> Tensor:  # fmt: skip
        """Token ids (B, T) at positions start..start+T-1, or at ``positions`` (B, T) -> (B, T, D): √D-scaled
        embedding + sinusoid, dropout. ``name``: the argument the ids came in as, for the error of bad ids."""
        check_token_ids(ids, self.config.vocab_size, name)
        end = start + ids.shape[1]
        if end > self.config.max_positions:
            raise ValueError(f"position {end - 1} is beyond max_positions={self.config.max_positions}")
        sinusoid = self.position_table[start:end] if positions is None else self.position_table[positions]
        return self.dropout(self.embed(ids) * self.embed_scale + sinusoid.to(self.embed.weight.dtype))

    @staticmethod
    def _check_mask(mask: Tensor | None, ids: Tensor, name: str) -> None:
        if mask is not None and tuple(mask.shape) != tuple(ids.shape):
            raise ValueError(f"{name} must have the shape of its ids {tuple(ids.shape)}; got {tuple(mask.shape)}")

    def encode(self, src_ids: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Source ids (B, S) -> memory (B, S, D), after the encoder's final LayerNorm."""
        self._check_mask(src_mask, src_ids, "src_mask")
        if src_mask is not None:  # a source of padding alone: the cross-attention would have no key to attend to
            check_rows_have_tokens(src_mask, "src_mask")
        positions = None if src_mask is None else real_token_positions(src_mask)  # left padding as none
        hidden = self.embed_tokens(src_ids, name="src_ids", positions=positions)
        allowed = key_padding_allowed(src_mask)
        for layer in self.encoder_layers:
            hidden = layer(hidden, allowed)
        return self.encoder_norm(hidden)

    def memory_keys_values(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Per decoder layer, the cross-attention keys and values of the memory (B, S, D), each (B, H, S, Dh)."""
        return [layer.cross_attention.keys_values(memory) for layer in self.decoder_layers]

    def output_logits(self, hidden: Tensor) -> Tensor:
        """Last decoder hidden states (B, T, D) -> logits (B, T, V) through the tied embedding."""
        return F.linear(self.decoder_norm(hidden), self.embed.weight)

    def decode(
        self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None
    ) -> Tensor:
        """Teacher-forced decoder: shifted-right ids (B, T) and memory (B, S, D) -> logits (B, T, V)."""
        return self.output_logits(self.decoder_states(tgt_ids, memory, src_mask, tgt_mask))

    def decoder_states(
        self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None
    ) -> Tensor:
        """``decode``'s last decoder hidden states (B, T, D), which ``output_logits`` turns into its logits."""
        self._check_mask(tgt_mask, tgt_ids, "tgt_mask")
        if tgt_mask is not None:
            right_padded_lengths(tgt_mask, "the translator's tgt_mask")
        embedded = self.embed_tokens(tgt_ids, name="tgt_ids")
        positions = torch.arange(tgt_ids.shape[1], device=tgt_ids.device)
        self_allowed = decoder_self_allowed(positions, positions, self.config.order, tgt_mask)
        memory_allowed = key_padding_allowed(src_mask)
        hidden = embedded
        for layer, (memory_keys, memory_values) in zip(
            self.decoder_layers, self.memory_keys_values(memory), strict=True
        ):
            keys, values = layer.self_keys_values(hidden, embedded)
            hidden = layer(hidden, keys, values, self_allowed, memory_keys, memory_values, memory_allowed)
        return hidden

    def forward(
        self,
        src_ids: Tensor,
        tgt_ids: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        labels: Tensor | None = None,
        label_smoothing: float = 0.0,
    ) -> MarkovTranslatorOutput:
        """src_ids (B, S), tgt_ids (B, T) shifted right, labels (B, T) or None -> logits (B, T, V) [+ loss].
        ``label_smoothing`` in [0, 1) smooths the loss (the trainer passes ``trainer.label_smoothing`` for
        training steps only)."""
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={label_smoothing!r}: must lie in [0, 1)")
        memory = self.encode(src_ids, src_mask)
        logits = self.decode(tgt_ids, memory, src_mask, tgt_mask)
        loss = None
        if labels is not None:
            if tuple(labels.shape) != tuple(tgt_ids.shape):
                raise ValueError(f"labels must have the shape of tgt_ids {tuple(tgt_ids.shape)}; got "
                                 f"{tuple(labels.shape)}")  # fmt: skip
            loss = token_cross_entropy(logits, labels, label_smoothing)
        return MarkovTranslatorOutput(logits, loss, memory)

    def check_input_values(self, inputs: dict) -> None:
        check_input_values(inputs, self.config.vocab_size, self.config.vocab_size)

    def target_score(self, src_ids: Tensor, tgt_ids: Tensor, labels: Tensor, src_mask: Tensor | None = None,
                     tgt_mask: Tensor | None = None) -> Score:  # fmt: skip
        """For scoring (validation, ``eval``): forward's loss of these arguments, unsmoothed, without a gradient and
        without its logits (B, T, V): ``sliced_token_cross_entropy`` reads a slice of rows of them at a time."""
        states = self.states_to_score(src_ids, tgt_ids, src_mask, tgt_mask)
        return Score(sliced_token_cross_entropy(states, self.output_logits, labels, self.config.vocab_size)[0])

    scoring_states = "target_states"

    def target_states(self, src_ids: Tensor, tgt_ids: Tensor, src_mask: Tensor | None = None,
                      tgt_mask: Tensor | None = None) -> Tensor:  # fmt: skip
        """Teacher forcing's last decoder states (B, T, D) of forward's arguments: ``output_logits`` of them are its
        logits."""
        return self.decoder_states(tgt_ids, self.encode(src_ids, src_mask), src_mask, tgt_mask)

    # ------------------------------------------------------------------------------------------- generation
    # ``GenerationMixin.generate`` with the translator's own decoding: sources in, target ids (B, L) out (bos
    # excluded, eos kept, padding after it, L <= max_new_tokens and <= max_positions); greedy, sampling, or beam
    # search (num_beams > 1, scores / length ** length_penalty). ``generation.generate`` also returns the scores.

    supports_beam_search = True
    compiles_step = False  # its searches keep their own cached decoder steps, which compile_step does not reach
    generation_inputs = ("max_lengths",)  # (B,): each source's own most generated tokens, within max_new_tokens

    def check_generation_inputs(self, input_ids: Tensor, attention_mask: Tensor | None) -> None:
        """ValueError unless the sources (B, S) are ids of the vocabulary and every row has a real token."""
        check_token_ids(input_ids, self.config.vocab_size)
        if attention_mask is not None:
            self._check_mask(attention_mask, input_ids, "attention_mask")
            check_rows_have_tokens(attention_mask, "attention_mask")

    def generate_from(
        self, input_ids: Tensor, attention_mask: Tensor | None, config: GenerationConfig,
        generator: torch.Generator | None, max_lengths: Tensor | None = None,
    ) -> Tensor:  # fmt: skip
        """Translate the sources as ``config`` says; eos and padding are the model config's own. ``max_lengths``
        (B,): each source's own most generated tokens (at most max_new_tokens), so that a source translates as it
        would alone whatever the lengths of the sources beside it."""
        for name in ("eos_token_id", "pad_token_id"):
            value = getattr(config, name)
            if value not in (None, getattr(self.config, name)):
                raise ValueError(f"{name}={value!r}: this model uses its config's {name}="
                                 f"{getattr(self.config, name)}")  # fmt: skip
        if config.suppress_tokens and config.num_beams != 1:
            raise ValueError("suppress_tokens: beam search does not suppress tokens; use num_beams=1")
        if config.max_new_tokens == 0:
            return input_ids.new_zeros(input_ids.shape[0], 0)

        def choose(log_probs: Tensor) -> Tensor:
            return next_tokens(log_probs, config, generator)

        max_length = min(config.max_new_tokens, self.config.max_positions)
        picks = choose if config.do_sample or config.suppress_tokens else None
        return generate(self, input_ids, attention_mask, config.num_beams, max_length, config.length_penalty,
                        picks, max_lengths).sequences  # fmt: skip


__all__ = ["MarkovTranslatorForConditionalGeneration", "MarkovTranslatorOutput"]

"""Incremental decoding, greedy search and beam search for :class:`MarkovTranslatorForConditionalGeneration`.

Self-attention state per hypothesis:

- MAT (``order`` k and ``transparent``): the last k layer-0 inputs E, (N, <=k, D). Every layer recomputes its keys
  and values from them each step, so nothing grows with the output (the paper's KV-cache-free decoding).
- otherwise an ordinary per-layer key/value cache. With an order k only each layer's last k entries are kept, since
  no layer attends further back; for the n-gram masked decoder those entries already carry older tokens (the leak),
  and the trimmed cache is still exact.

The source memory's cross-attention keys and values are computed once per batch and repeated for the beams.

Scores: a hypothesis of n generated tokens (eos included, bos not) with summed log-probability s scores
``s / n ** length_penalty`` (the plain rule of fairseq and Hugging Face, not GNMT's ((5 + n) / 6) ** alpha).
Padding is never generated. A hypothesis that reaches ``max_length`` without eos ends there, unterminated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from markovformer.models.markov_translator.masks import decoder_self_allowed, key_padding_allowed
from markovformer.ops.precision import compute_dtype

if TYPE_CHECKING:
    from markovformer.models.markov_translator.modeling import MarkovTranslatorForConditionalGeneration


@dataclass
class GenerationOutput:
    sequences: Tensor  # (B, L) generated ids, bos excluded, eos kept, padded with pad_token_id
    scores: Tensor  # (B,) summed log-probability / length ** length_penalty


@dataclass
class DecodingState:
    """What one decoding step needs besides the new token, for N hypotheses."""

    memory: list[tuple[Tensor, Tensor]]  # per decoder layer: cross-attention keys, values, each (N, H, S, Dh)
    memory_allowed: Tensor | None  # (N, 1, 1, S) real source positions, or None when unpadded
    step: int = 0  # position of the next decoder input
    inputs: Tensor | None = None  # MAT: the last <= k layer-0 inputs E, (N, n, D)
    cache: list[tuple[Tensor, Tensor]] | None = None  # others: per layer self-attention keys, values (N, H, n, Dh)

    def reorder(self, rows: Tensor) -> None:
        """Row i continues hypothesis ``rows[i]`` (N,). The memory is left in place: each row must be taken from a
        row decoding the same source, as beam search does."""
        if self.inputs is not None:
            self.inputs = self.inputs.index_select(0, rows)
        if self.cache is not None:
            self.cache = [(keys.index_select(0, rows), values.index_select(0, rows)) for keys, values in self.cache]


def uses_input_window(model: MarkovTranslatorForConditionalGeneration) -> bool:
    """True for MAT, whose decoding holds the last k layer-0 inputs instead of a key/value cache."""
    return model.config.transparent and model.config.order is not None


def start_decoding(
    model: MarkovTranslatorForConditionalGeneration, src_ids: Tensor, src_mask: Tensor | None = None, repeats: int = 1
) -> DecodingState:
    """Encode sources (B, S) once; each source's memory keys/values are repeated for ``repeats`` consecutive rows."""
    memory = model.encode(src_ids, src_mask)
    keys_values = [
        (keys.repeat_interleave(repeats, dim=0), values.repeat_interleave(repeats, dim=0))
        for keys, values in model.memory_keys_values(memory)
    ]
    allowed = key_padding_allowed(src_mask)
    return DecodingState(keys_values, None if allowed is None else allowed.repeat_interleave(repeats, dim=0))


def decode_step(model: MarkovTranslatorForConditionalGeneration, tokens: Tensor, state: DecodingState) -> Tensor:
    """Feed one decoder input per hypothesis, tokens (N,), at position ``state.step``; returns logits (N, V) and
    advances ``state``. Equals the teacher-forced logits at that position."""
    order, step = model.config.order, state.step
    embedded = model.embed_tokens(tokens[:, None], start=step)  # (N, 1, D)
    visible_count = step + 1 if order is None else min(step + 1, order)
    key_positions = torch.arange(step + 1 - visible_count, step + 1, device=tokens.device)
    query_position = torch.tensor([step], device=tokens.device)
    allowed = decoder_self_allowed(query_position, key_positions, order)
    hidden = embedded
    layers = zip(model.decoder_layers, state.memory, strict=True)
    if uses_input_window(model):
        window = embedded if state.inputs is None else torch.cat([state.inputs, embedded], dim=1)[:, -order:]
        state.inputs = window
        for layer, (memory_keys, memory_values) in layers:
            keys, values = layer.self_keys_values(None, window)
            hidden = layer(hidden, keys, values, allowed, memory_keys, memory_values, state.memory_allowed)
    else:
        cache = []
        for index, (layer, (memory_keys, memory_values)) in enumerate(layers):
            keys, values = layer.self_keys_values(hidden, embedded)
            if state.cache is not None:
                old_keys, old_values = state.cache[index]
                keys = torch.cat([old_keys, keys], dim=2)[:, :, -visible_count:]
                values = torch.cat([old_values, values], dim=2)[:, :, -visible_count:]
            cache.append((keys, values))
            hidden = layer(hidden, keys, values, allowed, memory_keys, memory_values, state.memory_allowed)
        state.cache = cache
    state.step += 1
    return model.output_logits(hidden)[:, 0]


def _log_probs(logits: Tensor, pad_token_id: int) -> Tensor:
    """Next-token log-probabilities (N, V) in at least float32, padding excluded (-inf)."""
    log_probs = torch.log_softmax(logits.to(compute_dtype(logits)), dim=-1)
    log_probs[:, pad_token_id] = float("-inf")
    return log_probs


def _resolve_max_length(model: MarkovTranslatorForConditionalGeneration, max_length: int | None) -> int:
    limit = model.config.max_positions
    if max_length is None:
        return limit
    if isinstance(max_length, bool) or not isinstance(max_length, int) or not 1 <= max_length <= limit:
        raise ValueError(f"max_length={max_length!r} must be an integer in [1, max_positions={limit}]")
    return max_length


def _row_max_lengths(max_lengths: Tensor | None, batch: int, max_length: int) -> list[int]:
    """Each source's most generated tokens: ``max_lengths`` (B,) ints, each at most ``max_length`` (the search's
    own cap, which an overlong entry is cut to), or ``max_length`` for every source when None."""
    if max_lengths is None:
        return [max_length] * batch
    if not isinstance(max_lengths, Tensor) or max_lengths.dim() != 1 or len(max_lengths) != batch:
        shape = tuple(max_lengths.shape) if isinstance(max_lengths, Tensor) else type(max_lengths).__name__
        raise ValueError(f"max_lengths must be a (B,) = ({batch},) tensor of ints; got {shape}")
    if max_lengths.dtype.is_floating_point or max_lengths.dtype == torch.bool or bool((max_lengths < 1).any()):
        raise ValueError(f"max_lengths must hold integers >= 1; got {max_lengths.tolist()}")
    return [min(int(length), max_length) for length in max_lengths.tolist()]


@torch.no_grad()
def greedy_search(
    model: MarkovTranslatorForConditionalGeneration,
    src_ids: Tensor,
    src_mask: Tensor | None = None,
    max_length: int | None = None,
    length_penalty: float = 1.0,
    choose: Callable[[Tensor], Tensor] | None = None,
    max_lengths: Tensor | None = None,
) -> GenerationOutput:
    """The most likely next token at every step (or the one ``choose`` picks from the log-probabilities (B, V):
    sampling), for sources (B, S); stops when every row has emitted eos or reached its length (``max_lengths``
    (B,) per source, within ``max_length``; padding after it). Dropout stays as the model's mode has it:
    :func:`generate` switches to eval mode."""
    config = model.config
    max_length = _resolve_max_length(model, max_length)
    caps = torch.tensor(_row_max_lengths(max_lengths, src_ids.shape[0], max_length), device=src_ids.device)
    state = start_decoding(model, src_ids, src_mask)
    tokens = torch.full((src_ids.shape[0],), config.bos_token_id, dtype=torch.long, device=src_ids.device)
    finished = torch.zeros_like(tokens, dtype=torch.bool)
    lengths = torch.zeros_like(tokens)
    scores, generated = None, []
    for step in range(int(caps.max())):
        log_probs = _log_probs(decode_step(model, tokens, state), config.pad_token_id)
        if choose is None:
            best, tokens = log_probs.max(dim=-1)
        else:
            tokens = choose(log_probs)
            best = log_probs.gather(-1, tokens[:, None]).squeeze(-1)
        scores = best.masked_fill(finished, 0.0) + (0.0 if scores is None else scores)
        tokens = tokens.masked_fill(finished, config.pad_token_id)
        lengths += ~finished
        generated.append(tokens)
        finished |= (tokens == config.eos_token_id) | (caps <= step + 1)
        if bool(finished.all()):
            break
    return GenerationOutput(torch.stack(generated, dim=1), scores / lengths.to(scores.dtype) ** length_penalty)


@torch.no_grad()
def beam_search(
    model: MarkovTranslatorForConditionalGeneration,
    src_ids: Tensor,
    src_mask: Tensor | None = None,
    beam_size: int = 4,
    max_length: int | None = None,
    length_penalty: float = 1.0,
    max_lengths: Tensor | None = None,
) -> GenerationOutput:
    """Beam search with ``beam_size`` hypotheses per source (B, S), fairseq's rules: each step ranks the 2·beam best
    extensions by summed log-probability; an eos among the top ``beam_size`` ends a hypothesis, the best non-eos
    extensions stay alive; a source is done once ``beam_size`` hypotheses have ended, or its hypotheses reach its
    length (``max_lengths`` (B,) per source, within ``max_length``: a source searches as it would alone, whatever
    the lengths of the others). Returns, per source, the ended hypothesis with the best penalised score. Dropout
    stays as the model's mode has it, as in :func:`greedy_search`."""
    config = model.config
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size={beam_size!r} must be a positive integer")
    max_length = _resolve_max_length(model, max_length)
    caps = _row_max_lengths(max_lengths, src_ids.shape[0], max_length)
    max_length = max(caps)
    batch, beam, eos = src_ids.shape[0], beam_size, config.eos_token_id
    state = start_decoding(model, src_ids, src_mask, repeats=beam)
    tokens = torch.full((batch * beam,), config.bos_token_id, dtype=torch.long, device=src_ids.device)
    histories: list[list[int]] = [[] for _ in range(batch * beam)]
    ended: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    done = [False] * batch
    cumulative = None
    for step in range(max_length):
        log_probs = _log_probs(decode_step(model, tokens, state), config.pad_token_id)
        vocab = log_probs.shape[-1]
        if cumulative is None:  # every beam starts as the same empty hypothesis: keep one, or all would duplicate
            cumulative = log_probs.new_full((batch, beam), float("-inf"))
            cumulative[:, 0] = 0.0
        candidates = (cumulative.reshape(-1, 1) + log_probs).view(batch, beam * vocab)
        top_scores, top_index = candidates.topk(min(2 * beam, beam * vocab), dim=-1)
        length = step + 1
        rows = list(range(batch * beam))  # a done source's rows keep decoding their own (ignored) hypotheses
        words = [config.pad_token_id] * (batch * beam)
        new_cumulative = [float("-inf")] * (batch * beam)
        for b, (scores, indices) in enumerate(zip(top_scores.tolist(), top_index.tolist(), strict=True)):
            if done[b]:
                continue
            alive, last = 0, length == caps[b]
            for rank, (score, index) in enumerate(zip(scores, indices, strict=True)):
                if score == float("-inf") or alive == beam:
                    break
                origin, word = b * beam + index // vocab, index % vocab
                if word == eos:
                    if rank < beam:
                        ended[b].append((score / length**length_penalty, histories[origin] + [eos]))
                    continue
                row = b * beam + alive
                rows[row], words[row], new_cumulative[row] = origin, word, score
                if last:
                    ended[b].append((score / length**length_penalty, histories[origin] + [word]))
                alive += 1
            done[b] = last or alive == 0 or len(ended[b]) >= beam
        histories = [histories[origin] + [word] for origin, word in zip(rows, words, strict=True)]
        row_index = torch.tensor(rows, device=tokens.device)
        state.reorder(row_index)
        tokens = torch.tensor(words, device=tokens.device)
        cumulative = torch.tensor(new_cumulative, dtype=cumulative.dtype, device=cumulative.device).view(batch, beam)
        if all(done):
            break
    best = [max(hypotheses, key=lambda item: item[0]) if hypotheses else (float("-inf"), []) for hypotheses in ended]
    width = max(1, max(len(ids) for _, ids in best))
    sequences = torch.full((batch, width), config.pad_token_id, dtype=torch.long, device=src_ids.device)
    for b, (_, ids) in enumerate(best):
        sequences[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    scores = torch.tensor([score for score, _ in best], dtype=cumulative.dtype, device=cumulative.device)
    return GenerationOutput(sequences, scores)


def generate(
    model: MarkovTranslatorForConditionalGeneration,
    src_ids: Tensor,
    src_mask: Tensor | None = None,
    beam_size: int = 1,
    max_length: int | None = None,
    length_penalty: float = 1.0,
    choose: Callable[[Tensor], Tensor] | None = None,
    max_lengths: Tensor | None = None,
) -> GenerationOutput:
    """Translate sources (B, S): greedy search (or ``choose``'s pick: sampling) when ``beam_size`` is 1, else beam
    search. ``max_length`` counts generated tokens (default: ``max_positions``); ``max_lengths`` (B,), each source's
    own most tokens within it. Runs in eval mode and restores the model's mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        if beam_size == 1:
            return greedy_search(model, src_ids, src_mask, max_length, length_penalty, choose, max_lengths)
        return beam_search(model, src_ids, src_mask, beam_size, max_length, length_penalty, max_lengths)
    finally:
        model.train(was_training)


__all__ = ["DecodingState", "GenerationOutput", "beam_search", "decode_step", "generate", "greedy_search",
           "start_decoding", "uses_input_window"]  # fmt: skip

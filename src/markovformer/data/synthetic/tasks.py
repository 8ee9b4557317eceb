"""The sequence-mixer tasks: multi-query associative recall, induction, selective copying, in-context Markov chains.

Each task is a seeded generator ``*_examples(count, ..., generator) -> (input_ids, labels)``, both (count, T) long,
and a data source (``data.sources``) that builds train/val/test splits from it. Labels follow the causal-LM
convention of the engine (``...ForCausalLM`` shifts inside): ``labels[t]`` is predicted from positions ``0..t-1``,
so the logits that answer it sit at ``t - 1``; every unscored position holds -100. The token in the input at a
scored position is never visible to its own prediction.

- ``mqar``: Zoology's multi-query associative recall (Arora et al., 2023, ``zoology/data/associative_recall.py``):
  ``num_pairs`` key-value pairs (keys from ``1..V/2-1``, values from ``V/2..V-1``, each drawn without
  replacement), then a query region where each key is asked once at an even offset ``2g`` with gap ``g`` drawn
  without replacement with probability proportional to ``g^(power_a - 1)`` (power_a = 0.01: queries crowd near the
  context, some land far away). Non-query positions hold random tokens of the whole vocabulary. The value is
  scored at the position after its query key.
- ``induction``: the Mamba paper's induction heads (Gu and Dao, 2023): random tokens from ``1..V-1``, the trigger
  token 0 once at a random place, and again at ``T - 2``; the token after the first trigger is scored at ``T - 1``.
- ``selective_copy``: the Mamba paper's selective copying: ``num_tokens`` data tokens (``2..V-1``) at random,
  ordered positions among noise tokens (0) in a context of ``T - num_tokens - 1`` positions, then ``num_tokens + 1``
  marker tokens (1); the data tokens are scored in order at the positions after the first marker.
- ``icl_markov``: random order-k chains redrawn per sequence (``markov.RandomChainSampler``); every target with a
  full context (t >= k) is scored; the Bayes-optimal in-context predictor is add-1 (for Dirichlet(1) rows).
"""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.markov import RandomChainSampler

IGNORE = -100
MQAR_POWER_A = 0.01  # Zoology's default
INDUCTION_TRIGGER = 0
COPY_NOISE, COPY_MARKER = 0, 1


def _positive(name: str, value: int, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")


def _smallest(draws: Tensor, k: int) -> Tensor:
    """Indices (N, k) of the k smallest entries of each row of draws (N, n), smallest first: a uniformly random
    ordered k-subset of range(n) when the draws are uniform."""
    return draws.topk(k, dim=-1, largest=False).indices


def check_mqar(seq_len: int, num_pairs: int, vocab_size: int, power_a: float = MQAR_POWER_A) -> None:
    """Zoology's constraints: room for every pair and its query (``4 * num_pairs <= seq_len``), an even length, and
    a vocabulary larger than the sequence (``vocab_size > seq_len``), so keys and values never run out."""
    _positive("num_pairs", num_pairs)
    _positive("seq_len", seq_len, 4)
    if seq_len % 2:
        raise ValueError(f"mqar: seq_len={seq_len} must be even (pairs and queries take two positions each)")
    if 4 * num_pairs > seq_len:
        raise ValueError(f"mqar: num_pairs={num_pairs} needs 4 * num_pairs <= seq_len={seq_len}")
    if vocab_size <= seq_len:
        raise ValueError(f"mqar: vocab_size={vocab_size} must exceed seq_len={seq_len}")
    if not 0 < power_a <= 1:
        raise ValueError(f"mqar: power_a={power_a!r} must lie in (0, 1]")


def mqar_examples(
    count: int, seq_len: int, num_pairs: int, vocab_size: int, generator: torch.Generator,
    power_a: float = MQAR_POWER_A,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """(input_ids, labels), each (count, seq_len); see the module docstring."""
    check_mqar(seq_len, num_pairs, vocab_size, power_a)
    _positive("count", count)
    half = vocab_size // 2
    # distinct keys and values: the indices of the num_pairs smallest of uniform draws, smallest first (what
    # argsort(...)[:, :num_pairs] gives, without sorting the whole vocabulary: a fifth of a step at 8,192 symbols)
    keys = _smallest(torch.rand(count, half - 1, generator=generator), num_pairs) + 1
    values = _smallest(torch.rand(count, vocab_size - half, generator=generator), num_pairs) + half
    context = 2 * num_pairs
    space = (seq_len - context) // 2
    weights = power_a * torch.arange(1, space + 1, dtype=torch.float64) ** (power_a - 1)
    gaps = torch.multinomial(weights.expand(count, -1), num_pairs, replacement=False, generator=generator)
    inputs = torch.randint(vocab_size, (count, seq_len), generator=generator)
    inputs[:, 0:context:2], inputs[:, 1:context:2] = keys, values
    query_positions = context + 2 * gaps
    inputs.scatter_(1, query_positions, keys)
    labels = torch.full((count, seq_len), IGNORE, dtype=torch.long)
    labels.scatter_(1, query_positions + 1, values)
    return inputs, labels


def check_induction(seq_len: int, vocab_size: int) -> None:
    _positive("seq_len", seq_len, 4)
    if vocab_size < 3:
        raise ValueError(f"induction: vocab_size={vocab_size!r} must be >= 3 (the trigger and two ordinary tokens)")


def induction_examples(count: int, seq_len: int, vocab_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """(input_ids, labels), each (count, seq_len): the answer is scored at ``T - 1`` (predicted at the second
    trigger, ``T - 2``); the first trigger lies in ``0..T-4``."""
    check_induction(seq_len, vocab_size)
    _positive("count", count)
    inputs = torch.randint(1, vocab_size, (count, seq_len), generator=generator)
    first = torch.randint(0, seq_len - 3, (count, 1), generator=generator)
    inputs.scatter_(1, first, INDUCTION_TRIGGER)
    inputs[:, -2] = INDUCTION_TRIGGER
    answer = inputs.gather(1, first + 1)
    inputs[:, -1:] = answer
    labels = torch.full((count, seq_len), IGNORE, dtype=torch.long)
    labels[:, -1:] = answer
    return inputs, labels


def check_selective_copy(seq_len: int, num_tokens: int, vocab_size: int) -> None:
    _positive("num_tokens", num_tokens)
    if vocab_size < 3:
        raise ValueError(f"selective_copy: vocab_size={vocab_size!r} must be >= 3 (noise, marker, data tokens)")
    if seq_len - num_tokens - 1 < num_tokens:
        raise ValueError(f"selective_copy: seq_len={seq_len!r} leaves a context of seq_len - num_tokens - 1 = "
                         f"{seq_len - num_tokens - 1}, fewer positions than num_tokens={num_tokens}")  # fmt: skip


def selective_copy_examples(
    count: int, seq_len: int, num_tokens: int, vocab_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """(input_ids, labels), each (count, seq_len); the context is ``L = seq_len - num_tokens - 1`` positions."""
    check_selective_copy(seq_len, num_tokens, vocab_size)
    _positive("count", count)
    context = seq_len - num_tokens - 1
    data = torch.randint(2, vocab_size, (count, num_tokens), generator=generator)
    positions = _smallest(torch.rand(count, context, generator=generator), num_tokens).sort(-1).values
    inputs = torch.full((count, seq_len), COPY_NOISE, dtype=torch.long)
    inputs.scatter_(1, positions, data)
    inputs[:, context:] = COPY_MARKER
    labels = torch.full((count, seq_len), IGNORE, dtype=torch.long)
    labels[:, context + 1 :] = data
    return inputs, labels


def icl_markov_examples(
    count: int, seq_len: int, order: int, num_symbols: int, generator: torch.Generator, beta: float = 1.0
) -> tuple[Tensor, Tensor]:
    """(input_ids, labels), each (count, seq_len): sequences of order-``order`` chains with rows ~ Dirichlet(beta),
    a fresh kernel per sequence; labels are the sequence with its first ``order`` targets ignored."""
    _positive("seq_len", seq_len, order + 1)
    _positive("count", count)
    inputs, _ = RandomChainSampler(order, num_symbols, beta, per_sequence=True).sample(count, seq_len, generator)
    labels = inputs.clone()
    labels[:, :order] = IGNORE
    return inputs, labels


def chance_accuracy(task: str, vocab_size: int, num_pairs: int = 1) -> float:
    """The accuracy of a guess that knows only which tokens can be answers: a value of the value half (mqar), an
    ordinary token (induction), a data token (selective_copy), a symbol (icl_markov)."""
    candidates = {"mqar": vocab_size - vocab_size // 2, "induction": vocab_size - 1,
                  "selective_copy": vocab_size - 2, "icl_markov": vocab_size}  # fmt: skip
    if task not in candidates:
        raise ValueError(f"task={task!r} must be one of {tuple(candidates)}")
    return 1.0 / candidates[task]


__all__ = ["IGNORE", "MQAR_POWER_A", "chance_accuracy", "check_induction", "check_mqar", "check_selective_copy",
           "icl_markov_examples", "induction_examples", "mqar_examples", "selective_copy_examples"]  # fmt: skip

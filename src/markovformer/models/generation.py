"""Generation for every model family: the one ``generate`` signature (``GenerationMixin``), greedy or sampled next
tokens (temperature, top-k, nucleus top-p), and the decoding loop with end-of-sequence handling."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from markovformer.models.inputs import check_token_ids

Step = Callable[[Tensor], Tensor]  # the next tokens (B,) -> the logits (B, V) after them


def sample_next_token(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    banned_token_id: int | None = None,
) -> Tensor:
    """Draw one token per row from logits (B, V). temperature 0 means greedy (argmax). ``banned_token_id`` (e.g. the
    padding id of a tokenizer, which label smoothing gives a little mass) is never drawn."""
    check_generation_options(None, temperature, top_k, top_p)
    if banned_token_id is not None:
        logits = logits.float().index_fill(-1, torch.tensor([banned_token_id], device=logits.device), float("-inf"))
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # keep the smallest prefix whose mass reaches top_p: drop a token when the mass before it already does
        drop = (probs.cumsum(-1) - probs) >= top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate_tokens(
    model: torch.nn.Module,
    input_ids: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    max_context: int | None = None,
    banned_token_id: int | None = None,
) -> Tensor:
    """Extend (B, T) prompts by ``max_new_tokens`` sampled tokens; the model sees at most ``max_context`` tokens and
    never draws ``banned_token_id``."""
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: give at least one token")
    model.eval()
    tokens = input_ids
    for _ in range(max_new_tokens):
        context = tokens if max_context is None else tokens[:, -max_context:]
        logits = model(context).logits[:, -1]
        token = sample_next_token(logits, temperature, top_k, top_p, generator, banned_token_id)
        tokens = torch.cat([tokens, token[:, None]], dim=1)
    return tokens


def _is_token_id(value: object, vocab_size: int) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and 0 <= value < vocab_size


def check_generation_options(
    max_new_tokens: int | None,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    *,
    do_sample: bool = False,
    vocab_size: int | None = None,
    eos_token_id: int | None = None,
    suppress_tokens: Iterable[int] | None = None,
    length_penalty: float = 1.0,
) -> None:
    """ValueError naming the first bad option of ``generate`` (``max_new_tokens`` None: the options of one draw).
    Temperature 0 is greedy, so sampling (``do_sample``) needs it above 0. With ``vocab_size`` (None for a model
    that writes real vectors), ``eos_token_id`` and ``suppress_tokens`` must be ids in the vocabulary, and the
    suppressed tokens must leave at least one to choose."""
    if max_new_tokens is not None and (isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
                                       or max_new_tokens < 0):  # fmt: skip
        raise ValueError(f"max_new_tokens={max_new_tokens!r}: must be a non-negative integer")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature={temperature!r} must be a finite number >= 0 (0 = greedy)")
    if do_sample and temperature == 0:
        raise ValueError("temperature=0 cannot sample (it is greedy decoding): give a temperature > 0, or "
                         "do_sample=False")  # fmt: skip
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k={top_k!r} must be a positive integer")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p!r} must lie in (0, 1]")
    if not math.isfinite(length_penalty):
        raise ValueError(f"length_penalty={length_penalty!r} must be a finite number")
    if vocab_size is None:
        return
    if eos_token_id is not None and not _is_token_id(eos_token_id, vocab_size):
        raise ValueError(f"eos_token_id={eos_token_id!r} is not a token id of the vocabulary [0, {vocab_size})")
    suppressed = set()
    for token in suppress_tokens or ():
        if not _is_token_id(token, vocab_size):
            raise ValueError(f"suppress_tokens holds {token!r}, not a token id of the vocabulary [0, {vocab_size})")
        suppressed.add(int(token))
    if len(suppressed) == vocab_size:
        raise ValueError(f"suppress_tokens covers all {vocab_size} tokens of the vocabulary: none is left to "
                         f"generate")  # fmt: skip


def next_tokens(
    logits: Tensor,
    do_sample: bool,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    suppress_tokens: list[int] | None = None,
) -> Tensor:
    """(B, V) logits -> (B,) tokens: the argmax (``do_sample=False``) or a draw; ``suppress_tokens`` never come."""
    if suppress_tokens:
        index = torch.tensor(list(suppress_tokens), device=logits.device)
        logits = logits.float().index_fill(-1, index, float("-inf"))
    if not do_sample:
        return logits.argmax(-1)
    return sample_next_token(logits, temperature, top_k, top_p, generator)


def decoding_loop(
    input_ids: Tensor,
    logits: Tensor,
    step: Step,
    max_new_tokens: int,
    choose: Callable[[Tensor], Tensor],
    eos_token_id: int | None = None,
) -> Tensor:
    """Extend input_ids (B, T) from the first next-token logits (B, V): ``choose`` picks tokens, ``step`` feeds them
    back. A row that has emitted ``eos_token_id`` continues with it; the loop ends early once every row has.
    Returns (B, T + generated)."""
    pieces = [input_ids]
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    for index in range(max_new_tokens):
        tokens = choose(logits).to(input_ids.dtype)
        if eos_token_id is not None:
            tokens = tokens.masked_fill(finished, eos_token_id)
            finished |= tokens == eos_token_id
        pieces.append(tokens[:, None])
        if index + 1 == max_new_tokens or bool(finished.all()):
            break
        logits = step(tokens)
    return torch.cat(pieces, dim=1)


class GenerationMixin:
    """``generate`` for the causal language models of every family. A family implements
    ``start_decoding(input_ids, attention_mask, max_new_tokens) -> (logits (B, V), step)``: the next-token logits
    after the prompt and a function that feeds the chosen tokens (B,) and returns the logits after them."""

    def start_decoding(
        self, input_ids: Tensor, attention_mask: Tensor | None, max_new_tokens: int
    ) -> tuple[Tensor, Step]:
        raise NotImplementedError

    @torch.no_grad()
    def generate(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        *,
        max_new_tokens: int,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        eos_token_id: int | None = None,
        generator: torch.Generator | None = None,
        suppress_tokens: list[int] | None = None,
    ) -> Tensor:
        """Continue prompts input_ids (B, T) (``attention_mask`` (B, T), 0 at padding, e.g. on the left) by up to
        ``max_new_tokens`` tokens -> (B, T + new). Greedy by default (the argmax of the model's next-token logits,
        which equal its teacher-forced logits); ``do_sample`` draws at ``temperature`` from the ``top_k`` tokens /
        the nucleus of mass ``top_p``. Rows that emit ``eos_token_id`` continue with it, and generation stops once
        every row has. ``suppress_tokens`` (e.g. a tokenizer's padding id) are never chosen. Runs in eval mode
        and restores the model's mode."""
        vocab_size = self.config.vocab_size
        check_generation_options(max_new_tokens, temperature, top_k, top_p, do_sample=do_sample,
                                 vocab_size=vocab_size, eos_token_id=eos_token_id,
                                 suppress_tokens=suppress_tokens)  # fmt: skip
        check_token_ids(input_ids, vocab_size)
        if attention_mask is not None and tuple(attention_mask.shape) != tuple(input_ids.shape):
            raise ValueError(f"attention_mask must be (B, T) = {tuple(input_ids.shape)}; got "
                             f"{tuple(attention_mask.shape)}")  # fmt: skip
        was_training = self.training
        self.eval()
        try:
            if max_new_tokens == 0:
                return input_ids
            logits, step = self.start_decoding(input_ids, attention_mask, max_new_tokens)

            def choose(scores: Tensor) -> Tensor:
                return next_tokens(scores, do_sample, temperature, top_k, top_p, generator, suppress_tokens)

            return decoding_loop(input_ids, logits, step, max_new_tokens, choose, eos_token_id)
        finally:
            self.train(was_training)

"""Generation for every model family: the one generation contract (``GenerationConfig``, validated once, as in
transformers), the one ``generate`` signature (``GenerationMixin``), the next-token choice (greedy, or a draw at a
temperature from the top-k tokens / the nucleus of mass top-p) and the one decoding loop with end-of-sequence
handling. A family supplies only what differs: its start of decoding, or its own search (the translator's beams)."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from markovformer.layers.options import check_fields, interval, option
from markovformer.models.inputs import check_left_padded, check_token_ids
from markovformer.ops.padding import check_attention_mask

Step = Callable[[Tensor], Tensor]  # the next tokens (B,) -> the logits (B, V) after them
# Tokens a nucleus (top_p) is looked for among first, taken by topk: sorting all V took 3.5 ms a step at V = 50,257,
# where the model's head (d_model 64) takes 0.3 ms and topk 0.1 ms; a nucleus that may reach past them sorts all.
NUCLEUS_CANDIDATES = 1024


def _finite(low: float | None = None) -> Callable[[Any], str | None]:
    def rule(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            return "must be a finite number" + ("" if low is None else f" >= {low}")
        return None if low is None or value >= low else f"must be a finite number >= {low}"

    return rule


def _probability_mass(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= 1:
        return "must lie in (0, 1] or be None"
    return None


MAX_BEAMS = 1024  # far beyond any use (the paper searches with 4); a larger number is a typo


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be True or False"


def _token_ids(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        return "must be a list of token ids or None"
    if any(isinstance(token, bool) or not isinstance(token, numbers.Integral) for token in value):
        return "must hold integer token ids"
    return None


def sampling_options(temperature: float, top_k: int | None, top_p: float | None) -> dict[str, Any]:
    """The sampling options among these that change a draw, by name: a temperature other than 1 (and 0, greedy's
    own), any top_k, a top_p below 1. Decoding that does not sample would ignore them."""
    given = {"temperature": None if temperature in (0, 1) else temperature, "top_k": top_k,
             "top_p": None if top_p == 1 else top_p}  # fmt: skip
    return {name: value for name, value in given.items() if value is not None}


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    """How ``generate`` decodes, for every family (transformers' names). Each field's rule is declared on it and
    checked once, when the config is made (``ValueError("field=value: why")``); the vocabulary rules (token ids
    inside it) once more per model, by ``check_vocabulary``. ``replace(**changes)`` gives a checked copy.

    ``do_sample=False`` (greedy) takes the argmax of the next-token logits; True draws at ``temperature`` from the
    ``top_k`` most likely tokens and the ``top_p`` probability mass (which decoding without sampling would ignore:
    refused there). A row that emits ``eos_token_id`` ends, filled after with ``pad_token_id`` (eos when None);
    ``suppress_tokens`` are never chosen. ``num_beams`` > 1 (at most
    ``MAX_BEAMS``; the translator only) is beam search, whose scores are log-probability / length **
    ``length_penalty``. ``compile_step``: a causal LM's one-token step runs through ``torch.compile`` (compiled
    during the first tokens, once per model and batch shape)."""

    max_new_tokens: int = option(20, interval(0, integer=True))
    # False: the argmax of the next-token logits (greedy); True: a draw at ``temperature`` from top_k / top_p
    do_sample: bool = option(False, _boolean)
    temperature: float = option(1.0, _finite(0))  # 0 is greedy
    top_k: int | None = option(None, interval(1, integer=True, optional=True))
    top_p: float | None = option(None, _probability_mass)
    # a row that emits eos ends (filled after with pad_token_id, or eos when None); the translator's default: its own
    eos_token_id: int | None = option(None, interval(0, integer=True, optional=True))
    pad_token_id: int | None = option(None, interval(0, integer=True, optional=True))
    # never chosen (e.g. a tokenizer's padding); any sequence of ids, kept as a tuple
    suppress_tokens: Sequence[int] | None = option(None, _token_ids)
    # > 1: beam search (the translator); at most MAX_BEAMS: a typo's million beams ran for hours and took GBs
    num_beams: int = option(1, interval(1, MAX_BEAMS, integer=True))
    # beam scores are log-probability / length ** length_penalty; away from 1.0 only with num_beams > 1
    length_penalty: float = option(1.0, _finite())
    # True: a causal LM's one-token decoding step runs through ``torch.compile`` (compiled once per model and batch
    # shape, during the first tokens, 25-125 s on a 2-core CPU; then about half the step time of eager decoding, see
    # ``bench --parts decode``); refused by a family without such a step (``compiles_step``)
    compile_step: bool = option(False, _boolean)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.suppress_tokens is not None:
            object.__setattr__(self, "suppress_tokens", tuple(int(token) for token in self.suppress_tokens))
        if self.do_sample and self.temperature == 0:
            raise ValueError("temperature=0 cannot sample (it is greedy decoding): give a temperature > 0, or "
                             "do_sample=False")  # fmt: skip
        ignored = {} if self.do_sample else sampling_options(self.temperature, self.top_k, self.top_p)
        if ignored:  # they were ignored without a word
            name, value = next(iter(ignored.items()))
            raise ValueError(f"{name}={value!r}: decoding without sampling (do_sample=False: greedy, or beam search) "
                             f"reads no {name}; set do_sample=True to sample, or leave {name} out")  # fmt: skip
        if self.do_sample and self.num_beams != 1:
            raise ValueError(f"num_beams={self.num_beams!r}: do_sample=True samples one hypothesis, num_beams must "
                             "be 1")  # fmt: skip
        if self.num_beams == 1 and self.length_penalty != 1.0:  # it was ignored without a word
            raise ValueError(f"length_penalty={self.length_penalty!r}: only beam search (num_beams > 1) ranks "
                             "hypotheses by their length; with one beam leave it at 1.0")  # fmt: skip

    def replace(self, **changes: Any) -> GenerationConfig:
        """A checked copy with ``changes``; TypeError naming a key that is not a field."""
        names = {field.name for field in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError(f"{unknown[0]!r} is not a generation option; expected one of {sorted(names)}")
        return dataclasses.replace(self, **changes) if changes else self

    def check_vocabulary(self, vocab_size: int | None) -> None:
        """ValueError unless eos/pad and the suppressed tokens are ids of a vocabulary of ``vocab_size`` (None: a
        model that writes real vectors) that leave at least one token to choose."""
        if vocab_size is None:
            return
        for name in ("eos_token_id", "pad_token_id"):
            value = getattr(self, name)
            if value is not None and value >= vocab_size:
                raise ValueError(f"{name}={value!r}: not a token id of the vocabulary [0, {vocab_size})")
        suppressed = set(self.suppress_tokens or ())
        outside = [token for token in suppressed if not 0 <= token < vocab_size]
        if outside:
            raise ValueError(f"suppress_tokens holds {outside[0]!r}, not a token id of the vocabulary "
                             f"[0, {vocab_size})")  # fmt: skip
        if len(suppressed) == vocab_size:
            raise ValueError(f"suppress_tokens covers all {vocab_size} tokens of the vocabulary: none is left to "
                             f"generate")  # fmt: skip


def next_tokens(logits: Tensor, config: GenerationConfig, generator: torch.Generator | None = None) -> Tensor:
    """(B, V) logits -> (B,) tokens as ``config`` (already checked) says: the argmax, or a draw at its temperature
    from its top-k tokens / nucleus of mass top-p; ``suppress_tokens`` never come."""
    if config.suppress_tokens:
        index = torch.tensor(config.suppress_tokens, device=logits.device)
        logits = logits.float().index_fill(-1, index, float("-inf"))
    if not config.do_sample:
        return logits.argmax(-1)
    # shifted to a row maximum of 0 and scaled in float64: a tiny temperature sends every other token to -inf and
    # keeps the maximum at 0 (logits / 1e-40 in float32 was inf - inf = nan, and torch's sampler raised)
    logits = logits.double()
    logits = (logits - logits.amax(-1, keepdim=True)) / config.temperature
    if config.top_k is not None and config.top_k < logits.shape[-1]:
        kth = logits.topk(config.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if config.top_p is not None and config.top_p < 1:
        logits = nucleus(logits, config.top_p)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


def nucleus(logits: Tensor, top_p: float) -> Tensor:
    """``logits`` (B, V) with every token outside the nucleus of mass ``top_p`` at -inf: the smallest prefix of the
    tokens by falling probability whose mass reaches top_p (a token is dropped when the mass before it already
    does), and every token tied with its last, as top_k keeps ties: which of equal tokens is kept must not be their
    ids. Looked for among the ``NUCLEUS_CANDIDATES`` likeliest tokens first (topk); all are sorted only when a row's
    nucleus may reach past them."""
    if logits.shape[-1] > NUCLEUS_CANDIDATES:
        top = logits.topk(NUCLEUS_CANDIDATES, dim=-1).values  # falling
        shifted = logits - top[..., :1]
        probs = (top - top[..., :1]).exp() / shifted.exp().sum(-1, keepdim=True)
        kept = ((probs.cumsum(-1) - probs) < top_p).sum(-1, keepdim=True)
        if bool((kept < NUCLEUS_CANDIDATES).all()):
            return logits.masked_fill(logits < top.gather(-1, kept - 1), float("-inf"))
    sorted_logits = logits.sort(dim=-1, descending=True).values
    probs = sorted_logits.softmax(-1)
    kept = ((probs.cumsum(-1) - probs) < top_p).sum(-1, keepdim=True)
    return logits.masked_fill(logits < sorted_logits.gather(-1, kept - 1), float("-inf"))


def sample_next_token(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    banned_token_id: int | None = None,
) -> Tensor:
    """Draw one token per row from logits (B, V); temperature 0 means greedy (argmax). ``banned_token_id`` (e.g. the
    padding id of a tokenizer, which label smoothing gives a little mass) is never drawn. The options are checked
    by the ``GenerationConfig`` they make."""
    config = GenerationConfig(do_sample=temperature != 0, temperature=temperature, top_k=top_k, top_p=top_p,
                              suppress_tokens=None if banned_token_id is None else [banned_token_id])  # fmt: skip
    return next_tokens(logits, config, generator)


def decoding_loop(
    input_ids: Tensor,
    logits: Tensor,
    step: Step,
    config: GenerationConfig,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Extend input_ids (B, T) from the first next-token logits (B, V) by up to ``config.max_new_tokens``: tokens
    chosen by :func:`next_tokens`, fed back by ``step``. A row that has emitted ``eos_token_id`` continues with
    ``pad_token_id`` (eos when None); the loop ends early once every row has. Returns (B, T + generated)."""
    pieces = [input_ids]
    eos = config.eos_token_id
    fill = eos if config.pad_token_id is None else config.pad_token_id
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    for index in range(config.max_new_tokens):
        tokens = next_tokens(logits, config, generator).to(input_ids.dtype)
        if eos is not None:
            tokens = tokens.masked_fill(finished, fill)
            finished |= tokens == eos
        pieces.append(tokens[:, None])
        if index + 1 == config.max_new_tokens or bool(finished.all()):
            break
        logits = step(tokens)
    return torch.cat(pieces, dim=1)


def uncached(compiled: Step) -> Step:
    """``compiled`` (a ``torch.compile``'d step) called without torch's AOTAutograd cache: that cache (on disk,
    across processes) handed the step of a model compiled by its own ``compile()`` the graph compiled for the same
    step without it, whose inputs alias otherwise, and Inductor asserted "wrong number of dimensions" (torch 2.13)."""

    def step(tokens: Tensor) -> Tensor:
        with torch._functorch.config.patch(enable_autograd_cache=False):
            return compiled(tokens)

    return step


def resolve_generation_config(generation_config: GenerationConfig | None, options: dict) -> GenerationConfig:
    """``generation_config`` (default: ``GenerationConfig()``) updated by keyword ``options``, checked once."""
    if generation_config is not None and not isinstance(generation_config, GenerationConfig):
        given = type(generation_config)  # named in full: transformers' class has the same name
        raise TypeError(f"generation_config must be a {__name__}.GenerationConfig; got {given.__module__}."
                        f"{given.__qualname__}: give its options as keywords instead, e.g. max_new_tokens=50")
    return (generation_config or GenerationConfig()).replace(**options)


class GenerationMixin:
    """``generate`` for every family. A causal language model implements ``start_decoding(input_ids,
    attention_mask, max_new_tokens) -> (logits (B, V), step)``: the next-token logits after the prompt and a
    function that feeds the chosen tokens (B,) and returns the logits after them. A family that decodes otherwise
    (the translator's search, the VMT's latent chain) overrides ``generate_from`` and, where its inputs differ,
    ``check_generation_inputs``; ``generation_inputs`` names the extra keyword inputs its ``generate_from`` takes."""

    supports_beam_search: ClassVar[bool] = False
    # False for a family whose own ``generate_from`` has no one-token step to compile (the translator's search, the
    # VMT's latent chain): ``compile_step=True`` is refused there, not ignored
    compiles_step: ClassVar[bool] = True
    generation_inputs: ClassVar[tuple[str, ...]] = ()
    # True for a family whose model has a start of its own (the VMT's P(x_1)): an empty prompt samples from it
    samples_from_empty_prompt: ClassVar[bool] = False

    def start_decoding(
        self, input_ids: Tensor, attention_mask: Tensor | None, max_new_tokens: int
    ) -> tuple[Tensor, Step]:
        """A causal LM's start of ``generate``: the next-token logits (B, V) after the prompt and the step that
        feeds the chosen tokens (B,) and returns the logits after them (see the class docstring)."""
        raise NotImplementedError

    def check_generation_inputs(self, input_ids: Tensor, attention_mask: Tensor | None) -> None:
        """ValueError unless input_ids (B, T) are ids of the vocabulary and ``attention_mask`` is a (B, T) mask of
        left-padded rows, each with a real token (``check_left_padded``: the next token is read at a row's last
        position)."""
        check_token_ids(input_ids, self.config.vocab_size)
        if attention_mask is not None:
            check_attention_mask(attention_mask, tuple(input_ids.shape))
            check_left_padded(attention_mask, "attention_mask")

    def generate_from(
        self, input_ids: Tensor, attention_mask: Tensor | None, config: GenerationConfig,
        generator: torch.Generator | None,
    ) -> Tensor:  # fmt: skip
        """A causal language model's continuation: ``start_decoding``, then the decoding loop."""
        if config.max_new_tokens == 0:
            return input_ids
        logits, step = self.start_decoding(input_ids, attention_mask, config.max_new_tokens)
        if config.compile_step:
            step = uncached(torch.compile(step))
        return decoding_loop(input_ids, logits, step, config, generator)

    @torch.no_grad()
    def generate(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        generation_config: GenerationConfig | None = None,
        *,
        generator: torch.Generator | None = None,
        **options: Any,
    ) -> Tensor:
        """Continue prompts input_ids (B, T) (``attention_mask`` (B, T), 0 at padding, e.g. on the left) as
        ``generation_config`` says, updated by keyword ``options`` (its fields: ``max_new_tokens``, ``do_sample``,
        ``temperature``, ``top_k``, ``top_p``, ``eos_token_id``, ``pad_token_id``, ``suppress_tokens``,
        ``num_beams``, ``length_penalty``, ``compile_step``; as in transformers; and the family's own inputs,
        ``generation_inputs``: the VMT's ``carry``, MAT's ``max_lengths``) -> (B, T + new) for a causal LM. Greedy
        by default (the argmax of the model's next-token logits, which equal its teacher-forced logits); draws come
        from ``generator``. Runs in eval mode and restores the model's mode."""
        if attention_mask is not None and not isinstance(attention_mask, Tensor):
            # transformers' generate takes its config second: here the second argument is the mask
            hint = " (give the GenerationConfig as generation_config=...)" if isinstance(
                attention_mask, GenerationConfig) else ""  # fmt: skip
            raise TypeError(f"attention_mask must be a (B, T) tensor or None; got {type(attention_mask).__name__}"
                            f"{hint}")  # fmt: skip
        inputs = {name: options.pop(name) for name in self.generation_inputs if name in options}
        config = resolve_generation_config(generation_config, options)
        if config.num_beams != 1 and not self.supports_beam_search:
            raise ValueError(f"num_beams={config.num_beams}: {type(self).__name__} has no beam search (give 1)")
        if config.compile_step and not self.compiles_step:
            raise ValueError(f"compile_step=True: {type(self).__name__} decodes without a one-token step to "
                             "compile; leave compile_step off")  # fmt: skip
        config.check_vocabulary(getattr(self.config, "vocab_size", None))
        self.check_generation_inputs(input_ids, attention_mask)
        was_training = self.training
        self.eval()
        try:
            return self.generate_from(input_ids, attention_mask, config, generator, **inputs)
        finally:
            self.train(was_training)


__all__ = ["GenerationConfig", "GenerationMixin", "Step", "decoding_loop", "next_tokens", "resolve_generation_config",
           "sample_next_token", "sampling_options"]  # fmt: skip

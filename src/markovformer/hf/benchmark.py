"""Per-token time of ``transformers``' ``generate`` on a markovformer causal LM: with ``MarkovformerCache`` (each
step one token through the layers' own decoding state), without it (``use_cache=False``: the whole prefix re-run
each step, what ``generate`` did before the cache), and markovformer's own ``generate``, at the same generated
tokens. Batch 1, greedy, random weights, one thread unless told otherwise::

    python -m markovformer.hf.benchmark            # the local Markovian Transformer of bench/decode.py, marks 1, 4096

The time of generated token k is the time between the model's forward producing it and the next one (the step's
forward, choosing the token and preparing the next input: everything ``generate`` does per token). A row gives the
median over ``MARK_STEPS`` tokens from each mark. The uncached time of token k is that of a forward over the prompt
and k - 1 tokens, whatever came before, so it is measured by generating from a prompt that long (not by generating
k tokens first). Each time is taken on two clocks: the wall clock, and the CPU time of the calling thread
(``time.thread_time``; with one thread torch computes in that thread), which other processes on a loaded machine
disturb far less; with more threads only the wall clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

from markovformer.hf.modeling import HF_CLASSES, HF_CONFIGS

LOCAL_MARKOV = {"vocab_size": 256, "d_model": 256, "n_layers": 6, "n_heads": 8, "attention": "markov",
                "scope": "local", "max_order": 8, "window": 64}  # fmt: skip  # bench/decode.py's markov_local
PROMPT_LENGTH = 16
MARK_STEPS = 16


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def token_times(run: Callable[[], torch.Tensor], model: torch.nn.Module,
                clocks: tuple[str, ...] = tuple(CLOCKS)) -> tuple[dict[str, list[float]], torch.Tensor]:  # fmt: skip
    """Seconds of each generated token while ``run()`` generates with ``model`` (the markovformer causal LM that
    every step calls), on each of ``clocks`` (names in ``CLOCKS``): entry k - 1 is token k's time, from the forward
    that produces it to the next forward (the last token, with no forward after it, is left out); and what ``run``
    returned."""
    starts: dict[str, list[float]] = {name: [] for name in clocks}

    def note(*args) -> None:
        for name in clocks:
            clock = CLOCKS[name]
            starts[name].append(clock())

    hook = model.register_forward_pre_hook(note)
    try:
        output = run()
    finally:
        hook.remove()
    return {name: [b - a for a, b in zip(times, times[1:], strict=False)] for name, times in starts.items()}, output


def _median_from(times: dict[str, list[float]], mark: int) -> dict[str, float]:
    """Milliseconds per token, median over ``MARK_STEPS`` tokens from ``mark``, on each clock."""
    return {name: 1e3 * statistics.median(values[mark - 1 : mark - 1 + MARK_STEPS]) for name, values in times.items()}


@torch.no_grad()
def measure(options: dict | None = None, marks: tuple[int, ...] = (1, 4096), threads: int = 1, seed: int = 0,
            repeats: int = 2) -> dict:  # fmt: skip
    """Milliseconds per generated token (on each clock) at each of ``marks`` (median of ``MARK_STEPS`` tokens from
    it) for ``transformers``' ``generate`` with the cache (``hf_cached``), without it (``hf_uncached``) and
    markovformer's ``generate`` (``markovformer``), on the causal LM of ``options`` (default ``LOCAL_MARKOV``);
    also whether the cached and markovformer's greedy ids agree. After a short warm-up of each, the three run
    ``repeats`` times in turn and each value is the least of its repeats (the one a busy machine disturbed least).
    With more than one thread only the wall clock is read (the calling thread's CPU time leaves the others' out).
    Torch's thread count is set back afterwards."""
    for name, values in (("marks", marks), ("threads", (threads,)), ("repeats", (repeats,))):
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise ValueError(f"{name}={values if name == 'marks' else values[0]!r}: must be integers >= 1")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        clocks = tuple(CLOCKS) if threads == 1 else ("wall",)
        return _measure(options, marks, seed, repeats, clocks) | {"threads": threads}
    finally:
        torch.set_num_threads(before)


def _measure(options: dict | None, marks: tuple[int, ...], seed: int, repeats: int, clocks: tuple[str, ...]) -> dict:
    torch.manual_seed(seed)
    config = HF_CONFIGS["markovian_transformer"](**(options or LOCAL_MARKOV))
    model = HF_CLASSES["markovian_transformer", "causal_lm"][1](config).eval()
    inner = model.markovformer
    prompt = torch.randint(1, config.vocab_size, (1, PROMPT_LENGTH), generator=torch.Generator().manual_seed(seed))
    length = max(marks) + MARK_STEPS  # the last timed token has one forward after it
    greedy = dict(do_sample=False, pad_token_id=0)
    runs = {"markovformer": lambda tokens: inner.generate(prompt, max_new_tokens=tokens),
            "hf_cached": lambda tokens: model.generate(prompt, max_new_tokens=tokens, **greedy)}  # fmt: skip
    for run in runs.values():  # warm-up
        run(MARK_STEPS)
    rows: dict[str, dict[int, list[dict[str, float]]]] = {name: {mark: [] for mark in marks}
                                                          for name in (*runs, "hf_uncached")}  # fmt: skip
    outputs = {}
    for _ in range(repeats):
        for name, run in runs.items():
            times, outputs[name] = token_times(lambda run=run: run(length), inner, clocks)
            for mark in marks:
                rows[name][mark].append(_median_from(times, mark))
        for mark in marks:  # the uncached time of token `mark`: a forward over the prompt and mark - 1 tokens
            longer = torch.cat([prompt, outputs["hf_cached"][:, PROMPT_LENGTH : PROMPT_LENGTH + mark - 1]], dim=1)
            # its mask given: transformers would read a generated token 0 (pad_token_id) as padding
            times, _ = token_times(lambda longer=longer: model.generate(
                longer, attention_mask=torch.ones_like(longer), max_new_tokens=MARK_STEPS + 1, use_cache=False,
                **greedy), inner, clocks)  # fmt: skip
            rows["hf_uncached"][mark].append(_median_from(times, 1))
    least = {name: {mark: {clock: min(value[clock] for value in values) for clock in clocks}
                    for mark, values in by_mark.items()} for name, by_mark in rows.items()}  # fmt: skip
    return {"options": dict(options or LOCAL_MARKOV), "prompt": PROMPT_LENGTH,
            "repeats": repeats, "ms_per_token": least,
            "same_greedy_ids": bool(torch.equal(outputs["hf_cached"], outputs["markovformer"]))}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--marks", type=int, nargs="+", default=[1, 4096])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    arguments = parser.parse_args(argv)
    print(json.dumps(measure(marks=tuple(arguments.marks), threads=arguments.threads, repeats=arguments.repeats),
                     indent=2))  # fmt: skip


if __name__ == "__main__":
    main()

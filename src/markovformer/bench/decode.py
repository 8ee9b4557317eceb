"""The ``decode`` part: greedy generation speed and memory against generated length for the Markovian Transformer,
a local-scope model (Markov attention, window W: rolling key/value caches of W + 1 entries per layer) against the
same model with global softmax attention and a growing key/value cache. Random weights.

One case is (kind, L, batch): the prompt in one pass, then L steps of one token, timed per step. Its row: tokens per
second over the loop, the median time of one step over the first and the last ``min(256, L // 8)`` steps and their
ratio, the key/value cache held at the end (floats per row) and the peak memory of the loop.
"""

from __future__ import annotations

import statistics
import time

import torch

from markovformer.bench.measure import PeakMemory
from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM

DECODE_SIZE = {"vocab_size": 256, "d_model": 256, "n_layers": 6, "n_heads": 4}
DECODE_KINDS = {
    "markov_local": {"attention": "markov", "scope": "local", "max_order": 8, "window": 64},
    "softmax_global": {"attention": "softmax", "scope": "global"},
}
PROMPT_LENGTH = 16


def decode_case(kind: str, length: int, batch: int, device: str = "cpu", size: dict | None = None) -> dict:
    """Generate ``length`` tokens greedily for ``batch`` prompts with the ``kind`` model; the row described above.
    ``size`` overrides ``DECODE_SIZE`` (for small checks)."""
    torch.manual_seed(0)
    size = {**DECODE_SIZE, **(size or {})}
    config = MarkovianTransformerConfig(**size, **DECODE_KINDS[kind])
    model = MarkovianTransformerForCausalLM(config).to(device).eval()
    prompt = torch.randint(0, size["vocab_size"], (batch, PROMPT_LENGTH), generator=torch.Generator().manual_seed(1))
    prompt = prompt.to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    memory = PeakMemory(device)
    memory.start()
    step_times = []
    start = time.perf_counter()
    with torch.no_grad():
        state: dict = {}
        logits = model(prompt, state=state).logits[:, -1]
        for _ in range(length):
            step_start = time.perf_counter()
            logits = model(logits.argmax(-1)[:, None], state=state).logits[:, -1]
            sync()
            step_times.append(time.perf_counter() - step_start)
    seconds = time.perf_counter() - start
    edge = max(1, min(256, length // 8))
    start_ms, end_ms = statistics.median(step_times[:edge]) * 1e3, statistics.median(step_times[-edge:]) * 1e3
    caches = [core["cache"] for layer in state["layers"] for core in layer["mixer"]["cores"] if "cache" in core]
    cache_floats = sum(cache.floats() for cache in caches) // batch
    return {
        "part": "decode", "kind": kind, "T": length, "batch": batch, "seconds": seconds,
        "tokens_per_second": batch * length / seconds, "step_ms_start": start_ms, "step_ms_end": end_ms,
        "end_over_start": end_ms / start_ms, "cache_floats_per_row": cache_floats, "peak_mib": memory.peak_mib(),
    }  # fmt: skip


__all__ = ["DECODE_KINDS", "DECODE_SIZE", "PROMPT_LENGTH", "decode_case"]

"""The ``translation_decode`` part: greedy decoding speed and memory against output length of the Markov
translator, MAT (order 5, transparent: a fixed window of the last 5 decoder inputs) against the autoregressive
Transformer (AT) with a key/value cache, same size, random weights.

The loop is greedy search's own (``start_decoding`` once, then ``decode_step`` and argmax per token) with
``<eos>`` and ``<pad>`` masked out, so every output is exactly L tokens long. A row: tokens per second (B·L over the
whole loop, encoding included), the median time of one step over the first and the last ``L // 8`` steps (MAT's
stays flat, the cache's grows with the prefix), the decoder state in floats per row at the end (MAT: k·D; AT:
2·layers·D per generated token) and the peak memory growth of the loop.

The AT cache grows by concatenation (``torch.cat`` per layer per step, as ``decode_step`` does), so an AT step
copies its whole cache: AT cases with B·L above ``MAX_CACHE_TOKENS`` are skipped.
"""

from __future__ import annotations

import statistics
import time

import torch

from markovformer.bench.measure import PeakMemory
from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration
from markovformer.models.markov_translator.generation import decode_step, start_decoding

TRANSLATION_KINDS = {"mat": {"order": 5, "transparent": True}, "at": {"order": None, "transparent": False}}
TRANSLATION_SIZE = {"d_model": 256, "n_heads": 4, "n_encoder_layers": 3, "n_decoder_layers": 3, "vocab_size": 8000}
SOURCE_LENGTH = 32
TRANSLATION_LENGTHS = (64, 256, 1024, 4096)  # quick: 64, 256, 1024
TRANSLATION_BATCHES = (1, 32)  # quick: 1, 8
MAX_CACHE_TOKENS = 32 * 1024  # AT at B=32, L=4096 alone would take tens of minutes on a CPU


def translation_decode_case(kind: str, length: int, batch: int) -> dict:
    """Generate ``length`` tokens greedily for ``batch`` random sources with the ``kind`` model; the row above."""
    if kind not in TRANSLATION_KINDS:
        raise ValueError(f"unknown translation decode kind {kind!r}; expected one of {tuple(TRANSLATION_KINDS)}")
    torch.manual_seed(0)
    positions = max(length + 1, SOURCE_LENGTH)  # max_positions bounds the source as well as the output
    config = MarkovTranslatorConfig(**TRANSLATION_SIZE, **TRANSLATION_KINDS[kind], dropout=0.0,
                                    max_positions=positions)  # fmt: skip
    model = MarkovTranslatorForConditionalGeneration(config).eval()
    source = torch.randint(4, config.vocab_size, (batch, SOURCE_LENGTH), generator=torch.Generator().manual_seed(1))
    banned = torch.tensor([config.eos_token_id, config.pad_token_id])
    memory = PeakMemory("cpu")
    memory.start()
    step_times = []
    start = time.perf_counter()
    with torch.no_grad():
        state = start_decoding(model, source)
        tokens = torch.full((batch,), config.bos_token_id, dtype=torch.long)
        for _ in range(length):
            step_start = time.perf_counter()
            logits = decode_step(model, tokens, state)
            logits[:, banned] = float("-inf")  # never end early: every output is exactly `length` tokens
            tokens = logits.argmax(dim=-1)
            step_times.append(time.perf_counter() - step_start)
    seconds = time.perf_counter() - start
    held = [t for t in (state.inputs,) if t is not None] + [t for pair in state.cache or [] for t in pair]
    edge = max(1, length // 8)
    start_ms, end_ms = statistics.median(step_times[:edge]) * 1e3, statistics.median(step_times[-edge:]) * 1e3
    return {
        "seconds": seconds, "tokens_per_second": batch * length / seconds, "step_ms_start": start_ms,
        "step_ms_end": end_ms, "end_over_start": end_ms / start_ms,
        "state_floats_per_row": sum(t.numel() for t in held) // batch, "peak_mib": memory.peak_mib(),
    }  # fmt: skip


def crossovers(rows: list[dict]) -> dict[str, int | None]:
    """Per batch size, the shortest measured length at which MAT decodes more tokens per second than AT."""
    speed = {(r["kind"], r["batch"], r["T"]): r["tokens_per_second"] for r in rows if r.get("tokens_per_second")}
    result = {}
    for batch in sorted({r["batch"] for r in rows}):
        lengths = sorted({length for kind, b, length in speed if b == batch})
        faster = [n for n in lengths if ("mat", batch, n) in speed and ("at", batch, n) in speed
                  and speed[("mat", batch, n)] > speed[("at", batch, n)]]  # fmt: skip
        result[f"B={batch}"] = faster[0] if faster else None
    return result

"""The ``decode`` part: greedy generation speed and memory against generated length. The local Markovian
Transformer (Markov attention, window W: rolling key/value caches of W + 1 entries per layer) against the same stack
with global softmax attention (a growing cache), RetNet, RWKV, Scan, S4D and H3 mixers (recurrent states), Hyena (a
growing cache of its long convolutions' inputs), the local model with GRU injection, and transformers' GPT-2 of the
same size with its own key/value cache (when ``transformers`` is installed: the ``hf`` extra). Random weights.

One case is (kind, L, batch): the prompt in one pass, then L steps of one token, timed per step. Its row: tokens per
second over the loop (the prompt's pass included); the median time of one step over the first and the last
``min(256, L // 8)`` steps and their ratio; ``step_ms_at``: the median of the 16 steps from the 1st, 1,024th and
16,384th generated token (those the length reaches; the last 16 where the length ends within a mark's 16:
``mark_steps``); ``floor_ms``: the model's weight matrix-vector products alone (every Linear and the output layer,
batch rows at once), the least one step can cost; the key/value cache held at the end (floats per row) and the
peak memory of the loop. ``decode_targets`` reads issue 28's targets from the rows.
"""

from __future__ import annotations

import statistics
import time

import torch

from markovformer.bench.measure import PeakMemory
from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM

DECODE_SIZE = {"vocab_size": 256, "d_model": 256, "n_layers": 6, "n_heads": 8}
DECODE_KINDS = {
    "markov_local": {"attention": "markov", "scope": "local", "max_order": 8, "window": 64},
    "softmax_global": {"attention": "softmax", "scope": "global"},
    "retnet": {"attention": "retnet"},
    "rwkv": {"attention": "rwkv"},
    "scan": {"attention": "scan"},
    "s4d": {"attention": "s4d"},
    "h3": {"attention": "h3"},
    "hyena": {"attention": "hyena"},
    "markov_local_gru": {"attention": "markov", "scope": "local", "max_order": 8, "window": 64, "gru": True},
    "gpt2": {"transformers": "GPT2LMHeadModel"},  # transformers' GPT-2, same d_model / layers / heads / vocabulary
}
# the same model, its one-token step through torch.compile (``GenerationConfig(compile_step=True)``); compiled
# before the timed loop, by a short decoding of its own (``compile_seconds``)
COMPILED_KINDS = {"markov_local_compiled": "markov_local"}
# steps of the throwaway decoding: the first compile specialises the positions, the second makes them symbolic, a
# third follows when the rolling cache has dropped its empty slots (after W + 1 = 65 tokens)
COMPILE_WARMUP_STEPS = 96
PROMPT_LENGTH = 16
MARKS = (1, 1024, 16384)  # the generated tokens whose step time is reported
MARK_STEPS = 16  # steps from each mark, their median


def _gpt2(size: dict, length: int):
    """transformers' GPT-2 of ``size`` and its step: ids (B, t) -> logits, via its cache; or why it cannot run."""
    try:
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return "transformers is not installed (pip install 'markovformer[hf]')"
    if not transformers.utils.is_torch_available():  # transformers turns its models off below its own torch floor
        return f"transformers {transformers.__version__} does not run torch {torch.__version__}"
    config = GPT2Config(vocab_size=size["vocab_size"], n_embd=size["d_model"], n_layer=size["n_layers"],
                        n_head=size["n_heads"], n_positions=PROMPT_LENGTH + length + 1, bos_token_id=0,
                        eos_token_id=0)  # fmt: skip
    model = GPT2LMHeadModel(config)
    cache = {"past": None}

    def forward(ids: torch.Tensor) -> torch.Tensor:
        output = model(ids, past_key_values=cache["past"], use_cache=True)
        cache["past"] = output.past_key_values
        return output.logits[:, -1]

    return model, forward, cache


def _markovian(kind: str, size: dict):
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**size, **DECODE_KINDS[kind]))
    state: dict = {}
    return model, (lambda ids: model(ids, state=state).logits[:, -1]), state


def _compiled(kind: str, size: dict, device: str, batch: int):
    """``_markovian`` of the uncompiled kind, its one-token steps through ``torch.compile`` (the prompt eager, as
    ``generate`` does), compiled by a throwaway decoding first; and the seconds that took."""
    model, _, state = _markovian(COMPILED_KINDS[kind], size)
    model = model.to(device).eval()
    states = {"current": {}}
    compiled_step = torch.compile(lambda ids: model(ids, state=states["current"]).logits[:, -1])

    def forward(ids: torch.Tensor) -> torch.Tensor:
        if ids.shape[1] == 1:
            return compiled_step(ids)
        return model(ids, state=states["current"]).logits[:, -1]

    start = time.perf_counter()
    with torch.no_grad():
        logits = forward(torch.zeros(batch, PROMPT_LENGTH, dtype=torch.long, device=device))
        for _ in range(COMPILE_WARMUP_STEPS):
            logits = forward(logits.argmax(-1)[:, None])
    states["current"] = state  # the timed decoding starts from a fresh state
    return model, forward, state, time.perf_counter() - start


def matvec_floor_ms(model: torch.nn.Module, batch: int, device: str, repeats: int = 50) -> float:
    """Median time of one pass of ``batch`` vectors through every weight matrix of ``model`` (its Linear layers,
    GPT-2's Conv1D layers, the output projection; the embedding is a lookup): what one decoding step must at least
    spend on its weights. On CUDA each pass is synchronised before and after, as the decoding steps it is compared
    with are (unsynchronised, it timed the kernels' launches)."""
    products = []  # (x (B, in), matrix, transposed): x @ matrix.T for Linear (out, in), x @ matrix for Conv1D (in, out)
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            products.append((torch.randn(batch, module.in_features, device=device), module.weight.detach(), False))
        elif type(module).__name__ == "Conv1D":
            products.append((torch.randn(batch, module.weight.shape[0], device=device), module.weight.detach(), True))
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            for x, matrix, conv in products:
                torch.mm(x, matrix) if conv else torch.nn.functional.linear(x, matrix)
            sync()
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def mark_steps(mark: int, length: int) -> slice:
    """The ``MARK_STEPS`` steps whose median is the step time at the ``mark``-th generated token: those from the mark,
    moved back to end at the last step where the length ends within them, so every mark is a median of
    ``MARK_STEPS`` steps (at a length of exactly 1,024 or 16,384 the mark was the last step alone, one noisy step
    reported as a median of 16); fewer only where the whole length is shorter."""
    start = max(0, min(mark - 1, length - MARK_STEPS))
    return slice(start, start + MARK_STEPS)


def decode_case(kind: str, length: int, batch: int, device: str = "cpu", size: dict | None = None) -> dict:
    """Generate ``length`` tokens greedily for ``batch`` prompts with the ``kind`` model; the row described above.
    ``size`` overrides ``DECODE_SIZE`` (for small checks)."""
    torch.manual_seed(0)
    size = {**DECODE_SIZE, **(size or {})}
    compile_seconds = None
    if kind in COMPILED_KINDS:
        model, forward, state, compile_seconds = _compiled(kind, size, device, batch)
    else:
        built = _gpt2(size, length) if kind == "gpt2" else _markovian(kind, size)
        if isinstance(built, str):
            return {"part": "decode", "kind": kind, "T": length, "batch": batch, "skipped": built}
        model, forward, state = built
    model = model.to(device).eval()
    prompt = torch.randint(0, size["vocab_size"], (batch, PROMPT_LENGTH), generator=torch.Generator().manual_seed(1))
    prompt = prompt.to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    memory = PeakMemory(device)
    memory.start()
    step_times = []
    start = time.perf_counter()
    with torch.no_grad():
        logits = forward(prompt)
        sync()  # on CUDA the prompt's kernels would run inside the first step's time
        for _ in range(length):
            step_start = time.perf_counter()
            logits = forward(logits.argmax(-1)[:, None])
            sync()
            step_times.append(time.perf_counter() - step_start)
    seconds = time.perf_counter() - start
    peak_mib = memory.peak_mib()  # the loop's: read before the floor's own vectors and products are allocated
    edge = max(1, min(256, length // 8))
    start_ms, end_ms = statistics.median(step_times[:edge]) * 1e3, statistics.median(step_times[-edge:]) * 1e3
    at = {str(mark): statistics.median(step_times[mark_steps(mark, length)]) * 1e3
          for mark in MARKS if mark <= length}  # fmt: skip
    caches = [] if kind == "gpt2" else [core["cache"] for layer in state["layers"] for core in layer["mixer"]
                                        .get("cores", []) if "cache" in core]  # fmt: skip
    cache_floats = sum(cache.floats() for cache in caches) // batch
    return {
        "part": "decode", "kind": kind, "T": length, "batch": batch, "seconds": seconds,
        "tokens_per_second": batch * length / seconds, "step_ms_start": start_ms, "step_ms_end": end_ms,
        "end_over_start": end_ms / start_ms, "step_ms_at": at, "floor_ms": matvec_floor_ms(model, batch, device),
        "cache_floats_per_row": cache_floats, "peak_mib": peak_mib, "compile_seconds": compile_seconds,
    }  # fmt: skip


def decode_targets(rows: list[dict]) -> list[dict]:
    """Issue 28's targets for the local Markovian Transformer at batch 1, each met or not, from the rows of one run:
    no slower than GPT-2 with its cache, within 1.5x of its matrix-vector floor, flat (last / first step <= 1.2)."""
    targets = []
    for length in sorted({row["T"] for row in rows}):
        found = {row["kind"]: row for row in rows if row["T"] == length and row["batch"] == 1 and "skipped" not in row
                 and "error" not in row}  # fmt: skip
        gpt2 = found.get("gpt2")
        for kind, label in (("markov_local", "local"), ("markov_local_compiled", "local, compiled step")):
            local = found.get(kind)
            if local is None:
                continue
            step = local["step_ms_start"]
            if gpt2 is not None:
                ratio = step / gpt2["step_ms_start"]
                targets.append({"T": length, "target": f"{label}: step <= GPT-2 step (batch 1)", "value": ratio,
                                "met": ratio <= 1.0})  # fmt: skip
            over_floor = step / local["floor_ms"]
            targets.append({"T": length, "target": f"{label}: step <= 1.5 x matrix-vector floor",
                            "value": over_floor, "met": over_floor <= 1.5})  # fmt: skip
            targets.append({"T": length, "target": f"{label}: flat, last / first step <= 1.2",
                            "value": local["end_over_start"], "met": local["end_over_start"] <= 1.2})  # fmt: skip
    return targets


__all__ = ["COMPILED_KINDS", "DECODE_KINDS", "DECODE_SIZE", "MARKS", "PROMPT_LENGTH", "decode_case", "decode_targets",
           "mark_steps", "matvec_floor_ms"]  # fmt: skip

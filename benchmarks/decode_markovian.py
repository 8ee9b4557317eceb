"""Greedy decoding speed and memory against generated length for the Markovian Transformer: a local-scope model
(every layer Markov attention with window W, decoded from rolling key/value caches of W + 1 entries) against the
same model with global softmax attention and an ordinary preallocated key/value cache. Random weights.

Every case runs in a fresh subprocess so its peak resident memory can be read cleanly. The loop is ``generate``'s
(``IncrementalDecoder``: the prompt in one pass, then one token per step, argmax), timed per step. Reported per case:
tokens per second over the whole loop, the median time of one step over the first and the last ``min(256, L // 8)``
steps and their ratio (flat for the local model, growing with the prefix for global attention), the key/value cache
held at the end in floats per row, and the peak RSS growth over the loaded model.

    python benchmarks/decode_markovian.py                      # L = 4096, 16384; batch 1 and 16 (slow on 1 thread)
    python benchmarks/decode_markovian.py --lengths 1024 4096  # what fits
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from harness import run_child, with_peak_mib, write_record  # benchmarks/, the script's own folder

SIZE = {"vocab_size": 256, "d_model": 256, "n_layers": 6, "n_heads": 4}
KINDS = {
    "markov_local": {"attention": "markov", "scope": "local", "max_order": 8, "window": 64},
    "softmax_global": {"attention": "softmax", "scope": "global"},
}
PROMPT_LENGTH = 16


def run_case(kind: str, length: int, batch: int, threads: int) -> dict:
    import torch

    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
    from markovformer.models.markovian_transformer.decoding import IncrementalDecoder

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SIZE, **KINDS[kind])).eval()
    prompt = torch.randint(0, SIZE["vocab_size"], (batch, PROMPT_LENGTH), generator=torch.Generator().manual_seed(1))

    def generate() -> tuple[list[float], float, int]:
        step_times = []
        start = time.perf_counter()
        with torch.no_grad():
            decoder = IncrementalDecoder(model, batch, PROMPT_LENGTH + length)
            real = torch.ones(batch, 1, dtype=torch.bool)
            logits = decoder.feed(prompt, torch.ones_like(prompt, dtype=torch.bool), prompt=True)[:, -1]
            for _ in range(length):
                step_start = time.perf_counter()
                tokens = logits.argmax(-1)
                logits = decoder.feed(tokens[:, None], real)[:, -1]
                step_times.append(time.perf_counter() - step_start)
        held = sum(cache.keys.numel() + cache.values.numel() for cache in decoder.caches) // batch
        return step_times, time.perf_counter() - start, held

    (step_times, seconds, cache_floats), peak_mib = with_peak_mib(generate)
    edge = max(1, min(256, length // 8))
    start_ms, end_ms = statistics.median(step_times[:edge]) * 1e3, statistics.median(step_times[-edge:]) * 1e3
    return {
        "kind": kind, "L": length, "B": batch, "seconds": seconds, "tokens_per_s": batch * length / seconds,
        "step_ms_start": start_ms, "step_ms_end": end_ms, "end_over_start": end_ms / start_ms,
        "cache_floats_per_row": cache_floats, "peak_mib": peak_mib,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384], help="generated lengths")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default="benchmarks/results/decode_markovian.json")
    parser.add_argument("--case", nargs=3, metavar=("KIND", "L", "B"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.case:  # child process: one measurement, printed as JSON
        kind, length, batch = args.case[0], int(args.case[1]), int(args.case[2])
        print(json.dumps(run_case(kind, length, batch, args.threads)))
        return

    import torch

    rows = []
    for batch in args.batches:
        for length in args.lengths:
            for kind in args.kinds:
                row = run_child(__file__, ["--case", kind, str(length), str(batch), f"--threads={args.threads}"])
                rows.append({"kind": kind, "L": length, "B": batch, **row})
                print(f"{kind:14} B={batch:3} L={length:6}  {rows[-1].get('tokens_per_s', 0):9.1f} tok/s",
                      file=sys.stderr, flush=True)  # fmt: skip

    size = ", ".join(f"{k}={v}" for k, v in SIZE.items())
    print(f"\ngreedy decoding, {size}, prompt {PROMPT_LENGTH}; torch {torch.__version__}, threads: {args.threads}")
    print(f"{'B':>3} {'L':>6} | {'kind':14} | {'tok/s':>9} | {'ms/token start':>14} | {'ms/token end':>12} | "
          f"{'end/start':>9} | {'cache floats/row':>16} | {'peak MiB':>8}")  # fmt: skip
    for row in rows:
        if "error" in row:
            print(f"{row['B']:>3} {row['L']:>6} | {row['kind']:14} | error: {row['error'][-80:]!r}")
            continue
        print(f"{row['B']:>3} {row['L']:>6} | {row['kind']:14} | {row['tokens_per_s']:9.1f} | "
              f"{row['step_ms_start']:14.2f} | {row['step_ms_end']:12.2f} | {row['end_over_start']:9.2f} | "
              f"{row['cache_floats_per_row']:16,d} | {row['peak_mib']:8.1f}")  # fmt: skip
    write_record(args.output, {"setup": {**SIZE, "kinds": KINDS, "prompt_length": PROMPT_LENGTH}, "rows": rows},
                 args.threads)  # fmt: skip


if __name__ == "__main__":
    main()

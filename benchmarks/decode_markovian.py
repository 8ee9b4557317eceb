"""Greedy decoding speed and memory against generated length for the Markovian Transformer: a local-scope model
(every layer Markov attention with window W, decoded from rolling key/value caches of W + 1 entries) against the
same model with global softmax attention and a preallocated key/value cache. Random weights. The measurement is
``markovformer.bench.decode`` (also ``markovformer bench --parts decode``); this script runs chosen sizes and prints
a table.

Every case runs in a fresh subprocess so its peak memory is read cleanly. Reported per case: tokens per second over
the whole loop, the median time of one step over the first and the last ``min(256, L // 8)`` steps and their ratio
(flat for the local model, growing with the prefix for global attention), the key/value cache held at the end in
floats per row, and the peak memory growth of the loop.

    python benchmarks/decode_markovian.py                      # L = 4096, 16384; batch 1 and 16 (slow on 1 thread)
    python benchmarks/decode_markovian.py --lengths 1024 4096  # what fits
"""

from __future__ import annotations

import argparse
import json
import sys

from harness import run_child, write_record  # benchmarks/, the script's own folder

from markovformer.bench.decode import DECODE_KINDS, DECODE_SIZE, PROMPT_LENGTH, decode_case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384], help="generated lengths")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--kinds", nargs="+", default=list(DECODE_KINDS), choices=list(DECODE_KINDS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default="benchmarks/results/decode_markovian.json")
    parser.add_argument("--case", nargs=3, metavar=("KIND", "L", "B"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    if args.case:  # child process: one measurement, printed as JSON
        torch.set_num_threads(args.threads)
        print(json.dumps(decode_case(args.case[0], int(args.case[1]), int(args.case[2]))))
        return

    rows = []
    for batch in args.batches:
        for length in args.lengths:
            for kind in args.kinds:
                row = run_child(__file__, ["--case", kind, str(length), str(batch), f"--threads={args.threads}"])
                rows.append({"kind": kind, "T": length, "batch": batch, **row})
                print(f"{kind:14} B={batch:3} L={length:6}  {rows[-1].get('tokens_per_second', 0):9.1f} tok/s",
                      file=sys.stderr, flush=True)  # fmt: skip

    size = ", ".join(f"{k}={v}" for k, v in DECODE_SIZE.items())
    print(f"\ngreedy decoding, {size}, prompt {PROMPT_LENGTH}; torch {torch.__version__}, threads: {args.threads}")
    print(f"{'B':>3} {'L':>6} | {'kind':14} | {'tok/s':>9} | {'ms/token start':>14} | {'ms/token end':>12} | "
          f"{'end/start':>9} | {'cache floats/row':>16} | {'peak MiB':>8}")  # fmt: skip
    for row in rows:
        if "error" in row:
            print(f"{row['batch']:>3} {row['T']:>6} | {row['kind']:14} | error: {row['error'][-80:]!r}")
            continue
        print(f"{row['batch']:>3} {row['T']:>6} | {row['kind']:14} | {row['tokens_per_second']:9.1f} | "
              f"{row['step_ms_start']:14.2f} | {row['step_ms_end']:12.2f} | {row['end_over_start']:9.2f} | "
              f"{row['cache_floats_per_row']:16,d} | {row['peak_mib']:8.1f}")  # fmt: skip
    setup = {**DECODE_SIZE, "kinds": DECODE_KINDS, "prompt_length": PROMPT_LENGTH}
    write_record(args.output, {"setup": setup, "rows": rows}, args.threads)


if __name__ == "__main__":
    main()

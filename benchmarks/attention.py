"""Forward+backward time and peak memory of the attention ops against sequence length: the ``ops`` part of
``markovformer bench`` (``markovformer.bench``), with its options, writing into one folder.

Each (kind, T) runs in a fresh child process; times are medians of ``--repeats`` runs after a warm-up; sizes
predicted to pass the memory or time cap are skipped and say so. Kinds: Markov local (banded) and global (chunked),
softmax SDPA, random features, the split hybrid, and a Markov attention layer timed in turns with the same layer
with its attention core removed (projections only).

    python benchmarks/attention.py                          # T = 1k..64k, B=1, H=8, Dh=32, K=W=4
    python benchmarks/attention.py --lengths 4096 16384 --kinds markov_layer markov_local
    python benchmarks/attention.py --default-allocator      # with glibc's page faults on large tensors
"""

from __future__ import annotations

import argparse

from markovformer.bench import BenchSettings, run_suite
from markovformer.bench.cases import CUDA_OP_KINDS, OP_KINDS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=None, help="default 1024 .. 65536")
    parser.add_argument("--kinds", nargs="+", default=None, choices=OP_KINDS + CUDA_OP_KINDS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="default: torch's (one per core)")
    parser.add_argument("--max-memory-mib", type=float, default=None)
    parser.add_argument("--time-cap", type=float, default=None, help="seconds per step")
    parser.add_argument("--default-allocator", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/attention")
    args = parser.parse_args()
    settings = BenchSettings(
        parts=("ops",), lengths=tuple(args.lengths) if args.lengths else None,
        op_kinds=tuple(args.kinds) if args.kinds else None, repeats=args.repeats, threads=args.threads,
        memory_cap_mib=args.max_memory_mib, time_cap=args.time_cap, keep_freed_memory=not args.default_allocator,
    )  # fmt: skip
    run_suite(args.out, settings, log=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()

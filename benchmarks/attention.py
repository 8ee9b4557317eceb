"""Forward+backward time and peak memory of the attention ops against sequence length.

Each (kind, T) runs in a fresh subprocess so its peak resident memory can be read cleanly (CPU tensors are not
visible to tracemalloc). Times are medians of ``--repeats`` runs after one warm-up.

    python benchmarks/attention.py                    # T = 1k..16k, B=1, H=8, Dh=32, K=4
    python benchmarks/attention.py --lengths 1024 4096 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from harness import run_child, with_peak_mib, write_record  # benchmarks/, the script's own folder

KINDS = ("markov_local", "markov_global", "softmax_sdpa", "random_feature")


def run_case(kind: str, seq_len: int, batch: int, heads: int, head_dim: int, order: int, repeats: int) -> dict:
    import torch
    import torch.nn.functional as F

    from markovformer.ops.banded_attention import banded_attention
    from markovformer.ops.linear_attention import draw_projection, feature_map, linear_attention

    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq_len, head_dim, generator=generator) for _ in range(3))
    bias = torch.randn(batch, heads, seq_len, order, generator=generator)
    leaves = [t.requires_grad_() for t in (q, k, v, bias)]
    projection = draw_projection(64, head_dim, generator=generator)
    # A dense upstream gradient, as a following layer sends; out.sum().backward() would send a stride-0 one that
    # pushes CPU bmm onto a slow per-matrix path and measures that instead of the attention.
    upstream = torch.randn(batch, heads, seq_len, head_dim, generator=generator)

    def step() -> None:
        if kind == "markov_local":
            out = banded_attention(q, k, v, bias, window=order, causal=True, backend="banded")
        elif kind == "markov_global":
            out = banded_attention(q, k, v, bias, window=None, causal=True, backend="naive")
        elif kind == "softmax_sdpa":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            qf, kf = feature_map(q, projection, "positive", is_query=True), feature_map(k, projection, "positive")
            out = linear_attention(qf, kf, v, causal=True)
        out.backward(upstream)
        for leaf in leaves:
            leaf.grad = None

    _, peak_mib = with_peak_mib(step)  # the warm-up sets the process's peak
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {"kind": kind, "T": seq_len, "seconds": statistics.median(times), "peak_mib": peak_mib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--order", type=int, default=4, help="K = window W of the local Markov attention")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-global", type=int, default=4096, help="longest T for the O(T^2)-memory global path")
    parser.add_argument("--output", default="benchmarks/results/attention.json")
    parser.add_argument("--case", nargs=2, metavar=("KIND", "T"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    shape = dict(batch=args.batch, heads=args.heads, head_dim=args.head_dim, order=args.order, repeats=args.repeats)

    if args.case:  # child process: one measurement, printed as JSON
        print(json.dumps(run_case(args.case[0], int(args.case[1]), **shape)))
        return

    import torch

    rows = []
    for kind in args.kinds:
        for seq_len in args.lengths:
            if kind == "markov_global" and seq_len > args.max_global:
                rows.append({"kind": kind, "T": seq_len, "seconds": None, "peak_mib": None, "skipped": "O(T^2)"})
                continue
            options = [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]
            row = run_child(__file__, ["--case", kind, str(seq_len), *options])
            rows.append({"kind": kind, "T": seq_len, "seconds": None, "peak_mib": None, **row})
            print(f"{kind:15} T={seq_len:6}  {rows[-1].get('seconds')}", file=sys.stderr, flush=True)

    table = {(r["kind"], r["T"]): r for r in rows}
    print(f"\nforward+backward, B={args.batch} H={args.heads} Dh={args.head_dim} K=W={args.order}, "
          f"median of {args.repeats}; torch {torch.__version__}, {torch.get_num_threads()} threads")  # fmt: skip
    print(f"{'T':>6} | " + " | ".join(f"{kind:>24}" for kind in args.kinds))
    for seq_len in args.lengths:
        cells = []
        for kind in args.kinds:
            r = table[(kind, seq_len)]
            cells.append(
                f"{'—':>24}" if r["seconds"] is None else f"{r['seconds'] * 1e3:9.1f} ms {r['peak_mib']:8.1f} MiB"
            )
        print(f"{seq_len:>6} | " + " | ".join(cells))
    ratios = {}
    local = {r["T"]: r["seconds"] for r in rows if r["kind"] == "markov_local" and r["seconds"]}
    sdpa = {r["T"]: r["seconds"] for r in rows if r["kind"] == "softmax_sdpa" and r["seconds"]}
    if 2048 in local and 16384 in local:
        ratios["markov_local_time_16k_over_2k"] = local[16384] / local[2048]
    for seq_len in sorted(set(local) & set(sdpa)):
        ratios[f"sdpa_over_markov_local_at_{seq_len}"] = sdpa[seq_len] / local[seq_len]
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}")
    write_record(args.output, {"shape": shape, "rows": rows, "ratios": ratios}, torch.get_num_threads())


if __name__ == "__main__":
    main()

"""Forward+backward time of the linear-scan backends against sequence length (SPEC 4's recurrence).

Each case runs h, h_last = linear_scan(a, b, h0) and back-propagates a dense upstream gradient into a, b and h0.
Times are medians of up to ``--repeats`` runs after one warm-up, within a ``--budget`` of seconds per case (a case
slower than the budget reports its one run). ``naive`` is the shipped reference loop; its backward is O(T²)
(every ``a[:, t]`` gradient is a full-size tensor), so it is skipped beyond ``--max-naive``. ``naive_unbind`` is
the same loop over ``unbind`` views, whose backward is O(T): the best a plain autograd loop does, for comparison.

Then training throughput, in scored characters per second (forward, backward and an AdamW step), of the Scan
Markov model of ``configs/scan_shakespeare.yaml`` (d=128): this library's training (16 windows of 129 characters,
every position predicting its next character from its last n, one n in 2..5 per step) against the source's
(batches of 256 separate n-gram samples, the recurrence run step by step over each sample's n characters, one
target per sample), with the same parameters and label smoothing.

    python benchmarks/scan.py            # T = 256..16384, B=8, D=128 (about 1 minute, 1 thread)
    python benchmarks/scan.py --quick    # T = 256..2048, fewer repeats
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from harness import write_record

from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM
from markovformer.ops.scan import DEFAULT_CHUNK_SIZE, linear_scan

KINDS = ("naive", "naive_unbind", "sequential", "chunked")


def unbind_loop(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The naive loop over unbind views: one autograd node per step and an O(T) backward."""
    state, states = h0, []
    for gate, inject in zip(a.unbind(1), b.unbind(1), strict=True):
        state = gate * state + inject
        states.append(state)
    return torch.stack(states, dim=1), state


def run_case(kind: str, seq_len: int, batch: int, dim: int, repeats: int, budget: float, chunk_size: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    a = torch.rand(batch, seq_len, dim, generator=generator).requires_grad_()
    b = torch.randn(batch, seq_len, dim, generator=generator).requires_grad_()
    h0 = torch.randn(batch, dim, generator=generator).requires_grad_()
    upstream = torch.randn(batch, seq_len, dim, generator=generator)
    upstream_last = torch.randn(batch, dim, generator=generator)

    def step() -> None:
        if kind == "naive_unbind":
            states, last = unbind_loop(a, b, h0)
        else:
            states, last = linear_scan(a, b, h0, backend=kind, chunk_size=chunk_size)
        torch.autograd.backward((states, last), (upstream, upstream_last))
        for leaf in (a, b, h0):
            leaf.grad = None

    times = []
    start = time.perf_counter()
    while len(times) < repeats + 1 and (not times or time.perf_counter() - start < budget):
        began = time.perf_counter()
        step()
        times.append(time.perf_counter() - began)
    # The first run is the warm-up, dropped unless the budget allowed no other.
    measured = times[1:] or times
    return {"kind": kind, "T": seq_len, "seconds": statistics.median(measured), "runs": len(measured)}


def seed_style_loss(model: ScanMarkovForCausalLM, contexts: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The source's training step on n-gram samples (B, n) -> next characters (B,): the gated recurrence run one
    position at a time over each sample, the last state decoded; the same parameters as ``model``."""
    e = model.embed(contexts) + model.position_embedding(torch.arange(contexts.shape[1]))
    gate, inject = torch.sigmoid(model.gate_proj(e)).chunk(2, dim=-1)
    state = inject[:, 0] * e[:, 0]
    for t in range(1, contexts.shape[1]):
        state = gate[:, t] * state + inject[:, t] * e[:, t]
    logits = model.lm_head(model.decoder(model.norm(state)))
    return F.cross_entropy(logits, targets, label_smoothing=0.1)


def training_throughput(kind: str, steps: int, vocab: int = 66) -> dict:
    """Scored characters per second of ``steps`` training steps (after two warm-up steps) on random characters."""
    torch.manual_seed(0)
    config = ScanMarkovConfig(vocab_size=vocab, d_model=128, context_mode="markov", order=5, max_positions=5)
    model = ScanMarkovForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(1)
    times, scored = [], 0
    for step in range(steps + 2):
        n = 2 + step % 4
        if kind == "library":
            ids = torch.randint(1, vocab, (16, 129), generator=generator)
            began = time.perf_counter()
            loss = model(ids, labels=ids, order=n, label_smoothing=0.1).loss
            targets = 16 * 128
        else:
            samples = torch.randint(1, vocab, (256, n + 1), generator=generator)
            began = time.perf_counter()
            loss = seed_style_loss(model, samples[:, :n], samples[:, n])
            targets = 256
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step >= 2:
            times.append(time.perf_counter() - began)
            scored += targets
    return {"kind": kind, "steps": steps, "seconds": sum(times), "chars_per_second": scored / sum(times),
            "targets_per_step": scored // steps}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048, 4096, 16384])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=10.0, help="seconds of timed runs per case, at most")
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    parser.add_argument("--max-naive", type=int, default=4096, help="longest T for the O(T^2)-backward naive loop")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads; one step is too small to split, and on a "
        "shared machine more threads mostly measure contention (the naive loop ran 5-10x slower with 2)"
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="T = 256, 1024, 2048; 3 repeats; 3 s per case")
    parser.add_argument("--train-steps", type=int, default=40, help="timed training steps per throughput case")
    parser.add_argument("--output", default="benchmarks/results/scan.json")
    args = parser.parse_args()
    if args.quick:
        args.lengths, args.repeats, args.budget, args.train_steps = [256, 1024, 2048], 3, 3.0, 12
    torch.set_num_threads(args.threads)
    shape = dict(batch=args.batch, dim=args.dim, repeats=args.repeats, budget=args.budget, chunk_size=args.chunk_size)

    rows = []
    for kind in args.kinds:
        for seq_len in args.lengths:
            if kind == "naive" and seq_len > args.max_naive:
                rows.append({"kind": kind, "T": seq_len, "seconds": None, "runs": 0, "skipped": "O(T^2) backward"})
            else:
                rows.append(run_case(kind, seq_len, **shape))
            print(f"{kind:13} T={seq_len:6}  {rows[-1]['seconds']}", file=sys.stderr, flush=True)

    table = {(r["kind"], r["T"]): r for r in rows}
    print(f"\nforward+backward of linear_scan, B={args.batch} D={args.dim} float32, median of up to {args.repeats} "
          f"runs ({args.budget:g} s budget per case); chunk_size={args.chunk_size}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")  # fmt: skip
    print(f"{'T':>6} | " + " | ".join(f"{kind:>16}" for kind in args.kinds))
    for seq_len in args.lengths:
        cells = []
        for kind in args.kinds:
            r = table[(kind, seq_len)]
            if r["seconds"] is None:
                cells.append(f"{'skipped (T>' + str(args.max_naive) + ')':>16}")
            else:
                cells.append(f"{r['seconds'] * 1e3:10.1f} ms ({r['runs']})")
        print(f"{seq_len:>6} | " + " | ".join(cells))
    print("(n) = number of timed runs; naive is skipped beyond --max-naive: its backward is O(T^2)")

    ratios = {}
    seconds = {(r["kind"], r["T"]): r["seconds"] for r in rows if r["seconds"]}
    for seq_len in args.lengths:
        for fast in ("sequential", "chunked"):
            for slow in ("naive", "naive_unbind"):
                if (fast, seq_len) in seconds and (slow, seq_len) in seconds:
                    ratios[f"{slow}_over_{fast}_at_{seq_len}"] = seconds[(slow, seq_len)] / seconds[(fast, seq_len)]
    for name, value in ratios.items():
        if name.endswith("_at_2048"):
            print(f"{name}: {value:.1f}x")

    throughput = [training_throughput(kind, args.train_steps) for kind in ("library", "seed_style")]
    print(f"\ntraining throughput of the Scan Markov model (d=128), {args.train_steps} steps each, contexts n = 2..5")
    for row in throughput:
        print(f"{row['kind']:>11}: {row['chars_per_second']:10,.0f} scored characters/s "
              f"({row['targets_per_step']} targets a step)")  # fmt: skip
    ratios["library_over_seed_style_chars_per_second"] = (
        throughput[0]["chars_per_second"] / throughput[1]["chars_per_second"]
    )
    print(f"library / seed-style: {ratios['library_over_seed_style_chars_per_second']:.1f}x")
    record = {"shape": shape, "rows": rows, "ratios": ratios, "training_throughput": throughput}
    write_record(args.output, record, torch.get_num_threads())


if __name__ == "__main__":
    main()

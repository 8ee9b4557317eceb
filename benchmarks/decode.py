"""Greedy decoding speed and memory against output length: MAT (order 5, transparent: a fixed window of the last 5
decoder inputs) against the autoregressive Transformer with a KV cache (SPEC 3), same size, random weights.

Every case runs in a fresh subprocess so its peak resident memory can be read cleanly. The loop is greedy search's
own (``start_decoding`` once, then ``decode_step`` and argmax per token) with ``<eos>`` and ``<pad>`` masked out, so
every output is exactly L tokens long; the model is untouched. Reported per case: tokens per second (B·L over the
whole loop, encoding included), the median time of one step over the first and the last ``L // 8`` steps (MAT's stays
flat, the KV cache's grows with the prefix), the decoder state in floats at the end (MAT: k·D per row; AT: 2·layers·D
per generated token per row) and the peak RSS growth over the loaded model.

The KV cache grows by concatenation (``torch.cat`` per layer per step, as ``generation.decode_step`` does), so an AT
step copies its whole cache: AT cases with B·L above ``--max-cache-tokens`` are skipped (AT at B=32, L=4096 alone
would take tens of minutes here). One thread by default: on a shared machine more threads mostly measure contention.

    python benchmarks/decode.py            # L = 64, 256, 1024, 4096; batch 1 and 32 (about 4 minutes)
    python benchmarks/decode.py --quick    # L = 64, 256, 1024; batch 1 and 8 (about 1 minute)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from harness import run_child, with_peak_mib, write_record  # benchmarks/, the script's own folder

KINDS = {"mat": {"order": 5, "transparent": True}, "at": {"order": None, "transparent": False}}
SIZE = {"d_model": 256, "n_heads": 4, "n_encoder_layers": 3, "n_decoder_layers": 3, "vocab_size": 8000}
SOURCE_LENGTH = 32


def run_case(kind: str, length: int, batch: int, threads: int) -> dict:
    import torch

    from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration
    from markovformer.models.markov_translator.generation import decode_step, start_decoding

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = MarkovTranslatorConfig(**SIZE, **KINDS[kind], dropout=0.0, max_positions=length + 1)
    model = MarkovTranslatorForConditionalGeneration(config).eval()
    source = torch.randint(4, config.vocab_size, (batch, SOURCE_LENGTH), generator=torch.Generator().manual_seed(1))
    banned = torch.tensor([config.eos_token_id, config.pad_token_id])

    def generate() -> tuple[list[float], float, int]:
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
        held = [t for t in (state.inputs,) if t is not None] + [t for pair in state.cache or [] for t in pair]
        return step_times, time.perf_counter() - start, sum(t.numel() for t in held) // batch

    (step_times, seconds, state_floats), peak_mib = with_peak_mib(generate)
    edge = max(1, length // 8)
    return {
        "kind": kind, "L": length, "B": batch, "seconds": seconds, "tokens_per_s": batch * length / seconds,
        "step_ms_start": statistics.median(step_times[:edge]) * 1e3,
        "step_ms_end": statistics.median(step_times[-edge:]) * 1e3,
        "state_floats_per_row": state_floats, "peak_mib": peak_mib,
    }  # fmt: skip


def crossovers(rows: list[dict]) -> dict[str, int | None]:
    """Per batch size, the shortest measured length at which MAT decodes more tokens per second than AT."""
    speed = {(r["kind"], r["B"], r["L"]): r["tokens_per_s"] for r in rows if r.get("tokens_per_s")}
    result = {}
    for batch in sorted({r["B"] for r in rows}):
        lengths = sorted({length for kind, b, length in speed if b == batch})
        faster = [n for n in lengths if ("mat", batch, n) in speed and ("at", batch, n) in speed
                  and speed[("mat", batch, n)] > speed[("at", batch, n)]]  # fmt: skip
        result[f"B={batch}"] = faster[0] if faster else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=None, help="output lengths (default 64..4096)")
    parser.add_argument("--batches", type=int, nargs="+", default=None, help="batch sizes (default 1 32)")
    parser.add_argument("--quick", action="store_true", help="L = 64, 256, 1024 and batch 1, 8")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-cache-tokens", type=int, default=32 * 1024, help="skip AT cases with B*L above this")
    parser.add_argument("--output", default="benchmarks/results/decode.json")
    parser.add_argument("--case", nargs=3, metavar=("KIND", "L", "B"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.case:  # child process: one measurement, printed as JSON
        kind, length, batch = args.case[0], int(args.case[1]), int(args.case[2])
        print(json.dumps(run_case(kind, length, batch, args.threads)))
        return

    import torch

    lengths = args.lengths or ([64, 256, 1024] if args.quick else [64, 256, 1024, 4096])
    batches = args.batches or ([1, 8] if args.quick else [1, 32])
    rows = []
    for batch in batches:
        for length in lengths:
            for kind in KINDS:
                if kind == "at" and batch * length > args.max_cache_tokens:
                    rows.append({"kind": kind, "L": length, "B": batch, "skipped": "B*L > --max-cache-tokens"})
                    continue
                row = run_child(__file__, ["--case", kind, str(length), str(batch), f"--threads={args.threads}"])
                rows.append({"kind": kind, "L": length, "B": batch, **row})
                row = rows[-1]
                print(f"{kind:3} B={batch:3} L={length:5}  {row.get('tokens_per_s', 0):9.1f} tok/s", file=sys.stderr,
                      flush=True)  # fmt: skip

    size = ", ".join(f"{k}={v}" for k, v in SIZE.items())
    print(f"\ngreedy decoding, {size}, source length {SOURCE_LENGTH}; MAT = order 5 transparent, AT = KV cache; "
          f"torch {torch.__version__}, threads: {args.threads}")  # fmt: skip
    header = f"{'B':>3} {'L':>5} | {'kind':4} | {'tok/s':>9} | {'step ms start':>13} | {'step ms end':>11} | "
    print(header + f"{'end/start':>9} | {'state floats/row':>16} | {'peak MiB':>8}")
    for row in rows:
        if "error" in row or "skipped" in row:
            why = f"skipped ({row['skipped']})" if "skipped" in row else f"error: {row['error'][-80:]!r}"
            print(f"{row['B']:>3} {row['L']:>5} | {row['kind']:4} | {why}")
            continue
        print(f"{row['B']:>3} {row['L']:>5} | {row['kind']:4} | {row['tokens_per_s']:9.1f} | "
              f"{row['step_ms_start']:13.2f} | {row['step_ms_end']:11.2f} | "
              f"{row['step_ms_end'] / row['step_ms_start']:9.2f} | {row['state_floats_per_row']:16,d} | "
              f"{row['peak_mib']:8.1f}")  # fmt: skip
    overtakes = crossovers(rows)
    for batch, length in overtakes.items():
        where = f"first at L = {length} (of those measured)" if length is not None else "at no measured length"
        print(f"MAT decodes more tokens/s than AT ({batch}): {where}")
    setup = {**SIZE, "kinds": KINDS, "source_length": SOURCE_LENGTH}
    write_record(args.output, {"setup": setup, "rows": rows, "mat_faster_from_length": overtakes}, args.threads)


if __name__ == "__main__":
    main()

"""``markovformer bench``: run the benchmark suite and write JSON plus PNG plots (``markovformer.bench``)."""

from __future__ import annotations

import argparse
from pathlib import Path

# markovformer.bench.PARTS and OP_KINDS, spelled here so --help imports no torch
PART_NAMES = ("ops", "windows", "models", "longest")
ALL_PART_NAMES = (*PART_NAMES, "decode", "translation_decode", "scan", "data")  # when asked
OP_KIND_NAMES = ("markov_local", "markov_global", "softmax_sdpa", "random_feature", "hybrid", "markov_layer",
                 "softmax_layer", "alibi_layer", "forgetting_layer", "fox_pro_layer", "t5_bias_layer",
                 "dynamic_bias_layer", "stick_breaking_layer", "cope_layer", "selective_layer",
                 "sliding_window_flex")  # fmt: skip
PART_FLAGS = {"lengths": "ops", "op_kinds": "ops", "rounds": "models", "decode_lengths": "decode",
              "decode_batches": "decode", "translation_lengths": "translation_decode",
              "translation_batches": "translation_decode", "scan_lengths": "scan"}  # the part each flag sets up


def add_parser(commands) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand to an ``add_subparsers()`` object."""
    bench = commands.add_parser("bench", help="benchmark attention ops and models (time, memory, longest context)")
    bench.add_argument("--out", default="runs/bench", help="output folder for bench.json and the plots")
    bench.add_argument("--quick", action="store_true",
                       help="small sizes and fewer repeats, for a first look (about 5 minutes on a 2-core CPU)")
    bench.add_argument("--parts", nargs="+", action="extend", choices=ALL_PART_NAMES, metavar="PART",
                       help=f"what to run, of {', '.join(ALL_PART_NAMES)} (default: {' '.join(PART_NAMES)})")
    bench.add_argument("--lengths", type=int, nargs="+", action="extend", help="ops part: sequence lengths in "
                       "tokens (default 1024, 2048, ..., 65536; --quick 1024 2048)")  # fmt: skip
    bench.add_argument("--op-kinds", nargs="+", action="extend", choices=OP_KIND_NAMES, metavar="KIND",
                       help=f"ops part: which ops, of {', '.join(OP_KIND_NAMES)} (default: all that run on the "
                       f"device)")  # fmt: skip
    bench.add_argument("--decode-lengths", type=int, nargs="+", action="extend",
                       help="decode part: generated lengths (default 4096 16384)")  # fmt: skip
    bench.add_argument("--decode-batches", type=int, nargs="+", action="extend",
                       help="decode part: batch sizes (default 1 16)")  # fmt: skip
    bench.add_argument("--translation-lengths", type=int, nargs="+", action="extend",
                       help="translation_decode part: output lengths (default 64..4096)")  # fmt: skip
    bench.add_argument("--translation-batches", type=int, nargs="+", action="extend",
                       help="translation_decode part: batch sizes (default 1 32)")  # fmt: skip
    bench.add_argument("--scan-lengths", type=int, nargs="+", action="extend",
                       help="scan part: sequence lengths (default 256..16384)")  # fmt: skip
    bench.add_argument("--repeats", type=int, default=None, help="timed runs per case after a "
                       "warm-up, reported as their median (default 5; --quick 2)")  # fmt: skip
    bench.add_argument("--rounds", type=int, default=1,
                       help="models part: run every case this many times in turn and report the median (a noisy "
                       "machine's drift then hits every model alike)")  # fmt: skip
    bench.add_argument(
        "--threads", type=int, default=None, help="torch threads per case (default: torch's, one per core)"
    )
    memory_help = "skip sizes predicted to exceed this peak memory (default: a quarter of free memory)"
    bench.add_argument("--max-memory-mib", type=float, default=None, help=memory_help)
    bench.add_argument("--time-cap", type=float, default=None, help="seconds per step beyond which "
                       "larger sizes are skipped (default 120; --quick 5)")  # fmt: skip
    bench.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                       help="where to measure (default auto: CUDA when present)")  # fmt: skip
    bench.add_argument("--default-allocator", action="store_true",
                       help="measure with glibc's default, which page-faults every tensor over 32 MiB in again on "
                       "every step (by default the cases keep freed memory, as `markovformer train` does)")  # fmt: skip
    bench.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE", dest="settings",
                       help="any other setting of the suite, e.g. data_mb=1 data_cache=/tmp/corpora (data part)")
    return bench


def run_bench(args: argparse.Namespace) -> None:
    # deferred: the bench package imports torch and the models, which `markovformer --help` should not wait for
    from markovformer.bench import RESULTS_NAME, BenchSettings, run_suite
    from markovformer.cli.catalogue import stopped_by_signals

    args.parts = args.parts or list(PART_NAMES)  # None: not given (a default list would be extended by --parts)
    for name in ("repeats", "threads", "rounds"):  # repeats 0 (no warm-up: a cold run's time) is the longest part's own
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name}={value} must be >= 1")
    for name in ("lengths", "decode_lengths", "decode_batches", "translation_lengths", "translation_batches",
                 "scan_lengths"):  # fmt: skip
        values = getattr(args, name)
        if values and min(values) < 1:
            raise ValueError(f"--{name.replace('_', '-')} {values}: values must be positive")
    for name, part in PART_FLAGS.items():  # it was ignored without a word: --parts ops --rounds 3 timed ops once
        if getattr(args, name) not in (None, 1) and part not in args.parts:
            raise ValueError(f"--{name.replace('_', '-')} applies to the {part} part, which --parts "
                             f"{' '.join(args.parts)} leaves out")  # fmt: skip
    given = {name: tuple(getattr(args, name)) for name in ("decode_lengths", "decode_batches", "translation_lengths",
             "translation_batches", "scan_lengths", "op_kinds") if getattr(args, name)}  # fmt: skip
    settings = BenchSettings(
        parts=tuple(args.parts), quick=args.quick, lengths=tuple(args.lengths) if args.lengths else None,
        repeats=args.repeats, threads=args.threads, memory_cap_mib=args.max_memory_mib, time_cap=args.time_cap,
        device=args.device, keep_freed_memory=not args.default_allocator, rounds=args.rounds, **given,
    )  # fmt: skip
    if args.settings:
        settings = _with_settings(settings, args.settings)
    # SIGTERM's default action ended the command at once and left the case's child measuring on, orphaned, for up
    # to its time-out; Ctrl-C printed a traceback. Either now stops the child and says where the rows so far are.
    results = Path(args.out) / RESULTS_NAME
    with stopped_by_signals(f"bench was stopped: {results} holds the rows measured before it"):
        run_suite(args.out, settings, log=lambda line: print(line, flush=True))


def _with_settings(settings, pairs: list[str]):
    """``settings`` with ``--set KEY=VALUE`` applied (VALUE read as YAML, as a run config's: ``data_mb=1e3`` is a
    number); an unknown key, a value of the wrong type or a key given twice to different values is refused,
    naming it."""
    import dataclasses

    import yaml

    from markovformer.training.run_config import check_each_key_once, read_yaml

    fields = {field.name: field for field in dataclasses.fields(settings)}
    changes = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or key not in fields:
            raise ValueError(f"--set {pair!r}: expected KEY=VALUE with KEY one of {', '.join(fields)}")
        try:
            value = read_yaml(text)
        except yaml.YAMLError as error:  # a traceback, naming no option
            problem = str(getattr(error, "problem", None) or error).splitlines()[0]
            raise ValueError(f"--set {pair!r}: the value is not valid YAML ({problem})") from None
        current = getattr(settings, key)
        fits = isinstance(value, type(current)) or (isinstance(current, float) and isinstance(value, int))
        if isinstance(value, bool) != isinstance(current, bool):
            fits = False  # YAML's yes/on/true is a bool, which Python counts as an int: not a number here
        if current is not None and not isinstance(current, tuple) and not fits:
            raise ValueError(f"--set {pair!r}: {key} takes a {type(current).__name__}, got {value!r}")
        if fields[key].type.startswith("tuple"):
            value = tuple(value) if isinstance(value, list) else (value,)
        changes[key] = float(value) if isinstance(current, float) else value
    check_each_key_once(pairs)
    return dataclasses.replace(settings, **changes)

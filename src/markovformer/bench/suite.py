"""The benchmark suite: which cases each part runs, in which child processes, and the record it writes.

Parts:
- ``ops``: forward+backward time and peak memory of the attention ops against T (Markov local and global, softmax
  SDPA, random features, the split hybrid) and of a Markov attention layer against the same layer with the
  attention core removed (projections only).
- ``windows``: the banded op at windows W = 16..1024 against lucidrains' ``local-attention`` at the same window and
  causal SDPA, T = 4k and 16k (``bench.windows``).
- ``models``: training steps of the equal-size models: tokens/s at the throughput length, peak memory at the
  memory lengths.
- ``longest``: the longest context each model trains at: T doubles until a step runs out of memory or exceeds the
  time cap (or is predicted to).
- ``decode`` (not run by default): greedy generation of a local-scope Markovian Transformer (rolling key/value
  caches) against global softmax with a key/value cache: per-token time at the start and end, tokens/s, cache size
  and peak memory against the generated length (``markovformer.bench.decode``).
- ``translation_decode`` (not run by default): the same for the Markov translator, MAT (order 5) against the
  autoregressive Transformer with a key/value cache, and the length from which MAT is faster
  (``markovformer.bench.translation_decode``), on the CPU whatever ``device`` (its record says so).
- ``scan`` (not run by default): forward+backward of the linear-scan backends against T, and the Scan Markov model's
  training throughput in this library's recipe against the source's (``markovformer.bench.scan``; the training
  throughput on the CPU whatever ``device``, as its record says).

Without ``quick`` every (kind, T) runs in its own child process, so each peak-memory reading is clean and a crash
loses one case; ``quick`` runs all sizes of a kind in one child (peaks then rely on resetting the high-water mark).
The JSON record is rewritten atomically after every child, so an interrupted run leaves a valid partial file.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

import markovformer
from markovformer.advice import said_as
from markovformer.atomic import atomic_write_text
from markovformer.bench.cases import CUDA_OP_KINDS, OP_KINDS, OP_SHAPE
from markovformer.bench.decode import COMPILED_KINDS, DECODE_KINDS, DECODE_SIZE, decode_targets
from markovformer.bench.harness import run_in_child
from markovformer.bench.measure import CAP_REACHED, SizeSeries, status_mib
from markovformer.bench.models import LONG_MODELS, MODELS, describe_models
from markovformer.bench.report import format_summary, summarise
from markovformer.bench.scan import NAIVE_MAX_T, SCAN_KINDS, SCAN_LENGTHS, SCAN_SHAPE, TRAINING_KINDS, TRAINING_STEPS
from markovformer.bench.translation_decode import (
    MAX_CACHE_TOKENS,
    TRANSLATION_BATCHES,
    TRANSLATION_KINDS,
    TRANSLATION_LENGTHS,
    TRANSLATION_SIZE,
    crossovers,
)
from markovformer.bench.windows import WINDOW_LENGTHS, WINDOW_SHAPE, WINDOWS, expected_growth, window_kinds
from markovformer.training.run_lock import run_dir_lock

PARTS = ("ops", "windows", "models", "longest")  # the default run
ALL_PARTS = (*PARTS, "decode", "translation_decode", "scan", "data")
RESULTS_NAME = "bench.json"
STARTUP_SECONDS = 120  # child start-up (imports; compilation on CUDA) on top of its steps' time


@dataclasses.dataclass
class BenchSettings:
    """What the suite runs. ``None`` fields take a default that depends on ``quick`` (see ``resolved``).

    ``parts``: some of ``ALL_PARTS`` (default ``PARTS``; the module docstring says what each measures); ``device``
    "cpu", "cuda" or "auto" (CUDA when present); ``lengths``, ``windows``, ``*_lengths``: the sizes T (or W) each
    part runs; the caps (``memory_cap_mib`` of peak memory, ``time_cap`` seconds per step) skip the larger sizes of
    a series once a size exceeds them or is predicted to. The comment beside each field in ``bench/suite.py`` gives its
    part and defaults; ``markovformer bench --help`` the flags that set them (the rest: ``--set KEY=VALUE``).
    """

    parts: tuple[str, ...] = PARTS
    quick: bool = False
    lengths: tuple[int, ...] | None = None  # ops: 1k..64k (quick: 1k, 2k)
    op_kinds: tuple[str, ...] | None = None  # default: every op kind (plus the CUDA-only ones on CUDA)
    windows: tuple[int, ...] | None = None  # windows part: W (16, 64, 256, 1024; quick 16, 64)
    window_lengths: tuple[int, ...] | None = None  # windows part: T (4096, 16384; quick 1024)
    models: tuple[str, ...] | None = None  # default: every bench model
    repeats: int | None = None  # timed runs after one warm-up (5; quick 2)
    threads: int | None = None  # torch intra-op threads in the children (default: torch's, one per core)
    memory_cap_mib: float | None = None  # default: a quarter of the memory available at the start, at most 16 GiB
    time_cap: float | None = None  # seconds per step (120; quick 5)
    device: str = "auto"  # "cpu", "cuda" or "auto" (CUDA when present)
    throughput_length: int | None = None  # models: tokens/s at this T (2048; quick 512)
    memory_lengths: tuple[int, ...] | None = None  # models: peak memory at these T (4096, 8192; quick 1024)
    long_lengths: tuple[int, ...] | None = None  # models: also these T for LONG_MODELS (32768; quick none)
    longest_start: int | None = None  # longest: first T (2048; quick 1024)
    longest_max: int | None = None  # longest: stop doubling here (2**20; quick 4096)
    model_batch: int = 1
    rounds: int = 1  # models: run every case this many times, in turn, and report per case the median time
    keep_freed_memory: bool = True  # children keep freed heap memory, as `markovformer train` does (allocator.py)
    decode_lengths: tuple[int, ...] | None = None  # decode: generated lengths (4096, 16384; quick 256, 1024)
    decode_batches: tuple[int, ...] = (1, 16)
    decode_kinds: tuple[str, ...] | None = None  # decode: which rows (default: every one of DECODE_KINDS, compiled)
    translation_lengths: tuple[int, ...] | None = None  # translation_decode: L (64..4096; quick 64..1024)
    translation_batches: tuple[int, ...] | None = None  # translation_decode: B (1, 32; quick 1, 8)
    scan_lengths: tuple[int, ...] | None = None  # scan: T (256..16384; quick 256, 1024, 2048)
    # data (bench/data.py): corpus sizes in MB, where the corpus is built and reused, the text it copies
    data_mb: float = 1000.0
    data_small_mb: float = 10.0
    data_cache: str = ""  # default: OUT/data_cache
    data_source: str = ""  # default: data/tiny_shakespeare.txt ($MARKOVFORMER_DATA, else ./data)
    data_vocab: int = 8192
    data_tokenizers: tuple[str, ...] = ("char", "bpe")
    data_steps: int = 100
    data_nanogpt_limit_mb: int = 12288
    data_timeout: float = 3600.0

    def check_numbers(self) -> None:
        """ValueError naming the setting unless every number given is finite and positive, and a whole number where
        the field counts (a negative time cap or length ran the suite into rows of errors, reported complete)."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            whole = "int" in field.type and "float" not in field.type
            if field.type == "bool" or value is None:
                continue
            for number in value if isinstance(value, tuple) else (value,):
                if isinstance(number, str) and "str" in field.type:
                    continue
                number_type = int if whole else int | float
                if isinstance(number, bool) or not isinstance(number, number_type) or not 0 < number < math.inf:
                    kind = "a positive integer" if whole else "a positive number"
                    each = " (each)" if isinstance(value, tuple) else ""
                    raise ValueError(f"bench {field.name}={value!r}: must be {kind}{each}")

    def resolved(self) -> BenchSettings:
        """These settings with the device chosen ("auto": CUDA when present) and every ``None`` field set to its
        default (for ``quick`` or not); ValueError naming a device that is not available, an unknown part, op kind,
        model or decode kind, a bad number (``check_numbers``) or a ``longest_max`` below ``longest_start``."""
        quick = self.quick
        device = ("cuda" if torch.cuda.is_available() else "cpu") if self.device == "auto" else self.device
        if device not in ("cpu", "cuda") or (device == "cuda" and not torch.cuda.is_available()):
            raise ValueError(f"bench device {self.device!r} is not available here (expected 'auto', 'cpu' or 'cuda')")
        unknown = [part for part in self.parts if part not in ALL_PARTS]
        if unknown or not self.parts:
            raise ValueError(f"bench parts {unknown or list(self.parts)}: expected some of {ALL_PARTS}")
        kinds = self.op_kinds or (OP_KINDS + (CUDA_OP_KINDS if device == "cuda" else ()))
        for kind in kinds:
            if kind not in OP_KINDS + CUDA_OP_KINDS:
                raise ValueError(f"unknown op kind {kind!r}; expected one of {OP_KINDS + CUDA_OP_KINDS}")
        for model in self.models or ():
            if model not in MODELS:
                raise ValueError(f"unknown bench model {model!r}; expected one of {MODELS}")
        decode_kinds = (*DECODE_KINDS, *COMPILED_KINDS)
        unknown = [kind for kind in self.decode_kinds or () if kind not in decode_kinds]
        if unknown:
            raise ValueError(f"bench decode_kinds: {unknown[0]!r} is not one of {decode_kinds}")
        self.check_numbers()
        available = status_mib("MemAvailable", "/proc/meminfo") or 8192.0
        resolved = dataclasses.replace(
            self,
            device=device,
            lengths=tuple(sorted(self.lengths or ((1024, 2048) if quick else tuple(1024 * 2**i for i in range(7))))),
            op_kinds=tuple(kinds),
            models=tuple(self.models or MODELS),
            repeats=self.repeats if self.repeats is not None else (2 if quick else 5),
            threads=self.threads or torch.get_num_threads(),
            memory_cap_mib=self.memory_cap_mib or min(16384.0, available / 4),
            time_cap=self.time_cap or (5.0 if quick else 120.0),
            throughput_length=self.throughput_length or (512 if quick else 2048),
            memory_lengths=tuple(sorted(self.memory_lengths or ((1024,) if quick else (4096, 8192)))),
            long_lengths=tuple(self.long_lengths if self.long_lengths is not None else (() if quick else (32768,))),
            windows=tuple(self.windows or ((16, 64) if quick else WINDOWS)),
            window_lengths=tuple(sorted(self.window_lengths or ((1024,) if quick else WINDOW_LENGTHS))),
            longest_start=self.longest_start or (1024 if quick else 2048),
            longest_max=self.longest_max or (4096 if quick else 2**20),
            decode_lengths=tuple(sorted(self.decode_lengths or ((256, 1024) if quick else (4096, 16384)))),
            translation_lengths=tuple(
                sorted(self.translation_lengths or (TRANSLATION_LENGTHS[:3] if quick else TRANSLATION_LENGTHS))
            ),
            translation_batches=tuple(self.translation_batches or ((1, 8) if quick else TRANSLATION_BATCHES)),
            scan_lengths=tuple(sorted(self.scan_lengths or (SCAN_LENGTHS[:3] if quick else SCAN_LENGTHS))),
        )
        if "longest" in self.parts and resolved.longest_max < resolved.longest_start:  # no T to try: "None" reported
            raise ValueError(f"bench longest_max={resolved.longest_max} is below longest_start="
                             f"{resolved.longest_start}: the longest part would try no length")  # fmt: skip
        return resolved


def machine_record(settings: BenchSettings) -> dict:
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(), "python": platform.python_version(), "cpu": cpu_model,
        "cpu_count": os.cpu_count(), "memory_available_mib": status_mib("MemAvailable", "/proc/meminfo"),
        "torch": torch.__version__, "markovformer": markovformer.__version__, "threads": settings.threads,
        "device": settings.device, "cuda": torch.cuda.get_device_name(0) if settings.device == "cuda" else None,
        "command": sys.argv,
    }  # fmt: skip


class _Runner:
    """Launches children for a series of cases and keeps the JSON record current."""

    def __init__(self, settings: BenchSettings, out: Path, log: Callable[[str], None]) -> None:
        self.settings, self.out, self.log = settings, out, log
        self.record = {"complete": False, "machine": machine_record(settings),
                       "settings": dataclasses.asdict(settings), "parts": {}}  # fmt: skip

    def write(self) -> Path:
        self.record["summary"] = summarise(self.record["parts"])
        return atomic_write_text(self.out / RESULTS_NAME, json.dumps(self.record, indent=2) + "\n")

    def _child(self, cases: list[dict], default_growth: float = 2.0) -> list[dict]:
        """Run ``cases`` in one child; a row for every case (a failed child's remaining cases say why)."""
        settings = self.settings
        job = {"cases": cases, "device": settings.device, "memory_cap_mib": settings.memory_cap_mib,
               "time_cap": settings.time_cap, "keep_freed_memory": settings.keep_freed_memory,
               "default_growth": default_growth}  # fmt: skip
        timeout = STARTUP_SECONDS + sum((case["repeats"] + 1) * settings.time_cap for case in cases)
        return run_in_child("markovformer.bench.cases", job, cases, timeout, threads=settings.threads)

    def series(self, cases: list[dict], label: str, default_growth: float = 2.0) -> list[dict]:
        """The cases of one kind in ascending T, every case given a row; ``label`` names the part in the log;
        ``default_growth`` as in ``SizeSeries``."""
        if self.settings.quick:
            rows = self._child(cases, default_growth)
        else:
            sizes = SizeSeries(self.settings.memory_cap_mib, self.settings.time_cap, default_growth)
            for case in cases:
                reason = sizes.skip_reason(case["T"])
                sizes.add({**case, "skipped": reason} if reason else self._child([case])[0])
            rows = sizes.rows
        for row in rows:
            shown = row.get("skipped") or row.get("error")
            if not shown:
                shown = f"{row['seconds'] * 1e3:.1f} ms, {row['peak_mib']:.0f} MiB"
                if row.get("runs") == 0:
                    shown += " (the cold warm-up step alone: over the time cap)"
                if "over_projections" in row:
                    shown += f", {row['over_projections']:.2f}x the layer without its attention"
            self.log(f"{label:7} {row['kind']:20} T={row['T']:<7} {shown}")
        return rows


def _ops(runner: _Runner) -> dict:
    settings, rows = runner.settings, []
    runner.record["parts"]["ops"] = part = {"shape": OP_SHAPE, "rows": rows}
    for kind in settings.op_kinds:
        cases = [{"part": "ops", "kind": kind, "T": t, "repeats": settings.repeats} for t in settings.lengths]
        rows.extend(runner.series(cases, "ops"))
        runner.write()
    return part


def _windows(runner: _Runner) -> dict:
    settings, rows = runner.settings, []
    runner.record["parts"]["windows"] = part = {"shape": WINDOW_SHAPE, "windows": list(settings.windows), "rows": rows}
    for kind in window_kinds(settings.windows):
        cases = [
            {"part": "windows", "kind": kind, "T": t, "repeats": settings.repeats} for t in settings.window_lengths
        ]
        rows.extend(runner.series(cases, "windows", default_growth=expected_growth(kind)))
        runner.write()
    return part


def _models(runner: _Runner) -> dict:
    """Every model's training step at each length. With ``rounds`` > 1 the whole grid runs that many times in turn,
    so a drift of the machine's speed hits every model alike, and each case reports its median over the rounds."""
    settings, rows = runner.settings, []
    recorded = {"throughput_length": settings.throughput_length, "memory_lengths": list(settings.memory_lengths),
                "rounds": settings.rounds}  # fmt: skip
    part = {"models": describe_models(), "batch": settings.model_batch, **recorded, "rows": rows}
    runner.record["parts"]["models"] = part
    lengths = sorted({settings.throughput_length, *settings.memory_lengths})
    by_case: dict[tuple[str, int], list[dict]] = {}
    for round_index in range(settings.rounds):
        if settings.rounds > 1:
            runner.log(f"models  round {round_index + 1} of {settings.rounds}")
        for model in settings.models:
            model_lengths = sorted({*lengths, *settings.long_lengths}) if model in LONG_MODELS else lengths
            cases = [{"part": "models", "kind": model, "T": t, "batch": settings.model_batch,
                      "repeats": settings.repeats if t == settings.throughput_length else min(2, settings.repeats)}
                     for t in model_lengths]  # fmt: skip
            for row in runner.series(cases, "models"):
                by_case.setdefault((row["kind"], row["T"]), []).append(row)
            rows[:] = [median_row(measured) for measured in by_case.values()]
            runner.write()
    return part


def median_row(rounds: list[dict]) -> dict:
    """One case's row over its rounds: the median step time (and the tokens/s it gives), the largest peak, every
    round's time under ``round_seconds``; a case skipped or failed in any round keeps that round's row."""
    failed = [row for row in rounds if row.get("seconds") is None]
    if failed or len(rounds) == 1:
        return failed[0] if failed else rounds[0]
    seconds = statistics.median(row["seconds"] for row in rounds)
    row = {**rounds[0], "seconds": seconds, "peak_mib": max(row["peak_mib"] for row in rounds),
           "round_seconds": [row["seconds"] for row in rounds]}  # fmt: skip
    row["tokens_per_second"] = row["batch"] * row["T"] / seconds
    return row


def _longest(runner: _Runner) -> dict:
    settings, rows = runner.settings, []
    runner.record["parts"]["longest"] = part = {"batch": settings.model_batch, "rows": rows, "longest": {}}
    lengths = []
    length = settings.longest_start
    while length <= settings.longest_max:
        lengths.append(length)
        length *= 2
    for model in settings.models:
        cases = [{"part": "models", "kind": model, "T": t, "batch": settings.model_batch, "repeats": 0}
                 for t in lengths]  # fmt: skip
        series = runner.series(cases, "longest")
        rows.extend(series)
        trained = [row for row in series if row.get("seconds") is not None and row["seconds"] <= settings.time_cap]
        failed = [row for row in series if row not in trained]
        stopped_by = CAP_REACHED
        if failed:
            stopped_by = failed[0].get("skipped") or failed[0].get("error") or f"T={failed[0]['T']} over the time cap"
        part["longest"][model] = {"T": trained[-1]["T"] if trained else None, "stopped_by": stopped_by}
        runner.write()
    return part


def step_unit(batch: int) -> str:
    """What a decoding step's time is per: one step generates a token for each of ``batch`` rows (the log said
    ms/token at batch 16, where a step is 16 tokens)."""
    return "ms/token" if batch == 1 else f"ms/step of {batch} tokens"


def _decode(runner: _Runner) -> dict:
    settings, rows = runner.settings, []
    kinds = {**DECODE_KINDS, **{kind: {"compiled": of} for kind, of in COMPILED_KINDS.items()}}
    kinds = {kind: spec for kind, spec in kinds.items() if kind in (settings.decode_kinds or kinds)}
    runner.record["parts"]["decode"] = part = {"size": DECODE_SIZE, "kinds": kinds, "rows": rows}
    for batch in settings.decode_batches:
        for length in settings.decode_lengths:
            for kind in kinds:
                row = runner._child([{"part": "decode", "kind": kind, "T": length, "batch": batch, "repeats": 0}])[0]
                rows.append(row)
                marks = " ".join(f"@{mark} {ms:.2f}" for mark, ms in row.get("step_ms_at", {}).items())
                shown = row.get("skipped") or row.get("error") or (
                    f"{row['tokens_per_second']:.1f} tok/s, {step_unit(batch)} {marks}, floor "
                    f"{row['floor_ms']:.2f} ms, {row['peak_mib']:.0f} MiB")  # fmt: skip
                runner.log(f"decode  {kind:20} B={batch:<3} L={length:<7} {shown}")
                part["targets"] = decode_targets(rows)
                runner.write()
    for target in part.get("targets", []):
        runner.log(f"decode  target L={target['T']}: {target['target']}: {target['value']:.2f} "
                   f"{'met' if target['met'] else 'NOT met'}")  # fmt: skip
    return part


def _translation_decode(runner: _Runner) -> dict:
    settings, rows = runner.settings, []
    part = {"size": TRANSLATION_SIZE, "kinds": TRANSLATION_KINDS, "rows": rows, "device": "cpu"}  # whatever --device
    runner.record["parts"]["translation_decode"] = part
    for batch in settings.translation_batches:
        for length in settings.translation_lengths:
            for kind in TRANSLATION_KINDS:
                case = {"part": "translation_decode", "kind": kind, "T": length, "batch": batch, "repeats": 0}
                if kind == "at" and batch * length > MAX_CACHE_TOKENS:
                    row = {**case, "skipped": f"B*L > {MAX_CACHE_TOKENS}: the concatenated cache is copied every step"}
                else:
                    row = runner._child([case])[0]
                rows.append(row)
                shown = row.get("skipped") or row.get("error") or (
                    f"{row['tokens_per_second']:.1f} tok/s, {row['step_ms_start']:.2f} -> {row['step_ms_end']:.2f} "
                    f"{step_unit(batch)}, {row['peak_mib']:.0f} MiB")  # fmt: skip
                runner.log(f"decode  {kind:20} B={batch:<3} L={length:<7} {shown} (CPU)")
                part["mat_faster_from_length"] = crossovers(rows)
                runner.write()
    return part


def _scan(runner: _Runner) -> dict:
    settings, rows = runner.settings, []
    steps = TRAINING_STEPS if not settings.quick else 12
    part = {"shape": SCAN_SHAPE, "rows": rows, "training": [], "training_steps": steps,
            "training_device": "cpu"}  # whatever --device: the recipes' own loops  # fmt: skip
    runner.record["parts"]["scan"] = part
    for kind in SCAN_KINDS:
        lengths = [t for t in settings.scan_lengths if kind != "naive" or t <= NAIVE_MAX_T]
        cases = [{"part": "scan", "kind": kind, "T": t, "repeats": settings.repeats} for t in lengths]
        rows.extend(runner.series(cases, "scan"))
        rows.extend({"part": "scan", "kind": kind, "T": t, "skipped": f"O(T^2) backward beyond T={NAIVE_MAX_T}"}
                    for t in settings.scan_lengths if t not in lengths)  # fmt: skip
        runner.write()
    for kind in TRAINING_KINDS:
        case = {"part": "scan_training", "kind": kind, "T": 0, "steps": steps, "repeats": steps}  # T: no length
        row = runner._child([case])[0]
        part["training"].append(row)
        shown = row.get("skipped") or row.get("error") or f"{row['chars_per_second']:,.0f} scored characters/s"
        runner.log(f"scan    training {kind:11} {shown} (CPU)")
        runner.write()
    return part


def _data(runner: _Runner) -> dict:
    from markovformer.bench.data import format_data, run_data_part

    def write(part: dict) -> None:
        runner.record["parts"]["data"] = part
        runner.write()

    part = run_data_part(runner.settings, runner.out, runner.log, write)
    for line in format_data(part):
        runner.log(line)
    return part


PART_RUNNERS = {"ops": _ops, "windows": _windows, "models": _models, "longest": _longest, "decode": _decode,
                "translation_decode": _translation_decode, "scan": _scan, "data": _data}  # fmt: skip


def run_suite(out: str | Path, settings: BenchSettings | None = None, log: Callable[[str], None] = print) -> Path:
    """Run the chosen parts, write ``OUT/bench.json`` and the PNG plots; return the JSON path. Its refusals name
    ``out`` in the caller's words (``advice.said_as``): ``bench --out`` on the command line, ``out=`` from Python."""
    # plots imports matplotlib (the plots extra): deferred
    from markovformer.bench.plots import write_plots

    settings = (settings or BenchSettings()).resolved()
    out = Path(out)
    given = said_as(f"bench --out {out}", f"out={str(out)!r}")
    if out.exists() and not out.is_dir():  # mkdir said only "File exists"
        raise ValueError(f"{given}: is a file, not a folder for {RESULTS_NAME} and the plots")
    blocking = next((above for above in out.parents if above.exists()), None)
    if blocking is not None and not blocking.is_dir():  # mkdir said only "Not a directory"
        raise ValueError(f"{given}: {blocking} is a file, so no folder can be made under it")
    # one bench at a time in a folder: a second cleared the first's token stores (its 'prepare' timed an open) and
    # overwrote its bench.json
    with run_dir_lock(out, option=said_as("--out", "out"), holds=f"{RESULTS_NAME} and the plots"):
        runner = _Runner(settings, out, log)
        runner.write()  # at once: a run stopped before its first row leaves its own record, not an earlier run's
        log(f"bench: parts {', '.join(settings.parts)} on {settings.device}, {settings.threads} thread(s), caps "
            f"{settings.memory_cap_mib:.0f} MiB and {settings.time_cap:.0f} s per step -> {out}")  # fmt: skip
        for part in settings.parts:
            PART_RUNNERS[part](runner)
        runner.record["complete"] = True
        path = runner.write()
        log(format_summary(runner.record))
        for figure in write_plots(runner.record, out):
            log(f"wrote {figure}")
    log(f"wrote {path}")
    return path

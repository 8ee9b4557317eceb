"""The benchmark suite's options: the command line's names are the suite's, and a bad flag, setting, cap or output
folder is refused by name before anything runs; the default memory cap."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re

import pytest

from markovformer.bench import PARTS, RESULTS_NAME, BenchSettings, run_suite
from markovformer.bench.cases import CUDA_OP_KINDS, OP_KINDS
from markovformer.bench.suite import (
    ALL_PARTS,
)
from markovformer.cli import bench as bench_cli


def test_command_line_options(tmp_path, monkeypatch):
    assert bench_cli.PART_NAMES == PARTS and bench_cli.ALL_PART_NAMES == ALL_PARTS
    assert bench_cli.OP_KIND_NAMES == OP_KINDS + CUDA_OP_KINDS
    parser = argparse.ArgumentParser()
    bench_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "--quick", "--parts", "ops", "--out", "somewhere", "--lengths", "64"])
    assert (args.command, args.quick, args.parts, args.out, args.lengths) == ("bench", True, ["ops"], "somewhere", [64])
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--parts", "everything"])
    with pytest.raises(ValueError, match="--threads=0"):
        bench_cli.run_bench(parser.parse_args(["bench", "--threads", "0"]))
    with pytest.raises(ValueError, match="--rounds=0"):
        bench_cli.run_bench(parser.parse_args(["bench", "--rounds", "0"]))
    with pytest.raises(ValueError, match="--repeats=0"):  # a cold run's time, up to 150 times a warm one's
        bench_cli.run_bench(parser.parse_args(["bench", "--repeats", "0"]))
    with pytest.raises(ValueError, match="rounds=1.5"):
        BenchSettings(rounds=1.5).resolved()
    with pytest.raises(ValueError, match="repeats=0"):  # the library's own entry point too, not only the CLI
        BenchSettings(repeats=0).resolved()
    with pytest.raises(ValueError, match="--scan-lengths"):
        bench_cli.run_bench(parser.parse_args(["bench", "--parts", "scan", "--scan-lengths", "256", "0"]))
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--op-kinds", "flash"])
    # a part's flag without its part was ignored without a word (--parts ops --rounds 3 timed each op once)
    with monkeypatch.context() as patched:
        patched.setattr("markovformer.bench.run_suite", lambda *args, **kwargs: pytest.fail("the suite ran"))
        for flag, value, part in (("--rounds", "3", "models"), ("--lengths", "64", "ops"), ("--op-kinds",
                                  "cope_layer", "ops"), ("--decode-lengths", "8", "decode"), ("--decode-batches", "2",
                                  "decode"), ("--translation-lengths", "8", "translation_decode"),
                                  ("--translation-batches", "2", "translation_decode"), ("--scan-lengths", "8",
                                  "scan")):  # fmt: skip
            others = [name for name in ALL_PARTS if name != part]
            refused = f"^{flag} applies to the {part} part, which --parts {' '.join(others)} leaves out"
            with pytest.raises(ValueError, match=refused):
                bench_cli.run_bench(parser.parse_args(["bench", "--parts", *others, flag, value]))
    # caps and sizes the flags do not check ran into rows of errors, reported complete with exit status 0
    for flags, named in ((["--time-cap", "-1"], "time_cap=-1.0"), (["--max-memory-mib", "nan"], "memory_cap_mib=nan"),
                         (["--set", "data_mb=0"], "data_mb=0"), (["--set", "long_lengths=[4096, 0.5]"],
                                                                  "long_lengths=(4096, 0.5)"),
                         # a word where a number belongs: past the CLI's type check (the default is None), it
                         # failed as "Unknown format code 'f' for object of type 'str'" once the suite ran
                         (["--set", "time_cap=fast"], "time_cap='fast'"), (["--set", "repeats=two"], "repeats='two'"),
                         (["--set", "lengths=[1k]"], "lengths=('1k',)")):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(named)):
            bench_cli.run_bench(parser.parse_args(["bench", "--out", str(tmp_path / "out"), *flags]))
    assert not (tmp_path / "out").exists()
    # numbers as a run config reads them: 1e3 was the text '1e3' to PyYAML's own loader, refused as no float
    parsed = bench_cli._with_settings(BenchSettings(), ["data_mb=1e3", "data_small_mb=5e-1"])
    assert (parsed.data_mb, parsed.data_small_mb) == (1000.0, 0.5)
    assert bench_cli._with_settings(BenchSettings(), ["long_lengths=4096"]).long_lengths == (4096,)  # one T: a tuple
    with pytest.raises(ValueError, match="data_mb takes a float, got True"):  # YAML's true is no number (1.0)
        bench_cli._with_settings(BenchSettings(), ["data_mb=true"])
    with pytest.raises(ValueError, match="unknown op kind"):
        BenchSettings(op_kinds=("flash",)).resolved()


def test_the_default_memory_cap_is_a_quarter_of_the_available_memory_at_most_16_gib(monkeypatch):
    """8000 MiB available: 2000; 200000: 50000, held at 16384; a cap given is kept."""
    from markovformer.bench import suite

    for available, cap in ((8000.0, 2000.0), (200_000.0, 16384.0)):
        monkeypatch.setattr(suite, "status_mib", lambda field, path=None, available=available: available)
        assert BenchSettings(device="cpu").resolved().memory_cap_mib == cap
    assert BenchSettings(device="cpu", memory_cap_mib=123.0).resolved().memory_cap_mib == 123.0


def test_a_longest_max_below_longest_start_is_refused_naming_both():
    """--quick starts the longest part at T=1024: --set longest_max=512 tried no length and reported every model's
    longest context as None, stopped by "longest_max reached", with exit status 0. Now refused; a run without the
    longest part is not."""
    with pytest.raises(ValueError, match="longest_max=512 is below longest_start=1024"):
        BenchSettings(parts=("longest",), quick=True, longest_max=512).resolved()
    with pytest.raises(ValueError, match="longest_max=2048 is below longest_start=4096"):
        BenchSettings(parts=("longest",), longest_start=4096, longest_max=2048).resolved()
    assert BenchSettings(parts=("ops",), quick=True, longest_max=512).resolved().longest_max == 512
    assert BenchSettings(parts=("longest",), quick=True, longest_max=1024).resolved().longest_start == 1024


def test_an_out_that_is_a_file_is_refused_naming_it_and_left_as_it_was(tmp_path):
    out = tmp_path / "results.txt"
    out.write_text("kept\n")
    with pytest.raises(ValueError, match=r"results\.txt': is a file, not a folder"):
        run_suite(out, BenchSettings(parts=("ops",), quick=True, device="cpu", op_kinds=("markov_local",),
                                     lengths=(64,)), log=lambda line: None)  # fmt: skip
    assert out.read_text() == "kept\n" and [path.name for path in tmp_path.iterdir()] == ["results.txt"]
    with pytest.raises(ValueError, match=r"results\.txt is a file, so no folder can be made under it"):
        run_suite(out / "deeper" / "bench", BenchSettings(parts=("ops",), quick=True, device="cpu",
                                                          op_kinds=("markov_local",), lengths=(64,)),
                  log=lambda line: None)  # fmt: skip
    assert out.read_text() == "kept\n" and [path.name for path in tmp_path.iterdir()] == ["results.txt"]


def test_a_second_bench_into_a_running_ones_out_is_refused_and_leaves_its_record(tmp_path, monkeypatch):
    """Two `bench --parts data` into one --out at once (both at the default runs/bench): each cleared the other's
    token stores, so one's 'prepare' timed an open of the other's store (0.05 s, 'encode 49.9 MB/s') and the
    other's 'open' a rebuild, and bench.json held whichever wrote last. The second is now refused by name."""
    import json
    import threading

    from markovformer.bench import suite

    started, release = threading.Event(), threading.Event()

    def ops(runner):  # the first bench's part: runs until the second has been tried
        started.set()
        release.wait(timeout=30)
        return {}

    monkeypatch.setattr(suite, "PART_RUNNERS", {**suite.PART_RUNNERS, "ops": ops})
    settings = BenchSettings(parts=("ops",), quick=True, device="cpu", op_kinds=("markov_local",), lengths=(64,))
    first = threading.Thread(target=run_suite, args=(tmp_path, dataclasses.replace(settings, lengths=(32,))),
                             kwargs={"log": lambda line: None})  # fmt: skip
    first.start()
    try:
        assert started.wait(timeout=30)
        with pytest.raises(ValueError, match=rf"^out='{re.escape(str(tmp_path))}' is in use by another markovformer "
                                             rf"process \(pid {os.getpid()}\)"):  # fmt: skip
            run_suite(tmp_path, settings, log=lambda line: None)
        assert json.loads((tmp_path / "bench.json").read_text())["settings"]["lengths"] == [32]  # the first's
    finally:
        release.set()
        first.join()


def test_an_out_that_cannot_be_made_is_refused_as_a_folder_for_bench_results(tmp_path, monkeypatch):
    """`bench --out /proc/benchout` (a folder that cannot be made) said "--out='/proc/benchout' cannot hold a run
    (...)": the run lock's line for train's output_dir, though bench makes no run. It now says what --out holds.
    (Root makes any folder: the refused mkdir is simulated.)"""
    from pathlib import Path

    out, real_mkdir = tmp_path / "bench", Path.mkdir

    def refused(self, *args, **kwargs):
        if self == out:
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refused)
    told = f"cannot write {RESULTS_NAME} and the plots in out='{out}' (Permission denied: {out}); choose "
    with pytest.raises(ValueError, match="^" + re.escape(told + "a writable directory") + "$"):
        run_suite(out, BenchSettings(parts=("ops",), quick=True, device="cpu", op_kinds=("markov_local",),
                                     lengths=(64,)), log=lambda line: None)  # fmt: skip

"""Bad input at the command line: one line naming the problem, exit status 2, no traceback; the error lines' own
rules (cut, out of memory, unwritable places), what --force changes, and bench's flags and --set values reaching the
suite's settings."""

import json
import shutil

import pytest


def assert_one_line_error(done, *fragments: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("markovformer: error:"), done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A tiny trained LM run shared by the tests that need one."""
    import yaml
    from conftest import TINY_RUN, run_in_process

    folder = tmp_path_factory.mktemp("trained")
    config = folder / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_RUN))
    done = run_in_process("train", str(config), f"output_dir={folder / 'run'}", "trainer.max_steps=10", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder / "run"


def test_malformed_yaml(tmp_path, main_cli):
    path = tmp_path / "bad.yaml"
    path.write_text("task: causal_lm\nmodel: [d_model: 4\n")
    assert_one_line_error(main_cli("train", str(path)), "bad.yaml", "malformed YAML")


def test_empty_config_file(tmp_path, main_cli):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert_one_line_error(main_cli("train", str(path)), "empty")


def test_a_config_file_that_is_not_utf8_is_named(tmp_path, main_cli):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("task: caus\xe9al_lm\n".encode("latin-1"))  # was the codec's message without the file
    assert_one_line_error(main_cli("train", str(path)), f"{path}: not a UTF-8 text file")


def test_unknown_keys_get_a_suggestion(main_cli):
    assert_one_line_error(main_cli("train", "trainer.max_stepz=3"), "trainer.max_stepz", "max_steps")
    assert_one_line_error(main_cli("train", "model.max_ordr=3"), "max_ordr", "max_order")
    assert_one_line_error(main_cli("train", "data.num_symbol=3"), "data.num_symbol", "num_symbols")
    assert_one_line_error(main_cli("train", "tsk=causal_lm"), "tsk", "task")


def test_wrong_types_and_values(main_cli):
    assert_one_line_error(main_cli("train", "trainer.max_steps=abc"), "trainer.max_steps", "int")
    assert_one_line_error(main_cli("train", "model.attention=quantum"), "attention", "quantum")
    assert_one_line_error(main_cli("train", "model.d_model=30", "model.n_heads=4"), "d_model", "n_heads")
    assert_one_line_error(main_cli("train", "task=ctc"), "markov_chain", "ctc")


def test_fasta_letter_outside_the_vocabulary(tmp_path, main_cli):
    (tmp_path / "seqs.fa").write_text(">a\nACGT\n>b\nACXT\n")
    (tmp_path / "labels.tsv").write_text("a\t0\nb\t1\n")
    done = main_cli("train", "task=sequence_classification", "data={source: fasta}",
                    f"data.path={tmp_path / 'seqs.fa'}", f"data.labels={tmp_path / 'labels.tsv'}")  # fmt: skip
    assert_one_line_error(done, "'b'", "'X'")


def test_csv_with_nan_and_without_the_label_column(tmp_path, main_cli):
    rows = ["x,y,label"] + [f"{i},{i % 3},{i % 2}" for i in range(40)]
    rows[7] = "6,nan,0"
    (tmp_path / "series.csv").write_text("\n".join(rows) + "\n")
    common = [
        "task=sequence_classification",
        "data={source: csv_series, window: 4}",
        f"data.path={tmp_path / 'series.csv'}",
    ]
    assert_one_line_error(main_cli("train", *common), "line 8", "'y'")
    assert_one_line_error(main_cli("train", *common, "data.label_column=target"), "target")


def test_empty_text_file(tmp_path, main_cli):
    (tmp_path / "empty.txt").write_text("")
    assert_one_line_error(main_cli("train", "data={source: text}", f"data.path={tmp_path / 'empty.txt'}"),
                          "empty.txt")


def test_missing_data_file(tmp_path, main_cli):
    assert_one_line_error(main_cli("train", "data={source: text}", f"data.path={tmp_path / 'nope.txt'}"), "nope.txt")


def test_token_id_outside_the_vocabulary(trained_run, main_cli):
    assert_one_line_error(main_cli("generate", str(trained_run), "--prompt", "1 2 99"), "99", "vocabulary")


def test_checkpoint_from_another_model(trained_run, tmp_path, main_cli):
    import yaml
    from conftest import TINY_RUN

    other = {**TINY_RUN, "model": {**TINY_RUN["model"], "d_model": 32}}
    config = tmp_path / "other.yaml"
    config.write_text(yaml.safe_dump(other))
    assert main_cli("train", str(config), f"output_dir={tmp_path / 'other'}", "trainer.max_steps=10").returncode == 0
    foreign = trained_run / "checkpoints" / "foreign.ckpt"
    shutil.copy(tmp_path / "other" / "checkpoints" / "last.ckpt", foreign)
    try:
        assert_one_line_error(main_cli("eval", str(foreign)), "foreign.ckpt", "does not match")
    finally:
        foreign.unlink()


def test_not_a_run_directory(tmp_path, main_cli, trained_run):
    assert_one_line_error(main_cli("eval", str(tmp_path)), "not a run directory")
    # a run's model/ (a Hugging Face model directory) or checkpoints/: the error names the run around it
    for command in (["eval", str(trained_run / "model")], ["generate", str(trained_run / "model"), "--prompt", "a"],
                    ["train", "--resume", str(trained_run / "checkpoints")]):  # fmt: skip
        assert_one_line_error(main_cli(*command), f"it is inside the run {trained_run}: give that")


def test_debug_shows_the_traceback_with_the_same_exit_status(main_cli):
    """--debug prints the traceback instead of the one-line message; a script that checks the exit status sees the
    same one either way (it exited 1, the interpreter's, where the one-line error exits 2)."""
    plain = main_cli("train", "trainer.max_steps=abc")
    debug = main_cli("--debug", "train", "trainer.max_steps=abc")
    assert plain.returncode == debug.returncode == 2
    assert debug.stderr.startswith("Traceback (most recent call last):") and "trainer.max_steps" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1].endswith("trainer.max_steps='abc' has the wrong type: expected int")


def test_model_field_of_the_wrong_type(main_cli):
    assert_one_line_error(main_cli("train", 'model.dropout="0.1"'), "model.dropout", "float")


def test_data_task_must_agree_with_the_run_task(tmp_path, main_cli):
    rows = ["x,label"] + [f"{i},{i % 2}" for i in range(40)]
    (tmp_path / "series.csv").write_text("\n".join(rows) + "\n")
    data = f"data={{source: csv_series, window: 4, path: {tmp_path / 'series.csv'}, task: sequence_classification}}"
    assert_one_line_error(main_cli("train", "task=token_classification", data), "data.task", "token_classification")


def test_eval_on_a_file_whose_classes_differ_is_refused_naming_both(tmp_path, main_cli):
    """Classes are ids in sorted-name order: another file's ['flat', 'up', 'zzz'] scored 'flat' as the run's
    'down' (id 0), with exit 0."""
    names = {"run.csv": ("down", "flat", "up"), "other.csv": ("flat", "up", "zzz")}
    for file, labels in names.items():
        rows = ["x,label"] + [f"{i % 7},{labels[(i // 3) % 3]}" for i in range(90)]
        (tmp_path / file).write_text("\n".join(rows) + "\n")
    data = f"data={{source: csv_series, window: 4, path: {tmp_path / 'run.csv'}, task: sequence_classification}}"
    trained = main_cli("train", "task=sequence_classification", data, f"output_dir={tmp_path / 'run'}",
                       "model={d_model: 16, n_layers: 1, n_heads: 2, max_order: 2}", "trainer.max_steps=2",
                       "trainer.eval_every=2", "trainer.batch_size=4", "trainer.warmup_steps=1")  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    refused = main_cli("eval", str(tmp_path / "run"), "--data", f"path={tmp_path / 'other.csv'}")
    assert_one_line_error(refused, "['flat', 'up', 'zzz'] are not the run's ['down', 'flat', 'up']")
    assert main_cli("eval", str(tmp_path / "run"), "--data", f"path={tmp_path / 'run.csv'}").returncode == 0


def test_experiment_list_and_unknown_name(main_cli):
    listed = main_cli("experiment", "list")
    assert listed.returncode == 0 and "weight-tying" in listed.stdout and "landscape" in listed.stdout
    assert_one_line_error(main_cli("experiment", "wieght-tying"), "did you mean 'weight-tying'")
    assert_one_line_error(main_cli("experiment", "landscape", "--set", "stps=5"), "landscape.stps",
                          "did you mean 'steps'")
    assert_one_line_error(main_cli("experiment", "landscape", "--set", "steps=many"), "landscape.steps")


def test_experiment_list_and_a_mistyped_name_import_no_training_machinery():
    """`experiment list` imported every experiment, Lightning and torchmetrics (about 8 s on a quiet 2-core CPU,
    three times the time of torch alone) to print eleven lines."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from markovformer.cli.main import main\n"
            "assert main(['experiment', sys.argv[1]]) == int(sys.argv[2])\n"
            "print(sorted(name for name in ('lightning', 'torchmetrics', 'markovformer.training.tasks') "
            "if name in sys.modules))\n")  # fmt: skip
    for name, status in (("list", "0"), ("wieght-tying", "2")):
        done = subprocess.run([sys.executable, "-c", code, name, status], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == "[]", (name, done.stdout)


def test_help_and_a_mistyped_command_answer_without_loading_torch():
    """`markovformer --help` took 3.7 s: the package imported every model, hence torch, before argparse ran. The
    package's names are imported on first use; the command line's parsers need none of them."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from markovformer.cli.main import main\n"
            "try:\n"
            "    main(sys.argv[1:])\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)\n")  # fmt: skip
    for argv in (["--help"], ["generate", "--help"], ["trian"], ["kind", "--help"], ["kind", "show", "--help"],
                 ["kind", "lst"]):
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
        assert done.stderr.strip().splitlines()[-1] == "False", (argv, done.stderr)
    code = "import sys, markovformer; print(markovformer.MarkovianTransformerConfig.__module__, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["markovformer.models.markovian_transformer.config", "True"], done.stderr


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    """`markovformer config list | head -1` printed "error: a file: Broken pipe" with status 2 (or a traceback): a
    closed stdout ends the command without a word, with the status of a process SIGPIPE ended, as other tools do."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "markovformer", "config", "list"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    process.stdout.close()  # before the command prints: its output goes to a pipe with no reader
    err = process.stderr.read()
    assert process.wait(timeout=60) == 141 and err == ""


def test_experiment_runs_with_settings_and_reuses_cells(tmp_path, main_cli):
    out = tmp_path / "landscape"
    args = ("experiment", "landscape", "--out", str(out), "--set", "steps=300", "starts=2", "chains=[[0.2, 0.3]]")
    first = main_cli(*args)
    assert first.returncode == 0, first.stderr
    report = (out / "report.md").read_text()
    assert "lr 0.1, 300 steps" in report and (out / "landscape.png").is_file()
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["steps"] == 300 and len(results["cells"]) == 1
    again = main_cli(*args)
    assert "done earlier" in again.stdout
    changed = main_cli(*args[:-2], "steps=200", args[-1])
    assert "stored under other settings" in changed.stdout
    assert_one_line_error(main_cli(*args, "--recompute", "nope*"), "'nope*' matches no cell")
    redone = main_cli(*args, "--recompute", "*")
    assert redone.returncode == 0 and "removed, to be recomputed" in redone.stdout
    assert "done earlier" not in redone.stdout


def test_an_experiment_folder_holds_one_experiment_and_quick_runs_have_their_own(tmp_path, main_cli):
    """--quick wrote into the full run's default folder, replacing its cells (the quick settings differ); another
    experiment's run into a folder replaced its report, results and figures and mixed both experiments' cells."""
    tiny = ("--set", "steps=200", "starts=2", "chains=[[0.2, 0.3]]")
    assert main_cli("experiment", "landscape", "--quick", *tiny).returncode == 0
    quick = tmp_path / "runs" / "experiments" / "landscape-quick"
    assert (quick / "report.md").is_file() and not (tmp_path / "runs" / "experiments" / "landscape").exists()
    assert json.loads((quick / "experiment.json").read_text()) == {"experiment": "landscape"}
    report = (quick / "report.md").read_text()
    done = main_cli("experiment", "weight-tying", "--quick", "--out", str(quick), "--set", "steps=2")
    assert_one_line_error(done, f"{quick} holds the experiment 'landscape' (experiment.json); give weight-tying "
                                "another --out")  # fmt: skip
    assert (quick / "report.md").read_text() == report and not list((quick / "cells").glob("*p=0.5*"))


def _bench_settings(monkeypatch, *argv: str):
    """The BenchSettings ``markovformer bench ARGV`` hands to the suite (the suite itself is not run)."""
    import argparse

    import markovformer.bench
    from markovformer.cli import bench as bench_cli

    seen = []
    monkeypatch.setattr(markovformer.bench, "run_suite", lambda out, settings, log: seen.append(settings))
    parser = argparse.ArgumentParser()
    bench_cli.add_parser(parser.add_subparsers(dest="command"))
    bench_cli.run_bench(parser.parse_args(["bench", *argv]))
    assert len(seen) == 1
    return seen[0]


def test_bench_flags_reach_the_suites_settings(monkeypatch):
    """Each flag lands in its setting: the allocator switch (default: keep freed memory, as train does), the op
    kinds and the per-part sizes."""
    assert _bench_settings(monkeypatch).keep_freed_memory is True
    assert _bench_settings(monkeypatch, "--default-allocator").keep_freed_memory is False
    settings = _bench_settings(monkeypatch, "--op-kinds", "markov_local", "softmax_sdpa", "--decode-batches", "2", "3",
                               "--scan-lengths", "256", "--parts", "ops", "decode", "scan")  # fmt: skip
    assert settings.op_kinds == ("markov_local", "softmax_sdpa")
    assert (settings.decode_batches, settings.scan_lengths) == ((2, 3), (256,))


def test_bench_set_reads_yaml_values_into_the_fields_types(monkeypatch):
    """--set KEY=VALUE: an int where a float belongs is that float; one value for a tuple field is a 1-tuple; a list
    is a tuple."""
    settings = _bench_settings(monkeypatch, "--set", "data_mb=2", "data_tokenizers=char", "memory_lengths=[64, 128]")
    assert settings.data_mb == 2.0 and isinstance(settings.data_mb, float)
    assert settings.data_tokenizers == ("char",)
    assert settings.memory_lengths == (64, 128)


@pytest.mark.parametrize("pair", ["time_cap", "repeats", "data_mb"])
def test_bench_set_without_an_equals_sign_is_refused(monkeypatch, pair):
    """``--set KEY`` (no ``=VALUE``) is refused naming the expected form, never read as KEY=null."""
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        _bench_settings(monkeypatch, "--set", pair)


@pytest.mark.parametrize("pair", ["data_mb=yes", "data_timeout=on", "data_small_mb=true"])
def test_bench_set_refuses_a_yaml_boolean_for_a_number(monkeypatch, pair):
    """"A value of the wrong type is refused, naming it": YAML reads yes/on/true as True, and bool is an int
    subclass, so a float setting took it as 1.0 (data_mb=yes benchmarked 1 MB) where an int setting refuses it."""
    key = pair.split("=")[0]
    with pytest.raises(ValueError, match=f"{key} takes a float, got True"):
        _bench_settings(monkeypatch, "--set", pair)


def test_strict_json_replaces_every_non_finite_float_in_nested_lists_tuples_and_dicts():
    """eval --json prints allow_nan=False JSON: every NaN/inf, at any depth and in a tuple too, becomes null."""
    import math

    from markovformer.strict_json import strict_json

    value = {"a": (math.inf, 1.0, [-math.inf, {"b": math.nan}]), "c": 2, "d": "x"}
    assert json.loads(json.dumps(strict_json(value), allow_nan=False)) == {"a": [None, 1.0, [None, {"b": None}]],
                                                                              "c": 2, "d": "x"}  # fmt: skip


@pytest.mark.parametrize("code", ["EROFS", "EACCES", "EPERM"])
def test_an_unwritable_place_is_named_with_what_to_change(code):
    """A read-only file system is the same problem as a missing permission: the path and the setting to change."""
    import errno

    from markovformer.cli.errors import error_line

    line = error_line(OSError(getattr(errno, code), "denied", "/runs/x/config.yaml"))
    assert line.startswith("cannot write /runs/x/config.yaml (denied)") and "writable output_dir" in line


@pytest.mark.parametrize("message", ["CUDA out of memory. Tried to allocate 2.00 GiB",
                                     "[enforce fail at alloc_cpu.cpp] DefaultCPUAllocator: can't allocate memory"])
def test_a_runtime_out_of_memory_error_is_one_line_and_exit_status_2(monkeypatch, main_cli, message):
    """torch's out-of-memory RuntimeErrors are the user's sizes, not a bug: one line saying what to lower, exit 2;
    any other RuntimeError is raised."""
    from markovformer.cli import main as cli_main

    def run_out(args):
        raise RuntimeError(message)

    monkeypatch.setitem(cli_main.COMMANDS, "config", run_out)
    assert_one_line_error(main_cli("config", "list"), "error: out of memory", "batch_size")

    def other(args):
        raise RuntimeError("a bug")

    monkeypatch.setitem(cli_main.COMMANDS, "config", other)
    with pytest.raises(RuntimeError, match="a bug"):
        main_cli("config", "list")


def test_an_error_line_is_cut_exactly_past_max_error_line_characters():
    """The first MAX_ERROR_LINE characters are printed whole; a longer line is cut there and marked " ..."."""
    from markovformer.cli.errors import MAX_ERROR_LINE, error_line

    for n in (MAX_ERROR_LINE - 1, MAX_ERROR_LINE):
        assert error_line(ValueError("x" * n)) == "x" * n
    for n in (MAX_ERROR_LINE + 1, 3 * MAX_ERROR_LINE, 12 * MAX_ERROR_LINE):
        assert error_line(ValueError("x" * n + "\nsecond line")) == "x" * MAX_ERROR_LINE + " ..."


def test_data_prepare_rebuilds_an_existing_file_only_with_force(tmp_path, monkeypatch, main_cli):
    """A recipe's file already there is kept (nothing fetched) unless --force, which rebuilds it in place."""
    from types import SimpleNamespace

    from markovformer.data.recipes.registry import DATA_RECIPES

    calls = []

    def prepare(out):
        calls.append(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"built {len(calls)}\n")

    recipe = SimpleNamespace(summary="a fake", file_name="fake.txt", prepare=prepare, usage="use {path}")
    monkeypatch.setitem(DATA_RECIPES, "fake-recipe", recipe)
    target = tmp_path / "fake.txt"
    prepare_fake = ("data", "prepare", "fake-recipe", "--dir", str(tmp_path))
    assert main_cli(*prepare_fake).returncode == 0 and target.read_text() == "built 1\n"
    target.write_text("edited\n")
    kept = main_cli(*prepare_fake)
    assert kept.returncode == 0 and "already there" in kept.stdout
    assert target.read_text() == "edited\n" and len(calls) == 1
    assert main_cli(*prepare_fake, "--force").returncode == 0
    assert target.read_text() == "built 2\n" and calls == [target, target]


def test_config_copy_overwrites_an_existing_file_only_with_force(tmp_path, main_cli):
    from markovformer.training.config_files import shipped_config

    (tmp_path / "mine.yaml").write_text("edited: true\n")
    assert_one_line_error(main_cli("config", "copy", "text_char", "mine.yaml"), "--force")
    assert (tmp_path / "mine.yaml").read_text() == "edited: true\n"
    assert main_cli("config", "copy", "text_char", "mine.yaml", "--force").returncode == 0
    assert (tmp_path / "mine.yaml").read_text() == shipped_config("text_char").read_text()


@pytest.mark.parametrize("beam", ["0", "-2"])
def test_eval_refuses_a_beam_size_below_one_before_reading_the_run(tmp_path, main_cli, beam):
    """--beam-size lies in [1, MAX_BEAMS]: a smaller one is refused by name (checked before the run is read, so a
    missing run is not what the error names)."""
    assert_one_line_error(main_cli("eval", str(tmp_path / "no_run"), "--beam-size", beam),
                          f"--beam-size {beam} must lie in [1,")


@pytest.mark.parametrize(("stop", "status"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_stopped_data_prepare_leaves_nothing_behind_and_says_so(tmp_path, stop, status):
    """SIGTERM's default action ended `data prepare` at once: the Debian packages it had unpacked into temporary
    folders (26 MB for digits) stayed in /tmp. Now the folders go, and one line says nothing was written."""
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import sys, tempfile, time\n"
        "from markovformer.cli.main import main\n"
        "from markovformer.data.recipes.registry import DATA_RECIPES, DataRecipe\n"
        "def prepare(out):\n"
        "    with tempfile.TemporaryDirectory(dir=sys.argv[1]) as folder:\n"
        "        print(folder, flush=True)\n"
        "        time.sleep(120)\n"
        "DATA_RECIPES['slow'] = DataRecipe('a slow one', 'slow.txt', prepare, '')\n"
        "sys.exit(main(['data', 'prepare', 'slow', '--dir', sys.argv[1]]))\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    folder = process.stdout.readline().strip()
    assert folder and (tmp_path / folder).is_dir()
    time.sleep(0.2)
    process.send_signal(getattr(signal, stop))
    _, err = process.communicate(timeout=60)
    assert process.returncode == status, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"data prepare slow was stopped before it wrote {tmp_path / 'slow.txt'}" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_outside_a_training_run_is_one_line_and_status_130(tmp_path):
    """Ctrl-C during `eval`, `generate`, `inspect` or `bench` printed the interpreter's traceback and exit status 1,
    as a bug would; it is one line naming the command, and 130 as a shell reports a process SIGINT ended."""
    import signal
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from markovformer.cli import main as cli\n"
        "def slow(args):\n"
        "    print('started', flush=True)\n"
        "    time.sleep(120)\n"
        "cli.COMMANDS['config'] = slow\n"
        "sys.exit(cli.main(['config', 'list']))\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    assert process.stdout.readline().strip() == "started"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert err.strip().splitlines() == ["markovformer: config was interrupted (Ctrl-C)"]


@pytest.mark.parametrize("argv,prog,close", [
    (["trian"], "markovformer", "'train'"),  # a mistyped command
    (["data", "lst"], "markovformer data", "'list'"),  # and subcommand
    (["eval", "some_run", "--split", "tset"], "markovformer eval", "'test'"),  # a choice
    (["generate", "some_run", "--tempreature", "3"], "markovformer generate", "'--temperature'"),  # an option
    (["train", "--dbug"], "markovformer train", "'--debug'"),
])  # fmt: skip
def test_a_mistyped_command_choice_or_option_is_one_line_naming_the_closest(main_cli, argv, prog, close):
    done = main_cli(*argv)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr  # no usage block before the error
    assert lines[0].startswith(f"{prog}: error:") and f"(did you mean {close}?)" in lines[0], lines[0]
    assert lines[0].endswith(f"see `{prog} --help`"), lines[0]


def test_debug_may_follow_the_command(main_cli):
    """`markovformer data show nothing --debug` does what `markovformer --debug data show nothing` does."""
    after, before = main_cli("data", "show", "nothing", "--debug"), main_cli("--debug", "data", "show", "nothing")
    assert after.returncode == before.returncode == 2
    assert "Traceback" in after.stderr and after.stderr.splitlines()[-1] == before.stderr.splitlines()[-1]


@pytest.mark.parametrize(("per_token", "counts"), [(False, (139, 401, 181)), (True, (139, 401, 181)),
                                                   (False, (0, 9, 0))])  # fmt: skip
def test_eval_prints_what_always_guessing_the_most_frequent_label_would_score(capsys, per_token, counts):
    """0.56 accuracy on a split whose most frequent label is 55.6 % of it is nothing: eval prints that bar, checked
    here against ClassificationMetrics scoring the constant guess itself, with the metrics the task reports and no
    other: token classification reports no AUROC (the line said "auroc 0.5" for it), nor does a split of one class
    (nan: no class has both positives and negatives)."""
    import math
    import re

    import torch

    from markovformer.cli.main import print_per_class
    from markovformer.training.tasks.classification import ClassificationMetrics

    labels = torch.tensor([label for label, count in enumerate(counts) for _ in range(count)])
    logits = torch.tensor([0.0, 1.0, 0.0]).repeat(len(labels), 1)
    if per_token:  # one row of positions, two of them unlabelled
        labels, logits = torch.cat([labels, torch.tensor([-100, -100])])[None], torch.cat([logits, logits[:2]])[None]
    constant = ClassificationMetrics(3, auroc=not per_token, label_names=["down", "flat", "up"], per_token=per_token)
    constant.update(type("Output", (), {"logits": logits, "loss": torch.tensor(1.0)})(), {"labels": labels})
    expected = {key: value for key, value in constant.compute().items() if key != "loss" and not math.isnan(value)}
    print_per_class(constant.breakdown()["per_class"], auroc="auroc" in constant.compute())
    line = capsys.readouterr().out.splitlines()[-1]
    shown = re.fullmatch(r"  always 'flat' \(the split's most frequent label\) would score (.*)", line)
    assert shown, line
    numbers = dict(item.split(" ") for item in shown.group(1).split(", "))
    assert numbers.keys() == expected.keys(), line
    for key, value in numbers.items():
        assert float(value) == pytest.approx(expected[key], abs=5e-5), key


@pytest.mark.parametrize("option", ["--prompt", "--input"])
def test_generate_refuses_a_repeated_prompt_or_input_instead_of_dropping_the_first(option, capsys):
    # argparse keeps the last of a repeated option: `--prompt A --prompt B` translated B alone, A dropped unsaid
    from markovformer.cli.main import build_parser

    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["generate", "runs/x", option, "first", option, "second"])
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "'first'" in lines[0] and "'second'" in lines[0]
    assert build_parser().parse_args(["generate", "runs/x", option, "only"]).__dict__[option[2:]] == "only"


def test_inspects_layers_help_names_every_figure_it_chooses_and_its_default():
    """--layers chooses the layers of the attention maps and of the attention-by-lag profile, by default the first
    two layers that have a map (``inspection._gate_and_attention_figures``; a scan layer 0 is passed by): its help
    spoke of the maps only, 'default: the first two'."""
    import argparse

    from markovformer.cli.main import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    layers = next(a for a in commands.choices["inspect"]._actions if "--layers" in a.option_strings)
    text = " ".join(layers.help.split())
    assert "attention maps and attention by lag" in text and "the first two layers that have attention maps" in text


@pytest.mark.parametrize("argv", [["eval", "-run"], ["train", "--resume", "-run"]])
def test_a_run_whose_path_starts_with_a_dash_is_refused_saying_how_to_give_it(main_cli, tmp_path, argv):
    """argparse took -run for an option: 'the following arguments are required: target', 'argument --resume:
    expected one argument', neither naming the path nor how to give it."""
    (tmp_path / "-run").mkdir()
    done = main_cli(*argv)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "markovformer: error: -run is a path that starts with '-', which reads as an option: give it as ./-run (or "
        "after --); see `markovformer --help`"]  # fmt: skip

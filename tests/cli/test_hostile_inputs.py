"""Hostile input at the command line (issue 17, items 4-7; issue 22, item 5): every case is refused on one line that
names the bad key, option or file, with exit status 2 and nothing left half-written. Run in-process through
``main`` (no subprocess start-up), so the whole list stays cheap."""

import errno
import json
import shutil

import pytest
import torch
import yaml
from conftest import TINY_RUN, run_in_process
from safetensors.torch import load_file, save_file

from markovformer.cli.main import main
from markovformer.training.checkpoint import load_checkpoint_file, save_checkpoint_file


def refused(capsys, argv: list[str], *fragments: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("markovformer: error:"), (code, err[-2000:])
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny run, one of the same architecture on other data (another chain, other lags), and two character-level
    text runs of the same architecture and vocabulary size whose vocabularies differ (other letters)."""
    folder = tmp_path_factory.mktemp("hostile")
    config = folder / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_RUN))
    generator = torch.Generator().manual_seed(0)
    for name, letters in (("a.txt", "abcdefgh \n"), ("b.txt", "ijklmnop \n")):
        picks = torch.randint(len(letters), (4000,), generator=generator).tolist()
        (folder / name).write_text("".join(letters[i] for i in picks))
    text = ["data={source: text, seq_len: 16}", "trainer.max_steps=5"]
    for name, extra in (("run", ["trainer.max_steps=10"]), ("other", ["trainer.max_steps=10", "data.lags=[1, 3]",
                        "model.max_order=3"]), ("text_a", [*text, f"data.path={folder / 'a.txt'}"]),
                        ("text_b", [*text, f"data.path={folder / 'b.txt'}"])):  # fmt: skip
        done = run_in_process("train", str(config), f"output_dir={folder / name}", *extra, cwd=folder)
        assert done.returncode == 0, done.stderr
    return config, folder / "run", folder / "other", folder / "text_a", folder / "text_b"


@pytest.fixture
def run(runs, tmp_path):
    """A private copy of the tiny run, free to damage."""
    shutil.copytree(runs[1], tmp_path / "run")
    return tmp_path / "run"


SETTINGS = [
    ("trainer.lr=.inf", "trainer.lr"),
    ("trainer.lr=.nan", "trainer.lr"),
    ("trainer.lr=-1", "trainer.lr"),
    ("trainer.betas=[0.9, 1.0]", "trainer.betas"),
    ("trainer.betas=[-0.1, 0.9]", "trainer.betas"),
    ("trainer.weight_decay=-0.1", "trainer.weight_decay"),
    ("trainer.gradient_clip=-1", "trainer.gradient_clip"),
    ("trainer.gradient_clip=.nan", "trainer.gradient_clip"),
    ("trainer.label_smoothing=.nan", "trainer.label_smoothing"),
    ("trainer.lr_floor=.inf", "trainer.lr_floor"),
    ("trainer.keep_checkpoints=-1", "trainer.keep_checkpoints"),
    ("trainer.decay_steps=0", "trainer.decay_steps"),
    ("trainer.seed=-1", "trainer.seed"),
    ("trainer.warmup_steps=-1", "trainer.warmup_steps=-1 must be >= 0"),  # named both keys, and no value
    ("trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches=0 must be >= 1"),  # and threads=None
    ("trainer.deterministic=1", "trainer.deterministic"),  # a bool must be a bool, not 1
    ("model.gate_entropy_weight=.nan", "model.gate_entropy_weight"),
    ("model.dropout=.inf", "model.dropout"),
    ('model.causal="no"', "model.causal"),
    ("model.initializer_range=-1", "initializer_range"),
    ("model.d_model=1000000", "model.d_model"),  # cannot be allocated: one line saying what to lower
    ("data.lags=[20]", "data.lags=[20]"),  # 16^20 contexts: an OverflowError's traceback; 16^7, 34 GB asked for
]


@pytest.mark.parametrize(("override", "key"), SETTINGS, ids=[s for s, _ in SETTINGS])
def test_non_finite_out_of_range_and_mistyped_settings_are_refused(runs, tmp_path, capsys, override, key):
    config = runs[0]
    refused(capsys, ["train", str(config), f"output_dir={tmp_path / 'new'}", "trainer.max_steps=2", override], key)
    assert not (tmp_path / "new" / "checkpoints").exists()


GENERATION = [
    (["--max-new-tokens", "-5"], "--max-new-tokens"),
    (["--max-new-tokens", "1000000000"], "--max-new-tokens"),
    (["--temperature", "nan"], "--temperature"),
    (["--temperature", "inf"], "--temperature"),
    (["--temperature", "-1"], "--temperature"),
    (["--top-k", "0"], "--top-k"),
    (["--top-p", "0"], "--top-p"),
    (["--top-p", "1.5"], "--top-p"),
    (["--top-p", "nan"], "--top-p"),
    (["--beam-size", "0"], "--beam-size"),
    (["--beam-size", "1000000"], "--beam-size 1000000"),  # ran for hours, GBs of beams
    (["--length-penalty", "nan"], "--length-penalty"),
    # a language model has no beam search: the penalty was ignored
    (["--length-penalty", "0.5"], "--length-penalty 0.5: only beam search (--beam-size > 1) ranks hypotheses"),
    (["--seed", "-1"], "--seed"),
    (["--prompt", "1 2 100000000000000000000"], "100000000000000000000"),  # was "Overflow when unpacking long long"
    (["--prompt", "1 -3"], "-3"),
]


@pytest.mark.parametrize(("options", "named"), GENERATION, ids=[" ".join(o) for o, _ in GENERATION])
def test_generation_options_are_checked(runs, capsys, options, named):
    prompt = [] if "--prompt" in options else ["--prompt", "1 2"]
    refused(capsys, ["generate", str(runs[1]), *prompt, *options], named)


def test_eval_refuses_weights_of_another_run(runs, run, capsys):
    """Same architecture, other data: on main every one of these was loaded and scored with exit 0."""
    other = runs[2]
    good = load_file(run / "model" / "model.safetensors")
    shutil.rmtree(run / "model")
    shutil.copytree(other / "model", run / "model")  # another run's whole model/
    refused(capsys, ["eval", str(run)], "model", "saved by another run")
    shutil.copy(runs[1] / "model" / "fingerprint.json", run / "model" / "fingerprint.json")  # its weights only
    refused(capsys, ["eval", str(run)], "model.safetensors", "not the one this run saved")
    shutil.copy(other / "checkpoints" / "last.ckpt", run / "checkpoints" / "foreign.ckpt")  # a checkpoint
    refused(capsys, ["eval", str(run / "checkpoints" / "foreign.ckpt")], "foreign.ckpt", "written by another run")
    assert good  # the run's own weights were there to be replaced


def test_eval_refuses_the_model_of_a_run_with_another_vocabulary(runs, tmp_path, capsys):
    """The issue's case: same architecture and vocabulary size, other characters; on main scored with exit 0."""
    text_a, text_b = runs[3], runs[4]
    assert json.loads((text_a / "data.json").read_text())["info"]["vocab_size"] == json.loads(
        (text_b / "data.json").read_text())["info"]["vocab_size"]  # fmt: skip
    run = tmp_path / "text_a"
    shutil.copytree(text_a, run)
    shutil.rmtree(run / "model")
    shutil.copytree(text_b / "model", run / "model")
    refused(capsys, ["eval", str(run)], "saved by another run")
    refused(capsys, ["generate", str(run), "--prompt", "abc"], "saved by another run")
    assert main(["eval", str(text_a), "--json"]) == 0  # the run's own model still scores
    assert json.loads(capsys.readouterr().out)["metrics"]["loss"] > 0


def saved_before_fingerprints(run) -> None:
    """Make ``run`` look like a run written before fingerprints and finished.json (run format 1)."""
    (run / "model" / "fingerprint.json").unlink()
    (run / "finished.json").unlink()
    environment = json.loads((run / "environment.json").read_text())
    del environment["run_format"]
    (run / "environment.json").write_text(json.dumps(environment))


def test_eval_refuses_tensors_of_another_dtype(run, capsys):
    """Integer weights in a crafted file were cast and loaded silently on main."""
    weights = run / "model" / "model.safetensors"
    tensors = load_file(weights)
    name = next(n for n, t in tensors.items() if t.is_floating_point())
    save_file({**tensors, name: (tensors[name] * 100).long()}, str(weights))
    saved_before_fingerprints(run)  # the dtype check remains
    refused(capsys, ["eval", str(run)], name, "torch.int64")
    last = run / "checkpoints" / "last.ckpt"
    checkpoint = load_checkpoint_file(last)
    key = next(k for k, t in checkpoint["state_dict"].items() if t.is_floating_point())
    checkpoint["state_dict"][key] = checkpoint["state_dict"][key].to(torch.float64)
    save_checkpoint_file(checkpoint, last)
    refused(capsys, ["eval", str(last)], key, "torch.float64")


def test_damaged_weights_and_records_are_one_line_in_eval_generate_and_inspect(run, capsys):
    weights = run / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    for argv in (["eval", str(run)], ["generate", str(run), "--prompt", "1 2"], ["inspect", str(run)]):
        refused(capsys, argv, "model.safetensors")
    saved_before_fingerprints(run)
    refused(capsys, ["eval", str(run)], "model.safetensors", "not a readable safetensors file")
    weights.write_bytes(b"garbage" * 10)
    refused(capsys, ["generate", str(run), "--prompt", "1 2"], "model.safetensors")
    (run / "data.json").write_text("{not json")
    refused(capsys, ["eval", str(run)], "data.json")


def test_an_empty_split_is_one_line_and_json_never_holds_nan(runs, capsys):
    text_run = runs[3]
    empty = ["--split", "test", "--data", "fractions=[0.9, 0.1, 0.0]"]
    refused(capsys, ["eval", str(text_run), *empty], "test split", "empty")  # main: "loss nan", exit 0
    refused(capsys, ["eval", str(text_run), *empty, "--json"], "test split", "empty")  # main: NaN, not JSON
    from markovformer.strict_json import strict_json

    assert json.loads(json.dumps(strict_json({"m": {"loss": float("nan"), "n": [float("inf"), 1.0]}}))) == {
        "m": {"loss": None, "n": [None, 1.0]}}  # fmt: skip


def test_output_dirs_that_cannot_hold_a_run(runs, tmp_path, capsys):
    config = runs[0]
    (tmp_path / "file").write_text("x")
    refused(capsys, ["train", str(config), f"output_dir={tmp_path / 'file'}"], "output_dir", "file")
    refused(capsys, ["train", str(config), f"output_dir={tmp_path / 'file' / 'run'}"], "output_dir")


def test_a_full_disk_during_a_checkpoint_is_one_line_and_leaves_the_checkpoints_whole(runs, tmp_path, capsys,
                                                                                        monkeypatch):  # fmt: skip
    from safetensors import SafetensorError

    import markovformer.training.checkpoint as checkpoint_module

    written = []
    real_save = checkpoint_module.save_file

    def fill_the_disk(tensors, path, metadata=None):
        if written:  # the first checkpoint fits, the second does not
            raise SafetensorError(f"Error while serializing: I/O error: No space left on device (os error "
                                  f"{errno.ENOSPC}) at path {path!r}")  # fmt: skip
        written.append(path)
        real_save(tensors, path, metadata=metadata)

    monkeypatch.setattr(checkpoint_module, "save_file", fill_the_disk)
    out = tmp_path / "full"
    refused(capsys, ["train", str(runs[0]), f"output_dir={out}", "trainer.max_steps=30"], "no space left",
            "--resume")  # fmt: skip
    assert load_checkpoint_file(out / "checkpoints" / "step-000010.ckpt")["global_step"] == 10
    assert not list((out / "checkpoints").glob(".*.tmp"))


def test_crafted_checkpoint_headers_are_refused(run, capsys):
    """Deep nesting (a RecursionError on main) and entries of the wrong type (a Lightning traceback)."""
    from markovformer.training.checkpoint import FORMAT_KEY

    last = run / "checkpoints" / "last.ckpt"
    (run / "metrics.json").unlink()  # resumable
    deep = '{"version": 1, "root": ' + "[" * 100_000 + "]" * 100_000 + "}"
    save_file({"x": torch.zeros(1)}, str(last), metadata={FORMAT_KEY: deep})
    refused(capsys, ["train", "--resume", str(run)], "last.ckpt", "nested too deeply")
    refused(capsys, ["eval", str(last)], "last.ckpt", "nested too deeply")
    checkpoint = load_checkpoint_file(run / "checkpoints" / "step-000010.ckpt")
    save_checkpoint_file({**checkpoint, "global_step": "ten"}, last)
    refused(capsys, ["train", "--resume", str(run)], "last.ckpt", "global_step")


DEEP_JSON = "[" * 100_000 + "]" * 100_000  # a RecursionError in Python's json, not a ValueError


@pytest.mark.parametrize("record", ["data.json", "model/fingerprint.json", "finished.json"])
def test_run_records_nested_too_deeply_are_one_line(run, capsys, record):
    """A crafted record nested 100,000 deep ended eval and inspect in a RecursionError traceback (exit 1); a damaged
    record is refused on one line naming it, as '{not json' is."""
    (run / record).write_text(DEEP_JSON)
    for argv in (["eval", str(run)], ["inspect", str(run)]):
        refused(capsys, argv, record, "nested too deeply")


def test_a_deeply_nested_environment_record_reads_as_a_damaged_one(run, capsys):
    """environment.json damaged is read as this version's record (``run_format``); nested 100,000 deep it ended eval
    in a RecursionError traceback instead."""
    (run / "environment.json").write_text("{not json")
    assert main(["eval", str(run), "--json"]) == 0
    damaged = json.loads(capsys.readouterr().out)
    (run / "environment.json").write_text(DEEP_JSON)
    assert main(["eval", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == damaged["metrics"]


def test_a_checkpoints_settings_record_nested_too_deeply_is_one_line(run, capsys):
    """The settings record a checkpoint keeps (a JSON string in its header) nested 100,000 deep: a RecursionError
    traceback on --resume; now refused as a damaged checkpoint, naming it."""
    from markovformer.training.fingerprint import SETTINGS_KEY

    last = run / "checkpoints" / "last.ckpt"
    (run / "finished.json").unlink()  # resumable
    save_checkpoint_file({**load_checkpoint_file(last), SETTINGS_KEY: DEEP_JSON}, last)
    refused(capsys, ["train", "--resume", str(run)], "last.ckpt", "damaged")


def test_data_files_that_are_not_what_they_claim(tmp_path, capsys):
    (tmp_path / "folder").mkdir()
    refused(capsys, ["train", "data={source: text}", f"data.path={tmp_path / 'folder'}"], "folder", "directory")
    (tmp_path / "utf16.txt").write_bytes("hello world".encode("utf-16"))
    refused(capsys, ["train", "data={source: text}", f"data.path={tmp_path / 'utf16.txt'}"], "utf16.txt")
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)))
    refused(capsys, ["train", "data={source: text}", f"data.path={tmp_path / 'binary.txt'}"], "binary.txt")
    rows = ["x,label"] + [f"{i},{i % 2}" for i in range(40)]
    rows[5] = "4,nan"
    (tmp_path / "series.csv").write_text("\n".join(rows) + "\n")
    refused(capsys, ["train", "task=sequence_classification", "data={source: csv_series, window: 4}",
                     f"data.path={tmp_path / 'series.csv'}"], "series.csv", "line 6", "'nan'")  # fmt: skip


def test_resume_of_a_run_that_does_not_exist_names_it(tmp_path, capsys):
    refused(capsys, ["train", "--resume", str(tmp_path / "nowhere")], "nowhere", "not a run directory")
    assert not (tmp_path / "nowhere").exists()


def count_hostile_inputs() -> int:
    """How many hostile inputs this file feeds the command line (reported in the issue's note)."""
    return len(SETTINGS) + len(GENERATION)


def test_cheap_checks_come_before_the_data_is_built(runs, run, capsys, monkeypatch):
    """"already holds a run", a finished run, a key that cannot change on resume: refused before any data is built
    (on main the first came after the data, 27 s for a large text)."""
    import markovformer.training.runner as runner

    def no_data(config):
        raise AssertionError("the data was built before the cheap checks")

    monkeypatch.setattr(runner, "build_data", no_data)
    refused(capsys, ["train", str(runs[0]), f"output_dir={run}"], "already holds a run")
    refused(capsys, ["train", "--resume", str(run)], "finished")
    refused(capsys, ["train", "--resume", str(run), "trainer.weight_decay=0.5"], "trainer.weight_decay cannot change")


def test_eval_iw_samples_of_a_run_without_the_option_names_the_flag(run, capsys):
    """A causal LM run said "task_options.iw_samples is not an option of task causal_lm", naming a key the user never
    wrote; the flag is named now, with the task that takes it."""
    refused(capsys, ["eval", str(run), "--iw-samples", "5"], "--iw-samples", "causal_lm run", "only a vmt run")


def test_train_given_experiments_set_says_it_takes_key_value_words(main_cli):
    """`markovformer train --set trainer.lr=1e-3` (the experiment command's way) read only 'unrecognized arguments:
    --set', naming neither the way train takes its changes nor that the rest of the line was fine."""
    done = main_cli("train", "--set", "trainer.max_steps=3")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "unrecognized arguments: --set (markovformer train takes its changes as KEY=VALUE words" in lines[0]
    experiment = main_cli("experiment", "landscape", "--sett", "steps=3").stderr  # a command that takes --set
    assert "(did you mean '--set'?)" in experiment and "KEY=VALUE words" not in experiment


@pytest.mark.parametrize("text", ["{not json", "[]", DEEP_JSON], ids=["not-json", "a-list", "nested-too-deeply"])
def test_a_damaged_metrics_record_is_one_line_naming_it(run, capsys, text):
    """inspect of a finished run reads its metrics.json, as eval and --resume of a run written before finished.json
    do: '{not json' said 'Expecting property name ...' without naming the file, a list or deep nesting ended in an
    AttributeError or RecursionError traceback."""
    (run / "metrics.json").write_text(text)
    refused(capsys, ["inspect", str(run)], "metrics.json")
    saved_before_fingerprints(run)
    refused(capsys, ["eval", str(run)], "metrics.json")

"""The run directory's refusals name what the user can act on: a resume after a data file was edited names that
file and its sha256 then and now (README: "naming the file"), not the internal record that came out different (a
character count, a token-cache path); ``eval`` of a file that is neither a run directory nor a checkpoint names
that file, not its parent folder."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import yaml
from conftest import one_line_error

TEXT = "".join(f"line {i} of the notes, words and more words\n" for i in range(80))  # ~3.4 kB


def train_text_run(tmp_path, main_cli):
    """A finished two-step character-level run ``run`` of ``corpus.txt`` in ``tmp_path``: the corpus's path."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    values = {"task": "causal_lm", "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "text", "tokenizer": "char", "path": str(corpus), "seq_len": 32},
              "trainer": {"max_steps": 2, "batch_size": 4, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                          "log_every": 1, "eval_batch_size": 4, "logger": "csv"}}  # fmt: skip
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(values))
    trained = main_cli("train", "run.yaml", "output_dir=run")
    assert trained.returncode == 0, trained.stderr[-2000:]
    return corpus


def longer(text: str) -> str:
    return text + "one more line of the notes\n"  # another character count (an edit that keeps it: test_run_guards)


def test_a_resume_after_the_corpus_was_edited_names_the_file_and_its_sha256(tmp_path, main_cli):
    corpus = train_text_run(tmp_path, main_cli)
    then = hashlib.sha256(corpus.read_bytes()).hexdigest()
    corpus.write_text(longer(TEXT))
    now = hashlib.sha256(corpus.read_bytes()).hexdigest()

    line = one_line_error(main_cli("train", "--resume", "run", "trainer.max_steps=4"), str(corpus.resolve()),
                          "changed since the run started", "sha256", then, now, "init_from='run'")  # fmt: skip
    assert "splits." not in line and "was a data file changed?" not in line, line

    corpus.write_text(TEXT)  # restored: the same bytes, so the run resumes
    resumed = main_cli("train", "--resume", "run", "trainer.max_steps=4")
    assert resumed.returncode == 0, resumed.stderr[-2000:]


def test_a_run_without_sha256_records_keeps_the_generic_refusal(tmp_path, main_cli):
    """A run written before data.json recorded its files' sha256: what differs is all there is to say."""
    corpus = train_text_run(tmp_path, main_cli)
    record = tmp_path / "run" / "data.json"
    record.write_text(json.dumps({key: value for key, value in json.loads(record.read_text()).items()
                                  if key != "file_sha256"}))  # fmt: skip
    corpus.write_text(longer(TEXT))
    one_line_error(main_cli("train", "--resume", "run", "trainer.max_steps=4"), "data.json",
                   "differs from the data it started with", "was a data file changed?", "init_from='run'")  # fmt: skip


def test_data_built_otherwise_from_unchanged_files_says_the_code_changed_not_a_file(tmp_path, main_cli):
    """A csv_series run trained before its look-ahead labels were purged was refused on resume with "was a data file
    changed?" though every file's sha256 matched: the library builds the data otherwise now (simulated here by a
    record of other split sizes), and the line says so."""
    train_text_run(tmp_path, main_cli)
    record = tmp_path / "run" / "data.json"
    values = json.loads(record.read_text())
    values["sizes"]["train"] += 1
    record.write_text(json.dumps(values))
    line = one_line_error(main_cli("train", "--resume", "run", "trainer.max_steps=4"), "data.json", "sizes.train",
                          "its files are unchanged (sha256)", "builds that data otherwise", "init_from='run'")
    assert "was a data file changed?" not in line


@pytest.mark.parametrize("relative", [True, False])
def test_eval_of_a_file_that_is_not_a_run_or_checkpoint_names_that_file(tmp_path, main_cli, relative):
    (tmp_path / "small.txt").write_text("a few words\n")
    given = "small.txt" if relative else str(tmp_path / "small.txt")
    line = one_line_error(main_cli("eval", given), f"{given}: not a run directory or checkpoint")
    assert "config.yaml" not in line, line


def test_eval_of_a_file_of_a_run_that_is_no_checkpoint_names_the_run(tmp_path, main_cli, tiny_config):
    """RUN/model/model.safetensors was read as a checkpoint (its run two folders up): 'cannot read it (... is not
    a markovformer checkpoint (a safetensors file without 'markovformer_checkpoint'))'; RUN/config.yaml was sought
    a run two folders up from. Each now names the run to give."""
    assert main_cli("train", str(tiny_config), "output_dir=run", "trainer.max_steps=2").returncode == 0
    for given in ("run/model/model.safetensors", "run/config.yaml"):
        line = one_line_error(main_cli("eval", given), f"{given}: not a run directory or checkpoint",
                              "it is a file of the run run: give that")  # fmt: skip
        assert "markovformer_checkpoint" not in line, line


def test_eval_of_a_checkpoint_outside_a_run_directory_names_it(tmp_path, main_cli):
    (tmp_path / "stray.ckpt").write_bytes(b"\0" * 16)
    one_line_error(main_cli("eval", "stray.ckpt"), "stray.ckpt: ", "not a checkpoint of a run directory")


def test_resuming_a_run_stopped_before_its_config_was_written_says_to_start_it_again(tmp_path, cli, main_cli,
                                                                                      tiny_config):  # fmt: skip
    """A run killed while it wrote its start files (before config.yaml) left its lock and environment.json; --resume
    said only "not a run directory (no config.yaml)", as of any other folder. It now says the run is to be started
    again, as `train` then does in the same folder."""
    from markovformer.atomic import KILL_AT_WRITE

    killed = cli("train", str(tiny_config), "output_dir=run", env={KILL_AT_WRITE: "2"})  # at data.json
    assert killed.returncode == -9 and (tmp_path / "run" / "environment.json").is_file(), killed.stderr[-2000:]
    one_line_error(main_cli("train", "--resume", "run"), "run: not a run directory (no config.yaml)",
                   "stopped before it wrote its config", "markovformer train CONFIG output_dir=run")  # fmt: skip
    assert main_cli("train", str(tiny_config), "output_dir=run").returncode == 0
    (tmp_path / "other").mkdir()
    line = one_line_error(main_cli("train", "--resume", "other"), "other: not a run directory (no config.yaml)")
    assert "stopped before" not in line


@pytest.mark.parametrize("text", ["{not json", "[]"], ids=["not-json", "a-list"])
def test_an_experiments_finished_run_with_a_damaged_metrics_record_names_it(tmp_path, text):
    """complete_run (each experiment cell's run) reads a finished run's metrics.json as inspect and eval do
    (``read_final_metrics``): '{not json' was a JSONDecodeError naming no file, a list was handed back as the run's
    results."""
    from conftest import TINY_RUN

    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import complete_run
    from markovformer.training.trainer_config import ConfigError

    run = tmp_path / "run"
    run.mkdir()
    (run / "finished.json").write_text(json.dumps({"steps": 4}))
    (run / "metrics.json").write_text(text)
    with pytest.raises(ConfigError, match=f"{run / 'metrics.json'}: not a run's metrics record"):
        complete_run(resolve_run_config({**TINY_RUN, "output_dir": str(run)}))


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads every file: no read is denied")
def test_a_checkpoint_the_user_may_not_read_is_said_to_be_unreadable_not_missing(tmp_path, main_cli, tiny_config):
    """`eval RUN/checkpoints/last.ckpt` of a checkpoint of mode 000 said "cannot read it (No such file or directory:
    ...)", and `--resume RUN` "cannot resume from last.ckpt (No such file or directory: ...); copy an earlier
    checkpoint over it": safetensors' safe_open says so of a file it may not read. The readers now let the file's own
    denial through, and the line names the file as unreadable, as of any other denied read."""
    from markovformer.training.checkpoint import load_checkpoint_file, read_checkpoint_skeleton

    assert main_cli("train", str(tiny_config), "output_dir=run", "trainer.max_steps=2").returncode == 0
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    checkpoint.chmod(0o000)
    try:
        for read in (load_checkpoint_file, read_checkpoint_skeleton):
            with pytest.raises(PermissionError) as raised:
                read(checkpoint)
            assert raised.value.filename == str(checkpoint), raised.value
        for command in (("eval", "run/checkpoints/last.ckpt"), ("train", "--resume", "run", "trainer.max_steps=4")):
            line = one_line_error(main_cli(*command))
            assert line == "markovformer: error: cannot read run/checkpoints/last.ckpt: permission denied", line
    finally:
        checkpoint.chmod(0o644)

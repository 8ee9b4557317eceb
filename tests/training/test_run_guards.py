"""Runs that never lie (issue 27): the lock and the new-run guard against changed data, inherited rank variables
and links, weight checks without holes (fingerprints, non-finite weights, strict JSON), loud divergence and a full
disk that leaves a resumable run."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import one_line_error  # beside this folder
from run_commands import ENV, config_file, run, run_process

from markovformer.strict_json import strict_json
from markovformer.training.checkpoint import load_checkpoint_file, save_checkpoint_file
from markovformer.training.run_dir import write_json
from markovformer.training.runner import evaluate

# -------------------------------------------------------------------------------- the lock and new-run guard


def test_resuming_after_the_data_file_changed_is_refused_naming_what_changed(tmp_path):
    """The same path with other text of the same length and alphabet (a rotation) resumed silently, mixing two
    corpora in one run; the rebuilt data's record is compared with data.json's."""
    text = "".join(f"line {i} of the notes, words and more words\n" for i in range(300))
    (tmp_path / "notes.txt").write_text(text)
    values = {"task": "causal_lm", "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "text", "tokenizer": "char", "seq_len": 16, "path": "notes.txt"},
              "trainer": {"max_steps": 2, "batch_size": 8, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                          "log_every": 1, "eval_batch_size": 8, "logger": "csv"}}  # fmt: skip
    config = config_file(tmp_path, values)
    assert run("train", str(config), "output_dir=run", cwd=tmp_path).returncode == 0
    (tmp_path / "notes.txt").write_text(text[5000:] + text[:5000])
    one_line_error(run("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path),
                   str((tmp_path / "notes.txt").resolve()), "changed since the run started", "sha256", "data.json")
    (tmp_path / "notes.txt").write_text(text)  # restored: the same tokens, though its mtime (in the store's key) is new
    assert run("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path).returncode == 0


@pytest.mark.slow  # three processes of DDP start-up: ~80 s beside other work
def test_a_refused_resume_stops_every_process_of_a_multi_process_run(tmp_path):
    """Two ranks started as torchrun starts them (its variables; without its agent, which would kill the survivor
    as srun does not): a resume after the data file changed is refused by both, each on its own line and exit 2.
    Before, only the writer checked the data; the other rank waited for it in DDP's rendezvous until its timeout."""
    import socket

    text = "".join(f"line {i} of the notes, words and more words\n" for i in range(300))
    (tmp_path / "notes.txt").write_text(text)
    values = {"task": "causal_lm", "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "text", "tokenizer": "char", "seq_len": 16, "path": "notes.txt"},
              "trainer": {"max_steps": 2, "batch_size": 8, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                          "log_every": 1, "eval_batch_size": 8, "logger": "csv", "devices": 2,
                          "strategy": "ddp"}}  # fmt: skip
    config = config_file(tmp_path, values)
    trained = run_process("train", str(config), "output_dir=run", cwd=tmp_path)  # Lightning starts the second rank
    assert trained.returncode == 0, trained.stderr[-3000:]
    (tmp_path / "notes.txt").write_text(text[5000:] + text[:5000])
    with socket.socket() as probe:  # a free port for the rendezvous rank 0 would host
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    launch = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
              "GROUP_RANK": "0", "NODE_RANK": "0", "TORCHELASTIC_RUN_ID": "resume-refused"}  # fmt: skip
    command = [sys.executable, "-m", "markovformer", "train", "--resume", "run", "trainer.max_steps=4"]
    ranks = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**ENV, **launch, "RANK": str(rank), "LOCAL_RANK": str(rank)})
             for rank in range(2)]  # fmt: skip
    try:
        for rank in ranks:
            _, stderr = rank.communicate(timeout=180)
            one_line_error(subprocess.CompletedProcess(command, rank.returncode, "", stderr),
                           "changed since the run started")  # fmt: skip
    finally:
        for rank in ranks:
            rank.kill()


def test_a_new_run_replaces_the_start_files_a_killed_start_left(tmp_path):
    """A start killed before config.yaml leaves data.json and tokenizer/; a new `train` of another text into that
    folder kept them, so the run trained on text B while its tokenizer (same size: no error anywhere) decoded A's
    characters for eval and generate. They are written afresh, as a fresh folder's."""
    import shutil

    words = "the cat sat on a mat and ran to see the dog".split()
    text_a = "\n".join(" ".join(words[(i * 7 + j) % len(words)] for j in range(8)) for i in range(300)) + "\n"
    text_b = text_a.translate(str.maketrans("abcdefghijklmnopqrstuvwxyz", "nopqrstuvwxyzabcdefghijklm"))
    for name, text in (("a.txt", text_a), ("b.txt", text_b)):
        (tmp_path / name).write_text(text)
    values = {"task": "causal_lm", "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "text", "tokenizer": "char", "seq_len": 16},
              "trainer": {"max_steps": 2, "batch_size": 8, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                          "log_every": 1, "eval_batch_size": 8, "logger": "csv"}}  # fmt: skip
    config = config_file(tmp_path, values)
    for name, text in (("started", "a.txt"), ("fresh", "b.txt")):
        assert run("train", str(config), f"output_dir={name}", f"data.path={text}", cwd=tmp_path).returncode == 0
    (tmp_path / "killed").mkdir()
    for name in ("environment.json", "data.json", "tokenizer"):  # what a start killed at config.yaml leaves
        copy = shutil.copytree if name == "tokenizer" else shutil.copy
        copy(tmp_path / "started" / name, tmp_path / "killed" / name)
    assert run("train", str(config), "output_dir=killed", "data.path=b.txt", cwd=tmp_path).returncode == 0
    for name in ("data.json", "tokenizer/tokenizer.json"):
        fresh, killed = (json.loads((tmp_path / run_dir / name).read_text()) for run_dir in ("fresh", "killed"))
        assert killed == fresh, name


@pytest.mark.parametrize("kept_beside", [[], ["notes.txt"]])
def test_a_new_run_without_a_tokenizer_removes_the_one_a_killed_start_left(tmp_path, kept_beside):
    """A text run's start killed before config.yaml left tokenizer/; a new run of data with no tokenizer (a Markov
    chain) in that folder removes its tokenizer.json, which eval and generate would read as the run's (the folder
    too, unless something else is in it); a resume of such a run keeps what it finds."""
    from markovformer.data.bundle import DataBundle
    from markovformer.training.run_dir import write_start_files

    example = {"input_ids": torch.arange(4), "labels": torch.arange(4)}
    bundle = DataBundle(train=[example] * 4, val=[example], test=[example], info={"vocab_size": 4})
    folder = tmp_path / "tokenizer"
    for name in ("tokenizer.json", *kept_beside):
        (tmp_path / "tokenizer").mkdir(exist_ok=True)
        (folder / name).write_text("{}")
    write_start_files(tmp_path, bundle, keep_existing=True)
    assert (folder / "tokenizer.json").is_file()
    write_start_files(tmp_path, bundle, keep_existing=False)
    assert not (folder / "tokenizer.json").exists()
    assert sorted(path.name for path in folder.iterdir()) == kept_beside if kept_beside else not folder.exists()
    assert json.loads((tmp_path / "data.json").read_text())["sizes"] == {"train": 4, "val": 1, "test": 1}


def test_an_inherited_rank_variable_neither_skips_the_lock_nor_the_new_run_guard(tiny_config, tmp_path):
    """A SLURM sweep of single-process jobs inherits SLURM_PROCID/RANK/LOCAL_RANK: a second `train` into a finished
    run is still refused and the run untouched (on main the guard was skipped and the run overwritten)."""
    assert run("train", str(tiny_config), "output_dir=run", "trainer.max_steps=10", cwd=tmp_path).returncode == 0
    before = (tmp_path / "run" / "model" / "model.safetensors").read_bytes()
    inherited = {"RANK": "1", "LOCAL_RANK": "1", "SLURM_PROCID": "3", "NODE_RANK": "1"}
    # its own process: Lightning reads the rank variables when it is imported
    again = run_process("train", str(tiny_config), "output_dir=run", "trainer.seed=5", cwd=tmp_path, env=inherited)
    one_line_error(again, "already holds a run")
    assert (tmp_path / "run" / "model" / "model.safetensors").read_bytes() == before


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(tiny_config, tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock").symlink_to(victim)
    one_line_error(run("train", str(tiny_config), "output_dir=run", cwd=tmp_path), ".lock", "symbolic link")
    (tmp_path / "run2").mkdir()
    os.link(victim, tmp_path / "run2" / ".lock")
    one_line_error(run("train", str(tiny_config), "output_dir=run2", cwd=tmp_path), ".lock", "hard link")
    assert victim.read_text() == "keep me\n"


# ---------------------------------------------------------------------------------------- weight checks


def test_the_fingerprint_covers_the_model_config_and_is_required(tiny_config, tmp_path):
    """Editing model/config.json (a different model over the same weights) or deleting model/fingerprint.json makes
    eval refuse the run in one line (on main both were scored, exit 0)."""
    import shutil

    assert run("train", str(tiny_config), "output_dir=run", "trainer.max_steps=10", cwd=tmp_path).returncode == 0
    edited = tmp_path / "edited"
    shutil.copytree(tmp_path / "run", edited)
    values = json.loads((edited / "model" / "config.json").read_text())
    values["position"] = "learned" if values.get("position") != "learned" else "rotary"
    (edited / "model" / "config.json").write_text(json.dumps(values))
    one_line_error(run("eval", str(edited), cwd=tmp_path), "config.json", "does not match")
    bare = tmp_path / "bare"
    shutil.copytree(tmp_path / "run", bare)
    (bare / "model" / "fingerprint.json").unlink()
    one_line_error(run("eval", str(bare), cwd=tmp_path), "fingerprint.json is missing")
    # a run written before fingerprints and finished.json existed still loads by names, shapes and dtypes
    legacy = tmp_path / "legacy"
    shutil.copytree(bare, legacy)
    environment = json.loads((legacy / "environment.json").read_text())
    environment.pop("run_format")
    (legacy / "environment.json").write_text(json.dumps(environment))
    (legacy / "finished.json").unlink()
    assert evaluate(legacy)["metrics"]["loss"] == pytest.approx(evaluate(tmp_path / "run")["metrics"]["loss"])


# ------------------------------------------------------------------------------------------------- divergence


def test_a_diverging_run_stops_in_one_line_keeps_its_last_finite_checkpoint_and_resumes_with_a_lower_lr(
    tiny_config, tmp_path
):
    """trainer.lr=1e6 (on main: trained to the end, exit 0, all-NaN weights, bare NaN in metrics.json); without
    weight decay, which lr * weight_decay >= 1 would make the culprit (refused up front: check_weight_decay)."""
    diverge = ["trainer.lr=1e6", "trainer.warmup_steps=0", "trainer.gradient_clip=0", "trainer.weight_decay=0"]
    # checkpoints every step: every step before the divergence is kept, all finite, none after it
    done = run("train", str(tiny_config), "output_dir=each", *diverge, "trainer.checkpoint_every=1", cwd=tmp_path)
    line = one_line_error(done, "training diverged at step", "trainer.lr=1e+06", "--resume", status=1)
    step = int(line.split("at step ")[1].split(":")[0])
    assert f"its last checkpoint, step-{step - 1:06d}.ckpt, is whole" in line
    assert not (tmp_path / "each" / "metrics.json").exists() and not (tmp_path / "each" / "model").exists()
    saved = sorted((tmp_path / "each" / "checkpoints").glob("step-*.ckpt"))
    assert [path.name for path in saved] == [f"step-{n:06d}.ckpt" for n in range(1, step)]
    for path in saved:
        checkpoint = load_checkpoint_file(path)
        assert checkpoint["global_step"] < step
        assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values() if t.is_floating_point())
    again = run("train", "--resume", "each", "trainer.lr=3e-3", cwd=tmp_path)
    assert f"(step {step - 1})" in again.stdout  # it continues from the last finite checkpoint
    # (whose weights one step at lr 1e6 has wrecked: that resume may diverge again, and says so in one line)
    assert again.returncode == 0 or "training diverged at step" in again.stderr, again.stderr[-2000:]
    # before any checkpoint: the run is resumed from step 0 with the lower rate and finishes beating uniform
    done = run("train", str(tiny_config), "output_dir=run", *diverge, cwd=tmp_path)
    one_line_error(done, "training diverged at step", "it has no checkpoint yet", "--resume", status=1)
    resumed = run("train", "--resume", "run", "trainer.lr=3e-3", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "starting from step 0" in resumed.stdout
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["val"]["loss"] < math.log(4)  # beats uniform


def test_metrics_files_are_strict_json_and_non_finite_weights_are_refused_by_eval(tiny_config, tmp_path):
    path = tmp_path / "metrics.json"
    write_json(path, {"val": {"loss": float("nan"), "bleu": float("inf"), "ok": 1.5}, "list": [float("-inf")]})
    assert json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(name)) == {
        "val": {"loss": None, "bleu": None, "ok": 1.5}, "list": [None]}  # fmt: skip
    assert strict_json((1.0, float("nan"))) == [1.0, None]
    assert run("train", str(tiny_config), "output_dir=run", "trainer.max_steps=10", cwd=tmp_path).returncode == 0
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    checkpoint = load_checkpoint_file(last)
    name = next(k for k, v in checkpoint["state_dict"].items() if v.is_floating_point())
    checkpoint["state_dict"][name] = torch.full_like(checkpoint["state_dict"][name], float("nan"))
    save_checkpoint_file(checkpoint, last)
    one_line_error(run("eval", str(last), cwd=tmp_path), "non-finite weights", name.removeprefix("model."))


def test_a_full_disk_while_writing_the_final_files_leaves_an_unfinished_resumable_run(tmp_path, monkeypatch):
    """safetensors reports ENOSPC as its own error type (a traceback on main): now an OSError naming the disk and
    saying the run is not finished; no finished.json, metrics.json or fingerprint is written after the failure."""
    from safetensors import SafetensorError

    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
    from markovformer.training.run_dir import finished_steps, write_final_files

    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=5, d_model=8, n_layers=1, n_heads=2))

    def full_disk(directory):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No "
                              "space left on device\" }) (os error 28)")  # fmt: skip

    monkeypatch.setattr(model, "save_pretrained", full_disk)
    (tmp_path / "finished.json").write_text('{"steps": 5}')  # an extension of a finished run
    with pytest.raises(OSError) as raised:
        write_final_files(tmp_path, model, "fingerprint", {"steps": 10, "val": {"loss": 1.0}})
    assert raised.value.errno == 28 and "not finished" in str(raised.value)
    assert f"with resume({str(tmp_path)!r})" in str(raised.value)  # from Python: the call, not --resume
    assert finished_steps(tmp_path) is None
    assert not (tmp_path / "metrics.json").exists() and not (tmp_path / "model" / "fingerprint.json").exists()


def test_a_full_disk_says_to_resume_only_a_run_that_can_be_resumed(tiny_config, tmp_path, monkeypatch):
    """Every full disk said "continue with --resume": at the start of a run too, where --resume then refused ("a run
    started here stopped before it wrote its config, so there is nothing to resume"). Before config.yaml the
    command is to be run again; from config.yaml on, the run named is to be resumed, which finishes it."""
    import errno

    from markovformer.training import run_dir as run_dir_module

    real_write_json = run_dir_module.write_json

    def full_disk_at(name):
        def write_json(path, values):
            if path.name == name:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            real_write_json(path, values)

        return write_json

    command = ("train", str(tiny_config), "output_dir=run", "trainer.max_steps=4")
    monkeypatch.setattr(run_dir_module, "write_json", full_disk_at("data.json"))
    line = one_line_error(run(*command, cwd=tmp_path), "no space left", "data.json", "run the command again")
    assert "--resume" not in line
    monkeypatch.setattr(run_dir_module, "write_json", full_disk_at("finished.json"))
    one_line_error(run(*command, cwd=tmp_path), "no space left", "finished.json", "--resume run")
    monkeypatch.undo()
    assert run("train", "--resume", "run", cwd=tmp_path).returncode == 0
    assert json.loads((tmp_path / "run" / "finished.json").read_text()) == {"steps": 4}

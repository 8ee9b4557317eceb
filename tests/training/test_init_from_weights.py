"""init_from and generate name the weights they took, and a fine-tuning run records them."""

import hashlib
import json

import torch
import yaml
from conftest import TINY_RUN, run_in_process


def test_init_from_a_run_names_which_weights_it_took(tmp_path):
    """init_from=RUN takes the final model/ of a finished run, else its newest checkpoint (a run still training or
    killed), and printed only "initialised from RUN: 15 of 15 tensors" either way: a fine-tuning could not tell the
    final weights from a checkpoint's. The line now names them and their step, and they are the ones loaded."""
    from markovformer.training.init_from import initialise_from, initialised_line
    from markovformer.training.run_dir import load_run, mark_unfinished
    from markovformer.training.runner import build_model

    trainer = {**TINY_RUN["trainer"], "max_steps": 4, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 3}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer}))
    assert run_in_process("train", "tiny.yaml", "output_dir=run", cwd=tmp_path).returncode == 0
    run = tmp_path / "run"
    config, final, _ = load_run(run)
    fresh = build_model(config, {"vocab_size": final.config.vocab_size})
    line = initialised_line(initialise_from(fresh, run, []))
    assert "(final model, step 4)" in line, line
    finished = run_in_process("generate", "run", "--prompt", "", "--max-new-tokens", "3", cwd=tmp_path)
    assert finished.returncode == 0 and "generating with" not in finished.stderr, finished.stderr
    mark_unfinished(run)  # a resume under way, or killed: model/ no longer stands, checkpoints/ does
    _, newest, _ = load_run(run / "checkpoints" / "step-000003.ckpt")
    record = initialise_from(fresh, run, [])
    line = initialised_line(record)
    assert "(checkpoints/last.ckpt at step 3: the run is unfinished)" in line, line
    assert (record["file"], record["step"]) == (str((run / "checkpoints" / "last.ckpt").resolve()), 3)
    sampled = run_in_process("generate", "run", "--prompt", "", "--max-new-tokens", "3", cwd=tmp_path)  # it was silent
    assert "generating with checkpoints/last.ckpt at step 3: the run is unfinished" in sampled.stderr, sampled.stderr
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in newest.state_dict().items())


def tensors_sha256(tensors: dict) -> str:
    """The digest the record promises, written out: per tensor in name order, its [name, dtype, shape] as JSON, then
    its bytes."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name]
        digest.update(json.dumps([name, str(tensor.dtype), list(tensor.shape)]).encode())
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def test_a_fine_tuning_run_records_which_weights_it_took_after_its_source_is_extended(tmp_path):
    """A fine-tuning run's config.yaml named its source run (init_from) and nothing more: extended later (--resume
    trainer.max_steps=...), the source held other weights under the same name, and the fine-tuning's record no longer
    told what it started from. environment.json records the source as given and resolved, the file read and its step,
    the digest of the tensors taken, and how many were taken and left fresh."""
    from markovformer.training.run_dir import load_run

    trainer = {**TINY_RUN["trainer"], "max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer}))
    assert run_in_process("train", "tiny.yaml", "output_dir=parent", cwd=tmp_path).returncode == 0
    earlier = load_run(tmp_path / "parent")[1].state_dict()
    tuned = run_in_process("train", "tiny.yaml", "output_dir=tuned", "init_from=parent", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    extended = run_in_process("train", "--resume", "parent", "trainer.max_steps=4", cwd=tmp_path)
    assert extended.returncode == 0, extended.stderr
    later = load_run(tmp_path / "parent")[1].state_dict()
    record = json.loads((tmp_path / "tuned" / "environment.json").read_text())["init_from"]
    parent = (tmp_path / "parent").resolve()
    assert record["tensors_sha256"] == tensors_sha256(earlier) != tensors_sha256(later)
    assert (record["source"], record["resolved"]) == ("parent", str(parent))
    assert (record["file"], record["step"], record["read"]) == (str(parent / "model" / "model.safetensors"), 2,
                                                                 "final model, step 2")  # fmt: skip
    assert (record["tensors_taken"], record["tensors_fresh"], record["init_from_skip"]) == (len(earlier), 0, [])


def test_a_resumed_fine_tuning_run_keeps_its_record_unless_it_takes_its_source_again(tmp_path, cli):
    """A resume continues from the fine-tuning run's own checkpoint and reads nothing of its source: the record stays
    the start's, though the source was extended meanwhile. A fine-tuning run killed before its first checkpoint is
    resumed from step 0 and takes the source's weights again, the extended ones: its record kept the weights of the
    killed start, which no step of the run was trained from; it now names those taken again."""
    from markovformer.atomic import KILL_AT_WRITE
    from markovformer.training.run_dir import load_run

    trainer = {**TINY_RUN["trainer"], "max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer}))
    assert run_in_process("train", "tiny.yaml", "output_dir=parent", cwd=tmp_path).returncode == 0
    assert run_in_process("train", "tiny.yaml", "output_dir=tuned", "init_from=parent", cwd=tmp_path).returncode == 0
    # killed at its first write after config.yaml (environment.json, data.json, config.yaml): no checkpoint yet
    killed = cli("train", "tiny.yaml", "output_dir=early", "init_from=parent", env={KILL_AT_WRITE: "4"})
    assert killed.returncode == -9 and (tmp_path / "early" / "config.yaml").is_file(), killed.stderr[-2000:]
    assert not list((tmp_path / "early").glob("checkpoints/*.ckpt"))
    started = {run: json.loads((tmp_path / run / "environment.json").read_text())["init_from"]
               for run in ("tuned", "early")}  # fmt: skip
    assert run_in_process("train", "--resume", "parent", "trainer.max_steps=4", cwd=tmp_path).returncode == 0
    extended = tensors_sha256(load_run(tmp_path / "parent")[1].state_dict())
    resumed = run_in_process("train", "--resume", "tuned", "trainer.max_steps=4", cwd=tmp_path)
    assert resumed.returncode == 0 and "initialised from" not in resumed.stdout, resumed.stderr
    assert json.loads((tmp_path / "tuned" / "environment.json").read_text())["init_from"] == started["tuned"]
    resumed = run_in_process("train", "--resume", "early", cwd=tmp_path)
    assert resumed.returncode == 0 and "parent (final model, step 4)" in resumed.stdout
    record = json.loads((tmp_path / "early" / "environment.json").read_text())["init_from"]
    assert (record["step"], record["tensors_sha256"]) == (4, extended) != (2, started["early"]["tensors_sha256"])


def test_eval_of_a_fine_tuning_run_names_the_weights_it_started_from_as_inspect_does(tmp_path):
    """`markovformer eval TUNED` named the weights it scored ("final model, step 2") and nothing of the weights the
    run started from, which inspect's summary names ("started from"). Its summary and --json now carry that row, in
    the words of the one function inspect uses; a run that started fresh has none."""
    from markovformer.training.init_from import started_from_line

    trainer = {**TINY_RUN["trainer"], "max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer}))
    assert run_in_process("train", "tiny.yaml", "output_dir=parent", cwd=tmp_path).returncode == 0
    assert run_in_process("train", "tiny.yaml", "output_dir=tuned", "init_from=parent", cwd=tmp_path).returncode == 0
    record = json.loads((tmp_path / "tuned" / "environment.json").read_text())["init_from"]
    shown = run_in_process("eval", "tuned", cwd=tmp_path)
    row = f"started from {(tmp_path / 'parent').resolve()} at step 2, tensors sha256 {record['tensors_sha256']}"
    assert shown.returncode == 0 and f"\n  {row}\n" in shown.stdout, shown.stdout + shown.stderr
    assert row == f"started from {started_from_line(record)}"
    assert json.loads(run_in_process("eval", "tuned", "--json", cwd=tmp_path).stdout)["started_from"] == record
    fresh = run_in_process("eval", "parent", cwd=tmp_path).stdout
    assert "started from" not in fresh and "started_from" not in json.loads(
        run_in_process("eval", "parent", "--json", cwd=tmp_path).stdout)  # fmt: skip

"""The checkpoint a run resumes from: the newest whole one, also when a stop cut ``last.ckpt``'s write short or
``last.ckpt`` is gone."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import TINY_RUN, one_line_error, run_in_process, same_weights

from markovformer.training import checkpoint as checkpoint_module


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> tuple[Path, Path]:
    """The run's config (checkpoints every 10 steps, validations every 20) and one uninterrupted run of it."""
    folder = tmp_path_factory.mktemp("resume_point")
    config = folder / "run.yaml"
    config.write_text(yaml.safe_dump({**TINY_RUN, "trainer": {**TINY_RUN["trainer"], "max_steps": 40}}))
    done = run_in_process("train", str(config), "output_dir=whole", cwd=folder)
    assert done.returncode == 0, done.stderr
    return config, folder / "whole"


@pytest.mark.parametrize("last_deleted", [False, True])
def test_a_run_stopped_while_writing_last_ckpt_resumes_from_the_step_checkpoint_its_line_names(
    whole, tmp_path, monkeypatch, last_deleted
):
    """Ctrl-C while last.ckpt of step 30 was written, after step-000030.ckpt: the line said "its last checkpoint is
    step-000030.ckpt", but --resume read last.ckpt, of step 20 (and with last.ckpt deleted, started again from step
    0 saying "no checkpoint yet" beside three whole ones). It resumes from step 30 now, to the uninterrupted run."""
    config, uninterrupted = whole
    write = checkpoint_module.atomic_write

    def interrupted(path, writer):
        path = Path(path)
        if path.name == "last.ckpt" and (path.parent / "step-000030.ckpt").is_file():
            raise KeyboardInterrupt  # as a Ctrl-C landing inside the write
        return write(path, writer)

    monkeypatch.setattr(checkpoint_module, "atomic_write", interrupted)
    stopped = run_in_process("train", str(config), "output_dir=run", cwd=tmp_path)
    monkeypatch.setattr(checkpoint_module, "atomic_write", write)
    assert stopped.returncode == 130, stopped.stderr
    assert "its last checkpoint is step-000030.ckpt" in stopped.stderr
    if last_deleted:
        (tmp_path / "run" / "checkpoints" / "last.ckpt").unlink()
    resumed = run_in_process("train", "--resume", "run", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "step-000030.ckpt (step 30)" in resumed.stdout, resumed.stdout
    assert same_weights(tmp_path / "run", uninterrupted)
    final = [json.loads((run / "metrics.json").read_text())["val"] for run in (tmp_path / "run", uninterrupted)]
    assert final[0] == final[1]


@pytest.mark.parametrize(("section", "key", "value"), [
    ("trainer", "warmup_steps", 3), ("trainer", "batch_size", 4), ("trainer", "seed", 4),
    ("trainer", "early_stopping", {"monitor": "val/loss"}), ("data", "train_sequences", 256)])  # fmt: skip
def test_resuming_a_run_whose_config_yaml_was_edited_is_refused_naming_the_key(whole, tmp_path, section, key, value):
    """--resume refuses an override of trainer.warmup_steps or trainer.batch_size, but the same change made in the
    run's config.yaml was trained on silently: its learning rate jumped mid-run (warm-up 10 -> 20 at step 30 took it
    from 2.07e-3 to 2.53e-3), and config.yaml then told a schedule the run never had; an edited seed or data option
    was refused as "was a data file changed?". Checkpoints now record the settings they were trained with."""
    run = tmp_path / "run"
    shutil.copytree(whole[1], run)
    for name in ("finished.json", "metrics.json"):  # as if killed after its last checkpoint
        (run / name).unlink()
    config = yaml.safe_load((run / "config.yaml").read_text())
    config[section][key] = value
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    resumed = run_in_process("train", "--resume", "run", cwd=tmp_path)
    line = one_line_error(resumed, "last.ckpt does not match", "config.yaml was edited since", "restore it")
    assert f"{section}.{key}=" in line
    assert not (run / "finished.json").exists()


def _resume_to_60_steps(run, how: str, tmp_path) -> None:
    """Resume ``run`` (a folder of tmp_path) to 60 steps: by max_steps raised in its config.yaml by hand ("edited")
    or by the override on the command line ("override")."""
    if how == "edited":
        config = yaml.safe_load((run / "config.yaml").read_text())
        config["trainer"]["max_steps"] = 60
        (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    extra = ["trainer.max_steps=60"] if how == "override" else []
    resumed = run_in_process("train", "--resume", run.name, *extra, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]


@pytest.mark.parametrize("finished", [True, False])
def test_a_max_steps_raised_in_config_yaml_extends_the_run_as_the_resume_override_does(whole, tmp_path, finished):
    """trainer.max_steps may change at --resume, so raising it in config.yaml by hand was not refused, but it was not
    treated as the override either: a killed run's learning rate decayed over the new length from then on (it
    jumped at the resumed step; config.yaml then told a decay its first steps never had), and a finished run was
    refused as ended by early stopping ("step 40 of 60"). It is now the override: same schedule, same weights."""
    runs = {}
    for how in ("edited", "override"):
        run = runs[how] = tmp_path / how
        shutil.copytree(whole[1], run)
        if not finished:  # as if killed after its last checkpoint
            for name in ("finished.json", "metrics.json"):
                (run / name).unlink()
        _resume_to_60_steps(run, how, tmp_path)
    assert same_weights(runs["edited"], runs["override"])
    rates = [[row for row in (runs[how] / "logs" / "metrics.csv").read_text().splitlines() if "lr-" in row]
             for how in ("edited", "override")]  # fmt: skip
    assert rates[0] == rates[1]
    configs = [{**yaml.safe_load((runs[how] / "config.yaml").read_text()), "output_dir": None}
               for how in ("edited", "override")]  # fmt: skip
    assert configs[0] == configs[1] and configs[0]["trainer"]["decay_steps"] == 40  # the decay its steps followed


def test_eval_of_an_unfinished_run_reads_the_checkpoint_a_resume_would_take(whole, tmp_path):
    """eval, generate and inspect of a run directory read last.ckpt: a run stopped while last.ckpt was written (one
    checkpoint back) was scored at the older step, and one whose last.ckpt is gone was refused as holding no
    checkpoint, where --resume takes the newest step checkpoint. They read the same one now."""
    from markovformer.training.runner import evaluate

    run = tmp_path / "run"
    shutil.copytree(whole[1], run)
    shutil.rmtree(run / "model")
    for name in ("finished.json", "metrics.json"):
        (run / name).unlink()
    checkpoints = run / "checkpoints"
    shutil.copy(checkpoints / "step-000030.ckpt", checkpoints / "last.ckpt")  # one checkpoint back
    assert evaluate(run)["weights"]["source"] == "checkpoints/step-000040.ckpt"
    (checkpoints / "last.ckpt").unlink()
    weights = evaluate(run)["weights"]
    assert (weights["source"], weights["step"]) == ("checkpoints/step-000040.ckpt", 40)


def test_a_max_steps_raised_in_config_yaml_extends_a_run_whose_checkpoints_predate_the_settings_record(
    whole, tmp_path
):
    """A finished run written before checkpoints recorded their settings (markovformer before 80fc87e), with
    max_steps raised in config.yaml by hand (no early stopping configured), was refused as "early stopping ended it
    at step 40 of 60", pointing at init_from. Without early stopping a run ends at its max_steps, so the raise is an
    extension: the same weights and schedule as `--resume RUN trainer.max_steps=60`."""
    from markovformer.training.checkpoint import load_checkpoint_file, save_checkpoint_file
    from markovformer.training.fingerprint import SETTINGS_KEY

    runs = {}
    for how in ("edited", "override"):
        run = runs[how] = tmp_path / how
        shutil.copytree(whole[1], run)
        for path in (run / "checkpoints").glob("*.ckpt"):  # as an older version wrote them
            checkpoint = load_checkpoint_file(path)
            del checkpoint[SETTINGS_KEY]
            save_checkpoint_file(checkpoint, path)
        _resume_to_60_steps(run, how, tmp_path)
    assert same_weights(runs["edited"], runs["override"])
    assert json.loads((runs["edited"] / "finished.json").read_text())["steps"] == 60
    assert yaml.safe_load((runs["edited"] / "config.yaml").read_text())["trainer"]["decay_steps"] == 40


def test_resuming_a_run_whose_last_checkpoint_is_damaged_names_the_newest_intact_step_checkpoint(whole, tmp_path):
    """--resume of a run whose last.ckpt was cut short said "copy an earlier checkpoints/step-*.ckpt over it" without
    naming which (the newest may be damaged too), where init_from and eval named the newest intact one. It names it
    now, as they do, and following the advice resumes to the uninterrupted run's weights."""
    config, uninterrupted = whole
    run = tmp_path / "run"
    shutil.copytree(uninterrupted, run)
    shutil.rmtree(run / "model")
    for name in ("finished.json", "metrics.json"):  # as if killed after its last checkpoint
        (run / name).unlink()
    checkpoints = run / "checkpoints"
    for name in ("last.ckpt", "step-000040.ckpt"):
        (checkpoints / name).write_bytes((checkpoints / name).read_bytes()[:3000])
    line = one_line_error(run_in_process("train", "--resume", "run", cwd=tmp_path),
                          "run/checkpoints/last.ckpt: cannot read it (")  # fmt: skip
    assert line.endswith("; the run's newest intact checkpoint is run/checkpoints/step-000030.ckpt (step 30): copy "
                         "that over last.ckpt to resume from it"), line
    shutil.copy(checkpoints / "step-000030.ckpt", checkpoints / "last.ckpt")
    resumed = run_in_process("train", "--resume", "run", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert same_weights(run, uninterrupted)

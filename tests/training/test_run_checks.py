"""The checkpoint a run resumes from: the newest whole one, also when a stop cut ``last.ckpt``'s write short or
``last.ckpt`` is gone."""

import json
from pathlib import Path

import pytest
import yaml
from conftest import TINY_RUN, run_in_process, same_weights

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

"""A GPU accelerator that this torch cannot use, or several nodes without a multi-node launch, are refused on one
line before any work, saying how to get one. What a run records names the code's commit, and only a checkout's."""

from __future__ import annotations

import os

import pytest
import torch

from markovformer.cli.main import main
from markovformer.training.environment import (
    check_accelerator,
    check_cores,
    check_nodes,
    check_precision,
    usable_cores,
)

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


@cpu_only
@pytest.mark.parametrize("accelerator", ["gpu", "cuda", "GPU"])
def test_a_gpu_accelerator_without_a_usable_gpu_is_one_line_naming_the_fix(accelerator, monkeypatch):
    with pytest.raises(ValueError) as refused:
        check_accelerator(accelerator)
    message = str(refused.value)
    assert "\n" not in message and f"trainer.accelerator={accelerator!r}" in message
    assert "trainer.accelerator=cpu" in message
    if torch.version.cuda is None:
        assert "CPU-only build" in message and "make setup TORCH_INDEX=" in message and "--index-url" in message
    monkeypatch.setattr(torch.version, "cuda", "12.6")  # a CUDA build with no visible device says so instead
    with pytest.raises(ValueError, match="sees no GPU"):
        check_accelerator(accelerator)


def test_cpu_and_auto_pass():
    check_accelerator("cpu")
    check_accelerator("auto")


@cpu_only
def test_train_refuses_before_writing_anything(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", "trainer.accelerator=gpu", f"output_dir={run_dir}", "trainer.max_steps=2"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    fix = "TORCH_INDEX" if torch.version.cuda is None else "sees no GPU"  # a CPU build's fix, or a CUDA build's
    assert len(error) == 1 and fix in error[0] and "trainer.accelerator=cpu" in error[0]
    assert not run_dir.exists()


@cpu_only
def test_16_mixed_on_the_cpu_is_refused_in_one_line_before_writing_anything(tmp_path, capsys):
    """Lightning has no float16 autocast on the CPU: it trained bf16-mixed instead, saying so only in a warning,
    while config.yaml recorded 16-mixed (and the divergence guard skipped its gradient check, meant for fp16)."""
    for accelerator in ("cpu", "auto"):
        with pytest.raises(ValueError) as refused:
            check_precision("16-mixed", accelerator)
        message = str(refused.value)
        assert "\n" not in message and "trainer.precision='16-mixed'" in message and "bf16-mixed" in message
    for precision in ("32-true", "64-true", "bf16-mixed", "bf16-true"):
        check_precision(precision, "cpu")
    check_precision("16-mixed", "gpu")  # check_accelerator refuses a GPU this machine lacks
    run_dir = tmp_path / "run"
    assert main(["train", "trainer.precision=16-mixed", f"output_dir={run_dir}", "trainer.max_steps=2"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "trainer.precision='16-mixed' needs a GPU" in error[0]
    assert not run_dir.exists()


LAUNCH_VARIABLES = ("SLURM_NNODES", "SLURM_JOB_NUM_NODES", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR")


def test_several_nodes_need_a_multi_node_launch(monkeypatch):
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    check_nodes(1)
    one_machine = [{}, {"SLURM_NNODES": "1"}, {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}, {"NODE_RANK": "0"}]
    several = [{"SLURM_NNODES": "2"}, {"SLURM_JOB_NUM_NODES": "4"}, {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"},
               {"NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1"}]  # fmt: skip
    for environment in one_machine + several:
        with monkeypatch.context() as patched:
            for name, value in environment.items():
                patched.setenv(name, value)
            if environment in several:
                check_nodes(2)
                continue
            with pytest.raises(ValueError) as refused:
                check_nodes(2)
            message = str(refused.value)
            assert "\n" not in message and message.startswith("trainer.num_nodes=2 needs a multi-node launch")
            assert "torchrun --nnodes=2" in message and "trainer.num_nodes=1" in message


def test_train_refuses_several_nodes_on_one_machine_before_writing_anything(tmp_path, capsys, monkeypatch):
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    run_dir = tmp_path / "run"
    assert main(["train", "trainer.num_nodes=2", f"output_dir={run_dir}", "trainer.max_steps=2"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "trainer.num_nodes=2 needs a multi-node launch" in error[0]
    assert not run_dir.exists()


@pytest.mark.parametrize("key", ["num_workers", "threads"])
def test_more_workers_or_threads_than_usable_cores_are_refused_before_writing_anything(tmp_path, capsys, key):
    """trainer.num_workers=1000 on 2 cores forked 1000 workers per loader: the command was killed (exit 137) after
    its first step and left the workers running without it, 14 GB of them, config.yaml and logs/ half-written.
    trainer.threads=1000 trained the tiny run at 51 tokens/s where the default 2 threads ran 3,525: more intra-op
    threads than cores only contend (the default is capped there for that reason)."""
    cores = usable_cores()
    assert cores == len(os.sched_getaffinity(0))
    check_cores(**{key: cores})
    with pytest.raises(ValueError, match=rf"^trainer.{key}={cores + 1} is more than the {cores} CPU cores"):
        check_cores(**{key: cores + 1})
    run_dir = tmp_path / "run"
    assert main(["train", f"trainer.{key}={cores + 1}", f"output_dir={run_dir}", "trainer.max_steps=2"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"give trainer.{key} <= {cores}" in error[0]
    assert not run_dir.exists()


def test_git_commit_names_a_checkouts_commit_marks_edits_and_ignores_an_installed_copy(tmp_path, monkeypatch):
    import shutil
    import subprocess

    import markovformer
    from markovformer.training.environment import git_commit

    if shutil.which("git") is None:
        pytest.skip("git is not installed")

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    package = tmp_path / "src" / "markovformer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    installed = tmp_path / ".venv" / "markovformer"  # a non-editable install inside the repository
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text(".venv/\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD").strip()

    def commit_of(init_file):
        monkeypatch.setattr(markovformer, "__file__", str(init_file))
        git_commit.cache_clear()
        return git_commit()

    try:
        assert commit_of(package / "__init__.py") == head
        assert commit_of(installed / "__init__.py") is None  # the repository's commit is not the copy's
        (package / "__init__.py").write_text("x = 2\n")
        assert commit_of(package / "__init__.py") == head + "+dirty"
    finally:
        git_commit.cache_clear()

"""A GPU accelerator that this torch cannot use, or several nodes without a multi-node launch, are refused on one
line before any work, saying how to get one."""

from __future__ import annotations

import pytest
import torch

from markovformer.cli.main import main
from markovformer.training.environment import check_accelerator, check_nodes

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
    assert len(error) == 1 and "TORCH_INDEX" in error[0]
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

"""A GPU accelerator that this torch cannot use is refused on one line, before any work, saying how to get one."""

from __future__ import annotations

import pytest
import torch

from markovformer.cli.main import main
from markovformer.training.environment import check_accelerator

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

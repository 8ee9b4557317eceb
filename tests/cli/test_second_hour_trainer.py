"""The second hour of a new user (issue 32): Lightning's habits (early stopping, gradient accumulation, the CSV logger,
the auto accelerator), trainer options checked where they are declared, and comparable numbers (the threads a run
trained with, the mean loss of an accumulated step's micro-batches)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from markovformer.training.trainer_config import ConfigError


def _tiny_values(tmp_path: Path, **trainer) -> dict:
    from conftest import TINY_RUN

    values = yaml.safe_load(yaml.safe_dump(TINY_RUN))
    values["trainer"].update({"max_steps": 12, "eval_every": 2, "checkpoint_every": 4, "log_every": 2, **trainer})
    values["output_dir"] = str(tmp_path / "run")
    return values


def test_early_stopping_accumulation_csv_logger_and_auto_accelerator(tmp_path):
    """mode max on a falling val/loss never improves: the run stops at the validation after the first (patience
    1), at step 4 of 12, with no TensorBoard folder (logger csv)."""
    import json

    import torch

    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import lightning_trainer, train

    threads = torch.get_num_threads()
    config = resolve_run_config(_tiny_values(tmp_path, accumulate_grad_batches=2, logger="csv", accelerator="auto",
                                             early_stopping={"monitor": "val/loss", "patience": 1, "mode": "max"}))
    results = train(config)
    assert results["steps"] == 4
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["steps"] == 4
    assert not (tmp_path / "run" / "tensorboard").exists() and (tmp_path / "run" / "logs" / "metrics.csv").is_file()
    assert torch.get_num_threads() == threads  # the run's thread count is restored
    trainer = lightning_trainer(config.trainer, tmp_path / "probe", None, [])
    assert trainer.accumulate_grad_batches == 2


def test_accumulated_steps_are_logged_once_with_the_rate_they_used(tmp_path, capsys):
    """With 3 micro-batches per step, the console printed each logged step 3 times (and step 0 twice, before any
    step) and metrics.csv had 3 rows of the learning rate per step; one line and one row now, agreeing."""
    import csv
    import re

    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    train(resolve_run_config(_tiny_values(tmp_path, accumulate_grad_batches=3, logger="csv", max_steps=6,
                                          eval_every=3, log_every=2)))  # fmt: skip
    printed = re.findall(r"step +(\d+)/6  train loss [\d.]+  lr ([\d.e+-]+)", capsys.readouterr().out)
    assert [int(step) for step, _ in printed] == [2, 4, 6]
    with open(tmp_path / "run" / "logs" / "metrics.csv") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("lr-AdamW/pg1")]
    assert [int(row["step"]) for row in rows] == [2, 4, 6]
    assert [float(lr) for _, lr in printed] == pytest.approx([float(row["lr-AdamW/pg1"]) for row in rows], rel=1e-2)


def test_trainer_options_are_checked_where_declared(tmp_path):
    import importlib.util

    import torch

    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train, training_threads

    def refused(match: str, **trainer) -> None:
        with pytest.raises(ConfigError, match=match):
            resolve_run_config(_tiny_values(tmp_path, **trainer))

    refused("early_stopping.monitor", early_stopping={"monitor": "loss"})
    refused("early_stopping.mode", early_stopping={"monitor": "val/loss", "mode": "up"})
    refused("early_stopping.paitence", early_stopping={"monitor": "val/loss", "paitence": 2})
    refused("early_stopping.mode: give min or max for monitor val/kl", early_stopping={"monitor": "val/kl"})
    refused(r"monitor val/los .*did you mean 'val/loss'\?", early_stopping={"monitor": "val/los"})
    for monitor, mode in (("val/loss", "min"), ("val/bits_per_character", "min"), ("val/wer", "min"),
                          ("val/bleu", "max"), ("val/accuracy", "max"), ("val/elbo", "max")):  # fmt: skip
        stopping = resolve_run_config(_tiny_values(tmp_path, early_stopping={"monitor": monitor})).trainer
        assert stopping.early_stopping == {"monitor": monitor, "patience": 3, "mode": mode}  # the improving direction
    refused("trainer.logger", logger="neptune")
    refused("accumulate_grad_batches", accumulate_grad_batches=0)
    config = resolve_run_config(_tiny_values(tmp_path, threads=3))
    assert training_threads(config.trainer) == 3
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    expected = max(1, min(torch.get_num_threads(), 4, cores))
    assert training_threads(resolve_run_config(_tiny_values(tmp_path)).trainer) == expected
    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(ConfigError, match="pip install wandb"):
            train(resolve_run_config(_tiny_values(tmp_path, logger="wandb")))
        assert not (tmp_path / "run").exists()  # refused before anything is written


def test_a_runs_metrics_record_the_threads_it_trained_with_not_the_processs(tmp_path):
    """Experiments captioned their tables with torch.get_num_threads() when the report was written, after the
    engine had restored the process's count (4 at most while training, 16 after on a 16-core machine)."""
    import torch

    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        train(resolve_run_config(_tiny_values(tmp_path, threads=1, max_steps=2, warmup_steps=1, checkpoint_every=2)))
        assert torch.get_num_threads() == 2  # restored
    finally:
        torch.set_num_threads(before)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["threads"] == 1


def test_an_accumulated_step_logs_the_mean_loss_of_its_micro_batches(tmp_path):
    """The step minimises the mean of its micro-batches' losses; Lightning logged the last one's. With the weights
    held (a learning rate of 1e-30, no dropout), a step of 2 micro-batches logs the mean of the losses that a run
    without accumulation logs for the same two batches, one step each."""
    import csv

    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    def losses(name: str, **trainer) -> dict[int, float]:
        values = _tiny_values(tmp_path / name, logger="csv", lr=1e-30, warmup_steps=0, log_every=1, eval_every=100,
                              checkpoint_every=100, **trainer)  # fmt: skip
        values["model"]["dropout"] = 0.0
        train(resolve_run_config(values))
        with open(tmp_path / name / "run" / "logs" / "metrics.csv") as handle:
            return {int(row["step"]): float(row["train/loss"]) for row in csv.DictReader(handle) if row["train/loss"]}

    single, accumulated = losses("single", max_steps=6), losses("accumulated", max_steps=3, accumulate_grad_batches=2)
    assert len(single) == 6 and len(accumulated) == 3 and len(set(single.values())) == 6  # distinct batches
    steps = sorted(single)
    for index, step in enumerate(sorted(accumulated)):  # accumulated step i takes batches 2i and 2i + 1
        pair = [single[steps[2 * index]], single[steps[2 * index + 1]]]
        assert accumulated[step] == pytest.approx(sum(pair) / 2, rel=1e-5), (step, pair, accumulated)

"""The ``vmt`` experiment's VMTs trained by the engine: one run directory per cell under the experiment's output
folder (``runs/<cell>``), trained by ``runner.train`` with task ``vmt`` (windows walked along the documents, the
latent carried from window to window, KL warm-up; the engine owns the walk and the window stride), resumed when a
cell was killed mid-training, and loaded back with ``runner.load_run`` (the final model, or one step checkpoint).

The optimiser is the experiment's: AdamW without weight decay (betas 0.9, 0.999), a constant learning rate (no
warm-up, a decay floor of 1), gradients clipped at norm 1.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from markovformer.experiments.report import file_digest, revisions_of
from markovformer.training.run_config import resolve_run_config

if TYPE_CHECKING:  # for annotations only: experiments.vmt imports this module
    from markovformer.experiments.vmt import VMTSettings

TRAIN_KL_TAIL = 10  # the reported training KL is the mean over the last 1/TRAIN_KL_TAIL of the steps


@dataclass
class EngineRun:
    """A finished cell's run: its directory, the final model, training seconds, the mean training KL per token over
    the last tenth of the steps (from the run's logged rows) and its step checkpoints (oldest first)."""

    run_dir: Path
    model: torch.nn.Module
    seconds: float
    last_kl: float
    checkpoints: list[tuple[int, Path]]


def skip_length(window: int) -> int:
    """The longest skip the skip posterior trains on (t drawn from 2..skip_length): the longest a window holds,
    window - 1 (a longer one pairs no two latents of the window), at most 8 as the reference, at least 2."""
    return max(2, min(8, window - 1))


def vmt_run_values(
    settings: VMTSettings, data: dict, *, window: int, steps: int, carry: bool, seed: int,
    eval_every: int | None = None, latent_dim: int | None = None,
) -> dict:  # fmt: skip
    """The engine config (a plain dict for ``resolve_run_config``) of one VMT cell: the settings' sizes, ``data``
    the data section (a source the engine feeds task ``vmt``: ``sticky_hmm``, ``linear_gaussian``, ``text``).
    Validation and checkpoints every ``eval_every`` steps (None: only at the end)."""
    every = eval_every or steps
    model = {"latent_dim": latent_dim or settings.latent_dim, "d_model": settings.d_model,
             "n_layers": settings.n_layers, "n_heads": settings.n_heads, "hidden_dim": settings.hidden_dim,
             "window": window, "skip_length": skip_length(window), "posterior": settings.posterior,
             "free_bits": settings.free_bits}  # fmt: skip
    trainer = {"max_steps": steps, "batch_size": settings.batch_size, "lr": settings.lr, "weight_decay": 0.0,
               "betas": (0.9, 0.999), "warmup_steps": 0, "lr_floor": 1.0, "gradient_clip": 1.0, "seed": seed,
               "eval_every": every, "checkpoint_every": every, "log_every": max(1, steps // 20),
               "eval_batch_size": 64}  # fmt: skip
    options = {"kl_warmup_steps": settings.kl_warmup_steps, "carry": carry, "window_overlap": settings.overlap}
    return {"task": "vmt", "model_type": "vmt", "model": model, "data": data, "trainer": trainer,
            "task_options": options}  # fmt: skip


def vmt_run_dir(values: dict, runs: Path, name: str) -> Path:
    """``runs/<name>-<hash>``: the hash of the run's values, its attention kinds' revisions (a fix that raises one
    trains a new run) and its data file's bytes (not its path: an edited text trains a new run)."""
    identity = {**values, **revisions_of(values["model"])}
    if values["data"].get("path"):
        identity["data_sha256"] = file_digest(Path(values["data"]["path"]))
    return runs / f"{name}-{hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]}"


def train_vmt_run(values: dict, runs: Path, name: str, log: Callable[[str], None]) -> EngineRun:
    """Train the run of ``values`` into ``runs/<name>-<hash of values>`` (resume it when a killed cell left
    checkpoints there; reuse it when it finished) and load its final model."""
    # deferred: the training engine imports lightning
    from markovformer.training.runner import complete_run, load_run

    run_dir = vmt_run_dir(values, runs, name)
    log(f"  {run_dir} (trained, resumed or read)")
    metrics = complete_run(resolve_run_config({**values, "output_dir": str(run_dir)}))
    _, model, _ = load_run(run_dir)
    steps = metrics["steps"]
    return EngineRun(run_dir, model.eval(), metrics["train_seconds"], _tail_kl(run_dir, steps), _checkpoints(run_dir))


def load_checkpoint_model(path: Path) -> torch.nn.Module:
    """The model of one step checkpoint of a run, in eval mode."""
    # deferred: the training engine imports lightning
    from markovformer.training.runner import load_run

    return load_run(path)[1].eval()


def _tail_kl(run_dir: Path, steps: int) -> float:
    """Mean of the logged ``train/kl`` rows over the last tenth of the steps (at least the last logged row)."""
    with open(run_dir / "logs" / "metrics.csv", newline="", encoding="utf-8") as handle:
        rows = [(int(row["step"]), float(row["train/kl"])) for row in csv.DictReader(handle) if row.get("train/kl")]
    if not rows:
        raise ValueError(f"{run_dir}: no train/kl rows in logs/metrics.csv")
    tail = [kl for step, kl in rows if step >= steps - max(1, steps // TRAIN_KL_TAIL)] or [rows[-1][1]]
    return sum(tail) / len(tail)


def _checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    found = []
    for path in (run_dir / "checkpoints").glob("step-*.ckpt"):
        found.append((int(path.stem.split("-")[1]), path))
    return sorted(found)


def stacked_documents(examples: list[dict], key: str, length: int | None = None) -> Tensor:
    """(N, L[, F]) from a split's examples; with ``length``, only the documents of that many tokens (a text split's
    last window may be shorter)."""
    documents = (examples[index][key] for index in range(len(examples)))  # read by index: any Split works
    kept = [document for document in documents if length is None or len(document) == length]
    return torch.stack(kept)


__all__ = ["EngineRun", "load_checkpoint_model", "skip_length", "stacked_documents", "train_vmt_run", "vmt_run_dir",
           "vmt_run_values"]

"""The small training loop of the testbed experiments: fresh samples every step, no dataset, no logs.

The experiments train many tiny models on an endless stream of generated sequences, where the engine's
Lightning runs (datasets, checkpoints, logs) would cost more than the training itself. Each fit is one cell of an
experiment; an interrupted experiment resumes cell by cell (``ExperimentReport.cached``), and a fit inside a cell
keeps its progress (``FitCheckpoint``, about once a minute), so a cell killed after 40 of its 45 minutes resumes
at its last save, with the weights, optimiser, schedule and batch stream an uninterrupted fit would have had.
"""

from __future__ import annotations

import contextvars
import math
import pickle
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.atomic import atomic_write
from markovformer.training.durations import format_duration
from markovformer.training.optim import DECAYS, lr_multiplier
from markovformer.training.trainer_config import TrainingDiverged

OPTIMIZERS = ("adamw", "sgd")


@dataclass
class FitResult:
    steps: list[int] = field(default_factory=list)  # the steps at which ``evaluate`` ran
    evaluations: list[float] = field(default_factory=list)
    seconds: float = 0.0
    stopped_early: bool = False  # True when ``plateau`` ended training before ``steps``
    best_step: int | None = None  # with ``keep_best``: the step whose weights the model ends with

    @property
    def kept_value(self) -> float:
        """The held-out value of the weights the model ends with: the last evaluation's, or ``best_step``'s."""
        return self.evaluations[-1] if self.best_step is None else self.evaluations[self.steps.index(self.best_step)]


@dataclass(frozen=True)
class Plateau:
    """Early stopping for quick runs: the held-out value has flattened when its last ``patience`` evaluations
    improved on the best one before them by less than ``min_delta`` (in its own unit, nats for a loss)."""

    patience: int
    min_delta: float = 1e-3

    def __post_init__(self) -> None:
        if self.patience < 1 or self.min_delta < 0:
            raise ValueError(f"plateau patience must be >= 1 and min_delta >= 0; got {self.patience}, {self.min_delta}")

    def reached(self, values: list[float]) -> bool:
        if len(values) <= self.patience:
            return False
        return min(values[: -self.patience]) - min(values[-self.patience :]) < self.min_delta


def plateau_from(patience: int, min_delta: float) -> Plateau | None:
    """The ``Plateau`` of an experiment's settings; ``patience`` 0 turns early stopping off. ValueError for a negative
    patience (it turned early stopping off silently while the report said cells stop after it)."""
    if patience < 0:
        raise ValueError(f"plateau_patience={patience} must be >= 0 (0 turns early stopping off)")
    return Plateau(patience, min_delta) if patience > 0 else None


@dataclass(frozen=True)
class FitCheckpoint:
    """Where a fit keeps its progress: ``path`` (written whole, at most every ``every_seconds`` and at each
    evaluation), and ``identity``, what the fit that may resume from it must match (its cell's settings; the fit's
    own arguments are added). A file of another identity is ignored and overwritten."""

    path: Path
    identity: dict
    every_seconds: float = 60.0


# the cell that ``ExperimentReport.cached`` is computing: its fits keep their progress beside it
_CELL: contextvars.ContextVar[dict | None] = contextvars.ContextVar("experiment_cell", default=None)
PARTIAL = re.compile(r"(?P<key>.+)\.fit\d+\.partial\.pt")  # the n-th fit's progress of cell KEY


@contextmanager
def checkpoints_for_cell(folder: Path, key: str, settings: Any) -> Iterator[None]:
    """While cell ``key`` computes, its n-th fit keeps its progress in ``folder/KEY.fit<n>.partial.pt``, valid for
    the cell's ``settings`` (``next_fit_checkpoint``)."""
    token = _CELL.set({"folder": Path(folder), "key": key, "settings": settings, "fits": 0})
    try:
        yield
    finally:
        _CELL.reset(token)


def next_fit_checkpoint() -> FitCheckpoint | None:
    """The checkpoint of the next fit of the cell being computed (``checkpoints_for_cell``); None outside a cell."""
    cell = _CELL.get()
    if cell is None:
        return None
    cell["fits"] += 1
    return FitCheckpoint(cell["folder"] / f"{cell['key']}.fit{cell['fits'] - 1}.partial.pt", {"cell": cell["settings"]})


class SamplerStream:
    """A batch sampler's batches (lists of indices), epoch after epoch (``set_epoch`` before each, for a new seeded
    order), as ``fit_on_stream``'s ``sample_batch``. Its position lives here, not in the generator, so it goes
    into the fit's saves (``state_dict``): a resumed fit continues the stream where the killed one stopped."""

    def __init__(self, sampler: Any) -> None:
        self.sampler, self.epoch, self.index = sampler, 0, 0
        self._batches: list | None = None

    def _load_epoch(self) -> None:
        self.sampler.set_epoch(self.epoch)
        self._batches = list(self.sampler)

    def __call__(self, generator: torch.Generator) -> Tensor:
        if self._batches is None:
            self._load_epoch()
        if self.index == len(self._batches):
            self.epoch, self.index = self.epoch + 1, 0
            self._load_epoch()
        self.index += 1
        return torch.tensor(self._batches[self.index - 1])

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._load_epoch()


def _rng_states(generator: torch.Generator) -> dict:
    """The random states a fit's next steps draw from: its batch stream, torch's (dropout) and CUDA's."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return {"generator": generator.get_state(), "torch_rng": torch.get_rng_state(), "cuda_rng": cuda}


def _set_rng_states(generator: torch.Generator, saved: dict) -> None:
    generator.set_state(saved["generator"])
    torch.set_rng_state(saved["torch_rng"])
    if saved["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda_rng"])


STREAM_FIT_THREADS = 1  # the intra-op threads fit_on_stream trains with (one_intra_op_thread)


@contextmanager
def one_intra_op_thread() -> Iterator[None]:
    """Tiny models run thousands of small ops: one intra-op thread is faster than several, and immune to the
    spin-wait contention that makes two threads several times slower on a busy machine. Restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(STREAM_FIT_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def fit_on_stream(
    model: nn.Module,
    loss_on_batch: Callable[[Tensor], Tensor],
    sample_batch: Callable[[torch.Generator], Tensor],
    evaluate: Callable[[], float],
    *,
    steps: int,
    lr: float,
    seed: int,
    eval_every: int,
    optimizer: str = "adamw",
    warmup_steps: int = 0,
    decay: str = "constant",
    log: Callable[[str], None] | None = None,
    label: str = "",
    plateau: Plateau | None = None,
    checkpoint: FitCheckpoint | None = None,
    keep_best: bool = False,
) -> FitResult:
    """``optimizer`` "adamw" (no weight decay) or "sgd" (plain gradient steps, the discrete gradient flow of the
    theory) after a linear warm-up, at a constant rate (``decay`` "constant") or decaying to a tenth of ``lr`` at
    ``steps`` ("cosine" or "linear"): ``training.optim.lr_multiplier``, on fresh batches from ``sample_batch``.

    ``evaluate()`` (a held-out loss, say) runs at step 0, every ``eval_every`` steps and at the end, in eval mode
    without gradients. The batch stream is seeded with ``seed``; the model's initialisation is the caller's.
    With ``plateau``, training stops after the evaluation at which the held-out value has flattened. With
    ``keep_best``, the model ends with the weights of its lowest held-out value (the first of equals; step 0, the
    initialisation, included), and ``best_step`` says which: the checkpoint selection of translation, for a budget
    that may run past the point where a small corpus starts to overfit.

    ``checkpoint`` (default: the one ``ExperimentReport.cached`` gives the fits of the cell it computes, none
    outside a cell): a fit killed midway resumes from the last save and ends exactly as an uninterrupted one would
    (same weights, evaluations and curve); ``seconds`` counts the time of every attempt. A ``sample_batch`` that
    keeps a position of its own besides the generator (``SamplerStream``) saves it through ``state_dict`` and
    ``load_state_dict``.
    """
    if steps < 1 or eval_every < 1:
        raise ValueError(f"steps and eval_every must be >= 1; got steps={steps}, eval_every={eval_every}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} must be one of {OPTIMIZERS}")
    if decay not in DECAYS:
        raise ValueError(f"decay={decay!r} must be one of {DECAYS}")
    if optimizer == "sgd":
        optim = torch.optim.SGD(model.parameters(), lr=lr)
    else:
        optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optim, partial(lr_multiplier, warmup_steps=warmup_steps,
                                                                total_steps=steps, decay=decay))  # fmt: skip
    generator = torch.Generator().manual_seed(seed)
    result = FitResult()
    start = time.perf_counter()
    checkpoint = checkpoint or next_fit_checkpoint()  # by default, the cell being computed keeps it
    stream = {"stream": sample_batch} if hasattr(sample_batch, "state_dict") else {}  # a position of its own
    identity = checkpoint and {**checkpoint.identity, "fit": {
        "steps": steps, "lr": lr, "seed": seed, "eval_every": eval_every, "optimizer": optimizer,
        "warmup_steps": warmup_steps, "decay": decay, **({"stream_state": True} if stream else {}),
        **({"keep_best": True} if keep_best else {})}}  # fmt: skip
    trained = {"model": model, "optimizer": optim, "schedule": schedule, **stream}  # a save holds them and the RNGs
    first_step = 1
    best: dict[str, Tensor] | None = None  # keep_best: the weights of the lowest held-out value so far
    if (saved := _load_fit_state(checkpoint, identity, label, log)) is not None:
        for name, part in trained.items():
            part.load_state_dict(saved[name])
        _set_rng_states(generator, saved)
        result.steps, result.evaluations = list(saved["steps"]), list(saved["evaluations"])
        best, result.best_step = saved.get("best"), saved.get("best_step")
        start -= saved["seconds"]
        first_step = saved["step"] + 1
    last_save = attempt_start = time.perf_counter()

    def save(step: int) -> None:
        nonlocal last_save
        state = {"identity": identity, "step": step, **{name: part.state_dict() for name, part in trained.items()},
                 **_rng_states(generator), "steps": result.steps, "evaluations": result.evaluations,
                 "best": best, "best_step": result.best_step, "seconds": time.perf_counter() - start}  # fmt: skip
        atomic_write(checkpoint.path, lambda temporary: torch.save(state, temporary))
        last_save = time.perf_counter()

    def record(step: int) -> None:
        nonlocal best
        model.eval()
        with torch.no_grad():
            value = float(evaluate())
        model.train()
        if keep_best and math.isfinite(value) and (result.best_step is None or value < result.kept_value):  # not NaN
            best = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
            result.best_step = step
        result.steps.append(step)
        result.evaluations.append(value)
        if log is not None:
            now = time.perf_counter()
            left = ""
            if first_step <= step < steps:  # at this attempt's pace so far
                pace = (now - attempt_start) / (step - first_step + 1)
                left = f", about {format_duration(pace * (steps - step))} left"
            log(f"  {label} step {step:>6}/{steps}: held-out {value:.4f}  ({now - start:.0f}s{left})")

    with one_intra_op_thread():
        if first_step == 1:
            record(0)
        model.train()
        for step in range(first_step, steps + 1):
            loss = loss_on_batch(sample_batch(generator))
            if not torch.isfinite(loss):  # a diverged model scores as if it had learned nothing: no number at all
                # (TrainingDiverged: the command says so in one line, as a diverged run does; it was a traceback)
                raise TrainingDiverged(f"{label or 'fit_on_stream'}: the training loss is {loss.item()} at step "
                                       f"{step} (lr {lr:g}); no result is recorded")  # fmt: skip
            optim.zero_grad(set_to_none=True)
            loss.backward()
            optim.step()
            schedule.step()
            evaluated = step % eval_every == 0 or step == steps
            if evaluated:
                record(step)
                if plateau is not None and step < steps and plateau.reached(result.evaluations):
                    result.stopped_early = True
                    if log is not None:
                        log(f"  {label} stopped at step {step}: the held-out value has flattened")
                    break
            if checkpoint is not None and step < steps and (
                    evaluated or time.perf_counter() - last_save >= checkpoint.every_seconds):  # fmt: skip
                save(step)
    if best is not None:
        model.load_state_dict(best)
        if log is not None and result.best_step != result.steps[-1]:
            log(f"  {label} ends with the weights of step {result.best_step}, its lowest held-out value")
    result.seconds = time.perf_counter() - start
    return result


def _load_fit_state(checkpoint: FitCheckpoint | None, identity: dict | None, label: str,
                    log: Callable[[str], None] | None) -> dict | None:  # fmt: skip
    """The saved state of ``checkpoint`` when it is this fit's (same ``identity``), else None (said in ``log``): a save
    that cannot be read (cut short by a disk's fault; saves are written whole) is started over as one of another fit."""
    if checkpoint is None or not checkpoint.path.is_file():
        return None
    try:
        saved = torch.load(checkpoint.path, map_location="cpu", weights_only=True)
        if not isinstance(saved, dict):
            raise ValueError(f"it holds a {type(saved).__name__}, not a fit's state")
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as error:
        if log is not None:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            log(f"  {label}: the saved progress in {checkpoint.path} cannot be read ({reason}); starting over")
        return None
    if saved.get("identity") != identity:
        if log is not None:
            log(f"  {label}: the saved progress in {checkpoint.path} is of other settings; starting over")
        return None
    if log is not None:
        log(f"  {label}: resuming at step {saved['step']} from {checkpoint.path}")
    return saved


def steps_to_reach(result: FitResult, target: float, tolerance: float) -> int | None:
    """The first evaluated step whose value is within ``tolerance`` of ``target``, or None if none was."""
    for step, value in zip(result.steps, result.evaluations, strict=True):
        if value <= target + tolerance:
            return step
    return None


def next_token_loss(model: nn.Module, x: Tensor, first_target: int) -> Tensor:
    """Mean next-token cross-entropy of a causal LM on x (B, T) over targets t = first_target..T-1 (an order-k
    chain's estimators and oracle score t >= k)."""
    logits = model(x).logits[:, first_target - 1 : -1]
    return F.cross_entropy(logits.flatten(0, 1), x[:, first_target:].flatten())

"""The trainer options of a run (its ``trainer:`` section: the engine's options; a task's own options live in its
``Options`` dataclass, ``training.tasks``), the check of a setting's value against its field's type, the error
every bad run setting raises and the one a diverged run stops with."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
import reprlib
import signal
import types
import typing
from typing import Any

from markovformer.advice import suggest

ACCELERATORS = ("cpu", "gpu", "cuda", "mps", "auto")  # auto: Lightning's choice, a GPU when one is visible
PRECISIONS = ("32-true", "64-true", "bf16-mixed", "16-mixed", "bf16-true")
# Lightning strategies shown to train, checkpoint (safetensors) and resume with this trainer; the others fail later:
# ddp_spawn cannot pickle the data loaders, deepspeed and fsdp write their own checkpoint formats.
STRATEGIES = ("auto", "ddp", "ddp_find_unused_parameters_true", "single_device")
# Where metrics go besides the run's own logs/metrics.csv: TensorBoard (tensorboard/), nothing more ("csv"), or
# Lightning's Weights & Biases / MLflow loggers when their package is installed.
LOGGERS = {"tensorboard": "tensorboard", "csv": None, "wandb": "wandb", "mlflow": "mlflow"}
EARLY_STOPPING_KEYS = ("monitor", "patience", "mode")
DEFAULT_WARMUP_STEPS = 100
MAX_DEFAULT_THREADS = 4  # tiny models gain nothing from more intra-op threads, and a shared machine loses a lot
FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max (this module does not import torch)


class ConfigError(ValueError):
    """A bad run config: the message names the key and the problem."""


class TrainingDiverged(RuntimeError):
    """The loss or the gradient norm became nan or inf (``training.divergence``); the message is the one line the
    command prints."""


class RunTerminated(BaseException):
    """The run (or ``data prepare``) received SIGTERM (a scheduler's stop, ``kill``) or SIGINT (Ctrl-C) and stopped;
    the message, the one line the command prints, says what was kept and how to continue; the command exits 128 +
    the signal's number, as a shell reports a process the signal ended. ``shown`` is False in the other processes of
    a multi-process run, which stop with the same line: the run's writer alone prints it. A BaseException, as
    KeyboardInterrupt is: a stop asked for, not an error, so a sweep's ``except Exception`` around ``train`` does not
    swallow the Ctrl-C and go on to its next run."""

    def __init__(self, message: str, signal_number: int = signal.SIGTERM, shown: bool = True) -> None:
        super().__init__(message)
        self.exit_status, self.shown = 128 + int(signal_number), shown


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 300
_SHOWN.maxlong = 60
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 12
_SHOWN.maxlevel = 3


def shown(value: object) -> str:
    """``repr(value)`` cut to a few hundred characters (long strings, lists and deep nesting are elided with ...):
    how an error message shows a config value, so a huge value never makes a huge message."""
    return _SHOWN.repr(value)


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", str(annotation))


def coerce(value: Any, annotation: Any, key: str) -> Any:
    """Check ``value`` against a dataclass field annotation; convert lists to tuples and ints to floats."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            with contextlib.suppress(ConfigError):
                return coerce(value, option, key)
        raise ConfigError(f"{key}={shown(value)} has the wrong type: expected {annotation}")
    if value is None and annotation is not Any:  # YAML's `key:` with nothing, or only a comment, after it
        raise ConfigError(f"{key} is empty (null: nothing or only a comment after it); give it a value")
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}={shown(value)} has the wrong type: expected a list")
        args = typing.get_args(annotation)
        if origin is tuple and args and args[-1] is not Ellipsis and len(args) != len(value):
            raise ConfigError(f"{key}={shown(value)} must have {len(args)} entries")
        item_types = [args[0] if (origin is list or args[-1] is Ellipsis) else args[i] for i in range(len(value))]
        items = [coerce(v, t, f"{key}[{i}]") for i, (v, t) in enumerate(zip(value, item_types, strict=True))]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}={shown(value)} has the wrong type: expected a mapping")
        return value
    if annotation is Any:
        return value
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    non_finite_text = isinstance(value, str) and value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity")
    if annotation is float and (non_finite_text or isinstance(value, float) and not math.isfinite(value)):
        raise ConfigError(f"{key}={shown(value)} must be a finite number")  # YAML reads `nan` as text, `.nan` as one
    if annotation in (int, float, str, bool) and (type(value) is not annotation):
        raise ConfigError(f"{key}={shown(value)} has the wrong type: expected {_type_name(annotation)}")
    return value


@dataclasses.dataclass
class TrainerConfig:
    max_steps: int = 1000
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    # Steps of linear warm-up to lr. null: min(DEFAULT_WARMUP_STEPS, max_steps), resolved when the config is read (so
    # a short run still peaks). A new run refuses a warm-up longer than max_steps: its learning rate would never peak.
    warmup_steps: int | None = None
    decay: str = "cosine"  # or "linear"; both end at lr_floor * lr
    lr_floor: float = 0.1
    # The step at which the decay reaches lr_floor (None: max_steps). Extending a run with --resume sets it to the old
    # max_steps, so the learning rate never jumps: the added steps run at lr_floor * lr.
    decay_steps: int | None = None
    gradient_clip: float = 1.0
    precision: str = "32-true"
    compile: bool = False
    activation_checkpointing: bool = False
    deterministic: bool = False
    # Seeds the model's initialisation, the batch order and dropout, and the data: generated examples and random
    # splits of records are drawn from it too (data show names the options it draws).
    seed: int = 0
    eval_every: int = 200
    checkpoint_every: int = 200
    log_every: int = 50
    eval_batch_size: int = 64
    accelerator: str = "cpu"  # cpu | gpu | cuda | mps | auto (Lightning's choice: a GPU when one is visible)
    devices: int = 1
    num_nodes: int = 1
    strategy: str = "auto"
    num_workers: int = 0
    keep_checkpoints: int = 0  # keep only the newest N step checkpoints (plus last.ckpt); 0 keeps them all
    label_smoothing: float = 0.0  # on the training loss only; validation reports plain cross-entropy
    # Optimiser steps accumulate the gradients of this many batches and descend the mean loss over every item they
    # score (tokens; a CTC run's utterances: the task's loss_items), of every process under DDP: one batch of
    # batch_size times it rows, whatever each batch's count (translation's length buckets, labels -100);
    # max_steps, warmup_steps and eval_every count optimiser steps.
    accumulate_grad_batches: int = 1
    # Stop before max_steps when a validation metric stops improving: {monitor: val/loss, patience: 3, mode: min};
    # patience counts validations (every eval_every steps). null: train to max_steps.
    early_stopping: dict[str, Any] | None = None
    logger: str = "tensorboard"  # tensorboard | csv (logs/metrics.csv only) | wandb | mlflow (their package needed)
    # torch's intra-op threads while training. null: the current setting capped at MAX_DEFAULT_THREADS and at the
    # cores this process may use (a shared 2-core machine ran the default 2 threads up to 50x slower).
    threads: int | None = None

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(TrainerConfig)  # a config file's values are coerced already; Python's are not
        for field in dataclasses.fields(self):
            setattr(self, field.name, coerce(getattr(self, field.name), hints[field.name], f"trainer.{field.name}"))
        for name in ("max_steps", "batch_size", "eval_every", "checkpoint_every", "log_every", "eval_batch_size",
                     "devices", "num_nodes"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ConfigError(f"trainer.{name}={shown(getattr(self, name))} must be >= 1")
        if not self.lr > 0:
            raise ConfigError(f"trainer.lr={shown(self.lr)} must be positive")
        if not all(0 <= beta < 1 for beta in self.betas):
            raise ConfigError(f"trainer.betas={shown(list(self.betas))}: each must lie in [0, 1)")
        # AdamW's first step scales by lr / (1 - betas[0]): past float32's range torch fails inside its step (a
        # traceback, not the diverged run's line), whatever the precision
        if self.lr / (1 - self.betas[0]) > FLOAT32_MAX:
            raise ConfigError(f"trainer.lr={self.lr:g} is too large: AdamW's first step scales by lr / (1 - "
                              f"trainer.betas[0]) = {self.lr / (1 - self.betas[0]):.3g}, past float32's largest "
                              f"number {FLOAT32_MAX:.3g}; give trainer.lr <= {FLOAT32_MAX * (1 - self.betas[0]):.3g}")
        for name in ("weight_decay", "gradient_clip"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"trainer.{name}={shown(getattr(self, name))} must be >= 0 (0 turns it off)")
        if self.decay_steps is not None and self.decay_steps < 1:
            raise ConfigError(f"trainer.decay_steps={shown(self.decay_steps)} must be >= 1 (or null: max_steps)")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"trainer.seed={shown(self.seed)} must lie in [0, 2**32)")
        if self.keep_checkpoints < 0:
            raise ConfigError(f"trainer.keep_checkpoints={shown(self.keep_checkpoints)} must be >= 0 (0 keeps all)")
        if self.decay not in ("cosine", "linear"):
            raise ConfigError(f"trainer.decay={shown(self.decay)} must be 'cosine' or 'linear'")
        if not 0 <= self.lr_floor <= 1:
            raise ConfigError(f"trainer.lr_floor={shown(self.lr_floor)} must lie in [0, 1]")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"trainer.strategy={shown(self.strategy)} is not supported by this trainer; use one of "
                              f"{STRATEGIES}")  # fmt: skip
        if self.strategy == "single_device" and (self.devices > 1 or self.num_nodes > 1):
            raise ConfigError(f"trainer.strategy='single_device' runs one process, so trainer.devices={self.devices} "
                              f"and trainer.num_nodes={self.num_nodes} would not all be used; use trainer.strategy=ddp "
                              f"for several devices, or trainer.devices=1")  # fmt: skip
        if self.accelerator not in ACCELERATORS:  # Lightning's own refusal named no key and offered tpu, which fails
            raise ConfigError(f"trainer.accelerator={shown(self.accelerator)} must be one of {ACCELERATORS}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"trainer.precision={shown(self.precision)} must be one of {PRECISIONS}")
        if self.warmup_steps is None:
            self.warmup_steps = min(DEFAULT_WARMUP_STEPS, self.max_steps)
        for name, low in (("warmup_steps", 0), ("num_workers", 0), ("accumulate_grad_batches", 1), ("threads", 1)):
            value = getattr(self, name)
            if value is not None and value < low:
                raise ConfigError(f"trainer.{name}={shown(value)} must be >= {low}")
        if self.logger not in LOGGERS:
            raise ConfigError(f"trainer.logger={shown(self.logger)} must be one of {tuple(LOGGERS)}")
        if self.early_stopping is not None:
            self.early_stopping = early_stopping_options(self.early_stopping)
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"trainer.label_smoothing={shown(self.label_smoothing)} must lie in [0, 1)")

    @property
    def log_rows_every(self) -> int:
        """The steps between the logs' training rows (logs/metrics.csv, TensorBoard): log_every, at most 50 (the
        console prints every log_every)."""
        return min(self.log_every, 50)


def check_logger(logger: str) -> None:
    """ConfigError unless the package ``trainer.logger`` needs is installed; before anything is written."""
    package = LOGGERS[logger]
    if package is not None and importlib.util.find_spec(package) is None:
        raise ConfigError(f"trainer.logger={logger!r} needs the package {package!r}: pip install {package} (or "
                          f"trainer.logger=tensorboard, the default, or csv)")  # fmt: skip


def check_warmup(tc: TrainerConfig) -> None:
    """ConfigError when the warm-up outlasts the run (the learning rate would never reach ``lr``) or the decay ends
    no later than the warm-up (the rate would fall from its peak to the floor in one step): checked for new runs
    only, so that runs trained before the check still load, evaluate and resume."""
    if tc.warmup_steps > tc.max_steps:
        raise ConfigError(f"trainer.warmup_steps={tc.warmup_steps} is larger than trainer.max_steps={tc.max_steps}: "
                          f"the learning rate would never reach trainer.lr; set trainer.warmup_steps <= "
                          f"{tc.max_steps} (or leave it out: min({DEFAULT_WARMUP_STEPS}, max_steps))")  # fmt: skip
    check_decay(tc)


def check_weight_decay(tc: TrainerConfig) -> None:
    """ConfigError when AdamW's decoupled decay, which multiplies each decayed weight by ``1 - lr * weight_decay``
    every step, would zero the weights (= 0) or flip their sign (< 0) at the peak rate ``lr``: such a run (say
    weight_decay=1e45) diverged and was told to lower the learning rate. New runs, and a resume that raises lr."""
    factor = 1 - tc.lr * tc.weight_decay
    if factor <= 0:
        raise ConfigError(f"trainer.weight_decay={tc.weight_decay:g} with trainer.lr={tc.lr:g}: AdamW's decoupled "
                          f"decay multiplies each decayed weight by 1 - lr * weight_decay = {factor:.3g} every step, "
                          f"which {'zeroes' if factor == 0 else 'flips the sign of'} the weights; give "
                          f"trainer.weight_decay < 1 / trainer.lr = {1 / tc.lr:.3g}")  # fmt: skip


def check_decay(tc: TrainerConfig) -> None:
    """ConfigError when ``decay_steps`` ends no later than the warm-up: the rate would fall from its peak to the
    floor in one step (new runs, and a resume that sets it)."""
    if tc.decay_steps is not None and tc.decay_steps <= tc.warmup_steps:
        raise ConfigError(f"trainer.decay_steps={tc.decay_steps} is not past trainer.warmup_steps={tc.warmup_steps}: "
                          f"the learning rate would drop from its peak to the floor in one step; set it above the "
                          f"warm-up (or leave it out: max_steps)")  # fmt: skip


# the validation metrics (by name or name prefix) that improve downwards and upwards: early stopping's default mode
IMPROVES_DOWN = ("loss", "bits_per_", "perplexity", "wer", "cer")
IMPROVES_UP = ("accuracy", "macro_f1", "auroc", "bleu", "exact_match", "elbo", "iw_bound", "reconstruction")


def improving_mode(monitor: str) -> str | None:
    """"min" or "max": the direction in which validation metric ``monitor`` (``val/NAME``) improves; None when the
    name does not say (``val/kl``)."""
    name = monitor.removeprefix("val/")
    if name.startswith(IMPROVES_DOWN):
        return "min"
    return "max" if name in IMPROVES_UP else None


def early_stopping_options(values: dict[str, Any]) -> dict[str, Any]:
    """``trainer.early_stopping`` with its defaults filled in (patience 3; mode the direction in which the monitored
    metric improves: min for losses, max for val/bleu or val/accuracy); ConfigError naming the key."""
    unknown = sorted(set(values) - set(EARLY_STOPPING_KEYS))
    if unknown:
        raise ConfigError(f"trainer.early_stopping.{unknown[0]} is not an option; give {EARLY_STOPPING_KEYS}")
    monitor = values.get("monitor")
    if not isinstance(monitor, str) or not monitor.startswith("val/"):
        raise ConfigError(f"trainer.early_stopping.monitor={shown(monitor)} must name a validation metric, e.g. "
                          f"val/loss (the val/ names in logs/metrics.csv)")  # fmt: skip
    if "mode" not in values and improving_mode(monitor) is None:
        known = [f"val/{name}" for name in ("loss", "bits_per_token", "perplexity", "wer", "cer", *IMPROVES_UP)]
        raise ConfigError(f"trainer.early_stopping.mode: give min or max for monitor {monitor} (whether it improves "
                          f"downwards or upwards is not known for it){suggest(monitor, known)}")  # fmt: skip
    options = {"patience": 3, "mode": improving_mode(monitor), **values}
    if isinstance(options["patience"], bool) or not isinstance(options["patience"], int) or options["patience"] < 1:
        raise ConfigError(f"trainer.early_stopping.patience={shown(options['patience'])} must be an integer >= 1 "
                          f"(validations without improvement)")  # fmt: skip
    if options["mode"] not in ("min", "max"):
        raise ConfigError(f"trainer.early_stopping.mode={shown(options['mode'])} must be 'min' or 'max'")
    return options

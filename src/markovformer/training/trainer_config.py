"""The trainer options of a run (its ``trainer:`` section), the error every bad run setting raises and the one a
diverged run stops with."""

from __future__ import annotations

import dataclasses

PRECISIONS = ("32-true", "64-true", "bf16-mixed", "16-mixed", "bf16-true")


class ConfigError(ValueError):
    """A bad run config: the message names the key and the problem."""


class TrainingDiverged(RuntimeError):
    """The loss or the gradient norm became nan or inf (``training.divergence``); the message is the one line the
    command prints."""


@dataclasses.dataclass
class TrainerConfig:
    max_steps: int = 1000
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 100
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
    seed: int = 0
    eval_every: int = 200
    checkpoint_every: int = 200
    log_every: int = 50
    eval_batch_size: int = 64
    accelerator: str = "cpu"
    devices: int = 1
    num_nodes: int = 1
    strategy: str = "auto"
    num_workers: int = 0
    keep_checkpoints: int = 0  # keep only the newest N step checkpoints (plus last.ckpt); 0 keeps them all
    # Models with a markov context window (scan_markov): each training batch uses an n drawn uniformly from this list
    # (a function of seed and step); validation scores every n and reports their mean as the loss. () = the model's.
    orders: tuple[int, ...] = ()
    label_smoothing: float = 0.0  # on the training loss only; validation reports plain cross-entropy
    # task vmt (windows walked along documents, truncated BPTT): the KL weight rises linearly to 1 over this many
    # steps; carry the last latent from window to window (false: every window starts from P(x_1)); training windows
    # advance by half a window instead of a whole one (validation always walks consecutive windows).
    kl_warmup_steps: int = 0
    carry: bool = True
    window_overlap: bool = False

    def __post_init__(self) -> None:
        for name in ("max_steps", "batch_size", "eval_every", "checkpoint_every", "log_every", "eval_batch_size",
                     "devices", "num_nodes"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ConfigError(f"trainer.{name}={getattr(self, name)!r} must be >= 1")
        if not self.lr > 0:  # coerce has already refused inf and nan
            raise ConfigError(f"trainer.lr={self.lr!r} must be positive")
        for name in ("weight_decay", "gradient_clip"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"trainer.{name}={getattr(self, name)!r} must be >= 0 (0 turns it off)")
        if not all(0 <= beta < 1 for beta in self.betas):
            raise ConfigError(f"trainer.betas={list(self.betas)!r}: each must lie in [0, 1)")
        if self.decay_steps is not None and self.decay_steps < 1:
            raise ConfigError(f"trainer.decay_steps={self.decay_steps!r} must be >= 1 (or null: max_steps)")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"trainer.seed={self.seed!r} must lie in [0, 2**32)")
        if self.keep_checkpoints < 0:
            raise ConfigError(f"trainer.keep_checkpoints={self.keep_checkpoints!r} must be >= 0 (0 keeps all)")
        if self.decay not in ("cosine", "linear"):
            raise ConfigError(f"trainer.decay={self.decay!r} must be 'cosine' or 'linear'")
        if not 0 <= self.lr_floor <= 1:
            raise ConfigError(f"trainer.lr_floor={self.lr_floor!r} must lie in [0, 1]")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"trainer.precision={self.precision!r} must be one of {PRECISIONS}")
        if self.warmup_steps < 0 or self.num_workers < 0:
            raise ConfigError("trainer.warmup_steps and trainer.num_workers must be >= 0")
        if self.kl_warmup_steps < 0:
            raise ConfigError(f"trainer.kl_warmup_steps={self.kl_warmup_steps!r} must be >= 0")
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in self.orders):
            raise ConfigError(f"trainer.orders={list(self.orders)!r} must be positive integers")
        if len(set(self.orders)) != len(self.orders):
            raise ConfigError(f"trainer.orders={list(self.orders)!r} repeats a value")
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"trainer.label_smoothing={self.label_smoothing!r} must lie in [0, 1)")

"""The Lightning module every run trains: the model stays a plain ``nn.Module`` head and the task object says how to
train and score it; this adds the optimiser, the schedule, logging and the random state in checkpoints."""

from __future__ import annotations

import math

import lightning as L
import torch

from markovformer.layers.decay_attention import own_weights_with_slopes
from markovformer.training.batches import world
from markovformer.training.optim import build_optimizer, lr_multiplier, regroup_optimizer_state
from markovformer.training.tasks import Task


class TrainingModule(L.LightningModule):
    """Trains ``model`` (a head returning ``.loss``) as ``task`` says and reports ``val/<metric>``.

    Every process's RNG state (CPU, and CUDA when used) is saved in checkpoints, so that a resumed run draws the
    same dropout masks as an uninterrupted one on every rank (ranks fed batches of other shapes draw different
    amounts and drift apart); so is the task's own training state (the VMT's carried latent)."""

    def __init__(self, model: torch.nn.Module, task: Task) -> None:
        super().__init__()
        task.check_model(model)
        self.model, self.task, self.config = model, task, task.trainer
        self.val_metrics = task.new_metrics()
        self.item_scale: float | None = None  # set by this process's first micro-batch (see training_step)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        """The task's loss of ``batch``, a mean over its items (``Task.loss_items``: tokens scored, or a CTC run's
        utterances), times their count: an optimiser step adds these sums up over its micro-batches (DDP over its
        processes) and ``on_before_optimizer_step`` divides the gradient by the step's count, so that the step
        descends the mean over every item of the step; the mean of micro-batch means weighed an item of a micro-batch
        with fewer items (translation's short pairs, labels -100) more. A step of one batch on one process keeps
        its mean loss as it is. Each sum is divided by ``item_scale``, a power of two near a micro-batch's count,
        so that a 16-mixed loss scaler sees a mean's size (``power_of_two_near``)."""
        accumulate = self.config.accumulate_grad_batches
        if batch_idx % accumulate == 0:  # the first micro-batch of an optimiser step
            self.step_sums: dict[str, tuple[torch.Tensor, dict]] = {}
            self.step_items = 0
        self.batch_items = self.task.loss_items(batch) if accumulate * world()[1] > 1 else 1
        self.step_items += self.batch_items
        if self.item_scale is None:  # the first micro-batch's items, averaged over the processes
            items = self.summed_over_processes(torch.tensor([float(self.batch_items)], device=self.device))
            self.item_scale = power_of_two_near(float(items) / world()[1])
        loss = self.task.training_step(self, batch)
        self.batch_loss = loss.detach()  # the loss a user knows (DivergenceGuard names it), not the sum returned
        return loss * self.batch_items / self.item_scale

    def log_step_mean(self, name: str, value: torch.Tensor, **options) -> None:
        """Log ``value``, a mean over this micro-batch's items, as the mean over every item of the optimiser step
        (its micro-batches and processes, when it ends: ``on_before_optimizer_step``), the mean the step descends.
        Without accumulation on one process, ``value`` itself. ``options``: of ``self.log``."""
        total, _ = self.step_sums.get(name, (0.0, {}))
        self.step_sums[name] = (total + value.detach() * self.batch_items, options)

    def on_before_optimizer_step(self, optimizer) -> None:
        """Divides the step's summed gradient by its items (of every process: one all-reduce, which also sums the
        logged values), so that gradient clipping and the optimiser, which Lightning runs after this hook (and after
        unscaling a 16-mixed loss), act on the gradient of the step's mean; logs the means of ``log_step_mean``."""
        names, step_items = list(self.step_sums), float(self.step_items)
        sums = [self.step_sums[name][0] for name in names]
        if world()[1] > 1:  # one all-reduce, in float64: a count past 2 ** 24 items stays exact
            counted = [*(value.double() for value in sums), torch.tensor(step_items, dtype=torch.float64,
                                                                         device=self.device)]  # fmt: skip
            totals = self.summed_over_processes(torch.stack(counted))
            sums, step_items = list(totals[:-1]), float(totals[-1])
        step_items = max(step_items, 1.0)  # a step of no item (every label -100) has loss 0 and no gradient
        for name, value in zip(names, sums, strict=True):
            self.log(name, value / step_items, **self.step_sums[name][1])
        scale = self.config.accumulate_grad_batches * world()[1] * self.item_scale / step_items
        if scale != 1.0:
            grads = [parameter.grad for parameter in self.model.parameters() if parameter.grad is not None]
            torch._foreach_mul_(grads, scale)

    def summed_over_processes(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` summed over the processes of a DDP run (``values`` itself in one process)."""
        return self.trainer.strategy.reduce(values, reduce_op="sum") if world()[1] > 1 else values

    def on_validation_epoch_start(self) -> None:
        self.val_metrics.reset()
        self.task.start_scoring()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.task.score(self.model, batch, self.val_metrics)

    def on_validation_epoch_end(self) -> None:
        # in float64, as computed: Lightning turns a float into a float32 tensor, so metrics.json and the CSV log
        # held 3.964341163635254 bits per token where eval, scoring the same weights, says 3.9643411281614465
        for name, value in self.val_metrics.compute().items():
            value = torch.tensor(value, dtype=torch.float64)
            self.log(f"val/{name}", value, prog_bar=name == "loss", sync_dist=False)

    def configure_optimizers(self):
        config = self.config
        optimizer = build_optimizer(self.model, config.lr, config.weight_decay, tuple(config.betas))
        decay_steps = config.decay_steps or config.max_steps
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_multiplier(step, config.warmup_steps, decay_steps, config.decay, config.lr_floor)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rng_states"] = gather_from_ranks(rng_state())
        self.task.save_state(self, checkpoint)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # (before Lightning loads its state_dict) the run's ALiBi layers: weights without their slopes were saved
        # before slopes were, and keep those they computed with
        checkpoint["state_dict"] = own_weights_with_slopes(self.model, checkpoint["state_dict"], prefix="model.")
        states = checkpoint.get("rng_states")
        rank, world_size = world()
        if states is not None and len(states) != world_size:
            print(
                f"the checkpoint holds the random state of {len(states)} processes, this run has {world_size}: "
                "the dropout masks from here on differ from those of an uninterrupted run",
                flush=True,
            )
        if states:
            set_rng_state(states[rank % len(states)])
        elif "torch_rng_state" in checkpoint:  # a checkpoint written before per-rank states: rank 0's state only
            torch.set_rng_state(checkpoint["torch_rng_state"])
        self.task.load_state(checkpoint)
        for state in checkpoint.get("optimizer_states") or []:
            if regroup_optimizer_state(self.model, state):
                print("this checkpoint was trained without weight decay on its GRU, minGRU or forget-gate weight "
                      f"matrices; they decay from here on (trainer.weight_decay={self.config.weight_decay})",
                      flush=True)  # fmt: skip
        self.rescale_learning_rate(checkpoint)

    def rescale_learning_rate(self, checkpoint: dict) -> None:
        """A resume may lower the learning rate (after a divergence): the restored optimiser and schedule carry the
        old one, so their learning rates are rescaled to this run's ``trainer.lr`` before Lightning loads them."""
        schedules, optimizers = checkpoint.get("lr_schedulers") or [], checkpoint.get("optimizer_states") or []
        if not schedules or not schedules[0].get("base_lrs"):
            return
        scale = self.config.lr / schedules[0]["base_lrs"][0]
        if scale == 1.0:
            return
        schedules[0]["base_lrs"] = [lr * scale for lr in schedules[0]["base_lrs"]]
        if schedules[0].get("_last_lr"):
            schedules[0]["_last_lr"] = [lr * scale for lr in schedules[0]["_last_lr"]]
        for optimizer in optimizers:
            for group in optimizer.get("param_groups", []):
                for key in ("lr", "initial_lr"):
                    if key in group:
                        group[key] = group[key] * scale


def power_of_two_near(value: float) -> float:
    """The power of two nearest ``value`` (1 for values below 1). Dividing a loss by it, and its gradient by the
    inverse, rounds nothing: a resumed process, which takes it from another first micro-batch, trains the same bits
    as the uninterrupted one."""
    return 2.0 ** round(math.log2(max(value, 1.0)))


def rng_state() -> dict:
    """This process's random state: the CPU generator's, and the current CUDA device's when CUDA is in use."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def gather_from_ranks(value: dict) -> list[dict]:
    """``value`` of every process, in rank order (a list of one outside a process group). Every rank must call it:
    Lightning builds a checkpoint's contents on every rank and writes it on rank 0."""
    rank, world_size = world()
    if world_size == 1:
        return [value]
    gathered: list = [None] * world_size
    torch.distributed.all_gather_object(gathered, {key: tensor.cpu() for key, tensor in value.items()})
    return gathered

"""The Variational Markov Transformer's task: training on windows walked along long documents (truncated BPTT) with
the latent carried from window to window; validation and ``eval`` walk whole documents and add up per-window
bounds on their log-likelihood."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from markovformer.data.bundle import DataBundle
from markovformer.models.vmt.documents import walk_documents
from markovformer.training.batches import DocumentWindows, window_stride, world
from markovformer.training.tasks.base import Task, real_positions
from markovformer.training.trainer_config import ConfigError, TrainerConfig, shown

if TYPE_CHECKING:  # the metrics are imported where scoring starts (``new_metrics``)
    from markovformer.training.metrics import DocumentMetrics

IW_SAMPLES = 10  # K of the importance-weighted bound that VMT validation and evaluation report by default
BOUNDS = ("elbo", "reconstruction", "kl")


def kl_weight(step: int, warmup_steps: int) -> float:
    """The KL weight of the ``step``-th optimiser step (1-based): rising linearly to 1 over ``warmup_steps``."""
    return 1.0 if warmup_steps == 0 else min(1.0, step / warmup_steps)


def document_inputs(batch: dict) -> dict:
    """The observations of a batch of windows or documents: ``input_ids`` or ``input_features``, ``attention_mask``."""
    return {key: batch[key] for key in ("input_ids", "input_features", "attention_mask") if key in batch}


class DocumentWalk:
    """The evaluation pass over whole documents; one per pass over a split (its noise restarts with it).

    Each batch of documents is walked window by window (``models.vmt.documents.walk_documents``, the latent carried
    when ``carry``); added per window: the ELBO and the importance-weighted bound with K = ``iw_samples``, each
    chained bound summing to a bound on the documents' log-likelihood. Noise comes from two generators of its own
    seeded by ``seed``, so validation never moves the training's random stream and a rerun gives the same numbers.
    """

    def __init__(self, carry: bool = True, iw_samples: int = IW_SAMPLES, seed: int = 0) -> None:
        self.carry, self.iw_samples, self.seed = carry, iw_samples, seed
        self.generators: tuple[torch.Generator, torch.Generator] | None = None

    def __call__(self, model: nn.Module, batch: dict, metrics: DocumentMetrics) -> None:
        inputs = document_inputs(batch)
        y = inputs.get("input_ids", inputs.get("input_features"))
        if self.generators is None:
            self.generators = tuple(torch.Generator(device=y.device).manual_seed(self.seed + i) for i in (0, 1))
        iw_samples = (self.iw_samples,) if self.iw_samples else ()
        for scores in walk_documents(model, y, inputs.get("attention_mask"), carry=self.carry, iw_samples=iw_samples,
                                     elbo_generator=self.generators[0], iw_generator=self.generators[1]):  # fmt: skip
            metrics.update_documents(scores.elbo, scores.bounds.get(self.iw_samples))


@dataclass
class VMTOptions:
    """The VMT task's options (a run's ``task_options:`` section): training walks windows along documents
    (truncated BPTT)."""

    kl_warmup_steps: int = 0  # the KL weight rises linearly from 0 to 1 over this many optimiser steps (0: always 1)
    # Carry the last latent from window to window, in training and validation (false: every window starts from
    # P(x_1)).
    carry: bool = True
    # Training windows advance by half a window instead of a whole one (validation always walks consecutive windows).
    window_overlap: bool = False
    # K of the importance-weighted bound validation and eval report (0: none); it tightens toward the documents'
    # log-likelihood as K grows, at K times the cost of the ELBO (`eval --iw-samples K` scores a run with another K).
    iw_samples: int = IW_SAMPLES

    def __post_init__(self) -> None:
        if self.kl_warmup_steps < 0:
            raise ConfigError(f"task_options.kl_warmup_steps={shown(self.kl_warmup_steps)} must be >= 0")
        if isinstance(self.iw_samples, bool) or not isinstance(self.iw_samples, int) or self.iw_samples < 0:
            raise ConfigError(f"task_options.iw_samples={shown(self.iw_samples)} must be an integer >= 0")


class VMT(Task):
    """Training batches are windows walked along documents (``DocumentWindows``); the last step's ``output.carry``
    is passed to the next step for the rows that continue their document (``carry_mask``), with ``carry_index`` the
    last position before the next window starts, and saved in checkpoints so that a resumed run carries it on. The
    KL weight warms up over ``task_options.kl_warmup_steps``. Validation walks whole documents (``DocumentWalk``)."""

    name = "vmt"
    Options = VMTOptions
    forward_arguments = {"kl_warmup_steps": "kl_weight", "carry": "carry", "window_overlap": "carry_index"}
    continues_prompts = True
    # Training minimises -reconstruction + KL weight * max(KL, free bits) + the weighted extra terms per token of a
    # window; validation reports -ELBO per token of whole documents: two quantities, named apart.
    train_loss_label = "train objective/token"
    metric_labels = {"loss": "-ELBO/token"}
    train_loss_note = ("-reconstruction + KL weight × max(KL, free bits) + the weighted auxiliary terms, per token of "
                       "a training window")  # fmt: skip

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.carry: Tensor | None = None  # the last training step's carry (B, latent_dim)
        self.walk = DocumentWalk(self.options.carry, self.options.iw_samples)

    @classmethod
    def check_new_run(cls, options: VMTOptions, trainer: TrainerConfig) -> None:
        """The KL weight must reach 1 within the run: past max_steps the run ends on an objective that is not its
        ELBO (down-weighted KL), unsaid."""
        if options.kl_warmup_steps > trainer.max_steps:
            raise ConfigError(f"task_options.kl_warmup_steps={options.kl_warmup_steps} is larger than "
                              f"trainer.max_steps={trainer.max_steps}: the KL weight would never reach 1, so the run "
                              f"would end on a down-weighted KL, not its ELBO; set it <= {trainer.max_steps} (0: "
                              f"weight 1 from the start)")  # fmt: skip

    def check_data(self, bundle: DataBundle) -> None:
        """The VMT reads each example as a document of its own, so overlapping text windows would score tokens
        twice."""
        if bundle.splits.get("overlap"):
            raise ConfigError(f"data.overlap={bundle.splits['overlap']} makes the text's windows overlap, but task=vmt "
                              f"reads each window as a document of its own; set data.overlap=0")  # fmt: skip

    def check_model(self, model: nn.Module) -> None:
        """ConfigError for task_options.window_overlap on a window of one token: half of it rounds to a whole one,
        so the windows would advance as without the option, silently."""
        super().check_model(model)
        window = getattr(model.config, "window", None)
        if self.options.window_overlap and window is not None and window < 2:
            raise ConfigError(f"task_options.window_overlap=true needs model.window >= 2 (windows advance by half a "
                              f"window); model.window={window} has no half: set window_overlap: false or a larger "
                              f"window")  # fmt: skip

    def prepare_model(self, model: nn.Module) -> None:
        """With ``generative_from_data``, P becomes the data's linear-Gaussian model and is frozen (the optimiser
        takes only parameters that require gradients), so that only the posterior is trained."""
        if not model.config.generative_from_data:
            return
        if "parameters" not in self.info:
            raise ConfigError("model.generative_from_data needs data whose generative parameters are known "
                              "(data.source=linear_gaussian)")  # fmt: skip
        parameters = self.info["parameters"]
        state_dim = len(parameters["transition"])
        if model.config.latent_dim != state_dim:  # set_linear_gaussian's own error named neither option
            raise ConfigError(f"model.latent_dim={model.config.latent_dim}: model.generative_from_data sets P to the "
                              f"data's linear-Gaussian model, whose state has {state_dim} dimensions (data.state_dim)"
                              f"; set model.latent_dim={state_dim}")  # fmt: skip
        model.set_linear_gaussian(**parameters)
        for parameter in model.generative_parameters():
            parameter.requires_grad_(False)

    def train_batches(self, bundle: DataBundle, model: nn.Module, start) -> DocumentWindows:
        window = model.config.window
        return DocumentWindows(bundle.train, self.trainer.batch_size, self.trainer.seed, bundle.collate, window,
                               window_stride(window, self.options.window_overlap), start=start)  # fmt: skip

    def loss_items(self, batch: dict) -> int:
        """The window's real tokens: its objective and bounds are per token (the free bits' floor holds each
        micro-batch's KL per token, not the step's)."""
        return real_positions(batch)

    def training_step(self, module, batch: dict) -> Tensor:
        model, continues = module.model, batch["carry_mask"]
        carried = {}
        if self.carry is not None and bool(continues.any()):
            carried = {"carry": self.carry.to(continues.device), "carry_mask": continues}
        stride = window_stride(model.config.window, self.options.window_overlap)
        output = model(**document_inputs(batch), **carried, carry_index=stride - 1,
                       kl_weight=kl_weight(module.global_step + 1, self.options.kl_warmup_steps))  # fmt: skip
        self.carry = output.carry if self.options.carry else None
        for name in ("loss", *BOUNDS):
            module.log_step_mean(f"train/{name}", getattr(output, name).detach(), prog_bar=name == "loss",
                       batch_size=len(continues))  # fmt: skip
        return output.loss

    def save_state(self, module, checkpoint: dict) -> None:
        """Every process's lanes, in rank order (every process runs this hook)."""
        carry = self.carry if self.carry is None or world()[1] == 1 else module.all_gather(self.carry).flatten(0, 1)
        checkpoint["vmt_carry"] = None if carry is None else carry.detach().cpu()

    def load_state(self, checkpoint: dict) -> None:
        carry = checkpoint.get("vmt_carry")
        if carry is not None:
            rank, world_size = world()
            lanes = len(carry) // world_size
            self.carry = carry[rank * lanes : (rank + 1) * lanes]

    def new_metrics(self) -> DocumentMetrics:
        from markovformer.training.metrics import DocumentMetrics  # deferred: see Task.new_metrics

        return DocumentMetrics()

    def start_scoring(self) -> None:
        self.walk = DocumentWalk(self.options.carry, self.options.iw_samples)

    def scoring_settings(self, beam_size: int = 1) -> dict:
        return {"iw_samples": self.options.iw_samples} if self.options.iw_samples else {}

    def score(self, model: nn.Module, batch: dict, metrics: DocumentMetrics, beam_size: int = 1) -> None:
        self.walk(model, batch, metrics)

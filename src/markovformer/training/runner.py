"""Build, train, resume and evaluate a run from its RunConfig. The CLI is a thin layer over these functions.

A run directory holds::

    config.yaml        the resolved config (what `--resume` and `eval` rebuild from)
    environment.json   versions, machine, command line, git commit
    data.json          the data's info and the record of its splits (what went where)
    tokenizer/         when the data has one
    checkpoints/       step-NNNNNN.ckpt and last.ckpt (safetensors, atomic; model + optimizer + schedule + loops)
    logs/metrics.csv   CSV log; tensorboard/ the same for TensorBoard
    model/             the final model (save_pretrained format)
    metrics.json       final validation metrics (and the data's reference values)
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader

from markovformer.atomic import atomic_write
from markovformer.data.bundle import DataBundle
from markovformer.data.sources import DATA_SOURCES, SOURCE_TASKS
from markovformer.models.pretrained import WEIGHTS_NAME
from markovformer.models.registry import MODEL_FAMILIES, head_class
from markovformer.training.batches import DocumentWindows, EpochBatches, window_stride
from markovformer.training.checkpoint import SafetensorsCheckpointIO
from markovformer.training.environment import check_accelerator, environment_record
from markovformer.training.fingerprint import (
    check_checkpoint_fingerprint,
    check_model_fingerprint,
    run_fingerprint,
    write_model_fingerprint,
)
from markovformer.training.metrics import TaskMetrics
from markovformer.training.metrics_log import AppendingCSVLogger
from markovformer.training.run_checks import (
    check_tensors_match,
    read_data_info,
    resumable_checkpoint,
    resumed_config,
)
from markovformer.training.run_config import (
    ConfigError,
    RunConfig,
    build_dataclass,
    load_yaml,
    plain_values,
    resolve_run_config,
    suggest,
)
from markovformer.training.run_lock import is_first_process, run_dir_lock
from markovformer.training.run_report import describe_run, document_log_likelihood, report_results
from markovformer.training.step_checkpoints import RunFingerprint, StepCheckpoints
from markovformer.training.task import DocumentWalk, SequenceTask, score_batch

RESOLVED_CONFIG = "config.yaml"
LAST_CHECKPOINT = "last.ckpt"


def build_data(config: RunConfig) -> DataBundle:
    values = dict(config.data)
    name = values.pop("source")
    if name not in DATA_SOURCES:
        raise ConfigError(f"data.source={name!r} is not a data source{suggest(name, DATA_SOURCES)}; "
                          f"see `markovformer data list`")  # fmt: skip
    if config.task not in SOURCE_TASKS[name]:
        raise ConfigError(f"data.source={name!r} feeds {SOURCE_TASKS[name]}, not task={config.task!r}")
    source_class = DATA_SOURCES[name]
    if "task" in {field.name for field in dataclasses.fields(source_class)}:  # a source that can feed several tasks
        if values.setdefault("task", config.task) != config.task:
            raise ConfigError(f"data.task={values['task']!r} disagrees with task={config.task!r}")
    source = build_dataclass(source_class, values, "data")
    return source.build(seed=config.trainer.seed)


def build_model(config: RunConfig, info: dict) -> torch.nn.Module:
    """The task's head, with input and label sizes taken from the data (a conflicting explicit value is an error)."""
    head = head_class(config.model_type, config.task)
    config_class = MODEL_FAMILIES[config.model_type].config_class
    try:
        values = config_class.upgrade_keys(dict(config.model))  # runs written before a field was renamed
    except ValueError as error:
        raise ConfigError(f"model: {error}") from error
    fields = {field.name for field in dataclasses.fields(config_class)}
    for key in ("vocab_size", "input_dim", "num_labels", "pad_token_id", "bos_token_id", "eos_token_id"):
        if key not in info or key not in fields or (key == "num_labels" and config.task == "causal_lm"):
            continue
        if values.get(key) not in (None, info[key]):
            raise ConfigError(f"model.{key}={values[key]!r} disagrees with the data, which has {key}={info[key]}")
        values[key] = info[key]
    model_config = build_dataclass(config_class, values, "model")
    try:
        model = head(model_config)
    except ValueError as error:
        raise ConfigError(f"model: {error}") from error
    except (RuntimeError, MemoryError) as error:  # torch reports a failed allocation as a RuntimeError
        if not isinstance(error, MemoryError) and "allocate" not in str(error):
            raise
        raise ConfigError(f"model: not enough memory to build it ({str(error).splitlines()[0][:160]}); lower "
                          f"model.d_model, model.n_layers or the vocabulary") from None  # fmt: skip
    if config.trainer.activation_checkpointing:
        if not hasattr(getattr(model, "model", None), "gradient_checkpointing"):
            raise ConfigError(f"trainer.activation_checkpointing: model_type={config.model_type!r} does not support it")
        model.model.gradient_checkpointing = True
    return model


def check_context_coverage(config: RunConfig, bundle: DataBundle) -> None:
    """ConfigError when validation would score some position with less context than the largest n of
    ``trainer.orders``: text windows must overlap by at least that much (``data.overlap``)."""
    overlap = bundle.splits.get("overlap")
    longest = max(config.trainer.orders, default=0)
    if overlap is not None and longest > overlap:
        raise ConfigError(f"trainer.orders reaches n={longest} but data.overlap={overlap}: the first "
                          f"positions of each validation window would see fewer than n tokens; set data.overlap "
                          f">= {longest}")  # fmt: skip


def check_whole_documents(config: RunConfig, bundle: DataBundle) -> None:
    """ConfigError when a VMT run's documents overlap (text windows with ``data.overlap``): the VMT reads each
    example as a document of its own, so overlapping ones would score tokens twice."""
    if config.task == "vmt" and bundle.splits.get("overlap"):
        raise ConfigError(f"data.overlap={bundle.splits['overlap']} makes the text's windows overlap, but task=vmt "
                          f"reads each window as a document of its own; set data.overlap=0")  # fmt: skip


def _loaders(
    config: RunConfig, bundle: DataBundle, trainer: L.Trainer, model: torch.nn.Module
) -> tuple[DataLoader, DataLoader]:
    tc = config.trainer
    if config.task == "vmt":
        window = model.config.window
        stride = window_stride(window, tc.window_overlap)
        stream = DocumentWindows(bundle.train, tc.batch_size, tc.seed, bundle.collate, window, stride,
                                 start=lambda: trainer.global_step)  # fmt: skip
    else:
        lengths = None if bundle.lengths is None else bundle.lengths(bundle.train)
        stream = EpochBatches(bundle.train, tc.batch_size, tc.seed, bundle.collate, start=lambda: trainer.global_step,
                              orders=tc.orders, lengths=lengths)  # fmt: skip
    # Own generators: a DataLoader draws its base seed from the global RNG at every new iterator, which would shift
    # the dropout stream between an uninterrupted run and a resumed one.
    train = DataLoader(stream, batch_size=None, num_workers=tc.num_workers, generator=torch.Generator())
    val = DataLoader(bundle.val, batch_size=tc.eval_batch_size, collate_fn=bundle.collate, generator=torch.Generator())
    return train, val


class PrintProgress(L.Callback):
    """Progress as lines (for logs and pipes) every ``every`` steps and after each validation, with the run's wall
    clock: the seconds of earlier processes up to the checkpoint this one resumed from, plus this process's."""

    def __init__(self, every: int, total: int) -> None:
        self.every, self.total, self.start, self.earlier = every, total, time.perf_counter(), 0.0

    @property
    def seconds(self) -> float:
        return self.earlier + time.perf_counter() - self.start

    def state_dict(self) -> dict:
        return {"train_seconds": self.seconds}

    def load_state_dict(self, state_dict: dict) -> None:
        self.earlier, self.start = float(state_dict["train_seconds"]), time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if trainer.is_global_zero and (step % self.every == 0 or step == self.total):
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
            print(f"step {step:>6}/{self.total}  train loss {loss:.4f}  lr {lr:.2e}  {self.seconds:7.1f}s", flush=True)

    def on_validation_end(self, trainer, module) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or not trainer.is_global_zero:
            return
        shown = "  ".join(
            f"{k[4:]} {float(v):.4f}" for k, v in trainer.callback_metrics.items() if k.startswith("val/")
        )
        print(f"step {trainer.global_step:>6}/{self.total}  validation: {shown}", flush=True)


def _write_json(path: Path, values: dict) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(values, indent=2, default=str) + "\n"))


def _write_run_files(run_dir: Path, config: RunConfig, bundle: DataBundle) -> None:
    write_resolved_config(run_dir, config)
    _write_json(run_dir / "environment.json", environment_record())
    sizes = {split: len(getattr(bundle, split)) for split in ("train", "val", "test")}
    _write_json(run_dir / "data.json", {"info": bundle.info, "splits": bundle.splits, "sizes": sizes})
    if bundle.tokenizer is not None:
        bundle.tokenizer.save(run_dir / "tokenizer")


def train(config: RunConfig) -> dict:
    """Train a new run into ``config.output_dir``, holding the run directory's lock while it runs."""
    check_accelerator(config.trainer.accelerator)  # before anything is written
    run_dir = Path(config.output_dir)
    with run_dir_lock(run_dir):
        if is_first_process() and (run_dir / "checkpoints").exists():  # a run killed before it: overwritten
            raise ConfigError(f"output_dir={str(run_dir)!r} already holds a run; resume it with --resume {run_dir} "
                              f"or choose another output_dir")  # fmt: skip
        return _fit(config, resume=False)


def resume(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Continue the run in ``run_dir`` from its last checkpoint. ``overrides`` may change only the keys of
    ``RESUMABLE_KEYS``; a larger ``trainer.max_steps`` extends a run (finished or not), keeping its learning-rate
    schedule (``trainer.decay_steps``). A finished run is refused unless it is extended."""
    run_dir = Path(run_dir)
    if not (run_dir / RESOLVED_CONFIG).is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no {RESOLVED_CONFIG})")
    with run_dir_lock(run_dir):
        config = dataclasses.replace(resolve_run_config(load_yaml(run_dir / RESOLVED_CONFIG)), output_dir=str(run_dir))
        last = run_dir / "checkpoints" / LAST_CHECKPOINT
        done_steps = resumable_checkpoint(last)["global_step"] if last.is_file() else 0
        extended = resumed_config(config, overrides, done_steps)
        check_accelerator(extended.trainer.accelerator)
        finished = (run_dir / "metrics.json").is_file() and done_steps >= extended.trainer.max_steps
        if finished:
            raise ConfigError(f"{run_dir} is a finished run ({done_steps} steps); to train it longer, extend it: "
                              f"--resume {run_dir} trainer.max_steps=N with N > {done_steps}")  # fmt: skip
        if extended != config and is_first_process():
            write_resolved_config(run_dir, extended)
        return _fit(extended, resume=True)


def write_resolved_config(run_dir: Path, config: RunConfig) -> None:
    import yaml

    text = yaml.safe_dump(plain_values(config.to_dict()), sort_keys=False)
    atomic_write(run_dir / RESOLVED_CONFIG, lambda path: path.write_text(text))


def _fit(config: RunConfig, resume: bool) -> dict:
    """Build the data and model, then train (from the last checkpoint when ``resume``); the lock is held."""
    run_dir = Path(config.output_dir)
    last = run_dir / "checkpoints" / LAST_CHECKPOINT
    checkpoint = None
    if resume:
        for stale in last.parent.glob(".*.tmp"):  # a write cut short by a kill; the checkpoints beside it are whole
            stale.unlink()
        checkpoint = resumable_checkpoint(last) if last.is_file() else None
    L.seed_everything(config.trainer.seed, workers=True, verbose=False)
    bundle = build_data(config)
    check_context_coverage(config, bundle)
    check_whole_documents(config, bundle)
    model = build_model(config, bundle.info)
    if config.trainer.compile:
        model.compile()
    task = SequenceTask(model, config.task, config.trainer, bundle.info, tokenizer=bundle.tokenizer)
    tc = config.trainer
    progress = PrintProgress(tc.log_every, tc.max_steps)
    fingerprint = RunFingerprint("")
    log = AppendingCSVLogger(run_dir / "logs" / "metrics.csv")
    trainer = L.Trainer(
        max_steps=tc.max_steps,
        val_check_interval=tc.eval_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        gradient_clip_val=tc.gradient_clip or None,
        precision=tc.precision,
        deterministic=tc.deterministic,
        accelerator=tc.accelerator,
        devices=tc.devices,
        num_nodes=tc.num_nodes,
        strategy=tc.strategy,
        logger=[log, TensorBoardLogger(run_dir, name="tensorboard", version="")],
        callbacks=[
            StepCheckpoints(run_dir / "checkpoints", tc.checkpoint_every, tc.eval_every, tc.keep_checkpoints),
            fingerprint,
            LearningRateMonitor(logging_interval="step"),
            progress,
        ],
        plugins=[SafetensorsCheckpointIO()],
        enable_progress_bar=sys.stdout.isatty(),
        enable_model_summary=False,
        log_every_n_steps=min(tc.log_every, 50),
    )
    if trainer.is_global_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not resume:
            _write_run_files(run_dir, config, bundle)
        describe_run(config, bundle, model)
    fingerprint.fingerprint = run_fingerprint(config, run_dir)
    ckpt_path = None
    if checkpoint is not None:
        check_checkpoint_fingerprint(checkpoint, fingerprint.fingerprint, last)
        check_tensors_match(model, checkpoint["state_dict"], last, prefix="model.")
        log.resume_from_step(checkpoint["global_step"])
        ckpt_path = str(last)
        print(f"resuming from {last} (step {checkpoint['global_step']})", flush=True)
    else:
        if resume:
            print(f"no checkpoint in {run_dir / 'checkpoints'} yet: starting from step 0", flush=True)
        log.resume_from_step(0)  # rows of a process killed before its first checkpoint are logged again
    train_loader, val_loader = _loaders(config, bundle, trainer, model)
    trainer.fit(task, train_loader, val_loader, ckpt_path=ckpt_path)
    seconds = progress.seconds  # this process's fit, plus the earlier ones' up to the checkpoint it resumed from
    metrics = {k[4:]: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    if trainer.global_step % tc.eval_every != 0 or not metrics:  # the last step was not validated yet
        trainer.validate(task, val_loader, verbose=False)
        metrics = {k[4:]: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    if not trainer.is_global_zero:
        return metrics
    model.save_pretrained(run_dir / "model")
    write_model_fingerprint(run_dir / "model", fingerprint.fingerprint, run_dir / "model" / WEIGHTS_NAME)
    results = {"val": metrics, "steps": trainer.global_step, "train_seconds": seconds,
               "reference": bundle.info.get("reference", {})}  # fmt: skip
    _write_json(run_dir / "metrics.json", results)
    report_results(results, model, bundle)
    print(f"run directory: {run_dir}  (model/, checkpoints/, logs/metrics.csv, tensorboard/, metrics.json)")
    return results


def load_run(target: str | Path) -> tuple[RunConfig, torch.nn.Module, Path]:
    """A trained run's config and model, from a run directory (its final model/, else its last checkpoint) or from
    one checkpoint file inside a run's checkpoints/ folder. The weights must belong to the run (their fingerprint,
    ``training.fingerprint``) and match the model's tensor names, shapes and dtypes; takes no lock (reads only)."""
    from markovformer.training.checkpoint import load_checkpoint_file

    target = Path(target)
    if not target.exists():
        raise ConfigError(f"{target}: no such run directory or checkpoint")
    run_dir = target if target.is_dir() else target.parent.parent
    if not (run_dir / RESOLVED_CONFIG).is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no {RESOLVED_CONFIG})")
    config = resolve_run_config(load_yaml(run_dir / RESOLVED_CONFIG))
    data_info = read_data_info(run_dir)
    fingerprint = run_fingerprint(config, run_dir)
    if target.is_dir() and (run_dir / "model").is_dir():
        return config, load_final_model(config, data_info, run_dir / "model", fingerprint), run_dir
    checkpoint = target if target.is_file() else run_dir / "checkpoints" / LAST_CHECKPOINT
    if not checkpoint.is_file():
        raise ConfigError(f"{run_dir}: holds neither a final model/ nor checkpoints/{LAST_CHECKPOINT}")
    try:
        loaded = load_checkpoint_file(checkpoint)
    except (ValueError, OSError) as error:
        raise ConfigError(f"{checkpoint}: cannot read it ({error})") from None
    check_checkpoint_fingerprint(loaded, fingerprint, checkpoint)
    state = loaded.get("state_dict")
    if not isinstance(state, dict):
        raise ConfigError(f"{checkpoint}: not a training checkpoint (no state_dict)")
    model = build_model(config, data_info)
    prefix = "model."
    check_tensors_match(model, state, checkpoint, prefix=prefix)
    model.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
    return config, model, run_dir


def load_final_model(config: RunConfig, data_info: dict, model_dir: Path, fingerprint: str) -> torch.nn.Module:
    """The run's saved model/: its fingerprint checked, then its tensors' names, shapes and dtypes, then loaded."""
    from safetensors.torch import load_file

    weights = model_dir / WEIGHTS_NAME
    if not weights.is_file():
        raise ConfigError(f"{model_dir}: no {WEIGHTS_NAME} here")
    check_model_fingerprint(model_dir, fingerprint, weights)
    try:
        stored = load_file(str(weights))
    except Exception as error:  # safetensors raises its own error types, and OSError, for damaged files
        raise ConfigError(f"{weights}: not a readable safetensors file ({type(error).__name__}: {error})") from None
    model = build_model(config, data_info)
    check_tensors_match(model, stored, weights, partial=True)
    try:
        return head_class(config.model_type, config.task).from_pretrained(model_dir)
    except (ValueError, RuntimeError, OSError) as error:
        raise ConfigError(f"{model_dir}: cannot load it ({error})") from None


def check_same_tokenizer(run_dir: Path, bundle: DataBundle) -> None:
    """ConfigError unless the rebuilt data's tokenizer is the one saved with the run: a tokenizer fitted on other
    text (say, after ``--data path=...``) would give the model ids that mean other tokens."""
    import tempfile

    saved = run_dir / "tokenizer"
    if not saved.is_dir() and bundle.tokenizer is None:
        return
    if not saved.is_dir() or bundle.tokenizer is None:
        raise ConfigError(f"{run_dir}: the run {'has' if saved.is_dir() else 'has no'} saved tokenizer but the "
                          f"rebuilt data {'has none' if bundle.tokenizer is None else 'has one'}")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        bundle.tokenizer.save(Path(folder))
        rebuilt = {p.name: p.read_bytes() for p in Path(folder).iterdir()}
    if rebuilt != {p.name: p.read_bytes() for p in saved.iterdir()}:
        raise ConfigError(f"the data rebuilt with these options has another tokenizer than the one saved in {saved} "
                          "(it was fitted on other text): its ids would mean other tokens to this model")  # fmt: skip


def evaluate(target: str | Path, split: str = "val", data_overrides: dict | None = None, beam_size: int = 1) -> dict:
    """Metrics of a trained run on a split of its data (rebuilt from its config, or from overridden data options).
    Translation runs are decoded with beam search of ``beam_size`` (1 = greedy) for BLEU. VMT runs walk the split's
    documents as validation does, and the result carries the documents' exact log-likelihood when the data has it."""
    if split not in ("train", "val", "test"):
        raise ConfigError(f"split={split!r} must be train, val or test")
    config, model, run_dir = load_run(target)
    if data_overrides:
        config = dataclasses.replace(config, data={**config.data, **data_overrides})
    bundle = build_data(config)
    check_context_coverage(config, bundle)
    check_whole_documents(config, bundle)
    check_same_tokenizer(run_dir, bundle)
    if len(getattr(bundle, split)) == 0:
        raise ConfigError(f"the {split} split of {run_dir}'s data is empty (data.source={config.data['source']!r}): "
                          f"nothing to evaluate; choose another --split or give the data a {split} part")  # fmt: skip
    orders = config.trainer.orders
    metrics = TaskMetrics(config.task, bundle.info.get("num_labels"), bundle.info.get("label_names"), orders,
                          tokenizer=bundle.tokenizer)  # fmt: skip
    model.eval()
    loader = DataLoader(getattr(bundle, split), batch_size=config.trainer.eval_batch_size, collate_fn=bundle.collate)
    documents = DocumentWalk(config.trainer.carry) if config.task == "vmt" else None
    with torch.no_grad():
        for batch in loader:
            score_batch(model, batch, metrics, orders, beam_size, documents)
    results = {"split": split, "run_dir": str(run_dir), "metrics": metrics.compute()}
    exact = document_log_likelihood(bundle.info.get("reference", {}), split)
    if exact is not None:
        results["exact_log_likelihood_per_token"] = exact
    reference = bundle.info.get("reference", {})
    if "entropy_rate" in reference:  # a Markov-chain source: the floor of the loss, and the true chain's own score
        results["entropy_rate"] = reference["entropy_rate"]
        if f"oracle_{split}_loss" in reference:
            results["true_chain_loss"] = reference[f"oracle_{split}_loss"]
    return results


__all__ = ["build_data", "build_model", "evaluate", "load_run", "resume", "train"]

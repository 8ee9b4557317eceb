"""Train and resume runs: the entry points the CLI and the experiments call (``train``, ``resume``; ``evaluate`` and
``load_run`` are here too for the experiments and the Python API, while ``markovformer eval`` takes ``evaluate`` from
``training.evaluation``, which imports no Lightning); building, the run directory, reporting and evaluation live in
the modules beside this one."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader

from markovformer.advice import suggest
from markovformer.atomic import WRITE_ERRORS
from markovformer.data.bundle import DataBundle
from markovformer.training.build import (
    build_data,
    build_model,
    build_run_task,
    check_model_before_data,
    check_new_run,
)
from markovformer.training.checkpoint import step_checkpoints
from markovformer.training.checkpoint_io import SafetensorsCheckpointIO
from markovformer.training.data_record import check_same_data
from markovformer.training.divergence import DivergenceGuard
from markovformer.training.environment import (
    check_accelerator,
    check_cores,
    check_nodes,
    cluster_plugins,
    usable_cores,
)
from markovformer.training.evaluation import evaluate, first_batch_metrics, scoring_loader
from markovformer.training.fingerprint import check_checkpoint_fingerprint, run_fingerprint
from markovformer.training.init_from import initialise_from, initialised_line, takes_token_rows, tokenizer_source
from markovformer.training.isolation import built_on_the_cpu, process_settings_kept, random_states_kept
from markovformer.training.metrics_log import (
    AppendingCSVLogger,
    RunTensorBoardLogger,
    tensorboard_thread_errors_left_to_the_run,
)
from markovformer.training.module import TrainingModule
from markovformer.training.progress import PrintProgress, StepLearningRateMonitor
from markovformer.training.run_checks import (
    check_tensors_match,
    check_trained_settings,
    resumable_checkpoint,
    resume_edits,
    resume_point,
    resumed_config,
    trained_settings,
)
from markovformer.training.run_config import RunConfig, plain_values
from markovformer.training.run_dir import (
    LAST_CHECKPOINT,
    RESOLVED_CONFIG,
    config_to_resume,
    continue_with_resume,
    finished_steps,
    load_run,
    mark_unfinished,
    read_final_metrics,
    record_resume,
    remove_stale_files,
    resume_advice,
    write_final_files,
    write_resolved_config,
    write_run_files,
    write_start_files,
)
from markovformer.training.run_lock import LOCK_FILE, run_dir_lock
from markovformer.training.run_report import describe_run, report_results
from markovformer.training.step_checkpoints import (
    LastValidation,
    ResumableEarlyStopping,
    RunFingerprint,
    StepCheckpoints,
)
from markovformer.training.tasks import Task
from markovformer.training.termination import StopTogether
from markovformer.training.trainer_config import (
    MAX_DEFAULT_THREADS,
    ConfigError,
    RunTerminated,
    TrainerConfig,
    check_logger,
)
from markovformer.training.worker_signals import worker_options


def loaders(task: Task, bundle: DataBundle, trainer: L.Trainer, model: torch.nn.Module) -> tuple[DataLoader, ...]:
    """The training stream the task builds, starting at the trainer's step, and the validation split's batches (each
    process scores its own share of the split, every example exactly once: ``RankShare``). ConfigError when the
    stream cannot fill one global batch."""
    tc = task.trainer
    # the stream is indexed by batch: an optimiser step takes accumulate_grad_batches of them
    stream = task.train_batches(bundle, model, start=lambda: trainer.global_step * tc.accumulate_grad_batches)
    check_fills = getattr(stream, "check_fills", None)  # epoch-wise batches (not windows walked by documents)
    if check_fills is not None:
        try:
            check_fills(trainer.world_size)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    # Own generators: a DataLoader draws its base seed from the global RNG at every new iterator, which would shift
    # the dropout stream between an uninterrupted run and a resumed one.
    train = DataLoader(stream, batch_size=None, generator=torch.Generator(), **worker_options(tc.num_workers))
    return train, scoring_loader(bundle.val, bundle.collate, tc)


def is_run_writer(tc: TrainerConfig) -> bool:
    """Whether this process writes the run: Lightning's own global rank 0 for the run's strategy and devices. A rank
    variable inherited from the environment does not count for a single-process run."""
    if tc.devices * tc.num_nodes == 1:
        return True
    probe = L.Trainer(accelerator=tc.accelerator, devices=tc.devices, num_nodes=tc.num_nodes, strategy=tc.strategy,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, plugins=cluster_plugins(tc.devices * tc.num_nodes))  # fmt: skip
    return probe.is_global_zero


def metrics_loggers(tc: TrainerConfig, run_dir: Path, log: AppendingCSVLogger) -> list:
    """The run's own logs/metrics.csv, then the logger ``trainer.logger`` chooses."""
    if tc.logger == "tensorboard":
        return [log, RunTensorBoardLogger(run_dir, log)]
    if tc.logger == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        return [log, WandbLogger(save_dir=str(run_dir), name=run_dir.name)]
    if tc.logger == "mlflow":
        from lightning.pytorch.loggers import MLFlowLogger

        return [log, MLFlowLogger(experiment_name=run_dir.name, save_dir=str(run_dir / "mlruns"))]
    return [log]


def check_monitor(early_stopping: dict | None, metrics: dict) -> None:
    """ConfigError unless early stopping's monitor is one of the validation ``metrics`` (names without ``val/``)."""
    if early_stopping and early_stopping["monitor"].removeprefix("val/") not in metrics:
        logged = [f"val/{name}" for name in metrics]
        raise ConfigError(f"trainer.early_stopping.monitor={early_stopping['monitor']!r} is not a metric this run "
                          f"validates; it logs {', '.join(logged)}{suggest(early_stopping['monitor'], logged)}")


def training_threads(tc: TrainerConfig) -> int:
    """torch's intra-op threads for the run: ``trainer.threads``, else the current setting capped at
    ``MAX_DEFAULT_THREADS`` and at the cores this process may run on."""
    if tc.threads is not None:
        return tc.threads
    return max(1, min(torch.get_num_threads(), MAX_DEFAULT_THREADS, usable_cores()))


def train(config: RunConfig) -> dict:
    """Train a new run into ``config.output_dir``, holding the run directory's lock while it runs. Returns the run's
    results, what its metrics.json holds (``val``: the last validation metrics, ``steps``, ``train_seconds``, the
    data's ``reference`` values, ...); in a process that does not write the run (a rank above 0), the validation
    metrics alone."""
    check_new_run(config)  # before anything is written
    run_dir = Path(config.output_dir)
    writer = is_run_writer(config.trainer)
    created = [folder for folder in (run_dir, *run_dir.parents) if not folder.exists()]  # the run's, then parents
    with run_dir_lock(run_dir, writer):
        if writer and ((run_dir / RESOLVED_CONFIG).exists() or (run_dir / "checkpoints").exists()):
            raise ConfigError(f"output_dir={str(run_dir)!r} already holds a run{_continue_advice(run_dir)} or "
                              f"choose another output_dir")  # fmt: skip
        try:
            return _fit(config, writer, resume=False)
        except BaseException:
            if writer and created and {path.name for path in run_dir.iterdir()} == {LOCK_FILE}:
                (run_dir / LOCK_FILE).unlink()  # a run refused before it wrote anything leaves no directory behind
                run_dir.rmdir()  # (still under the lock: no other writer can have started in it)
                with contextlib.suppress(OSError):  # nor the parents it made, unless another run is in one now
                    for folder in created[1:]:
                        folder.rmdir()
            raise


def _continue_advice(run_dir: Path) -> str:
    """How to go on with the run in ``run_dir``: resume a started one, and train on from a finished one
    (``_finished_run``; `--resume` alone refuses it)."""
    finished = finished_steps(run_dir)
    if finished is None:
        return f"; resume it with {resume_advice(run_dir)}"
    early_stopped = "early_stopping" in read_final_metrics(run_dir)
    what, how = _finished_run(run_dir, finished, early_stopped)
    return f", finished ({what}): {how}{'' if early_stopped else ','}"  # a comma ends "with N > 300"


def _finished_run(run_dir: Path, finished: int, early_stopped: bool) -> tuple[str, str]:
    """What the run in ``run_dir``, finished after ``finished`` steps, is and how to train on from it, as a
    refusal's words: an extension (a larger max_steps, keeping its schedule), or, where early stopping ended it (an
    extension would stop again), a new run from its weights."""
    if early_stopped:
        return (f"early stopping ended it at step {finished}",
                f"start a new run from its weights (init_from={str(run_dir)!r})")  # fmt: skip
    return f"{finished} steps", f"extend it with {resume_advice(run_dir, 'trainer.max_steps=N')} with N > {finished}"


def resume(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Continue the run in ``run_dir`` from its last checkpoint. ``overrides`` may change only the keys of
    ``RESUMABLE_KEYS``; a larger ``trainer.max_steps`` extends a run (finished or not), keeping its learning-rate
    schedule (``trainer.decay_steps``). A finished run is refused unless it is extended. A run killed while it
    started or finished is completed: its missing files are written. Returns what ``train`` returns."""
    config = config_to_resume(run_dir, overrides)
    run_dir = Path(config.output_dir)
    writer = is_run_writer(config.trainer)
    with run_dir_lock(run_dir, writer):
        last = resume_point(run_dir / "checkpoints" / LAST_CHECKPOINT)
        saved = resumable_checkpoint(last) if last.is_file() else None
        trained = config
        if saved is not None:  # config.yaml as the checkpoint was trained (not edited since but for resumable keys)
            check_trained_settings(saved, config, last, run_dir / RESOLVED_CONFIG)
            trained, edits = resume_edits(saved, config)
            overrides = [*edits, *overrides]
        done_steps = saved["global_step"] if saved is not None else 0
        finished = finished_steps(run_dir)
        if finished is not None and finished < trained.trainer.max_steps and trained.trainer.early_stopping is None:
            # a run without early stopping ends at its max_steps: config.yaml's larger one was raised there by hand
            # after a checkpoint that predates the record resume_edits reads; an extension, as for a newer run
            overrides = [f"trainer.max_steps={trained.trainer.max_steps}", *overrides]
            trained = dataclasses.replace(trained, trainer=dataclasses.replace(trained.trainer, max_steps=finished))
        extended = resumed_config(trained, overrides, done_steps)
        check_accelerator(extended.trainer.accelerator)
        check_logger(extended.trainer.logger)
        check_nodes(extended.trainer.num_nodes)
        check_cores(extended.trainer.num_workers, extended.trainer.threads)
        early_stopped = finished is not None and finished < trained.trainer.max_steps  # an extension stops there
        if early_stopped or (finished is not None and finished >= extended.trainer.max_steps):
            what, how = _finished_run(run_dir, finished, early_stopped)
            raise ConfigError(f"{run_dir} is a finished run ({what}); to train on, {how}")
        return _fit(extended, writer, resume=True, rewrite_config=extended != config)


def complete_run(config: RunConfig) -> dict:
    """The results (metrics.json) of the run in ``config.output_dir`` trained to its end: a finished run is only
    read, a started one (killed at any point) resumed, and a new one trained. Experiments run their cells with it."""
    run_dir = Path(config.output_dir)
    if finished_steps(run_dir) is not None:
        return read_final_metrics(run_dir)
    if (run_dir / RESOLVED_CONFIG).is_file():
        return resume(run_dir)
    return train(config)


def _fit(config: RunConfig, writer: bool, resume: bool, rewrite_config: bool = False) -> dict:
    """``_build_and_fit`` as in a fresh process, whatever the caller's process holds, which it finds as it was
    however the run ends (an error, a Ctrl-C): under the run's intra-op thread count (``training_threads``) and
    default dtype float32 (``process_settings_kept``), with the global random states ``seed_everything`` sets for
    the run put back after it (``random_states_kept``), its data and model built on the CPU (``built_on_the_cpu``;
    its accelerator, ``trainer.accelerator``, moves them). A failed write of TensorBoard's writer thread is the run's
    one error, its traceback not printed too (``tensorboard_thread_errors_left_to_the_run``). A write that fails for
    a cause outside the run (``WRITE_ERRORS``) once it has a config.yaml says how to resume it
    (``continue_with_resume``)."""
    try:
        with (process_settings_kept(training_threads(config.trainer)), random_states_kept(),
              tensorboard_thread_errors_left_to_the_run()):  # fmt: skip
            return _build_and_fit(config, writer, resume, rewrite_config)
    except OSError as error:
        run_dir = Path(config.output_dir)
        said = "; " in (error.strerror or "")  # the final files say what a resume does
        if said or error.errno not in WRITE_ERRORS or not (run_dir / RESOLVED_CONFIG).is_file():
            raise
        raise continue_with_resume(error, run_dir) from error


@built_on_the_cpu
def _build_and_fit(config: RunConfig, writer: bool, resume: bool, rewrite_config: bool) -> dict:
    """Build the data and model, then train (from the last checkpoint when ``resume``); the writer holds the lock
    and writes the run's files, the other processes of a multi-process run write nothing. A resume changes the
    run (marks it unfinished, writes ``config`` when ``rewrite_config``) only once every check has passed, apart
    from the start files a killed start left out: a refused one leaves a finished run finished, its config.yaml the
    one it was trained with."""
    run_dir = Path(config.output_dir)
    if writer:  # what a killed start or resume left
        remove_stale_files(run_dir)
    last = resume_point(run_dir / "checkpoints" / LAST_CHECKPOINT)
    checkpoint = resumable_checkpoint(last) if resume and last.is_file() else None
    L.seed_everything(config.trainer.seed, workers=True, verbose=False)
    fine_tuning = config.init_from is not None and checkpoint is None
    # a resumed run encodes with its saved tokenizer, a fine-tuning one with its source's (the ids its weights know)
    check_model_before_data(config)
    source = tokenizer_source(config) if fine_tuning else None
    bundle = build_data(config, run_dir if resume else source)
    task = build_run_task(config, bundle)
    model = build_model(config, bundle.info)
    started_from = None  # what a fine-tuning run took (init_from), for environment.json
    if fine_tuning:  # a resumed run's checkpoint holds its own weights
        started_from = initialise_from(model, config.init_from, config.init_from_skip)
        print(initialised_line(started_from), flush=True)
        if bundle.tokenizer is not None and source is None and takes_token_rows(model, config.init_from_skip):
            # after the weights loaded: a missing source or a shape mismatch is the one line a user then reads
            print(f"init_from={config.init_from!r} keeps no tokenizer: this run fitted its own, whose ids are the "
                  f"weights' only if it was fitted on the same text with the same options", flush=True)  # fmt: skip
    task.prepare_model(model)
    if config.trainer.compile:
        model.compile()  # forward, and the states scoring reads (ScoresOutsideForward.compile)
    module = TrainingModule(model, task)
    tc = config.trainer
    progress = PrintProgress(tc.log_every, tc.max_steps, task.train_loss_label, task.metric_labels,
                             bar=sys.stdout.isatty(), checkpoint_every=tc.checkpoint_every,
                             tokens_of=task.batch_tokens)  # fmt: skip
    fingerprint = RunFingerprint("", trained_settings(config))
    log = AppendingCSVLogger(run_dir / "logs" / "metrics.csv")
    guard = DivergenceGuard(run_dir, tc.lr, check_gradients=tc.precision != "16-mixed")
    validation = LastValidation()
    trainer = lightning_trainer(tc, run_dir, log, [fingerprint, guard, validation, progress])
    if not bundle.val:
        raise ConfigError(f"the validation split of data.source={config.data['source']!r} has no examples: give it "
                          f"a share of the data (data.fractions, or the source's validation size: `markovformer "
                          f"data show {config.data['source']}`)")  # fmt: skip
    if len(bundle.val) < trainer.world_size:
        raise ConfigError(f"the validation split has {len(bundle.val)} examples, fewer than the {trainer.world_size} "
                          f"processes that score it; give it more or train on fewer devices")  # fmt: skip
    train_loader, val_loader = loaders(task, bundle, trainer, model)  # before any file: it checks the batch size
    check_monitor(tc.early_stopping, first_batch_metrics(task, model, bundle))  # the model reads the data
    if resume:  # in every process (each hashes the data files): the writer alone refusing left the others waiting
        check_same_data(run_dir, bundle)
    if writer:
        if resume:
            write_start_files(run_dir, bundle, keep_existing=True)  # only those a killed start left out
        else:
            write_run_files(run_dir, config, bundle, started_from)
    fingerprint.fingerprint = run_fingerprint(config, run_dir)
    if checkpoint is not None:
        check_checkpoint_fingerprint(checkpoint, fingerprint.fingerprint, last)
        check_tensors_match(model, checkpoint["state_dict"], last, prefix="model.")
    if writer:
        if resume:
            mark_unfinished(run_dir)  # from here on the old model/ and metrics.json no longer stand
            record_resume(run_dir, 0 if checkpoint is None else int(checkpoint["global_step"]), started_from)
            if rewrite_config:
                write_resolved_config(run_dir, config)
        describe_run(config, bundle, model)
    ckpt_path = None
    if checkpoint is not None:
        log.resume_from_step(checkpoint["global_step"])
        ckpt_path = str(last)
        print(f"resuming from {last} (step {checkpoint['global_step']})", flush=True)
    else:
        if resume:
            print(f"no checkpoint in {run_dir / 'checkpoints'} yet: starting from step 0", flush=True)
        log.resume_from_step(0)  # rows of a process killed before its first checkpoint are logged again
    if writer:  # the resolved config: TensorBoard's HParams and hparams.yaml, W&B's and MLflow's run parameters
        for logger in trainer.loggers:  # (after resume_from_step: TensorBoard's writer purges the steps logged again)
            logger.log_hyperparams(plain_values(config.to_dict()))
    interrupt_handler = signal.getsignal(signal.SIGINT)  # Lightning ignores SIGINT from a first Ctrl-C on
    try:
        trainer.fit(module, train_loader, val_loader, ckpt_path=ckpt_path)
        stopped = None  # what metrics.json says of early stopping that ended the run
        for stopper in (c for c in trainer.callbacks if isinstance(c, ResumableEarlyStopping)):
            if writer and (line := stopper.stop_line(trainer)) is not None:
                print(line, flush=True)
            stopped = stopper.stopped(trainer)
        seconds = progress.seconds  # this process's fit, plus the earlier ones' up to the checkpoint it resumed from
        if validation.metrics_at(trainer.global_step) is None:  # the last step was not validated yet
            log.after_fit(trainer.global_step)
            trainer.validate(module, val_loader, verbose=False)  # (Lightning handles SIGTERM here too)
    except SystemExit as stop:  # SIGTERM: Lightning's SIGTERMException, a SystemExit without a code (the command
        # exited 0 as if the run had finished); Ctrl-C: the sys.exit(1) of Lightning's `except KeyboardInterrupt`
        terminated = isinstance(stop, SIGTERMException)
        if not (terminated or isinstance(stop.__context__, KeyboardInterrupt)):
            raise  # any other exit (a callback's sys.exit) is not a signal's
        if not terminated:  # the caller's handler back: it may go on (a notebook)
            signal.signal(signal.SIGINT, interrupt_handler)
        saved = step_checkpoints(run_dir / "checkpoints")
        last = f"its last checkpoint is {saved[-1].name}" if saved else "it has no checkpoint yet"
        how = "terminated (SIGTERM)" if terminated else "interrupted (SIGINT, Ctrl-C)"
        raise RunTerminated(f"the run was {how} at step {trainer.global_step} of {tc.max_steps}: {last}; continue "
                            f"with {resume_advice(run_dir, command=True)}", signal.SIGTERM if terminated else
                            signal.SIGINT, shown=writer) from None  # fmt: skip
    metrics = validation.metrics_at(trainer.global_step)
    if not writer:
        return metrics
    results = {"val": metrics, "steps": trainer.global_step, "train_seconds": seconds,
               "threads": torch.get_num_threads(),  # the intra-op threads it trained with (training_threads)
               **({"train_tokens": progress.tokens} if progress.tokens is not None else {}), **task.scoring_settings(),
               **({"train_step_seconds": progress.step_seconds} if progress.step_seconds is not None else {}),
               **({"early_stopping": stopped} if stopped is not None else {}),
               "reference": bundle.info.get("reference", {})}  # fmt: skip
    try:
        write_final_files(run_dir, model, fingerprint.fingerprint, results)
    except KeyboardInterrupt:  # the one line says what a Ctrl-C here left: a whole run, not yet finished
        raise RunTerminated(f"the run was interrupted (SIGINT, Ctrl-C) while writing its final files after step "
                            f"{trainer.global_step}: it is not finished; finish it with "
                            f"{resume_advice(run_dir, command=True)}", signal.SIGINT) from None  # fmt: skip
    report_results(results, model, bundle, task.metric_labels)
    logs = "logs/metrics.csv, tensorboard/" if tc.logger == "tensorboard" else "logs/metrics.csv"
    print(f"run directory: {run_dir}  (model/, checkpoints/, {logs}, metrics.json)")
    return results


def lightning_trainer(tc: TrainerConfig, run_dir: Path, log: AppendingCSVLogger, callbacks: list) -> L.Trainer:
    """The Lightning Trainer of a run: step-based validation and checkpoints (safetensors), the CSV and TensorBoard
    logs, gradient clipping, precision and the devices, with the run's ``callbacks`` (fingerprint, divergence
    guard, progress). Validation batches are sharded by the loader itself (no padded duplicates)."""
    return L.Trainer(
        max_steps=tc.max_steps,
        val_check_interval=tc.eval_every * tc.accumulate_grad_batches,  # counted in batches by Lightning
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        gradient_clip_val=tc.gradient_clip or None,
        precision=tc.precision,
        deterministic=tc.deterministic,
        accelerator=tc.accelerator,
        devices=tc.devices,
        num_nodes=tc.num_nodes,
        strategy=tc.strategy,
        logger=metrics_loggers(tc, run_dir, log),
        accumulate_grad_batches=tc.accumulate_grad_batches,
        callbacks=[
            StepCheckpoints(run_dir / "checkpoints", tc.checkpoint_every, tc.eval_every, tc.keep_checkpoints),
            StepLearningRateMonitor(),
            StopTogether(),
            *([ResumableEarlyStopping(**tc.early_stopping, check_finite=False)] if tc.early_stopping else []),
            *callbacks,
        ],
        use_distributed_sampler=False,
        plugins=[SafetensorsCheckpointIO(), *cluster_plugins(tc.devices * tc.num_nodes)],
        default_root_dir=run_dir,  # what Lightning writes or reads on its own (an hpc_ckpt file) is the run's
        enable_progress_bar=False,  # PrintProgress: lines, and on a terminal a bar over the optimiser steps
        enable_model_summary=False,
        log_every_n_steps=tc.log_rows_every,
    )


__all__ = ["build_data", "build_model", "complete_run", "evaluate", "load_run", "resume", "train"]

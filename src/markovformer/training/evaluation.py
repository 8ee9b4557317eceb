"""``markovformer eval``: a trained run's metrics on a split of its data, beside the data's reference values."""

from __future__ import annotations

import dataclasses
import itertools
import sys
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from markovformer.advice import said_as
from markovformer.atomic import atomic_write_text
from markovformer.data.bundle import JoinedSplits, Renormalised
from markovformer.data.options import TRAINING_ONLY_OPTIONS
from markovformer.data.recipes.locations import PREPARED_PREFIX, prepared_candidates
from markovformer.data.sources import DATA_SOURCES, run_fitted_options
from markovformer.training.batches import RankShare
from markovformer.training.build import build_data, build_run_task
from markovformer.training.data_record import (
    FILE_DIGESTS,
    changed_data_files,
    changed_documents,
    read_data_info,
    read_data_record,
)
from markovformer.training.isolation import built_on_the_cpu
from markovformer.training.run_config import FILE_OPTIONS
from markovformer.training.run_config import task_options as task_options_of
from markovformer.training.run_dir import check_same_tokenizer, load_trained_run, read_started_from
from markovformer.training.run_report import continuous_source, document_log_likelihood
from markovformer.training.tasks import TASKS, Translation
from markovformer.training.trainer_config import ConfigError, TrainerConfig
from markovformer.training.worker_copy import PackedSplit
from markovformer.training.worker_signals import worker_options


def scoring_loader(examples, collate, tc: TrainerConfig) -> DataLoader:
    """The batches of one scoring pass over a split (validation while training, ``eval`` after): in order,
    ``trainer.eval_batch_size`` examples each, loaded by ``trainer.num_workers`` workers; each process scores its own
    share of the split, every example exactly once (``RankShare``). Its own generator: a DataLoader draws its base
    seed from the global RNG at every new iterator, which would shift the training's random stream. A worker started
    by pickling receives the examples ``PackedSplit``."""
    return DataLoader(PackedSplit(examples), batch_size=tc.eval_batch_size, sampler=RankShare(len(examples)),
                      collate_fn=collate, generator=torch.Generator(), **worker_options(tc.num_workers))  # fmt: skip


def first_batch_metrics(task, model: torch.nn.Module, bundle, examples: int = 2) -> dict:
    """The validation metrics of the model as built, on the split's first ``examples`` examples: run before a run
    writes anything, so that a model that cannot read the data (``max_positions`` below its length, say) fails
    before a run directory that could be neither resumed nor restarted exists, and so that the names of the
    metrics validation will log are known. The random state and the model's mode are left as they were."""
    first = bundle.collate([bundle.val[index] for index in range(min(examples, len(bundle.val)))])
    metrics, training, state = task.new_metrics(), model.training, torch.get_rng_state()
    model.eval()
    try:
        task.start_scoring()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a metric of two examples may warn (one class seen)
            task.score(model, first, metrics)
            return metrics.compute()
    finally:
        model.train(training)
        torch.set_rng_state(state)


def reference_results(reference: dict, split: str) -> dict:
    """The data's own scores of the split: a state-space source's exact log-likelihood per token; a Markov-chain
    source's entropy rate (the floor of the loss) and the true chain's loss; an in-context chain source's Bayes
    predictor's loss (the lowest expected loss over its random chains)."""
    results = {}
    exact = document_log_likelihood(reference, split)
    if exact is not None:
        results["exact_log_likelihood_per_token"] = exact
    if "entropy_rate" in reference:
        results["entropy_rate"] = reference["entropy_rate"]
        results["continuous_source"] = continuous_source(reference)  # a differential rate: no percentage of it
        if f"oracle_{split}_loss" in reference:
            results["true_chain_loss"] = reference[f"oracle_{split}_loss"]
    if f"bayes_{split}_loss" in reference:
        results["bayes_loss"] = reference[f"bayes_{split}_loss"]
    if "chance_accuracy" in reference:
        results["chance_accuracy"] = reference["chance_accuracy"]
    return results


def recorded_data_files(run_dir: Path, data: dict, overrides: dict) -> dict:
    """``{option: path}`` for each data file option (``FILE_OPTIONS``) naming a relative path, ``data/NAME`` or
    NAME, no longer found here (found through ``$MARKOVFORMER_DATA`` at training time, or from another working
    folder) while the file or folder data.json recorded it as (the one recorded data file's path through NAME) still
    exists; options given as ``overrides`` are kept."""
    saved = read_data_record(run_dir, strict=False)
    try:
        recorded = [Path(path) for path in saved.get(FILE_DIGESTS) or {}]
        recorded += [Path(path) for path in (saved.get("splits") or {}).get("resolved_paths") or []]  # older runs
    except (AttributeError, TypeError):
        return {}
    found = {}
    for key in FILE_OPTIONS:
        value = data.get(key)
        if key in overrides or not isinstance(value, str) or not value:
            continue
        parts = Path(value).parts
        name = tuple(itertools.dropwhile("..".__eq__, parts[1:] if parts[0] == PREPARED_PREFIX else parts))
        if Path(value).is_absolute() or not name or any(place.exists() for place in prepared_candidates(value)):
            continue
        places = {Path(*path.parts[: i + len(name)]) for path in recorded for i in range(len(path.parts))
                  if path.parts[i : i + len(name)] == name}  # fmt: skip
        if not places:  # a link to the file, named as it was given, beside any of the folders of its resolved path
            places = {Path(*path.parts[:i], *name) for path in recorded for i in range(1, len(path.parts))
                      if Path(*path.parts[:i], *name).resolve() in recorded}  # fmt: skip
        if len(places) == 1 and next(iter(places)).exists():
            found[key] = str(next(iter(places)))
    return found


def warn_of_changed_files(run_dir: Path, bundle, reader: str = "these metrics score") -> list[str]:
    """The data files whose contents changed since the run started (``changed_data_files``), each said on stderr:
    what ``reader`` names (eval's metrics, inspect's figures) is then of the files as they are now, not of the data
    the run was trained and validated on; so are files added to or removed from its folder (``changed_documents``:
    ``evaluate`` refuses them first)."""
    changed = changed_data_files(run_dir, bundle)
    for path, (then, now) in changed.items():
        print(f"markovformer: warning: {path} changed since the run started (sha256 {then} then, in "
              f"{run_dir / 'data.json'}; {now} now): {reader} the file as it is now, not the data the run was "
              f"trained and validated on", file=sys.stderr, flush=True)  # fmt: skip
    moved = changed_documents(read_data_record(run_dir, "splits", strict=False), bundle.splits)
    if moved:
        print(f"markovformer: warning: {moved}: {reader} the parts as they are now, not those the run was trained "
              f"and validated on", file=sys.stderr, flush=True)  # fmt: skip
    return list(changed)


def given_data(overrides: dict) -> str:
    """Data options given to score a run in its caller's words (``advice.said_as``): ``eval --data KEY=VALUE`` on
    the command line, ``data_overrides={...}`` from Python."""
    flags = " ".join(f"{key}={value!r}" for key, value in overrides.items())
    return said_as(f"eval --data {flags}", f"data_overrides={overrides!r}")


def check_same_names(run_dir: Path, info: dict) -> None:
    """ConfigError when data given to score a run names its classes or feature columns otherwise than the run's
    data did: the model reads them by position, so another file's class 0 would be scored as the run's class 0."""
    saved = read_data_info(run_dir)
    for key, what in (("label_names", "classes"), ("feature_columns", "feature columns")):
        if key in saved and key in info and list(saved[key]) != list(info[key]):
            raise ConfigError(f"the data's {what} {list(info[key])} are not the run's {list(saved[key])} (in that "
                              f"order, from {run_dir / 'data.json'}): the model reads them by position")  # fmt: skip


def check_vocabulary_fits(run_dir: Path, info: dict, overrides: dict) -> None:
    """ConfigError when data given to score a run (``eval --data``, e.g. another ``num_symbols``) has a larger
    vocabulary than the run's model: it has no output for the tokens beyond (before, the first batch failed naming
    a token id, not the option that made it)."""
    saved, given = read_data_info(run_dir).get("vocab_size"), info.get("vocab_size")
    if isinstance(saved, int) and isinstance(given, int) and given > saved:
        options = given_data(overrides) if overrides else "the data"
        raise ConfigError(f"{options}: the data's vocabulary has {given} tokens, the run's model {saved} (from "
                          f"{run_dir / 'data.json'}): it has no output for tokens {saved}..{given - 1}; score "
                          f"data of the run's vocabulary")  # fmt: skip


FRONT_END = (("log_mel", "log-Mel front end"), ("stack_frames", "frames stacked per input"))  # what speech data records


def check_same_front_end(run_dir: Path, info: dict) -> None:
    """ConfigError when speech given to score a run (``eval --data``: another file, a ``sample_rate``) was turned into
    features otherwise than the run's training data was (``FRONT_END``): a model trained on 8 kHz log-Mel frames
    read 16 kHz ones of the same width without a word, and transcribed nearly nothing right."""
    saved = read_data_info(run_dir)
    for key, what in FRONT_END:
        if saved.get(key) is not None and info.get(key) is not None and saved[key] != info[key]:
            given, run = info[key], saved[key]
            if isinstance(given, dict) and isinstance(run, dict):  # the settings that differ, not the whole record
                given, run = ({name: side.get(name) for name in sorted(set(given) | set(run))
                               if given.get(name) != run.get(name)} for side in (given, run))  # fmt: skip
            raise ConfigError(f"the data's {what} {given} is not the run's {run} (from {run_dir / 'data.json'}): "
                              f"its model reads features made as its training data's were; keep the run's data "
                              f"options (WAVs of any rate are resampled to its sample_rate)")  # fmt: skip


def check_same_source(source: str, overrides: dict) -> None:
    """ConfigError when the data options given to score a run (``eval --data``) name another data source than the
    run's: they re-point the run's data (another file, another length), while the model was trained for its source's
    data and vocabulary; merged with the run's options, another source would fail on keys the user never typed."""
    if "source" in overrides and overrides["source"] != source:
        raise ConfigError(f"{given_data({'source': overrides['source']})}: a run is evaluated on its own data source "
                          f"({source!r}), whose data and vocabulary its model was trained for; give that source's "
                          f"options instead (`markovformer data show {source}` lists them)")  # fmt: skip


# the options a fitted tokenizer is made of (text, hf_dataset, translation_file): a run's is saved in RUN/tokenizer
TOKENIZER_OPTIONS = ("tokenizer", "vocab_size", "fit_bytes")


def check_saved_tokenizer_options(run_dir: Path, data: dict, overrides: dict) -> None:
    """ConfigError when ``eval --data`` gives a tokenizer option (``TOKENIZER_OPTIONS``) other than the run's, given or
    defaulted, while the run keeps a saved tokenizer: the data is encoded with the saved one (the ids its model was
    trained for) whatever the option says, so the option would be ignored without a word."""
    from markovformer.data.sources import DATA_SOURCES

    if not (run_dir / "tokenizer").is_dir() or data.get("source") not in DATA_SOURCES:
        return
    defaults = {field.name: field.default for field in dataclasses.fields(DATA_SOURCES[data["source"]])}
    for key in TOKENIZER_OPTIONS:
        if key in overrides and key in defaults and overrides[key] != data.get(key, defaults[key]):
            raise ConfigError(f"{given_data({key: overrides[key]})}: the run is scored with its saved tokenizer "
                              f"({run_dir / 'tokenizer'}, fitted with {key}={data.get(key, defaults[key])!r}), the ids "
                              f"its model was trained for; a tokenizer option cannot change")  # fmt: skip


SPLITS = ("train", "val", "test", "all")  # all: the three in order, as the recipe builds them (augmented copies
# of a training split included, windows across a split boundary left out as in training)


def scored_split(bundle, split: str, run_dir: Path):
    """The examples ``eval`` scores: the ``split`` of ``bundle`` (``all``: every split, in order; the training split
    as scoring reads it, ``bundle.scored_train``, where the data has one), its features
    normalised with the run's own statistics where the data records them (``info["normalisation"]``) and the
    bundle's differ (another file, ``--data path=...``, whose rows would have fitted their own)."""
    train = bundle.train if bundle.scored_train is None else bundle.scored_train
    examples = JoinedSplits(train, bundle.val, bundle.test) if split == "all" else (
        train if split == "train" else getattr(bundle, split))  # fmt: skip
    fitted, own = bundle.info.get("normalisation"), read_data_info(run_dir).get("normalisation")
    return Renormalised(examples, fitted, own) if fitted and own and fitted != own else examples


def given_predictions(predictions: Path) -> str:
    """The predictions file asked for in its caller's words (``advice.said_as``)."""
    return said_as(f"--predictions {predictions}", f"predictions={str(predictions)!r}")


@built_on_the_cpu
def evaluate(target: str | Path, split: str = "val", data_overrides: dict | None = None, beam_size: int = 1,
             predictions: str | Path | None = None, batch_size: int | None = None,
             task_options: dict | None = None) -> dict:  # fmt: skip
    """Metrics of a trained run on a split of its data (rebuilt from its config, or from overridden data options of
    its own data source: ``check_same_source``; ``all``: every split), scored as validation scores it, the features
    normalised as the run's (``scored_split``), ``batch_size`` examples a batch (None: the run's
    ``trainer.eval_batch_size``). Translation runs are decoded with beam search of ``beam_size`` (1 =
    greedy) for BLEU; ``predictions`` names a file for what each scored example was predicted as, where the task
    predicts something to read (a translation, a class, a transcript: ``LossMetric.table``);
    VMT runs walk the split's documents. ``task_options`` change the run's (a VMT's ``iw_samples``). A fine-tuning
    run's results name the weights it started from: ``started_from``, its environment.json record
    (``run_dir.read_started_from``)."""
    if split not in SPLITS:
        raise ConfigError(f"split={split!r} must be one of {', '.join(SPLITS)}")
    predictions = None if predictions is None else Path(predictions).expanduser()  # '~': as the run's name
    if predictions is not None and (predictions.is_dir() or not predictions.parent.is_dir()):
        what = "is a directory" if predictions.is_dir() else "is in no existing directory"
        raise ConfigError(f"{given_predictions(predictions)} {what}: give a file in an existing directory")
    config, model, run_dir, weights = load_trained_run(target)
    if predictions is not None and not TASKS[config.task].writes_predictions:
        takers = [name for name, kind in TASKS.items() if kind.writes_predictions]
        raise ConfigError(f"{given_predictions(predictions)}: {run_dir} is a {config.task} run, whose scoring predicts "
                          f"nothing to write (runs that do: {', '.join(takers)})")  # fmt: skip
    if beam_size != 1 and config.task != Translation.name:  # the others' scoring decodes nothing: no beam to widen
        beams = said_as(f"--beam-size {beam_size}", f"beam_size={beam_size}")
        raise ConfigError(f"{beams}: {run_dir} is a {config.task} run; only a translation run's scoring decodes with "
                          f"beams")  # fmt: skip
    check_same_source(config.data["source"], data_overrides or {})
    check_saved_tokenizer_options(run_dir, config.data, data_overrides or {})
    fitted = run_fitted_options(config.data["source"], read_data_info(run_dir))  # the run's class thresholds
    data = {**config.data, **recorded_data_files(run_dir, config.data, data_overrides or {}), **fitted,
            **(data_overrides or {})}  # fmt: skip
    takes = {field.name for field in dataclasses.fields(DATA_SOURCES[config.data["source"]])}
    for key, plain in TRAINING_ONLY_OPTIONS.items():  # the data as it is, not as training draws from it
        if key in takes and (data_overrides or {}).get(key, plain) != plain:  # (a source without it: unknown key)
            raise ConfigError(f"{given_data({key: data_overrides[key]})}: scoring takes only {key}={plain!r}, "
                              f"the data as it is (another value changes only how training draws its "
                              f"examples)")  # fmt: skip
        if key in data:
            data[key] = plain
    for key in task_options or {}:  # an option of another task: the flag's name, and the run's task
        takers = [name for name, task in TASKS.items() if key in {f.name for f in dataclasses.fields(task.Options)}]
        if takers and config.task not in takers:
            raise ConfigError(f"--{key.replace('_', '-')} (task_options.{key}): {run_dir} is a {config.task} run; "
                              f"only a {' or '.join(takers)} run's scoring takes it")  # fmt: skip
    if task_options:
        changed = task_options_of(config.task, {**dataclasses.asdict(config.task_options), **task_options})
        config = dataclasses.replace(config, task_options=changed)
    config = dataclasses.replace(config, data=data)
    bundle = build_data(config, run_dir)
    task = build_run_task(config, bundle)
    check_same_tokenizer(run_dir, bundle)
    check_same_names(run_dir, bundle.info)
    check_vocabulary_fits(run_dir, bundle.info, data_overrides or {})
    check_same_front_end(run_dir, bundle.info)
    moved = changed_documents(read_data_record(run_dir, "splits", strict=False), bundle.splits)
    if moved:
        other = said_as("--data path=... fractions=[0,0,1] --split test", "data_overrides={'path': ..., 'fractions': "
                        "[0, 0, 1]}, split='test'")  # fmt: skip
        raise ConfigError(f"{moved}. Restore the folder's files to score the run's {split} split; score other files "
                          f"with {other}")  # fmt: skip
    examples = scored_split(bundle, split, run_dir)
    task.describe_split(examples, bundle.tokenizer)
    task.check_scored(model, examples, split)
    changed = warn_of_changed_files(run_dir, bundle)
    if len(examples) == 0:
        raise ConfigError(f"the {split} split of {run_dir}'s data is empty (data.source={config.data['source']!r}): "
                          f"nothing to evaluate; choose another {said_as('--split', 'split')} or give the data a "
                          f"{split} part")  # fmt: skip
    metrics = task.new_metrics()
    metrics.keep_predictions = predictions is not None
    model.eval()
    trainer = config.trainer if batch_size is None else dataclasses.replace(config.trainer, eval_batch_size=batch_size)
    loader = scoring_loader(examples, bundle.collate, trainer)
    task.start_scoring()
    with torch.no_grad():
        for batch in loader:
            task.score(model, batch, metrics, beam_size)
    if predictions is not None:  # whole or not at all: a full disk leaves no table cut short
        atomic_write_text(predictions, metrics.table())
    started = read_started_from(run_dir)  # a fine-tuning run's source, as inspect's summary names it
    results = {"split": split, "examples": len(examples), "run_dir": str(run_dir), "weights": weights,
               "metrics": metrics.compute(), **metrics.breakdown(), **task.scoring_settings(beam_size),
               **({"changed_data_files": changed} if changed else {}),
               **({"started_from": started} if started is not None else {}),
               **({"unscored_tail_tokens": examples.tail_tokens} if getattr(examples, "tail_tokens", 0) else {})}
    reference = dict(bundle.info.get("reference", {}))
    if bundle.reference_of is not None and split not in ("val", "test"):  # the data holds val's and test's
        reference.update(bundle.reference_of(split, examples))
    return {**results, **reference_results(reference, split)}

"""``table1``: the Markovian Transformer against nine baselines on genomics, finance and speech (the paper's Table I),
its ablations (Table II) and its hybrid head ratio tuned per domain (Table III), all on real data the recipes
prepare (``markovformer data prepare splice|sp500|digits``).

Each domain is a task of the engine: genomics classifies UCI splice junctions (test AUROC and accuracy), finance
classifies the next day's S&P 500 move down/flat/up from 32 days of features (test macro-F1, and F1 within each
volatility regime), speech recognises spoken number words with CTC (test WER on voices unseen in training, and on
real recordings). Every model of a domain trains with the same steps, batch, schedule and seeds; each baseline's
width is chosen so its parameter count is the Markovian Transformer's within a tolerance (``table1_models``); the
ablations keep the Markovian Transformer's width. The hybrid ratio is chosen on the validation split (mean over
seeds) and reported on the test split. Peak training memory and training throughput (``table1_speed``) are measured
once per model, on the first domain present, in a child process each.

Each (domain, row, seed) is one cell trained through the engine (``runner.train`` into ``runs/`` under the output
folder) and scored with ``runner.evaluate``: the cells are ordinary run directories, a killed cell resumes from its
last checkpoint, and a rerun skips every finished cell. A domain whose prepared data is missing is skipped with the
command that prepares it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from markovformer.data.bundle import example_lengths, examples_at
from markovformer.data.recipes.finance import REGIMES, regimes_of_examples
from markovformer.experiments.report import ExperimentReport, file_digest, revisions_of, seed_summary
from markovformer.experiments.settings import configure
from markovformer.experiments.table1_models import (
    ABLATIONS,
    DOMAIN_SPECS,
    DOMAINS,
    MARKOVIAN,
    MODELS,
    data_paths,
    data_section,
    markovian_section,
    match_width,
    parameter_count,
    run_name,
    variant_section,
    variants,
)
from markovformer.experiments.table1_report import write_report
from markovformer.experiments.table1_speed import measure_in_child
from markovformer.layers.hybrid_attention import markov_head_count
from markovformer.training.run_config import resolve_run_config

NAME = "table1"
SUMMARY = "Markovian Transformer vs nine baselines on genomics, finance and speech, with ablations and hybrid ratio"
DATASETS = {"genomics": ("splice", "promoters", "drosophila-promoters"), "finance": ("sp500", "nasdaq"),
            "speech": ("digits",)}  # fmt: skip
SIZE_KEYS = ("vocab_size", "input_dim", "num_labels")  # what the data fills into a model section


def default_data_dir() -> str:
    return os.environ.get("MARKOVFORMER_DATA") or "data"


@dataclass(frozen=True)
class Table1Settings:
    MAY_BE_ZERO: ClassVar[tuple[str, ...]] = ("tolerance",)
    data_dir: str = field(default_factory=default_data_dir)  # where `markovformer data prepare` wrote the files
    domains: tuple[str, ...] = DOMAINS
    genomics: str = "splice"  # recipe names; see DATASETS
    finance: str = "sp500"
    speech: str = "digits"
    models: tuple[str, ...] = tuple(MODELS)
    ablations: tuple[str, ...] = tuple(ABLATIONS)
    ratios: tuple[float, ...] = (0.25, 0.75)  # beside the Markovian Transformer's own 0.5
    MAY_BE_EMPTY: ClassVar[tuple[str, ...]] = ("ablations", "ratios")  # the models' rows alone
    d_model: int = 64  # the Markovian Transformer's width; baselines are matched to its parameter count
    n_layers: int = 2
    n_heads: int = 4
    tolerance: float = 0.1  # largest relative parameter-count difference reported as matched
    steps: int = 400
    batch_size: int = 32
    ctc_steps: int = 1000  # speech: CTC needs more steps before it emits characters (WER 0.57 at 500, 0.25 at 1000)
    ctc_batch_size: int = 16  # speech: utterances of ~40 stacked frames instead of 32-60 steps
    lr: float = 2e-3
    measure: bool = True  # peak memory and throughput columns
    memory_length: int = 4096
    speed_length: int = 2048
    speed_repeats: int = 3


QUICK = Table1Settings(models=(MARKOVIAN, "transformer", "s4d"), ablations=(), ratios=(), steps=30, ctc_steps=30,
                       speed_repeats=1)  # fmt: skip


def check_settings(settings: Table1Settings) -> None:
    for domain in settings.domains:
        if domain not in DOMAINS:
            raise ValueError(f"table1.domains: {domain!r} is not one of {DOMAINS}")
        if getattr(settings, domain) not in DATASETS[domain]:
            raise ValueError(f"table1.{domain}={getattr(settings, domain)!r} must be one of {DATASETS[domain]}")
    variants(settings.models, settings.ablations, settings.ratios)  # names checked
    for ratio in settings.ratios:  # each a hybrid: at least one Markov head (the model config refuses none)
        if not markov_head_count(settings.n_heads, ratio):
            raise ValueError(f"table1.ratios: {ratio!r} of n_heads={settings.n_heads} heads gives no Markov head; "
                             f"give ratios of at least 1/{settings.n_heads}")  # fmt: skip
    if settings.ablations or settings.ratios:
        if MARKOVIAN not in settings.models:
            raise ValueError(f"table1: ablations and ratios compare against {MARKOVIAN!r}; keep it in models")


@dataclass
class DomainSetup:
    """A domain ready to train: its data section and its files' digests, the data's sizes, the longest example, every
    row's model section and parameter count."""

    name: str
    dataset: str
    data: dict
    info: dict
    longest: int
    sections: dict[str, dict]
    parameters: dict[str, int]
    data_digests: dict[str, str] = field(default_factory=dict)  # file role -> report.file_digest


def missing_data(domain: str, settings: Table1Settings) -> str | None:
    """The log line for a domain whose prepared files are absent, naming the command that prepares them; None if
    they are all there."""
    dataset = getattr(settings, domain)
    for path in data_paths(domain, settings.data_dir, dataset).values():
        if not Path(path).is_file():
            return (f"[{NAME}] skipping {domain}: {path} not found; prepare it with `markovformer data prepare "
                    f"{dataset} --dir {settings.data_dir}`")  # fmt: skip
    return None


def _longest_example(bundle) -> int:
    splits = (bundle.train, bundle.val, bundle.test)
    key = "input_ids" if "input_ids" in bundle.train[0] else "input_features"
    return max(max(example_lengths(split, key), default=0) for split in splits)


def set_up_domain(
    domain: str, settings: Table1Settings, rows: dict[str, str], log: Callable[[str], None]
) -> DomainSetup:
    """Read the domain's data once (sizes, longest example) and fix every row's model section: baselines at the
    width matching the Markovian Transformer's parameter count."""
    # deferred: the training engine imports lightning
    from markovformer.training.runner import build_data

    spec, dataset = DOMAIN_SPECS[domain], getattr(settings, domain)
    paths = data_paths(domain, settings.data_dir, dataset)
    data = data_section(domain, paths)
    config = resolve_run_config({"task": spec.task, "model": {}, "data": data})
    bundle = build_data(config)
    longest = _longest_example(bundle)
    if domain == "speech":  # the real recordings are scored too: Linformer's projections must cover them
        recorded = resolve_run_config({"task": spec.task, "model": {}, "data": {**data, "test_set": "recorded"}})
        longest = max(longest, _longest_example(build_data(recorded)))
    info = {key: bundle.info[key] for key in SIZE_KEYS if key in bundle.info}
    markovian = markovian_section(domain, settings.d_model, settings.n_layers, settings.n_heads)
    target = parameter_count(spec.task, markovian, info)
    sections, parameters = {}, {}
    for variant in rows:
        section = variant_section(variant, markovian, settings.d_model, longest)
        if variant in MODELS and variant != MARKOVIAN:
            width, count = match_width(spec.task, section, info, target)
            section = {**section, "d_model": width}
        sections[variant], parameters[variant] = section, parameter_count(spec.task, section, info)
    log(f"[{NAME}] {domain}: {dataset}, {len(bundle.train):,} training examples, longest {longest}; Markovian "
        f"Transformer {target:,} parameters")  # fmt: skip
    digests = {role: file_digest(path) for role, path in paths.items()}
    return DomainSetup(domain, dataset, data, info, longest, sections, parameters, digests)


def run_config(setup: DomainSetup, variant: str, settings: Table1Settings, seed: int, output_dir: str = "") -> dict:
    """The engine run config of one cell."""
    spec = DOMAIN_SPECS[setup.name]
    ctc = spec.ctc_budget
    steps = settings.ctc_steps if ctc else settings.steps
    trainer = {"max_steps": steps, "batch_size": settings.ctc_batch_size if ctc else settings.batch_size,
               "lr": settings.lr, "weight_decay": 0.1, "warmup_steps": max(1, steps // 10), "decay": "cosine",
               "lr_floor": 0.1, "eval_every": steps, "checkpoint_every": steps, "log_every": max(1, steps // 4),
               "eval_batch_size": 64, "seed": seed}  # fmt: skip
    return {"task": spec.task, "model_type": "markovian_transformer", "output_dir": output_dir,
            "model": setup.sections[variant], "data": setup.data, "trainer": trainer}  # fmt: skip


@torch.no_grad()
def regime_scores(run_dir: str | Path) -> dict[str, float | int]:
    """A finance run's test macro-F1 over all examples (``macro_f1``) and within each volatility regime
    (``f1_<regime>``, with ``count_<regime>`` examples), from its predictions, with the engine's F1 definition."""
    from torchmetrics.classification import MulticlassF1Score

    # deferred: the training engine imports lightning
    from markovformer.training.runner import build_data, load_run
    from markovformer.training.tasks import model_inputs

    config, model, run_dir = load_run(run_dir)
    bundle = build_data(config, run_dir)
    regimes = regimes_of_examples(config.data["path"], bundle.splits, "test")
    model.eval()
    logits, labels = [], []
    for start in range(0, len(bundle.test), config.trainer.eval_batch_size):
        stop = min(start + config.trainer.eval_batch_size, len(bundle.test))
        batch = bundle.collate(examples_at(bundle.test, range(start, stop)))
        logits.append(model(**{k: v for k, v in model_inputs(batch).items() if k != "labels"}).logits.float())
        labels.append(batch["labels"])
    logits, labels = torch.cat(logits), torch.cat(labels)

    def f1(mask: torch.Tensor) -> float:
        metric = MulticlassF1Score(bundle.info["num_labels"], average="macro", ignore_index=-100)
        return float(metric(logits[mask], labels[mask]))

    scores: dict[str, float | int] = {"macro_f1": f1(torch.ones(len(labels), dtype=torch.bool))}
    for regime in REGIMES:
        mask = torch.tensor([r == regime for r in regimes])
        scores[f"count_{regime}"] = int(mask.sum())
        if mask.any():
            scores[f"f1_{regime}"] = f1(mask)
    return scores


def train_cell(
    setup: DomainSetup, variant: str, settings: Table1Settings, seed: int, out_dir: Path, log: Callable[[str], None]
) -> dict:
    """Train (or resume, or reuse) one cell's run under ``out_dir/runs`` and score it with ``runner.evaluate``:
    ``val`` and ``test`` are its metrics on those splits, ``scores`` the table's test numbers."""
    # deferred: the training engine imports lightning
    from markovformer.training.runner import complete_run, evaluate

    values = run_config(setup, variant, settings, seed)
    run_dir = out_dir / "runs" / run_name(setup.name, variant, values, setup.data_digests)
    log(f"[{NAME}] {setup.name} / {variant} (seed {seed}): {run_dir} (trained, resumed or read)")
    metrics = complete_run(resolve_run_config({**values, "output_dir": str(run_dir)}))
    val, test = evaluate(run_dir, "val")["metrics"], evaluate(run_dir, "test")["metrics"]
    scores = {name: value for name, value in test.items() if name != "loss"}
    if setup.name == "finance":
        scores.update({k: v for k, v in regime_scores(run_dir).items() if k != "macro_f1"})
    if setup.name == "speech":
        try:
            scores["wer_recorded"] = evaluate(run_dir, "test", {"test_set": "recorded"})["metrics"]["wer"]
        except ValueError as error:  # a speech file without real recordings
            log(f"[{NAME}] {run_dir.name}: no WER on real recordings ({error})")
    return {"domain": setup.name, "variant": variant, "seed": seed, "run_dir": str(run_dir),
            "parameters": setup.parameters[variant], "d_model": setup.sections[variant]["d_model"], "val": val,
            "test": test, "scores": scores, "steps": metrics["steps"],
            "train_seconds": metrics["train_seconds"], "threads": metrics.get("threads")}  # fmt: skip


def cell_inputs(setup: DomainSetup, variant: str, settings: Table1Settings, seed: int) -> dict:
    """What a trained cell's result depends on: its run config, dataset and the bytes of its files, not where the data
    lies (it may move). A cell is reused by every run of the experiment that would train it the same way."""
    values = run_config(setup, variant, settings, seed)
    data = {key: value for key, value in values["data"].items() if key not in ("path", "labels")}
    return {**values, "data": data, "dataset": setup.dataset, "data_sha256": setup.data_digests,
            **revisions_of(values["model"])}  # fmt: skip


def speed_job(setup: DomainSetup, variant: str, settings: Table1Settings) -> dict:
    """The measurement of ``variant`` as built for ``setup``'s domain (Linformer's projections extended to cover
    the longer length)."""
    section = {**setup.sections[variant], **setup.info}
    if section["attention"] == "linformer":
        section["max_positions"] = max(settings.memory_length, settings.speed_length)
    return {"model_type": "markovian_transformer", "task": DOMAIN_SPECS[setup.name].task, "section": section,
            "memory_length": settings.memory_length, "speed_length": settings.speed_length,
            "repeats": settings.speed_repeats}  # fmt: skip


def speed_inputs(setup: DomainSetup, variant: str, settings: Table1Settings) -> dict:
    """What a speed cell depends on: its domain, the measurement (``speed_job``) and its attention kinds' revisions
    (a fix to a kind can change its speed and memory as well as what it learns)."""
    job = speed_job(setup, variant, settings)
    return {"domain": setup.name, **job, **revisions_of(job["section"])}


def measure_cell(setup: DomainSetup, variant: str, settings: Table1Settings) -> dict:
    """Peak training memory at ``memory_length`` and tokens/s at ``speed_length`` of ``variant`` (``speed_job``),
    in a child process."""
    return {"domain": setup.name, "variant": variant, **measure_in_child(speed_job(setup, variant, settings))}


def summarise(cells: list[dict]) -> dict:
    """{domain: {variant: {metric: summary over seeds}}} of the test scores, and ``val_<primary>`` of validation."""
    grouped: dict = {}
    for cell in cells:
        grouped.setdefault(cell["domain"], {}).setdefault(cell["variant"], []).append(cell)
    result: dict = {}
    for domain, rows in grouped.items():
        primary = DOMAIN_SPECS[domain].primary
        for variant, group in rows.items():
            names = sorted({name for cell in group for name in cell["scores"]})
            metrics = {name: seed_summary([c["scores"][name] for c in group if name in c["scores"]]) for name in names}
            metrics[f"val_{primary}"] = seed_summary([c["val"][primary] for c in group])
            result.setdefault(domain, {})[variant] = metrics
    return result


def choose_ratio(domain: str, summaries: dict) -> str | None:
    """The hybrid row (the Markovian Transformer or a ``ratio=`` row) with the best mean validation primary metric."""
    spec = DOMAIN_SPECS[domain]
    rows = {v: s for v, s in summaries.get(domain, {}).items() if v == MARKOVIAN or v.startswith("ratio=")}
    if not rows:
        return None
    sign = 1 if spec.higher_is_better else -1
    return max(rows, key=lambda v: sign * rows[v][f"val_{spec.primary}"]["mean"])


def run(
    out_dir: Path, *, quick: bool, seeds: tuple[int, ...] | None, overrides: dict, log: Callable[[str], None]
) -> Path:

    settings = configure(QUICK if quick else Table1Settings(), overrides, NAME)
    check_settings(settings)
    seeds = seeds if seeds is not None else ((0,) if quick else (0, 1, 2))
    rows = variants(settings.models, settings.ablations, settings.ratios)
    skipped = {}
    for domain in settings.domains:
        message = missing_data(domain, settings)
        if message:
            log(message)
            skipped[domain] = message.split("skipping ", 1)[1]
    present = [domain for domain in settings.domains if domain not in skipped]
    if not present:
        raise ValueError(f"{NAME}: no domain's data is prepared: " + "; ".join(skipped.values()))
    cached_settings = {k: v for k, v in asdict(settings).items() if k != "data_dir"}  # the data may move
    report = ExperimentReport(out_dir, "Table I: Markov-structured models on genomics, finance and speech", log,
                              settings={**cached_settings, "seeds": list(seeds)})  # fmt: skip
    setups = {domain: set_up_domain(domain, settings, rows, log) for domain in present}
    speed_variants = [v for v in rows if v in MODELS] if settings.measure else []
    report.expect_cells(len(present) * len(rows) * len(seeds) + len(speed_variants))
    cells = [report.cached(f"{domain}_{variant}_seed={seed}",
                           lambda d=domain, v=variant, s=seed: train_cell(setups[d], v, settings, s, report.out_dir,
                                                                          log),
                           depends_on=cell_inputs(setups[domain], variant, settings, seed))
             for domain in present for variant in rows for seed in seeds]  # fmt: skip
    speed = {}
    if settings.measure:
        measured = setups[present[0]]
        for variant in (v for v in rows if v in MODELS):
            log(f"[{NAME}] measuring {variant}: peak memory at T={settings.memory_length}, tokens/s at "
                f"T={settings.speed_length}")  # fmt: skip
            speed[variant] = report.cached(f"speed_{variant}", lambda v=variant: measure_cell(measured, v, settings),
                                           depends_on=speed_inputs(measured, variant, settings))  # fmt: skip
    summaries = summarise(cells)
    chosen = {domain: choose_ratio(domain, summaries) for domain in present}
    report.results = {"settings": asdict(settings), "seeds": list(seeds), "skipped": skipped, "rows": rows,
                      "setups": {d: {"dataset": s.dataset, "info": s.info, "longest": s.longest,
                                     "parameters": s.parameters, "d_model": {v: sec["d_model"]
                                                                             for v, sec in s.sections.items()}}
                                 for d, s in setups.items()},
                      "cells": cells, "summaries": summaries, "chosen_ratio": chosen, "speed": speed}  # fmt: skip
    write_report(report, settings, quick)
    return report.write()


__all__ = ["NAME", "QUICK", "SUMMARY", "DomainSetup", "Table1Settings", "cell_inputs", "choose_ratio", "measure_cell",
           "missing_data", "regime_scores", "run", "run_config", "set_up_domain", "speed_inputs", "speed_job",
           "summarise", "train_cell"]  # fmt: skip

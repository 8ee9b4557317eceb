"""``scan-shakespeare``: the Scan Markov model (a gated recurrence h_t = A_t⊙h_{t-1} + B_t⊙e_t over the last n
characters) on Tiny Shakespeare against Kneser-Ney and two Transformers.

Every model is scored on the same thing: validation cross-entropy of each character from offset 5 of the validation
part on, predicted from exactly the n characters before it (n = 2, 3, 4, 5), and the mean over n (the equal
mixture of the four n-gram tasks, on which interpolated Kneser-Ney scores 1.717 nats). ``ngram_losses`` computes it
by feeding each window of n characters on its own, so the number means the same for every model; for the Scan
Markov model in markov mode it equals the engine's validation metric (a test pins the two together).

Rows: the Scan Markov model in markov mode, trained on the n = 2..5 mixture with label smoothing 0.1 (the seed's
setup, ``configs/scan_shakespeare.yaml``); the same model in recurrent mode, trained over windows of 129 characters
and scored on the n-character windows (plus, for information, over its whole training window); a Markovian
Transformer (Markov attention, local scope) and a softmax Transformer of about the same size, trained on windows of
6 characters, so that their positions 0..4 see contexts of 1..5 characters exactly as the n-character windows show
them. The Transformer heads take no label smoothing, which favours them slightly on cross-entropy.

Each model is one cell trained through the engine (``runner.train`` into ``runs/`` under the output folder):
the cells are ordinary run directories that ``markovformer eval``/``generate``/``inspect`` open, a killed cell
resumes from its last checkpoint, and the experiment trains exactly what a user's ``markovformer train`` would. The
cost is the engine's start-up per cell (seconds), small next to the training. Every model gets about the same
budget in scored targets: about 2,000 a step (16 × 124, 16 × 128, 384 × 5) for the same number of steps.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F

from markovformer.data.collate import PAD_ID
from markovformer.data.readers.tokenizer import load_tokenizer
from markovformer.data.recipes.shakespeare import find_tiny_shakespeare
from markovformer.experiments.report import (
    ExperimentReport,
    cell_settings,
    file_digest,
    revisions_of,
    thread_counts,
)
from markovformer.experiments.settings import configure
from markovformer.models.generation import GenerationConfig, decoding_loop
from markovformer.training.run_config import resolve_run_config

NAME = "scan-shakespeare"
SUMMARY = "Scan Markov model on Tiny Shakespeare: validation cross-entropy by context n vs Kneser-Ney and Transformers"
CONTEXTS = (2, 3, 4, 5)
FIRST_TARGET = max(CONTEXTS)  # validation characters from this offset on have every context in the part
KNESER_NEY = {2: 2.041, 3: 1.722, 4: 1.566, 5: 1.539}  # interpolated Kneser-Ney on the seed's split, validation nats
KNESER_NEY_MIXTURE = 1.717
PROMPT = "Follow those"
MODELS = ("scan_markov", "scan_recurrent", "markovian_transformer", "softmax_transformer")
LABELS = {
    "scan_markov": "Scan Markov, markov mode",
    "scan_recurrent": "Scan Markov, recurrent mode",
    "markovian_transformer": "Markovian Transformer",
    "softmax_transformer": "softmax Transformer",
}


@dataclass(frozen=True)
class ScanShakespeareSettings:
    MAY_BE_ZERO: ClassVar[tuple[str, ...]] = ("temperature", "sample_chars")
    SAMPLING_OPTIONS: ClassVar[tuple[str, ...]] = ("top_p",)  # temperature=0 (greedy) reads none of them
    scan_steps: int = 15000  # 16 windows x 124 targets a step (configs/scan_shakespeare.yaml)
    recurrent_steps: int = 15000  # 16 windows x 128 targets
    transformer_steps: int = 15000  # 384 windows x 5 targets
    transformer_batch: int = 384
    eval_every: int = 1500
    eval_chars: int | None = None  # validation characters scored by ngram_losses (None: the whole part)
    sample_chars: int = 300
    temperature: float = 0.8
    top_p: float = 0.9


QUICK = ScanShakespeareSettings(scan_steps=120, recurrent_steps=120, transformer_steps=120, transformer_batch=128,
                                eval_every=120, eval_chars=4000, sample_chars=120)  # fmt: skip


def find_data() -> Path:
    """The Tiny Shakespeare file: the data directory's (``markovformer data prepare tiny-shakespeare``), else
    ``../shared/data``; ValueError naming the prepare command when there is none."""

    return find_tiny_shakespeare()


def _trainer(steps: int, batch_size: int, settings: ScanShakespeareSettings, seed: int, **extra) -> dict:
    every = min(settings.eval_every, steps)
    return {"max_steps": steps, "batch_size": batch_size, "lr": 3.0e-3, "weight_decay": 0.1,
            "warmup_steps": min(200, steps // 10), "decay": "cosine", "lr_floor": 0.0, "eval_every": every,
            "checkpoint_every": every, "log_every": max(1, min(500, steps // 4)), "eval_batch_size": 64, "seed": seed,
            **extra}  # fmt: skip


def run_config(model: str, data_path: str, output_dir: str, settings: ScanShakespeareSettings, seed: int = 0) -> dict:
    """The engine run config (before resolution) of one of ``MODELS``. ``scan_markov`` is configs/scan_shakespeare.yaml
    with the settings' step counts."""
    text = {"source": "text", "path": data_path, "tokenizer": "char", "fractions": [0.9, 0.1, 0.0]}
    scan = {"d_model": 128, "ffn_mult": 4, "dropout": 0.0}
    transformer = {"d_model": 128, "n_layers": 2, "n_heads": 4, "ffn": "swiglu", "ffn_mult": 3}  # ~340K, as the scan
    if model == "scan_markov":
        return {
            "task": "causal_lm", "model_type": "scan_markov", "output_dir": output_dir,
            "model": {**scan, "context_mode": "markov", "order": 5, "max_positions": 5},
            "data": {**text, "seq_len": 128, "overlap": 5},
            "trainer": _trainer(settings.scan_steps, 16, settings, seed, label_smoothing=0.1),
            "task_options": {"orders": list(CONTEXTS)},
        }  # fmt: skip
    if model == "scan_recurrent":
        return {
            "task": "causal_lm", "model_type": "scan_markov", "output_dir": output_dir,
            "model": {**scan, "context_mode": "recurrent", "max_positions": 129},
            "data": {**text, "seq_len": 128},
            "trainer": _trainer(settings.recurrent_steps, 16, settings, seed, label_smoothing=0.1),
        }  # fmt: skip
    attention = {"markovian_transformer": {"attention": "markov", "scope": "local", "max_order": 4, "window": 4},
                 "softmax_transformer": {"attention": "softmax", "scope": "global"}}  # fmt: skip
    if model not in attention:
        raise ValueError(f"model={model!r} must be one of {MODELS}")
    return {
        "task": "causal_lm", "model_type": "markovian_transformer", "output_dir": output_dir,
        "model": {**transformer, **attention[model]},
        "data": {**text, "seq_len": max(CONTEXTS)},
        "trainer": _trainer(settings.transformer_steps, settings.transformer_batch, settings, seed),
    }  # fmt: skip


@torch.no_grad()
def ngram_losses(
    model: torch.nn.Module,
    tokens: list[int],
    contexts: tuple[int, ...] = CONTEXTS,
    first_target: int = FIRST_TARGET,
    batch_size: int = 4096,
) -> dict[int, float]:
    """Cross-entropy (nats) of each token j >= ``first_target`` given exactly the n tokens j-n..j-1, fed alone as a
    window (positions 0..n-1) to ``model`` (a causal LM: (B, n) ids -> ``.logits`` (B, n, V)); one value per n."""
    if first_target < max(contexts) or first_target >= len(tokens):
        raise ValueError(f"first_target={first_target} must lie in [{max(contexts)}, {len(tokens)})")
    model.eval()
    stream = torch.tensor(tokens)
    targets = stream[first_target:]
    losses = {}
    for n in contexts:
        windows = stream.unfold(0, n, 1)[first_target - n : len(tokens) - n]  # row i: tokens before target i
        total = 0.0
        for start in range(0, len(targets), batch_size):
            logits = model(windows[start : start + batch_size]).logits[:, -1].float()
            total += float(F.cross_entropy(logits, targets[start : start + batch_size], reduction="sum"))
        losses[n] = total / len(targets)
    return losses


def sample_text(
    model: torch.nn.Module,
    tokenizer,
    prompt: str,
    context: int,
    length: int,
    temperature: float,
    top_p: float,
    seed: int = 0,
) -> str:
    """``prompt`` and ``length`` sampled characters, the model seeing the last ``context`` tokens at each step. The
    padding id is never drawn (label smoothing gives it a little probability; it has no character)."""

    model.eval()
    generator = torch.Generator().manual_seed(seed)
    sampled = temperature > 0  # temperature 0 is greedy, which reads no nucleus (the settings' top_p stands by)
    config = GenerationConfig(max_new_tokens=length, do_sample=sampled, temperature=temperature,
                              top_p=top_p if sampled else None, suppress_tokens=[PAD_ID])  # fmt: skip
    tokens = [torch.tensor([tokenizer.encode(prompt)])]

    def last_logits(new: torch.Tensor | None = None) -> torch.Tensor:
        """The models here are read at a fixed context: the last ``context`` tokens, re-run each step."""
        if new is not None:
            tokens[0] = torch.cat([tokens[0], new[:, None]], dim=1)
        with torch.no_grad():
            return model(tokens[0][:, -context:]).logits[:, -1]

    ids = decoding_loop(tokens[0], last_logits(), last_logits, config, generator) if length else tokens[0]
    return prompt + tokenizer.decode(ids[0, -length:].tolist()) if length else prompt


def run_name(model: str, values: dict, data_digest: str) -> str:
    """``<model>_seed=<s>_<hash>``, the hash of the run config less its output folder and data path, with the data
    file's digest (``report.file_digest``) and its attention kinds' revisions: a run directory is reused only by the
    same run of the same code on the same text, and settings that change a run train a new one beside it."""
    essential = {**values, "output_dir": None, "data": {**values["data"], "path": None}, "data_digest": data_digest,
                 **revisions_of(values["model"])}  # a fix that raises a kind's revision trains a new run
    digest = hashlib.sha1(json.dumps(essential, sort_keys=True).encode()).hexdigest()[:8]
    return f"{model}_seed={values['trainer']['seed']}_{digest}"


def _validation_curve(run_dir: Path) -> tuple[list[int], list[float]]:
    """(steps, val/loss) logged during training."""
    steps, losses = [], []
    with (run_dir / "logs" / "metrics.csv").open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row.get("val/loss"):
                steps.append(int(row["step"]))
                losses.append(float(row["val/loss"]))
    return steps, losses


def train_cell(
    model: str, out_dir: Path, settings: ScanShakespeareSettings, seed: int, log: Callable[[str], None],
    data_digest: str,
) -> dict:  # fmt: skip
    """Train (or resume, or reuse) one model's run under ``out_dir/runs`` and score it; a JSON-able dict.
    ``data_digest``: the text's ``report.file_digest``, which names its run directory."""
    # deferred: the training engine imports lightning
    from markovformer.training.runner import build_data, complete_run, load_run

    values = run_config(model, str(find_data()), "", settings, seed)
    run_dir = out_dir / "runs" / run_name(model, values, data_digest)
    config = resolve_run_config({**values, "output_dir": str(run_dir)})
    log(f"[{NAME}] {model} (seed {seed}): {run_dir} (trained, resumed or read)")
    metrics = complete_run(config)
    config, network, _ = load_run(run_dir)
    tokenizer = load_tokenizer(run_dir / "tokenizer")
    start, stop = build_data(config, run_dir).splits["val"]
    text = find_data().read_text(encoding="utf-8")[start:stop]
    tokens = tokenizer.encode(text if settings.eval_chars is None else text[: settings.eval_chars])
    losses = ngram_losses(network, tokens)
    context = network.config.max_positions - 1 if model == "scan_recurrent" else max(CONTEXTS)
    sample = sample_text(network, tokenizer, PROMPT, context, settings.sample_chars, settings.temperature,
                         settings.top_p, seed)  # fmt: skip
    steps, curve = _validation_curve(run_dir)
    return {
        "model": model, "seed": seed, "run_dir": str(run_dir), "losses": {str(n): loss for n, loss in losses.items()},
        "mixture": sum(losses.values()) / len(losses), "targets": len(tokens) - FIRST_TARGET,
        "engine_val": metrics["val"], "steps": metrics["steps"], "train_seconds": metrics["train_seconds"],
        "parameters": network.num_parameters(), "curve_steps": steps, "curve_loss": curve, "sample": sample,
        "threads": metrics.get("threads"),
    }  # fmt: skip


# the step and batch settings each model's ``run_config`` reads
BUDGETS = {"scan_markov": ("scan_steps",), "scan_recurrent": ("recurrent_steps",),
           "markovian_transformer": ("transformer_steps", "transformer_batch"),
           "softmax_transformer": ("transformer_steps", "transformer_batch")}  # fmt: skip


def _other_budgets(model: str) -> tuple[str, ...]:
    """The step and batch settings of the models other than ``model``: its cell reads none of them."""
    return tuple(sorted({name for names in BUDGETS.values() for name in names} - set(BUDGETS[model])))


def run(
    out_dir: Path, *, quick: bool, seeds: tuple[int, ...] | None, overrides: dict, log: Callable[[str], None]
) -> Path:
    settings = configure(QUICK if quick else ScanShakespeareSettings(), overrides, NAME)
    seeds = seeds if seeds is not None else (0,)
    # deferred, after the settings' checks: plots import matplotlib (0.4 s)
    from markovformer.plots.experiments import Panel, plot_panels
    title = "Scan Markov model on Tiny Shakespeare: cross-entropy by context length"
    report = ExperimentReport(out_dir, title, log, settings=asdict(settings))
    report.expect_cells(len(MODELS) * len(seeds))
    text_digest = file_digest(find_data())
    cells = [report.cached(f"{model}_seed={seed}", lambda m=model, s=seed: train_cell(m, report.out_dir, settings, s,
                                                                                       log, text_digest),
                           depends_on={**cell_settings(settings, _other_budgets(model)), "text_sha256": text_digest,
                                       **revisions_of(run_config(model, "", "", settings, seed)["model"])})
             for model in MODELS for seed in seeds]  # fmt: skip
    scored = "the whole validation part" if settings.eval_chars is None else f"its first {settings.eval_chars:,}"
    report.text(
        f"Data: Tiny Shakespeare (`{find_data()}`), characters, first 90 % train / last 10 % validation "
        f"(contiguous). Scored: every "
        f"character from offset {FIRST_TARGET} of {scored} characters of validation text ({cells[0]['targets']:,} "
        f"targets), each predicted from exactly the n characters before it; *mixture* is the mean over n = "
        f"{', '.join(map(str, CONTEXTS))} (the equal mixture of the four n-gram tasks). Nats; bits per character = "
        f"nats / ln 2. Training steps: Scan Markov {settings.scan_steps} (16 windows × 124 n-gram targets, n drawn "
        f"per batch from {list(CONTEXTS)}, label smoothing 0.1), recurrent {settings.recurrent_steps} (16 × 128, "
        f"label smoothing 0.1), Transformers {settings.transformer_steps} ({settings.transformer_batch} windows × 5); "
        f"AdamW, lr 3e-3, cosine decay to 0; {thread_counts(cells)} intra-op thread(s)."
        + (" **Quick mode**: a few steps per model, a smoke test of the pipeline, not a result." if quick else "")
    )
    columns = ["model", "seed", "parameters", *(f"n={n}" for n in CONTEXTS), "mixture", "bits/char", "whole window",
               "train s"]  # fmt: skip
    rows = [[LABELS[c["model"]], c["seed"], c["parameters"], *(c["losses"][str(n)] for n in CONTEXTS), c["mixture"],
             c["mixture"] / math.log(2), c["engine_val"]["loss"] if c["model"] == "scan_recurrent" else "",
             round(c["train_seconds"])] for c in cells]  # fmt: skip
    rows.append(["interpolated Kneser-Ney (reference)", "", "", *KNESER_NEY.values(), KNESER_NEY_MIXTURE,
                 KNESER_NEY_MIXTURE / math.log(2), "", ""])  # fmt: skip
    report.table(
        columns,
        rows,
        caption="Validation cross-entropy (nats) by context length n. *whole window*: the "
        "recurrent model's engine validation loss over its 129-character windows (context up to 128).",
    )
    markov = [c for c in cells if c["model"] == "scan_markov"]
    verdicts = [f"seed {c['seed']}: mixture {c['mixture']:.4f} "
                f"({'at or below' if c['mixture'] <= KNESER_NEY_MIXTURE else 'above'} Kneser-Ney's "
                f"{KNESER_NEY_MIXTURE}, {c['mixture'] - KNESER_NEY_MIXTURE:+.4f}) after {c['steps']} steps, "
                f"{c['train_seconds'] / 60:.1f} min" for c in markov]  # fmt: skip
    report.text("Scan Markov (markov mode) against the Kneser-Ney mixture reference: " + "; ".join(verdicts) + ".")
    # temperature 0 decodes greedily: the settings' nucleus stands by, read by no draw (sample_text)
    drawn = (f"temperature {settings.temperature}, nucleus {settings.top_p}" if settings.temperature > 0
             else "greedy: temperature 0")  # fmt: skip
    report.text(f"Samples from the prompt \"Follow those\" ({drawn}; the scan markov model and the Transformers see "
                "the last 5 characters, the recurrent model up to 128):\n\n"
                + "\n\n".join(f"**{LABELS[c['model']]}** (seed {c['seed']}):\n\n```\n{c['sample']}\n```"
                              for c in cells))  # fmt: skip
    by_n = {f"{LABELS[c['model']]} s{c['seed']}": (list(CONTEXTS), [c["losses"][str(n)] for n in CONTEXTS])
            for c in cells}  # fmt: skip
    by_n["Kneser-Ney"] = (list(CONTEXTS), list(KNESER_NEY.values()))
    curves = {f"{LABELS[c['model']]} s{c['seed']}": (c["curve_steps"], c["curve_loss"]) for c in markov}
    panels = [Panel("validation cross-entropy by context n", by_n, {"Kneser-Ney mixture": KNESER_NEY_MIXTURE}),
              Panel("Scan Markov (markov mode): validation mixture", curves,
                    {"Kneser-Ney mixture": KNESER_NEY_MIXTURE})]  # fmt: skip
    figure = plot_panels(panels, report.out_dir / "cross_entropy.png", "n (left) / training step (right)", "nats")
    report.figure(figure, "Left: validation cross-entropy by context length, Kneser-Ney for reference. Right: the "
                  "Scan Markov model's validation mixture during training")  # fmt: skip
    report.results = {"settings": asdict(settings), "kneser_ney": {"by_n": KNESER_NEY, "mixture": KNESER_NEY_MIXTURE},
                      "cells": cells}  # fmt: skip
    return report.write()


__all__ = ["NAME", "QUICK", "SUMMARY", "ScanShakespeareSettings", "ngram_losses", "run", "run_config", "run_name",
           "sample_text", "train_cell"]  # fmt: skip

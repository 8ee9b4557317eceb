"""``shakespeare-char``: nanoGPT's Shakespeare character model at its CPU budget, against markovformer's models.

nanoGPT's README trains its character model on a CPU with ``--device=cpu --compile=False --eval_iters=20
--block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000
--dropout=0.0`` (config/train_shakespeare_char.py: lr 1e-3 cosine to 1e-4, warm-up 100, AdamW betas (0.9, 0.99);
train.py: weight decay 0.1 on every weight matrix and embedding, gradient clip 1.0) and reports a validation loss of
about 1.88 (1.874 measured with its script on this project's machine). Its split: the first 90 % of the characters
train, the last 10 % validate, 65 symbols (data/shakespeare_char/prepare.py). Its model (model.py with train.py's
``bias=False``): pre-LayerNorm blocks without biases, a GELU MLP, learned absolute positions, the output layer tied
to the token embedding, GPT-2's init (normal 0.02; the residual projections 0.02 / sqrt(2 n_layer)). It trains on
windows whose starts are drawn at random every step and reports the mean loss of ``eval_iters`` = 20 random
validation batches of 12 windows (a sample of 15,360 targets) at the end.

Every row here trains the same budget through the engine (``runner.train``; 2,000 steps x 12 windows x 64 targets,
the same split, width, depth and heads) and is scored twice: nanoGPT's way (20 random batches of 12 windows from the
validation part, drawn by a generator seeded by the row's seed) and on the whole validation part (every target once,
in consecutive 64-target windows, as the engine's validation does).

Rows:
- ``nanogpt``: nanoGPT's block and recipe rebuilt from the library's options (``ffn=gelu``, ``bias=False``,
  ``init_scheme=gpt2``, ``position=learned``, ``tie_word_embeddings``, ``window_starts=random``);
- the ladder: ``ladder_contiguous``, ``ladder_untied``, ``ladder_init``, ``ladder_bias``, then ``softmax_learned``
  and ``softmax_rotary``: each moves one more difference from nanoGPT's block to the library's defaults (contiguous
  windows walked in epochs, an untied output layer, normal(0.02) init everywhere, biased LayerNorms, SwiGLU, rotary
  positions), so each step's change in loss is what that difference is worth;
- the library's models with its defaults (contiguous windows, SwiGLU, untied, rotary): ``softmax_rotary``, the
  Markovian Transformer ``markov_w8``, ``markov_w32``, ``markov_w64`` (local scope, window W, Markov biases up to
  lag 4), ``markov_global``, the hybrid ``hybrid_w32`` (half Markov local heads W=32, half random-feature heads),
  and ``scan_recurrent``, the Scan Markov model in recurrent mode (one gated recurrence, width 128: it has no depth
  or heads to match).

``preset=gpu`` runs nanoGPT's GPU config instead (``GPU_PRESET``: 6 layers, 6 heads, width 384, block 256, batch 64,
5,000 steps, dropout 0.2, bfloat16 autocast on ``trainer.accelerator=gpu``; its README's best validation loss 1.4697),
scoring the whole validation part every 250 steps as nanoGPT evaluates every 250 and reports its best.

Cells are ordinary run directories under ``runs/`` (``markovformer eval``/``generate`` open them); a killed cell
resumes from its last checkpoint, and a finished one is read, so the experiment resumes where it stopped.
``only_finished=true`` writes the report from the cells already finished and lists the rest as not run.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F

from markovformer.data.readers.tokenizer import load_tokenizer
from markovformer.data.recipes.shakespeare import find_tiny_shakespeare
from markovformer.experiments.report import (
    ExperimentReport,
    MissingCell,
    device_name,
    file_digest,
    mean_std,
    revisions_of,
    seed_summary,
)
from markovformer.experiments.scan_shakespeare import run_name
from markovformer.experiments.settings import configure
from markovformer.training.run_config import resolve_run_config
from markovformer.training.trainer_config import TrainerConfig

NAME = "shakespeare-char"
SUMMARY = "nanoGPT's Shakespeare character model at its CPU budget: its block, the ladder to ours, our models"
NANOGPT_CPU_LOSS = 1.874  # nanoGPT's script, this budget, measured on this machine (its README: about 1.88)
NANOGPT_CPU_README = 1.88
NANOGPT_GPU_LOSS = 1.4697  # its README, the GPU config (6 x 6 x 384, block 256, 5,000 iterations, dropout 0.2)
# nanoGPT's block: the model and data options where it differs from the library's defaults
NANOGPT = {"ffn": "gelu", "bias": False, "init_scheme": "gpt2", "position": "learned", "tie_word_embeddings": True,
           "window_starts": "random"}  # fmt: skip
# the ladder: each step moves one more option of nanoGPT's block to the library's default
LADDER = (
    ("nanogpt", "nanoGPT block (GELU, no biases, GPT-2 init, learned positions, tied, random windows)", {}),
    ("ladder_contiguous", "+ contiguous windows (epochs)", {"window_starts": "contiguous"}),
    ("ladder_untied", "+ untied output layer", {"tie_word_embeddings": False}),
    ("ladder_init", "+ normal(0.02) init everywhere", {"init_scheme": "normal"}),
    ("ladder_bias", "+ LayerNorm and MLP biases", {"bias": True}),
    ("softmax_learned", "+ SwiGLU (= our softmax Transformer, learned positions)", {"ffn": "swiglu"}),
    ("softmax_rotary", "+ rotary positions (= our softmax Transformer, defaults)", {"position": "rotary"}),
)
LADDER_ROWS = tuple(key for key, _, _ in LADDER)
# one difference alone on nanoGPT's block, the ladder's biggest step checked out of its order
SINGLE = {"nanogpt_swiglu": ("nanoGPT block with SwiGLU alone", {"ffn": "swiglu"})}
MODEL_ROWS = ("softmax_learned", "softmax_rotary", "markov_w32", "markov_w8", "markov_w64", "markov_global",
              "hybrid_w32", "scan_recurrent")  # fmt: skip
ROWS = tuple(dict.fromkeys(LADDER_ROWS + tuple(SINGLE) + MODEL_ROWS))
LADDER_LABELS = {key: label for key, label, _ in LADDER} | {key: label for key, (label, _) in SINGLE.items()}
LABELS = {
    "softmax_learned": "softmax, learned positions",
    "softmax_rotary": "softmax, rotary",
    "markov_w8": "Markovian local W=8",
    "markov_w32": "Markovian local W=32",
    "markov_w64": "Markovian local W=64",
    "markov_global": "Markovian global",
    "hybrid_w32": "hybrid (Markov local W=32 + RFF heads)",
    "scan_recurrent": "Scan Markov, recurrent mode",
}
MARKOV = {
    "markov_w8": {"attention": "markov", "scope": "local", "window": 8},
    "markov_w32": {"attention": "markov", "scope": "local", "window": 32},
    "markov_w64": {"attention": "markov", "scope": "local", "window": 64},
    "markov_global": {"attention": "markov", "scope": "global"},
    "hybrid_w32": {"attention": "hybrid_split", "scope": "local", "window": 32},
}


@dataclass(frozen=True)
class ShakespeareCharSettings:
    MAY_BE_ZERO: ClassVar[tuple[str, ...]] = ("warmup_steps", "weight_decay", "gradient_clip", "lr_floor")
    rows: tuple[str, ...] = ROWS
    steps: int = 2000
    batch_size: int = 12
    block_size: int = 64
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    dropout: float = 0.0
    lr: float = 1e-3
    lr_floor: float = 0.1  # min lr 1e-4
    warmup_steps: int = 100
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = 0.1
    gradient_clip: float = 1.0
    eval_iters: int = 20  # nanoGPT's evaluation: this many random validation batches of batch_size windows
    eval_every: int = 0  # > 0: the engine also scores the whole validation part every this many steps (best kept)
    accelerator: str = "cpu"  # the engine's trainer.accelerator; the final scoring runs on the same device
    precision: str = "32-true"  # the engine's trainer.precision (nanoGPT's GPU runs use bf16 autocast)
    preset: str = "cpu"  # "gpu": nanoGPT's GPU config (GPU_PRESET); a field named in --set keeps its value
    data_path: str | None = None  # the text (default: the prepared Tiny Shakespeare, see data.recipes.shakespeare)
    only_finished: bool = False  # report the finished cells only; the others are listed as not run

    @property
    def curve_kept(self) -> bool:
        """Whether the engine scores the validation part during training (every ``eval_every`` steps)."""
        return 0 < self.eval_every < self.steps


QUICK = ShakespeareCharSettings(rows=("nanogpt", "softmax_rotary"), steps=200, eval_iters=5)
# nanoGPT's config/train_shakespeare_char.py as run on a GPU (its README: best validation loss 1.4697): evaluated
# every 250 iterations on 200 random batches, bfloat16 autocast (train.py's dtype where the GPU supports it)
GPU_PRESET = {"steps": 5000, "batch_size": 64, "block_size": 256, "d_model": 384, "n_layers": 6, "n_heads": 6,
              "dropout": 0.2, "eval_iters": 200, "eval_every": 250, "accelerator": "gpu",
              "precision": "bf16-mixed"}  # fmt: skip
PRESETS = ("cpu", "gpu")


def resolve_preset(settings: ShakespeareCharSettings, overrides: dict | None) -> ShakespeareCharSettings:
    """``settings`` with ``preset='gpu'`` expanded into ``GPU_PRESET``, but for the fields named in ``overrides``."""
    if settings.preset not in PRESETS:
        raise ValueError(f"{NAME}.preset={settings.preset!r} must be one of {PRESETS}")
    if settings.preset == "cpu":
        return settings
    return dataclasses.replace(settings, **{k: v for k, v in GPU_PRESET.items() if k not in (overrides or {})})


def settings_from(overrides: dict | None, quick: bool = False) -> ShakespeareCharSettings:
    """A run's settings: the budget (``QUICK`` or the default), ``overrides`` applied, then ``preset`` expanded."""
    return configure(QUICK if quick else ShakespeareCharSettings(), overrides, NAME,
                     lambda settings: resolve_preset(settings, overrides))  # fmt: skip


def scoring_device(accelerator: str) -> torch.device:
    """Where the final scoring runs: the GPU the run trained on, else the CPU."""
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def _model_section(row: str, settings: ShakespeareCharSettings) -> tuple[str, dict, dict]:
    """(model_type, model section, extra data options) of ``row``."""
    if row == "scan_recurrent":
        return "scan_markov", {"d_model": settings.d_model, "context_mode": "recurrent", "dropout": settings.dropout,
                               "max_positions": settings.block_size + 1}, {}  # fmt: skip
    shape = {"d_model": settings.d_model, "n_layers": settings.n_layers, "n_heads": settings.n_heads,
             "dropout": settings.dropout}  # fmt: skip
    if row in MARKOV:
        return "markovian_transformer", {**shape, **MARKOV[row]}, {}
    options = dict(NANOGPT)
    if row in SINGLE:
        options.update(SINGLE[row][1])
    else:
        for _, _, step in LADDER[: LADDER_ROWS.index(row) + 1]:
            options.update(step)
    data = {"window_starts": options.pop("window_starts")}
    model = {**shape, "attention": "softmax", "scope": "global", **options}
    if model["position"] == "learned":
        model["max_positions"] = settings.block_size + 1  # windows of block_size + 1 tokens, block_size targets
    return "markovian_transformer", model, data


def run_config(row: str, data_path: str, output_dir: str, settings: ShakespeareCharSettings, seed: int = 0) -> dict:
    """The engine run config (before resolution) of ``row`` (one of ``ROWS``)."""
    if row not in ROWS:
        raise ValueError(f"row {row!r} must be one of {ROWS}")
    model_type, model, data = _model_section(row, settings)
    every = settings.eval_every if settings.curve_kept else settings.steps
    return {
        "task": "causal_lm", "model_type": model_type, "output_dir": output_dir, "model": model,
        "data": {"source": "text", "path": data_path, "tokenizer": "char", "fractions": [0.9, 0.1, 0.0],
                 "seq_len": settings.block_size, **data},
        "trainer": {"max_steps": settings.steps, "batch_size": settings.batch_size, "lr": settings.lr,
                    "lr_floor": settings.lr_floor, "warmup_steps": settings.warmup_steps, "decay": "cosine",
                    "betas": list(settings.betas), "weight_decay": settings.weight_decay,
                    "gradient_clip": settings.gradient_clip, "eval_every": every,
                    "checkpoint_every": max(1, settings.steps // 4), "log_every": max(1, settings.steps // 10),
                    "eval_batch_size": 64, "seed": seed, "logger": "csv", "threads": 1, **_device_options(settings)},
    }  # fmt: skip


def _device_options(settings: ShakespeareCharSettings) -> dict:
    """accelerator and precision where they differ from the engine's defaults: named only then, so the CPU cells'
    configs (their run names and cached cells) stay as they were before the GPU preset."""
    defaults = {field.name: field.default for field in dataclasses.fields(TrainerConfig)}
    chosen = {key: getattr(settings, key) for key in ("accelerator", "precision")}
    return {key: value for key, value in chosen.items() if value != defaults[key]}


@torch.no_grad()
def window_losses(model: torch.nn.Module, windows: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
    """Per-window mean cross-entropy (nats) of tokens 1.. of each window (N, L) given the tokens before it."""
    model.eval()
    device = next(model.parameters()).device
    losses = []
    for start in range(0, len(windows), batch_size):
        batch = windows[start : start + batch_size].to(device)
        logits = model(batch).logits[:, :-1].float()
        losses.append(F.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none").mean(dim=1).cpu())
    return torch.cat(losses)


def random_batch_loss(model: torch.nn.Module, tokens: torch.Tensor, block_size: int, batches: int, batch_size: int,
                      seed: int) -> float:  # fmt: skip
    """nanoGPT's ``estimate_loss``: the mean over ``batches`` batches of ``batch_size`` windows of block_size + 1
    tokens starting anywhere in ``tokens`` (uniform starts, a generator seeded by ``seed``) of each batch's mean
    loss over its block_size targets."""
    if len(tokens) <= block_size:
        raise ValueError(f"{len(tokens)} tokens cannot hold a window of block_size + 1 = {block_size + 1}")
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(len(tokens) - block_size, (batches * batch_size,), generator=generator)
    windows = torch.stack([tokens[start : start + block_size + 1] for start in starts.tolist()])
    return float(window_losses(model, windows).mean())


def full_split_loss(model: torch.nn.Module, tokens: torch.Tensor, block_size: int) -> float:
    """Mean cross-entropy over every target of ``tokens`` but the first, once each: consecutive windows of
    block_size + 1 tokens overlapping by one (a last shorter window scored alone), weighted by their targets."""
    total, count = 0.0, 0
    starts = range(0, len(tokens) - 1, block_size)
    full = [start for start in starts if start + block_size + 1 <= len(tokens)]
    if full:
        windows = torch.stack([tokens[start : start + block_size + 1] for start in full])
        total += float(window_losses(model, windows).sum()) * block_size
        count += len(full) * block_size
    last = full[-1] + block_size if full else 0
    if last < len(tokens) - 1:
        total += float(window_losses(model, tokens[None, last:]).sum()) * (len(tokens) - 1 - last)
        count += len(tokens) - 1 - last
    return total / count


def unigram_entropy(train: list[int], val: list[int]) -> float:
    """Cross-entropy (nats) of the validation tokens under the train part's character frequencies (add-one)."""
    counts = Counter(train)
    symbols = set(train) | set(val)
    total = len(train) + len(symbols)
    return -sum(math.log((counts[token] + 1) / total) for token in val) / len(val)


def train_cell(row: str, out_dir: Path, settings: ShakespeareCharSettings, seed: int, log: Callable[[str], None],
               data_path: Path, data_digest: str) -> dict:  # fmt: skip
    """Train (or resume, or read) one row's run under ``out_dir/runs`` and score it both ways; a JSON-able dict.
    ``data_digest``: the text's ``report.file_digest``, which names its run directory."""
    # deferred: the training engine imports lightning
    from markovformer.training.runner import build_data, complete_run, load_run

    values = run_config(row, str(data_path), "", settings, seed)
    run_dir = out_dir / "runs" / run_name(row, values, data_digest)
    config = resolve_run_config({**values, "output_dir": str(run_dir)})
    log(f"[{NAME}] {row} (seed {seed}): {run_dir}")
    cpu, wall = time.process_time(), time.perf_counter()
    metrics = complete_run(config)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    config, network, _ = load_run(run_dir)
    device = scoring_device(settings.accelerator)
    network.to(device)
    tokenizer = load_tokenizer(run_dir / "tokenizer")
    splits = build_data(config).splits
    text = data_path.read_text(encoding="utf-8")
    val = torch.tensor(tokenizer.encode(text[slice(*splits["val"])]))
    random_loss = random_batch_loss(network, val, settings.block_size, settings.eval_iters, settings.batch_size,
                                    1337 + seed)  # fmt: skip
    full_loss = full_split_loss(network, val, settings.block_size)
    tokens = metrics["steps"] * settings.batch_size * settings.block_size
    # the steps' own seconds (train_seconds also holds the start-up and the validations: the final one over the
    # whole validation part, and one every eval_every steps under preset=gpu); a run from before kept none
    step_seconds = metrics.get("train_step_seconds") or metrics["train_seconds"]
    curve = validation_curve(run_dir / "logs" / "metrics.csv")
    return {
        "row": row, "seed": seed, "run_dir": str(run_dir), "random_batches": random_loss, "full_split": full_loss,
        "engine_val": metrics["val"]["loss"], "steps": metrics["steps"], "train_seconds": metrics["train_seconds"],
        "tokens_per_second": tokens / step_seconds, "cpu_seconds": cpu if wall > 0.5 * metrics[
            "train_seconds"] else None, "parameters": network.num_parameters(), "val_targets": len(val) - 1,
        "threads": metrics.get("threads"), "val_curve": curve,
        "best_engine_val": min(curve.values()) if curve else metrics["val"]["loss"],
        "device": device_name(device),
    }  # fmt: skip


def validation_curve(metrics_csv: Path) -> dict[int, float]:
    """{step: validation loss on the whole validation part} from the engine's CSV log (empty without one)."""
    if not metrics_csv.is_file():
        return {}
    with metrics_csv.open(newline="", encoding="utf-8") as handle:
        return {int(row["step"]): float(row["val/loss"]) for row in csv.DictReader(handle) if row.get("val/loss")}


def _shown(values: list[float]) -> str:
    return f"{mean_std(seed_summary(values), 4)} (n={len(values)})"


def _paired_delta(losses: dict[int, float], against: dict[int, float]) -> str:
    """The mean over the seeds in both of ``losses[seed] - against[seed]``, with those seeds named when either has
    others; "no common seed" when none is in both."""
    common = sorted(set(losses) & set(against))
    if not common:
        return "no common seed"
    if len(losses) == len(against) == len(common):  # the same seeds: the difference of the two rows' means
        return f"{statistics.fmean(losses.values()) - statistics.fmean(against.values()):+.4f}"
    delta = statistics.fmean(losses[seed] - against[seed] for seed in common)
    return f"{delta:+.4f} (seed{'s' if len(common) > 1 else ''} {', '.join(map(str, common))})"


def table_rows(by_row: dict[str, list[dict]], keys: tuple[str, ...], labels: dict[str, str], curve_kept: bool,
               base: str | None = None) -> list[list]:  # fmt: skip
    """Report rows of ``keys`` (those with cells in ``by_row``); Δ of the full-split loss against row ``base``, else
    against the row above, named when a row between them in ``keys`` was not run (the Δ then bundles several
    differences). Δ pairs the seeds: the mean over the seeds both rows have of this row's loss less the other's
    (the difference of the two means when they have the same seeds), the seeds named when not every seed of either
    row is in it: a row of seed 0 alone against a row of seeds 0 and 1 took seed 1's loss into its Δ."""
    rows, previous = [], None  # (key, {seed: full-split loss}) of the row Δ is taken against
    for index, key in enumerate(keys):
        if key not in by_row:
            continue
        group = by_row[key]
        random_mean = statistics.fmean(c["random_batches"] for c in group)
        full_mean = statistics.fmean(c["full_split"] for c in group)
        full = {c["seed"]: c["full_split"] for c in group}
        step = "" if previous is None else _paired_delta(full, previous[1])
        if previous is not None and base is None and keys[index - 1] != previous[0]:
            step += f" (vs {previous[0]})"
        if base is None or key == base:
            previous = (key, full)
        cpu = [c["cpu_seconds"] for c in group if c["cpu_seconds"] is not None]
        rows.append([key, labels[key], group[0]["parameters"], _shown([c["random_batches"] for c in group]),
                     _shown([c["full_split"] for c in group]), f"{random_mean - full_mean:+.4f}", step,
                     round(statistics.fmean(c["tokens_per_second"] for c in group)),
                     round(statistics.fmean(cpu)) if cpu else ""]
                    + ([_shown([c["best_engine_val"] for c in group])] if curve_kept else []))  # fmt: skip
    return rows


def run(
    out_dir: Path, *, quick: bool, seeds: tuple[int, ...] | None, overrides: dict, log: Callable[[str], None]
) -> Path:
    settings = settings_from(overrides, quick)
    unknown = [row for row in settings.rows if row not in ROWS]
    if unknown or not settings.rows:
        raise ValueError(f"{NAME}.rows={list(settings.rows)!r}: each must be one of {ROWS}")
    seeds = seeds if seeds is not None else (0,)
    data_path = find_tiny_shakespeare(settings.data_path)
    # deferred, after the settings' checks: plots import matplotlib (0.4 s)
    from markovformer.plots.experiments import Panel, plot_panels, plot_row_errorbars
    text_digest = file_digest(data_path)  # the cells depend on the text, not on where it lies
    machine = "a GPU (its GPU config)" if settings.preset == "gpu" else "a CPU"
    report = ExperimentReport(out_dir, f"nanoGPT's Shakespeare character model on {machine}, and markovformer's "
                              "models", log, settings=asdict(settings))  # fmt: skip
    why_not_run = "--from-cells" if report.stored_only else "only_finished=true"  # how the rest were left out
    report.stored_only = report.stored_only or settings.only_finished  # then no cell is computed
    pending = [(row, seed) for seed in seeds for row in settings.rows]  # every row of a seed before the next seed
    report.expect_cells(len(pending))
    cells, not_run = [], []
    for row, seed in pending:
        values = run_config(row, "", "", settings, seed)
        key = f"{row}_seed={seed}"
        try:
            cells.append(report.cached(key, lambda r=row, s=seed: train_cell(r, report.out_dir, settings, s, log,
                                                                             data_path, text_digest),
                                       depends_on={**values, "eval_iters": settings.eval_iters,
                                                   "text_sha256": text_digest, **revisions_of(values["model"])}))
        except MissingCell:  # only_finished: not stored, or stored under other settings (steps, a kind's revision)
            not_run.append(key)
    if not cells:
        raise ValueError(f"{NAME}: no finished cell in {report.out_dir} (only_finished=true)")
    text = data_path.read_text(encoding="utf-8")
    cut = int(0.9 * len(text))
    alphabet = {char: index for index, char in enumerate(sorted(set(text[:cut])))}
    unigram = unigram_entropy([alphabet[c] for c in text[:cut]], [alphabet[c] for c in text[cut:] if c in alphabet])
    gpu = settings.preset == "gpu"
    where = (f"{cells[0].get('device', 'cpu')}, trainer.precision {settings.precision}" if gpu else
             "1 intra-op thread")  # fmt: skip
    reference_loss = NANOGPT_GPU_LOSS if gpu else NANOGPT_CPU_LOSS
    reference_label = "nanoGPT's README (GPU config, its best)" if gpu else "nanoGPT (its script, here)"
    reference = (f"nanoGPT at this budget: its README's best validation loss {NANOGPT_GPU_LOSS} (GPU config)." if gpu
                 else f"nanoGPT at this budget: {NANOGPT_CPU_LOSS} (its script on this machine; README about "
                 f"{NANOGPT_CPU_README}).")  # fmt: skip
    report.text(
        f"Data: `{data_path}`, characters ({len(alphabet)} symbols in the train part), first 90 % train / last 10 % "
        f"validation. Budget per row: {settings.steps} steps × {settings.batch_size} windows × "
        f"{settings.block_size} targets ({settings.steps * settings.batch_size * settings.block_size:,} training "
        f"targets); width {settings.d_model}, {settings.n_layers} layers, {settings.n_heads} heads, dropout "
        f"{settings.dropout}; AdamW lr {settings.lr:g} (warm-up {settings.warmup_steps}, cosine to "
        f"{settings.lr * settings.lr_floor:g}), betas {tuple(settings.betas)}, weight decay {settings.weight_decay}, "
        f"clip {settings.gradient_clip}; {where}. *random batches*: nanoGPT's evaluation ("
        f"{settings.eval_iters} × {settings.batch_size} random validation windows, "
        f"{settings.eval_iters * settings.batch_size * settings.block_size:,} targets); *full split*: every "
        f"validation target once ({cells[0]['val_targets']:,}). Nats. Unigram "
        f"cross-entropy of the validation text under the train part's character frequencies: {unigram:.4f}. "
        + reference
        + (
            f" *best full split*: the engine's lowest whole-validation loss over its evaluations every "
            f"{settings.eval_every} steps (nanoGPT's README reports its best evaluation)."
            if settings.curve_kept
            else ""
        )
        + (" **Quick mode**: a few steps per row, a smoke test of the pipeline, not a result." if quick else "")
    )
    by_row: dict[str, list[dict]] = {}
    for cell in cells:
        by_row.setdefault(cell["row"], []).append(cell)

    columns = ["row", "model", "parameters", "val loss, random batches", "val loss, full split",
               "random − full", "Δ full vs row above", "tokens/s", "CPU s"] + (
                   ["best full split"] if settings.curve_kept else [])  # fmt: skip
    ladder = table_rows(by_row, LADDER_ROWS, LADDER_LABELS, settings.curve_kept)
    single = table_rows(by_row, ("nanogpt", *SINGLE), LADDER_LABELS, settings.curve_kept, base="nanogpt")
    if ladder:
        report.table(columns, ladder, caption="The ladder: nanoGPT's block, then one difference at a time moved to "
                     "markovformer's defaults (each row keeps the changes above it). Mean ± sample std (n − 1) over "
                     "seeds; Δ: the mean over the seeds both rows have of their difference.")  # fmt: skip
    if len(single) > 1:
        report.table(columns, single, caption="One difference alone on nanoGPT's block (Δ against the block).")
    models = table_rows(by_row, MODEL_ROWS, LABELS, settings.curve_kept)
    if models:
        report.table(columns, models, caption="markovformer's models at nanoGPT's budget, library defaults "
                     "(contiguous windows, SwiGLU, untied, rotary unless named). *Δ* here is against the row above "
                     "and means nothing across models.")  # fmt: skip
    if not_run:
        report.text(f"**Not run** (listed, not trained: {why_not_run}): " + ", ".join(not_run) + ". Run the "
                    f"same command without {why_not_run.split('=')[0]} to train them; finished cells are read, not "
                    "retrained.")  # fmt: skip
    keys = [key for key in ROWS if key in by_row]
    figure = plot_row_errorbars(
        {LABELS.get(key, LADDER_LABELS.get(key, key)): {"random batches": [c["random_batches"] for c in by_row[key]],
                       "full split": [c["full_split"] for c in by_row[key]]} for key in keys},
        {f"{reference_label} {reference_loss}": reference_loss},
        report.out_dir / "val_loss.png", "validation loss (nats)")  # fmt: skip
    report.figure(figure, "Validation loss per row, mean ± std over seeds, scored both ways")
    if settings.curve_kept:  # JSON keeps the steps as strings
        curves = {f"{c['row']} s{c['seed']}": ([int(step) for step in c["val_curve"]], list(c["val_curve"].values()))
                  for c in cells}  # fmt: skip
        panel = Panel("whole validation part", curves, {reference_label: reference_loss})
        report.figure(plot_panels([panel], report.out_dir / "val_curve.png", "step", "validation loss (nats)"),
                      f"Validation loss every {settings.eval_every} steps, one line per row and seed")  # fmt: skip
    report.results = {"settings": asdict(settings), "unigram_entropy": unigram, "nanogpt_loss": reference_loss,
                      "cells": cells, "not_run": not_run}  # fmt: skip
    return report.write()


__all__ = ["GPU_PRESET", "NAME", "QUICK", "ROWS", "SUMMARY", "ShakespeareCharSettings", "full_split_loss",
           "random_batch_loss", "run", "run_config", "settings_from", "table_rows", "train_cell", "unigram_entropy",
           "validation_curve", "window_losses"]  # fmt: skip

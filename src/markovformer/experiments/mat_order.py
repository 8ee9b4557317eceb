"""``mat-order``: MAT's decoder order k ∈ {1, 2, 3, 4, 5, ∞}, transparent attention on and off (MAT: order k lets
y_i depend only on y_{i-k..i-1} and the source; transparent attention takes every layer's keys and values from the
decoder's layer-0 input, so the order holds at any depth).

Data: the synthetic translation task of true order 2 (``data.translation.SyntheticTranslationSource``: y_i is a fixed
random table of x_i, y_{i-1}, y_{i-2}), or a parallel TSV of yours (``--set tsv_path=pairs.tsv``; for instance the
German-English pairs of ``data.recipes.de_en.prepare_de_en``). Each cell trains one small MAT
(``MarkovTranslatorForConditionalGeneration``) and
reports greedy BLEU on the test split (sacrebleu on detokenised text), greedy decoding speed on that split, and the
decoder's state after 64 generated tokens in floats per hypothesis: MAT keeps the last k layer-0 inputs (k·D), any
other decoder a per-layer key/value cache (2·layers·D per kept token; with an order k only the last k are kept).
Expected: BLEU is low for k = 1 and flat from the true order on; transparent k = ∞ and the standard AT match.
``quick`` runs k ∈ {1, 2, ∞} with transparent decoders on a smaller table for 600 steps (about 1.5 min of CPU): a
smoke test of every cell, whose report says so; its decoding speeds (a short decode on a shared CPU) are noise, and
the speed axis starts at 0 so that noise never reads as an effect.
``--set corpus=de-en`` compares MAT with the Transformer on real German-English sentences instead, in both
directions, with beam-4 BLEU and chrF (``mat_order_corpus``).

Training is a plain loop (``experiments.fitting.fit_on_stream``): dozens of tiny cells, where the engine's Lightning
runs (datasets, checkpoints, logs per run) would cost more than the training, and the same loop as the other
experiments keeps cells comparable. Batches come from the length-bucketed sampler over a fixed training set. By
default at a constant rate, without dropout or label smoothing (the synthetic task is learned exactly);
``decay``, ``dropout`` and ``label_smoothing`` give the usual recipe of translation for real sentences, which
otherwise overfit a small corpus within a few epochs.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import ClassVar

import torch

from markovformer.data.bundle import DataBundle, examples_at
from markovformer.data.translation import (
    LengthBucketSampler,
    SyntheticTranslationSource,
    collate_translation,
    corpus_bleu,
    decode_generated,
    load_translation,
    translation_lengths,
)
from markovformer.experiments.fitting import FitResult, SamplerStream, fit_on_stream
from markovformer.experiments.report import ExperimentReport, cell_settings, device_name, file_digest
from markovformer.experiments.settings import configure
from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration
from markovformer.models.markov_translator.generation import decode_step, start_decoding
from markovformer.training.optim import DECAYS

NAME = "mat-order"
SUMMARY = "MAT decoder order k = 1..5, ∞, transparent on/off, on a task of true order 2: BLEU, decode speed, state"
STATE_PROBE_TOKENS = 64  # the decoder state is measured after this many generated tokens
CORPORA = ("synthetic", "de-en")
DIRECTIONS = ("de-en", "en-de")


@dataclass(frozen=True)
class MatOrderSettings:
    MAY_BE_ZERO: ClassVar[tuple[str, ...]] = ("warmup_steps",)
    orders: tuple[int | None, ...] = (1, 2, 3, 4, 5, None)  # None: unbounded (k = ∞)
    transparent: tuple[bool, ...] = (True, False)
    tsv_path: str | None = None  # a parallel TSV instead of the synthetic task
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2  # encoder and decoder each
    batch_size: int = 64
    steps: int = 1500
    lr: float = 2e-3
    warmup_steps: int = 100
    decay: str = "constant"  # after warm-up; "cosine" or "linear": down to lr / 10 at the last step
    dropout: float = 0.0
    label_smoothing: float = 0.0  # of the training loss only: validation losses are plain cross-entropy
    eval_every: int = 250
    keep_best: bool = False  # end each fit with the weights of its lowest validation loss (of the evaluations)
    source_symbols: int = 4  # synthetic task only: its alphabets and training set
    target_symbols: int = 6
    train_examples: int = 4000
    tsv_vocab_size: int = 2000  # joint BPE size for a user TSV
    tsv_max_length: int = 128  # longer user training pairs are dropped
    corpus: str = "synthetic"  # "de-en": the de-en recipe's real pairs, both directions (``mat_order_corpus``)
    de_en_path: str = "data/de_en.tsv"  # where `markovformer data prepare de-en` writes them
    directions: tuple[str, ...] = ("de-en", "en-de")  # corpus=de-en only
    beam_size: int = 4  # corpus=de-en only: the beam of its BLEU and chrF
    device: str = "cpu"  # where the cells train and decode ("cuda": a GPU; ``settings.check_device``); in no key

    def __post_init__(self) -> None:
        if not self.orders or any(order is not None and order < 1 for order in self.orders):
            raise ValueError(f"orders={self.orders!r} must be positive integers or None (k = ∞), at least one")
        if not self.transparent:
            raise ValueError("transparent must list at least one of true, false")
        if self.tsv_path is not None and not Path(self.tsv_path).is_file():
            raise ValueError(f"tsv_path={self.tsv_path!r}: no such file")
        if self.corpus not in CORPORA:
            raise ValueError(f"corpus={self.corpus!r} must be one of {CORPORA}")
        if not self.directions or any(d not in DIRECTIONS for d in self.directions):
            raise ValueError(f"directions={self.directions!r} must list some of {DIRECTIONS}")
        if self.decay not in DECAYS:
            raise ValueError(f"decay={self.decay!r} must be one of {DECAYS}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout!r} must lie in [0, 1)")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={self.label_smoothing!r} must lie in [0, 1)")


def kept_fit(fit: FitResult) -> dict:
    """A cell's record of its fit: the validation curve and the loss of the weights it ends with (the last, or
    with ``keep_best`` the lowest, whose step ``best_step`` says)."""
    return {"steps": fit.steps, "val_losses": fit.evaluations, "final_val_loss": fit.kept_value,
            **({"best_step": fit.best_step} if fit.best_step is not None else {})}


def keep_best_key(settings: MatOrderSettings) -> dict:
    """What ``keep_best`` adds to a cell's ``depends_on``: nothing when off, so the cells from before it stay valid."""
    return {"keep_best": True} if settings.keep_best else {}


def on_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A collated batch's tensors on ``device``."""
    return {name: tensor.to(device) for name, tensor in batch.items()}


# Quick: a smaller table (3 × 5 × 5 entries instead of 4 × 7 × 7) that 600 steps learn; k = 1 still falls behind.
# Transparent decoders only: three cells of about 27 s of CPU each (measured), the order effect without the on/off
# comparison (add `--set 'transparent=[true, false]'` for it).
QUICK = MatOrderSettings(orders=(1, 2, None), transparent=(True,), steps=600, eval_every=200, source_symbols=3,
                         target_symbols=4, train_examples=2000)  # fmt: skip


def training_text(settings: MatOrderSettings) -> str:
    """The training recipe of the settings, in words, for the reports."""
    schedule = "constant" if settings.decay == "constant" else f"{settings.decay} decay to lr/10"
    return (f"{settings.steps} AdamW steps at lr {settings.lr} ({settings.warmup_steps} warm-up, then {schedule}) on "
            f"length-bucketed batches of {settings.batch_size}, dropout {settings.dropout}, label smoothing "
            f"{settings.label_smoothing}"
            + (", each model kept at its lowest validation loss of the evaluations" if settings.keep_best else ""))


def train_order_cell(
    bundle: DataBundle,
    order: int | None,
    transparent: bool,
    seed: int,
    settings: MatOrderSettings,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Train one MarkovTranslatorForConditionalGeneration on ``bundle`` and measure it: test BLEU (greedy),
    decoding speed, decoder state."""
    model, fit, every, max_decode = fit_translator(bundle, order, transparent, seed, settings, log)
    config = model.config
    model.eval()
    device = torch.device(settings.device)
    test = on_device(collate_translation(every["test"]), device)
    start = time.perf_counter()
    generated = model.generate(test["src_ids"], test["src_mask"], max_new_tokens=max_decode)
    decode_seconds = time.perf_counter() - start
    hypotheses = decode_generated(bundle.tokenizer, generated)
    references = [bundle.tokenizer.decode(example["tgt_ids"].tolist()) for example in every["test"]]
    generated_tokens = int((generated != config.pad_token_id).sum())
    return {
        "order": order, "transparent": transparent, "n_layers": settings.n_layers, "seed": seed, **kept_fit(fit),
        "bleu": corpus_bleu(hypotheses, references),
        "exact_match": sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(references),
        "decode_tokens_per_s": generated_tokens / decode_seconds, "decode_seconds": decode_seconds,
        "state_floats_per_row": decoder_state_floats(model, test["src_ids"][:1], STATE_PROBE_TOKENS),
        "parameters": sum(p.numel() for p in model.parameters()), "train_seconds": fit.seconds,
        "examples": [[h, r] for h, r in zip(hypotheses[:3], references[:3], strict=True)],
        "device": device_name(device),
    }  # fmt: skip


def translator_config(bundle: DataBundle, order: int | None, transparent: bool,
                      settings: MatOrderSettings) -> tuple[MarkovTranslatorConfig, int]:  # fmt: skip
    """The config of a cell's translator (positions for the longest pair of ``bundle`` and its decoding) and the
    longest decoding its measurements allow (the longest pair plus 8); ValueError for an order it cannot take."""
    longest = max(max(translation_lengths(examples_at(split, range(len(split)))))
                  for split in (bundle.train, bundle.val, bundle.test))  # fmt: skip
    max_decode = longest + 8  # room for a model that over-generates, without letting it run for ever
    config = MarkovTranslatorConfig(
        vocab_size=bundle.info["vocab_size"], d_model=settings.d_model, n_heads=settings.n_heads,
        n_encoder_layers=settings.n_layers, n_decoder_layers=settings.n_layers, order=order, transparent=transparent,
        dropout=settings.dropout, max_positions=max(longest, max_decode, STATE_PROBE_TOKENS) + 1,
    )  # fmt: skip
    return config, max_decode


def check_cell_configs(bundle: DataBundle, cells: Iterable[tuple[int | None, bool]],
                       settings: MatOrderSettings) -> None:  # fmt: skip
    """ValueError naming the order of the first (order, transparent) cell whose translator cannot be built on
    ``bundle``, before any cell trains (a bad order listed last failed after the others' training)."""
    for order, transparent in cells:
        try:
            translator_config(bundle, order, transparent, settings)
        except ValueError as error:
            raise ValueError(f"orders: k={order} cannot be built: {error}") from None


def fit_translator(
    bundle: DataBundle,
    order: int | None,
    transparent: bool,
    seed: int,
    settings: MatOrderSettings,
    log: Callable[[str], None] | None = None,
) -> tuple[MarkovTranslatorForConditionalGeneration, FitResult, dict[str, list], int]:
    """Train one MAT of the settings on ``bundle``: the model, its fit, every split's examples, and the longest
    decoding its measurements allow (the longest pair plus 8)."""
    every = {name: examples_at(split, range(len(split))) for name, split in  # small data sets, read by index
             (("train", bundle.train), ("val", bundle.val), ("test", bundle.test))}  # fmt: skip
    config, max_decode = translator_config(bundle, order, transparent, settings)
    torch.manual_seed(seed)
    device = torch.device(settings.device)
    model = MarkovTranslatorForConditionalGeneration(config).to(device)
    batches = SamplerStream(LengthBucketSampler(translation_lengths(every["train"]), settings.batch_size, seed=seed))
    validation = on_device(collate_translation(every["val"]), device)

    def loss_on_batch(indices: torch.Tensor) -> torch.Tensor:
        batch = on_device(collate_translation([bundle.train[i] for i in indices.tolist()]), device)
        return model(**batch, label_smoothing=settings.label_smoothing).loss

    fit = fit_on_stream(
        model, loss_on_batch, batches, lambda: model(**validation).loss,
        steps=settings.steps, lr=settings.lr, seed=seed, warmup_steps=settings.warmup_steps, decay=settings.decay,
        eval_every=settings.eval_every, log=log, label=f"k={_order_name(order)} transparent={transparent} seed={seed}",
        keep_best=settings.keep_best,
    )  # fmt: skip
    return model, fit, every, max_decode


@torch.no_grad()
def decoder_state_floats(model: MarkovTranslatorForConditionalGeneration, src_ids: torch.Tensor, tokens: int) -> int:
    """Floats the decoder holds per hypothesis after ``tokens`` steps, besides the source memory: the layer-0 input
    window (MAT) or the self-attention key/value cache (every other decoder)."""
    state = start_decoding(model, src_ids)
    ids = torch.full((src_ids.shape[0],), model.config.bos_token_id, dtype=torch.long, device=src_ids.device)
    for _ in range(tokens):
        ids = decode_step(model, ids, state).argmax(dim=-1)
    held = [state.inputs] if state.inputs is not None else [t for pair in state.cache or [] for t in pair]
    return sum(t.numel() for t in held) // src_ids.shape[0]


def _order_name(order: int | None) -> str:
    return "inf" if order is None else str(order)


def synthetic_task(settings: MatOrderSettings) -> SyntheticTranslationSource:
    """The synthetic task of the settings (true order 2, 6-16 words)."""
    return SyntheticTranslationSource(source_symbols=settings.source_symbols, target_symbols=settings.target_symbols,
                                      train_examples=settings.train_examples)  # fmt: skip


def _data(tsv_path: str | None, seed: int, settings: MatOrderSettings) -> tuple[DataBundle, str]:
    """The cell's data and a tag naming it in cache keys (a TSV's tag carries a hash of its bytes)."""
    if tsv_path is None:
        task = synthetic_task(settings)
        return task.build(seed), f"synthetic-{task.source_symbols}-{task.target_symbols}"
    digest = file_digest(tsv_path)
    bundle = load_translation(tsv_path, vocab_size=settings.tsv_vocab_size, seed=seed,
                              max_length=settings.tsv_max_length)  # fmt: skip
    return bundle, f"tsv-{digest}"


def run(
    out_dir: Path,
    *,
    quick: bool,
    seeds: tuple[int, ...] | None,
    overrides: dict | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    settings = configure(QUICK if quick else MatOrderSettings(), overrides, NAME)
    # Tiny models run thousands of small ops: one intra-op thread is faster, and on a busy machine immune to the
    # spin-wait contention that made two threads several times slower here. Restored afterwards.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if settings.corpus == "de-en":
            from markovformer.experiments.mat_order_corpus import run_de_en

            return run_de_en(Path(out_dir), settings, seeds if seeds is not None else (0,), log, quick=quick)
        return _run(Path(out_dir), settings, seeds if seeds is not None else (0,), log, quick)
    finally:
        torch.set_num_threads(threads)


def _run(out_dir: Path, settings: MatOrderSettings, seeds: tuple[int, ...], log: Callable[[str], None],
         quick: bool = False) -> Path:  # fmt: skip
    # deferred: plots import matplotlib
    from markovformer.plots.experiments import Panel, plot_panels

    tsv_path, orders = settings.tsv_path, settings.orders
    report = ExperimentReport(out_dir, "MAT decoder order and transparent attention", log, settings=asdict(settings))
    source = synthetic_task(settings)
    data_text = (
        f"your parallel TSV `{tsv_path}` (random 90/5/5 split per seed, joint BPE of {settings.tsv_vocab_size})"
        if tsv_path
        else f"the synthetic task of true order {source.order} ({source.source_symbols} source and "
        f"{source.target_symbols} target symbols, {source.min_length}-{source.max_length} words, "
        f"{settings.train_examples} training pairs)"
    )
    report.text(
        f"Data: {data_text}. Model: MarkovTranslatorForConditionalGeneration, d_model {settings.d_model}, "
        f"{settings.n_heads} heads, "
        f"{settings.n_layers}+{settings.n_layers} layers. Training: {training_text(settings)}. "
        f"BLEU: greedy decoding of the test split, sacrebleu corpus BLEU on detokenised text. Speed: greedy "
        f"decoding of the whole test split as one batch (wall clock, on a possibly shared CPU: compare within a run). "
        f"State: floats per hypothesis after {STATE_PROBE_TOKENS} generated tokens."
        + (" **Quick mode is a smoke test**: fewer orders, one decoder kind and a smaller table check that every "
           "cell trains, decodes and is scored; at this size the decoding speeds are noise (the speed axis starts "
           "at 0), and the BLEU ordering of the full run is not guaranteed: run it without --quick for the result."
           if quick else "")
    )  # fmt: skip
    # not the grid's axes, the de-en corpus's settings, the path (the key's tag has the file's digest) or the other
    # data's settings: a run with one more order or decoder kind reads back the cells it has
    synthetic, tsv = ("source_symbols", "target_symbols", "train_examples"), ("tsv_vocab_size", "tsv_max_length")
    other_data = synthetic if tsv_path else tsv
    depends_on = cell_settings(settings, ("orders", "transparent", "tsv_path", "corpus", "de_en_path", "directions",
                                          "beam_size", "device", "keep_best", *other_data))  # fmt: skip
    depends_on |= keep_best_key(settings)
    cells = []
    report.expect_cells(len(seeds) * len(settings.transparent) * len(orders))
    for seed in seeds:
        bundle, tag = _data(tsv_path, seed, settings)
        check_cell_configs(bundle, itertools.product(orders, settings.transparent), settings)
        for transparent in settings.transparent:
            for order in orders:
                key = f"{tag}_k={_order_name(order)}_{'transparent' if transparent else 'standard'}_seed={seed}"
                cells.append(report.cached(key, partial(train_order_cell, bundle, order, transparent, seed, settings,
                                                        log), depends_on=depends_on))  # fmt: skip
    rows = [
        [_order_name(c["order"]), "on" if c["transparent"] else "off", _row_name(c), c["seed"], c["bleu"],
         c["exact_match"], c["final_val_loss"], round(c["decode_tokens_per_s"]), c["state_floats_per_row"],
         round(c["train_seconds"], 1)]
        for c in cells
    ]  # fmt: skip
    report.table(
        ["k", "transparent", "decoder", "seed", "BLEU", "exact match", "val loss", "decode tok/s",
         f"state floats @{STATE_PROBE_TOKENS}", "train s"],
        rows, caption="One row per cell: test BLEU and exact-match rate of greedy translations, final validation "
        "loss (nats/token), greedy decoding speed on the test split, and the decoder's self-attention state.",
    )  # fmt: skip
    figures = {
        "bleu": ("test BLEU (greedy)", "bleu_vs_order.png"),
        "decode_tokens_per_s": ("greedy decoding, tokens/s", "speed_vs_order.png"),
        "state_floats_per_row": (f"decoder state floats after {STATE_PROBE_TOKENS} tokens", "state_vs_order.png"),
    }
    for metric, (label, file_name) in figures.items():
        curves, apart, infinity = order_curves(cells, orders, settings.transparent, metric)
        panel = Panel(label, curves, apart=apart, tick_labels={infinity: "∞"} if apart else {},
                      y_from_zero=metric == "decode_tokens_per_s",  # a speed: its ratio is the point
                      log_y=metric == "state_floats_per_row")  # 64 to 16,384: k = 1, 2 read as 0 on a linear axis
        figure = plot_panels([panel], report.out_dir / file_name, "decoder order k", label)
        report.figure(figure, f"{label} against the decoder order k (mean over seeds)")
    panels = []
    for transparent in settings.transparent:
        curves = {f"k={_order_name(c['order'])} s{c['seed']}": (c["steps"], c["val_losses"]) for c in cells
                  if c["transparent"] == transparent}  # fmt: skip
        panels.append(Panel("transparent" if transparent else "standard", curves))
    figure = plot_panels(panels, report.out_dir / "val_loss.png", "step", "validation loss (nats/token)")
    report.figure(figure, "Validation loss during training")
    report.results = {"settings": asdict(settings), "data": tsv_path or "synthetic", "seeds": list(seeds),
                      "synthetic_task": None if tsv_path else asdict(source), "cells": cells}  # fmt: skip
    return report.write()


def order_curves(cells: list[dict], orders, transparent_values, metric: str) -> tuple[dict, dict, int]:
    """Per decoder kind ("transparent"/"standard"), the mean of ``metric`` over seeds against the finite orders k,
    the k = ∞ mean apart (it is no point of the k axis, so it is never joined to them), and the x where ∞ is drawn:
    one past the largest finite order."""
    infinity = max([order for order in orders if order is not None], default=0) + 1
    curves, apart = {}, {}
    for transparent in transparent_values:
        name = "transparent" if transparent else "standard"
        means = {order: _mean([c[metric] for c in cells if c["order"] == order and c["transparent"] == transparent])
                 for order in orders}  # fmt: skip
        finite = sorted(order for order in means if order is not None)
        curves[name] = (finite, [means[order] for order in finite])
        if None in means:
            apart[name] = (infinity, means[None])
    return curves, apart, infinity


def _row_name(cell: dict) -> str:
    """The paper's name for the decoder of this cell."""
    if cell["order"] is None:
        return "transparent AT" if cell["transparent"] else "AT"
    leak = cell["n_layers"] * (cell["order"] - 1) + 1  # without transparency an order-k mask leaks L·(k-1)+1 tokens
    return "MAT" if cell["transparent"] else f"n-gram masked (sees {leak})"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)

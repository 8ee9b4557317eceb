"""``mat-order --set corpus=de-en``: MAT's BLEU against the decoder order k on real German-English sentences.

MAT (the Markov autoregressive Transformer) reports on WMT14 En-De that a transparent order-k decoder loses about
3.4 BLEU at k = 1 against the autoregressive Transformer, that the gains flatten beyond k = 3-4, and that k = 5 comes
within 0.3 BLEU of it. This runs the same comparison on the de-en recipe's sentence pairs (``markovformer data
prepare de-en`` writes ``data/de_en.tsv``: the Ding dictionary's example sentences), in both directions, with the
decoders of ``CELLS``: the autoregressive Transformer (AT), the transparent AT, MAT k = 1..5, and the order-3
n-gram mask without transparency (its order leaks through depth).

Each cell trains with ``mat_order.fit_translator`` (the synthetic task's loop) on one random 90/5/5 split per seed
with one joint BPE; the en-de direction is the same split read backwards. Measured per cell: test BLEU and chrF of
beam search (sacrebleu on detokenised text), greedy decoding speed on the first ``SPEED_SENTENCES`` test sources at
batch 1 and at batch 64, and the decoder's state at batch 1 and 64 after ``STATE_PROBE_TOKENS`` generated tokens
(float32 bytes: MAT keeps k layer-0 inputs per row, every other decoder a per-layer key/value cache).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch

from markovformer.data.bundle import DataBundle
from markovformer.data.recipes.registry import find_prepared_file
from markovformer.data.translation import (
    collate_translation,
    corpus_bleu,
    corpus_chrf,
    decode_generated,
    load_translation,
    paired_bootstrap_bleu,
)
from markovformer.experiments.mat_order import (
    STATE_PROBE_TOKENS,
    MatOrderSettings,
    check_cell_configs,
    decoder_state_floats,
    fit_translator,
    keep_best_key,
    kept_fit,
    on_device,
    training_text,
)
from markovformer.experiments.report import ExperimentReport, device_name, file_digest
from markovformer.models.markov_translator import MarkovTranslatorForConditionalGeneration
from markovformer.models.markov_translator.generation import generate

# (order, transparent): AT, transparent AT, MAT k = 1..5, the order-3 n-gram mask without transparency
CELLS: tuple[tuple[int | None, bool], ...] = ((None, False), (None, True), (1, True), (2, True), (3, True),
                                              (4, True), (5, True), (3, False))  # fmt: skip
QUICK_CELLS = ((None, False), (1, True), (3, True))  # --quick: the AT and MAT k = 1, 3, de-en direction only
SPEED_BATCHES = (1, 64)
SPEED_SENTENCES = 64  # test sources decoded at each speed batch size
DECODE_BATCH = 64  # sources per beam-search call for BLEU
BOOTSTRAP_SAMPLES = 1000  # sacrebleu's paired bootstrap of each decoder's test BLEU against the AT's


def de_en_path(settings: MatOrderSettings) -> Path:
    """The de-en TSV of the settings (``data/NAME`` is looked up in ``$MARKOVFORMER_DATA`` too); a one-line error
    naming it and the command that writes it when it is absent."""
    return find_prepared_file(settings.de_en_path, "mat-order.de_en_path")


def reversed_bundle(bundle: DataBundle) -> DataBundle:
    """The same split and joint tokenizer, each pair read target to source (de-en becomes en-de)."""

    def flip(split) -> list[dict]:
        return [{"src_ids": split[i]["tgt_ids"], "tgt_ids": split[i]["src_ids"]} for i in range(len(split))]

    return dataclasses.replace(bundle, train=flip(bundle.train), val=flip(bundle.val), test=flip(bundle.test))


def train_corpus_cell(bundle: DataBundle, direction: str, order: int | None, transparent: bool, seed: int,
                      settings: MatOrderSettings, log: Callable[[str], None] | None = None) -> dict:  # fmt: skip
    """Train one decoder on ``bundle`` and measure it: beam BLEU and chrF on the test split, greedy speed and
    decoder state at batch 1 and 64."""
    model, fit, every, max_decode = fit_translator(bundle, order, transparent, seed, settings, log)
    model.eval()
    device = torch.device(settings.device)
    test = every["test"]
    start, hypotheses = time.perf_counter(), []
    for first in range(0, len(test), DECODE_BATCH):
        batch = on_device(collate_translation(test[first : first + DECODE_BATCH]), device)
        output = generate(model, batch["src_ids"], batch["src_mask"], beam_size=settings.beam_size,
                          max_length=max_decode)  # fmt: skip
        hypotheses += decode_generated(bundle.tokenizer, output.sequences)
    beam_seconds = time.perf_counter() - start
    other_sources = other_sources_loss(model, every["val"], device)
    references = [bundle.tokenizer.decode(example["tgt_ids"].tolist()) for example in test]
    speed, state_bytes = {}, {}
    probe = test[:SPEED_SENTENCES]
    for batch_size in SPEED_BATCHES:
        tokens, start = 0, time.perf_counter()
        for first in range(0, len(probe), batch_size):
            batch = on_device(collate_translation(probe[first : first + batch_size]), device)
            output = generate(model, batch["src_ids"], batch["src_mask"], max_length=max_decode)
            tokens += int((output.sequences != model.config.pad_token_id).sum())
        speed[str(batch_size)] = tokens / (time.perf_counter() - start)
        sources = collate_translation(probe[:batch_size])["src_ids"].to(device)
        state_bytes[str(batch_size)] = 4 * batch_size * decoder_state_floats(model, sources, STATE_PROBE_TOKENS)
    return {
        "direction": direction, "order": order, "transparent": transparent, "seed": seed, **kept_fit(fit),
        "val_loss_other_sources": other_sources, "bleu": corpus_bleu(hypotheses, references),
        "chrf": corpus_chrf(hypotheses, references),
        "beam_size": settings.beam_size, "beam_seconds": beam_seconds, "decode_tokens_per_s": speed,
        "state_bytes": state_bytes, "parameters": sum(p.numel() for p in model.parameters()),
        "train_seconds": fit.seconds, "test_pairs": len(test),
        "hypotheses": hypotheses, "references": references, "device": device_name(device),
    }  # fmt: skip


@torch.no_grad()
def other_sources_loss(model: MarkovTranslatorForConditionalGeneration, pairs: list[dict],
                       device: torch.device) -> float:  # fmt: skip
    """The validation loss with each target given the next pair's source (the last the first's): how much worse
    than its own source's loss says how much the model reads the source. A model that ignores it scores the same."""
    mismatched = [{"src_ids": pairs[(i + 1) % len(pairs)]["src_ids"], "tgt_ids": pair["tgt_ids"]}
                  for i, pair in enumerate(pairs)]  # fmt: skip
    return float(model(**on_device(collate_translation(mismatched), device)).loss)


def chosen_cells(settings: MatOrderSettings) -> tuple[tuple[int | None, bool], ...]:
    """The decoders of ``CELLS`` whose order is in ``settings.orders`` and whose transparency is in
    ``settings.transparent``: the defaults choose all eight, ``orders=[null] transparent=[false]`` the AT alone
    (processes that share an output folder can split the cells this way)."""
    chosen = tuple(cell for cell in CELLS if cell[0] in settings.orders and cell[1] in settings.transparent)
    if not chosen:
        raise ValueError(f"orders={list(settings.orders)} x transparent={list(settings.transparent)} choose none of "
                         f"the de-en decoders {list(CELLS)} (order null: k = ∞)")  # fmt: skip
    return chosen


def decoder_name(order: int | None, transparent: bool) -> str:
    if order is None:
        return "transparent AT" if transparent else "AT (Transformer)"
    return f"MAT k={order}" if transparent else f"n-gram mask k={order}"


def run_de_en(out_dir: Path, settings: MatOrderSettings, seeds: tuple[int, ...], log: Callable[[str], None], *,
              quick: bool = False) -> Path:  # fmt: skip
    """Every decoder of ``CELLS`` in each direction and seed (``quick``: ``QUICK_CELLS``, the first direction)."""
    from markovformer.plots.experiments import Panel, plot_panels  # deferred: matplotlib

    path = de_en_path(settings)
    if quick:
        cell_kinds, directions = QUICK_CELLS, settings.directions[:1]
    else:
        cell_kinds, directions = chosen_cells(settings), settings.directions
    digest = file_digest(path)
    report = ExperimentReport(out_dir, "MAT decoder order on German-English sentences", log, settings=asdict(settings))
    read_as = ("both directions of the same split" if len(directions) == 2
               else f"read {directions[0]} only")  # fmt: skip
    report.text(
        f"Data: `{path}` (the de-en recipe's sentence pairs), one random 90/5/5 split and joint BPE of "
        f"{settings.tsv_vocab_size} per seed (training pairs over {settings.tsv_max_length} tokens dropped), "
        f"{read_as}. Model: MarkovTranslatorForConditionalGeneration, d_model {settings.d_model}, "
        f"{settings.n_heads} heads, {settings.n_layers}+{settings.n_layers} layers. Training: "
        f"{training_text(settings)}. BLEU and chrF: beam {settings.beam_size} on the test split, sacrebleu on "
        f"detokenised text. Speed: greedy decoding of the first {SPEED_SENTENCES} test sources at batch 1 and 64 "
        f"(wall clock on the cell's device, named below: compare within a run). State: float32 bytes the decoder "
        f"holds after {STATE_PROBE_TOKENS} generated tokens, at batch 1 and 64."
    )
    report.expect_cells(len(seeds) * len(directions) * len(cell_kinds))
    depends = {k: getattr(settings, k) for k in ("d_model", "n_heads", "n_layers", "batch_size", "steps", "lr",
                                                 "warmup_steps", "eval_every", "tsv_vocab_size", "tsv_max_length",
                                                 "beam_size", "decay", "dropout", "label_smoothing")}  # fmt: skip
    depends |= keep_best_key(settings)
    cells = []
    for seed in seeds:
        forward = load_translation(path, vocab_size=settings.tsv_vocab_size, seed=seed,
                                   max_length=settings.tsv_max_length)  # fmt: skip
        check_cell_configs(forward, cell_kinds, settings)  # both directions: the same pairs, the same lengths
        for direction in directions:
            bundle = forward if direction == "de-en" else reversed_bundle(forward)
            for order, transparent in cell_kinds:
                kind = "transparent" if transparent else "standard"
                key = f"deen-{digest}_{direction}_k={'inf' if order is None else order}_{kind}_seed={seed}"
                compute = partial(train_corpus_cell, bundle, direction, order, transparent, seed, settings, log)
                cells.append(report.cached(key, compute, depends_on={**depends, "key": key}))
    devices = sorted({cell.get("device", "cpu") for cell in cells})  # cells from before devices were recorded: cpu
    report.text(f"The cells trained and decoded on: {', '.join(devices)}.")
    panels = []
    for direction in directions:
        means = {(o, t): _mean_of(cells, direction, o, t) for o, t in cell_kinds}
        at = means[(None, False)]["bleu"] if (None, False) in means else None
        report.table(
            ["decoder", "BLEU", "chrF", "BLEU - AT", "val loss", "source use", "tok/s b1", "tok/s b64", "state KiB b1",
             "state KiB b64", "train s", "seeds"],
            [[decoder_name(o, t), m["bleu"], m["chrf"], "-" if at is None else m["bleu"] - at, m["final_val_loss"],
              m["source_use"], round(m["speed1"]), round(m["speed64"]), m["state1"] / 1024, m["state64"] / 1024,
              round(m["train_seconds"]), m["n"]]
             for (o, t), m in means.items()],
            caption=f"{direction}: test BLEU and chrF (beam {settings.beam_size}, mean over seeds; BLEU's spread "
            "over seeds in results.json), validation loss, source use (how much higher the validation loss is "
            "with each target given another pair's source, in nats; '-' for cells from before it was measured), "
            "greedy decoding tokens/s at batch 1 and 64, "
            "decoder state at batch 1 and 64.",
        )  # fmt: skip
        report.text(f"{direction}: {verdict(means)}")
        significance = bootstrap_rows(cells, direction, cell_kinds, seeds)
        if significance:
            report.table(["decoder"] + [f"seed {seed}" for seed in seeds], significance,
                         caption=f"{direction}: test BLEU ± the half-width of its 95% interval over resampled test "
                         "sets, and the p-value of its difference from the AT of the same seed (sacrebleu's paired "
                         f"bootstrap, {BOOTSTRAP_SAMPLES} resamples); '-' where a cell stored no hypotheses (cells "
                         "trained before they were kept).")  # fmt: skip
        finite = [k for k in range(1, 6) if (k, True) in means]
        curves = {"MAT (transparent, order k)": (finite, [means[(k, True)]["bleu"] for k in finite])}
        if (3, False) in means:
            curves["n-gram mask"] = ([3], [means[(3, False)]["bleu"]])
        references = {} if at is None else {"AT (Transformer)": at}
        if (None, True) in means:
            references["transparent AT"] = means[(None, True)]["bleu"]
        panels.append(Panel(direction, curves, references=references))
    figure = plot_panels(panels, report.out_dir / "bleu_vs_order_de_en.png", "decoder order k",
                         f"test BLEU (beam {settings.beam_size})")  # fmt: skip
    report.figure(figure, "Test BLEU against MAT's order k; the Transformer (AT) as a horizontal line")
    report.results = {"settings": asdict(settings), "data": str(path), "seeds": list(seeds), "cells": cells}
    return report.write()


def bootstrap_rows(cells: list[dict], direction: str, cell_kinds, seeds: tuple[int, ...]) -> list[list[str]]:
    """One row per decoder, one column per seed: 'BLEU ± ci95 (p vs AT)' where the seed's AT and the cell kept their
    hypotheses, '-' elsewhere; no rows when no seed has them."""
    per_seed = {}
    for seed in seeds:
        kept = {(c["order"], c["transparent"]): c for c in cells
                if c["direction"] == direction and c["seed"] == seed and "hypotheses" in c}  # fmt: skip
        if (None, False) in kept:
            systems = {decoder_name(*kind): cell["hypotheses"] for kind, cell in kept.items()}
            per_seed[seed] = paired_bootstrap_bleu(systems, kept[(None, False)]["references"],
                                                   decoder_name(None, False), samples=BOOTSTRAP_SAMPLES)  # fmt: skip
    if not per_seed:
        return []

    def entry(seed: int, kind) -> str:
        result = per_seed.get(seed, {}).get(decoder_name(*kind))
        if result is None:
            return "-"
        against_at = "" if result.p_value is None else f" (p {result.p_value:.3f})"
        return f"{result.bleu:.2f} ± {result.ci95:.2f}{against_at}"

    return [[decoder_name(*kind)] + [entry(seed, kind) for seed in seeds] for kind in cell_kinds]


def verdict(means: dict) -> str:
    """MAT's published trend against these means: the k = 1 loss, the flattening beyond k = 3, the k = 5 gap."""
    if (None, False) not in means:
        return "the AT (orders null, transparent false) is needed: every comparison with the paper is against it."
    at = means[(None, False)]["bleu"]
    bleu = {k: means[(k, True)]["bleu"] for k in range(1, 6) if (k, True) in means}
    if not {1, 3, 5} <= set(bleu):
        return "MAT k = 1, 3 and 5 are needed for the comparison with the paper; measured " + ", ".join(
            f"k={k}: {v - at:+.1f} BLEU against the AT" for k, v in bleu.items())  # fmt: skip
    def against_at(k: int) -> str:
        return f"{abs(at - bleu[k]):.1f} BLEU {'below' if bleu[k] <= at else 'above'} the AT"

    late = bleu[5] - bleu[3]
    return (f"k=1 is {against_at(1)} (paper: about 3.4 below); k=3 -> k=5 changes BLEU by {late:+.1f} "
            f"(paper: flat beyond 3-4); k=5 is {against_at(5)} (paper: within 0.3). "
            f"Per k: " + ", ".join(f"{k}: {v:.1f}" for k, v in bleu.items()) + ".")  # fmt: skip


def _mean_of(cells: list[dict], direction: str, order: int | None, transparent: bool) -> dict:
    chosen = [c for c in cells if c["direction"] == direction and c["order"] == order
              and c["transparent"] == transparent]  # fmt: skip
    return {"bleu": statistics.fmean(c["bleu"] for c in chosen), "chrf": statistics.fmean(c["chrf"] for c in chosen),
            "final_val_loss": statistics.fmean(c["final_val_loss"] for c in chosen),
            "source_use": statistics.fmean(measured) if (measured := [
                c["val_loss_other_sources"] - c["final_val_loss"] for c in chosen if "val_loss_other_sources" in c
            ]) else "-",
            "speed1": statistics.fmean(c["decode_tokens_per_s"]["1"] for c in chosen),
            "speed64": statistics.fmean(c["decode_tokens_per_s"]["64"] for c in chosen),
            "state1": chosen[0]["state_bytes"]["1"], "state64": chosen[0]["state_bytes"]["64"],
            "train_seconds": statistics.fmean(c["train_seconds"] for c in chosen), "n": len(chosen)}  # fmt: skip


__all__ = ["CELLS", "bootstrap_rows", "chosen_cells", "de_en_path", "decoder_name", "reversed_bundle", "run_de_en",
           "train_corpus_cell", "verdict"]  # fmt: skip

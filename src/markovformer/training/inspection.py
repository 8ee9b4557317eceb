"""`markovformer inspect`: a run's figures (curves, strengths, gates, attention by lag, attention maps) and one HTML
page that puts them under the run's config, model, training time and results, with their units and references."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import torch

from markovformer.data.collate import collate
from markovformer.data.text import load_tokenizer
from markovformer.plots import (
    plot_attention_lag_profile,
    plot_attention_maps,
    plot_order_gates,
    plot_training_curves,
    plot_transition_strengths,
    write_html_report,
)
from markovformer.training.build import build_data
from markovformer.training.lag_report import CONVENTION, biased_lags, chain_attention_lags, describe_chain
from markovformer.training.run_dir import RESOLVED_CONFIG, load_run
from markovformer.training.run_report import document_log_likelihood
from markovformer.training.tasks import model_inputs

EXAMPLE_LENGTH = 48  # positions shown in the gate and attention figures: long enough to see lags, short to read
PROFILE_EXAMPLES = 32  # validation sequences averaged in the attention-by-lag profile


def _tokens(ids: list[int], run_dir: Path) -> list[str]:
    if (run_dir / "tokenizer").is_dir():
        tokenizer = load_tokenizer(run_dir / "tokenizer")
        return [repr(tokenizer.decode([i]))[1:-1] or "·" for i in ids]
    return [str(i) for i in ids]


def attention_by_lag(weights: torch.Tensor, max_lag: int, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean attention probability a query gives the key ``k`` positions back, for k = 0..max_lag: (H, max_lag + 1).

    ``weights`` (B, H, T, T), queries down, keys across. Averaged over the examples and over the queries that have
    every lag up to ``max_lag`` inside the sequence (t >= max_lag) and are real tokens (``attention_mask`` (B, T)).
    """
    batch, heads, length, _ = weights.shape
    if length <= max_lag:
        raise ValueError(f"sequences of {length} tokens have no query with all lags 0..{max_lag}")
    queries = torch.arange(max_lag, length)
    lags = torch.arange(max_lag + 1)
    picked = weights[:, :, queries[:, None], queries[:, None] - lags[None, :]]  # (B, H, Tq, L + 1)
    valid = torch.ones(batch, len(queries)) if attention_mask is None else attention_mask[:, queries].float()
    total = (picked * valid[:, None, :, None]).sum(dim=(0, 2))
    return total / valid.sum().clamp_min(1)


def run_summary(config, model, run_dir: Path, results: dict, data_info: dict) -> dict[str, object]:
    """The table at the top of the report: what was trained, on what, for how long, and how well, with units."""
    model_config = model.config
    summary: dict[str, object] = {"run": str(run_dir), "task": config.task, "model": type(model).__name__,
                                  "parameters": f"{model.num_parameters():,}"}  # fmt: skip
    if model_config.layer_kinds():
        summary["attention kind per layer"] = ", ".join(model_config.layer_kinds())
    shape = [f"{name} {getattr(model_config, name)}" for name in ("d_model", "n_layers", "n_heads")
             if hasattr(model_config, name)]  # fmt: skip
    if shape:
        summary["shape"] = ", ".join(shape)
    markov = [f"{name} {getattr(model_config, name)}" for name in ("scope", "window", "max_order", "gate")
              if getattr(model_config, name, None) is not None]  # fmt: skip
    if markov:
        summary["Markov structure"] = ", ".join(markov)
    summary["data"] = config.data.get("source", "?")
    if data_info.get("true_lags"):
        summary["chain"] = describe_chain(data_info["true_lags"])
        summary["lag convention"] = CONVENTION
    if "steps" in results:
        summary["training"] = f"{results['steps']:,} steps in {results.get('train_seconds', float('nan')):.0f} s"
    val = results.get("val", {})
    unit = "nats/token"
    for key, value in val.items():
        label = {"loss": f"validation loss ({unit})", "bits_per_token": "validation bits per token",
                 "perplexity": "validation perplexity"}.get(key, f"validation {key}")  # fmt: skip
        summary[label] = value
    reference = results.get("reference", {})
    if "entropy_rate" in reference:
        summary[f"entropy rate ({unit}): the lowest loss any model can reach"] = reference["entropy_rate"]
        if "loss" in val:
            gap = val["loss"] - reference["entropy_rate"]
            relative = 100 * gap / reference["entropy_rate"]
            summary["gap to the entropy rate"] = f"{gap:+.4f} nats/token ({relative:+.2f}%)"
    if "oracle_val_loss" in reference:
        summary[f"true chain's loss on the validation sequences ({unit})"] = reference["oracle_val_loss"]
    if "unigram_entropy" in reference:
        summary[f"unigram entropy ({unit}): no context at all"] = reference["unigram_entropy"]
    exact = document_log_likelihood(reference, "val")
    if exact is not None:
        summary["exact log-likelihood of the validation documents (per token)"] = exact
    return summary


def reference_lines(reference: dict) -> dict[str, float]:
    """The floors drawn on the loss panel, in nats per token: entropy rate, true chain's loss, exact NLL."""
    lines = {}
    if "entropy_rate" in reference:
        lines["entropy rate"] = reference["entropy_rate"]
    if "oracle_val_loss" in reference:
        lines["true chain (validation)"] = reference["oracle_val_loss"]
    exact = document_log_likelihood(reference, "val")
    if exact is not None and math.isfinite(exact):
        lines["exact NLL (validation)"] = -exact
    return lines


def write_inspection_report(target: str | Path, layers: list[int] | None = None, out_dir: str | Path | None = None):
    """Write the figures of a trained run under ``out_dir`` (default RUN_DIR/report) and return its index.html."""
    config, model, run_dir = load_run(target)
    out = Path(out_dir) if out_dir is not None else run_dir / "report"
    metrics_path = run_dir / "metrics.json"
    results = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
    data_info = json.loads((run_dir / "data.json").read_text())["info"]
    figures = []
    marked = biased_lags(data_info["true_lags"]) if data_info.get("true_lags") else None
    chain_lags = chain_attention_lags(data_info["true_lags"]) if data_info.get("true_lags") else None

    csv = run_dir / "logs" / "metrics.csv"
    if csv.is_file():
        lines = reference_lines(results.get("reference", {}))
        caption = ("Training curves: loss in nats per token (train and validation), with the floors as dashed lines; "
                   "bits per token and perplexity are rescalings of the loss (values in the table above)")  # fmt: skip
        figures.append((caption, plot_training_curves(csv, out / "curves.png", reference_lines=lines or None)))

    strengths = model.transition_strengths()
    if strengths:
        caption = f"Learned transition strengths T per layer, head and lag ({CONVENTION}; outlined: the chain's lags)"
        figures.append((caption, plot_transition_strengths(strengths, out / "transition_strengths.png", marked)))

    if "return_gates" in inspect.signature(model.forward).parameters:
        figures += _gate_and_attention_figures(config, model, run_dir, out, layers, marked, chain_lags)
    elif layers:
        raise ValueError(f"--layers: {type(model).__name__} has no attention layers to draw")
    summary = run_summary(config, model, run_dir, results, data_info)
    config_file = run_dir / RESOLVED_CONFIG
    config_text = config_file.read_text(encoding="utf-8") if config_file.is_file() else None
    return write_html_report(out, f"markovformer run {run_dir.name}", figures, summary, config_text=config_text)


def _gate_and_attention_figures(
    config, model, run_dir: Path, out: Path, layers: list[int] | None, marked: tuple[int, ...] | None,
    chain_lags: tuple[int, ...] | None,
) -> list[tuple]:
    """Order gates and attention maps of the first validation example and the attention-by-lag profile of the
    first validation examples, as (caption, path) pairs."""
    figures = []
    validation = build_data(config).val
    batch = collate([{k: v[:EXAMPLE_LENGTH] if v.dim() else v for k, v in validation[0].items()}])
    inputs = {k: v for k, v in model_inputs(batch).items() if k != "labels"}
    model.eval()
    with torch.no_grad():
        output = model(**inputs, return_gates=True, return_weights=True)
    ids = batch["input_ids"][0].tolist() if "input_ids" in batch else list(range(batch["attention_mask"].shape[1]))
    tokens = _tokens(ids, run_dir) if "input_ids" in batch else [str(i) for i in ids]
    if any(g for g in output.gates or []):
        caption = (f"Order gates over a validation sequence: per head, the probability of each lag and the null slot "
                   f"({CONVENTION}; *: the chain's lags)")  # fmt: skip
        null_slot = bool(getattr(model.config, "gate_null", True))
        figures.append((caption, plot_order_gates(output.gates, tokens, out / "order_gates.png", null_slot=null_slot,
                                                  true_lags=marked)))  # fmt: skip
    chosen = layers if layers is not None else list(range(min(len(output.attentions), 2)))
    bad = [layer for layer in chosen if not 0 <= layer < len(output.attentions)]
    if bad:
        raise ValueError(f"--layers {bad[0]} is not a layer of this model (it has {len(output.attentions)})")
    profile = _lag_profiles(model, validation, chosen)
    if profile:
        caption = ("Attention by lag: per layer and head, the mean attention probability a query gives the key k "
                   f"tokens back, over {PROFILE_EXAMPLES} validation sequences ({CONVENTION}; shaded: the chain's "
                   "lags)")  # fmt: skip
        figures.append((caption, plot_attention_lag_profile(profile, out / "attention_by_lag.png", chain_lags)))
    if chosen:
        caption = f"Attention probabilities of layers {chosen} on the same sequence (queries down, keys across)"
        figures.append((caption, plot_attention_maps(output.attentions, chosen, out / "attention.png", tokens=tokens)))
    return figures


def _lag_profiles(model, validation: list, layers: list[int]) -> dict[int, torch.Tensor]:
    """{layer: (H, L + 1) attention by lag} over the first validation sequences; L = the window + 1 (so the
    window's edge shows), else 16."""
    batch = collate(validation[:PROFILE_EXAMPLES])
    inputs = {k: v for k, v in model_inputs(batch).items() if k != "labels"}
    with torch.no_grad():
        attentions = model(**inputs, return_weights=True).attentions
    length = attentions[0].shape[-1] if attentions and attentions[0] is not None else 0
    window = getattr(model.config, "window", None) or getattr(model.config, "max_order", None) or 16
    max_lag = min(int(window) + 1, length - 1)
    mask = batch.get("attention_mask")
    return {layer: attention_by_lag(attentions[layer], max_lag, mask) for layer in layers
            if attentions[layer] is not None and max_lag >= 1}  # fmt: skip

"""`markovformer inspect`: a run's figures (curves, strengths, gates, attention) and one HTML page that links them."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import torch

from markovformer.data.collate import collate
from markovformer.ops.lags import prediction_lags
from markovformer.training.runner import build_data, load_run
from markovformer.training.task import model_inputs

EXAMPLE_LENGTH = 48  # positions shown in the gate and attention figures: long enough to see lags, short to read


def _tokens(ids: list[int], run_dir: Path) -> list[str]:
    if (run_dir / "tokenizer").is_dir():
        from markovformer.data.text import load_tokenizer

        tokenizer = load_tokenizer(run_dir / "tokenizer")
        return [repr(tokenizer.decode([i]))[1:-1] or "·" for i in ids]
    return [str(i) for i in ids]


def write_inspection_report(target: str | Path, layers: list[int] | None = None, out_dir: str | Path | None = None):
    """Write the figures of a trained run under ``out_dir`` (default RUN_DIR/report) and return its index.html."""
    from markovformer.plots import plot_training_curves, plot_transition_strengths, write_html_report

    config, model, run_dir = load_run(target)
    out = Path(out_dir) if out_dir is not None else run_dir / "report"
    metrics_path = run_dir / "metrics.json"
    results = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
    reference = results.get("reference", {})
    data_info = json.loads((run_dir / "data.json").read_text())["info"]
    figures, summary = [], {"run": str(run_dir), "task": config.task, "parameters": model.num_parameters()}
    summary.update({f"val {k}": v for k, v in results.get("val", {}).items()})
    summary.update({k.replace("_", " "): v for k, v in reference.items()})

    csv = run_dir / "logs" / "metrics.csv"
    if csv.is_file():
        lines = {"entropy rate": reference["entropy_rate"]} if "entropy_rate" in reference else None
        figures.append(("Training curves (nats per token for language models)",
                        plot_training_curves(csv, out / "curves.png", reference_lines=lines)))  # fmt: skip

    strengths = model.transition_strengths() if hasattr(model, "transition_strengths") else []
    # The source's lags count from the predicted symbol; the figure's count from the predicting position.
    true_lags = prediction_lags(tuple(data_info["true_lags"])) if "true_lags" in data_info else None
    true_lags = tuple(lag for lag in true_lags if lag >= 1) if true_lags else None
    if strengths:
        figures.append(("Learned transition strengths T per layer, head and lag (the source's true lags marked, "
                        "counted from the predicting position)",
                        plot_transition_strengths(strengths, out / "transition_strengths.png", true_lags)))  # fmt: skip

    if "return_gates" in inspect.signature(model.forward).parameters:
        figures += _gate_and_attention_figures(config, model, run_dir, out, layers)
    elif layers:
        raise ValueError(f"--layers: {type(model).__name__} has no attention layers to draw")
    return write_html_report(out, f"markovformer run {run_dir.name}", figures, summary)


def _gate_and_attention_figures(config, model, run_dir: Path, out: Path, layers: list[int] | None) -> list[tuple]:
    """Order gates and attention maps of the first validation example, as (caption, path) pairs."""
    from markovformer.plots import plot_attention_maps, plot_order_gates

    figures = []
    example = build_data(config).val[0]
    batch = collate([{k: v[:EXAMPLE_LENGTH] if v.dim() else v for k, v in example.items()}])
    inputs = {k: v for k, v in model_inputs(batch).items() if k != "labels"}
    model.eval()
    with torch.no_grad():
        output = model(**inputs, return_gates=True, return_weights=True)
    ids = batch["input_ids"][0].tolist() if "input_ids" in batch else list(range(batch["attention_mask"].shape[1]))
    tokens = _tokens(ids, run_dir) if "input_ids" in batch else [str(i) for i in ids]
    if any(g for g in output.gates or []):
        caption = "Order gates over a validation sequence: per head, the probability of each lag and the null slot"
        null_slot = bool(getattr(model.config, "gate_null", True))
        figures.append((caption, plot_order_gates(output.gates, tokens, out / "order_gates.png", null_slot=null_slot)))
    chosen = layers if layers is not None else list(range(min(len(output.attentions), 2)))
    bad = [layer for layer in chosen if not 0 <= layer < len(output.attentions)]
    if bad:
        raise ValueError(f"--layers {bad[0]} is not a layer of this model (it has {len(output.attentions)})")
    if chosen:
        caption = f"Attention probabilities of layers {chosen} on the same sequence (queries down, keys across)"
        figures.append((caption, plot_attention_maps(output.attentions, chosen, out / "attention.png", tokens=tokens)))
    return figures

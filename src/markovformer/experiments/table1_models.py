"""What ``table1`` trains: the three domains (data section, task, metrics), the Markovian Transformer of each, the
baseline models, the ablations, the hybrid-ratio sweep, and the width that gives each model the Markovian
Transformer's parameter count.

Every model is a ``MarkovianTransformerConfig``: the baselines differ from the Markovian Transformer only in the
sequence mixer (``attention``) and width, so embeddings, pre-LN blocks, SwiGLU FFNs, pooling and heads are shared.
The Markovian Transformer is the paper's: hybrid heads (half Markov, local scope, half random-feature), token-wise
MLP order gates, bidirectional lags, GRU injection (``markovian_section``; ``configs/dna_splice.yaml``,
``finance_sp500.yaml`` and ``speech_digits.yaml`` hold the same model and data sections).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from markovformer.data.recipes.finance import DAILY_FEATURES, FRACTIONS
from markovformer.data.recipes.registry import DATA_RECIPES
from markovformer.experiments.report import revisions_of
from markovformer.training.run_config import resolve_run_config

DOMAINS = ("genomics", "finance", "speech")
MARKOVIAN = "markovian_transformer"
# Table I: key -> (label, attention kind); the Markovian Transformer's section is markovian_section's.
MODELS: dict[str, tuple[str, str]] = {
    MARKOVIAN: ("Markovian Transformer", "hybrid_split"),
    "transformer": ("Transformer", "softmax"),
    "performer": ("Performer/RFA", "rff"),
    "linformer": ("Linformer", "linformer"),
    "s4d": ("S4D", "s4d"),
    "retnet": ("RetNet", "retnet"),
    "rwkv": ("RWKV", "rwkv"),
    "hyena": ("Hyena", "hyena"),
    "gru": ("GRU", "gru"),
    "scan_markov": ("Scan Markov", "scan"),
}
# Table II: the Markovian Transformer with one thing changed (same width, so the parameter count changes with it).
# "no_bidirectional" keeps the model non-causal but drops the future lag biases, their gates and the backward GRU.
ABLATIONS: dict[str, tuple[str, dict]] = {
    "no_bidirectional": ("no bidirectional", {"bidirectional": False}),
    "pure_markov": ("pure Markov (no random-feature heads)", {"attention": "markov"}),
    "pure_random_feature": ("pure random-feature", {"attention": "rff"}),
    "shallow_gate": ("shallow gate (linear)", {"gate": "linear"}),
    "fixed_order": ("fixed order (no gate)", {"gate": "none"}),
    "no_gru": ("no GRU", {"gru": False}),
}
MARKOV_HEAD_RATIO = 0.5  # the Markovian Transformer's own split; the sweep adds other ratios beside it


@dataclasses.dataclass(frozen=True)
class Domain:
    """One column group of Table I: its task, the metric that ranks models (``primary``, on the test split, and
    chosen on the validation split), and the further test metrics shown. ``ctc_budget``: the domain trains with the
    settings' ``ctc_steps`` and ``ctc_batch_size`` (CTC needs more steps before it emits characters)."""

    name: str
    task: str
    primary: str
    higher_is_better: bool
    shown: tuple[str, ...]
    max_order: int
    ctc_budget: bool = False


DOMAIN_SPECS = {
    "genomics": Domain("genomics", "sequence_classification", "auroc", True, ("auroc", "accuracy"), 6),
    "finance": Domain("finance", "sequence_classification", "macro_f1", True, ("macro_f1",), 8),
    "speech": Domain("speech", "ctc", "wer", False, ("wer", "wer_recorded"), 4, ctc_budget=True),
}
METRIC_LABELS = {"auroc": "AUROC", "accuracy": "accuracy", "macro_f1": "macro-F1", "wer": "WER (unseen voices)",
                 "wer_recorded": "WER (real recordings)"}  # fmt: skip
FINANCE_WINDOW = 32  # trading days per example
SPEECH_STACK = 3  # 10 ms frames per input: 2.8x faster CTC steps, and the fastest utterance keeps 1.6 inputs a label


def data_paths(domain: str, data_dir: str | Path, dataset: str) -> dict[str, str]:
    """The files a domain's data section reads, for the recipe ``dataset`` (its ``markovformer data prepare``
    name) under ``data_dir``."""
    if dataset not in DATA_RECIPES:
        raise ValueError(f"{domain}: no data recipe named {dataset!r}; known: {', '.join(DATA_RECIPES)}")
    where = Path(data_dir) / DATA_RECIPES[dataset].file_name
    if domain == "genomics":
        return {"path": str(where / "sequences.fa"), "labels": str(where / "labels.tsv")}
    return {"path": str(where)}


def data_section(domain: str, paths: dict[str, str]) -> dict:
    """The run config's data section (genomics: no reverse-complement augmentation, since splice-junction classes
    are strand-specific; finance: the recipe's features and fractions, which its thresholds were fitted for;
    speech: three log-Mel frames stacked per input (30 ms), the synthetic test split of unseen voices, the real
    recordings are scored as well). Finance's labels look one row ahead (the next day's move), which its data says
    (``label_leads``)."""
    if domain == "genomics":
        return {"source": "fasta", **paths, "fractions": [0.8, 0.1, 0.1], "reverse_complement": False}
    if domain == "finance":
        return {"source": "csv_series", **paths, "label_column": "label", "feature_columns": list(DAILY_FEATURES),
                "window": FINANCE_WINDOW, "label_leads": 1, "stride": 1, "fractions": list(FRACTIONS)}  # fmt: skip
    if domain == "speech":
        return {"source": "speech_features", **paths, "test_set": "synthetic", "stack_frames": SPEECH_STACK}
    raise ValueError(f"domain={domain!r} must be one of {DOMAINS}")


def shared_section(d_model: int, n_layers: int, n_heads: int) -> dict:
    """What every model of a domain shares: depth, heads, FFN, non-causal mixing, mean pooling, dropout."""
    return {"d_model": d_model, "n_layers": n_layers, "n_heads": n_heads, "ffn": "swiglu", "ffn_mult": 4,
            "causal": False, "pooling": "mean", "dropout": 0.1}  # fmt: skip


def markovian_section(domain: str, d_model: int = 64, n_layers: int = 2, n_heads: int = 4) -> dict:
    """The paper's Markovian Transformer for ``domain``."""
    return {**shared_section(d_model, n_layers, n_heads), "attention": "hybrid_split",
            "markov_head_ratio": MARKOV_HEAD_RATIO, "scope": "local", "max_order": DOMAIN_SPECS[domain].max_order,
            "gate": "mlp", "gate_input": "token", "gru": True}  # fmt: skip


def variants(models: tuple[str, ...], ablations: tuple[str, ...], ratios: tuple[float, ...]) -> dict[str, str]:
    """Every row trained, key -> label: the models, ``ablation-<name>`` and ``ratio=<r>`` (the Markovian
    Transformer's own ratio is its row and is not trained twice)."""
    rows = {}
    for key in models:
        if key not in MODELS:
            raise ValueError(f"model {key!r} is not one of {tuple(MODELS)}")
        rows[key] = MODELS[key][0]
    for key in ablations:
        if key not in ABLATIONS:
            raise ValueError(f"ablation {key!r} is not one of {tuple(ABLATIONS)}")
        rows[f"ablation-{key}"] = ABLATIONS[key][0]
    for ratio in ratios:
        if not 0 < ratio < 1:
            raise ValueError(f"hybrid ratio {ratio!r} must lie strictly between 0 and 1 (0 and 1 are the pure "
                             "random-feature and pure Markov ablations)")  # fmt: skip
        if ratio != MARKOV_HEAD_RATIO:
            rows[f"ratio={ratio:g}"] = f"hybrid, Markov head ratio {ratio:g}"
    return rows


def variant_section(variant: str, markovian: dict, width: int, max_position: int) -> dict:
    """The model section of row ``variant``: a baseline at ``width`` (its matched d_model; Linformer's projections
    cover ``max_position``), or the Markovian Transformer with an ablation or another head ratio."""
    if variant == MARKOVIAN:
        return dict(markovian)
    if variant.startswith("ablation-"):
        return {**markovian, **ABLATIONS[variant.removeprefix("ablation-")][1]}
    if variant.startswith("ratio="):
        return {**markovian, "markov_head_ratio": float(variant.removeprefix("ratio="))}
    kind = MODELS[variant][1]
    section = {**shared_section(width, markovian["n_layers"], markovian["n_heads"]), "attention": kind}
    if kind == "linformer":
        section["max_positions"] = max_position
    return section


def parameter_count(task: str, section: dict, info: dict) -> int:
    """Parameters of the model a run with this task and model section builds on data with ``info``."""
    # deferred: the training engine imports lightning
    from markovformer.training.runner import build_model

    config = resolve_run_config({"task": task, "model": section, "data": {"source": "none"}})
    return build_model(config, info).num_parameters()


def match_width(task: str, section: dict, info: dict, target: int) -> tuple[int, int]:
    """(d_model, parameters): the width, a multiple of 2 · n_heads (whole, even-sized rotary heads), whose model has
    the parameter count nearest ``target``. Counts grow with the width, so a walk from a first guess finds the two
    widths around the target."""
    step = 2 * section["n_heads"]
    counts: dict[int, int] = {}

    def count(width: int) -> int:
        if width not in counts:
            counts[width] = parameter_count(task, {**section, "d_model": width}, info)
        return counts[width]

    width = max(step, round(section["d_model"] / step) * step)
    guess = width * (target / count(width)) ** 0.5  # parameters ~ width² once the blocks dominate
    width = max(step, round(guess / step) * step)
    while count(width) < target:
        width += step
    while width > step and count(width - step) >= target:
        width -= step
    best = min((w for w in (width - step, width) if w >= step), key=lambda w: abs(count(w) - target))
    return best, count(best)


def ratio_of(variant: str) -> float:
    """The Markov head ratio of a hybrid row: the Markovian Transformer's or a ``ratio=<r>`` row's."""
    return MARKOV_HEAD_RATIO if variant == MARKOVIAN else float(variant.removeprefix("ratio="))


def run_name(domain: str, variant: str, values: dict, data_digests: dict[str, str]) -> str:
    """``<domain>_<variant>_seed=<s>_<hash>``, the hash of the run config less its output folder and file paths, with
    the files' digests: a run directory is reused only by the same run on the same data."""
    data = {key: value for key, value in values["data"].items() if key not in ("path", "labels")}
    essential = {**values, "output_dir": None, "data": data, "data_digests": data_digests,
                 **revisions_of(values["model"])}  # a fix that raises a kind's revision trains a new run
    digest = hashlib.sha1(json.dumps(essential, sort_keys=True).encode()).hexdigest()[:8]
    return f"{domain}_{variant}_seed={values['trainer']['seed']}_{digest}"


__all__ = ["ABLATIONS", "DOMAINS", "DOMAIN_SPECS", "MARKOVIAN", "METRIC_LABELS", "MODELS", "Domain", "data_paths",
           "data_section", "markovian_section", "match_width", "parameter_count", "ratio_of", "run_name",
           "shared_section", "variant_section", "variants"]  # fmt: skip

"""What ``mixers`` trains: the sequence-mixer kinds (model sections of the Markovian Transformer's config, differing
only in ``attention`` and what it needs), the four tasks at a given length, the width matching, and the scoring.

Every kind shares the embeddings, pre-LN blocks, SwiGLU FFN and LM head; its ``d_model`` is chosen so its parameter
count is nearest the global softmax Transformer's at the grid's width (``table1_models.match_width``).
ALiBi and FoX run without position embeddings (as in their papers); every other kind keeps the default rotary.
Linformer is left out: its length projections mix the whole sequence, so it cannot be causal, and every task here
is causal language modelling.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from markovformer.data.sources import DATA_SOURCES
from markovformer.markov import add_beta_loss, add_beta_predict


@dataclass(frozen=True)
class SyntheticTask:
    """What the grid and its report need to know about one task beside its data source.

    ``vocab_setting`` names the settings field that holds its vocabulary (its chance accuracy follows from it);
    ``bayes_reference``: the task is an in-context Markov chain, scored against the Bayes add-1 predictor and solved
    when the test loss comes within a margin of that predictor's, not by an accuracy threshold."""

    name: str
    vocab_setting: str
    bayes_reference: bool = False


TASK_SPECS = {
    "mqar": SyntheticTask("mqar", "mqar_vocab"),
    "induction": SyntheticTask("induction", "induction_vocab"),
    "selective_copy": SyntheticTask("selective_copy", "copy_vocab"),
    "icl_markov": SyntheticTask("icl_markov", "icl_symbols", bayes_reference=True),
}
TASKS = tuple(TASK_SPECS)
REFERENCE_KIND = "softmax"
# key -> (label, model section fields beside the shared ones); "local" kinds see ``window`` keys per layer
KINDS: dict[str, tuple[str, dict]] = {
    "markov_local": ("Markov, local", {"attention": "markov", "scope": "local"}),
    "markov_global": ("Markov, global", {"attention": "markov", "scope": "global"}),
    "softmax": ("softmax, global", {"attention": "softmax", "scope": "global"}),
    "sliding_window": ("softmax, sliding window", {"attention": "softmax", "scope": "local"}),
    "alibi": ("ALiBi, global", {"attention": "alibi", "scope": "global", "position": "none"}),
    "alibi_local": ("ALiBi, local", {"attention": "alibi", "scope": "local", "position": "none"}),
    "forgetting": ("FoX (forgetting)", {"attention": "forgetting", "scope": "global", "position": "none"}),
    "t5_bias": ("T5 bucket bias", {"attention": "t5_bias", "scope": "global", "position": "none"}),
    "dynamic_bias": ("dynamic position bias", {"attention": "dynamic_bias", "scope": "global", "position": "none"}),
    "stick_breaking": ("stick-breaking", {"attention": "stick_breaking", "scope": "global", "position": "none"}),
    "cope": ("CoPE", {"attention": "cope", "scope": "global", "position": "none"}),
    "rff": ("random features", {"attention": "rff"}),
    "hybrid_split": ("hybrid split (Markov local + RFF)", {"attention": "hybrid_split", "scope": "local"}),
    "hybrid_parallel": ("hybrid parallel (Markov local + RFF)", {"attention": "hybrid_parallel", "scope": "local"}),
    "s4d": ("S4D", {"attention": "s4d"}),
    "h3": ("H3 (two channels per head)", {"attention": "h3"}),
    "retnet": ("RetNet", {"attention": "retnet"}),
    "hyena": ("Hyena", {"attention": "hyena"}),
    "rwkv": ("RWKV", {"attention": "rwkv"}),
    "gru": ("GRU", {"attention": "gru"}),
    "scan": ("Scan (gated recurrence)", {"attention": "scan"}),
}
# per-layer options of a kind (``attention: [{kind: ..., option: value}, ...]``): Zoology's figure-2 H3 has two
# channels per head (its configs; 64 shift taps and N = 64 are H3's defaults here)
LAYER_OPTIONS = {"h3": {"head_dim": 2}}
# the positional-bias kinds of issue 31, beside ALiBi and FoX; run with ``kinds=...`` (not in the default grid, which
# keeps ``mixers --quick`` inside its time budget)
POSITION_KINDS = ("t5_bias", "dynamic_bias", "stick_breaking", "cope")
MARKOV_KINDS = ("markov_local", "markov_global", "hybrid_split", "hybrid_parallel")
RANDOM_FEATURE_KINDS = ("rff", "hybrid_split", "hybrid_parallel")  # read ``num_features`` (per head)
# The published picture's groups. Zoology's gated convolutions: H3, Hyena, RWKV, RetNet (S4D is its LTI core).
# Mamba's selective recurrences have input-dependent transitions (our scan, GRU; FoX is their attention analogue);
# LTI ones have fixed transitions (S4D, H3's SSMs; RetNet's and RWKV-4's decays are learned but input-independent).
GATED_CONVOLUTIONS = ("h3", "hyena", "rwkv", "retnet", "s4d")
SELECTIVE = ("scan", "gru", "forgetting")
LTI = ("s4d", "h3", "retnet", "rwkv")
# Zoology's figure 2: sequence length -> key-value pairs (vocabulary 8,192)
ZOOLOGY_PAIRS = {64: 4, 128: 8, 256: 16, 512: 64}


def kind_section(kind: str, width: int, n_layers: int, n_heads: int, max_order: int, window: int,
                 num_features: int | None = None) -> dict:
    """The model section of ``kind`` at ``width``: causal, SwiGLU, no dropout; local kinds see ``window`` keys,
    random-feature kinds draw ``num_features`` features per head (None: the model's default, 64)."""
    if kind not in KINDS:
        raise ValueError(f"mixers: kind {kind!r} is not one of {tuple(KINDS)}")
    section = {"d_model": width, "n_layers": n_layers, "n_heads": n_heads, "causal": True, "ffn": "swiglu",
               "dropout": 0.0, **KINDS[kind][1]}  # fmt: skip
    if kind in LAYER_OPTIONS:
        section["attention"] = [{"kind": section["attention"], **LAYER_OPTIONS[kind]} for _ in range(n_layers)]
    if kind in MARKOV_KINDS:  # the config refuses an option that the chosen kind does not read
        section["max_order"] = max_order
    if section.get("scope") == "local":
        section["window"] = window
    if kind in RANDOM_FEATURE_KINDS and num_features is not None:
        section["num_features"] = num_features
    return section


def task_source(task: str, length: int, *, mqar_vocab: int, mqar_pairs: int, induction_vocab: int,
                copy_tokens: int, copy_vocab: int, icl_order: int, icl_symbols: int):  # fmt: skip
    """The data source of ``task`` at sequence length ``length`` (its ``examples(count, generator)`` streams)."""
    options = {
        "mqar": {"seq_len": length, "num_pairs": mqar_pairs, "vocab_size": mqar_vocab},
        "induction": {"seq_len": length, "vocab_size": induction_vocab},
        "selective_copy": {"seq_len": length, "num_tokens": copy_tokens, "vocab_size": copy_vocab},
        "icl_markov": {"seq_len": length, "order": icl_order, "num_symbols": icl_symbols},
    }
    if task not in options:
        raise ValueError(f"mixers: task {task!r} is not one of {TASKS}")
    return DATA_SOURCES[task](**options[task])


def mqar_pairs(length: int, settings) -> int:
    """MQAR's key-value pairs at ``length``: Zoology's figure-2 count with ``settings.sizes='zoology'``, else one pair
    per ``settings.mqar_pairs_per_length`` tokens (at least one)."""
    if settings.sizes.startswith("zoology") and length in ZOOLOGY_PAIRS:
        return ZOOLOGY_PAIRS[length]
    return max(1, length // settings.mqar_pairs_per_length)


def vocab_of(source) -> int:
    return source.num_symbols if hasattr(source, "num_symbols") else source.vocab_size


@torch.no_grad()
def score(model, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int = 256) -> dict[str, float]:
    """Accuracy and mean cross-entropy (nats) of a causal LM over the scored labels (the logits at t - 1 answer
    ``labels[t]``)."""
    correct, loss, count = 0, 0.0, 0
    for start in range(0, len(inputs), batch_size):
        logits = model(inputs[start : start + batch_size]).logits[:, :-1].float()
        targets = labels[start : start + batch_size, 1:]
        scored = targets != -100
        correct += int((logits.argmax(-1) == targets)[scored].sum())
        loss += float(F.cross_entropy(logits[scored], targets[scored], reduction="sum"))
        count += int(scored.sum())
    return {"accuracy": correct / count, "loss": loss / count}


RECALL_DISTANCES = (16, 32, 48)  # MQAR's accuracy by distance: the spans 1-16, 17-32, 33-48 and 49 on


@torch.no_grad()
def recall_by_distance(model, inputs: torch.Tensor, labels: torch.Tensor, edges: tuple[int, ...] = RECALL_DISTANCES,
                       batch_size: int = 256) -> list[dict]:  # fmt: skip
    """MQAR's accuracy by how far back each query's value stands: the query at q (answering ``labels[q + 1]``) must
    read the value after its key's first occurrence j, q - j - 1 positions back. One entry per span of
    distances (``edges`` split 1.. into spans, the last open): {"distances": "1-16", "correct": c, "count": n}, ...,
    {"distances": "49+", ...}; the same labels at every T longer than the edges. A window of W keys
    reaches the spans up to W in one step; what lies beyond shows where a kind's reach ends."""
    bounds = (0, *(edge for edge in edges if edge < inputs.shape[1] - 2), inputs.shape[1])  # the longest is T - 2
    correct, count = [0] * (len(bounds) - 1), [0] * (len(bounds) - 1)
    for start in range(0, len(inputs), batch_size):
        x, y = inputs[start : start + batch_size], labels[start : start + batch_size, 1:]
        hits = model(x).logits[:, :-1].argmax(-1) == y
        queries = y != -100  # (B, T - 1): the query positions q
        earlier = torch.ones(x.shape[1] - 1, x.shape[1] - 1, dtype=torch.bool, device=x.device).tril(-1)
        same = (x[:, :-1, None] == x[:, None, :-1]) & earlier  # same[b, q, j]: token j repeats the token at q
        first = same.float().argmax(-1)  # the first earlier occurrence of each query's key
        distance = torch.arange(x.shape[1] - 1, device=x.device) - first - 1
        for i, (low, high) in enumerate(zip(bounds, bounds[1:], strict=False)):
            span = queries & (distance > low) & (distance <= high)
            correct[i] += int(hits[span].sum())
            count[i] += int(span.sum())
    labels = [f"{low + 1}-{high}" for low, high in zip(bounds[:-2], bounds[1:-1], strict=True)] + [f"{bounds[-2] + 1}+"]
    return [{"distances": label, "correct": c, "count": n} for label, c, n in zip(labels, correct, count, strict=True)]


def bayes_add1_scores(inputs: torch.Tensor, order: int, num_symbols: int) -> dict[str, float]:
    """The Bayes add-1 in-context predictor's accuracy (its most probable symbol) and loss on ``icl_markov``
    sequences, over the same targets as ``score`` (t >= order)."""
    prediction = add_beta_predict(inputs, order, num_symbols, 1.0)[:, order - 1 : -1]
    accuracy = float((prediction.argmax(-1) == inputs[:, order:]).double().mean())
    return {"accuracy": accuracy, "loss": add_beta_loss(inputs, order, num_symbols, 1.0)}


@torch.no_grad()
def gate_profile(model, inputs: torch.Tensor, labels: torch.Tensor) -> list[dict] | None:
    """Per Markov layer, where the order gates put their mass at the positions that answer a scored label: the mean
    gate over those positions and the heads (lags 1..K, then the null slot when present), and the mean effective
    bias per lag (gate times transition strength, in logit units). None for a model without Markov layers."""
    strengths = model.transition_strengths()
    if not strengths:
        return None
    output = model(inputs, return_gates=True)
    answering = labels[:, 1:] != -100  # position t answers labels[t + 1]
    answering = torch.cat([answering, torch.zeros_like(answering[:, :1])], dim=1)
    layers = []
    for gates, strength in zip((g for g in output.gates if g), strengths, strict=True):
        past = gates["past"]  # (B, H, T, K [+1])
        mean_gate = past.permute(0, 2, 1, 3)[answering].mean(dim=(0, 1))  # (K [+1],)
        order = strength["past"].shape[-1]
        per_head = past.permute(0, 2, 1, 3)[answering].mean(0)[:, :order]  # (H, K)
        effective = (per_head * strength["past"]).mean(0)
        layers.append({"gate": mean_gate.tolist(), "effective_bias": effective.tolist(),
                       "strength": strength["past"].mean(0).tolist()})  # fmt: skip
    return layers


__all__ = ["GATED_CONVOLUTIONS", "KINDS", "LTI", "MARKOV_KINDS", "RANDOM_FEATURE_KINDS", "RECALL_DISTANCES",
           "REFERENCE_KIND", "SELECTIVE", "TASKS", "TASK_SPECS", "ZOOLOGY_PAIRS", "SyntheticTask", "bayes_add1_scores",
           "gate_profile", "kind_section", "mqar_pairs", "recall_by_distance", "score", "task_source",
           "vocab_of"]  # fmt: skip

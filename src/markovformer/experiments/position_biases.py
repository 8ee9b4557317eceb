"""``position-biases``: every way to bias attention by position, side by side on the tasks that isolate what a
positional bias can do (issue 31).

Kinds (``KINDS``): Markov attention local and global, sliding-window softmax, ALiBi, FoX and FoX Pro, T5 bucket bias,
dynamic position bias, stick-breaking, CoPE, selective attention (with rotary, as in its paper), softmax with rotary
and softmax with no position at all. Each is built at the parameter count of the softmax+rotary model of width
``d_model`` (within ``tolerance``; the report lists every count).

Tasks:
- hidden-order chains (``order-recovery``'s ``lagged_chain``): "fixed-k" depends on lags 1..k, "lag-k" on lag k only;
  scored by the exact expected loss over the entropy rate, and read by each kind's *distance profile*: the attention
  mass its heads put on each lag (mean over queries, max over heads and layers), the way the Markov gates are read;
- length extrapolation on the same chains: the model trained at T is evaluated at 2T, 4T, 8T;
- in-context chains of order 1-3 (``icl_markov``), against the Bayes add-1 predictor;
- MQAR and selective copying from the mixer suite (``mixers``), by test accuracy.

The learning rate of each (task, kind) is picked among ``lrs`` on the first seed's validation score (loss for the
chains, accuracy for MQAR and copying); the other seeds train at it; tables give mean +- std over seeds. Training is
the testbed's small loop (``fitting.fit_on_stream``) on fresh generated batches; validation and test sets are fixed
per seed. Every cell is cached under ``cells/`` (a killed run resumes).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F

from markovformer.data.synthetic.markov_sources import MAX_CONTEXTS
from markovformer.experiments import mixers
from markovformer.experiments import mixers_models as zoo
from markovformer.experiments.fitting import STREAM_FIT_THREADS, fit_on_stream
from markovformer.experiments.position_biases_report import write_report
from markovformer.experiments.report import ExperimentReport, cell_settings, revisions_of, seed_summary
from markovformer.experiments.settings import configure
from markovformer.experiments.table1_models import match_width, parameter_count
from markovformer.markov import lagged_chain
from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM

NAME = "position-biases"
SUMMARY = ("every positional attention kind on hidden-order chains (distance profiles), length extrapolation, "
           "in-context chains, MQAR and selective copying")  # fmt: skip
FOX_PRO = {"output_gate": True, "output_norm": True, "qk_norm": True, "kv_shift": True}
# key -> (label, model section fields beside the shared ones); "local" kinds see keys t-window..t per layer, the kinds
# that encode order themselves run without position embeddings (as in their papers)
KINDS: dict[str, tuple[str, dict]] = {
    "markov_local": ("Markov, local", {"attention": "markov", "scope": "local"}),
    "markov_global": ("Markov, global", {"attention": "markov", "scope": "global"}),
    "sliding_window": ("softmax, sliding window", {"attention": "softmax", "scope": "local"}),
    "alibi": ("ALiBi", {"attention": "alibi", "scope": "global", "position": "none"}),
    "fox": ("FoX", {"attention": "forgetting", "scope": "global", "position": "none"}),
    "fox_pro": ("FoX Pro", {"attention": "forgetting", "scope": "global", "position": "none", "pro": True}),
    "t5_bias": ("T5 bucket bias", {"attention": "t5_bias", "scope": "global", "position": "none"}),
    "dynamic_bias": ("dynamic position bias", {"attention": "dynamic_bias", "scope": "global", "position": "none"}),
    "stick_breaking": ("stick-breaking", {"attention": "stick_breaking", "scope": "global", "position": "none"}),
    "cope": ("CoPE", {"attention": "cope", "scope": "global", "position": "none"}),
    "selective": ("selective (+ rotary)", {"attention": "selective", "scope": "global"}),
    "softmax_rotary": ("softmax + rotary", {"attention": "softmax", "scope": "global"}),
    "softmax_nope": ("softmax, no position", {"attention": "softmax", "scope": "global", "position": "none"}),
}
REFERENCE_KIND = "softmax_rotary"
MIXER_TASKS = ("mqar", "selective_copy")


@dataclass(frozen=True)
class PositionBiasSettings:
    MAY_BE_ZERO: ClassVar[tuple[str, ...]] = ("warmup_steps", "tolerance", "strength")
    kinds: tuple[str, ...] = tuple(KINDS)
    hidden_sources: tuple[str, ...] = ("fixed-2", "fixed-4", "lag-3")  # fixed-k: lags 1..k; lag-k: lag k only
    icl_orders: tuple[int, ...] = (1, 2, 3)
    mixer_tasks: tuple[str, ...] = MIXER_TASKS
    MAY_BE_EMPTY: ClassVar[tuple[str, ...]] = ("hidden_sources", "icl_orders", "mixer_tasks", "extrapolate")
    d_model: int = 64  # the softmax+rotary reference's width; other kinds match its parameter count
    n_layers: int = 2
    n_heads: int = 4
    max_order: int = 8  # Markov lags K
    window: int = 16  # the local kinds' window W: keys t-W..t
    seq_len: int = 64  # training length T of every task
    extrapolate: tuple[int, ...] = (2, 4, 8)  # hidden-order chains evaluated at these multiples of T
    profile_lags: int = 8  # distance profile over attention lags 0..profile_lags
    num_symbols: int = 8  # hidden-order chains
    strength: float = 2.0
    icl_symbols: int = 2
    mqar_vocab: int = 256  # MQAR needs a vocabulary above seq_len (the mixers' default)
    mqar_pairs_per_length: int = 16
    copy_tokens: int = 8
    copy_vocab: int = 16
    lrs: tuple[float, ...] = (1e-3, 3e-3)
    steps: int = 1000
    batch_size: int = 32
    warmup_steps: int = 100
    val_examples: int = 256
    test_examples: int = 512
    tolerance: float = 0.1  # largest relative parameter difference to the reference that counts as matched


# --quick: two hidden-order chains (lags 1..3 and lag 3 alone), in-context order 2, MQAR and copying at T = 32, one
# lr, one seed, short training. It must still order the kinds on the hidden-order chain (the slow test checks it).
QUICK = PositionBiasSettings(hidden_sources=("fixed-3", "lag-3"), icl_orders=(2,), d_model=32, n_heads=2, seq_len=32,
                             extrapolate=(2, 4, 8), profile_lags=6, lrs=(3e-3,), steps=150, warmup_steps=20,
                             val_examples=128, test_examples=256, copy_tokens=4, mqar_vocab=64)  # fmt: skip


def check_settings(settings: PositionBiasSettings) -> None:
    for kind in settings.kinds:
        if kind not in KINDS:
            raise ValueError(f"{NAME}.kinds: {kind!r} is not one of {tuple(KINDS)}")
    for source in settings.hidden_sources:
        _chain_lags(source)
    for order in settings.icl_orders:
        if isinstance(order, bool) or not isinstance(order, int) or not 1 <= order <= 3:
            raise ValueError(f"{NAME}.icl_orders: {order!r} must be 1, 2 or 3")
    for task in settings.mixer_tasks:
        if task not in MIXER_TASKS:
            raise ValueError(f"{NAME}.mixer_tasks: {task!r} is not one of {MIXER_TASKS}")
    if not (settings.hidden_sources or settings.icl_orders or settings.mixer_tasks):
        raise ValueError(f"{NAME}: hidden_sources, icl_orders and mixer_tasks are all empty: no task to run")
    if not settings.lrs:
        raise ValueError(f"{NAME}.lrs needs at least one learning rate")
    if any(isinstance(m, bool) or not isinstance(m, int) or m < 2 for m in settings.extrapolate):
        raise ValueError(f"{NAME}.extrapolate: {settings.extrapolate!r} must be integer multiples >= 2 of seq_len")
    if list(settings.extrapolate) != sorted(set(settings.extrapolate)):  # the figure draws them in order along T
        raise ValueError(f"{NAME}.extrapolate: {settings.extrapolate!r} must be strictly increasing (no repeats)")
    for task in settings.mixer_tasks:
        mixers.source_of(task, settings.seq_len, _mixer_settings(settings, 2))
    if settings.profile_lags >= settings.seq_len:
        raise ValueError(f"{NAME}.profile_lags={settings.profile_lags} must be below seq_len={settings.seq_len}")
    # what a cell fails on only once it starts, naming the chain's or the model config's field, not the setting
    if not all(isinstance(lr, int | float) and not isinstance(lr, bool) and 0 < lr < math.inf for lr in settings.lrs):
        raise ValueError(f"{NAME}.lrs={list(settings.lrs)!r}: every learning rate must be a positive number")
    for key in ("num_symbols", "icl_symbols"):
        if getattr(settings, key) < 2:
            raise ValueError(f"{NAME}.{key}={getattr(settings, key)} must be at least 2 (a chain over one symbol)")
    if settings.d_model % (2 * settings.n_heads):  # the softmax + rotary reference: rotary needs an even head dim
        raise ValueError(f"{NAME}.d_model={settings.d_model} must be a multiple of 2 * n_heads = "
                         f"{2 * settings.n_heads} (softmax + rotary, the reference, needs an even head dimension)")
    for source in settings.hidden_sources:  # the chain's table, its scored positions and its framed lags
        order = max(_chain_lags(source))
        if settings.num_symbols**order > MAX_CONTEXTS:
            raise ValueError(f"{NAME}.hidden_sources: {source!r} with num_symbols={settings.num_symbols}: the chain's "
                             f"table has {settings.num_symbols}^{order} contexts, above {MAX_CONTEXTS:,}; lower the "
                             "order or num_symbols")  # fmt: skip
        if settings.seq_len <= order:
            raise ValueError(f"{NAME}.seq_len={settings.seq_len} must exceed the order {order} of hidden source "
                             f"{source!r} (the expected loss scores the symbols after the first {order})")  # fmt: skip
        if settings.profile_lags < order - 1:
            raise ValueError(f"{NAME}.profile_lags={settings.profile_lags} must reach attention lag {order - 1}, "
                             f"which hidden source {source!r} reads (its lag {order}): the distance profiles frame "
                             "it")  # fmt: skip
    if "markov_local" in settings.kinds and settings.window < settings.max_order:
        raise ValueError(f"{NAME}.window={settings.window} must be at least max_order={settings.max_order}: the local "
                         "Markov kind would never see its farthest lags")  # fmt: skip


def _chain_lags(source: str) -> tuple[int, ...]:
    """The lags a hidden-order source depends on: "fixed-k" -> 1..k, "lag-k" -> (k,)."""
    family, _, order = source.partition("-")
    if family not in ("fixed", "lag") or not order.isdigit() or int(order) < 1:
        raise ValueError(f"{NAME}.hidden_sources: {source!r} must be 'fixed-K' (lags 1..K) or 'lag-K' (lag K only)")
    return tuple(range(1, int(order) + 1)) if family == "fixed" else (int(order),)


def kind_section(kind: str, width: int, settings: PositionBiasSettings) -> dict:
    """The model section of ``kind`` at ``width``: causal, SwiGLU, no dropout (FoX Pro: all four parts per layer)."""
    fields = dict(KINDS[kind][1])
    section = {"d_model": width, "n_layers": settings.n_layers, "n_heads": settings.n_heads, "causal": True,
               "ffn": "swiglu", "dropout": 0.0}  # fmt: skip
    if fields.pop("pro", False):
        kind_name, scope = fields.pop("attention"), fields.pop("scope")
        fields["attention"] = [{"kind": kind_name, "scope": scope, **FOX_PRO} for _ in range(settings.n_layers)]
    section.update(fields)
    if fields.get("attention") == "markov":  # the config refuses an option that the chosen kind does not read
        section["max_order"] = settings.max_order
    if fields.get("scope") == "local":
        section["window"] = settings.window
    return section


def matched_sections(vocab_size: int, settings: PositionBiasSettings) -> dict[str, dict]:
    """Every kind's section at the reference's parameter count, with ``parameters`` and ``ratio``."""
    info = {"vocab_size": vocab_size}
    target = parameter_count("causal_lm", kind_section(REFERENCE_KIND, settings.d_model, settings), info)
    sections = {}
    for kind in settings.kinds:
        section = kind_section(kind, settings.d_model, settings)
        if kind != REFERENCE_KIND:
            width, _ = match_width("causal_lm", section, info, target)
            if section.get("position") == "none":  # no rotary: any whole number of channels per head will do
                widths = (width - settings.n_heads, width, width + settings.n_heads)
                counts = {w: parameter_count("causal_lm", kind_section(kind, w, settings), info) for w in widths}
                width = min(widths, key=lambda w: abs(counts[w] - target))
            section = kind_section(kind, width, settings)
        count = parameter_count("causal_lm", section, info)
        sections[kind] = {"section": section, "parameters": count, "ratio": count / target}
    return sections


def _model(section: dict, vocab_size: int, seed: int) -> MarkovianTransformerForCausalLM:
    torch.manual_seed(seed)
    return MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=vocab_size, **section))


@torch.no_grad()
def distance_profile(model: MarkovianTransformerForCausalLM, x: torch.Tensor, max_lag: int) -> list[list[float]]:
    """Per layer, the attention mass at each lag 0..max_lag: mean over the batch and the queries t >= max_lag (each
    sees every such lag), max over heads. (layers, max_lag + 1)."""
    attentions = model(x, return_weights=True).attentions
    positions = torch.arange(max_lag, x.shape[1])
    profile = []
    for weights in attentions:  # (B, H, T, T)
        by_lag = torch.stack([weights[:, :, positions, positions - lag].mean(dim=(0, 2))
                              for lag in range(max_lag + 1)], dim=-1)  # fmt: skip
        profile.append(by_lag.amax(0).tolist())
    return profile


def expected_loss_of(chain, model: torch.nn.Module, sequences: torch.Tensor, chunk: int = 64) -> float:
    """The model's expected loss against the chain's true next-symbol law, over every sequence alike: scored
    ``chunk`` sequences at a time, each chunk weighted by its size (the last may be smaller)."""
    total = 0.0
    for part in sequences.split(chunk):
        total += chain.expected_loss(part, F.log_softmax(model(part).logits.double(), dim=-1)) * len(part)
    return total / len(sequences)


def hidden_cell(source: str, section: dict, lr: float, seed: int, settings: PositionBiasSettings,
                log: Callable[[str], None] | None = None) -> dict:  # fmt: skip
    """Train on a hidden-order chain at T; expected loss on validation and test sets at T and the test loss at every
    multiple of T in ``extrapolate``; the distance profile."""
    chain = lagged_chain(settings.num_symbols, _chain_lags(source), strength=settings.strength,
                         generator=torch.Generator().manual_seed(1000 + sum(_chain_lags(source))))  # fmt: skip
    length = settings.seq_len
    val = chain.sample(settings.val_examples, length, generator=torch.Generator().manual_seed(10**6 + seed))
    test_generator = torch.Generator().manual_seed(2 * 10**6 + seed)
    test = {m: chain.sample(max(16, settings.test_examples // m), m * length, generator=test_generator)
            for m in (1, *settings.extrapolate)}  # fmt: skip
    model = _model(section, settings.num_symbols, seed)

    def expected(x: torch.Tensor) -> float:
        return expected_loss_of(chain, model, x)

    fit = fit_on_stream(
        model, lambda x: model(x, labels=x).loss, lambda g: chain.sample(settings.batch_size, length, generator=g),
        lambda: expected(val), steps=settings.steps, lr=lr, seed=seed, eval_every=settings.steps,
        warmup_steps=settings.warmup_steps, log=log, label=f"{source} {section['attention']} lr={lr:g} seed={seed}",
    )  # fmt: skip
    model.eval()
    with torch.no_grad():
        test_losses = {str(m): expected(x) for m, x in test.items()}
    return {"val_loss": fit.evaluations[-1], "test_loss": test_losses["1"], "loss_by_length": test_losses,
            "floor": chain.entropy_rate(), "profile": distance_profile(model, test[1][:32], settings.profile_lags),
            "seconds": fit.seconds}  # fmt: skip


def _mixer_settings(settings: PositionBiasSettings, icl_order: int) -> mixers.MixersSettings:
    """The mixer suite's settings that make its tasks and training loop ours."""
    names = ("mqar_vocab", "mqar_pairs_per_length", "copy_tokens", "copy_vocab", "icl_symbols", "steps", "batch_size",
             "warmup_steps", "val_examples", "test_examples")  # fmt: skip
    return dataclasses.replace(mixers.MixersSettings(), icl_order=icl_order,
                               **{name: getattr(settings, name) for name in names})  # fmt: skip


def _tasks(settings: PositionBiasSettings) -> list[tuple[str, str, int]]:
    """(task key, family, icl order) of every task: "hidden", "icl" or a mixer task."""
    tasks = [(f"hidden_{source}", "hidden", 0) for source in settings.hidden_sources]
    tasks += [(f"icl_order{order}", "icl", order) for order in settings.icl_orders]
    return tasks + [(task, "mixer", 0) for task in settings.mixer_tasks]


def _vocab(family: str, task: str, settings: PositionBiasSettings) -> int:
    if family == "hidden":
        return settings.num_symbols
    mixer_task = "icl_markov" if family == "icl" else task
    return zoo.vocab_of(mixers.source_of(mixer_task, settings.seq_len, _mixer_settings(settings, 1)))


def run_point(report: ExperimentReport, task: str, family: str, order: int, kind: str, matched: dict,
              settings: PositionBiasSettings, seeds: tuple[int, ...], log: Callable[[str], None]) -> dict:  # fmt: skip
    """One (task, kind): every lr on the first seed, the best on validation for the other seeds."""
    section, length = matched["section"], settings.seq_len
    mixer_settings = _mixer_settings(settings, max(order, 1))
    mixer_task = "icl_markov" if family == "icl" else task

    def cell(lr: float, seed: int) -> dict:
        inputs = {"task": task, "section": section, "lr": lr, "seed": seed,
                  **cell_settings(settings, ("kinds", "lrs", "hidden_sources", "icl_orders", "mixer_tasks")),
                  **revisions_of(section)}  # fmt: skip
        key = f"{task}_{kind}_lr={lr:g}_seed={seed}"
        if family == "hidden":
            compute = lambda: hidden_cell(task.removeprefix("hidden_"), section, lr, seed, settings)  # noqa: E731
        else:
            compute = lambda: mixers.train_cell(mixer_task, length, section, lr, seed, mixer_settings)  # noqa: E731
        return report.cached(key, compute, depends_on=inputs)

    def validation(result: dict) -> float:  # higher is better
        if family == "hidden":
            return -result["val_loss"]
        return -result["val"]["loss"] if family == "icl" else result["val"]["accuracy"]

    first = {lr: cell(lr, seeds[0]) for lr in settings.lrs}
    best_lr = max(settings.lrs, key=lambda lr: validation(first[lr]))
    runs = [first[best_lr]] + [cell(best_lr, seed) for seed in seeds[1:]]
    point = {"task": task, "family": family, "kind": kind, "d_model": section["d_model"],
             "parameters": matched["parameters"], "ratio": matched["ratio"], "lr": best_lr,
             "seconds": sum(r["seconds"] for r in runs)}  # fmt: skip
    if family == "hidden":
        point["floor"] = runs[0]["floor"]
        point["excess"] = seed_summary([r["test_loss"] - r["floor"] for r in runs])
        point["excess_by_length"] = {m: seed_summary([r["loss_by_length"][m] - r["floor"] for r in runs])
                                     for m in runs[0]["loss_by_length"]}  # fmt: skip
        point["profile"] = [r["profile"] for r in runs]
        log(f"[{NAME}] {task} {kind}: lr {best_lr:g}, loss - entropy rate {point['excess']['mean']:.4f}")
    else:
        point["test_accuracy"] = seed_summary([r["test"]["accuracy"] for r in runs])
        point["test_loss"] = seed_summary([r["test"]["loss"] for r in runs])
        if family == "icl":
            point["bayes_add1"] = seed_summary([r["bayes_add1"]["loss"] for r in runs])
            point["excess"] = seed_summary([r["test"]["loss"] - r["bayes_add1"]["loss"] for r in runs])
        log(f"[{NAME}] {task} {kind}: lr {best_lr:g}, test accuracy {point['test_accuracy']['mean']:.3f}")
    return point



def run(
    out_dir: Path, *, quick: bool, seeds: tuple[int, ...] | None, overrides: dict, log: Callable[[str], None]
) -> Path:
    settings = configure(QUICK if quick else PositionBiasSettings(), overrides, NAME)
    check_settings(settings)
    seeds = tuple(seeds) if seeds else ((0,) if quick else (0, 1, 2))
    title = "Every way to bias attention by position, on one bench"
    report = ExperimentReport(out_dir, title, log, settings={**asdict(settings), "seeds": list(seeds)})
    start, cpu_start = time.perf_counter(), time.process_time()
    tasks = _tasks(settings)
    report.expect_cells(len(tasks) * len(settings.kinds) * (len(settings.lrs) + len(seeds) - 1))
    points, parameters = [], {}
    for task, family, order in tasks:
        matched = matched_sections(_vocab(family, task, settings), settings)
        parameters[task] = {kind: {k: matched[kind][k] for k in ("parameters", "ratio")} | {
            "d_model": matched[kind]["section"]["d_model"]} for kind in settings.kinds}  # fmt: skip
        for kind in settings.kinds:
            points.append(run_point(report, task, family, order, kind, matched[kind], settings, seeds, log))
    report.results = {"settings": asdict(settings), "seeds": list(seeds), "points": points, "parameters": parameters,
                      "wall_seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu_start,
                      "threads": STREAM_FIT_THREADS,
                      "lags": {f"hidden_{source}": list(_chain_lags(source)) for source in settings.hidden_sources}}
    write_report(report, settings, seeds, quick, KINDS)
    return report.write()


def hidden_order_ranking(results: dict, task: str) -> dict[str, float]:
    """kind -> mean test loss above the entropy rate on hidden-order ``task`` (e.g. "hidden_fixed-3")."""
    return {p["kind"]: p["excess"]["mean"] for p in results["points"] if p["task"] == task}


__all__ = ["FOX_PRO", "KINDS", "NAME", "QUICK", "SUMMARY", "PositionBiasSettings", "check_settings",
           "distance_profile", "hidden_cell", "hidden_order_ranking", "kind_section", "matched_sections", "run"]

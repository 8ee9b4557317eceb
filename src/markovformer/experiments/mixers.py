"""``mixers``: every sequence mixer on the synthetic tasks that isolate what a mixer can do (Zoology's figure-2 shape).

Tasks (``data.synthetic.tasks``): multi-query associative recall (MQAR, Arora et al., 2023), induction heads and
selective copying (Gu and Dao, 2023), and in-context Markov chains (scored against the Bayes add-1 predictor).
Kinds (``mixers_models.KINDS``): Markov attention local and global, softmax global and sliding-window, ALiBi, FoX,
random features, the two hybrids and the baseline zoo, each at the parameter count of the global softmax model of
the grid's width (within ``tolerance``). Grid: sequence length x width. The learning rate of each (task, length,
width, kind) is picked on the validation accuracy of the first seed among ``lrs``; the other seeds train at it.
Test accuracy is reported as mean +- std over seeds. Markov kinds also report where their order gates put their
mass at the positions that answer a query.

Each cell trains on a fresh stream of generated batches with the testbed's small loop (``fitting.fit_on_stream``:
AdamW, warm-up then a constant rate), as ``icl-depth`` and ``order-recovery`` do: thousands of tiny models on
endless generated data, where the engine's Lightning runs (datasets, checkpoints, logs) would cost more than the
training. The same tasks train through the engine from a config (``configs/mixers_mqar.yaml``). Validation and test
sets are fixed per seed and never seen in training (a fresh stream cannot repeat them except by chance).
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

from markovformer.experiments import mixers_models as zoo
from markovformer.experiments.fitting import STREAM_FIT_THREADS, fit_on_stream
from markovformer.experiments.mixers_report import write_report
from markovformer.experiments.report import ExperimentReport, MissingCell, mean_std, revisions_of, seed_summary
from markovformer.experiments.settings import configure
from markovformer.experiments.table1_models import match_width, parameter_count
from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.ops.losses import token_cross_entropy
from markovformer.training.trainer_config import TrainingDiverged

NAME = "mixers"
SUMMARY = "every sequence mixer on MQAR, induction, selective copying and in-context chains, accuracy vs width"
DEFAULT_KINDS = tuple(kind for kind in zoo.KINDS if kind != "alibi_local" and kind not in zoo.POSITION_KINDS)


@dataclass(frozen=True)
class MixersSettings:
    MAY_BE_ZERO: ClassVar[tuple[str, ...]] = ("warmup_steps", "tolerance")
    tasks: tuple[str, ...] = zoo.TASKS
    kinds: tuple[str, ...] = DEFAULT_KINDS
    lengths: tuple[int, ...] = (64, 128)
    widths: tuple[int, ...] = (32, 64)  # the global softmax model's d_model; other kinds match its parameters
    sizes: str = "small"  # "zoology": Zoology's figure-2 grid (lengths 64-512, widths 64-512, vocabulary 8,192);
    # "zoology-64": its T = 64 panel (4 pairs, widths 64 and 128, the four lrs of logspace(-4, -2, 4))
    n_layers: int = 2
    n_heads: int = 2
    max_order: int = 8  # Markov lags K
    window: int = 16  # keys seen by local kinds (markov_local, sliding_window, hybrids, alibi_local)
    num_features: int | None = None  # random features per head of rff and the hybrids (None: the model's 64)
    mqar_vocab: int = 256
    mqar_pairs_per_length: int = 16  # pairs = length / 16: Zoology's 4 pairs at 64, 8 at 128, 16 at 256
    induction_vocab: int = 16
    copy_tokens: int = 8
    copy_vocab: int = 16
    icl_order: int = 2
    icl_symbols: int = 2
    lrs: tuple[float, ...] = (1e-3, 3e-3)
    steps: int = 400
    batch_size: int = 32
    warmup_steps: int = 50
    eval_every: int = 0  # > 0: also score validation accuracy every this many steps (the cell's "val_curve")
    val_examples: int = 256
    test_examples: int = 512
    tolerance: float = 0.1  # largest relative parameter difference to the reference that counts as matched
    solved: float = 0.9  # test accuracy that counts as solving a task (icl_markov: within 0.02 of Bayes add-1)
    device: str = "cpu"  # "cuda" for the zoology sizes


# --quick: one short length (MQAR with 2 pairs, 4 tokens to copy), two widths, one lr, one seed. Below d = 32 some
# kinds cannot be matched (Hyena's filters alone outweigh a d = 16 softmax model), so the smallest width is 32.
QUICK = MixersSettings(lengths=(32,), widths=(32, 64), mqar_vocab=64, copy_tokens=4, lrs=(3e-3,), steps=150,
                       warmup_steps=20, val_examples=128, test_examples=256)  # fmt: skip


# Zoology's figure 2 (Arora et al., 2023): vocabulary 8,192, best of four learning rates in logspace(-4, -2)
ZOOLOGY_LRS = (1e-4, 10 ** (-4 + 2 / 3), 10 ** (-4 + 4 / 3), 1e-2)
SIZES = ("small", "zoology", "zoology-64")
# The budget of zoology-64: batches of 64 for this many steps, 640,000 fresh sequences (Zoology trains 64 epochs of
# 100,000): global softmax at d = 64 (lr 2.2e-3) reaches 0.99 validation accuracy at step 9,000 (0.22 at 2,000; at
# chance until ~700), Hyena stalls at 0.31 (measured; README). About 45-60 minutes a cell on one CPU core.
ZOOLOGY_64_STEPS = 10_000
# --quick --set sizes=zoology-64: global softmax at d = 64 and one of Zoology's rates, long enough to leave chance
QUICK_ZOOLOGY_64 = {"kinds": ("softmax",), "widths": (64,), "lrs": (ZOOLOGY_LRS[2],), "steps": 1000,
                    "warmup_steps": 50}  # fmt: skip


def resolve_sizes(settings: MixersSettings, overrides: dict | None = None, quick: bool = False) -> MixersSettings:
    """Settings with ``sizes='zoology'`` expanded into Zoology's figure-2 grid, ``'zoology-64'`` into its T = 64
    panel (4 key-value pairs, widths 64 and 128, Zoology's four learning rates, MQAR only; ``quick``:
    ``QUICK_ZOOLOGY_64``); a field named in ``overrides`` keeps its overridden value (``--set sizes=zoology-64
    'widths=[64]'`` runs one width)."""
    if settings.sizes == "small":
        return settings
    if settings.sizes not in SIZES:
        raise ValueError(f"mixers.sizes={settings.sizes!r} must be one of {SIZES}")
    if settings.sizes == "zoology-64":
        grid = {"tasks": ("mqar",), "lengths": (64,), "widths": (64, 128), "mqar_vocab": 8192, "lrs": ZOOLOGY_LRS,
                "steps": ZOOLOGY_64_STEPS, "batch_size": 64, **(QUICK_ZOOLOGY_64 if quick else {})}  # fmt: skip
    else:
        grid = {"lengths": tuple(zoo.ZOOLOGY_PAIRS), "widths": (64, 128, 256, 512), "mqar_vocab": 8192}
    return dataclasses.replace(settings, **{k: v for k, v in grid.items() if k not in (overrides or {})})


def settings_from(overrides: dict | None, quick: bool = False) -> MixersSettings:
    """A run's settings: the budget (``QUICK`` or the default), ``overrides`` applied, then ``sizes`` expanded."""
    return configure(QUICK if quick else MixersSettings(), overrides, NAME,
                     lambda settings: resolve_sizes(settings, overrides, quick))  # fmt: skip


def check_settings(settings: MixersSettings) -> None:
    for task in settings.tasks:
        if task not in zoo.TASKS:
            raise ValueError(f"mixers.tasks: {task!r} is not one of {zoo.TASKS}")
    for kind in settings.kinds:
        if kind not in zoo.KINDS:
            raise ValueError(f"mixers.kinds: {kind!r} is not one of {tuple(zoo.KINDS)}")
    if settings.num_features is not None and settings.num_features < 1:
        raise ValueError(f"mixers.num_features={settings.num_features} must be a positive integer (or null)")
    if not settings.lrs or not settings.lengths or not settings.widths:
        raise ValueError("mixers: lrs, lengths and widths need at least one value each")
    if not all(isinstance(lr, int | float) and not isinstance(lr, bool) and 0 < lr < math.inf for lr in settings.lrs):
        raise ValueError(f"mixers.lrs={list(settings.lrs)!r}: every learning rate must be a positive number (lr=0 "
                         "trains nothing)")  # fmt: skip
    for length in settings.lengths:  # every task's constraints, before anything trains
        for task in settings.tasks:
            source_of(task, length, settings)


def source_of(task: str, length: int, settings: MixersSettings):
    return zoo.task_source(task, length, mqar_vocab=settings.mqar_vocab, mqar_pairs=zoo.mqar_pairs(length, settings),
                           induction_vocab=settings.induction_vocab, copy_tokens=settings.copy_tokens,
                           copy_vocab=settings.copy_vocab, icl_order=settings.icl_order,
                           icl_symbols=settings.icl_symbols)  # fmt: skip


def matched_sections(task: str, length: int, width: int, settings: MixersSettings) -> dict[str, dict]:
    """Every kind's model section at the reference's parameter count (the global softmax model at ``width``), with
    ``parameters`` and ``ratio`` (its count over the reference's)."""

    info = {"vocab_size": zoo.vocab_of(source_of(task, length, settings))}
    shape = (settings.n_layers, settings.n_heads, settings.max_order, settings.window, settings.num_features)
    reference = zoo.kind_section(zoo.REFERENCE_KIND, width, *shape)
    target = parameter_count("causal_lm", reference, info)
    sections = {}
    for kind in settings.kinds:
        section = zoo.kind_section(kind, width, *shape)
        if kind != zoo.REFERENCE_KIND:
            matched, _ = match_width("causal_lm", section, info, target)
            section = zoo.kind_section(kind, matched, *shape)
        count = parameter_count("causal_lm", section, info)
        sections[kind] = {"section": section, "parameters": count, "ratio": count / target}
    return sections


def train_cell(task: str, length: int, section: dict, lr: float, seed: int, settings: MixersSettings,
               log: Callable[[str], None] | None = None, kind: str | None = None) -> dict:  # fmt: skip
    """Train one model on a fresh stream of the task; its validation and test scores (and gate profile). ``kind``
    names the model in progress lines (else its attention, which softmax and sliding_window share)."""

    source = source_of(task, length, settings)
    val = source.examples(settings.val_examples, torch.Generator().manual_seed(10**6 + seed))
    test = source.examples(settings.test_examples, torch.Generator().manual_seed(2 * 10**6 + seed))
    device = torch.device(settings.device)
    val, test = tuple(t.to(device) for t in val), tuple(t.to(device) for t in test)
    torch.manual_seed(seed)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=zoo.vocab_of(source), **section))
    model.to(device)
    fit = fit_on_stream(
        model, lambda batch: answer_loss(model, batch[0].to(device), batch[1].to(device)),
        lambda generator: source.examples(settings.batch_size, generator),
        lambda: zoo.score(model, *val)["accuracy"], steps=settings.steps, lr=lr, seed=seed,
        eval_every=settings.eval_every or settings.steps, warmup_steps=settings.warmup_steps, log=log,
        label=f"{task} T={length} {kind or section['attention']} d={section['d_model']} lr={lr:g} seed={seed}",
    )  # fmt: skip
    model.eval()
    result = {"val": zoo.score(model, *val), "test": zoo.score(model, *test), "seconds": fit.seconds,
              "gates": zoo.gate_profile(model, *test), "val_curve": [fit.steps, fit.evaluations]}  # fmt: skip
    if zoo.TASK_SPECS[task].bayes_reference:
        result["bayes_add1"] = zoo.bayes_add1_scores(test[0].cpu(), settings.icl_order, settings.icl_symbols)
    if task == "mqar":
        result["test_by_distance"] = zoo.recall_by_distance(model, *test)
    return result


def answer_loss(model: MarkovianTransformerForCausalLM, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The causal LM's loss (``model(inputs, labels=labels).loss``) with the LM head applied only at the positions
    that answer a label: MQAR scores a few positions of 64 over a vocabulary of 8,192, where the full head would be
    most of a step's time."""
    hidden = model.model(inputs).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    scored = targets != -100
    return token_cross_entropy(model.lm_head(hidden[scored]), targets[scored])


def run_grid_point(report: ExperimentReport, task: str, length: int, width: int, kind: str, matched: dict,
                   settings: MixersSettings, seeds: tuple[int, ...], log: Callable[[str], None],
                   diverged: list[dict] | None = None) -> dict | None:  # fmt: skip
    """One (task, length, width, kind): every lr on the first seed, the best on validation (accuracy; a tie, as
    at chance or at 1.0, to the lower validation loss) for the other seeds.
    A report from the stored cells only (``report.stored_only``) uses the lrs and seeds stored (None: no lr).

    A cell whose training loss turns non-finite is stored as diverged (its rate is one the search tried, as in
    Zoology's sweep, and a grid of hours goes on past it): it is never chosen, it is appended to ``diverged``
    (task, length, width, kind, lr, seed, why), and the point lists it in ``diverged_by_lr`` (None: every lr
    diverged or none is stored)."""

    def cell(lr: float, seed: int) -> dict:
        inputs = {"task": task, "length": length, "section": matched["section"], "lr": lr, "seed": seed,
                  "source": asdict(source_of(task, length, settings)),
                  **{k: getattr(settings, k) for k in ("steps", "batch_size", "warmup_steps", "val_examples",
                                                       "test_examples")},
                  **revisions_of(matched["section"])}  # fmt: skip
        features = f"_features={matched['section']['num_features']}" if "num_features" in matched["section"] else ""
        key = f"{task}_T={length}_d={width}_{kind}{features}_lr={lr:g}_seed={seed}"

        def train() -> dict:
            try:
                return train_cell(task, length, matched["section"], lr, seed, settings, log, kind)
            except TrainingDiverged as error:
                log(f"  {error}")
                return {"diverged": str(error)}

        result = report.cached(key, train, depends_on=inputs)
        if "diverged" in result and diverged is not None:
            diverged.append({"task": task, "length": length, "width": width, "kind": kind, "lr": lr, "seed": seed,
                             "why": result["diverged"]})  # fmt: skip
        return result

    def stored(lr: float, seed: int) -> dict | None:
        try:
            return cell(lr, seed)
        except MissingCell:  # (raised only when stored_only)
            return None

    first = {lr: result for lr in settings.lrs if (result := stored(lr, seeds[0])) is not None}
    diverged_by_lr = {f"{lr:g}": first.pop(lr)["diverged"] for lr in list(first) if "diverged" in first[lr]}
    if not first:
        return None
    best_lr = max(first, key=lambda lr: (first[lr]["val"]["accuracy"], -first[lr]["val"]["loss"]))
    later = [stored(best_lr, seed) for seed in seeds[1:]]
    runs = [first[best_lr]] + [run for run in later if run is not None and "diverged" not in run]
    test_accuracy = seed_summary([r["test"]["accuracy"] for r in runs])
    log(f"[{NAME}] {task} T={length} d={width} {kind}: lr {best_lr:g}, test accuracy {mean_std(test_accuracy)}")
    point = {"task": task, "length": length, "width": width, "kind": kind, "d_model": matched["section"]["d_model"],
             "parameters": matched["parameters"], "ratio": matched["ratio"], "lr": best_lr,
             "val_by_lr": {f"{lr:g}": first[lr]["val"]["accuracy"] for lr in first},
             "val_loss_by_lr": {f"{lr:g}": first[lr]["val"]["loss"] for lr in first},
             "test_by_lr": {f"{lr:g}": first[lr]["test"]["accuracy"] for lr in first}, "diverged_by_lr": diverged_by_lr,
             "test_accuracy": test_accuracy, "test_loss": seed_summary([r["test"]["loss"] for r in runs]),
             "seconds": sum(r["seconds"] for r in runs), "gates": [r["gates"] for r in runs],
             "test_by_distance": [r.get("test_by_distance") for r in runs]}  # fmt: skip
    if zoo.TASK_SPECS[task].bayes_reference:
        point["bayes_add1"] = {name: seed_summary([r["bayes_add1"][name] for r in runs])
                               for name in ("accuracy", "loss")}  # fmt: skip
    return point


def run(
    out_dir: Path, *, quick: bool, seeds: tuple[int, ...] | None, overrides: dict, log: Callable[[str], None]
) -> Path:

    settings = settings_from(overrides, quick)
    check_settings(settings)
    seeds = tuple(seeds) if seeds else ((0,) if quick else (0, 1))
    title = "Sequence mixers on associative recall, induction, selective copying and in-context chains"
    report = ExperimentReport(out_dir, title, log, settings={**asdict(settings), "seeds": list(seeds)})
    start, cpu_start = time.perf_counter(), time.process_time()
    points, diverged = [], []
    # every rate on the first seed, the chosen one on the others (``run_grid_point``): "cell i/N" and the time left
    report.expect_cells(len(settings.tasks) * len(settings.lengths) * len(settings.widths) * len(settings.kinds)
                        * (len(settings.lrs) + len(seeds) - 1))  # fmt: skip
    for task in settings.tasks:
        for length in settings.lengths:
            for width in settings.widths:
                sections = matched_sections(task, length, width, settings)
                for kind in settings.kinds:
                    point = run_grid_point(report, task, length, width, kind, sections[kind], settings, seeds, log,
                                           diverged)  # fmt: skip
                    points += [point] if point is not None else []
    report.results = {"settings": asdict(settings), "seeds": list(seeds), "points": points, "diverged": diverged,
                      "wall_seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu_start,
                      "threads": STREAM_FIT_THREADS}  # fmt: skip
    write_report(report, settings, seeds, quick)
    return report.write()


__all__ = ["DEFAULT_KINDS", "NAME", "QUICK", "SUMMARY", "ZOOLOGY_LRS", "MixersSettings", "answer_loss",
           "check_settings", "matched_sections", "resolve_sizes", "run", "run_grid_point", "settings_from", "source_of",
           "train_cell"]  # fmt: skip

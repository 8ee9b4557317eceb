"""``vmt``: the Variational Markov Transformer (continuous latents, a posterior read from the reversed window,
trained on the ELBO) against exact likelihoods and a windowed Transformer.

1. **Linear-Gaussian state-space model**, where the Kalman filter gives the exact log-likelihood: the ELBO and the
   importance-weighted bounds (K = 1, 10, 100) per step on held-out documents as training proceeds, for a VMT that
   learns everything and for one whose generative part is set to the true model (only its posterior learns, so its
   bounds can meet the exact value). Every bound is chained over the document's windows with the carry, so it is a
   bound on the whole document's log-likelihood.
2. **Sticky HMM** (a hidden state that outlives any short window): per-token loss against the window length for the
   VMT with the carry (truncated BPTT), without it (every window starts from P(x_1)), and a softmax Transformer LM
   of about the same size that sees one window. References: the exact loss (forward algorithm over the whole
   document), the best any model restarted at every window can do (forward algorithm restarted there), and the
   context-free marginal entropy.
3. **Text** (Tiny Shakespeare by default, characters): bits per character against the window length, the same three
   models. Skipped, with a log line, when the file is absent.

Every VMT trains through the engine (``runner.train``, task ``vmt``; one run directory per
cell under ``runs/`` of the output folder, see ``vmt_runs``): the text's Algorithm 1, each batch row walking a long
document window by window, the last latent carried into the next window (``--set overlap=true``: windows advance by
half a window and the latent carried is the one in the middle, inferred with half a window of future), a row that
reaches the end of its document starting a new one without a carry, KL warm-up over the first steps. Part 1's
VMTs are scored at each of their step checkpoints; the "true P" one has its generative part set to the data's
parameters and frozen (``generative_from_data``), so only its posterior trains. The VMT's
loss is −ELBO per token (an upper bound on its negative log-likelihood); the Transformer's is its cross-entropy.
Both score every token of the held-out documents, cut into consecutive windows, the Transformer seeing the window
plus the one token before it (and scoring a document's first token, which it has no context for, by the training
tokens' add-one frequencies, where the VMT has its P(x_1)).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from functools import partial
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

from markovformer.data.recipes.shakespeare import find_tiny_shakespeare
from markovformer.data.synthetic.state_space import HiddenMarkovParameters, LinearGaussianSource, StickyHMMSource
from markovformer.experiments.report import ExperimentReport, cell_settings, file_digest, revisions_of
from markovformer.experiments.settings import configure, single_seed
from markovformer.experiments.vmt_report import (
    MODELS,
    comparison,
    linear_gaussian_figure,
    loss_panel,
    sequence_table,
)
from markovformer.experiments.vmt_runs import (
    load_checkpoint_model,
    skip_length,
    stacked_documents,
    train_vmt_run,
    vmt_run_values,
)
from markovformer.experiments.vmt_training import (
    add_one_frequencies,
    evaluate_transformer,
    evaluate_vmt,
    train_transformer,
)
from markovformer.models.markovian_transformer import MarkovianTransformerForCausalLM, gpt2_style_config
from markovformer.models.vmt import VariationalMarkovTransformer, VMTConfig
from markovformer.training.run_config import resolve_run_config
from markovformer.training.trainer_config import MAX_DEFAULT_THREADS

NAME = "vmt"
SUMMARY = "Variational Markov Transformer: ELBO/IW bounds vs the exact Kalman likelihood; carry on/off vs a windowed " \
          "Transformer on a sticky HMM and on text"  # fmt: skip


@dataclass(frozen=True)
class VMTSettings:
    MAY_BE_ZERO: ClassVar[tuple[str, ...]] = ("kl_warmup_steps", "iw_samples")
    # the VMT (parts 2 and 3; part 1 uses the same sizes with latent_dim = the true state size for "true P")
    latent_dim: int = 16
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    hidden_dim: int = 128
    posterior: str = "gaussian"
    free_bits: float = 0.0
    # training
    batch_size: int = 16
    lr: float = 2e-3
    kl_warmup_steps: int = 500
    overlap: bool = False
    eval_samples: int = 1  # posterior paths per window for the held-out ELBO
    iw_samples: int = 10  # K of the importance-weighted bound also reported in parts 2 and 3 (0: none)
    # part 1: linear-Gaussian state-space model
    lg_window: int = 32
    lg_steps: int = 2000
    lg_eval_every: int = 250
    lg_iw_samples: tuple[int, ...] = (1, 10, 100)
    MAY_BE_EMPTY: ClassVar[tuple[str, ...]] = ("lg_iw_samples",)  # part 1 reports the ELBO alone
    lg_latent_dim: int = 4
    lg_doc_len: int = 256
    lg_train_documents: int = 512
    lg_val_documents: int = 16
    # part 2: sticky HMM
    hmm_windows: tuple[int, ...] = (4, 8, 16, 32)
    hmm_steps: int = 2500
    hmm_doc_len: int = 1024
    hmm_train_documents: int = 256
    hmm_val_documents: int = 8
    # part 3: text
    text_path: str = ""  # "": Tiny Shakespeare (data directory, else ../shared/data); a path: from cwd or the checkout
    text_windows: tuple[int, ...] = (16, 64)
    text_steps: int = 2500
    text_doc_len: int = 1024
    text_val_chars: int = 32768
    # the windowed Transformer: 2 layers, 4 heads, width chosen to match the VMT's parameter count
    transformer_layers: int = 2


QUICK = VMTSettings(latent_dim=8, d_model=32, hidden_dim=64, batch_size=8, kl_warmup_steps=100, lg_window=16,
                    lg_steps=300, lg_eval_every=100, lg_doc_len=128, lg_train_documents=64, lg_val_documents=4,
                    hmm_windows=(4, 16), hmm_steps=300, hmm_doc_len=256, hmm_train_documents=32, hmm_val_documents=4,
                    text_windows=(32,), text_steps=200, text_doc_len=256, text_val_chars=4096)  # fmt: skip


# ---------------------------------------------------------------------------------------------- the models


def vmt_model(settings: VMTSettings, window: int, seed: int, **inputs) -> VariationalMarkovTransformer:
    """A VMT with the settings' sizes; ``inputs``: vocab_size= or input_dim= (and optionally latent_dim=)."""
    torch.manual_seed(seed)
    values = dict(latent_dim=settings.latent_dim, d_model=settings.d_model, n_layers=settings.n_layers,
                  n_heads=settings.n_heads, hidden_dim=settings.hidden_dim, window=window,
                  skip_length=skip_length(window), posterior=settings.posterior,
                  free_bits=settings.free_bits)  # fmt: skip
    return VariationalMarkovTransformer(VMTConfig(**{**values, **inputs}))


def transformer_model(settings: VMTSettings, vocab_size: int, window: int, parameters: int, seed: int):
    """The GPT-2-style softmax Transformer whose width (a multiple of 8, 4 heads) brings its parameter count
    closest to ``parameters``."""
    best = None
    for width in range(16, 513, 8):
        # the model its cells were computed with: no attention biases, normal(0.02) init (gpt2_style_config's
        # until it became GPT-2's own)
        config = gpt2_style_config(vocab_size, width, settings.transformer_layers, 4, window + 1,
                                   attention_bias=False, init_scheme="normal")  # fmt: skip
        count = MarkovianTransformerForCausalLM(config).num_parameters()
        if best is None or abs(count - parameters) < abs(best[1] - parameters):
            best = (config, count)
        if count > parameters:
            break
    torch.manual_seed(seed)
    return MarkovianTransformerForCausalLM(best[0])


# --------------------------------------------------------------------------------------------------- cells


def linear_gaussian_cell(settings: VMTSettings, seed: int, runs: Path, log: Callable[[str], None]) -> dict:
    """Part 1: bounds per step on held-out documents during training, for a learned VMT (trained by the engine into
    ``runs``, scored at each step checkpoint) and for one with the true generative part (frozen) and a learned
    posterior."""
    options = {"doc_len": settings.lg_doc_len, "train_documents": settings.lg_train_documents,
               "val_documents": settings.lg_val_documents, "test_documents": 1}  # fmt: skip
    source = LinearGaussianSource(**options)
    bundle = source.build(seed)
    val = stacked_documents(bundle.val, "input_features")
    exact = bundle.info["reference"]["val_log_likelihood_per_step"]
    out: dict = {"exact": exact, "entropy_rate": bundle.info["reference"]["entropy_rate"], "models": {}}
    evaluate = partial(evaluate_vmt, documents=val, window=settings.lg_window, carry=True, seed=seed,
                       iw_samples=tuple(settings.lg_iw_samples), num_samples=settings.eval_samples)  # fmt: skip
    values = vmt_run_values(settings, {"source": "linear_gaussian", **options}, window=settings.lg_window,
                            steps=settings.lg_steps, carry=True, seed=seed, eval_every=settings.lg_eval_every,
                            latent_dim=settings.lg_latent_dim)  # fmt: skip
    for kind, generative_from_data in (("learned", False), ("true_p", True)):
        # the true P's latent is the source's state; the learned one's is the settings' size
        model = {**values["model"], "generative_from_data": generative_from_data}
        if generative_from_data:
            model["latent_dim"] = source.state_dim
        cell = {**values, "model": model}
        run = train_vmt_run(cell, runs, f"linear_gaussian_{kind}_seed={seed}", log)
        scored = [(step, load_checkpoint_model(path)) for step, path in run.checkpoints if step < settings.lg_steps]
        steps, evaluations = [], []
        for step, model in [*scored, (settings.lg_steps, run.model)]:
            steps.append(step)
            evaluations.append(evaluate(model))
            log(f"  linear-Gaussian {kind} step {step}/{settings.lg_steps}: " + _shown(evaluations[-1]))
        frozen = sum(p.numel() for p in run.model.generative_parameters()) if generative_from_data else 0
        out["models"][kind] = {"steps": steps, "evaluations": evaluations, "seconds": run.seconds,
                               "train_kl": run.last_kl, "parameters": run.model.num_parameters() - frozen,
                               "run_dir": str(run.run_dir)}  # fmt: skip
    return out


def _shown(result: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in result.items() if isinstance(v, float))


def _restart_reference(parameters: HiddenMarkovParameters, documents: Tensor, window: int) -> float:
    """The exact loss per token of a model restarted at every window (forward algorithm from the stationary start)."""
    per_step = []
    for start in range(0, documents.shape[1], window):
        per_step.append(parameters.log_likelihood(documents[:, start : start + window]))
    return float(-torch.cat(per_step, dim=1).mean())


def _sequence_cell(
    model_kind: str, window: int, data: dict, train: Tensor, val: Tensor, vocab_size: int, steps: int,
    settings: VMTSettings, seed: int, runs: Path, log: Callable[[str], None], label: str,
) -> dict:  # fmt: skip
    """Train and score one model of ``MODELS`` on token documents: loss per token (nats) on ``val``. A VMT is trained
    by the engine on the data section ``data`` (whose training and validation documents are ``train`` and ``val``)
    into ``runs``; the Transformer by ``train_transformer`` on ``train``."""
    carry = model_kind == "vmt_carry"
    values = vmt_run_values(settings, data, window=window, steps=steps, carry=carry, seed=seed)
    if model_kind == "transformer":
        vmt_size = vmt_model(settings, window, seed, vocab_size=vocab_size).num_parameters()
        model = transformer_model(settings, vocab_size, window, vmt_size, seed)
        log(f"  {label}: training the Transformer ({model.num_parameters():,} parameters)")
        seconds = train_transformer(model, train, window=window, steps=steps, batch_size=settings.batch_size,
                                    lr=settings.lr, seed=seed)  # fmt: skip
        loss = evaluate_transformer(model, val, window=window, first_token_probs=add_one_frequencies(train, vocab_size))
        # trained here, not by the engine: no run directory
        return {"model": model_kind, "window": window, "loss": loss, "seconds": seconds,
                "parameters": model.num_parameters(), "run_dir": None}  # fmt: skip
    run = train_vmt_run(values, runs, label.replace(" ", "_"), log)
    iw = (settings.iw_samples,) if settings.iw_samples else ()
    result = evaluate_vmt(run.model, val, window=window, carry=carry, iw_samples=iw, num_samples=settings.eval_samples,
                          seed=seed)  # fmt: skip
    log(f"  {label}: −ELBO {-result['elbo']:.4f} nats/token, KL {result['kl']:.4f} ({run.seconds:.0f}s)")
    return {"model": model_kind, "window": window, "loss": -result["elbo"], "reconstruction": result["reconstruction"],
            "kl": result["kl"], "iw_loss": -result[f"iw_{iw[0]}"] if iw else None, "train_kl": run.last_kl,
            "seconds": run.seconds, "parameters": run.model.num_parameters(), "run_dir": str(run.run_dir)}  # fmt: skip


PARTS = ("lg", "hmm", "text")  # each part's own settings start with its name and an underscore


def _cell_identity(settings: VMTSettings, part: str, model_kind: str) -> dict:
    """What a cell of ``part`` (one of ``PARTS``) and ``model_kind`` (one of ``MODELS``; "vmt" for part 1) depends
    on: the settings it reads, not the other parts', its part's list of windows (its own is in its key) or the text's
    path (a text cell adds the file's bytes), so a part with one more window reads back the cells it has; and for
    the Transformer the way it is scored (its cells from before it scored each document's first token are
    recomputed) and its softmax attention's revision."""
    names = [field.name for field in fields(settings)]
    unread = [name for name in names if name.startswith(tuple(f"{other}_" for other in PARTS if other != part))]
    if part == "lg":  # its VMTs' latent size is lg_latent_dim, their bounds' K lg_iw_samples; no Transformer
        unread += ["latent_dim", "iw_samples", "transformer_layers"]
    elif model_kind == "transformer":  # a plain LM sized to the VMT: no KL, carry or posterior samples
        unread += [f"{part}_windows", "kl_warmup_steps", "overlap", "eval_samples", "iw_samples"]
    else:
        unread += [f"{part}_windows", "transformer_layers"]
    depends = cell_settings(settings, [*unread, *(["text_path"] if part == "text" else [])])
    if model_kind != "transformer":
        return depends
    return {**depends, "scores_first_tokens": True, **revisions_of({"attention": "softmax"})}


def memory_cell(
    model_kind: str, window: int, settings: VMTSettings, seed: int, runs: Path, log: Callable[[str], None]
) -> dict:
    """Part 2: one model and window on the sticky HMM, with the exact references for that window."""
    options = {"doc_len": settings.hmm_doc_len, "train_documents": settings.hmm_train_documents,
               "val_documents": settings.hmm_val_documents, "test_documents": 1}  # fmt: skip
    source = StickyHMMSource(**options)
    bundle = source.build(seed)
    train, val = stacked_documents(bundle.train, "input_ids"), stacked_documents(bundle.val, "input_ids")
    cell = _sequence_cell(model_kind, window, {"source": "sticky_hmm", **options}, train, val, source.num_symbols,
                          settings.hmm_steps, settings, seed, runs, log, f"HMM W={window} {model_kind}")  # fmt: skip
    parameters = HiddenMarkovParameters(**bundle.info["parameters"])
    reference = bundle.info["reference"]
    return {**cell, "exact": -reference["val_log_likelihood_per_token"], "restart": _restart_reference(parameters,
            val, window), "marginal": reference["marginal_entropy"]}  # fmt: skip


def text_data(path: str, doc_len: int, val_chars: int) -> dict:
    """The engine data section of part 3: the file's characters, the first 90 % cut into training documents of
    ``doc_len``, then about ``val_chars`` characters as validation documents of ``doc_len``."""
    length = len(Path(path).read_text(encoding="utf-8"))
    val_fraction = min(0.05, val_chars / max(1, length))
    return {"source": "text", "path": path, "tokenizer": "char", "seq_len": doc_len - 1,
            "fractions": (0.9, val_fraction, 0.1 - val_fraction)}  # fmt: skip


def text_cell(
    model_kind: str, window: int, settings: VMTSettings, seed: int, runs: Path, log: Callable[[str], None]
) -> dict:
    """Part 3: one model and window on the text file; loss in nats per character. Both models read the engine's
    documents of that file (``text_data``; the whole ones, a split's last shorter window left out)."""
    # deferred: the training engine imports lightning
    from markovformer.training.runner import build_data

    data = text_data(settings.text_path, settings.text_doc_len, settings.text_val_chars)
    bundle = build_data(resolve_run_config({"task": "vmt", "model_type": "vmt", "model": {}, "data": data,
                                            "trainer": {"seed": seed}}))  # fmt: skip
    train = stacked_documents(bundle.train, "input_ids", settings.text_doc_len)
    val = stacked_documents(bundle.val, "input_ids", settings.text_doc_len)
    vocab_size = bundle.info["vocab_size"]
    cell = _sequence_cell(model_kind, window, data, train, val, vocab_size, settings.text_steps, settings, seed, runs,
                          log, f"text W={window} {model_kind}")  # fmt: skip
    return {**cell, "val_chars": val.numel(), "vocab_size": vocab_size}


# ------------------------------------------------------------------------------------------------------- run


def check_settings(settings: VMTSettings) -> None:
    """ValueError naming the setting for what would fail, or end wrong, only after some training."""
    if any(k < 1 for k in settings.lg_iw_samples):  # K = 0 failed after part 1's training, naming num_samples=0
        raise ValueError(f"{NAME}.lg_iw_samples={list(settings.lg_iw_samples)}: each K must be >= 1 ([] for none)")
    steps = {"lg_steps": settings.lg_steps, "hmm_steps": settings.hmm_steps, "text_steps": settings.text_steps}
    shortest = min(steps, key=steps.get)
    if settings.kl_warmup_steps > steps[shortest]:  # each VMT run refuses it, after the parts before it trained
        raise ValueError(f"{NAME}.kl_warmup_steps={settings.kl_warmup_steps} is longer than {NAME}.{shortest}="
                         f"{steps[shortest]}: the KL weight would never reach 1 in those runs")  # fmt: skip


def run(
    out_dir: Path, *, quick: bool, seeds: tuple[int, ...] | None, overrides: dict, log: Callable[[str], None]
) -> Path:
    settings = configure(QUICK if quick else VMTSettings(), overrides, NAME)
    check_settings(settings)
    seed = single_seed(seeds, NAME)
    report = ExperimentReport(out_dir, "The Variational Markov Transformer against exact likelihoods", log,
                              settings=asdict(settings))  # fmt: skip
    _introduction(report, settings, seed, quick)
    text_models = len(settings.text_windows) * len(MODELS) if _locate(settings.text_path) is not None else 0
    report.expect_cells(1 + len(settings.hmm_windows) * len(MODELS) + text_models)
    results: dict = {"settings": asdict(settings)}
    results["linear_gaussian"] = linear_gaussian_part(report, settings, seed, log)
    results["hmm"] = sticky_hmm_part(report, settings, seed, log)
    text = text_part(report, settings, seed, log)
    if text is not None:
        results["text"] = text
    report.results = results
    return report.write()


def _introduction(report: ExperimentReport, settings: VMTSettings, seed: int, quick: bool) -> None:
    """The report's opening paragraph: the models' sizes and the training and scoring set-up."""
    report.text(
        f"Seed {seed}. VMT: latent {settings.latent_dim}, encoder d_model {settings.d_model} × {settings.n_layers} "
        f"layers, networks {settings.hidden_dim} wide, {settings.posterior} posterior; AdamW lr {settings.lr}, "
        f"batch {settings.batch_size} windows, KL warm-up {settings.kl_warmup_steps} steps, free bits "
        f"{settings.free_bits}, {'half-window overlap' if settings.overlap else 'no overlap'}; "
        f"intra-op threads: the process's ({torch.get_num_threads()} here) for the Transformers, at most "
        f"{MAX_DEFAULT_THREADS} of them for the VMT runs (the engine's cap). Held-out numbers use "
        f"{settings.eval_samples} posterior path(s) per window, windows chained by the carry (or not, for 'no carry')."
        + (" **Quick mode is a smoke test**: a few steps per model check that every cell trains and is scored; "
           "the models are far from converged, so the comparisons (carry on or off, K = 10 against K = 100, VMT "
           "against the windowed Transformer) can come out either way and are not the experiment's result: run it "
           "without --quick for those." if quick else "")
    )


def linear_gaussian_part(
    report: ExperimentReport, settings: VMTSettings, seed: int, log: Callable[[str], None]
) -> dict:
    """Part 1 (``linear_gaussian_cell``) with its table, final gaps and figure; returns the cell."""
    log(f"[{NAME}] part 1: linear-Gaussian state-space model")
    runs = report.out_dir / "runs"
    lg = report.cached(f"linear_gaussian_seed={seed}", lambda: linear_gaussian_cell(settings, seed, runs, log),
                       depends_on=_cell_identity(settings, "lg", "vmt"))
    columns = ["model", "step", "ELBO", *(f"IW K={k}" for k in settings.lg_iw_samples), "exact", "KL"]
    rows = []
    for kind, record in lg["models"].items():
        for step, values in zip(record["steps"], record["evaluations"], strict=True):
            rows.append([{"learned": "VMT, learned P", "true_p": "VMT, true P"}[kind], step, values["elbo"],
                         *(values[f"iw_{k}"] for k in settings.lg_iw_samples), lg["exact"], values["kl"]])  # fmt: skip
    seconds = ", ".join(f"{kind} {record['seconds']:.0f}s" for kind, record in lg["models"].items())
    caption = (
        "Part 1. Linear-Gaussian state-space model (2-d rotating state, 1-d observations): held-out log-likelihood "
        f"bounds per step (nats, higher is tighter) against the exact Kalman value, windows of {settings.lg_window} "
        f"chained by the carry over {settings.lg_val_documents} documents of {settings.lg_doc_len} steps. Must "
        "hold, up to Monte-Carlo noise: IW K=1 ≈ ELBO ≤ IW K=10 ≤ IW K=100 ≤ the model's own log-likelihood, "
        "which for the true P is the exact value (and for a learned P lies below it in expectation over data). "
        f"Training time: {seconds}."
    )
    report.table(columns, rows, caption=caption)
    finals = []
    for kind, record in lg["models"].items():
        last = record["evaluations"][-1]
        gaps = ", ".join(f"IW K={k} {lg['exact'] - last[f'iw_{k}']:.4f}" for k in settings.lg_iw_samples)
        finals.append(f"{kind.replace('_', ' ')}: ELBO {lg['exact'] - last['elbo']:.4f}, {gaps}")
    report.text("Gap to the exact log-likelihood at the end of training (nats per step): " + "; ".join(finals) + ".")
    linear_gaussian_figure(report, lg, settings)
    return lg


def sticky_hmm_part(
    report: ExperimentReport, settings: VMTSettings, seed: int, log: Callable[[str], None]
) -> list[dict]:
    """Part 2 (``memory_cell`` per window and model) with its table, comparison line and figure; returns the cells."""
    # deferred: plots import matplotlib
    from markovformer.plots.experiments import plot_panels

    log(f"[{NAME}] part 2: sticky HMM, windows {list(settings.hmm_windows)}")
    memory = [report.cached(f"hmm_W={w}_{m}_seed={seed}", partial(memory_cell, m, w, settings, seed,
                            report.out_dir / "runs", log), depends_on=_cell_identity(settings, "hmm", m))
              for w in settings.hmm_windows for m in MODELS]  # fmt: skip
    caption = (
        "Part 2. Sticky HMM (4 states staying with probability 0.98, 16 symbols): held-out loss per token (nats; "
        "the VMT's is −ELBO, an upper bound on its own negative log-likelihood, and −IW the tighter importance-"
        "weighted one). *restart floor* is the exact loss "
        "of a model restarted at every window, the floor for 'no carry' (the Transformer sees one token more); "
        f"*exact floor* the floor with unbounded memory; the context-free marginal entropy is "
        f"{memory[0]['marginal']:.4f}."
    )
    report.table(*sequence_table(memory, "nats/token", settings.iw_samples), caption=caption)
    report.text(comparison(memory, "nats/token"))
    panel = loss_panel(memory, "sticky HMM", {"exact floor": memory[0]["exact"], "marginal": memory[0]["marginal"]},
                        restart=True)  # fmt: skip
    figure = plot_panels([panel], report.out_dir / "hmm.png", "window length", "nats per token", log_x=True)
    report.figure(figure, "Sticky HMM: held-out loss against the window length, with the exact floors")
    return memory


def text_part(
    report: ExperimentReport, settings: VMTSettings, seed: int, log: Callable[[str], None]
) -> list[dict] | None:
    """Part 3 (``text_cell`` per window and model) with its table, comparison line and figure; returns the cells,
    or None (with a log line and a sentence in the report) when there is no text file."""
    # deferred: plots import matplotlib
    from markovformer.plots.experiments import plot_panels

    text_file = _locate(settings.text_path)
    if text_file is None:
        where = settings.text_path or "Tiny Shakespeare (markovformer data prepare tiny-shakespeare)"
        log(f"[{NAME}] part 3 skipped: no text file {where} (set text_path=...)")
        report.text(f"Part 3 skipped: no text file `{where}`.")
        return None
    settings = replace(settings, text_path=str(text_file))
    log(f"[{NAME}] part 3: {settings.text_path}, windows {list(settings.text_windows)}")
    text_sha256 = file_digest(text_file)  # the same bytes, wherever the file is
    text = [report.cached(f"text_W={w}_{m}_seed={seed}", partial(text_cell, m, w, settings, seed,
                          report.out_dir / "runs", log),
                          depends_on={**_cell_identity(settings, "text", m), "text_sha256": text_sha256})
            for w in settings.text_windows for m in MODELS]  # fmt: skip
    for cell in text:
        cell["bits_per_char"] = cell["loss"] / math.log(2)
    caption = (
        f"Part 3. `{settings.text_path}`, characters ({text[0]['vocab_size']} symbols), {settings.text_steps} "
        f"steps per model, {text[0]['val_chars']:,} held-out characters: bits per character (VMT: −ELBO / ln 2)."
    )
    report.table(*sequence_table(text, "bits/char", settings.iw_samples, scale=1 / math.log(2)), caption=caption)
    report.text(comparison(text, "bits/char", scale=1 / math.log(2)))
    panel = loss_panel(text, Path(settings.text_path).name, {}, scale=1 / math.log(2))
    figure = plot_panels([panel], report.out_dir / "text.png", "window length", "bits per character", log_x=True)
    report.figure(figure, "Text: held-out bits per character against the window length")
    return text


def _locate(path: str) -> Path | None:
    """The text file (``path``, or Tiny Shakespeare when it is empty); None when there is none."""

    try:
        return find_tiny_shakespeare(path or None)
    except ValueError:
        return None


__all__ = ["NAME", "QUICK", "SUMMARY", "VMTSettings", "run", "text_data", "transformer_model", "vmt_model"]

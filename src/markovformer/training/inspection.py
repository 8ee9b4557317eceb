"""`markovformer inspect`: a run's figures (curves, strengths, gates, attention by lag, attention maps, and what the
positional kinds learned: ``training.learned_positions``) and one HTML page that puts them under the run's config,
model, training time and results, with their units and references.

The model reads bounded prefixes of the validation sequences only (``EXAMPLE_LENGTH``, and the profile's
``lag_profiles.PROFILE_LENGTH``), so the attention maps it hands out stay the same size however long the run's
sequences are; the captions say what was read. The report is written as one transaction (``plots.replace_folder``)."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import math
import re
from pathlib import Path

import torch

from markovformer.advice import said_as
from markovformer.atomic import WRITE_ERRORS
from markovformer.data.collate import collate
from markovformer.data.readers.tokenizer import load_tokenizer
from markovformer.layers.hybrid_attention import markov_head_count
from markovformer.plots import (
    plot_attention_lag_profile,
    plot_attention_maps,
    plot_order_gates,
    plot_training_curves,
    plot_transition_strengths,
    replace_folder,
    write_html_report,
)
from markovformer.plots.curves import BLEU, RESCALED_LOSS_FAMILIES, metric_family, read_metric_series
from markovformer.plots.markov import weight_scale
from markovformer.training.build import build_data
from markovformer.training.data_record import read_data_info
from markovformer.training.durations import format_duration
from markovformer.training.evaluation import recorded_data_files, warn_of_changed_files
from markovformer.training.init_from import started_from_line
from markovformer.training.isolation import built_on_the_cpu
from markovformer.training.lag_profiles import example_prefix, lag_profiles, profile_caption
from markovformer.training.lag_report import CONVENTION, biased_lags, chain_attention_lags, describe_chain
from markovformer.training.learned_positions import ReadPositions, position_figures
from markovformer.training.run_dir import (
    RESOLVED_CONFIG,
    load_trained_run,
    read_final_metrics,
    read_started_from,
    resume_advice,
)
from markovformer.training.run_report import (
    continuous_source,
    document_log_likelihood,
    entropy_rate_gap,
    markov_layers,
    parameter_summary,
)
from markovformer.training.tasks import TASKS, GenerationRequest, Task, build_task, model_inputs
from markovformer.training.tasks.base import packs_documents

EXAMPLE_LENGTH = 48  # positions shown in the gate and attention figures: long enough to see lags, short to read
STRUCTURE_OPTIONS = ("scope", "window", "max_order", "gate")  # a layer's options the report's summary names



def _tokens(ids: list[int], run_dir: Path) -> list[str]:
    if (run_dir / "tokenizer").is_dir():
        tokenizer = load_tokenizer(run_dir / "tokenizer")
        return [repr(tokenizer.decode([i]))[1:-1] or "·" for i in ids]
    return [str(i) for i in ids]


def token_rate(results: dict) -> str:
    """The tokens of a run's metrics.json and their rate over its training steps' own seconds (the progress lines'
    clock: ``train_seconds`` also holds the validations and the start-up); "" for a run that did not count them."""
    tokens, step_seconds = results.get("train_tokens"), results.get("train_step_seconds")
    if not tokens:
        return ""
    if step_seconds is None or step_seconds <= 0:  # a run from before the steps' own seconds were kept
        return f", {tokens:,} tokens"
    rate = tokens / step_seconds
    return f", {tokens:,} tokens ({rate:,.0f} a second over its {format_duration(step_seconds)} of training steps)"


def run_summary(config, model, run_dir: Path, results: dict, data_info: dict) -> dict[str, object]:
    """The table at the top of the report: what was trained, on what, for how long, and how well, with units."""
    model_config = model.config
    summary: dict[str, object] = {"run": str(run_dir), "task": config.task, "model": type(model).__name__,
                                  "parameters": parameter_summary(model)}  # fmt: skip
    if model_config.layer_kinds():
        summary["attention kind per layer"] = ", ".join(model_config.layer_kinds())
    shape = [f"{name} {getattr(model_config, name)}" for name in ("d_model", "n_layers", "n_heads")
             if hasattr(model_config, name)]  # fmt: skip
    if shape:
        summary["shape"] = ", ".join(shape)
    structure = markov_structure(model_config)
    if structure:
        summary["Markov structure"] = structure
    started = read_started_from(run_dir)  # a fine-tuning run's source: the weights taken, whatever became of it
    if started is not None:
        summary["started from"] = started_from_line(started)
    summary["data"] = config.data.get("source", "?")
    if data_info.get("true_lags"):
        summary["chain"] = describe_chain(data_info["true_lags"])
        summary["lag convention"] = CONVENTION
    if "steps" in results:
        seconds = results.get("train_seconds", float("nan"))
        summary["training"] = f"{results['steps']:,} steps in {format_duration(seconds)}{token_rate(results)}"
    val = results.get("val", {})
    unit = TASKS[config.task].loss_unit
    names = TASKS[config.task].metric_labels  # the task's own names where "loss" would not say what it is
    for key, value in val.items():
        label = {"loss": f"validation loss ({unit})", "bits_per_token": "validation bits per token",
                 "bits_per_character": "validation bits per character",
                 "perplexity": "validation perplexity", "bleu": f"validation {BLEU}"}.get(
                     key, f"validation {key.replace('_', ' ')}")  # fmt: skip
        if re.fullmatch(r"loss_n\d+", key):  # an n-gram model scored at order n (task_options.orders)
            label = f"validation loss at order n = {key[6:]} ({unit})"
        if key in names:
            label = f"validation {names[key]} (val/{key}, {unit.split('/')[0]})"
        if key == "iw_bound" and "iw_samples" in results:  # a VMT's: the bound depends on its number of samples
            label = f"validation importance-weighted bound, K = {results['iw_samples']} (val/iw_bound, nats/token)"
        summary[label] = value
    reference = results.get("reference", {})
    if "entropy_rate" in reference:
        summary[f"entropy rate ({unit}): the lowest expected loss of any model"] = reference["entropy_rate"]
        if "loss" in val:
            summary["gap to the entropy rate"] = entropy_rate_gap(val["loss"], reference["entropy_rate"],
                                                                  continuous_source(reference))  # fmt: skip
    if "oracle_val_loss" in reference:
        summary[f"true chain's loss on the validation sequences ({unit})"] = reference["oracle_val_loss"]
    if "unigram_entropy" in reference:
        summary[f"unigram entropy ({unit}): no context at all"] = reference["unigram_entropy"]
    exact = document_log_likelihood(reference, "val")
    if exact is not None:
        summary["exact log-likelihood of the validation documents (per token)"] = exact
    return summary


def markov_structure(model_config) -> str:
    """Scope, window, max_order and gate as the layers were built: once when every layer has the same, else per
    layer (``layers 0, 2: ...; layer 1: ...``). A layer's own entry (``attention: [{kind: markov, window: 8}]``)
    overrides the flat fields, so these are read from ``layer_specs()``; a family without per-layer specs has
    only its flat fields. "" when no layer has any of them; a split hybrid without a Markov head (floor(n_heads *
    markov_head_ratio) = 0) has none: its random-feature heads see every key."""
    if not hasattr(model_config, "layer_specs"):
        return _option_text(_flat_options(model_config))
    described = {index: _option_text(spec.options) for index, spec in enumerate(model_config.layer_specs())
                 if markov_head_count(model_config.n_heads, spec.options.get("markov_head_ratio", 1.0))}
    described = {index: text for index, text in described.items() if text}
    texts = list(dict.fromkeys(described.values()))
    if len(texts) == 1 and len(described) == model_config.n_layers:
        return texts[0]
    groups = [[index for index, text in described.items() if text == shared] for shared in texts]
    return "; ".join(f"layer{'s' if len(group) > 1 else ''} {', '.join(map(str, group))}: {described[group[0]]}"
                     for group in groups)  # fmt: skip


def _option_text(options: dict) -> str:
    """``scope local, window 8, max_order 6, gate linear``: those of ``STRUCTURE_OPTIONS`` that ``options`` sets."""
    return ", ".join(f"{name} {options[name]}" for name in STRUCTURE_OPTIONS if options.get(name) is not None)


def _flat_options(model_config) -> dict:
    """A family without per-layer specs: its flat fields stand for every layer's options."""
    return {name: getattr(model_config, name) for name in STRUCTURE_OPTIONS if hasattr(model_config, name)}


def loss_curve_names(task) -> dict[str, str]:
    """{column: legend label} of the loss panel's curves where the task (a ``Task`` class) computes different
    quantities in training and validation and names them (``train_loss_label``, ``metric_labels["loss"]``; the VMT:
    its training objective with the auxiliary terms against the -ELBO); {} where both are the one loss."""
    names = {}
    if task.train_loss_label != Task.train_loss_label:
        names["train/loss"] = f"train/loss: {task.train_loss_label}"
    if "loss" in task.metric_labels:
        names["val/loss"] = f"val/loss: {task.metric_labels['loss']}"
    return names


def curves_caption(task, lines: dict[str, float], label_smoothing: float = 0.0,
                   rescalings: tuple[str, ...] = ("bits_per_token", "perplexity")) -> str:  # fmt: skip
    """The caption of the training curves of a run of ``task`` (a ``Task`` class) with the floors ``lines``
    (``reference_lines``): the curves named by what they are (``loss_curve_names``), the floors only where there
    are some (a text run has none), and the rescalings of the loss the run logs (``rescaled_losses``; none for a
    classifier) said to be left out."""
    names = loss_curve_names(task)
    if names:  # training and validation compute different quantities: each curve named, no gap read off them
        what = (f"train/loss is the {task.train_loss_label}"
                f"{f' ({task.train_loss_note})' if task.train_loss_note else ''}, val/loss the "
                f"{task.metric_labels.get('loss', 'validation loss')}, both in {task.loss_unit}: two different "
                f"quantities, so the distance between them is no train-validation gap")  # fmt: skip
    else:
        what = f"loss in {task.loss_unit} (train and validation)"
    styles = "(dashed, then dotted, then dash-dot, named in the legend)"
    floors = (f"{'; the floors are' if names else ', with the floors as'} black lines {styles}" if lines else "")
    smoothed = (f"; the train loss is label-smoothed ({label_smoothing:g}), the validation loss is not, so they "
                f"differ by more than overfitting" if label_smoothing else "")  # fmt: skip
    words = [name.replace("_", " ") for name in rescalings]
    named = " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)
    rescaled = (f"; {named} {'are rescalings' if len(rescalings) > 1 else 'is a rescaling'} of the "
                f"{'validation ' if names else ''}loss (values in the table above)" if rescalings else "")  # fmt: skip
    return f"Training curves: {what}{floors}{rescaled}{smoothed}"


def rescaled_losses(metrics_csv: Path) -> tuple[str, ...]:
    """The rescalings of the loss (``RESCALED_LOSS_FAMILIES``) among the columns of the run's metrics CSV, which the
    curves leave out beside the loss: bits per token and perplexity for a language model, none for a classifier."""
    with metrics_csv.open(encoding="utf-8") as handle:
        families = {metric_family(column) for column in handle.readline().strip().split(",")}
    return tuple(family for family in RESCALED_LOSS_FAMILIES if family in families)


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


def bound_panels(config, reference: dict) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    """The titles and lines of a VMT's bound panels in the training curves: the importance-weighted bound named with
    the K it was logged with (the run's task_options.iw_samples; it rises with K), and the exact log-likelihood that
    both bounds approach from below (where the data has one). Empty for other runs."""
    samples = getattr(config.task_options, "iw_samples", None)
    titles = {"iw_bound": f"importance-weighted bound, K = {samples} (nats/token)"} if samples else {}
    exact = document_log_likelihood(reference, "val")
    if exact is None or not math.isfinite(exact):
        return titles, {}
    line = {"exact log-likelihood (validation)": exact}
    return titles, {"elbo": line, "iw_bound": line}


@built_on_the_cpu
def write_inspection_report(
    target: str | Path, layers: list[int] | None = None, out_dir: str | Path | None = None
) -> Path:
    """Write the figures of a trained run and their page into ``out_dir`` (default RUN_DIR/report, and for one
    checkpoint file RUN_DIR/report-STEM, which leaves the run's own report as it is) and return its index.html. The
    folder is replaced whole (``plots.replace_folder``): a failed or killed inspect leaves the previous report as it
    was, never a mix of old and new figures. Its refusals name ``layers`` and ``out_dir`` in the caller's words
    (``advice.said_as``)."""
    if layers is not None and not layers:  # `--layers` given without a value: drawing no map is no default
        raise ValueError(said_as("--layers: no layer given; name at least one (--layers 0 1), or leave --layers out",
                                 "layers=[]: no layer given; name at least one (layers=[0, 1]), or leave layers=None")
                         + " for the first two layers with attention maps")  # fmt: skip
    if layers is not None:
        layers = list(dict.fromkeys(layers))  # --layers 0 0 drew layer 0's maps twice
    config, model, run_dir, weights = load_trained_run(target)
    config = dataclasses.replace(config, data={**config.data, **recorded_data_files(run_dir, config.data, {})})
    default = "report" if Path(target).expanduser().is_dir() else f"report-{Path(target).stem}"
    out = Path(out_dir).expanduser() if out_dir is not None else run_dir / default  # '~': as the run's name
    try:
        index = replace_folder(out, lambda staging: _write_report(config, model, run_dir, staging, layers, weights))
    except OSError as error:  # a full disk, a read-only run: the report can go elsewhere
        if error.errno not in WRITE_ERRORS:
            raise
        again = said_as("run inspect again, or write the report elsewhere with --out FOLDER",
                        "call it again, or write the report elsewhere with out_dir=FOLDER")
        raise OSError(error.errno, f"{error.strerror}; {again}", error.filename) from error
    return out / index.name


def _write_report(config, model, run_dir: Path, out: Path, layers: list[int] | None, weights: dict) -> Path:
    """Every figure and the page into the folder ``out``; returns the page's path. The run's final metrics
    (metrics.json) are those of the weights shown only when they are the finished run's model (``weights``, from
    ``load_trained_run``): a checkpoint's or an unfinished run's report leaves them out."""
    metrics_path = run_dir / "metrics.json"
    data_info = read_data_info(run_dir)
    results = (read_final_metrics(run_dir) if weights["finished"] and metrics_path.is_file()
               else {"reference": data_info.get("reference", {})})  # fmt: skip
    figures = []
    marked = biased_lags(data_info["true_lags"]) if data_info.get("true_lags") else None
    chain_lags = chain_attention_lags(data_info["true_lags"]) if data_info.get("true_lags") else None

    csv = run_dir / "logs" / "metrics.csv"
    if csv.is_file():
        lines = reference_lines(results.get("reference", {}))
        task = TASKS[config.task]
        names = loss_curve_names(task)
        caption = curves_caption(task, lines, config.trainer.label_smoothing, rescaled_losses(csv))
        logged = max(max(steps) for steps, _ in read_metric_series(csv).values())
        if not weights["finished"] and logged > weights["step"]:  # a checkpoint's, or a killed run's last one
            caption += (f"; the log runs on to step {logged:,}, past step {weights['step']:,}, whose weights the "
                        f"figures show")  # fmt: skip
        title = f"{' and '.join(names.values())}: two quantities" if names else None
        titles, bound_lines = bound_panels(config, results.get("reference", {}))
        figures.append((caption, plot_training_curves(csv, out / "curves.png", reference_lines=lines or None,
                                                      curve_labels=names, loss_title=title, panel_titles=titles,
                                                      panel_lines=bound_lines)))  # fmt: skip

    strengths = model.transition_strengths()
    if strengths:
        outlined = "; outlined: the chain's lags" if marked else ""  # a run on text or other data has none
        caption = f"Learned transition strengths T per layer, head and lag ({CONVENTION}{outlined})"
        figures.append((caption, plot_transition_strengths(strengths, out / "transition_strengths.png", marked,
                                                           layer_indices=markov_layers(model))))  # fmt: skip

    drawn = "return_gates" in inspect.signature(model.forward).parameters
    if drawn:
        figures += _gate_and_attention_figures(config, model, run_dir, out, layers, marked, chain_lags)
    elif layers:
        raise ValueError(f"{said_as('--layers', f'layers={layers}')}: {type(model).__name__} has no attention layers "
                         f"to draw")  # fmt: skip
    summary = run_summary(config, model, run_dir, results, data_info)
    if not drawn:  # a MAT, VMT or Scan Markov run: say why the report holds no more than its curves
        summary["order gates and attention figures"] = (f"none: {type(model).__name__} hands out no attention "
                                                         f"weights or gates")  # fmt: skip
    if not csv.is_file():  # a run stopped before its first log row: say why the curves are missing
        summary["training curves"] = (f"none yet: no row in {csv.relative_to(run_dir).as_posix()} (it takes a "
                                      f"training row every N steps, N = min(trainer.log_every, 50) = "
                                      f"{config.trainer.log_rows_every}, and one at each validation)")  # fmt: skip
    unfinished = ("" if weights.get("run_finished", True) else
                  f"; the run is unfinished: still training, or stopped ({resume_advice(run_dir, command=True)} "
                  f"continues a stopped one)")  # fmt: skip
    evaluated = f"evaluate({str(run_dir / weights['source'])!r})"
    summary["weights shown"] = (f"the final model, step {weights['step']:,}" if weights["finished"] else
                                f"{weights['source']} at step {weights['step']:,} (its validation numbers: "
                                f"{said_as('markovformer eval on it', evaluated)}{unfinished})")  # fmt: skip
    config_file = run_dir / RESOLVED_CONFIG
    config_text = config_file.read_text(encoding="utf-8") if config_file.is_file() else None
    title = f"markovformer run {run_dir.resolve().name}"  # `inspect .`: the name of "." is empty
    return write_html_report(out, title, figures, summary, config_text=config_text,
                             sample=generated_sample(config, model, run_dir))  # fmt: skip


def generated_sample(config, model, run_dir: Path) -> tuple[str, str] | None:
    """(heading, text) of a text run's sample for its report: what ``markovformer generate RUN --prompt ''`` prints
    (200 tokens from an empty prompt, temperature 1, seed 0); for a run of packed documents, whose model cannot start
    a document (``tasks.base.refuse_packed_start``), what ``--prompt P`` prints, P the first token of a document of
    the validation split (the empty prompt's sample was nonsense: ' the and is to that' where every document starts
    with a name, or nothing when it drew <eod> at once). None for a run without a tokenizer or whose task continues
    no prompt."""
    if not (Path(run_dir) / "tokenizer").is_dir():
        return None
    task = build_task(config.task, config.trainer, options=config.task_options)
    from markovformer.models.generation import GenerationConfig

    prompt, start = "", "an empty prompt"
    tokenizer = load_tokenizer(Path(run_dir) / "tokenizer")
    if getattr(tokenizer, "end_of_document_id", None) is not None and packs_documents(run_dir):
        first = validation_document_start(config, run_dir)
        if first is None:
            return None
        prompt = tokenizer.decode([first])
        start = f"{prompt!r}, the first token of a validation document (a packed run cannot start one from nothing)"
    request = GenerationRequest(prompt=prompt, generation=GenerationConfig(max_new_tokens=200, do_sample=True))
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the note on how an empty prompt starts
            text = "\n".join(task.generate(model.eval(), run_dir, request))
    except ValueError:  # e.g. a classification run: nothing to continue
        return None
    heading = (f"Generated sample ({request.generation.max_new_tokens} tokens from {start}, temperature "
               f"{request.generation.temperature:g}, seed {request.seed}: markovformer generate RUN --prompt "
               f"{prompt!r})")  # fmt: skip
    return heading, text


def validation_document_start(config, run_dir: Path, examples: int = 64) -> int | None:
    """The first token of the first document that begins inside one of the first ``examples`` validation examples
    of a packed run (a position 0 after another position: an example's own start may be inside a document)."""
    validation = build_data(config, run_dir).val
    for index in range(min(len(validation), examples)):
        example = validation[index]
        starts = (example["position_ids"][1:] == 0).nonzero()
        if len(starts):
            return int(example["input_ids"][int(starts[0]) + 1])
    return None


def _gate_and_attention_figures(
    config, model, run_dir: Path, out: Path, layers: list[int] | None, marked: tuple[int, ...] | None,
    chain_lags: tuple[int, ...] | None,
) -> list[tuple]:
    """Order gates and attention maps of the first validation example's first ``EXAMPLE_LENGTH`` positions and the
    attention-by-lag profile of the first validation examples, as (caption, path) pairs."""
    figures = []
    bundle = build_data(config, run_dir)
    warn_of_changed_files(run_dir, bundle, "the report's figures read")
    validation = bundle.val
    batch = collate([example_prefix(validation[0], EXAMPLE_LENGTH)])
    inputs = {k: v for k, v in model_inputs(batch).items() if k != "labels"}
    model.eval()
    with torch.no_grad():
        output = model(**inputs, return_gates=True, return_weights=True)
    ids = batch["input_ids"][0].tolist() if "input_ids" in batch else list(range(batch["attention_mask"].shape[1]))
    tokens = _tokens(ids, run_dir) if "input_ids" in batch else [str(i) for i in ids]
    if getattr(model, "cls", None) is not None:  # pooling='cls': the blocks read a vector before the first token
        tokens = ["[CLS]", *tokens]
    if any(g for g in output.gates or []):
        figure = plot_order_gates(output.gates, tokens, out / "order_gates.png", true_lags=marked,
                                  null_slot=gate_null_slots(model, len(output.gates)))  # fmt: skip
        figures.append((order_gates_caption(model, len(ids), marked), figure))
    # a layer whose kind mixes without a T x T map (random features, scan, S4D, H3, Hyena, RWKV, GRU) hands out None
    with_maps = [layer for layer, weights in enumerate(output.attentions) if weights is not None]
    chosen = layers if layers is not None else with_maps[:2]
    bad = [layer for layer in chosen if not 0 <= layer < len(output.attentions)]
    if bad:
        named = said_as(f"--layers {bad[0]}", f"layers={layers}: {bad[0]}")
        raise ValueError(f"{named} is not a layer of this model (it has {len(output.attentions)})")
    mapless = [layer for layer in chosen if output.attentions[layer] is None]
    if mapless:
        kind = model.config.layer_kinds()[mapless[0]]
        named = said_as(f"--layers {mapless[0]}: that layer", f"layers={layers}: layer {mapless[0]}")
        raise ValueError(f"{named} ({kind}) has no attention map; the layers with one: {with_maps or 'none'}")
    with ReadPositions(model) as read:  # FoX's gates and CoPE's queries, read on the profile's own passes
        profile = lag_profiles(model, validation, chosen)
    labels = head_labels(model.config, output.attentions)
    if profile.profiles:
        figures.append((profile_caption(profile, chain_lags),
                        plot_attention_lag_profile(profile.profiles, out / "attention_by_lag.png", chain_lags,
                                                   head_labels=labels, future=profile.future or None)))  # fmt: skip
    figures += position_figures(config, model, read, out, profile.sequences, profile.length,
                                profile.length if profile.cut else None)  # fmt: skip
    if chosen:
        scale = weight_scale([output.attentions[layer][0].float().numpy() for layer in chosen])
        kinds = model.config.layer_kinds() if hasattr(model.config, "layer_kinds") else []
        signed = "" if scale.probabilities else (
            f"; {', '.join(sorted({kinds[layer] for layer in chosen if layer < len(kinds)}))} weights: signed, not "
            "probabilities")  # fmt: skip
        caption = (f"Attention {scale.noun} of layers {chosen} on the same {len(ids)} tokens (queries down, keys "
                   f"across{signed})")  # fmt: skip
        figures.append((caption, plot_attention_maps(output.attentions, chosen, out / "attention.png", tokens=tokens,
                                                     head_labels=labels)))  # fmt: skip
    return figures


def order_gates_caption(model, length: int, marked: tuple[int, ...] | None) -> str:
    """The order gates figure's caption: the null slot named only where the gated layers have one (``gate_null``)."""
    nulls = [bias.gate_null for bias in getattr(model, "markov_biases", list)() if bias.gate != "none"]
    null = " and the null slot" if all(nulls) else " and, in layers with one, the null slot" if any(nulls) else ""
    starred = "; *: the chain's lags" if marked else ""
    return (f"Order gates over the first {length} tokens of a validation sequence: per head, the probability of each "
            f"lag{null} ({CONVENTION}{starred})")


def gate_null_slots(model, n_layers: int) -> list[bool]:
    """Per model layer, whether its gates' last slot is the null slot: each Markov layer's own ``gate_null``
    (``attention: [{kind: markov, gate_null: false}, markov]`` mixes both), True for the others (no gates)."""
    own = {layer: bias.gate_null for layer, bias in zip(markov_layers(model), model.markov_biases(), strict=True)}
    return [own.get(layer, True) for layer in range(n_layers)]


def head_labels(model_config, attentions: list[torch.Tensor | None]) -> dict[int, list[str]]:
    """{layer: a label per map} for the hybrid layers, whose maps are not all alike: hybrid_parallel hands out 2H
    maps (B, 2H, T, T), its H Markov maps then its H random-feature maps; hybrid_split's first heads are Markov,
    the rest random-feature. Other layers' maps are plain heads (no entry)."""
    specs = model_config.layer_specs() if hasattr(model_config, "layer_specs") else []
    labels = {}
    for layer, (spec, weights) in enumerate(zip(specs, attentions, strict=False)):
        if weights is None:
            continue
        maps = weights.shape[1]
        if spec.kind == "hybrid_parallel":
            labels[layer] = [f"head {head} ({part})" for part in ("Markov", "random features")
                             for head in range(maps // 2)]  # fmt: skip
        elif spec.kind == "hybrid_split":
            markov_heads = markov_head_count(maps, spec.options["markov_head_ratio"])
            labels[layer] = [f"head {head} ({'Markov' if head < markov_heads else 'random features'})"
                             for head in range(maps)]  # fmt: skip
    return labels

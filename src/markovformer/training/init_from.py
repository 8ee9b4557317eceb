"""Fine-tuning: a new run's model starts from the weights of a trained run or a saved model directory.

``init_from: RUN_OR_MODEL_DIR`` (a run config key) names a run directory (its final model/, else its last
checkpoint, both checked against the run's fingerprint), one checkpoint file of a run (checkpoints/step-NNNNNN.ckpt,
read with its run as ``eval`` reads it) or a folder written by ``save_pretrained`` (config.json + model.safetensors,
or transformers' shards of it: ``WEIGHTS_INDEX_NAME``; safetensors only). Every tensor must match the new model's name
and shape (but ALiBi's slopes: weights saved before they were saved lack them and keep their own,
``alibi_slopes_of(model, old=True)``; another kind's have none, and an ALiBi model starts with fresh ones:
``saved_alibi_layers``);
a changed head (other labels) or vocabulary is refused with the names that differ, unless ``init_from_skip`` names
them: ``head`` (the tensors outside the backbone ``model.``: lm_head, classifier, ...; refused for a model without
one, where it would be every tensor), ``embeddings`` (the tensors a vocabulary indexes, a row per token id: those of
the modules the model names, ``vocabulary_tensors``) or any tensor-name prefix. Skipped tensors keep the new model's
fresh initialisation. The run keeps the record of what it took (``initialise_from``) in its environment.json, which a
later change to the source (an extended run, a replaced last.ckpt) leaves as it was.

The new run encodes its data with the source's tokenizer when it keeps one (``tokenizer_source``): a tokenizer
fitted again on other text, or with other options, has as many ids (a BPE of a fixed size, often an alphabet) that
mean other tokens, and the embeddings would load without an error for the wrong ones.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import torch

from markovformer.data.readers.tokenizer import load_tokenizer
from markovformer.data.sources import DATA_SOURCES
from markovformer.layers.decay_attention import alibi_slopes_of, block_of
from markovformer.models.markovian_transformer.config import saved_alibi_blocks
from markovformer.models.pretrained import CONFIG_NAME, PreTrainedModel
from markovformer.models.saved_weights import (
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
    read_weights_folder,
    tensors_sha256,
    tied_names,
    weights_file,
)
from markovformer.strict_json import read_json_object
from markovformer.training.build import build_model, saved_tokenizer
from markovformer.training.run_config import RunConfig, load_yaml
from markovformer.training.run_dir import load_trained_run, run_of_checkpoint, weights_described
from markovformer.training.trainer_config import ConfigError

SKIP_GROUPS = {"head": "the task head (tensors outside model.)",
               "embeddings": "the tensors a vocabulary indexes (the token embedding, the outputs over the vocabulary)"}


def vocabulary_tensors(model: PreTrainedModel) -> set[str]:
    """The tensor names of ``model`` with a row per token id, the group ``embeddings``: those of the modules it names
    (``vocabulary_modules``; a weight tied to one of them under both its names)."""
    modules = tuple(f"{name}." for name in model.vocabulary_modules())
    return {name for name in model.state_dict() if name.startswith(modules)}


def skipped(name: str, skip: list[str] | tuple[str, ...], vocabulary: set[str]) -> bool:
    """Whether tensor ``name`` is left out by the ``init_from_skip`` entries ``skip``; ``vocabulary``: the model's
    ``vocabulary_tensors``."""
    for entry in skip:
        if entry == "head" and not name.startswith("model."):
            return True
        if entry == "embeddings" and name in vocabulary:
            return True
        if entry not in SKIP_GROUPS and name.startswith(entry):
            return True
    return False


def model_groups(own: dict, vocabulary: set[str]) -> tuple[str, ...]:
    """The groups of ``SKIP_GROUPS`` a model (its state dict ``own``, its ``vocabulary_tensors``) takes, those that
    name some tensor but not every one: ``head`` only with a backbone (model.), ``embeddings`` only with a row per
    token id (not a model of feature frames). The refusals and advice name only these."""
    return tuple(group for group in SKIP_GROUPS
                 if 0 < sum(skipped(name, [group], vocabulary) for name in own) < len(own))  # fmt: skip


def takes_token_rows(model: PreTrainedModel, skip: list[str] | tuple[str, ...]) -> bool:
    """Whether ``initialise_from`` with ``skip`` takes into ``model`` a tensor with a row per token id
    (``vocabulary_tensors``), skipped by the group ``embeddings`` or by name. Only then do the new run's ids need to
    mean the source's tokens (a position table is no such tensor)."""
    vocabulary = vocabulary_tensors(model)
    return any(not skipped(name, skip, vocabulary) for name in vocabulary)


def tokenizer_source(config: RunConfig) -> Path | None:
    """The run or saved model ``config.init_from`` when its tokenizer is the one the new run must encode with: it
    keeps one and the run takes a tensor with a row per token id from it (``takes_token_rows``: ``init_from_skip``
    leaves one, be it named by the group ``embeddings`` or by tensor names); else the run fits its own. ConfigError
    when the run's data asks for another kind of tokenizer (char, bpe) than the one the weights were trained on, or
    sets another ``vocab_size`` or ``fit_bytes`` than a source run fitted it with (they would go unused)."""
    init_from, data = config.init_from, config.data
    own_tokenizer = f"init_from_skip: [{', '.join([*config.init_from_skip, 'embeddings'])}]"  # the rows per token id
    source = checkpoint_run(Path(init_from)) or Path(init_from)  # a checkpoint's tokenizer: its run's
    kept = saved_tokenizer(source) if source.is_dir() else None
    if kept is None:
        return None
    tokenizer = load_tokenizer(kept)
    # the run's model, its weights never made (any vocabulary size names the same tensors), in a fork of the CPU's
    # random stream: random-feature kinds draw their projections on the CPU, which would shift the run's own draws
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        model = build_model(config, {"vocab_size": config.model.get("vocab_size") or tokenizer.vocab_size})
    if not takes_token_rows(model, config.init_from_skip):
        return None
    kind, wanted = tokenizer.kind, data.get("tokenizer")
    if wanted is not None and wanted != kind:
        raise ConfigError(f"init_from={init_from!r} was trained on a {kind} tokenizer, and data.tokenizer={wanted!r}: "
                          f"its embeddings are for the {kind} tokenizer's ids; keep data.tokenizer={kind!r}, or "
                          f"start them fresh with {own_tokenizer}")  # fmt: skip
    config = source / "config.yaml"  # a run's config; a saved model directory records no data options
    theirs = (load_yaml(config).get("data") or {}) if config.is_file() else {}
    if theirs.get("source") not in DATA_SOURCES:
        return source
    defaults = {field.name: field.default for field in dataclasses.fields(DATA_SOURCES[theirs["source"]])}
    for key in ("vocab_size", "fit_bytes") if kind == "bpe" else ("vocab_size",):  # char reads all its text
        fitted_with = theirs.get(key, defaults.get(key))
        if data.get(key) is not None and data[key] != fitted_with:
            same = "null" if fitted_with is None else f"{fitted_with!r} (or null)"
            raise ConfigError(f"data.{key}={data[key]!r}: this run encodes with the tokenizer of init_from="
                              f"{init_from!r} ({kept}, fitted with data.{key}={fitted_with!r}), the ids its weights "
                              f"are for, so data.{key} would go unused; set it to {same}, or fit a new tokenizer "
                              f"with {own_tokenizer}")  # fmt: skip
    return source


def checkpoint_run(source: Path) -> Path | None:
    """The run directory of ``source`` when it is a checkpoint file (RUN/checkpoints/NAME.ckpt), else None."""
    return run_of_checkpoint(source) if source.is_file() and source.suffix == ".ckpt" else None


def read_weights(source: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """The weights in a run directory or a saved model directory (see the module docstring), and which they are:
    ``file`` (the resolved path of the file read), ``step`` (a run's; None for a saved model directory) and ``read``
    (a run's words for them: its final model/ or the checkpoint it fell back to, and their step; "" else)."""
    if source.is_file() and checkpoint_run(source) is None:
        raise ConfigError(f"init_from={str(source)!r} is a file but not a checkpoint (.ckpt): give a run directory, "
                          f"a checkpoint file of a run or a saved model directory")  # fmt: skip
    if not source.exists():
        raise ConfigError(f"init_from={str(source)!r}: no such run or model directory, or checkpoint file")
    if source.is_file() or (source / "config.yaml").is_file():  # a run: the same loading and checks as eval
        loaded = load_trained_run(source)
        finished = loaded.weights["finished"]
        file = weights_file(loaded.run_dir / "model") if finished else loaded.run_dir / loaded.weights["source"]
        which = {"file": str(file.resolve()), "step": loaded.weights["step"], "read": weights_described(loaded.weights)}
        return loaded.model.state_dict(), which
    weights = weights_file(source)
    if weights is None:
        raise ConfigError(f"init_from={str(source)!r} is neither a run directory (config.yaml) nor a saved model "
                          f"directory ({WEIGHTS_NAME}, or {WEIGHTS_INDEX_NAME} and its shards)")  # fmt: skip
    try:
        stored = read_weights_folder(source)
    except ValueError as error:
        raise ConfigError(f"init_from={str(source)!r}: {error}") from None
    return stored, {"file": str(weights.resolve()), "step": None, "read": ""}


def _check_tied_agree(taken: dict, tied: dict[str, str], source: Path) -> None:
    """ConfigError when the model (its ``tied_names``: ``tied``) ties tensors (one weight under two names:
    tie_word_embeddings) that the source holds apart with different values: both would be loaded into the one
    weight, the last name's winning (the embedding became the source's output head)."""
    by_weight: dict[str, list[str]] = {}
    for name in taken:
        by_weight.setdefault(tied.get(name, name), []).append(name)
    for names in by_weight.values():
        first, *others = names
        for other in others:
            if taken[first].shape == taken[other].shape and not torch.equal(taken[first], taken[other]):
                raise ConfigError(f"init_from={str(source)!r} holds {first} and {other} apart with other values, and "
                                  f"this model ties them (one weight: model.tie_word_embeddings); untie it, or leave "
                                  f"one out with init_from_skip")  # fmt: skip


def _with_tied_names(names: list[str], own: dict, tied: dict[str, str]) -> list[str]:
    """``names`` and the other names of the model (its state dict ``own``, its ``tied_names``: ``tied``) that tie a
    weight to one of them (tie_word_embeddings): skipping one name alone, the other still loads the weight."""
    weights = {tied.get(name, name) for name in names if name in own}
    return [*(name for name in names if name not in own), *(name for name in own if tied.get(name, name) in weights)]


def saved_alibi_layers(source: Path) -> set[int]:
    """The blocks that ``source``, a ``save_pretrained`` folder, makes ALiBi layers (``saved_alibi_blocks`` of its
    config.json); none for a run (its model, built from its config, holds its ALiBi layers' slopes)."""
    if not (source / CONFIG_NAME).is_file():
        return set()
    try:
        return saved_alibi_blocks(read_json_object(source / CONFIG_NAME, "a saved model's config"))
    except ValueError as error:
        raise ConfigError(f"init_from={str(source)!r}: {error}") from None


def initialise_from(model: PreTrainedModel, source: str | Path, skip: list[str] | tuple[str, ...]) -> dict:
    """Copy the weights of ``source`` into ``model`` except those ``skip`` names; ConfigError naming the tensors
    that differ (and the ``init_from_skip`` that would leave them out) unless all others match. Returns the record
    of what it took, kept in the run's environment.json: ``source`` as given and ``resolved``, which weights were
    read (``read_weights``: ``file``, ``step``, ``read``), ``tensors_sha256`` (of the tensors taken, as the source
    held them, a tied one under the first of its names), ``tensors_taken``, ``tensors_fresh`` and the
    ``init_from_skip`` entries."""
    source = Path(source)
    stored, which = read_weights(source)
    own, tied, vocabulary = model.state_dict(), tied_names(model), vocabulary_tensors(model)
    groups = model_groups(own, vocabulary)
    if "head" in skip and "head" not in groups:
        modules = sorted({name.split(".")[0] for name in own})
        raise ConfigError(f"init_from_skip entry 'head' names the tensors outside the backbone (model.), and "
                          f"{type(model).__name__} has no model. backbone: 'head' would start every tensor fresh; "
                          f"name tensor-name prefixes instead (its modules: {', '.join(modules)})")  # fmt: skip
    for entry in skip:  # a tensor only the source holds (a position table the model no longer has) may be named
        if not entry.strip():  # as a prefix, every name starts with it: nothing would be taken
            raise ConfigError(f"init_from_skip entry {entry!r} is empty: it would name every tensor as a prefix and "
                              f"start the whole model fresh; use {' or '.join(groups)} or a tensor-name "
                              f"prefix")  # fmt: skip
        if not any(skipped(name, [entry], vocabulary) for name in (*own, *stored)):
            raise ConfigError(f"init_from_skip entry {entry!r} names no tensor of the model or of init_from; use "
                              f"{' or '.join(groups)} or a tensor-name prefix")  # fmt: skip
    taken = {name: tensor for name, tensor in stored.items() if name in own and not skipped(name, skip, vocabulary)}
    weights = {tied.get(name, name) for name in taken}  # a tied weight saved once (safetensors) is loaded once
    unsaved = {name: slopes for name, slopes in alibi_slopes_of(model, old=True).items() if name not in stored}
    problems = [name for name in own if not skipped(name, skip, vocabulary) and name not in stored
                and name not in unsaved and tied.get(name, name) not in weights]  # fmt: skip
    problems += [name for name in stored if name not in own and not skipped(name, skip, vocabulary)]
    problems += [name for name, tensor in taken.items() if tuple(tensor.shape) != tuple(own[name].shape)]
    _check_tied_agree(taken, tied, source)
    if problems:
        shapes = "; ".join(f"{name} {list(stored[name].shape) if name in stored else 'missing'} -> "
                           f"{list(own[name].shape) if name in own else 'not in this model'}"
                           for name in problems[:3])  # fmt: skip
        # the fewest entries (at most 3, groups ahead of names on a tie) that start every differing tensor fresh and
        # no tensor that fits: groups that hold only differing ones (embeddings holds a language model's lm_head: no
        # head), and the differing tensors they leave named (a learned position table of another length); else the
        # fewest groups holding them all, though they start tensors that fit fresh too
        groupings = [chosen for size in range(len(groups) + 1)
                     for chosen in itertools.combinations(groups, size)]  # fmt: skip
        fitting = []  # (entries, names among them, entries)
        for chosen in groupings:
            if any(skipped(name, chosen, vocabulary) and name not in problems for name in taken):
                continue
            named = [name for name in _with_tied_names(problems, own, tied) if not skipped(name, chosen, vocabulary)]
            if len(chosen) + len(named) <= 3:
                fitting.append((len(chosen) + len(named), len(named), [*chosen, *named]))
        covering = [list(chosen) for chosen in groupings
                    if chosen and all(skipped(name, chosen, vocabulary) for name in problems)]  # fmt: skip
        entries = min(fitting)[2] if fitting else covering[0] if covering else None
        choice = f"; to start them fresh, add init_from_skip: [{', '.join(entries)}]" if entries else ""
        raise ConfigError(f"init_from={str(source)!r} does not fit this run's model: {len(problems)} tensors differ "
                          f"({shapes}){choice}")  # fmt: skip
    layers = saved_alibi_layers(source) if unsaved else set()  # the slopes a source of the old code computed with
    kept = {name: slopes for name, slopes in unsaved.items()
            if block_of(name) in layers and not skipped(name, skip, vocabulary)}  # fmt: skip
    model.load_state_dict({**own, **kept, **{name: tensor.to(own[name].dtype) for name, tensor in taken.items()}})
    return {"source": str(source), "resolved": str(source.resolve()), **which,
            "tensors_sha256": tensors_sha256(taken, tied), "tensors_taken": len(taken),
            "tensors_fresh": len(own) - len(taken), "init_from_skip": list(skip)}


def initialised_line(record: dict) -> str:
    """The line a fine-tuning run prints of what ``initialise_from`` took (its ``record``)."""
    which = f" ({record['read']})" if record["read"] else ""
    taken, fresh = record["tensors_taken"], record["tensors_fresh"]
    return (f"initialised from {record['source']}{which}: {taken} of {taken + fresh} tensors"
            + (f" ({fresh} left fresh by init_from_skip)" if fresh else ""))


def started_from_line(record: dict) -> str:
    """Where a fine-tuning run started, from its ``initialise_from`` record: "SOURCE at step S, tensors sha256 ...",
    SOURCE resolved (a saved model directory has no step), and the tensors init_from_skip left fresh."""
    step = f" at step {record['step']}" if record["step"] is not None else ""
    fresh = record["tensors_fresh"]
    skip = f" ({fresh} left fresh by init_from_skip: {', '.join(record['init_from_skip'])})" if fresh else ""
    return f"{record['resolved']}{step}, tensors sha256 {record['tensors_sha256']}{skip}"

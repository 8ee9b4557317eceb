"""What every task kind answers for the engine: the batch keys its model reads, the training batches and step, how
validation and ``eval`` score a batch, what ``generate`` does, and the extra state a checkpoint carries.

A task is built once per run (``tasks.build_task``) from the trainer options, the task's own options (its
``Options`` dataclass: a run's ``task_options:`` section), the data's info and tokenizer. The
Lightning module (``training.module``), the runner, ``eval`` and the CLI ask it; none of them branches on the task's
name. To add a task: subclass ``Task`` in a file of this package and add it to ``TASKS`` in ``tasks/__init__.py``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor, nn
from torch.utils.data import IterableDataset

from markovformer.advice import said_as
from markovformer.data.bundle import DataBundle, Split, example_lengths
from markovformer.data.collate import PAD_ID
from markovformer.data.readers.tokenizer import END_OF_DOCUMENT, load_tokenizer
from markovformer.models.generation import GenerationConfig
from markovformer.ops.losses import IGNORE_INDEX
from markovformer.training.batches import EpochBatches
from markovformer.training.data_record import read_data_record
from markovformer.training.trainer_config import ConfigError, TrainerConfig

if TYPE_CHECKING:  # the metrics are imported where scoring starts (``new_metrics``)
    from markovformer.training.metrics import LossMetric

MASKS = ("attention_mask", "src_mask", "tgt_mask")  # the keys whose ones are a batch's real (not padding) positions


def real_positions(batch: dict) -> int:
    """The positions a batch's model reads that are not padding: the ones of its masks (a translation pair's source
    and target both count), else every position of its ``input_ids`` or frame of its ``input_features``."""
    masks = [batch[key] for key in MASKS if isinstance(batch.get(key), Tensor)]
    if masks:
        return int(sum(int(mask.sum()) for mask in masks))
    for key, trailing in (("input_ids", 0), ("input_features", 1)):
        if isinstance(batch.get(key), Tensor):
            shape = batch[key].shape
            return int(torch.Size(shape[: len(shape) - trailing]).numel())
    return 0


MODEL_INPUTS = ("input_ids", "input_features", "attention_mask", "labels", "order", "position_ids",
                "src_ids", "src_mask", "tgt_ids", "tgt_mask")  # fmt: skip


def model_inputs(batch: dict) -> dict:
    """The batch entries a head's forward takes (a source may carry extra keys; a training batch may carry the
    ``order`` drawn for it)."""
    return {key: value for key, value in batch.items() if key in MODEL_INPUTS}


def forward_takes(model: nn.Module, argument: str) -> bool:
    """Whether ``model.forward`` has a parameter named ``argument`` (heads differ in the training options they take)."""
    return argument in inspect.signature(model.forward).parameters


def longest_input(split: Split) -> int:
    """The most positions an example of ``split`` gives the model (its ``input_ids`` or ``input_features``; 0 for
    an empty split or examples of other inputs, as sentence pairs)."""
    if len(split) == 0:
        return 0
    key = next((key for key in ("input_ids", "input_features") if key in split[0]), None)
    return 0 if key is None else max(example_lengths(split, key))


def check_inputs_fit(model: nn.Module, splits: dict[str, Split]) -> None:
    """ConfigError when an input of ``splits`` (name -> split) is longer than ``model`` reads (its
    ``longest_input``: learned positions' ``max_positions``), before any is scored, not as the model's bare
    "sequence length N exceeds max_positions" at the first batch that holds one, training's perhaps midway. The
    lengths are read only for a model with such a limit (a split built on demand is not read through otherwise)."""
    limit = getattr(model, "longest_input", None)
    if limit is None:
        return
    longest = {name: longest_input(split) for name, split in splits.items()}
    over = {name: length for name, length in longest.items() if length > limit}
    if over:
        max_positions = model.config.max_positions
        cls = f" (one is the [CLS] vector's: {limit} for the inputs)" if limit < max_positions else ""
        splits = ", ".join(f"{name} {length}" for name, length in over.items())
        needed = max(over.values()) + max_positions - limit
        raise ConfigError(f"model.max_positions={max_positions}{cls} is shorter than the data's longest inputs "
                          f"(tokens: {splits}): set model.max_positions >= {needed} or shorten the data "
                          "(data.seq_len, data.max_length)")  # fmt: skip


@dataclass(frozen=True)
class GenerationRequest:
    """What ``markovformer generate`` asks of a run: a prompt (or a file of sources), the decoding (one checked
    ``GenerationConfig``) and the seed of its draws."""

    prompt: str | None = None
    input: str | None = None
    generation: GenerationConfig = field(default_factory=lambda: GenerationConfig(max_new_tokens=200))
    seed: int = 0
    skip_unknown: bool = False  # drop prompt characters outside a character run's alphabet instead of refusing
    through_eod: bool = False  # a run with documents: sample past a document's end instead of stopping there
    length_given: bool = True  # False: translation cuts each at 2 |x| + 10 tokens, as eval (max_new_tokens ignored)


@dataclass
class TaskOptions:
    """The options of a task kind that has none (a run's ``task_options:`` section must then be empty)."""


def option_key(options: object, name: str) -> str:
    """How a run config spells the option ``name``: ``task_options.NAME`` for a task's own, else ``trainer.NAME``."""
    return f"task_options.{name}" if name in {f.name for f in fields(options)} else f"trainer.{name}"


class Task:
    """One task kind. Subclasses set ``name``, ``Options``, ``forward_arguments`` and override what differs from
    these defaults: batches from ``EpochBatches``, a training step that returns the head's ``.loss`` (plus the
    model's own ``regularization_loss()`` when it has one), a mean over the batch's labels that are not -100
    (``loss_items``), validation by one forward pass per batch into ``new_metrics()``."""

    name: ClassVar[str]
    # The task's own options (a dataclass whose fields carry their help; a run's ``task_options:`` section).
    Options: ClassVar[type] = TaskOptions
    # The options (of ``Options``, or trainer.label_smoothing) this task passes to the model's forward, by the
    # argument name that receives them: a run that sets one needs a model that takes it. A task that does not list
    # label_smoothing refuses it set.
    forward_arguments: ClassVar[dict[str, str]] = {"label_smoothing": "label_smoothing"}
    # The data's sizes (keys of its info) that fill the model config's fields of the same name.
    sizes_from_data: ClassVar[tuple[str, ...]] = ("vocab_size", "input_dim", "num_labels", "pad_token_id",
                                                  "bos_token_id", "eos_token_id")  # fmt: skip
    # ``generate`` continues a prompt when the model reads tokens (a causal language model, the VMT).
    continues_prompts: ClassVar[bool] = False
    # What the console calls the logged train/loss, and the validation metrics whose key alone would not say what
    # they are (their true names where training and validation compute different quantities).
    train_loss_label: ClassVar[str] = "train loss"
    metric_labels: ClassVar[dict[str, str]] = {}
    # What the train loss adds up, said beside ``train_loss_label`` where it is not the validation loss (the
    # report's curves caption).
    train_loss_note: ClassVar[str] = ""
    # What the loss is averaged over, for reports ("nats/token" for a language model).
    loss_unit: ClassVar[str] = "nats/token"
    # Whether its metrics keep a row per scored example for ``eval --predictions`` (``LossMetric.PREDICTION_COLUMNS``).
    writes_predictions: ClassVar[bool] = False

    def __init__(self, trainer: TrainerConfig | None = None, info: dict | None = None, tokenizer=None,
                 options: object | None = None) -> None:  # fmt: skip
        self.trainer = trainer if trainer is not None else TrainerConfig()
        self.options = options if options is not None else self.Options()
        if not isinstance(self.options, self.Options):
            raise ConfigError(f"task {self.name} takes {self.Options.__name__}, not {type(self.options).__name__}")
        self.info, self.tokenizer = info or {}, tokenizer
        if "label_smoothing" not in self.forward_arguments and self.trainer.label_smoothing:
            raise ConfigError(f"trainer.label_smoothing is set but task {self.name} does not use it")

    # --------------------------------------------------------------------------------------------------- building

    def check_model(self, model: nn.Module) -> None:
        """ConfigError unless ``model`` takes the options this run sets (``forward_arguments``)."""
        defaults = self.Options()
        for option, argument in self.forward_arguments.items():
            key = option_key(self.options, option)
            owner, default = (self.options, defaults) if key.startswith("task_") else (self.trainer, TrainerConfig())
            if getattr(owner, option) != getattr(default, option) and not forward_takes(model, argument):
                raise ConfigError(f"{key} is set but {type(model).__name__} takes no {argument} argument")
        if getattr(self, "packed", False) and not forward_takes(model, "position_ids"):
            raise ConfigError(f"data.packing is set but {type(model).__name__} takes no position_ids (it cannot keep "
                              "packed documents apart); set data.packing: false")  # fmt: skip
        check_inputs_fit(model, getattr(self, "model_reads", {}))

    @classmethod
    def check_new_run(cls, options, trainer: TrainerConfig) -> None:
        """ConfigError for task ``options`` a new run of ``trainer.max_steps`` steps cannot honour: checked for new
        runs only (as ``check_warmup``), so that runs trained before a check still load, evaluate and resume."""

    def check_data(self, bundle: DataBundle) -> None:
        """ConfigError when the data cannot be scored as this task scores it. Notes whether the batches carry
        packed documents (``position_ids``), which the model must then take, and the splits whose inputs must fit
        the model (``check_inputs_fit``; not packed documents, whose positions restart at each document)."""
        self.packed = bool(bundle.splits.get("packing"))
        self.model_reads = {} if self.packed else {"train": bundle.train, "val": bundle.val, "test": bundle.test}

    def describe_split(self, examples, tokenizer) -> None:
        """Told which split the following scoring passes score (validation's, or the one ``eval`` scores)."""

    def batch_tokens(self, batch: dict) -> int:
        """The tokens a training batch counts for (``train_tokens``, each progress line's tok/s): its
        ``real_positions``."""
        return real_positions(batch)

    def loss_items(self, batch: dict) -> int:
        """How many items the training loss of ``batch`` is the mean of: its labels that are not -100 (a
        translation's target tokens, a token classifier's labelled positions, a sequence classifier's labelled
        sequences; label smoothing and a model's own regularization add to each item's loss). An optimiser step
        weighs each micro-batch's loss by its count: it descends the mean over every item of its micro-batches and
        processes (``TrainingModule.training_step``)."""
        return int((batch["labels"] != IGNORE_INDEX).sum())

    def scoring_settings(self, beam_size: int = 1) -> dict:
        """The settings the metrics depend on beyond the model and the data (a VMT's K, a translation's beam size:
        ``beam_size`` is what ``score`` was given, 1 in validation), put beside them in metrics.json and ``eval``'s
        results."""
        return {}

    def check_scored(self, model: nn.Module, examples, split: str) -> None:
        """ConfigError when ``model`` cannot score ``examples`` (the ``split`` ``eval`` scores, perhaps of other data
        than the run's: ``eval --data``), before any is scored: here, inputs longer than it reads."""
        if not getattr(self, "packed", False):
            check_inputs_fit(model, {split: examples})

    def prepare_model(self, model: nn.Module) -> None:
        """Anything the task sets on a freshly built model from the data before training."""

    def train_batches(self, bundle: DataBundle, model: nn.Module, start) -> IterableDataset:
        """Endless training batches; ``start()`` gives the step to begin at (the restored step on resume). Each
        carries the ``order`` drawn for it when the task's options set ``orders`` (the causal LM's)."""
        lengths = None if bundle.lengths is None else bundle.lengths(bundle.train)
        return EpochBatches(bundle.train, self.trainer.batch_size, self.trainer.seed, bundle.collate, start=start,
                            orders=getattr(self.options, "orders", ()), lengths=lengths,
                            sampling=bundle.train_sampling)  # fmt: skip

    # --------------------------------------------------------------------------------------------------- training

    def train_options(self) -> dict:
        """Keyword arguments of every training forward (never of validation's)."""
        smoothing = self.trainer.label_smoothing
        return {"label_smoothing": smoothing} if smoothing else {}

    def training_step(self, module, batch: dict) -> Tensor:
        """The loss to minimise; ``module`` is the Lightning module (for ``log`` and ``global_step``)."""
        model = module.model
        output = model(**model_inputs(batch), **self.train_options())
        module.log_step_mean("train/loss", output.loss.detach(), prog_bar=True, batch_size=len(batch["labels"]))
        regularization = getattr(model, "regularization_loss", None)  # a model's own extra terms, if it has any
        return output.loss if regularization is None else output.loss + regularization()

    def save_state(self, module, checkpoint: dict) -> None:
        """Add the task's training state (beyond the model and optimiser) to a checkpoint."""

    def load_state(self, checkpoint: dict) -> None:
        """Restore what ``save_state`` added."""

    # ---------------------------------------------------------------------------------------------------- scoring

    def new_metrics(self) -> LossMetric:
        """Fresh validation metrics for this task, from ``training.metrics``: imported here, where scoring starts, so
        that reading a run's config and ``generate`` import no torchmetrics."""
        from markovformer.training.metrics import LossMetric  # deferred (see above)

        return LossMetric()

    def start_scoring(self) -> None:
        """Called before each pass over a split (validation or ``eval``)."""

    def score(self, model: nn.Module, batch: dict, metrics: LossMetric, beam_size: int = 1) -> None:
        """Add one batch to ``metrics``: the one evaluation pass that validation and ``eval`` share."""
        metrics.update(model(**model_inputs(batch)), batch)

    # ------------------------------------------------------------------------------------------------- generation

    def generate(self, model: nn.Module, run_dir: Path, request: GenerationRequest) -> Iterable[str]:
        """The lines ``markovformer generate`` prints."""
        if self.continues_prompts and not getattr(model.config, "input_dim", None):
            return continue_prompt(model, run_dir, request)
        raise ValueError(f"{run_dir} is a {self.name} run; generate needs a causal_lm, vmt (tokens), translation or "
                         f"ctc (recordings) run")  # fmt: skip


def continue_prompt(model: nn.Module, run_dir: Path, request: GenerationRequest) -> Iterator[str]:
    """A language model's continuation of ``request.prompt``: text with the run's tokenizer, else token ids. Its
    refusals and notes name the request's fields in the caller's words (``advice.said_as``)."""
    given_prompt, skip_unknown = said_as("--prompt", "prompt"), said_as("--skip-unknown", "skip_unknown=True")
    if request.input is not None:
        raise ValueError(f"{said_as('--input', f'input={request.input!r}')} is for translation runs: a language model "
                         f"continues one {said_as('--prompt TEXT', 'prompt')}")  # fmt: skip
    if request.prompt is None:
        raise ValueError(said_as("a language model continues a --prompt: give --prompt TEXT (--prompt '' samples "
                                 "unconditionally)", "a language model continues a prompt: give prompt=TEXT "
                                 "(prompt='' samples unconditionally)"))  # fmt: skip
    tokenizer = load_tokenizer(Path(run_dir) / "tokenizer") if (Path(run_dir) / "tokenizer").is_dir() else None
    prompt = request.prompt
    folded = prompt.encode(errors="surrogateescape").upper().decode(errors="surrogateescape")  # as fasta_records
    # folds a record's bytes: ASCII letters only
    if tokenizer is not None and folded != prompt and folds_soft_mask(run_dir):
        prompt = folded
        print(f"{given_prompt} read as {prompt!r}: the run read its bases uppercase (data.fold_case: true)",
              file=sys.stderr)  # fmt: skip
    if tokenizer is not None:
        alphabet = set(getattr(tokenizer, "alphabet", ()))
        if request.skip_unknown and alphabet:
            kept = "".join(char for char in prompt if char in alphabet)
            if kept != prompt:
                dropped = sorted(set(prompt) - alphabet)
                print(f"{skip_unknown}: dropped {len(prompt) - len(kept)} prompt characters outside the run's alphabet "
                      f"({', '.join(map(repr, dropped[:10]))})", file=sys.stderr)  # fmt: skip
            prompt = kept
        try:
            ids = tokenizer.encode(prompt)
        except ValueError as error:
            raise ValueError(f"{given_prompt}: {error}; add {skip_unknown} to drop such characters") from None
    else:
        try:
            ids = [int(token) for token in prompt.split()]
        except ValueError as error:
            message = f"this run has no tokenizer: give the prompt as token ids, e.g. '3 1 4' ({error})"
            raise ValueError(message) from None
        vocab_size = getattr(model.config, "vocab_size", None)
        outside = [i for i in ids if i < 0 or (vocab_size is not None and i >= vocab_size)]
        if outside:
            raise ValueError(f"{given_prompt}: token id {outside[0]} is outside the vocabulary [0, {vocab_size})")
    end = getattr(tokenizer, "end_of_document_id", None)  # a run with documents
    if end is not None and packs_documents(run_dir):
        refuse_packed_start(request.through_eod, not ids)
    if not ids and getattr(model, "samples_from_empty_prompt", False):
        print("empty prompt: sampling from the model's own start (x_1 ~ P(x_1))", file=sys.stderr)
    elif not ids:
        ids, prompt = unconditional_start(model, tokenizer, request.seed)
    generator = torch.Generator().manual_seed(request.seed)
    generation = request.generation
    if tokenizer is not None:  # a tokenizer reserves id 0 for padding: never generate it
        generation = generation.replace(suppress_tokens=[*(generation.suppress_tokens or ()), PAD_ID])
    if end is not None and not request.through_eod:
        generation = generation.replace(eos_token_id=end)
    out = model.generate(torch.tensor([ids], dtype=torch.long), generation_config=generation, generator=generator)
    new = out[0, len(ids) :].tolist()
    if tokenizer is None:
        yield " ".join(map(str, ids + new))
        return
    if end is not None and not request.through_eod and end in new:
        new = new[: new.index(end)]
        print(f"the sample reached its document's end (<eod>) after {len(new)} tokens; "
              f"{said_as('--through-eod', 'through_eod=True')} samples on",
              file=sys.stderr)  # fmt: skip
    yield prompt + decoded_documents(tokenizer, new, end)


PACKED = ("this run packed its documents (data.packing: true): its model read each document alone and never "
          "scored a document's first token")


def folds_soft_mask(run_dir: Path) -> bool:
    """Whether the run at ``run_dir`` read FASTA records with ``data.fold_case: true`` (soft-masked acgt as ACGT), so
    that a prompt is folded as its bases were. False for a folder without a run's config.yaml."""
    from markovformer.training.run_config import load_yaml  # deferred: run_config imports the tasks

    path = Path(run_dir) / "config.yaml"
    data = (load_yaml(path).get("data") or {}) if path.is_file() else {}
    return data.get("documents") == "fasta" and data.get("fold_case") is True


def packs_documents(run_dir: Path) -> bool:
    """Whether the run at ``run_dir`` trained on packed documents (its data.json's record of the splits says
    ``packing``, as ``Task.check_data`` reads it from the data). False for a folder without a run's data.json."""
    # the run's own checks name a missing or broken data.json where they read it
    return bool(read_data_record(run_dir, "splits", strict=False).get("packing"))


def refuse_prompt_flags(request: GenerationRequest, run: str) -> None:
    """ValueError for the flags only a language model's continuation reads, given to a ``run`` (translation, CTC)
    whose generate would ignore them."""
    for flag, name in (("--skip-unknown", "skip_unknown"), ("--through-eod", "through_eod")):
        if getattr(request, name):
            raise ValueError(f"{said_as(flag, f'{name}=True')}: a {run} run continues no prompt within a document; "
                             f"that {said_as('flag', 'option')} is a language model's (generate on a causal_lm "
                             f"run)")  # fmt: skip


def refuse_packed_start(through_eod: bool, empty_prompt: bool) -> None:
    """ValueError for what a model trained on packed documents never learned: a document's first token, after an
    ``<eod>`` (--through-eod) or from nothing (an empty prompt, which starts after an ``<eod>``). Sampled anyway,
    a document's first character cost a 600-step char run 6.29 nats after a lone ``<eod>`` and 8.66 after a
    document, against 1.39 (ln 4, four names to start with) unpacked."""
    if through_eod:
        flag = said_as("--through-eod", "through_eod=True")
        raise ValueError(f"{flag}: {PACKED}, so it cannot start the document after an <eod>; without {flag} the "
                         f"sample ends with its document")  # fmt: skip
    if empty_prompt:
        empty = said_as("--prompt ''", "prompt=''")
        raise ValueError(f"{empty}: {PACKED}, so it cannot start a document from nothing; give a document's first "
                         f"characters (or tokens) as {said_as('--prompt', 'prompt')}")  # fmt: skip


def decoded_documents(tokenizer, ids: list[int], end: int | None) -> str:
    """The text of ``ids``, each end of document written as ``<eod>`` (whichever tokenizer: a char tokenizer's
    ``decode`` drops it)."""
    pieces: list[list[int]] = [[]]
    for token in ids:
        if token == end:
            pieces.append([])
        else:
            pieces[-1].append(token)
    return END_OF_DOCUMENT.join(tokenizer.decode(piece) for piece in pieces)


def unconditional_start(model: nn.Module, tokenizer, seed: int) -> tuple[list[int], str]:
    """The ids an empty prompt starts from (runs have no BOS token) and the text printed before the sample: the end
    of a document in a run with documents (what follows it is a document's start; not printed), else a line break
    when the tokenizer has one as a single token (text starts lines; not printed), else one token drawn uniformly
    (with ``seed``) from the vocabulary, padding excluded (printed); says on stderr which."""
    end = getattr(tokenizer, "end_of_document_id", None)
    if end is not None:
        print("empty prompt: sampling a document from its start (after <eod>)", file=sys.stderr)
        return [end], ""
    if tokenizer is not None:
        try:
            newline = tokenizer.encode("\n")
        except ValueError:
            newline = []
        if len(newline) == 1:
            print("empty prompt: sampling unconditionally after a line break", file=sys.stderr)
            return newline, ""
    vocab_size = model.config.vocab_size
    low = PAD_ID + 1 if tokenizer is not None else 0
    token = int(torch.randint(low, vocab_size, (1,), generator=torch.Generator().manual_seed(seed)))
    text = tokenizer.decode([token]) if tokenizer is not None else str(token)
    print(f"empty prompt: sampling unconditionally from the token {text!r}, drawn uniformly with --seed",
          file=sys.stderr)  # fmt: skip
    return [token], text

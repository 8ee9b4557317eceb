"""Data sources by name: the ``data:`` section of a run config is ``{source: NAME, ...options}``.

Each source is a dataclass whose fields are its options and whose ``build(seed)`` returns a DataBundle.
To add a data set: write such a dataclass (see ``FastaSource`` for a file) with the tasks it feeds as its ``feeds``
class variable, and add it to ``DATA_SOURCES``; README.md's "A data source" lists
the rest (option help, where options are checked, file options, a fitted tokenizer, the tests). A file
option is resolved with ``_require_path``: ``data/NAME`` is also looked up in the data directory
(``recipes.registry.find_prepared_file``).
"""

from __future__ import annotations

import dataclasses
import glob
from pathlib import Path
from typing import ClassVar

from markovformer.data.bundle import DataBundle
from markovformer.data.readers.csv_series import load_csv_series
from markovformer.data.readers.fasta import load_fasta_classification
from markovformer.data.readers.hf_dataset import load_hf_dataset_lm
from markovformer.data.readers.text import load_text_lm
from markovformer.data.readers.tokenized_text import TokenizedText
from markovformer.data.recipes.finance import load_order_book
from markovformer.data.recipes.genomics import load_bed_classification
from markovformer.data.recipes.registry import find_prepared_file
from markovformer.data.recipes.speech import load_audio_manifest, load_speech_features
from markovformer.data.synthetic.ctc import SyntheticCTCSource
from markovformer.data.synthetic.markov_sources import HiddenOrderSource, MarkovChainSource
from markovformer.data.synthetic.state_space import LinearGaussianSource, StickyHMMSource
from markovformer.data.synthetic.task_sources import ICLMarkovSource, InductionSource, MQARSource, SelectiveCopySource
from markovformer.data.translation import SyntheticTranslationSource, load_translation
from markovformer.data.translation.parallel import check_vocab_size


@dataclasses.dataclass
class TextSource(TokenizedText):
    """A UTF-8 text file for causal LM, at character level or with a BPE tokenizer trained on the training part
    (saved with the run). Split contiguously: the first ``fractions[0]`` is training text. ``overlap`` > 0: windows
    carry that many tokens of unscored context from the one before, so every position is scored with at least that
    much context (exact n-gram evaluation). ``path`` may name a
    directory or a glob of documents; ``documents`` says what else separates documents (JSONL records, whose text
    is ``text_column``, blank-line paragraphs or FASTA records)."""

    feeds: ClassVar[tuple[str, ...]] = ("causal_lm", "vmt")  # vmt: each window of seq_len + 1 tokens is a document

    # The windows: readers.text.text_windows. The docstring above is `markovformer data show`'s text.
    path: str = ""
    documents: str = "file"
    fold_case: bool = False

    def build(self, seed: int, tokenizer=None) -> DataBundle:
        """The bundle; ``tokenizer``: encode with this one (a run's saved tokenizer) instead of fitting one."""
        if not self.path:
            raise ValueError("data.path is required for this data source")
        path = self.path if Path(self.path).is_dir() or glob.has_magic(self.path) else find_prepared_file(self.path)
        return load_text_lm(path, documents=self.documents, fold_case=self.fold_case, fitted=tokenizer,
                            **self.options())  # fmt: skip


@dataclasses.dataclass
class HFDatasetSource(TokenizedText):
    """Local Hugging Face ``datasets`` files (JSONL, Parquet, CSV or Arrow; no hub, no URL) for causal LM: each
    row's ``text_column`` is a document, tokenized with ``Dataset.map(batched=True, num_proc=...)`` into a cached
    token store, as text files are. Needs the ``datasets`` extra: ``pip install 'markovformer[datasets]'``."""

    feeds: ClassVar[tuple[str, ...]] = ("causal_lm",)

    # The reader: markovformer.data.readers.hf_dataset. The docstring above is `markovformer data show`'s text.

    data_files: str | list[str] = dataclasses.field(default_factory=list)  # one path, or a list of them
    num_proc: int | None = None

    def build(self, seed: int, tokenizer=None) -> DataBundle:
        """The bundle; ``tokenizer``: encode with this one (a run's saved tokenizer) instead of fitting one."""
        return load_hf_dataset_lm(self.data_files, num_proc=self.num_proc, fitted=tokenizer, **self.options())


def _reads_uppercase_dna(cls: type, key: str) -> str:
    """What the DNA classification sources say of an unknown ``key`` (``run_config.build_dataclass``): data.fold_case
    is the text source's, and they fold case always; '' for any other key (its spelling hint follows)."""
    if key != "fold_case":
        return ""
    return (": the fasta and bed sources read every base as one of A/C/G/T/N, soft-masked lowercase as uppercase "
            "always (a classifier's vocabulary has no lowercase base); data.fold_case is the text source's, with "
            "data.documents: fasta, whose language model of the bases may keep the mask")


@dataclasses.dataclass
class FastaSource:
    """DNA sequences in FASTA (plain or gzipped; a glob: each file it matches, in sorted order) with a labels file
    (``id<TAB>label`` or ``id,label`` per line, after an optional header line), for sequence classification.
    Vocabulary A/C/G/T/N; optional reverse-complement augmentation of the training split."""

    feeds: ClassVar[tuple[str, ...]] = ("sequence_classification",)
    unknown_key_hint = classmethod(_reads_uppercase_dna)

    path: str = ""
    labels: str = ""
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    reverse_complement: bool = False
    max_length: int | None = None

    def build(self, seed: int) -> DataBundle:
        path = self.path if glob.has_magic(self.path) else _require_path(self.path)  # a glob: as the text source's
        return load_fasta_classification(
            path, _require_path(self.labels, "data.labels"), fractions=self.fractions, seed=seed,
            reverse_complement_augment=self.reverse_complement, max_length=self.max_length,
        )  # fmt: skip


@dataclasses.dataclass
class CsvSeriesSource:
    """Numeric time series in CSV: feature columns and a label column, sliding windows, chronological splits (in file
    order, which must be oldest first; a date column is checked), normalisation fitted on the training rows only."""

    feeds: ClassVar[tuple[str, ...]] = ("sequence_classification", "token_classification")

    path: str = ""
    label_column: str = "label"
    feature_columns: list[str] | None = None
    window: int = 32
    stride: int = 1
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)
    task: str = "sequence_classification"
    label_leads: int = 0

    def build(self, seed: int) -> DataBundle:
        return load_csv_series(
            _require_path(self.path), label_column=self.label_column, feature_columns=self.feature_columns,
            window=self.window, stride=self.stride, fractions=self.fractions, task=self.task,
            label_leads=self.label_leads,
        )  # fmt: skip


@dataclasses.dataclass
class BedSource:
    """Labelled BED intervals (label in column ``label_column``, 4 = the name) cut from a reference FASTA (plain or
    .gz; minus-strand intervals reverse-complemented), then as the ``fasta`` source: sequence classification."""

    feeds: ClassVar[tuple[str, ...]] = ("sequence_classification",)
    unknown_key_hint = classmethod(_reads_uppercase_dna)

    path: str = ""
    reference: str = ""
    label_column: int = 4
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    reverse_complement: bool = False
    max_length: int | None = None

    def build(self, seed: int) -> DataBundle:
        return load_bed_classification(
            _require_path(self.path), _require_path(self.reference, "data.reference"), label_column=self.label_column,
            fractions=self.fractions, seed=seed,
            reverse_complement_augment=self.reverse_complement, max_length=self.max_length,
        )  # fmt: skip


@dataclasses.dataclass
class OrderBookSource:
    """Limit-order-book snapshots in CSV (timestamp, bid/ask price and size per level) -> windows labelled by the
    smoothed mid-price move over ``horizon`` snapshots (down/flat/up at +-``threshold``, or null: thresholds that
    balance the classes on the training rows); chronological splits, training-only normalisation."""

    feeds: ClassVar[tuple[str, ...]] = ("sequence_classification", "token_classification")

    path: str = ""
    horizon: int = 10
    threshold: float | tuple[float, float] | None = None
    window: int = 100
    stride: int = 1
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)
    task: str = "sequence_classification"

    def build(self, seed: int) -> DataBundle:
        return load_order_book(
            _require_path(self.path), horizon=self.horizon, threshold=self.threshold, window=self.window,
            stride=self.stride, fractions=self.fractions, task=self.task,
        )  # fmt: skip


@dataclasses.dataclass
class SpeechFeaturesSource:
    """Log-Mel frames and character transcripts of a speech file (``markovformer data prepare digits``) for CTC:
    its train and val splits, and as test the real recordings (``test_set: recorded``) or the synthetic test split
    of voices unseen in training (``synthetic``). Features normalised with the training frames' statistics;
    ``stack_frames`` consecutive frames side by side make one input (3: 240 features per 30 ms, a third as long)."""

    feeds: ClassVar[tuple[str, ...]] = ("ctc",)

    path: str = ""
    test_set: str = "recorded"
    stack_frames: int = 1

    def build(self, seed: int) -> DataBundle:
        return load_speech_features(_require_path(self.path), self.test_set, self.stack_frames)


@dataclasses.dataclass
class AudioManifestSource:
    """WAV files with transcripts (a manifest of ``path<TAB>transcript`` lines, paths relative to it) for CTC:
    resampled to ``sample_rate``, 80 log-Mel features per 10 ms, characters a-z, space and apostrophe; split at
    random by utterance; ``stack_frames`` as for ``speech_features``."""

    feeds: ClassVar[tuple[str, ...]] = ("ctc",)

    path: str = ""
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    sample_rate: int = 8000
    stack_frames: int = 1

    def build(self, seed: int) -> DataBundle:
        return load_audio_manifest(_require_path(self.path), fractions=self.fractions, seed=seed,
                                   sample_rate=self.sample_rate, stack=self.stack_frames)  # fmt: skip


@dataclasses.dataclass
class TranslationFileSource:
    """Parallel text from a TSV (``source<TAB>target``) or two aligned files (``path`` and ``target_path``), with
    a joint BPE tokenizer of ``vocab_size`` trained on the training pairs (saved with the run). A ``data/NAME`` path
    is also looked up in the data directory ($MARKOVFORMER_DATA, else ./data)."""

    feeds: ClassVar[tuple[str, ...]] = ("translation",)

    # data/NAME is resolved here with find_prepared_file, not in ``translation``, which may not import the recipes'
    # shelf. The docstring above is `markovformer data show`'s text.

    path: str = ""
    target_path: str | None = None
    vocab_size: int = 8000
    fractions: tuple[float, float, float] = (0.9, 0.05, 0.05)
    max_length: int | None = None

    def __post_init__(self) -> None:
        check_vocab_size(self.vocab_size)

    def build(self, seed: int, tokenizer=None) -> DataBundle:
        if not self.path:
            raise ValueError("data.path is required for this data source")
        target_path = None if self.target_path is None else find_prepared_file(self.target_path, "data.target_path")
        return load_translation(
            find_prepared_file(self.path), target_path=target_path, vocab_size=self.vocab_size,
            fractions=self.fractions, seed=seed, max_length=self.max_length, tokenizer=tokenizer,
        )  # fmt: skip


def run_fitted_options(source: str, info: dict) -> dict:
    """The data options that rebuild a trained run's data (its recorded ``info``) on other rows with what the run
    fitted on its training rows: an order book's class thresholds (``move_thresholds``), so that another file (``eval
    --data path=...``, the months after training) is labelled as the training data were, not by thresholds fitted on
    its own moves (which the live model could not have known). Options the user gives override them."""
    if source == "order_book" and info.get("move_thresholds") is not None:
        return {"threshold": list(info["move_thresholds"])}
    return {}


def _require_path(path: str, key: str = "data.path") -> Path:
    """The file ``path`` names, as given or, for ``data/NAME``, in the data directory (``find_prepared_file``, whose
    error names the recipe that writes a missing file)."""
    if not path:
        raise ValueError(f"{key} is required for this data source")
    if Path(path).is_dir():
        raise ValueError(f"{key}={path!r} is a directory; give the data file inside it")
    if glob.has_magic(path) and not Path(path).is_file():
        raise ValueError(f"{key}={path!r} is a glob pattern (it matches {len(glob.glob(path, recursive=True))} "
                         f"files); this data source reads one file: name it")  # fmt: skip
    return find_prepared_file(path, key)


DATA_SOURCES: dict[str, type] = {
    "markov_chain": MarkovChainSource,
    "hidden_order": HiddenOrderSource,
    "text": TextSource,
    "hf_dataset": HFDatasetSource,
    "fasta": FastaSource,
    "bed": BedSource,
    "csv_series": CsvSeriesSource,
    "order_book": OrderBookSource,
    "synthetic_ctc": SyntheticCTCSource,
    "speech_features": SpeechFeaturesSource,
    "audio_manifest": AudioManifestSource,
    "translation_file": TranslationFileSource,
    "synthetic_translation": SyntheticTranslationSource,
    "linear_gaussian": LinearGaussianSource,
    "sticky_hmm": StickyHMMSource,
    "mqar": MQARSource,
    "induction": InductionSource,
    "selective_copy": SelectiveCopySource,
    "icl_markov": ICLMarkovSource,
}

def source_tasks(name: str) -> tuple[str, ...]:
    """The tasks data source ``name`` (a key of ``DATA_SOURCES``) feeds: its class's ``feeds``; a mismatch with the
    run's task is a config error caught before any model is built. A class without them is a LookupError saying where
    they go."""
    tasks = getattr(DATA_SOURCES[name], "feeds", None)
    if not tasks:
        raise LookupError(f"data source {name!r} ({DATA_SOURCES[name].__name__}) declares no tasks: give the class "
                          f"`feeds: ClassVar[tuple[str, ...]] = (TASK, ...)`, the tasks it feeds (as "
                          f"MarkovChainSource in markovformer/data/synthetic/markov_sources.py does)")  # fmt: skip
    return tuple(tasks)

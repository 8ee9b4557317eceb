"""DNA from FASTA files: reading and writing records, the nucleotide vocabulary, reverse complements, and a loader
for sequence classification with a labels table. FASTA files are read in chunks, a record at a time
(``fasta_format``); a reference genome is read through a ``.fai`` index (``IndexedFasta``: ``pyfaidx``, the ``data``
extra), one interval at a time, never the whole file."""

from __future__ import annotations

import glob
import hashlib
import shlex
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np
import torch

from markovformer.atomic import atomic_write
from markovformer.data.bundle import DataBundle, label_names_in_order
from markovformer.data.readers.fasta_format import (
    base_line_number,
    fasta_records,
    has_lone_cr,
    is_gzipped,
    named_records,
)
from markovformer.data.readers.text_stream import BYTE_ORDER_MARK, not_text_message, resolve_text_paths
from markovformer.data.readers.token_store import cache_root
from markovformer.data.splits import split_indices

DNA_VOCAB = "ACGTN"  # letter DNA_VOCAB[i] has id i + 1; id 0 is padding, so the vocabulary size is 6
DNA_VOCAB_SIZE = len(DNA_VOCAB) + 1

_DNA_IDS = np.zeros(256, dtype=np.uint8)  # byte -> id; 0 marks a byte outside the vocabulary
_DNA_IDS[np.frombuffer(DNA_VOCAB.encode("ascii"), dtype=np.uint8)] = np.arange(1, len(DNA_VOCAB) + 1)
_DNA_LETTERS = frozenset(DNA_VOCAB)
_COMPLEMENT = str.maketrans("ACGTN", "TGCAN")
BGZIP_SUFFIXES = (".gz", ".bgz")  # the names pyfaidx reads as bgzip, whatever the file's bytes


class IndexedFasta(Mapping):
    """The records of a plain (uncompressed) FASTA through its ``.fai`` index (``pyfaidx``; the index is built
    beside the file on first use, or in the token-store cache when that folder is not writable): ``fasta[id]`` is
    a ``Chromosome`` whose slices read only their bases from disk, uppercase. A gzipped file (bgzipped too: pyfaidx
    reads that only with Biopython, no part of the extra), a plain one named as bgzip (``BGZIP_SUFFIXES``), a
    byte-order mark and lone-CR line ends are refused, saying the way out."""

    def __init__(self, path: str | Path) -> None:
        pyfaidx = import_pyfaidx()
        self.path = Path(path)
        with self.path.open("rb") as handle:  # the index counts offsets from the file's first byte
            if handle.read(len(BYTE_ORDER_MARK)) == BYTE_ORDER_MARK:
                raise ValueError(f"{self.path}: begins with a UTF-8 byte-order mark, which its .fai index cannot "
                                 f"skip: remove it (sed -i '1s/^\\xEF\\xBB\\xBF//' {shlex.quote(str(self.path))})")
        if is_gzipped(self.path):  # pyfaidx would decode its bytes as text, or take it for bgzip when named .gz
            raise ValueError(f"{self.path}: is gzipped, and its .fai index reads only a plain FASTA: read it whole "
                             f"(indexed=False), or decompress it (gunzip) and index that")  # fmt: skip
        suffix = self.path.suffix
        if suffix.lower() in BGZIP_SUFFIXES:  # else pyfaidx asks for Biopython, or fails on the bytes it gets
            raise ValueError(f"{self.path}: is a plain FASTA named {suffix!r}, which its .fai index reads as bgzip: "
                             f"read it whole (indexed=False), or rename it without {suffix!r}")  # fmt: skip
        if has_lone_cr(self.path):  # pyfaidx reads the whole file as one header line: one empty record
            raise ValueError(f"{self.path}: ends its lines with a lone carriage return (old Mac), which its .fai "
                             f"index cannot read: read it whole (indexed=False), or convert it (tr '\\r' '\\n' < "
                             f"{shlex.quote(str(self.path))} > unix.fa) and index that")  # fmt: skip
        try:
            try:
                self._fasta = self._open(pyfaidx, Path(f"{self.path}.fai"))
            except PermissionError:
                key = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:32]
                self._fasta = self._open(pyfaidx, cache_root() / "fai" / f"{key}.fai")
        except (ValueError, RuntimeError, pyfaidx.FastaIndexingError) as error:  # Runtime: 2 blank end lines
            raise ValueError(f"{self.path}: cannot index as a FASTA file ({error})") from None

    def _open(self, pyfaidx, index: Path):
        """pyfaidx's reader through ``index``, which is built first when it is missing or older than the file, and
        atomically: pyfaidx writes an index in place, and one cut short at a line by a kill reads as a FASTA of
        fewer records, silently."""
        if not index.is_file() or index.stat().st_mtime < self.path.stat().st_mtime:
            atomic_write(index, lambda temporary: pyfaidx.Faidx(str(self.path), indexname=str(temporary)).close())
        return pyfaidx.Fasta(str(self.path), indexname=str(index), sequence_always_upper=True, as_raw=True,
                             rebuild=False)  # fmt: skip

    def __getitem__(self, name: str) -> Chromosome:
        return Chromosome(self._fasta[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._fasta.keys())

    def __len__(self) -> int:
        return len(self._fasta.keys())


class Chromosome:
    """One indexed record: ``len()`` and ``[start:stop]`` (a str read from disk)."""

    def __init__(self, record) -> None:
        self._record = record

    def __len__(self) -> int:
        return len(self._record)

    def __getitem__(self, span: slice) -> str:
        return str(self._record[span])


def import_pyfaidx():
    """``pyfaidx`` (an optional extra), imported only where a FASTA is read through its index."""
    try:
        import pyfaidx
    except ImportError:
        raise ModuleNotFoundError("reading a large FASTA through its index needs 'pyfaidx': pip install "
                                  "'markovformer[data]'", name="pyfaidx") from None  # fmt: skip
    return pyfaidx


def read_fasta(path: str | Path) -> list[tuple[str, str]]:
    """Records ``(id, sequence)`` in file order, read in chunks a record at a time (``fasta_format.fasta_records``:
    plain or gzipped, told by its first bytes, not its name). The id is the header's first word after '>'; sequence
    lines are joined and uppercased, line ends (LF or CRLF), spaces and blank lines dropped. Letters outside ACGTN,
    sequence text before the first header, duplicate ids, empty records and a file with no record raise, naming the
    file, record and line; another compression is refused (``text_stream.not_text_message``)."""
    path = Path(path)
    try:
        told = None if is_gzipped(path) else not_text_message(path)  # bzip2, xz...: said so, not as bad UTF-8
    except OSError as error:
        raise ValueError(f"{path}: cannot read as a FASTA file ({error})") from None
    if told is not None:
        raise ValueError(told)
    records: list[tuple[str, str]] = []
    for offset, name, sequence in named_records(path, fasta_records(path, fold_case=True)):
        bad = _first_bad_letter(sequence)
        if bad is not None:
            line = base_line_number(path, offset, sequence.index(bad))
            raise ValueError(f"{path}: record {name!r} line {line}: letter {bad!r} is outside the DNA vocabulary "
                             f"{DNA_VOCAB}")  # fmt: skip
        records.append((name, sequence))
    if not records:
        raise ValueError(f"{path}: no FASTA records (no line starts with '>')")
    return records


def read_fasta_files(path: str | Path) -> list[tuple[str, str]]:
    """``read_fasta``'s records of the file ``path`` or, a glob, of each file it matches in sorted order
    (``text_stream.resolve_text_paths``, as the text source reads a glob); an id in two files raises ValueError
    naming both."""
    files = resolve_text_paths(path) if glob.has_magic(str(path)) else [Path(path)]
    records, file_of = [], {}
    for file in files:
        for name, sequence in read_fasta(file):
            if name in file_of:
                raise ValueError(f"{file}: record id {name!r} is also a record of {file_of[name]} ({str(path)!r} "
                                 f"matches both)")  # fmt: skip
            file_of[name] = file
            records.append((name, sequence))
    return records


def write_fasta(records: Iterable[tuple[str, str]], path: str | Path, line_width: int = 60) -> None:
    """Write ``(id, sequence)`` records, wrapping sequences at ``line_width`` letters; ``read_fasta`` reads them
    back unchanged (for uppercase ACGTN sequences)."""
    lines = []
    for record_id, sequence in records:
        if not record_id or any(char.isspace() for char in record_id):
            raise ValueError(f"FASTA record id {record_id!r} must be non-empty with no whitespace")
        lines.append(f">{record_id}")
        lines.extend(sequence[start : start + line_width] for start in range(0, len(sequence), line_width))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def encode_dna(sequence: str) -> torch.Tensor:
    """(L,) long ids of an uppercase ACGTN sequence (A=1, C=2, G=3, T=4, N=5)."""
    return _dna_bytes(sequence).long()


def _dna_bytes(sequence: str) -> torch.Tensor:
    """``encode_dna``'s ids as (L,) uint8, one byte a base: what a loaded data set keeps (``collate`` pads them into
    long ids), where long ids would take eight times the FASTA file's size for the whole run."""
    bad = _first_bad_letter(sequence)
    if bad is not None:
        offset = sequence.index(bad)
        raise ValueError(f"letter {bad!r} at offset {offset} is outside the DNA vocabulary {DNA_VOCAB}")
    return torch.from_numpy(_DNA_IDS[np.frombuffer(sequence.encode("ascii"), dtype=np.uint8)])


def reverse_complement(sequence: str) -> str:
    """The opposite strand read 5'->3': reversed, with A<->T and C<->G swapped and N kept."""
    bad = _first_bad_letter(sequence)
    if bad is not None:
        raise ValueError(f"letter {bad!r} is outside the DNA vocabulary {DNA_VOCAB}")
    return sequence.translate(_COMPLEMENT)[::-1]


def _first_bad_letter(text: str) -> str | None:
    """The first character of ``text`` outside ACGTN, or None (a set test first: fast on long clean sequences)."""
    if set(text) <= _DNA_LETTERS:
        return None
    return next(char for char in text if char not in _DNA_LETTERS)


def load_fasta_classification(
    fasta_path: str | Path,
    labels_path: str | Path,
    *,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    reverse_complement_augment: bool = False,
    max_length: int | None = None,
) -> DataBundle:
    """DNA records with one class label each, split at random by record (seeded, disjoint, covering);
    ``fasta_path``: a file, or a glob of files read in sorted order (``read_fasta_files``).

    ``labels_path``: one ``id<TAB>label`` or ``id,label`` row per record; the first row is a header when its id is
    not a FASTA record id. Every record needs exactly one label row and every row a record. Label strings map to
    ids 0..C-1 in ``label_names_in_order`` order (``info["label_names"]``).

    ``max_length`` keeps the first ``max_length`` letters of each sequence. With ``reverse_complement_augment``
    each train example is followed by its reverse complement (of the kept letters) with the same label; val and
    test are never augmented.

    Example: {"input_ids": (L,) uint8, ids 1..5 for ACGTN (one byte a base; ``collate`` pads them into long ids),
    "labels": 0-dim long}.
    info: {"vocab_size": 6, "num_labels": C, "label_names": [...]}, and where ``max_length`` cut a record,
    ``cut_by_max_length``: {"records": [cut, all], "bases": [left out, all]}.
    """
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
        raise ValueError(f"data.max_length={max_length!r}: must be a positive int or None")
    records = read_fasta_files(fasta_path)
    labels = read_labels(labels_path, [record_id for record_id, _ in records])
    names = label_names_in_order(list(labels.values()), str(labels_path))
    label_ids = {name: index for index, name in enumerate(names)}

    def example(sequence: str, record_id: str) -> dict[str, torch.Tensor]:
        return {"input_ids": _dna_bytes(sequence), "labels": torch.tensor(label_ids[labels[record_id]])}

    parts = dict(zip(("train", "val", "test"), split_indices(len(records), fractions, seed), strict=True))
    if not parts["train"]:
        raise ValueError(f"{fasta_path}: {len(records)} records leave no train record with fractions {fractions}")
    examples: dict[str, list[dict[str, torch.Tensor]]] = {}
    for name, indices in parts.items():
        examples[name] = []
        for index in indices:
            record_id, sequence = records[index]
            sequence = sequence[:max_length]
            examples[name].append(example(sequence, record_id))
            if reverse_complement_augment and name == "train":
                examples[name].append(example(reverse_complement(sequence), record_id))
    splits = {
        "kind": "random_records",
        "seed": seed,
        "fractions": list(fractions),
        **{name: [records[index][0] for index in indices] for name, indices in parts.items()},
        "reverse_complement_augment": reverse_complement_augment,
        "max_length": max_length,
    }
    info = {"vocab_size": DNA_VOCAB_SIZE, "num_labels": len(names), "label_names": names}
    shared = repeated_in_training(records, parts, max_length)
    if shared:
        info["repeats_training"] = shared
    lengths = [len(sequence) for _, sequence in records]
    if max_length is not None and max(lengths) > max_length:  # said on the run's data line (run_report)
        info["cut_by_max_length"] = {"records": [sum(length > max_length for length in lengths), len(lengths)],
                                     "bases": [sum(max(length - max_length, 0) for length in lengths), sum(lengths)]}
    return DataBundle(**examples, info=info, splits=splits)


def repeated_in_training(records: list[tuple[str, str]], parts: dict[str, list[int]],
                         max_length: int | None) -> dict[str, int]:  # fmt: skip
    """How many validation and test records hold the bases of a training record (or their reverse complement: the
    same molecule read from the other strand) under another id, compared as kept (``max_length``); only the splits
    that have any. Such records are not held out: a model that memorised its training set scores them well."""
    seen = {hash(records[index][1][:max_length]) for index in parts["train"]}  # hashes: no copy of the bases
    counts = {}
    for name in ("val", "test"):
        kept = (records[index][1][:max_length] for index in parts[name])
        count = sum(hash(sequence) in seen or hash(reverse_complement(sequence)) in seen for sequence in kept)
        if count:
            counts[name] = count
    return counts


def read_labels(path: str | Path, record_ids: list[str]) -> dict[str, str]:
    """``{id: label}`` from a two-column tab- or comma-separated file, checked against ``record_ids`` both ways
    (the first labelled id that is no record raises, naming its line; then the first record without a label)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()  # a BOM (Excel, Notepad) is no part of an id
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read as a UTF-8 labels file ({error})") from None
    known = set(record_ids)
    labels: dict[str, str] = {}
    line_of: dict[str, int] = {}
    first_row, header = True, None  # header: (line, first field) of a first row read as a header
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        fields = [field.strip() for field in raw.split("\t" if "\t" in raw else ",")]
        if len(fields) != 2 or not fields[0] or not fields[1]:
            raise ValueError(f"{path}: line {number}: expected 'id<TAB>label' or 'id,label', got {raw!r}")
        record_id, label = fields
        if first_row and record_id not in known:  # a header row
            first_row, header = False, (number, record_id)
            continue
        first_row = False
        if record_id in labels:
            raise ValueError(f"{path}: line {number}: id {record_id!r} was labelled on line {line_of[record_id]}")
        labels[record_id], line_of[record_id] = label, number
    # a labelled id that is no record first: its line is where the file differs (ids written as whole headers, say)
    extra = next((record_id for record_id in labels if record_id not in known), None)
    if extra is not None:
        raise ValueError(f"{path}: line {line_of[extra]}: labelled id {extra!r} is not a FASTA record")
    missing = next((record_id for record_id in record_ids if record_id not in labels), None)
    if missing is not None:
        note = "" if header is None else (f" (line {header[0]}, {header[1]!r}, was read as a header line, its id being "
                                          f"no FASTA record: a mistyped id?)")  # fmt: skip
        raise ValueError(f"{path}: FASTA record {missing!r} has no label{note}")
    return labels

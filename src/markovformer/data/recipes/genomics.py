"""DNA classification data from public sources: readers for the raw formats (R data frames, the UCSC upstream-region
FASTA, BED intervals on a reference FASTA) as pure functions, and the genomics data recipes.

Every recipe writes a folder holding ``sequences.fa`` and ``labels.tsv`` (``id<TAB>label``), the two files the
``fasta`` data source reads; the folder appears whole or not at all (``write_labelled_fasta``).

- ``splice``: the UCI splice-junction set (primate genes, 60 nt centred on a candidate boundary; EI = exon->intron
  (donor), IE = intron->exon (acceptor), N = neither), as Debian's ``r-cran-mlbench`` ships it (``DNA.rda``, the
  StatLog version: ambiguous records removed, each base one-hot coded in 3 binary columns, see ``STATLOG_DNA_CODE``).
- ``promoters``: the UCI E. coli promoter set (106 x 57 nt, +/- 53 each), Debian ``r-cran-kernlab``
  (``promotergene.rda``).
- ``drosophila-promoters``: promoter vs background windows cut from the 2 kb upstream of every dm3 RefSeq
  transcript (``dm3_upstream2000.fa.gz`` in Debian ``r-bioc-biostrings``); see ``drosophila_promoter_records``.
"""

from __future__ import annotations

import bisect
import gzip
import importlib.util
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from markovformer.data.bundle import DataBundle
from markovformer.data.readers.fasta import (
    BGZIP_SUFFIXES,
    IndexedFasta,
    load_fasta_classification,
    reverse_complement,
    write_fasta,
)
from markovformer.data.readers.fasta_format import fasta_records, has_lone_cr, is_gzipped, named_records
from markovformer.data.recipes.debian import package_file, unpacked_debian_package

LabelledSequence = tuple[str, str, str]  # (record id, uppercase ACGTN sequence, label)

# StatLog's code for the splice data (mlbench's DNA): 3 indicator columns per base, T is all zeros.
STATLOG_DNA_CODE = {"A": (1, 0, 0), "C": (0, 1, 0), "G": (0, 0, 1), "T": (0, 0, 0)}
SPLICE_CLASSES = {"ei": "EI", "ie": "IE", "n": "N"}
PROMOTER_CLASSES = {"+": "promoter", "-": "non-promoter"}
LABELLED_FASTA_FILES = ("sequences.fa", "labels.tsv")  # what every recipe's folder holds (write_labelled_fasta)
_NON_ACGT = re.compile(r"[^ACGT]")


def decode_statlog_dna(bits: np.ndarray) -> list[str]:
    """(N, 3L) 0/1 indicators -> N sequences of length L under ``STATLOG_DNA_CODE``; a triple that is no code
    (two or more ones, or a value other than 0/1) raises ValueError naming the record and position."""
    bits = np.asarray(bits)
    if bits.ndim != 2 or bits.shape[1] % 3:
        raise ValueError(f"StatLog DNA needs (records, 3 * length) indicators, got shape {bits.shape}")
    triples = bits.reshape(len(bits), -1, 3)
    letters = {code: letter for letter, code in STATLOG_DNA_CODE.items()}
    index = triples[..., 0] * 4 + triples[..., 1] * 2 + triples[..., 2]  # A=4, C=2, G=1, T=0
    valid = np.isin(triples, (0, 1)).all(axis=-1) & np.isin(index, (0, 1, 2, 4))
    if not valid.all():
        record, position = (int(i) for i in np.argwhere(~valid)[0])
        raise ValueError(f"record {record}, base {position + 1}: {triples[record, position].tolist()} is no base code")
    table = np.array([letters[(0, 0, 0)], letters[(0, 0, 1)], letters[(0, 1, 0)], "?", letters[(1, 0, 0)]])
    return ["".join(row) for row in table[index]]


def encode_statlog_dna(sequences: Iterable[str]) -> np.ndarray:
    """The inverse of ``decode_statlog_dna``: (N, 3L) int8 indicators of equal-length ACGT sequences."""
    rows = [[bit for letter in sequence for bit in STATLOG_DNA_CODE[letter]] for sequence in sequences]
    return np.array(rows, dtype=np.int8)


def read_r_data_frame(path: str | Path, name: str) -> dict[str, list[str]]:
    """Column name -> values as strings (factor levels by name) of the data frame ``name`` in an .rda file, read in
    pure Python by the ``rdata`` package (no R). The row names are under the key ``""``."""
    try:
        import rdata
    except ImportError:
        raise RuntimeError("reading R data files needs the 'rdata' package: pip install rdata") from None
    import warnings

    with warnings.catch_warnings():  # old .rda files carry no encoding flag; their strings are ASCII
        warnings.filterwarnings("ignore", message="Unknown encoding")
        frames = rdata.read_rda(str(path))
    if name not in frames:
        raise ValueError(f"{path}: no object {name!r} (it holds {sorted(frames)})")
    frame = frames[name]
    columns = {str(column): [str(value) for value in frame[column]] for column in frame.columns}
    columns[""] = [str(row) for row in frame.index]
    return columns


def splice_records(columns: Mapping[str, list[str]]) -> list[LabelledSequence]:
    """The records of mlbench's ``DNA`` frame (columns V1..V180 of "0"/"1", ``Class`` in ei/ie/n) as
    ``(splice_<row>, 60-nt sequence, EI|IE|N)``, in file order. The boundary lies between bases 30 and 31: an EI
    (donor) site reads GT at bases 31-32, an IE (acceptor) site AG at bases 29-30."""
    names = [f"V{i}" for i in range(1, 181)]
    missing = [name for name in (*names, "Class") if name not in columns]
    if missing:
        raise ValueError(f"the DNA frame lacks column {missing[0]!r}")
    bits = np.array([[int(value) for value in columns[name]] for name in names], dtype=np.int64).T
    labels = [SPLICE_CLASSES.get(value) for value in columns["Class"]]
    if None in labels:
        raise ValueError(f"unknown splice class {columns['Class'][labels.index(None)]!r}; expected ei, ie or n")
    rows = columns.get("") or [str(i + 1) for i in range(len(labels))]
    return [
        (f"splice_{row}", seq, label) for row, seq, label in zip(rows, decode_statlog_dna(bits), labels, strict=True)
    ]


def promoter_records(columns: Mapping[str, list[str]]) -> list[LabelledSequence]:
    """The records of kernlab's ``promotergene`` frame (``Class`` in +/-, bases in columns V2..V58, lowercase)
    as ``(promoter_<row>, 57-nt sequence, promoter|non-promoter)``, in file order."""
    names = [f"V{i}" for i in range(2, 59)]
    missing = [name for name in (*names, "Class") if name not in columns]
    if missing:
        raise ValueError(f"the promotergene frame lacks column {missing[0]!r}")
    rows = columns.get("") or [str(i + 1) for i in range(len(columns["Class"]))]
    records = []
    for index, (row, label) in enumerate(zip(rows, columns["Class"], strict=True)):
        sequence = "".join(columns[name][index] for name in names).upper()
        if label not in PROMOTER_CLASSES or _NON_ACGT.search(sequence):
            raise ValueError(f"promotergene row {row}: class {label!r} or sequence {sequence!r} is malformed")
        records.append((f"promoter_{row}", sequence, PROMOTER_CLASSES[label]))
    return records


def deduplicate(records: Iterable[LabelledSequence]) -> tuple[list[LabelledSequence], dict[str, int]]:
    """Records with each sequence once (its first occurrence), so no sequence sits in two splits; a sequence seen
    with two different labels is dropped entirely. Returns the records and counts of what was dropped."""
    records = list(records)
    labels_of: dict[str, set[str]] = {}
    for _, sequence, label in records:
        labels_of.setdefault(sequence, set()).add(label)
    kept, seen = [], set()
    for record in records:
        if len(labels_of[record[1]]) == 1 and record[1] not in seen:
            kept.append(record)
        seen.add(record[1])
    conflicting = sum(len(labels) > 1 for labels in labels_of.values())
    return kept, {"records": len(records), "kept": len(kept), "conflicting_sequences": conflicting}


def open_text(path: str | Path):
    """A text handle of a plain or gzipped (``.gz``) file; a UTF-8 byte-order mark (Notepad, Excel) is no text."""
    path = Path(path)
    return gzip.open(path, "rt", encoding="utf-8-sig") if path.suffix == ".gz" else path.open(encoding="utf-8-sig")


_UPSTREAM_HEADER = re.compile(r"^(\S+)_up_(\d+)_\S+_([fr])\s+(\S+):(-?\d+)-(\d+)")


def drosophila_promoter_records(
    upstream: Iterable[tuple[str, str]], window: int = 200
) -> tuple[list[LabelledSequence], dict[str, int]]:
    """Promoter and background windows from UCSC upstream regions (``NM_x_up_2000_chr_start_f chr:start-end``).

    Each region is the 2 kb before a transcript's start, on the transcript's strand (minus-strand regions come
    reverse-complemented), so its last base touches the transcription start site (TSS). Construction:
    - promoter: the last ``window`` bases (-window..-1 from the TSS: the core and proximal promoter);
    - background: the first ``window`` bases (-2000..-2000+window-1: far upstream of the same gene), dropped when
      that stretch of genome overlaps any promoter window (either strand: it would be another gene's promoter);
    - regions shorter than their stated length (chromosome ends) are skipped, and so are windows holding an N;
    - then ``deduplicate`` (transcripts sharing a TSS give the same promoter window once).
    Ids: ``<transcript>_<chrom>_<start>_tss`` and ``..._far``. Returns the records (promoters first, each group in
    file order) and counts.
    """
    positives, negatives = [], []
    promoter_spans: dict[str, list[tuple[int, int]]] = {}
    skipped_short = 0
    for header, sequence in upstream:
        match = _UPSTREAM_HEADER.match(header)
        if match is None:
            raise ValueError(f"upstream record {header[:60]!r} lacks the 'NAME_up_N_..._f|r chrom:start-end' header")
        name, size, strand, chrom, start, end = match.groups()
        start, end, size = int(start), int(end), int(size)
        if len(sequence) != size or end - start + 1 != size or size < 2 * window:
            skipped_short += 1
            continue
        # 1-based inclusive genome spans; the sequence runs start->end on 'f', end->start on 'r'.
        near = (end - window + 1, end) if strand == "f" else (start, start + window - 1)
        far = (start, start + window - 1) if strand == "f" else (end - window + 1, end)
        record_id = f"{name}_{chrom}_{start}_{strand}"
        promoter_spans.setdefault(chrom, []).append(near)
        positives.append((f"{record_id}_tss", sequence[-window:], "promoter", chrom, near))
        negatives.append((f"{record_id}_far", sequence[:window], "background", chrom, far))
    for spans in promoter_spans.values():
        spans.sort()
    clear = [item for item in negatives if not _overlaps(promoter_spans.get(item[3], []), item[4], window)]
    overlapping, negatives = len(negatives) - len(clear), clear
    with_n = [(i, s, label) for i, s, label, *_ in positives + negatives if "N" not in s]
    ambiguous = len(positives) + len(negatives) - len(with_n)
    records, counts = deduplicate(with_n)
    counts = {"regions_skipped_short": skipped_short, "background_overlapping_a_promoter": overlapping,
              "windows_with_n": ambiguous, **counts}  # fmt: skip
    return records, counts


def _overlaps(sorted_spans: list[tuple[int, int]], span: tuple[int, int], width: int) -> bool:
    """Whether ``span`` overlaps any of ``sorted_spans`` (each ``width`` long, sorted by start)."""
    index = bisect.bisect_left(sorted_spans, (span[0] - width + 1, -1))  # the first that can reach span[0]
    return index < len(sorted_spans) and sorted_spans[index][0] <= span[1]


@dataclass(frozen=True)
class BedInterval:
    """One BED line: ``start`` 0-based, ``end`` exclusive; ``strand`` '+', '-' or '.'; ``line`` its line number."""

    chrom: str
    start: int
    end: int
    label: str
    strand: str
    line: int

    @property
    def id(self) -> str:
        return f"{self.chrom}:{self.start}-{self.end}({self.strand})"


def read_bed(path: str | Path, label_column: int = 4) -> list[BedInterval]:
    """Intervals of a BED file, labelled by column ``label_column`` (1-based; 4 is BED's name column); the strand
    is column 6 when present, else '.'. ``track``/``browser``/``#`` lines are skipped. Malformed coordinates,
    a missing label column and a repeated interval raise ValueError naming the file and line."""
    path = Path(path)
    if isinstance(label_column, bool) or not isinstance(label_column, int) or label_column < 4:
        raise ValueError(f"label_column must be a column number >= 4 (BED's name column), got {label_column!r}")
    try:
        with open_text(path) as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read as a BED file ({error})") from None
    intervals, seen = [], {}
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith(("#", "track", "browser")):
            continue
        fields = line.rstrip("\n").split("\t") if "\t" in line else line.split()
        if len(fields) < label_column:
            raise ValueError(f"{path}: line {number}: {len(fields)} columns, no label column {label_column}")
        try:
            start, end = int(fields[1]), int(fields[2])
        except ValueError:
            raise ValueError(
                f"{path}: line {number}: start/end {fields[1]!r}, {fields[2]!r} are not integers"
            ) from None
        strand = fields[5] if len(fields) >= 6 else "."
        if not 0 <= start < end or strand not in ("+", "-", ".") or not fields[label_column - 1].strip():
            raise ValueError(f"{path}: line {number}: need 0 <= start < end, strand +/-/. and a label: {line[:80]!r}")
        interval = BedInterval(fields[0], start, end, fields[label_column - 1].strip(), strand, number)
        if interval.id in seen:
            raise ValueError(f"{path}: line {number}: interval {interval.id} repeats line {seen[interval.id]}")
        seen[interval.id] = number
        intervals.append(interval)
    if not intervals:
        raise ValueError(f"{path}: no BED intervals")
    return intervals


def bed_sequences(intervals: Iterable[BedInterval], reference: Mapping[str, str]) -> list[LabelledSequence]:
    """``(id, sequence, label)`` per interval: bases [start, end) of its chromosome, reverse-complemented on the '-'
    strand, letters other than ACGT (IUPAC codes) as N. An unknown chromosome or an interval past its end raises."""
    records = []
    for interval in intervals:
        chromosome = reference.get(interval.chrom)
        if chromosome is None:
            raise ValueError(f"BED line {interval.line}: chromosome {interval.chrom!r} is not in the reference")
        if interval.end > len(chromosome):
            raise ValueError(f"BED line {interval.line}: {interval.id} ends past {interval.chrom} "
                             f"({len(chromosome)} bases)")  # fmt: skip
        sequence = _NON_ACGT.sub("N", chromosome[interval.start : interval.end].upper())
        records.append((interval.id, reverse_complement(sequence) if interval.strand == "-" else sequence,
                        interval.label))  # fmt: skip
    return records


def read_reference(path: str | Path, indexed: bool | None = None) -> Mapping[str, str]:
    """Chromosome name (the header's first word) -> uppercase sequence, from a plain or gzipped FASTA. A plain file
    is read through its ``.fai`` index (``fasta.IndexedFasta``: a slice reads only its bases, so a 3 GB reference is
    never loaded whole) when ``pyfaidx`` is installed (``indexed=None``) or when ``indexed=True``; a gzipped file
    (told by its first bytes, whatever its name: the index cannot seek in it unless it is bgzipped) is read whole,
    and so are a plain file named ``.gz`` or ``.bgz``, which pyfaidx would take for bgzip, and one whose lines end
    in a lone CR (old Mac), which it would read as one header line. A name that repeats is
    refused either way (``fasta_format.named_records``, naming both lines; the index, naming the key)."""
    path = Path(path)
    if indexed is None:
        indexed = (not is_gzipped(path) and path.suffix.lower() not in BGZIP_SUFFIXES and not has_lone_cr(path)
                   and importlib.util.find_spec("pyfaidx") is not None)  # fmt: skip
    if indexed:
        return IndexedFasta(path)
    records = fasta_records(path, fold_case=True, keep_empty=True)  # any letters: IUPAC codes are no error here
    return {name: sequence for _, name, sequence in named_records(path, records)}


def write_labelled_fasta(records: Iterable[LabelledSequence], folder: str | Path) -> Path:
    """Write ``folder/sequences.fa`` and ``folder/labels.tsv`` (``id<TAB>label`` with a header row) as one unit:
    both go into a temporary sibling folder that is renamed into place, so a failure leaves no half-written folder
    (an existing one is replaced only after the new one is complete). Returns ``folder``."""
    folder = Path(folder)
    records = list(records)
    if not records:
        raise ValueError(f"no records to write to {folder}")

    def write(temporary: Path) -> None:
        temporary.mkdir()
        sequences_file, labels_file = LABELLED_FASTA_FILES
        write_fasta(((record_id, sequence) for record_id, sequence, _ in records), temporary / sequences_file)
        lines = ["id\tlabel", *(f"{record_id}\t{label}" for record_id, _, label in records)]
        (temporary / labels_file).write_text("\n".join(lines) + "\n", encoding="utf-8")

    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}.") as scratch:
        fresh = Path(scratch) / "new"
        write(fresh)
        if folder.exists():  # a rename cannot land on a non-empty folder: move the old one aside (dropped on exit)
            folder.rename(Path(scratch) / "old")
        fresh.rename(folder)
    return folder


def load_bed_classification(
    bed_path: str | Path, reference_path: str | Path, *, label_column: int = 4, **options
) -> DataBundle:
    """A ``fasta.load_fasta_classification`` DataBundle of the labelled BED intervals cut from the reference
    (``options``: its fractions, seed, reverse_complement_augment, max_length); ``splits`` names the BED file."""
    records = bed_sequences(read_bed(bed_path, label_column), read_reference(reference_path))
    with tempfile.TemporaryDirectory(prefix="markovformer-bed-") as folder:
        write_labelled_fasta(records, Path(folder) / "bed")
        bundle = load_fasta_classification(Path(folder) / "bed/sequences.fa", Path(folder) / "bed/labels.tsv",
                                           **options)  # fmt: skip
    bundle.splits.update(bed=str(bed_path), reference=str(reference_path), label_column=label_column)
    return bundle


# The recipes: Debian package, member file, records. Each writes through write_labelled_fasta.

MLBENCH = ("r-cran-mlbench", "usr/lib/R/site-library/mlbench/data/DNA.rda")
KERNLAB = ("r-cran-kernlab", "usr/lib/R/site-library/kernlab/data/promotergene.rda")
BIOSTRINGS = ("r-bioc-biostrings", "usr/lib/R/site-library/Biostrings/extdata/dm3_upstream2000.fa.gz")


def prepare_splice(out_folder: str | Path) -> Path:
    """The UCI splice-junction records (``splice_records``), deduplicated, as ``sequences.fa`` + ``labels.tsv`` in
    ``out_folder``: of mlbench's 3,186 records 185 repeat an earlier sequence and one sequence carries two labels,
    leaving 3,000 (EI 679, IE 669, N 1,652)."""
    records = _records_from_rda(*MLBENCH, "DNA", splice_records)
    return write_labelled_fasta(deduplicate(records)[0], out_folder)


def prepare_promoters(out_folder: str | Path) -> Path:
    """The UCI E. coli promoter records (``promoter_records``: 53 promoters, 53 non-promoters) in ``out_folder``."""
    return write_labelled_fasta(_records_from_rda(*KERNLAB, "promotergene", promoter_records), out_folder)


def prepare_drosophila_promoters(out_folder: str | Path, window: int = 200) -> Path:
    """Promoter vs background windows of dm3 (``drosophila_promoter_records``) in ``out_folder``."""
    package, member = BIOSTRINGS
    with unpacked_debian_package(package) as root:
        upstream = fasta_records(package_file(root, member, package), fold_case=True, keep_empty=True)
        records, _ = drosophila_promoter_records(((header, bases) for _, header, bases in upstream), window)
    return write_labelled_fasta(records, out_folder)


def _records_from_rda(package: str, member: str, frame: str, parse) -> list[LabelledSequence]:
    with unpacked_debian_package(package) as root:
        return parse(read_r_data_frame(package_file(root, member, package), frame))

"""Genomics recipes and readers: StatLog one-hot DNA, the UCI splice and promoter frames (R .rda files read with
rdata), the Drosophila promoter construction, BED intervals on a reference, the two-file output folder, and the
recipes run against fake apt-get/dpkg."""

from __future__ import annotations

import gzip
import importlib.util
import random

import numpy as np
import pytest
import torch
from debian_fakes import fake_debian

from markovformer.data.readers.fasta import read_fasta, read_labels, reverse_complement
from markovformer.data.recipes.genomics import (
    BIOSTRINGS,
    KERNLAB,
    MLBENCH,
    bed_sequences,
    decode_statlog_dna,
    deduplicate,
    drosophila_promoter_records,
    encode_statlog_dna,
    load_bed_classification,
    prepare_drosophila_promoters,
    prepare_promoters,
    prepare_splice,
    promoter_records,
    read_bed,
    read_r_data_frame,
    read_reference,
    splice_records,
    write_labelled_fasta,
)
from markovformer.data.sources import DATA_SOURCES, source_tasks


def _random_dna(rng: random.Random, length: int) -> str:
    return "".join(rng.choice("ACGT") for _ in range(length))


def _splice_fixture() -> list[tuple[str, str]]:
    """(sequence, class) built as splice sites are: EI = 30 exon bases then GT..., IE = ...AG then 30 exon bases."""
    rng = random.Random(0)
    donor = _random_dna(rng, 30) + "GT" + _random_dna(rng, 28)
    acceptor = _random_dna(rng, 28) + "AG" + _random_dna(rng, 30)
    return [(donor, "ei"), (acceptor, "ie"), (_random_dna(rng, 60), "n"), (donor, "ei"), (acceptor, "n")]


def _splice_columns(fixture) -> dict[str, list[str]]:
    bits = encode_statlog_dna([sequence for sequence, _ in fixture])
    columns = {f"V{i + 1}": [str(int(b)) for b in bits[:, i]] for i in range(180)}
    columns["Class"] = [label for _, label in fixture]
    return columns


def test_statlog_code_is_the_documented_one_and_round_trips():
    assert encode_statlog_dna(["ACGT"]).tolist() == [[1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]]
    rng = random.Random(1)
    sequences = [_random_dna(rng, 60) for _ in range(20)]
    assert decode_statlog_dna(encode_statlog_dna(sequences)) == sequences


@pytest.mark.parametrize("bad", [[1, 1, 0], [0, 2, 0]])
def test_statlog_rejects_a_triple_that_is_no_base(bad):
    bits = encode_statlog_dna(["ACGT"])
    bits[0, 3:6] = bad
    with pytest.raises(ValueError, match=r"record 0, base 2: .* is no base code"):
        decode_statlog_dna(bits)


def test_splice_records_decode_the_sites_of_a_fixture_built_that_way():
    fixture = _splice_fixture()
    records = splice_records(_splice_columns(fixture))
    assert [(sequence, label) for _, sequence, label in records] == [(s, c.upper()) for s, c in fixture]
    assert [record_id for record_id, _, _ in records] == [f"splice_{i}" for i in range(1, 6)]
    donor, acceptor = records[0][1], records[1][1]
    assert donor[30:32] == "GT" and acceptor[28:30] == "AG"  # bases 31-32 and 29-30, around the boundary


def test_splice_records_reject_unknown_classes_and_missing_columns():
    columns = _splice_columns(_splice_fixture())
    with pytest.raises(ValueError, match="unknown splice class 'x'"):
        splice_records({**columns, "Class": ["x"] * 5})
    del columns["V7"]
    with pytest.raises(ValueError, match="lacks column 'V7'"):
        splice_records(columns)


def _promoter_columns(rows: list[tuple[str, str]]) -> dict[str, list[str]]:
    columns = {"Class": [label for label, _ in rows]}
    for i in range(57):
        columns[f"V{i + 2}"] = [sequence[i].lower() for _, sequence in rows]
    return columns


def test_promoter_records_join_the_base_columns_in_order():
    rng = random.Random(2)
    rows = [("+", _random_dna(rng, 57)), ("-", _random_dna(rng, 57))]
    records = promoter_records(_promoter_columns(rows))
    assert records == [("promoter_1", rows[0][1], "promoter"), ("promoter_2", rows[1][1], "non-promoter")]
    with pytest.raises(ValueError, match="row 1: class '\\?'"):
        promoter_records(_promoter_columns([("?", rows[0][1])]))


def test_deduplicate_keeps_first_occurrences_and_drops_conflicts():
    records = [("a", "ACGT", "x"), ("b", "ACGT", "x"), ("c", "GGGG", "x"), ("d", "GGGG", "y"), ("e", "TTTT", "y")]
    kept, counts = deduplicate(records)
    assert kept == [("a", "ACGT", "x"), ("e", "TTTT", "y")]
    assert counts == {"records": 5, "kept": 2, "conflicting_sequences": 1}


def _rda_bytes(tmp_path, name: str, columns: dict[str, list[str]]) -> bytes:
    pandas = pytest.importorskip("pandas")
    rdata = pytest.importorskip("rdata")
    frame = pandas.DataFrame(
        {key: pandas.Categorical(values) for key, values in columns.items()},
        index=pandas.RangeIndex(1, len(next(iter(columns.values()))) + 1),
    )
    path = tmp_path / f"{name}.rda"
    rdata.write_rda(str(path), {name: frame})
    return path.read_bytes()


def test_read_r_data_frame_gives_factor_levels_as_strings(tmp_path):
    columns = _splice_columns(_splice_fixture())
    (tmp_path / "DNA.rda").write_bytes(_rda_bytes(tmp_path, "DNA", columns))
    read = read_r_data_frame(tmp_path / "DNA.rda", "DNA")
    assert read[""] == ["1", "2", "3", "4", "5"]
    assert {key: value for key, value in read.items() if key} == columns
    with pytest.raises(ValueError, match="no object 'promotergene'"):
        read_r_data_frame(tmp_path / "DNA.rda", "promotergene")


# The Drosophila construction on a synthetic genome: UCSC regions are the `size` bases before each TSS on the
# transcript's strand (minus-strand ones reverse-complemented), headers give 1-based inclusive genome spans.


def _upstream_record(genome: str, chrom: str, name: str, tss: int, strand: str, size: int) -> tuple[str, str]:
    """The UCSC upstream record of a transcript starting at 1-based genome position ``tss``."""
    if strand == "f":
        start, end = tss - size, tss - 1
        sequence = genome[start - 1 : end]
    else:
        start, end = tss + 1, tss + size
        sequence = reverse_complement(genome[start - 1 : end])
    return f"{name}_up_{size}_{chrom}_{start}_{strand} {chrom}:{start}-{end}", sequence


def test_drosophila_windows_touch_the_tss_and_sit_far_upstream():
    rng = random.Random(3)
    genome = _random_dna(rng, 400)
    upstream = [
        _upstream_record(genome, "chr1", "NM_1", 101, "f", 40),  # promoter 91..100, background 61..70
        _upstream_record(genome, "chr1", "NM_2", 300, "r", 40),  # promoter 301..310, background 331..340
    ]
    records, counts = drosophila_promoter_records(upstream, window=10)
    assert records == [
        ("NM_1_chr1_61_f_tss", genome[90:100], "promoter"),
        ("NM_2_chr1_301_r_tss", reverse_complement(genome[300:310]), "promoter"),
        ("NM_1_chr1_61_f_far", genome[60:70], "background"),
        ("NM_2_chr1_301_r_far", reverse_complement(genome[330:340]), "background"),
    ]
    assert counts["kept"] == 4 and counts["background_overlapping_a_promoter"] == 0


def test_drosophila_drops_overlaps_ambiguous_windows_short_regions_and_repeats():
    rng = random.Random(4)
    genome = _random_dna(rng, 400)
    genome = genome[:195] + "N" + genome[196:]
    upstream = [
        _upstream_record(genome, "chr1", "NM_1", 101, "f", 40),  # promoter 91..100
        _upstream_record(genome, "chr1", "NM_1b", 101, "f", 40),  # same TSS: same windows, kept once
        _upstream_record(genome, "chr1", "NM_2", 39, "r", 60),  # background 90..99 overlaps NM_1's promoter
        _upstream_record(genome, "chr1", "NM_3", 231, "f", 40),  # background 191..200 holds the N
        ("NM_4_up_40_chr1_-5_f chr1:-5-34", genome[:34]),  # cut short by the chromosome end
    ]
    records, counts = drosophila_promoter_records(upstream, window=10)
    ids = [record_id for record_id, _, _ in records]
    assert ids == ["NM_1_chr1_61_f_tss", "NM_2_chr1_40_r_tss", "NM_3_chr1_191_f_tss", "NM_1_chr1_61_f_far"]
    assert counts["background_overlapping_a_promoter"] == 1
    assert counts["windows_with_n"] == 1 and counts["regions_skipped_short"] == 1
    with pytest.raises(ValueError, match="lacks the 'NAME_up_N"):
        drosophila_promoter_records([("chr1 somewhere", "ACGT")])


def test_a_reference_read_whole_reads_any_letters_and_rejects_text_before_a_header(tmp_path):
    path = tmp_path / "ref.fa"
    path.write_text(">a x\nacgR\n\ntt\n>b\nG\n")
    assert read_reference(path, indexed=False) == {"a": "ACGRTT", "b": "G"}
    path.write_text("ACGT\n>a\nA\n")
    with pytest.raises(ValueError, match=f"^{path}: line 1: sequence text 'ACGT' comes before the first '>'"):
        read_reference(path, indexed=False)


@pytest.mark.parametrize("compressed", [False, True])
def test_a_reference_header_with_no_name_is_refused_naming_its_line(tmp_path, compressed):
    """A header that is just '>' (or '>' and spaces) raised a bare IndexError from the whole-file read; it is
    refused as read_fasta refuses it, naming the file and the line of the text."""
    path = tmp_path / ("ref.fa.gz" if compressed else "ref.fa")
    text = b">a\nACGT\n>  \nGG\n"
    path.write_bytes(gzip.compress(text) if compressed else text)
    with pytest.raises(ValueError, match=f"^{path}: line 3: header '>' has no record id$"):
        read_reference(path, indexed=False)


@pytest.mark.parametrize("compressed", [False, True])
def test_a_reference_naming_a_chromosome_twice_is_refused_naming_both_lines(tmp_path, compressed):
    """The whole-file read kept the last record of a repeated name, silently ({'a': 'TT', 'b': 'G'} here), where
    read_fasta and the index refuse the file: which of the two a BED interval was cut from was a guess."""
    path = tmp_path / ("ref.fa.gz" if compressed else "ref.fa")
    text = b">a x\nAC\n>b\nG\n>a y\nTT\n"
    path.write_bytes(gzip.compress(text) if compressed else text)
    with pytest.raises(ValueError, match=f"^{path}: line 5: record id 'a' repeats line 1$"):
        read_reference(path, indexed=False)


# BED


def _reference(tmp_path, compressed: bool):
    rng = random.Random(5)
    chromosomes = {"chr1": _random_dna(rng, 50) + "RYKM" + _random_dna(rng, 16), "chr2": _random_dna(rng, 30)}
    text = "".join(f">{name} description\n{seq[:40]}\n{seq[40:]}\n" for name, seq in chromosomes.items())
    path = tmp_path / ("genome.fa.gz" if compressed else "genome.fa")
    path.write_bytes(gzip.compress(text.encode()) if compressed else text.encode())
    return path, chromosomes


BED = (
    "track name=test\n# comment\n"
    "chr1\t10\t20\tenhancer\t0\t+\n"
    "chr1\t10\t20\tsilencer\t0\t-\n"
    "chr2\t0\t30\tenhancer\n"
    "chr1\t45\t58\tother\t0\t.\n"
)


@pytest.mark.parametrize("compressed", [False, True])
def test_bed_intervals_cut_the_right_bases_on_either_strand(tmp_path, compressed):
    reference_path, chromosomes = _reference(tmp_path, compressed)
    assert read_reference(reference_path, indexed=False) == chromosomes
    (tmp_path / "regions.bed").write_text(BED)
    intervals = read_bed(tmp_path / "regions.bed")
    assert [(i.chrom, i.start, i.end, i.strand, i.label, i.line) for i in intervals] == [
        ("chr1", 10, 20, "+", "enhancer", 3), ("chr1", 10, 20, "-", "silencer", 4),
        ("chr2", 0, 30, ".", "enhancer", 5), ("chr1", 45, 58, ".", "other", 6),
    ]  # fmt: skip
    chr1, chr2 = chromosomes["chr1"], chromosomes["chr2"]
    expected = [
        ("chr1:10-20(+)", chr1[10:20], "enhancer"),
        ("chr1:10-20(-)", reverse_complement(chr1[10:20]), "silencer"),
        ("chr2:0-30(.)", chr2, "enhancer"),
        ("chr1:45-58(.)", chr1[45:50] + "NNNN" + chr1[54:58], "other"),  # IUPAC codes read as N
    ]
    assert bed_sequences(intervals, read_reference(reference_path)) == expected
    assert bed_sequences(intervals, read_reference(reference_path, indexed=False)) == expected


def test_a_windows_saved_reference_and_bed_file_read_as_their_unix_twins(tmp_path):
    """A byte-order mark and CRLF line ends (Notepad, Excel): the mark was read as text, so the reference's first
    line was 'sequence text before the first header' and the BED file's first chromosome '\ufeffchr1', no
    chromosome of the reference; the index, which cannot skip a mark, says so and how to remove it."""
    reference_path, chromosomes = _reference(tmp_path, compressed=False)
    windows = b"\xef\xbb\xbf" + reference_path.read_bytes().replace(b"\n", b"\r\n")
    (tmp_path / "windows.fa.gz").write_bytes(gzip.compress(windows))
    assert read_reference(tmp_path / "windows.fa.gz") == chromosomes
    (tmp_path / "windows.bed").write_bytes(b"\xef\xbb\xbf" + BED.encode().replace(b"\n", b"\r\n"))
    (tmp_path / "unix.bed").write_text(BED)
    assert read_bed(tmp_path / "windows.bed") == read_bed(tmp_path / "unix.bed")
    if importlib.util.find_spec("pyfaidx") is not None:
        (tmp_path / "windows.fa").write_bytes(windows)
        with pytest.raises(ValueError, match=r"windows\.fa: begins with a UTF-8 byte-order mark, which its \.fai "
                                             r"index cannot skip: remove it \(sed -i '1s/\^\\xEF\\xBB\\xBF//' "):
            read_reference(tmp_path / "windows.fa", indexed=True)


def test_an_old_mac_reference_reads_as_its_unix_twin_and_its_index_is_refused(tmp_path):
    """Lone-CR line ends (old Mac files): pyfaidx's index read the whole file as one header line, a reference of one
    empty chromosome ({'chr1': ''}), and BED intervals then 'ended past chr1 (0 bases)'. Chosen by read_reference
    (indexed=None), such a file is read whole, as its Unix twin; asked to be indexed, it is refused saying why."""
    reference_path, chromosomes = _reference(tmp_path, compressed=False)
    path = tmp_path / "mac.fa"
    path.write_bytes(reference_path.read_bytes().replace(b"\n", b"\r"))
    assert read_reference(path) == chromosomes
    if importlib.util.find_spec("pyfaidx") is not None:
        with pytest.raises(ValueError, match=rf"^{path}: ends its lines with a lone carriage return \(old Mac\), "
                                             r"which its \.fai index cannot read: read it whole \(indexed=False\), "
                                             r"or convert it \(tr '\\r' '\\n'"):  # fmt: skip
            read_reference(path, indexed=True)
        assert not (tmp_path / "mac.fa.fai").exists()


def test_a_gzipped_reference_is_read_whole_whatever_its_name(tmp_path):
    """indexed=None chose the index by the name: a gzipped file named .fa went to pyfaidx, which failed on its
    compressed bytes ("cannot index as a FASTA file ('utf-8' codec can't decode byte 0x8b ..."). Its first bytes
    decide now; a plain file named .gz is still read whole (pyfaidx would take it for bgzip)."""
    pytest.importorskip("pyfaidx", reason="without pyfaidx every reference is read whole")
    reference_path, chromosomes = _reference(tmp_path, compressed=False)
    (tmp_path / "gzipped.fa").write_bytes(gzip.compress(reference_path.read_bytes()))
    (tmp_path / "plain.fa.gz").write_bytes(reference_path.read_bytes())
    for name in ("gzipped.fa", "plain.fa.gz"):
        reference = read_reference(tmp_path / name)
        assert isinstance(reference, dict) and reference == chromosomes, name
        assert not (tmp_path / f"{name}.fai").exists()


def test_a_gzipped_reference_asked_to_be_indexed_is_refused_saying_it_is_gzipped(tmp_path):
    """indexed=True on a gzipped file failed as "cannot index as a FASTA file ('utf-8' codec can't decode byte 0x8b
    ...)" when named .fa, and as "BioPython >= 1.73 must be installed to read block gzip files" (an ImportError)
    when named .gz, neither saying that it is gzipped nor what to do."""
    pytest.importorskip("pyfaidx", reason="the indexed reference needs pyfaidx (the data extra)")
    reference_path, chromosomes = _reference(tmp_path, compressed=False)
    for name in ("gzipped.fa", "gzipped.fa.gz"):
        path = tmp_path / name
        path.write_bytes(gzip.compress(reference_path.read_bytes()))
        with pytest.raises(ValueError, match=rf"^{path}: is gzipped, and its \.fai index reads only a plain FASTA: "
                                             r"read it whole \(indexed=False\), or decompress it \(gunzip\) and "
                                             r"index that$"):  # fmt: skip
            read_reference(path, indexed=True)
        assert not (tmp_path / f"{name}.fai").exists()
        assert read_reference(path, indexed=False) == chromosomes  # the way out it names


def test_a_plain_reference_named_gz_asked_to_be_indexed_is_refused_saying_its_name_misleads(tmp_path):
    """indexed=True on a plain FASTA named .gz or .bgz raised pyfaidx's ImportError "BioPython >= 1.73 must be
    installed to read block gzip files": pyfaidx reads such a name as bgzip whatever its bytes."""
    pytest.importorskip("pyfaidx", reason="the indexed reference needs pyfaidx (the data extra)")
    reference_path, chromosomes = _reference(tmp_path, compressed=False)
    for suffix in (".gz", ".BGZ"):
        path = tmp_path / f"plain.fa{suffix}"
        path.write_bytes(reference_path.read_bytes())
        with pytest.raises(ValueError, match=rf"^{path}: is a plain FASTA named '\{suffix}', which its \.fai index "
                                             rf"reads as bgzip: read it whole \(indexed=False\), or rename it without "
                                             rf"'\{suffix}'$"):  # fmt: skip
            read_reference(path, indexed=True)
        assert read_reference(path, indexed=False) == chromosomes  # the way out it names


def test_intervals_read_through_the_index_equal_slices_of_the_whole_file(tmp_path):
    pytest.importorskip("pyfaidx", reason="the indexed reference needs pyfaidx (the data extra)")
    generator = np.random.default_rng(0)
    chromosomes = {f"chr{i}": "".join(generator.choice(list("ACGTNacgtRY"), size=n))
                   for i, n in enumerate([1, 59, 60, 61, 1000, 4321])}  # fmt: skip
    text = "".join(f">{name} some description\n" + "".join(seq[k : k + 60] + "\n" for k in range(0, len(seq), 60))
                   for name, seq in chromosomes.items())  # fmt: skip
    (tmp_path / "ref.fa").write_text(text, encoding="ascii")
    indexed, whole = read_reference(tmp_path / "ref.fa", indexed=True), read_reference(tmp_path / "ref.fa", False)
    assert isinstance(whole, dict) and not isinstance(indexed, dict) and sorted(indexed) == sorted(whole)
    for name, sequence in whole.items():
        assert len(indexed[name]) == len(sequence) == len(chromosomes[name])
        for _ in range(20):
            start = int(generator.integers(0, len(sequence)))
            stop = int(generator.integers(start + 1, len(sequence) + 1))
            assert indexed[name][start:stop] == sequence[start:stop] == chromosomes[name][start:stop].upper()
    assert (tmp_path / "ref.fa.fai").is_file()  # the index, built once beside the file


def test_bed_label_column_and_errors(tmp_path):
    (tmp_path / "a.bed").write_text("chr1\t1\t5\tname\t7\t+\n")
    assert read_bed(tmp_path / "a.bed", label_column=5)[0].label == "7"
    cases = {
        "chr1\t5\t5\tx\n": "need 0 <= start < end",
        "chr1\ta\t5\tx\n": "start/end 'a', '5' are not integers",
        "chr1\t1\t5\n": "no label column 4",
        "chr1\t1\t5\tx\nchr1\t1\t5\ty\n": "line 2: interval chr1:1-5\\(.\\) repeats line 1",
        "chr1\t1\t5\tx\t0\t*\n": "strand",
    }
    for text, message in cases.items():
        (tmp_path / "b.bed").write_text(text)
        with pytest.raises(ValueError, match=message):
            read_bed(tmp_path / "b.bed")
    (tmp_path / "c.bed").write_text("chr9\t1\t5\tx\nchr1\t1\t500\tx\n")
    intervals = read_bed(tmp_path / "c.bed")
    with pytest.raises(ValueError, match="chromosome 'chr9' is not in the reference"):
        bed_sequences(intervals[:1], {"chr1": "ACGT" * 10})
    with pytest.raises(ValueError, match="ends past chr1 \\(40 bases\\)"):
        bed_sequences(intervals[1:], {"chr1": "ACGT" * 10})


def test_bed_source_builds_a_classification_bundle(tmp_path):
    reference_path, chromosomes = _reference(tmp_path, compressed=True)
    lines = [f"chr2\t{i}\t{i + 8}\t{'yes' if i % 2 else 'no'}\t0\t{'+-'[i % 2]}" for i in range(20)]
    (tmp_path / "r.bed").write_text("\n".join(lines) + "\n")
    source = DATA_SOURCES["bed"](
        path=str(tmp_path / "r.bed"), reference=str(reference_path), fractions=(0.5, 0.25, 0.25)
    )
    bundle = source.build(seed=0)
    assert source_tasks("bed") == ("sequence_classification",)
    assert bundle.info["label_names"] == ["no", "yes"] and bundle.splits["bed"] == str(tmp_path / "r.bed")
    assert sorted(bundle.splits["train"] + bundle.splits["val"] + bundle.splits["test"]) == sorted(
        f"chr2:{i}-{i + 8}({'+-'[i % 2]})" for i in range(20)
    )
    direct = load_bed_classification(tmp_path / "r.bed", reference_path, fractions=(1.0, 0.0, 0.0))
    index = direct.splits["train"].index("chr2:3-11(-)")
    letters = "".join("ACGTN"[i - 1] for i in direct.train[index]["input_ids"].tolist())
    assert letters == reverse_complement(chromosomes["chr2"][3:11]) and direct.train[index]["labels"] == torch.tensor(1)


# The output folder


def test_labelled_fasta_folder_round_trips_and_replaces_whole(tmp_path):
    records = [("r1", "ACGT" * 20, "EI"), ("r2", "GGNA", "N")]
    folder = write_labelled_fasta(records, tmp_path / "data" / "set")
    assert read_fasta(folder / "sequences.fa") == [(i, s) for i, s, _ in records]
    assert read_labels(folder / "labels.tsv", ["r1", "r2"]) == {"r1": "EI", "r2": "N"}
    write_labelled_fasta([("r3", "TTTT", "IE")], folder)
    assert read_fasta(folder / "sequences.fa") == [("r3", "TTTT")]
    with pytest.raises(ValueError, match="must be non-empty with no whitespace"):
        write_labelled_fasta([("bad id", "ACGT", "x")], folder)
    assert read_fasta(folder / "sequences.fa") == [("r3", "TTTT")]  # the old folder survives the failure
    assert sorted(path.name for path in (tmp_path / "data").iterdir()) == ["set"]  # no temporary left over


# The recipes against fake Debian tools


def test_prepare_splice_writes_the_deduplicated_folder(tmp_path, monkeypatch):
    fixture = _splice_fixture()
    rda = _rda_bytes(tmp_path, "DNA", _splice_columns(fixture))
    monkeypatch.setenv("PATH", fake_debian(tmp_path / "tools", {MLBENCH[0]: {MLBENCH[1]: rda}}))
    folder = prepare_splice(tmp_path / "out" / "splice")
    # record 4 repeats record 1 (dropped); record 5 repeats record 2's sequence with another class (both dropped)
    assert read_fasta(folder / "sequences.fa") == [("splice_1", fixture[0][0]), ("splice_3", fixture[2][0])]
    assert read_labels(folder / "labels.tsv", ["splice_1", "splice_3"]) == {"splice_1": "EI", "splice_3": "N"}


def test_prepare_promoters_writes_every_record(tmp_path, monkeypatch):
    rng = random.Random(6)
    rows = [("+", _random_dna(rng, 57)), ("-", _random_dna(rng, 57))]
    rda = _rda_bytes(tmp_path, "promotergene", _promoter_columns(rows))
    monkeypatch.setenv("PATH", fake_debian(tmp_path / "tools", {KERNLAB[0]: {KERNLAB[1]: rda}}))
    folder = prepare_promoters(tmp_path / "promoters")
    assert read_fasta(folder / "sequences.fa") == [("promoter_1", rows[0][1]), ("promoter_2", rows[1][1])]


def test_prepare_drosophila_reads_the_gzipped_regions(tmp_path, monkeypatch):
    genome = _random_dna(random.Random(7), 5000)
    upstream = [_upstream_record(genome, "chr2L", "NM_9", 2500, "f", 2000)]
    text = "".join(f">{header}\n{sequence}\n" for header, sequence in upstream)
    tree = {BIOSTRINGS[0]: {BIOSTRINGS[1]: gzip.compress(text.encode())}}
    monkeypatch.setenv("PATH", fake_debian(tmp_path / "tools", tree))
    folder = prepare_drosophila_promoters(tmp_path / "dm")
    assert read_fasta(folder / "sequences.fa") == [
        ("NM_9_chr2L_500_f_tss", genome[2299:2499]), ("NM_9_chr2L_500_f_far", genome[499:699])
    ]  # fmt: skip


def test_failed_download_is_clear_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_debian(tmp_path / "tools", {}, failing=(MLBENCH[0],)))
    with pytest.raises(RuntimeError, match="could not download r-cran-mlbench .*Unable to locate"):
        prepare_splice(tmp_path / "out" / "splice")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_package_without_the_file_and_missing_tools_raise_runtime_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_debian(tmp_path / "tools", {KERNLAB[0]: {"usr/share/doc/x": "x"}}))
    with pytest.raises(RuntimeError, match="r-cran-kernlab package has no .*promotergene.rda"):
        prepare_promoters(tmp_path / "promoters")
    import markovformer.data.recipes.debian as debian

    monkeypatch.setattr(debian.shutil, "which", lambda tool: None)
    with pytest.raises(RuntimeError, match="needs 'apt-get'"):
        prepare_drosophila_promoters(tmp_path / "dm")
    assert not (tmp_path / "promoters").exists() and not (tmp_path / "dm").exists()

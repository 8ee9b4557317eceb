"""FASTA parsing and writing, DNA ids, reverse complements, and the classification loader's split and labels."""

from __future__ import annotations

import gzip
import random
import re
import subprocess

import pytest
import torch

from markovformer.data.collate import collate
from markovformer.data.options import option_help
from markovformer.data.readers.fasta import (
    DNA_VOCAB,
    encode_dna,
    load_fasta_classification,
    read_fasta,
    reverse_complement,
    write_fasta,
)
from markovformer.data.sources import BedSource, FastaSource
from markovformer.training.run_config import build_dataclass
from markovformer.training.trainer_config import ConfigError


def _random_dna(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(DNA_VOCAB) for _ in range(length))


def test_read_hand_written_multiline_file(tmp_path):
    path = tmp_path / "genes.fa"
    path.write_bytes(b">seq1 first gene, with a description\nACGT\nacgn\n\n>seq2\r\nTTTT\r\n\r\nGg\r\n>seq3\nN\n")
    assert read_fasta(path) == [("seq1", "ACGTACGN"), ("seq2", "TTTTGG"), ("seq3", "N")]


def test_a_gzipped_file_reads_as_the_plain_one_whatever_its_name(tmp_path):
    text = ">a first\nACGT\nnn\n>b\nGGCC\n"
    for name in ("my.fa.gz", "my.fa"):  # told by the gzip magic bytes, not the suffix
        (tmp_path / name).write_bytes(gzip.compress(text.encode()))
        assert read_fasta(tmp_path / name) == [("a", "ACGTNN"), ("b", "GGCC")]
    (tmp_path / "labels.tsv").write_text("a\tx\nb\ty\n")
    bundle = load_fasta_classification(tmp_path / "my.fa.gz", tmp_path / "labels.tsv", fractions=(1.0, 0.0, 0.0))
    sequences = {"a": [1, 2, 3, 4, 5, 5], "b": [3, 3, 2, 2]}  # A=1 C=2 G=3 T=4 N=5
    assert [example["input_ids"].tolist() for example in bundle.train] == [sequences[i] for i in bundle.splits["train"]]
    (tmp_path / "cut.fa.gz").write_bytes(gzip.compress(text.encode())[:-8])
    with pytest.raises(ValueError, match="cut.fa.gz: cannot read as a gzipped UTF-8 FASTA file"):
        read_fasta(tmp_path / "cut.fa.gz")
    (tmp_path / "latin1.fa.gz").write_bytes(gzip.compress(b">a\nACGT\n>b caf\xe9\nGG\n"))
    with pytest.raises(ValueError, match="latin1.fa.gz: cannot read as a gzipped UTF-8 FASTA file"):
        read_fasta(tmp_path / "latin1.fa.gz")


def test_a_byte_order_mark_is_no_part_of_the_first_header_or_id(tmp_path):
    """Excel's and Notepad's UTF-8 files begin with a BOM: the FASTA's first line read as sequence text before any
    header, the labels file's first id as no record's."""
    bom = b"\xef\xbb\xbf"
    (tmp_path / "a.fa").write_bytes(bom + b">a\nACGT\n>b\nGG\n")
    (tmp_path / "a.tsv").write_bytes(bom + b"a\tx\nb\ty\n")
    (tmp_path / "plain.fa").write_bytes(b">a\nACGT\n>b\nGG\n")
    assert read_fasta(tmp_path / "a.fa") == read_fasta(tmp_path / "plain.fa")
    bundle = load_fasta_classification(tmp_path / "a.fa", tmp_path / "a.tsv", fractions=(1.0, 0.0, 0.0))
    assert bundle.info["label_names"] == ["x", "y"]


def test_write_read_round_trip(tmp_path):
    rng = random.Random(0)
    records = [(f"r{i}", _random_dna(rng, rng.randint(1, 150))) for i in range(12)]
    path = tmp_path / "out.fa"
    write_fasta(records, path, line_width=37)
    assert read_fasta(path) == records
    assert max(len(line) for line in path.read_text().splitlines()) <= 37


def test_reading_holds_the_file_about_three_times_at_most(tmp_path):
    """The file's bytes, its text, its lines and the joined records are each about as large as the file: held all
    at once (with every record's lines until the end), reading peaked at seven times the file's size."""
    import tracemalloc

    rng = random.Random(3)
    records = [(f"r{i}", "".join(rng.choices("ACGT", k=rng.randint(100, 900)))) for i in range(2000)]
    path = tmp_path / "many.fa"
    write_fasta(records, path)
    tracemalloc.start()
    try:
        assert read_fasta(path) == records
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * path.stat().st_size, peak / path.stat().st_size


def test_reading_one_long_record_holds_the_file_about_three_times_at_most(tmp_path):
    """A genome's FASTA is often one record (a chromosome): its uppercased lines were held beside every line of the
    file until the record was joined, a peak of 4.8 times the file's size where many short records peak at 3."""
    import tracemalloc

    rng = random.Random(4)
    sequence = "".join(rng.choices("ACGT", k=300_000))
    path = tmp_path / "chromosome.fa"
    write_fasta([("chr1", sequence)], path)
    tracemalloc.start()
    try:
        assert read_fasta(path) == [("chr1", sequence)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3.5 * path.stat().st_size, peak / path.stat().st_size


def test_bad_letter_names_record_line_and_letter(tmp_path):
    path = tmp_path / "genes.fa"
    path.write_text(">seq1\nACGT\n>seq3 x\nACGT\n\nACXT\n")
    message = f"{path}: record 'seq3' line 6: letter 'X' is outside the DNA vocabulary ACGTN"
    with pytest.raises(ValueError) as error:
        read_fasta(path)
    assert str(error.value) == message


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "no FASTA records"),
        ("\n\n", "no FASTA records"),
        ("ACGT\n>a\nAC\n", "line 1: sequence text 'ACGT' comes before"),
        (">a\nAC\n>a\nGT\n", "line 3: record id 'a' repeats line 1"),
        (">a\n>b\nAC\n", "record 'a' \\(line 1\\) has an empty sequence"),
        (">\nAC\n", "line 1: header '>' has no record id"),
    ],
)
def test_malformed_files_raise(tmp_path, content, message):
    path = tmp_path / "bad.fa"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_fasta(path)


def test_encode_dna_ids():
    assert encode_dna("ACGTN").tolist() == [1, 2, 3, 4, 5]
    assert encode_dna("TTA").dtype == torch.long
    with pytest.raises(ValueError, match="'U' at offset 2"):
        encode_dna("ACUG")


def test_reverse_complement_closed_form_and_involution():
    assert reverse_complement("AACGTN") == "NACGTT"
    assert reverse_complement("") == ""
    rng = random.Random(1)
    for _ in range(20):
        sequence = _random_dna(rng, rng.randint(1, 50))
        assert reverse_complement(reverse_complement(sequence)) == sequence
        assert len(reverse_complement(sequence)) == len(sequence)
    with pytest.raises(ValueError, match="'a'"):
        reverse_complement("AaC")


@pytest.fixture()
def dataset(tmp_path):
    """30 records with labels 'promoter' / 'enhancer' / 'other' in a tab-separated file with a header."""
    rng = random.Random(2)
    records = [(f"seq{i}", _random_dna(rng, rng.randint(5, 40))) for i in range(30)]
    labels = {record_id: ["promoter", "enhancer", "other"][i % 3] for i, (record_id, _) in enumerate(records)}
    fasta_path, labels_path = tmp_path / "genes.fa", tmp_path / "labels.tsv"
    write_fasta(records, fasta_path)
    labels_path.write_text("id\tlabel\n" + "".join(f"{key}\t{value}\n" for key, value in labels.items()))
    return fasta_path, labels_path, dict(records), labels


def test_classification_split_examples_and_labels(dataset):
    fasta_path, labels_path, sequences, labels = dataset
    bundle = load_fasta_classification(fasta_path, labels_path, seed=5)
    assert bundle.info == {"vocab_size": 6, "num_labels": 3, "label_names": ["enhancer", "other", "promoter"]}
    ids = {name: bundle.splits[name] for name in ("train", "val", "test")}
    assert (len(ids["train"]), len(ids["val"]), len(ids["test"])) == (24, 3, 3)
    assert sorted(ids["train"] + ids["val"] + ids["test"]) == sorted(sequences)  # disjoint and covering
    for name in ("train", "val", "test"):
        examples = getattr(bundle, name)
        assert len(examples) == len(ids[name])
        for record_id, example in zip(ids[name], examples, strict=True):
            assert torch.equal(example["input_ids"], encode_dna(sequences[record_id]))
            assert example["labels"].dim() == 0
            assert bundle.info["label_names"][int(example["labels"])] == labels[record_id]
    assert load_fasta_classification(fasta_path, labels_path, seed=5).splits == bundle.splits
    assert load_fasta_classification(fasta_path, labels_path, seed=6).splits["train"] != ids["train"]


def test_reverse_complement_augmentation_doubles_train_only(dataset):
    fasta_path, labels_path, sequences, _ = dataset
    plain = load_fasta_classification(fasta_path, labels_path, seed=1)
    augmented = load_fasta_classification(fasta_path, labels_path, seed=1, reverse_complement_augment=True)
    assert len(augmented.train) == 2 * len(plain.train)
    for index, record_id in enumerate(plain.splits["train"]):
        original, flipped = augmented.train[2 * index], augmented.train[2 * index + 1]
        assert torch.equal(original["input_ids"], encode_dna(sequences[record_id]))
        assert torch.equal(flipped["input_ids"], encode_dna(reverse_complement(sequences[record_id])))
        assert int(original["labels"]) == int(flipped["labels"]) == int(plain.train[index]["labels"])
    for name in ("val", "test"):
        plain_part, augmented_part = getattr(plain, name), getattr(augmented, name)
        assert len(plain_part) == len(augmented_part)
        for first, second in zip(plain_part, augmented_part, strict=True):
            assert torch.equal(first["input_ids"], second["input_ids"])
            assert torch.equal(first["labels"], second["labels"])


def test_max_length_keeps_the_first_letters(dataset):
    fasta_path, labels_path, sequences, _ = dataset
    bundle = load_fasta_classification(fasta_path, labels_path, max_length=7, reverse_complement_augment=True)
    first_id = bundle.splits["train"][0]
    assert torch.equal(bundle.train[0]["input_ids"], encode_dna(sequences[first_id][:7]))
    assert torch.equal(bundle.train[1]["input_ids"], encode_dna(reverse_complement(sequences[first_id][:7])))
    assert max(len(example["input_ids"]) for example in bundle.train + bundle.val + bundle.test) == 7


def test_examples_keep_one_byte_per_base_and_collate_to_the_long_ids(dataset):
    """The examples live as long as the run: long ids would hold eight bytes a base, eight times the FASTA's size."""
    fasta_path, labels_path, sequences, _ = dataset
    bundle = load_fasta_classification(fasta_path, labels_path, reverse_complement_augment=True)
    examples = bundle.train + bundle.val + bundle.test
    assert sum(example["input_ids"].nbytes for example in examples) == sum(len(e["input_ids"]) for e in examples)
    batch = collate(bundle.val)
    padded = torch.zeros(len(bundle.val), max(len(sequences[i]) for i in bundle.splits["val"]), dtype=torch.long)
    for row, record_id in enumerate(bundle.splits["val"]):
        padded[row, : len(sequences[record_id])] = encode_dna(sequences[record_id])
    assert batch["input_ids"].dtype == torch.long and torch.equal(batch["input_ids"], padded)


def test_max_length_help_says_what_the_loader_does(dataset):
    """The fasta and bed sources cut every record to its first bases and keep them all; translation_file leaves
    long pairs out: one shared help line ("longest sequence kept") told the fasta user records were dropped."""
    fasta_path, labels_path, sequences, _ = dataset
    bundle = load_fasta_classification(fasta_path, labels_path, max_length=7)
    kept = {record_id: example for name in ("train", "val", "test")
            for record_id, example in zip(bundle.splits[name], getattr(bundle, name), strict=True)}  # fmt: skip
    assert sorted(kept) == sorted(sequences)  # no record dropped, however long
    assert all(torch.equal(kept[i]["input_ids"], encode_dna(sequences[i][:7])) for i in kept)  # each one cut
    for source in ("fasta", "bed"):
        assert "first max_length bases" in option_help(source, "max_length")
    assert "left out" in option_help("translation_file", "max_length")


@pytest.mark.parametrize("max_length", [0, -3, 2.5])
def test_a_bad_max_length_is_named_as_the_data_option(dataset, max_length):
    fasta_path, labels_path, _, _ = dataset
    with pytest.raises(ValueError, match=rf"^data\.max_length={max_length}: must be a positive int or None$"):
        load_fasta_classification(fasta_path, labels_path, max_length=max_length)


def test_comma_labels_without_header_and_numeric_label_order(tmp_path):
    fasta_path, labels_path = tmp_path / "g.fa", tmp_path / "labels.csv"
    write_fasta([("a", "ACGT"), ("b", "GGCC"), ("c", "NNAT")], fasta_path)
    labels_path.write_text("a,10\nb, 2\nc,10\n")
    bundle = load_fasta_classification(fasta_path, labels_path, fractions=(1.0, 0.0, 0.0))
    assert bundle.info["label_names"] == ["2", "10"]
    assert [int(example["labels"]) for example in bundle.train] == [1, 0, 1]


@pytest.mark.parametrize(
    "labels_text, message",
    [
        ("id\tlabel\na\tx\nc\ty\n", "FASTA record 'b' has no label"),
        ("a\tx\nc\ty\n", "FASTA record 'b' has no label$"),  # no header read: nothing to add
        ("aa\tx\nb\ty\nc\tx\n", r"FASTA record 'a' has no label \(line 1, 'aa', was read as a header line"),
        ("a\tx\nb\ty\nc\tz\nd\tz\n", "line 4: labelled id 'd' is not a FASTA record"),
        ("id\tlabel\na x\tx\nb y\ty\nc z\tz\n", "line 2: labelled id 'a x' is not a FASTA record"),  # whole headers
        (">a\tx\n>b\ty\n>c\tz\n", "line 2: labelled id '>b' is not a FASTA record"),
        ("a\tx\nb\ty\nc\tz\na\tz\n", "line 4: id 'a' was labelled on line 1"),
        ("a\tx\nb\ty\tz\nc\tz\n", "line 2: expected"),
        ("a\tx\nb\tx\nc\tx\n", "labels.tsv: every label is 'x': classification needs at least two classes"),
    ],
)
def test_label_mismatches_raise(tmp_path, labels_text, message):
    fasta_path, labels_path = tmp_path / "g.fa", tmp_path / "labels.tsv"
    write_fasta([("a", "ACGT"), ("b", "GGCC"), ("c", "NNAT")], fasta_path)
    labels_path.write_text(labels_text)
    with pytest.raises(ValueError, match=message):
        load_fasta_classification(fasta_path, labels_path)


def test_a_bad_letter_is_named_with_its_line_and_a_chromosome_no_index_holds_is_refused(tmp_path):
    from markovformer.data.recipes.genomics import bed_sequences, read_bed, read_reference

    records = [("r1", "ACGTN" * 30 + "A"), ("r2", "GATTACA"), ("r3", "T" * 121)]
    path = tmp_path / "seqs.fa"
    write_fasta(records, path, line_width=50)
    assert read_fasta(path) == records
    path.write_text(">r0\nA\n>r1 x\r\nAC \r\n\r\nGG\r\nACGU\r\n", encoding="ascii")
    with pytest.raises(ValueError, match="record 'r1' line 7: letter 'U' is outside"):
        read_fasta(path)
    pytest.importorskip("pyfaidx", reason="the indexed FASTA reader needs pyfaidx (the data extra)")
    path.write_text(">r1\nACGU\n", encoding="ascii")
    (tmp_path / "a.bed").write_text("chr9\t1\t5\tx\n")
    with pytest.raises(ValueError, match="chromosome 'chr9' is not in the reference"):
        bed_sequences(read_bed(tmp_path / "a.bed"), read_reference(path, indexed=True))


def test_a_reference_the_index_cannot_read_is_one_error_naming_it(tmp_path):
    pytest.importorskip("pyfaidx", reason="the indexed FASTA reader needs pyfaidx (the data extra)")
    from markovformer.data.readers.fasta import IndexedFasta

    path = tmp_path / "ref.fa"
    path.write_text(">a\nACGT\n>b\nACGT\n\n\n")  # pyfaidx: a RuntimeError, a traceback
    with pytest.raises(ValueError, match=f"^{path}: cannot index as a FASTA file"):
        IndexedFasta(path)


def test_the_command_a_byte_order_mark_refusal_suggests_removes_it_from_a_path_with_spaces(tmp_path):
    """The suggested sed command named the path unquoted: pasted into a shell, a path with a space was two
    arguments (sed: can't read .../my: No such file or directory) and the mark stayed."""
    pytest.importorskip("pyfaidx", reason="the indexed FASTA reader needs pyfaidx (the data extra)")
    from markovformer.data.readers.fasta import IndexedFasta

    path = tmp_path / "my genome's copy.fa"
    path.write_bytes(b"\xef\xbb\xbf>r1\nACGT\n>r2\nGG\n")
    with pytest.raises(ValueError, match="begins with a UTF-8 byte-order mark") as refused:
        IndexedFasta(path)
    message = str(refused.value)
    command = message[message.index("(sed ") + 1 : -1]
    subprocess.run(["bash", "-c", command], check=True)
    assert path.read_bytes() == b">r1\nACGT\n>r2\nGG\n"
    assert sorted(IndexedFasta(path)) == ["r1", "r2"]


@pytest.mark.parametrize(
    "content, message",
    [
        (">a\nACG\n>a desc\nACGT\n", "line 3: record id 'a' repeats line 1"),
        (">a\nACG\n> \nACGT\n", "line 3: header '>' has no record id"),
        (">a\nACG\n>b\n\n>c\nA\n", "record 'b' (line 3) has an empty sequence"),
        ("\nACG\n>a\nA\n", "line 2: sequence text 'ACG' comes before the first '>' header"),
        ("\n\n", "no FASTA records"),
    ],
)
def test_a_refused_file_is_named_with_the_line_it_is_refused_at_plain_or_gzipped(tmp_path, content, message):
    path = tmp_path / "big.fa"
    path.write_text(content)
    with pytest.raises(ValueError, match=f"^{path}: {re.escape(message)}"):
        read_fasta(path)
    path.write_bytes(gzip.compress(content.encode()))  # the line of its text
    with pytest.raises(ValueError, match=f"^{path}: {re.escape(message)}"):
        read_fasta(path)


def test_an_index_cut_short_by_a_kill_is_never_read(tmp_path, monkeypatch):
    """pyfaidx writes a FASTA's .fai in place: a kill while it wrote left an index cut at a line, which later reads
    took for a FASTA of fewer records, silently. The index is built under another name and renamed into place."""
    pyfaidx = pytest.importorskip("pyfaidx", reason="the indexed FASTA reader needs pyfaidx (the data extra)")
    from pathlib import Path

    from markovformer.data.readers.fasta import IndexedFasta

    path = tmp_path / "g.fa"
    write_fasta([("r1", "ACGT"), ("r2", "GGCC"), ("r3", "TTAA")], path)
    build = pyfaidx.Faidx.build_index

    def killed_after_one_line(self) -> None:
        build(self)
        index = Path(self.indexname)
        index.write_text(index.read_text().splitlines(keepends=True)[0])  # what the kill left written
        raise KeyboardInterrupt  # what a kill is to the code around the write

    monkeypatch.setattr(pyfaidx.Faidx, "build_index", killed_after_one_line)
    with pytest.raises(KeyboardInterrupt):
        IndexedFasta(path)
    monkeypatch.undo()
    assert sorted(IndexedFasta(path)) == ["r1", "r2", "r3"]


def test_held_out_records_with_a_training_records_bases_are_counted_and_the_run_warns(tmp_path, capsys):
    """The split is by record id, so the same bases under two ids (a repeat element, a duplicated entry, the other
    strand's read) could land in training and test: the test score was then partly memorisation, said nowhere.
    Counted per split against a set built here by hand, and the run's data line warns."""
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    rng = random.Random(3)
    unique = [_random_dna(rng, 30) for _ in range(40)]
    sequences = unique + [unique[0], reverse_complement(unique[1]), unique[2][:20] + "A" * 10, unique[3]]
    records = [(f"s{i}", sequence) for i, sequence in enumerate(sequences)]
    write_fasta(records, tmp_path / "genes.fa")
    (tmp_path / "labels.tsv").write_text("".join(f"s{i}\t{'xy'[i % 2]}\n" for i in range(len(records))))
    bundle = load_fasta_classification(tmp_path / "genes.fa", tmp_path / "labels.tsv", seed=4)
    train_bases = {dict(records)[record_id] for record_id in bundle.splits["train"]}
    expected = {}
    for split in ("val", "test"):
        count = sum(dict(records)[i] in train_bases or reverse_complement(dict(records)[i]) in train_bases
                    for i in bundle.splits[split])  # fmt: skip
        if count:
            expected[split] = count
    assert expected and bundle.info.get("repeats_training") == expected  # this seed puts copies across
    shorter = load_fasta_classification(tmp_path / "genes.fa", tmp_path / "labels.tsv", seed=4, max_length=20)
    assert sum(shorter.info["repeats_training"].values()) >= sum(expected.values())  # the 20-base prefix repeats too

    train(resolve_run_config({"task": "sequence_classification", "output_dir": str(tmp_path / "run"),
                              "model": {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2},
                              "data": {"source": "fasta", "path": str(tmp_path / "genes.fa"),
                                       "labels": str(tmp_path / "labels.tsv")},
                              "trainer": {"max_steps": 2, "batch_size": 4, "eval_every": 2, "checkpoint_every": 2,
                                          "log_every": 2, "seed": 4}}))  # fmt: skip
    assert "records repeat the bases of a training record" in capsys.readouterr().out



@pytest.mark.parametrize("source", [FastaSource, BedSource])
def test_fold_case_given_to_a_classification_source_is_refused_saying_it_reads_uppercase(source):
    """data.fold_case (the text source's: keep or fold a soft mask) given to the fasta or bed source was 'unknown key
    data.fold_case; the keys of data: ...', saying neither that these sources read acgt as ACGT always (their
    vocabulary is A/C/G/T/N) nor where the option applies. A mistyped option still gets its spelling hint."""
    with pytest.raises(ConfigError, match=r"^unknown key data\.fold_case: the fasta and bed sources read every base "
                                          r"as one of A/C/G/T/N, soft-masked lowercase as uppercase always .*; "
                                          r"data\.fold_case is the text source's, with data\.documents: fasta"):
        build_dataclass(source, {"path": "genome.fa", "fold_case": False}, "data")
    with pytest.raises(ConfigError, match=r"^unknown key data\.fractoins \(did you mean 'fractions'\?\)$"):
        build_dataclass(source, {"fractoins": [0.8, 0.1, 0.1]}, "data")


def test_the_data_line_says_how_many_records_max_length_cut(dataset, tmp_path, capsys):
    """data.max_length cut records to their first bases without a word (a 5,000-base record among 100-base ones lost
    98% of its bases, and a user who set it as a model size never learned that it cut a record); translation_file
    says how many pairs its max_length leaves out. The run's data line says how many records and bases it cut."""
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    fasta_path, labels_path, sequences, _ = dataset
    cut = sum(len(sequence) > 7 for sequence in sequences.values())
    left_out = sum(max(len(sequence) - 7, 0) for sequence in sequences.values())
    bundle = load_fasta_classification(fasta_path, labels_path, max_length=7)
    assert 0 < cut < len(sequences)  # the fixture's records are 5 to 40 bases
    assert bundle.info["cut_by_max_length"] == {"records": [cut, len(sequences)],
                                                "bases": [left_out, sum(map(len, sequences.values()))]}
    assert "cut_by_max_length" not in load_fasta_classification(fasta_path, labels_path, max_length=10**6).info
    train(resolve_run_config({"task": "sequence_classification", "output_dir": str(tmp_path / "run"),
                              "model": {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2},
                              "data": {"source": "fasta", "path": str(fasta_path), "labels": str(labels_path),
                                       "max_length": 7},
                              "trainer": {"max_steps": 1, "batch_size": 4, "warmup_steps": 1, "eval_every": 1,
                                          "checkpoint_every": 1, "log_every": 1}}))  # fmt: skip
    total = sum(map(len, sequences.values()))
    assert (f"data.max_length=7 cut {cut:,} of {len(sequences):,} records to their first 7 bases ({left_out:,} of "
            f"{total:,} bases left out)") in capsys.readouterr().out

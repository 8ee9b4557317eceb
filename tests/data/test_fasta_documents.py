"""FASTA as assemblies and editors write it: read as language-model text (data.documents=fasta: a record is its
bases, whatever the line width; data.fold_case for soft-masked repeats) and, above the size read whole, in chunks
(a byte-order mark, CRLF line ends and headers with spaces read as below)."""

from __future__ import annotations

import contextlib
import random
import re

import numpy as np
import pytest

from markovformer.data.readers import fasta_format, text_stream
from markovformer.data.readers import records as records_module
from markovformer.data.readers.fasta import read_fasta
from markovformer.data.readers.text import load_text_lm


def _soft_masked_records(count: int, seed: int = 5) -> list[tuple[str, str]]:
    """Records of 300-3,000 bases with lowercase (soft-masked repeat) stretches and runs of N, as assemblies have."""
    rng = random.Random(seed)
    records = []
    for index in range(count):
        bases = [rng.choice("ACGT") for _ in range(rng.randint(300, 3000))]
        start = rng.randrange(len(bases) - 200)
        bases[start : start + 150] = [base.lower() for base in bases[start : start + 150]]
        bases[20:40] = "N" * 20
        records.append((f"chr{index}", "".join(bases)))
    return records


def _fasta_text(records, line_width: int, newline: str = "\n") -> str:
    """The records wrapped at ``line_width`` bases, each header with a description after its id."""
    lines = []
    for record_id, sequence in records:
        lines.append(f">{record_id} assembled {len(sequence)} bp, soft-masked")
        lines += [sequence[start : start + line_width] for start in range(0, len(sequence), line_width)]
    return newline.join(lines) + newline


def _naive_stretches(sequences: list[str], budget: int) -> list[str]:
    """By definition: ``budget // 64`` bases of the records' bases joined from each of 64 evenly spaced bases,
    each stretch in pieces at the ends of the records it runs over."""
    genome, share = "".join(sequences), budget // 64
    ends = np.cumsum([len(sequence) for sequence in sequences]).tolist()
    pieces = []
    for at in ((len(genome) - share) * index // 63 for index in range(64)):
        cuts = [at, *(end for end in ends if at < end < at + share), at + share]
        pieces += [genome[begin:end] for begin, end in zip(cuts[:-1], cuts[1:], strict=True)]
    return pieces


@pytest.mark.parametrize("tokenizer, vocab_size", [("char", None), ("bpe", 320)])
def test_fasta_documents_are_the_bases_whatever_the_line_width(tmp_path, tokenizer, vocab_size):
    """A record is its bases joined, no header, no line break: read as plain text, a FASTA's newlines became
    symbols (and BPE merges), and the same genome wrapped at 60 or 80 bases gave the model other token streams.
    The store of a file wrapped at 60, at 80 or not at all is each record's bases encoded alone, then <eod>."""
    records = _soft_masked_records(20)
    stores = []
    for width in (60, 80, 10**6):
        path = tmp_path / f"genome{width}.fa"
        path.write_text(_fasta_text(records, width), encoding="utf-8")
        bundle = load_text_lm(path, tokenizer=tokenizer, vocab_size=vocab_size, seq_len=16, documents="fasta",
                              fractions=(0.6, 0.2, 0.2), cache_dir=tmp_path / "cache")  # fmt: skip
        fitted = bundle.tokenizer
        expected = [i for _, sequence in records for i in [*fitted.encode(sequence), fitted.end_of_document_id]]
        assert np.asarray(bundle.train.store.tokens).tolist() == expected
        stores.append((fitted.record(), [(part.start, part.stop) for part in (bundle.train, bundle.val, bundle.test)]))
    assert stores[0] == stores[1] == stores[2]  # the same tokenizer and the same splits too


@pytest.mark.parametrize("chunk_bytes", [1, 3, 7, 4 << 20])
def test_fasta_documents_read_in_chunks_drop_the_byte_order_mark_and_every_carriage_return(tmp_path, monkeypatch,
                                                                                           chunk_bytes):  # fmt: skip
    """A Windows-saved FASTA (UTF-8 byte-order mark, CRLF line ends, headers with spaces) read in chunks cut
    anywhere: each record is its bases, no '\\r' or mark among them, and the char alphabet is the bases alone."""
    monkeypatch.setattr(fasta_format, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(records_module, "CHUNK_BYTES", chunk_bytes)
    records = _soft_masked_records(6, seed=chunk_bytes % 97)
    path = tmp_path / "windows.fa"
    path.write_bytes(text_stream.BYTE_ORDER_MARK + _fasta_text(records, 70, newline="\r\n").encode())
    data, size = path.read_bytes(), path.stat().st_size
    assert list(records_module.record_texts(path, 0, size, "fasta")) == [sequence for _, sequence in records]
    starts = [0, *(end for end in range(1, size) if data[end - 1 : end + 1] == b"\n>")][::2] + [size]
    for begin, end in zip(starts[:-1], starts[1:], strict=True):  # the records of parts cut at record starts
        assert all(text[0] != ">" for text in records_module.record_texts(path, begin, end, "fasta"))
    bundle = load_text_lm(path, seq_len=16, documents="fasta", fractions=(1.0, 0.0, 0.0), cache_dir=tmp_path / "c")
    assert bundle.tokenizer.alphabet == "ACGNTacgt"  # sorted


@pytest.mark.parametrize(
    "content, message",
    [
        (b"ACGT\n>a\nACGT\n", "line 1: sequence text 'ACGT' comes before the first '>' header"),
        (b">a\nACGT\n>b desc\r\n\r\n>c\nGG\n", "record 'b' (line 3) has an empty sequence"),
    ],
)
def test_a_malformed_fasta_document_is_named_with_its_line(tmp_path, content, message):
    path = tmp_path / "bad.fa"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"^{path}: {re.escape(message)}"):
        load_text_lm(path, seq_len=2, documents="fasta", fractions=(1.0, 0.0, 0.0), cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("tokenizer, vocab_size", [("char", None), ("bpe", 320)])
def test_fold_case_reads_soft_masked_bases_as_the_uppercase_genome(tmp_path, tokenizer, vocab_size):
    """data.fold_case: acgt and ACGT are one symbol each, the store and tokenizer those of the genome written in
    uppercase; by default the soft mask is kept (lowercase letters are symbols of their own)."""
    records = _soft_masked_records(20)
    (tmp_path / "masked.fa").write_text(_fasta_text(records, 60), encoding="utf-8")
    (tmp_path / "upper.fa").write_text(_fasta_text([(i, s.upper()) for i, s in records], 80), encoding="utf-8")
    options = dict(tokenizer=tokenizer, vocab_size=vocab_size, seq_len=16, documents="fasta",
                   fractions=(0.6, 0.2, 0.2), cache_dir=tmp_path / "cache")  # fmt: skip
    folded = load_text_lm(tmp_path / "masked.fa", fold_case=True, **options)
    upper = load_text_lm(tmp_path / "upper.fa", **options)
    kept = load_text_lm(tmp_path / "masked.fa", **options)
    assert folded.tokenizer.record() == upper.tokenizer.record() != kept.tokenizer.record()
    assert np.array_equal(folded.train.store.tokens, upper.train.store.tokens)
    assert "a" in kept.tokenizer.decode(np.asarray(kept.train.store.tokens).tolist())


@pytest.mark.parametrize("documents, fold_case, message", [
    ("file", True, "data.fold_case=True applies only to data.documents='fasta'"),
    ("fasta", "yes", "data.fold_case='yes' must be true or false"),
    ("fasta", 1, "data.fold_case=1 must be true or false"),
])  # fmt: skip
def test_a_fold_case_that_cannot_apply_is_refused_by_name(tmp_path, documents, fold_case, message):
    (tmp_path / "g.fa").write_text(">a\nACGTacgt\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(message)):
        load_text_lm(tmp_path / "g.fa", seq_len=2, documents=documents, fold_case=fold_case, cache_dir=tmp_path / "c")


@pytest.mark.parametrize("chunk_bytes", [1, 7, 4 << 20])
def test_a_windows_saved_fasta_read_in_chunks_reads_as_read_whole(tmp_path, monkeypatch, chunk_bytes):
    """A FASTA is read in chunks, a record at a time: with a UTF-8 byte-order mark, CRLF line ends and headers with
    spaces its records are those read whole, every '\\r' and the mark dropped (the index a large file was read
    through refused a mark as 'text before the first header')."""
    records = _soft_masked_records(5, seed=chunk_bytes % 89)
    path = tmp_path / "windows.fa"
    path.write_bytes(text_stream.BYTE_ORDER_MARK + _fasta_text(records, 70, newline="\r\n").encode())
    monkeypatch.setattr(fasta_format, "CHUNK_BYTES", chunk_bytes)
    assert read_fasta(path) == [(record_id, sequence.upper()) for record_id, sequence in records]
    assert list(tmp_path.iterdir()) == [path]  # nothing written beside the file (no index)


def test_fasta_records_are_split_by_bases_so_the_line_width_moves_none(tmp_path):
    """A part starts at the first record with at least its fraction of all bases before it. Cut by bytes (line
    breaks and headers included), 6 of 200 genomes of 300 short records moved a record across a split between
    widths 60, 80 and unwrapped, and the train part missed the fraction of bases it was given."""
    rng = random.Random(11)
    for _ in range(4):
        records = [(f"r{i}", "".join(rng.choices("ACGT", k=rng.randint(30, 400)))) for i in range(300)]
        before = np.cumsum([0] + [len(sequence) for _, sequence in records])[:-1]
        total = before[-1] + len(records[-1][1])
        expected = [int(np.sum(before < total * share)) for share in (0.6, 0.8)]  # records before each cut
        for width in (60, 80, 10**6):
            path = tmp_path / f"reads{width}.fa"
            path.write_text(_fasta_text(records, width), encoding="utf-8")
            bundle = load_text_lm(path, seq_len=16, documents="fasta", fractions=(0.6, 0.2, 0.2),
                                  cache_dir=tmp_path / "cache")  # fmt: skip
            data = path.read_bytes()
            cuts = [data[: bundle.splits[name][0][1]].count(b">") for name in ("val", "test")]
            assert cuts == expected, width


def test_a_part_no_fasta_record_starts_in_names_the_record_that_holds_its_bases(tmp_path):
    """A record holding the bases where two parts start leaves the first of them empty; the refusal said no '>'
    header line followed the record's own header, with two headers after it in the file. It names the record's line
    and what is true: a record is never cut, so no record starts within the part's share of the bases."""
    path = tmp_path / "genome.fa"
    path.write_text(_fasta_text([("chr1", "ACGT" * 250), ("chr2", "AC" * 5), ("chr3", "GT" * 5)], 60))
    expected = (f"{path}: data.documents='fasta' puts no record in the val part: no record starts within its share "
                f"of the bases, where fractions (0.5, 0.25, 0.25) start it inside the record headed on line 1 of "
                f"{path}, and a record is never cut")  # fmt: skip
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}"):
        load_text_lm(path, seq_len=2, documents="fasta", fractions=(0.5, 0.25, 0.25), cache_dir=tmp_path / "cache")


def test_past_its_budget_a_fasta_is_sampled_from_64_evenly_spaced_stretches_of_bases(tmp_path):
    """What BPE is fitted on past data.fit_bytes: about ``budget / 64`` bases from each of 64 evenly spaced
    offsets, each a stretch of one record's bases. Records were taken whole from the next header on: a 51 MiB
    genome of 44 records fed 72.5 MiB of bases to the fit at a budget of 1 MiB (the fit holds ~60 bytes a base)."""
    records = _soft_masked_records(4, seed=3)
    records = [(record_id, sequence * 8) for record_id, sequence in records]  # 2,400 to 24,000 bases each
    path = tmp_path / "genome.fa"
    path.write_text(_fasta_text(records, 60), encoding="utf-8")
    budget = 6400
    texts = list(records_module.sampled_records(path, 0, path.stat().st_size, budget, "fasta", ""))
    assert budget * 0.9 <= sum(map(len, texts)) <= budget
    assert all(any(text in sequence for _, sequence in records) for text in texts)  # no header, no line break
    assert {next(i for i, (_, sequence) in enumerate(records) if text in sequence) for text in texts} == {0, 1, 2, 3}
    folded = records_module.sampled_records(path, 0, path.stat().st_size, budget, "fasta", "", fold_case=True)
    assert [text.upper() for text in texts] == list(folded)


@pytest.mark.parametrize("line_width", [7, 60, 10**6])
def test_a_sampled_stretch_holds_no_byte_of_a_header_wherever_offsets_and_reads_cut_it(tmp_path, line_width):
    """Offsets and reads that fall inside a header (long ones here) or an unwrapped record's one line: every sampled
    text is bases of one record."""
    rng = random.Random(line_width)
    records = [(f"r{i}", "".join(rng.choices("ACGT", k=rng.randint(50, 700)))) for i in range(40)]
    path = tmp_path / "genome.fa"
    path.write_text("".join(f">{record_id} {'description ' * 30}\n" + _fasta_text([("x", sequence)], line_width)
                            .split("\n", 1)[1] for record_id, sequence in records), encoding="utf-8")  # fmt: skip
    for budget in (640, 1300, 6400):
        texts = list(records_module.sampled_records(path, 0, path.stat().st_size, budget, "fasta", ""))
        assert 0 < sum(map(len, texts)) <= budget
        assert all(any(text in sequence for _, sequence in records) for text in texts)


@pytest.mark.parametrize("tokenizer, vocab_size", [("char", None), ("bpe", 320)])
def test_a_record_longer_than_a_chunk_is_encoded_in_pieces_to_the_same_tokens(tmp_path, monkeypatch, tokenizer,
                                                                              vocab_size):  # fmt: skip
    """A record is a chromosome (250 Mb): handed to the tokenizer whole, encoding took ~58 bytes a base (16 Mb:
    922 MiB). A record longer than CHUNK_BYTES is encoded in pieces cut where the tokenizer cuts anyway: the
    tokenizer is never handed more than 2 * CHUNK_BYTES characters, and the store is each record encoded whole."""
    from markovformer.data.readers import token_store
    from markovformer.data.readers.tokenizer import BPETokenizer, CharTokenizer

    monkeypatch.setattr(token_store, "CHUNK_BYTES", 1000)
    handed = []
    for kind in (BPETokenizer, CharTokenizer):
        def encode_batch(self, texts, original=kind.encode_batch):
            handed.extend(map(len, texts))
            return original(self, texts)

        monkeypatch.setattr(kind, "encode_batch", encode_batch)
    records = _soft_masked_records(12)  # 300 to 3,000 bases
    path = tmp_path / "genome.fa"
    path.write_text(_fasta_text(records, 60), encoding="utf-8")
    bundle = load_text_lm(path, tokenizer=tokenizer, vocab_size=vocab_size, seq_len=16, documents="fasta",
                          fractions=(1.0, 0.0, 0.0), cache_dir=tmp_path / "cache")  # fmt: skip
    fitted = bundle.tokenizer
    expected = [i for _, sequence in records for i in [*fitted.encode(sequence), fitted.end_of_document_id]]
    assert np.asarray(bundle.train.store.tokens).tolist() == expected
    assert max(len(sequence) for _, sequence in records) > 2000 >= max(handed)
    starts = np.cumsum([0] + [len(fitted.encode(sequence)) + 1 for _, sequence in records])[:-1]
    assert np.load(bundle.train.store.folder / token_store.DOCUMENTS_FILE).tolist() == starts.tolist()


def test_past_its_budget_the_fasta_sample_is_the_same_bases_at_any_line_width(tmp_path):
    """The BPE fit of a genome larger than data.fit_bytes reads the same bases whether it is wrapped at 60, 80 or
    not at all: sampled at evenly spaced bases, each stretch the bases from there (offsets in bytes, which line
    breaks shift, drew other stretches at every width)."""
    records = [(record_id, sequence * 4) for record_id, sequence in _soft_masked_records(10, seed=8)]
    samples = []
    for width in (60, 80, 10**6):
        path = tmp_path / f"genome{width}.fa"
        path.write_text(_fasta_text(records, width), encoding="utf-8")
        samples.append(list(records_module.sampled_records(path, 0, path.stat().st_size, 6400, "fasta", "")))
    assert samples[0] == samples[1] == samples[2] == _naive_stretches([sequence for _, sequence in records], 6400)


def test_the_char_alphabet_of_a_chromosome_long_record_is_found_in_pieces(tmp_path, monkeypatch):
    """The char alphabet pass read each record's codepoints whole (4 bytes a base, then copies of them): a record
    is a chromosome. In pieces of CHUNK_BYTES characters the pass holds little beside the record itself."""
    import tracemalloc

    from markovformer.data.readers import text as text_module
    from markovformer.data.readers.token_store import Segment

    monkeypatch.setattr(text_module, "CHUNK_BYTES", 1 << 16)
    monkeypatch.setattr(fasta_format, "CHUNK_BYTES", 1 << 16)
    rng = random.Random(2)
    sequence = "".join(rng.choices("ACGTacgtN", k=2 << 20))
    path = tmp_path / "chr1.fa"
    path.write_text(_fasta_text([("chr1", sequence)], 60), encoding="utf-8")
    tracemalloc.start()
    try:
        assert text_module._alphabet([Segment(str(path), 0, path.stat().st_size, documents="fasta")]) == "ACGNTacgt"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * len(sequence), peak / len(sequence)  # the record's bytes and its text: 10x in one piece


def test_a_fasta_whose_bases_fit_the_budget_is_fitted_on_every_base_at_any_line_width(tmp_path):
    """The bases fit data.fit_bytes but the wrapped file's bytes (headers, line breaks) do not: the fit read the
    unwrapped file whole and sampled 64 stretches of the wrapped one (4,054 of its 4,696 bases at a budget of 4,900,
    10 bases a line), so the line width changed the tokenizer. Every record is read whole at every width."""
    rng = random.Random(1)
    records = [(f"r{i}", "".join(rng.choices("ACGT", k=rng.randint(100, 400)))) for i in range(20)]
    budget = sum(len(sequence) for _, sequence in records) + 100
    for width in (10, 60, 10**6):
        path = tmp_path / f"genome{width}.fa"
        path.write_text(_fasta_text(records, width), encoding="utf-8")
        assert path.stat().st_size > budget
        sample = list(records_module.sampled_records(path, 0, path.stat().st_size, budget, "fasta", ""))
        assert sample == [sequence for _, sequence in records], width


def test_past_its_budget_short_reads_are_sampled_for_the_whole_budget(tmp_path):
    """Stretches cut short at the end of their record fed a file of short reads (amplicons, 30-60 bases here, 150
    from a sequencer) to the fit as 64 reads: 1,558 bases of a 6,400-base budget. A stretch runs on into the records
    after its own, each record's bases a text of their own: the whole budget is sampled."""
    rng = random.Random(4)
    records = [(f"read{i}", "".join(rng.choices("ACGT", k=rng.randint(30, 60)))) for i in range(2000)]
    path = tmp_path / "reads.fa"
    path.write_text(_fasta_text(records, 60), encoding="utf-8")
    sample = list(records_module.sampled_records(path, 0, path.stat().st_size, 6400, "fasta", ""))
    assert sample == _naive_stretches([sequence for _, sequence in records], 6400)
    assert sum(map(len, sample)) == 6400


def test_several_fasta_files_past_the_budget_are_fitted_on_the_same_bases_at_any_line_width(tmp_path):
    """data.fit_bytes is shared among the train files in proportion to their size: in bytes, a file of short reads
    (~95-byte headers on 20-base reads) took 2,927 of a 4,000 budget at 10 bases a line and all of it unwrapped (the
    chromosome's share fell under 1,024 and passed on), and the BPE tokenizer changed with the line width. Shared
    by bases, it does not."""
    rng = random.Random(3)
    reads = [(f"read{i} {'x' * 60}", "".join(rng.choices("ACGT", k=20))) for i in range(200)]
    chromosome = [("chr1", "".join(rng.choices("ACGT", k=8000)))]
    tokenizers = []
    for width in (10, 10**6):
        folder = tmp_path / f"width{width}"
        folder.mkdir()
        (folder / "reads.fa").write_text(_fasta_text(reads, width), encoding="utf-8")
        (folder / "chr1.fa").write_text(_fasta_text(chromosome, width), encoding="utf-8")
        bundle = load_text_lm(folder, tokenizer="bpe", vocab_size=300, fit_bytes=4000, seq_len=8, documents="fasta",
                              fractions=(1.0, 0.0, 0.0), cache_dir=tmp_path / "cache")  # fmt: skip
        tokenizers.append(bundle.tokenizer.record())
    assert tokenizers[0] == tokenizers[1]


def test_the_advice_to_raise_fit_bytes_compares_it_with_the_bases_of_fasta_records(tmp_path, capsys):
    """A BPE vocabulary smaller than asked advised raising data.fit_bytes whenever the train part's bytes exceeded
    it, though a FASTA's fit samples its bases: 20 records of 45 bases under long headers (900 bases, 3,470
    bytes) were fitted on every base at fit_bytes=1024, and the line still said to raise it. The bases decide now,
    and the advice names their count as bases: it called them the train part's bytes, of which it has more."""
    rng = random.Random(6)
    for count, advised in ((20, False), (60, True)):
        records = [(f"read{i} {'x' * 90}", "".join(rng.choices("ACGT", k=45))) for i in range(count)]
        path = tmp_path / f"reads{count}.fa"
        path.write_text(_fasta_text(records, 60), encoding="utf-8")
        assert path.stat().st_size > 1024
        load_text_lm(path, tokenizer="bpe", vocab_size=50_000, fit_bytes=1024, seq_len=8, documents="fasta",
                     fractions=(1.0, 0.0, 0.0), cache_dir=tmp_path / "cache")  # fmt: skip
        said = capsys.readouterr().err
        assert "data.vocab_size=50000:" in said, said
        assert ("fit_bytes" in said) == advised, said
        if advised:
            assert "the data.fit_bytes=1024 bases of the train part" in said, said
            assert f"raise data.fit_bytes (the train part has {45 * count:,} bases)" in said, said


@pytest.mark.parametrize("tokenizer, vocab_size", [("char", None), ("bpe", 300)])
def test_preparing_a_fasta_reads_it_twice_and_its_train_part_once_more(tmp_path, monkeypatch, tokenizer, vocab_size):
    """The split counted the bases of every record in one pass and cut them in a second, the char alphabet and the
    BPE fit (counting the train part's bases for its budget, then again for its sample, then sampling) read the train
    part again: 4 (char) and 6 (BPE) reads of it, 188 and 249 MB read for a 51 MB genome. One pass splits, one fits,
    one encodes: the file is read twice and its train part once more."""
    opened, read = fasta_format._opened, []

    class CountedHandle:
        def __init__(self, handle):
            self.handle = handle

        def read(self, size=-1):
            data = self.handle.read(size)
            read.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.handle, name)

    @contextlib.contextmanager
    def counted(path):
        with opened(path) as handle:
            yield CountedHandle(handle)

    monkeypatch.setattr(fasta_format, "_opened", counted)
    path = tmp_path / "genome.fa"
    # with a byte-order mark: a pass from the file's start reads it once (without, it reads 3 bytes and seeks back)
    path.write_text(_fasta_text(_soft_masked_records(12), 60), encoding="utf-8-sig")
    bundle = load_text_lm(path, tokenizer=tokenizer, vocab_size=vocab_size, fit_bytes=2048, seq_len=8,
                          documents="fasta", fractions=(0.6, 0.2, 0.2), cache_dir=tmp_path / "cache")  # fmt: skip
    train_bytes = bundle.splits["train"][1][1]  # the train part is bytes [0, its end) of the one file
    assert sum(read) == 2 * path.stat().st_size + train_bytes


def test_a_fasta_read_as_plain_text_is_warned_of_naming_it_and_data_documents_fasta(tmp_path, capsys):
    """data.documents=file (the default) on a FASTA trained on its headers and line breaks as text without a word.
    A file named as FASTA, or whose first line is a '>' header, is still read as text (a model of FASTA text may be
    meant) but said on stderr, naming it and data.documents: fasta; a text whose first line quotes ('> ') is not."""
    fasta = _fasta_text(_soft_masked_records(2), 60)
    cases = [("genome.fna", "ACGT " * 200, True), ("reads.txt", fasta, True), ("notes.txt", "> a quote\n" * 200, False),
             ("plain.txt", "just text\n" * 200, False)]  # fmt: skip
    for name, text, warned in cases:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        bundle = load_text_lm(path, seq_len=8, cache_dir=tmp_path / "cache")
        said = capsys.readouterr().err
        assert (f"{path}: looks like FASTA" in said and "data.documents: fasta" in said) == warned, (name, said)
        assert ("\n" in bundle.tokenizer.alphabet) == (text.count("\n") > 0)  # read as text all the same


def test_a_changed_fasta_reading_or_plan_prepares_a_new_plan_and_store(tmp_path, monkeypatch):
    """Caches keyed without what decides their content were reused: a plan cached before FASTA parts were cut by
    bases (cut by bytes) or before the BPE sample was spaced by bases came back under the same key, and so would a
    store of records read before a change of the parser (a lone CR ending a line). The parser's version
    (FASTA_READING) keys the plans and stores of data.documents: fasta, the plan's own format (PLAN_FORMAT) every
    plan, and data.fold_case both: a change of any prepares anew."""
    from markovformer.data.readers import text as text_module

    path = tmp_path / "genome.fa"
    path.write_text(_fasta_text(_soft_masked_records(6), 60), encoding="utf-8")
    cache = tmp_path / "cache"

    def prepared(**options) -> tuple[set[str], str]:
        bundle = load_text_lm(path, seq_len=8, documents="fasta", fractions=(0.6, 0.2, 0.2), cache_dir=cache,
                              **options)  # fmt: skip
        return {plan.name for plan in (cache / "plans").iterdir()}, bundle.splits["store"]

    plans, store = prepared()
    assert prepared() == (plans, store)  # nothing changed: both reused
    folded_plans, folded_store = prepared(fold_case=True)
    assert len(folded_plans - plans) == 1 and folded_store != store
    with monkeypatch.context() as patched:
        patched.setattr(records_module, "FASTA_READING", fasta_format.FASTA_READING + 1)
        read_plans, read_store = prepared()
    assert len(read_plans - folded_plans) == 1 and read_store not in (store, folded_store)
    with monkeypatch.context() as patched:
        patched.setattr(text_module, "PLAN_FORMAT", text_module.PLAN_FORMAT + 1)
        assert len(prepared()[0] - read_plans) == 1  # the store is that of the plan's tokenizer: the same one

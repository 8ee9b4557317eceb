"""Data files as they come from editors and downloads: a UTF-8 byte-order mark (Notepad, Excel), invalid UTF-8 deep
in a file, compressed files; each reader reads them as their text or names the file and what is wrong with it."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import zipfile

import pytest
import torch

from markovformer.data.readers.audio import read_audio_manifest, read_recording_list, write_wav
from markovformer.data.readers.csv_series import load_csv_series
from markovformer.data.readers.fasta import read_fasta
from markovformer.data.readers.text import load_text_lm
from markovformer.data.readers.text_stream import sampled_text
from markovformer.data.readers.token_store import TokenStore
from markovformer.data.recipes.finance import read_order_book, regimes_of_examples

BOM = b"\xef\xbb\xbf"  # what Notepad and Excel's "CSV UTF-8" put before the text: no character of it


def test_an_audio_manifest_or_list_saved_with_a_byte_order_mark_reads_its_first_path(tmp_path):
    write_wav(tmp_path / "one.wav", torch.zeros(80), 8000)
    manifest, listing = tmp_path / "manifest.tsv", tmp_path / "recordings.txt"
    manifest.write_bytes(BOM + b"one.wav\thello\r\n")
    listing.write_bytes(BOM + b"one.wav\n")
    assert read_audio_manifest(manifest) == [(tmp_path / "one.wav", "hello")]
    assert read_recording_list(listing) == [tmp_path / "one.wav"]


def test_invalid_utf8_deep_in_a_csv_is_named_by_its_line_and_file_offset(tmp_path):
    """The decoder's error gave a place in its 8 KB buffer: 'position 2716' for a byte at offset 223900."""
    lines = [b"t,x,label"] + [f"{row},{row % 7},{'up' if row % 3 else 'down'}".encode() for row in range(3000)]
    lines[2500] = b"2499,\xff,up"
    data = b"\n".join(lines) + b"\n"
    offset = data.index(b"\xff")
    path = tmp_path / "series.csv"
    path.write_bytes(data)
    with pytest.raises(ValueError) as raised:
        load_csv_series(path, label_column="label", window=4)
    assert str(raised.value) == f"{path}: line 2501: byte 0xff at offset {offset} is not valid UTF-8"


def _zipped(data: bytes) -> bytes:
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("corpus.txt", data)
    return packed.getvalue()


def _zstd_frame(data: bytes) -> bytes:
    """One zstd frame holding ``data`` (256 B to 64 KB) as a raw block, as the format lays it out (the standard
    library writes no zstd before Python 3.14): magic, a single-segment header with a 2-byte content size, the
    block's 3-byte header (last block, raw, its size)."""
    assert 256 <= len(data) < 1 << 16
    header = (len(data) << 3 | 1).to_bytes(3, "little")
    return b"\x28\xb5\x2f\xfd" + bytes([0x60]) + (len(data) - 256).to_bytes(2, "little") + header + data


_COMPRESSORS = {"gzip": (gzip.compress, "gzip -dc"), "bzip2": (bz2.compress, "bzip2 -dc"),
                "xz": (lzma.compress, "xz -dc"), "zstd": (_zstd_frame, "zstd -dc"),
                "zip": (_zipped, "unzip -p")}  # fmt: skip


@pytest.mark.parametrize("documents", ["file", "jsonl"])
@pytest.mark.parametrize("packed", list(_COMPRESSORS))
def test_a_compressed_text_file_is_refused_as_compressed_whatever_its_name(tmp_path, packed, documents):
    """It was 'byte 0x8b at offset 1 is not valid UTF-8' (gzip; 'line 1 is not JSON' for JSONL), which sends a user
    to re-encode the bytes (iconv -f latin1) and train on them; a bzip2 file is ASCII for 10 bytes."""
    compress, tool = _COMPRESSORS[packed]
    lines = [json.dumps({"text": f"record {index} of the corpus"}) for index in range(200)]
    path = tmp_path / "corpus.txt"  # the name says nothing
    path.write_bytes(compress("\n".join(lines).encode() + b"\n"))
    with pytest.raises(ValueError) as raised:
        load_text_lm(path, documents=documents, seq_len=8, cache_dir=str(tmp_path / "cache"))
    told = f"{path}: a {packed}-compressed file, not UTF-8 text: write it out as text first ({tool} {path} > TEXT)"
    assert str(raised.value) == told
    assert not (tmp_path / "cache" / "plans").exists() or not any((tmp_path / "cache" / "plans").iterdir())


def test_a_compressed_csv_is_refused_as_compressed(tmp_path):
    path = tmp_path / "series.csv.gz"
    path.write_bytes(gzip.compress(b"t,x,label\n" + b"".join(b"%d,%d,a\n" % (row, row) for row in range(50))))
    with pytest.raises(ValueError) as raised:
        load_csv_series(path, label_column="label", window=4)
    told = f"{path}: a gzip-compressed file, not UTF-8 text: write it out as text first (gzip -dc {path} > TEXT)"
    assert str(raised.value) == told


@pytest.mark.parametrize("packed", ["bzip2", "xz"])
def test_a_fasta_compressed_other_than_by_gzip_is_refused_as_compressed(tmp_path, packed):
    """gzip is read; the others said "'utf-8' codec can't decode byte 0xbb in position 11" (bzip2)."""
    compress, tool = _COMPRESSORS[packed]
    path = tmp_path / "genes.fa"
    path.write_bytes(compress(b">one\nACGT\n>two\nGGCA\n"))
    with pytest.raises(ValueError) as raised:
        read_fasta(path)
    told = f"{path}: a {packed}-compressed file, not UTF-8 text: write it out as text first ({tool} {path} > TEXT)"
    assert str(raised.value) == told


def _stored_text(bundle) -> str:
    """The text a text bundle's token store holds, decoded whole (end-of-document tokens as '|')."""
    tokenizer, tokens = bundle.tokenizer, TokenStore(bundle.splits["store"]).tokens
    end = tokenizer.end_of_document_id
    return "".join("|" if token == end else tokenizer.decode([int(token)]) for token in tokens)


_WORDS = "".join(f"line {index} of the notes.\n" for index in range(40))


def test_a_text_saved_with_a_byte_order_mark_is_its_text_alone(tmp_path):
    """The BOM became a character of the text: of the char alphabet, of the train part's first window, counted
    in its characters."""
    path = tmp_path / "notes.txt"
    path.write_bytes(BOM + _WORDS.encode())
    bundle = load_text_lm(path, seq_len=8, cache_dir=str(tmp_path / "cache"))
    assert bundle.tokenizer.alphabet == "".join(sorted(set(_WORDS)))
    assert _stored_text(bundle) == _WORDS
    assert bundle.splits["num_characters"] == len(_WORDS)
    path.write_bytes(BOM + (_WORDS + "zone").encode())  # offsets are the text's, as an editor shows them
    with pytest.raises(ValueError, match=f"character 'z' at offset {len(_WORDS)} in the test part"):
        load_text_lm(path, seq_len=8, cache_dir=str(tmp_path / "cache"))


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_documents_one_of_which_has_a_byte_order_mark_are_their_texts_alone(tmp_path, tokenizer):
    """A test document saved by Notepad was refused: "notes/9.txt: character '\\ufeff' at offset 0 in the test
    part never occurs in the train part" (char), and its BPE tokens began with the BOM's."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for index in range(10):
        (folder / f"{index}.txt").write_bytes((BOM if index == 9 else b"") + _WORDS.encode())
    options = {"vocab_size": 300} if tokenizer == "bpe" else {}
    bundle = load_text_lm(folder, tokenizer=tokenizer, seq_len=8, fractions=(0.8, 0.1, 0.1),
                          cache_dir=str(tmp_path / "cache"), **options)  # fmt: skip
    assert _stored_text(bundle) == "|".join([_WORDS] * 10) + "|"


def test_paragraph_records_of_a_file_with_a_byte_order_mark_are_their_texts_alone(tmp_path):
    paragraphs = [f"paragraph {index % 4},\nof two lines." for index in range(8)]
    path = tmp_path / "notes.txt"
    path.write_bytes(BOM + "\n\n".join(paragraphs).encode())
    bundle = load_text_lm(path, documents="blank_line", seq_len=8, fractions=(0.5, 0.5, 0.0),
                          cache_dir=str(tmp_path / "cache"))  # fmt: skip
    assert "\ufeff" not in bundle.tokenizer.alphabet
    assert _stored_text(bundle) == "|".join(paragraphs) + "|"


def test_the_bpe_fits_sample_of_a_large_file_with_a_byte_order_mark_starts_after_it(tmp_path):
    """Past its byte budget a file is sampled in 64 pieces (sampled_text, what BPE is fitted on); the first piece
    starts where the text does, after the mark (the small files of the tests above are read whole instead)."""
    text = "".join(f"line {index} of the notes.\n" for index in range(400))
    path = tmp_path / "notes.txt"
    path.write_bytes(BOM + text.encode())
    pieces = list(sampled_text(path, 0, len(BOM) + len(text), budget=64 * 20))
    assert len(pieces) == 64 and pieces[0] == text[:20] and pieces[-1] == text[-20:]


@pytest.mark.parametrize("documents", ["file", "jsonl", "blank_line"])
def test_a_utf16_text_is_refused_as_utf16_with_or_without_its_byte_order_mark(tmp_path, documents):
    """With its byte-order mark (PowerShell's '>' writes one) it was 'byte 0xff at offset 0 is not valid UTF-8';
    without one, English UTF-16 is valid UTF-8 with every other byte 0 and trained silently as 'l\\0i\\0n\\0e\\0...'."""
    text = "".join(json.dumps({"text": f"line {index} of the notes"}) + "\n\n" for index in range(100))
    marked, bare = tmp_path / "marked.txt", tmp_path / "bare.txt"
    marked.write_bytes(text.encode("utf-16"))  # with its mark, little-endian here
    bare.write_bytes(text.encode("utf-16-le"))
    with pytest.raises(ValueError) as raised:
        load_text_lm(marked, documents=documents, seq_len=8, cache_dir=str(tmp_path / "cache"))
    assert str(raised.value) == (f"{marked}: a UTF-16 file (its byte-order mark), not UTF-8 text: write it out as "
                                 f"text first (iconv -f UTF-16 -t UTF-8 {marked} > TEXT)")  # fmt: skip
    with pytest.raises(ValueError) as raised:
        load_text_lm(bare, documents=documents, seq_len=8, cache_dir=str(tmp_path / "cache"))
    assert str(raised.value) == (f"{bare}: line 1: a NUL byte at offset 1: not UTF-8 text (UTF-16 without a "
                                 f"byte-order mark? iconv -f UTF-16LE -t UTF-8 {bare} > TEXT)")  # fmt: skip


def test_a_nul_byte_in_a_text_is_refused_naming_its_line_and_offset(tmp_path):
    path = tmp_path / "notes.txt"
    data = _WORDS.encode()
    at = data.index(b"line 7 ")
    path.write_bytes(data[:at] + b"\0" + data[at:])
    with pytest.raises(ValueError, match=f"line 8: a NUL byte at offset {at}: not UTF-8 text"):
        load_text_lm(path, seq_len=8, cache_dir=str(tmp_path / "cache"))


def test_a_nul_byte_past_the_checked_head_is_refused_where_the_text_is_read(tmp_path):
    """The first 4 KB of a file are checked before its split is planned; a NUL further on is refused when its text is
    decoded, with the same line and offset (no test had one there: that check could go unnoticed)."""
    path = tmp_path / "notes.txt"
    data = "".join(f"line {index} of the notes.\n" for index in range(400)).encode()
    at = data.index(b"line 300 ")
    assert at > 4096
    path.write_bytes(data[:at] + b"\0" + data[at:])
    with pytest.raises(ValueError, match=f"line 301: a NUL byte at offset {at}: not UTF-8 text"):
        load_text_lm(path, seq_len=8, cache_dir=str(tmp_path / "cache"))


def test_an_excel_csv_with_a_byte_order_mark_gives_its_first_column_its_name(tmp_path):
    """Excel's "CSV UTF-8" begins with a BOM: read as utf-8 it joins the first header name ('\\ufeffregime'), so
    the volatility regimes of an Excel-saved daily table (regime first) raised KeyError: 'regime' though
    load_csv_series read the same file; a BOM-saved order book's 'timestamp' column is found too."""
    table = tmp_path / "daily.csv"
    rows = [f"{'calm' if row % 4 else 'stormy'},{row % 5},{'up' if row % 3 else 'down'}" for row in range(40)]
    table.write_bytes(BOM + "\r\n".join(["regime,x,label", *rows]).encode() + b"\r\n")
    bundle = load_csv_series(table, label_column="label", feature_columns=["x"], window=4)
    start, stop = bundle.splits["test"]
    expected = [rows[row].split(",")[0] for row in range(start + 3, stop)]
    assert regimes_of_examples(table, bundle.splits, "test") == expected
    book = tmp_path / "book.csv"
    book.write_bytes(BOM + b"timestamp,bid_price_1,bid_size_1,ask_price_1,ask_size_1\r\n09:30,99.5,3,100.5,2\r\n")
    assert read_order_book(book).timestamps == ["09:30"]

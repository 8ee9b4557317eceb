"""The token store: round trips across chunk boundaries, caching by content, damage detected and rebuilt, atomic
writes, bounded memory, documents and packing, and the small-text errors users meet first."""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from markovformer.data.collate import collate
from markovformer.data.readers import text_stream, token_store
from markovformer.data.readers.text import load_text_lm
from markovformer.data.readers.text_stream import text_pieces
from markovformer.data.readers.token_store import Segment, open_or_build, token_dtype
from markovformer.data.readers.tokenizer import BPETokenizer, CharTokenizer

SHAKESPEARE = Path(__file__).resolve().parents[2] / "../shared/data/tiny_shakespeare.txt"
_MIXED = "Markov chain é ß € 漢字 😀\nthe order of a state,\n"


def _whole_tokens(bundle) -> list[int]:
    store = bundle.train.store
    return np.asarray(store.tokens[:]).tolist()


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 7 bytes: nearly every multi-byte character of the text is cut by a chunk boundary."""
    monkeypatch.setattr(text_stream, "CHUNK_BYTES", 7)
    original = text_stream.text_pieces
    monkeypatch.setattr("markovformer.data.readers.token_store.text_pieces",
                        lambda *a, **k: original(*a, **{**k, "chunk_bytes": 7}))  # fmt: skip


def test_pieces_never_split_a_character_and_join_to_the_text(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_text(_MIXED * 3, encoding="utf-8")
    tokenizer = BPETokenizer.train(_MIXED, vocab_size=300)
    for chunk in range(1, 12):
        assert "".join(text_pieces(path, chunk_bytes=chunk)) == _MIXED * 3
        assert "".join(text_pieces(path, chunk_bytes=chunk, safe_cut=tokenizer.safe_cut)) == _MIXED * 3


@pytest.mark.parametrize("tokenizer, vocab", [("char", None), ("bpe", 300)])
def test_store_round_trips_across_chunks_that_split_multibyte_characters(tmp_path, small_chunks, tokenizer, vocab):
    text = _MIXED * 40
    assert any(len(c.encode()) > 1 for c in text)
    path = tmp_path / "mixed.txt"
    path.write_text(text, encoding="utf-8")
    bundle = load_text_lm(path, tokenizer=tokenizer, vocab_size=vocab, seq_len=8, fractions=(1.0, 0.0, 0.0),
                          cache_dir=tmp_path / "cache")  # fmt: skip
    tokens = _whole_tokens(bundle)
    assert bundle.tokenizer.decode(tokens) == text
    assert tokens == bundle.tokenizer.encode(text)  # the pieces encode as the whole text does
    assert bundle.train.store.tokens.dtype == np.uint8 if tokenizer == "char" else np.uint16


def test_second_open_is_cached_and_a_changed_file_invalidates_it(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("abcdefgh\n" * 500, encoding="utf-8")
    options = {"seq_len": 8, "cache_dir": tmp_path / "cache"}
    first = load_text_lm(path, **options)
    started = time.perf_counter()
    second = load_text_lm(path, **options)
    assert time.perf_counter() - started < 1.0
    assert second.train.store.folder == first.train.store.folder
    path.write_text("abcdefgi\n" * 500, encoding="utf-8")  # same size, other content
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    third = load_text_lm(path, **options)
    assert third.train.store.folder != first.train.store.folder
    assert third.tokenizer.decode(_whole_tokens(third)) == path.read_text()


def test_two_splits_of_one_file_with_one_tokenizer_are_cached_apart(tmp_path):
    """The cache key holds each segment's byte range: a key of the file and tokenizer alone hands the second
    split the first one's store, whose val part is other text."""
    text = "".join(chr(97 + (i * 7) % 26) for i in range(1000))
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    fitted = CharTokenizer.from_text(text)  # a saved tokenizer: the same JSON for both runs
    for fractions in ((0.8, 0.1, 0.1), (0.5, 0.25, 0.25)):
        bundle = load_text_lm(path, seq_len=8, fractions=fractions, cache_dir=tmp_path / "c", fitted=fitted)
        for name in ("train", "val", "test"):  # one token per character: token ranges are the character ranges
            assert [getattr(bundle, name).start, getattr(bundle, name).stop] == bundle.splits[name]
        start = bundle.splits["val"][0]
        assert fitted.decode(bundle.val[0]["input_ids"].tolist()) == text[start : start + 9]


def test_a_truncated_or_corrupt_cache_is_detected_and_rebuilt(tmp_path, capsys):
    path = tmp_path / "corpus.txt"
    path.write_text("the chain\n" * 300, encoding="utf-8")
    options = {"seq_len": 8, "cache_dir": tmp_path / "cache"}
    folder = load_text_lm(path, **options).train.store.folder
    tokens = folder / "tokens.bin"
    tokens.write_bytes(tokens.read_bytes()[:-5])
    rebuilt = load_text_lm(path, **options)
    assert "is damaged" in capsys.readouterr().err
    assert rebuilt.tokenizer.decode(_whole_tokens(rebuilt)) == path.read_text()
    (folder / "meta.json").write_text("{not json")
    load_text_lm(path, **options)
    assert capsys.readouterr().err.count("rebuilding") == 1


def test_a_failed_write_leaves_no_cache(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("abc\n" * 100, encoding="utf-8")
    segments = [Segment(str(path), 0, 400)]

    def disk_full(text):
        raise OSError(28, "No space left on device")

    with pytest.raises(ValueError,
                       match="^no space left on the device while writing the token cache in .*; nothing was cached"):
        open_or_build(segments, "{}", disk_full, 10, None, tmp_path / "cache")
    # no store, no staging folder, no lock file (its holder deletes it)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []


def test_a_cache_dir_that_cannot_be_a_folder_is_one_line_naming_it(tmp_path):
    """data.cache_dir naming a file (or a place where no folder can be made) ended in a bare 'Not a directory'
    naming only the staging folder inside it: it is the token cache's own one-line error, naming the folder."""
    path = tmp_path / "corpus.txt"
    path.write_text("abc\n" * 100, encoding="utf-8")
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    ways = r"as data.cache_dir .* as \$MARKOVFORMER_CACHE"  # a resumed run cannot change data.cache_dir
    with pytest.raises(ValueError, match=rf"^cannot write the token cache in {blocker} .*{ways}"):
        load_text_lm(path, seq_len=8, cache_dir=blocker)
    with pytest.raises(ValueError, match=f"^cannot write the token cache in {blocker / 'deeper'} "):
        load_text_lm(path, seq_len=8, cache_dir=blocker / "deeper")


def test_vocabulary_larger_than_the_dtype_or_ids_outside_it_are_refused(tmp_path):
    assert token_dtype(256) == np.uint8 and token_dtype(257) == np.uint16 and token_dtype(70_000) == np.uint32
    with pytest.raises(ValueError, match="does not fit"):
        token_dtype(2**32 + 1)
    path = tmp_path / "corpus.txt"
    path.write_text("abc", encoding="utf-8")
    for bad in (300, 256):  # 256, one past the last id, would wrap round to 0 (padding) in a uint8 store
        with pytest.raises(ValueError, match=f"id {bad} outside its vocabulary of 256"):
            open_or_build([Segment(str(path), 0, 3)], "{}", lambda text, bad=bad: np.array([1, bad]), 256, None,
                          tmp_path / "c")  # fmt: skip


def test_windows_are_read_from_the_map_not_materialised(tmp_path, monkeypatch):
    path = tmp_path / "corpus.txt"
    path.write_text("abcdefghij" * 20_000, encoding="utf-8")
    bundle = load_text_lm(path, seq_len=15, overlap=3, cache_dir=tmp_path / "cache")
    assert isinstance(bundle.train.store.tokens, np.memmap)
    assert len(bundle.train) == len(range(0, 180_000 - 3, 13))  # windows are arithmetic, not a list
    example = bundle.train[1000]
    begin = 1000 * 13
    assert bundle.tokenizer.decode(example["input_ids"].tolist()) == path.read_text()[begin : begin + 16]
    assert torch.all(example["labels"][:3] == -100)
    assert bundle.train.example_lengths()[-1] == len(bundle.train[len(bundle.train) - 1]["input_ids"])
    # joined (eval --split all), the lengths still come from each split's own, not from building every window
    from markovformer.data.bundle import JoinedSplits, example_lengths

    joined = JoinedSplits(bundle.train, bundle.val, bundle.test)
    expected = [len(joined[index]["input_ids"]) for index in range(len(joined))]
    monkeypatch.setattr(type(bundle.train), "__getitem__", None)  # reading a window now fails
    assert example_lengths(joined, "input_ids") == expected


def test_random_starts_give_every_window_start(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("abcdefghij" * 100, encoding="utf-8")
    bundle = load_text_lm(path, seq_len=9, window_starts="random", fractions=(0.8, 0.1, 0.1),
                          cache_dir=tmp_path / "c")  # fmt: skip
    assert bundle.train_sampling == "uniform" and len(bundle.train) == 800 - 10 + 1
    assert bundle.train.tail_tokens == 0  # every token is in some window
    assert bundle.tokenizer.decode(bundle.train[3]["input_ids"].tolist()) == "defghijabc"
    for split in (bundle.val, bundle.test):  # random starts are for training: val and test score each token once
        windows = [split.window(i) for i in range(len(split))]
        assert windows == [(begin, begin + 10) for begin in range(split.start, split.stop, 10)]


def test_files_are_documents_split_whole_with_an_end_token_and_packed_positions(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    texts = [f"document {'x' * i}: " + "ab " * (5 + i) for i in range(10)]
    for i, text in enumerate(texts):
        (folder / f"{i:02d}.txt").write_text(text, encoding="utf-8")
    bundle = load_text_lm(folder, seq_len=15, fractions=(0.8, 0.1, 0.1), packing=True, cache_dir=tmp_path / "c")
    assert bundle.splits["kind"] == "documents" and bundle.splits["train"] == [0, 8]
    store, eod = bundle.train.store, bundle.tokenizer.end_of_document_id
    tokens = np.asarray(store.tokens[:]).tolist()
    assert tokens.count(eod) == 10 and tokens[-1] == eod
    pieces = bundle.tokenizer.decode(tokens)
    assert pieces == "".join(texts)
    batch = collate([bundle.train[0], bundle.train[1]])
    starts = store.document_starts.tolist()
    assert starts == [0] + [i + 1 for i, token in enumerate(tokens[:-1]) if token == eod]
    for row in range(2):  # each token's position is its offset from the start of its document, or of the window
        begin = bundle.train.window(row)[0]
        for t in range(batch["input_ids"].shape[1]):
            document_start = max(start for start in starts if start <= begin + t)
            assert batch["position_ids"][row, t] == begin + t - max(document_start, begin)
    assert bundle.train.window(1)[0] not in starts and batch["position_ids"][1, 0] == 0  # a document begun before
    for index in range(len(bundle.train)):  # the inputs are the store's tokens, whatever labels are masked
        begin, end = bundle.train.window(index)
        assert bundle.train[index]["input_ids"].tolist() == tokens[begin:end]
    assert max(int(bundle.val[i]["position_ids"].max()) for i in range(len(bundle.val))) < 16
    # each document's first token is not a target (predicting it would read the previous document)
    opens = torch.zeros_like(batch["labels"], dtype=torch.bool)
    opens[:, 1:] = batch["position_ids"][:, 1:] == 0
    assert opens.any()
    assert (batch["labels"][opens] == -100).all()
    assert torch.equal(batch["labels"][~opens], batch["input_ids"][~opens])


def test_special_tokens_written_in_the_text_are_text_in_a_bpe_store(tmp_path):
    """A corpus that writes "<pad>" or "<eod>" (code, preprocessed data) keeps them as text: the store holds no
    padding id and one end-of-document id per document, and decodes back to the files."""
    folder = tmp_path / "docs"
    folder.mkdir()
    texts = [f"doc {i}: a <pad> token and an <eod> marker in the text.\n" * 20 for i in range(3)]
    for i, text in enumerate(texts):
        (folder / f"{i}.txt").write_text(text, encoding="utf-8")
    bundle = load_text_lm(folder, seq_len=15, tokenizer="bpe", vocab_size=300, fractions=(1 / 3, 1 / 3, 1 / 3),
                          cache_dir=tmp_path / "c")  # fmt: skip
    tokens = np.asarray(bundle.train.store.tokens[:]).tolist()
    eod = bundle.tokenizer.end_of_document_id
    assert 0 not in tokens and tokens.count(eod) == 3
    assert bundle.tokenizer.decode([token for token in tokens if token != eod]) == "".join(texts)


def test_a_saved_tokenizer_encodes_another_file_and_names_a_character_it_lacks(tmp_path):
    (tmp_path / "a.txt").write_text("abc abc\n" * 100, encoding="utf-8")
    (tmp_path / "b.txt").write_text("abc cab\n" * 50, encoding="utf-8")
    (tmp_path / "z.txt").write_text("abc cab\n" * 50 + "abz\n", encoding="utf-8")
    run = load_text_lm(tmp_path / "a.txt", seq_len=8, cache_dir=tmp_path / "c")
    options = {"seq_len": 8, "fractions": (0.0, 1.0, 0.0), "cache_dir": tmp_path / "c", "fitted": run.tokenizer}
    other = load_text_lm(tmp_path / "b.txt", **options)
    assert other.tokenizer is run.tokenizer and len(other.val) == 400 // 9
    with pytest.raises(ValueError, match="z.txt: character 'z' at offset 402 in the val part is not in the run's"):
        load_text_lm(tmp_path / "z.txt", **options)


@pytest.mark.parametrize("tokenizer, vocab", [("char", None), ("bpe", 300)])
def test_records_scored_with_a_saved_tokenizer_without_an_end_of_document_token_name_data_documents(
        tmp_path, tokenizer, vocab):  # fmt: skip
    """A run fitted on one text has no end-of-document token; scoring JSONL records with it (eval --data
    documents=jsonl) said only 'records are documents: the tokenizer needs an end-of-document token'."""
    (tmp_path / "a.txt").write_text("abc abc\n" * 100, encoding="utf-8")
    (tmp_path / "r.jsonl").write_text('{"text": "abc cab"}\n' * 50, encoding="utf-8")
    run = load_text_lm(tmp_path / "a.txt", seq_len=8, cache_dir=tmp_path / "c", tokenizer=tokenizer, vocab_size=vocab)
    assert run.tokenizer.end_of_document_id is None
    with pytest.raises(ValueError, match="^data.documents='jsonl' closes each record of .*r.jsonl with an end-of-doc"
                                         ".*saved tokenizer lacks.*use data.documents=file$"):  # fmt: skip
        load_text_lm(tmp_path / "r.jsonl", documents="jsonl", seq_len=8, fractions=(0.0, 1.0, 0.0),
                     cache_dir=tmp_path / "c", fitted=run.tokenizer, tokenizer=tokenizer)  # fmt: skip


def test_a_folder_scored_with_a_saved_tokenizer_without_an_end_of_document_token_is_refused(tmp_path):
    """eval --data path=DIR on a run fitted on one text: the files ran into each other unmarked (the last characters
    of one file read as context for the first of the next) and were scored with exit 0."""
    (tmp_path / "a.txt").write_text("abc abc\n" * 100, encoding="utf-8")
    folder = tmp_path / "docs"
    folder.mkdir()
    for index in range(2):
        (folder / f"d{index}.txt").write_text("cab bca\n" * 40, encoding="utf-8")
    run = load_text_lm(tmp_path / "a.txt", seq_len=8, cache_dir=tmp_path / "c")
    assert run.tokenizer.end_of_document_id is None
    with pytest.raises(ValueError, match=r"^data.path='.*docs' names 2 files, documents that the run's saved tokenizer "
                                         r"cannot keep apart .*score one file at a time$"):  # fmt: skip
        load_text_lm(folder, seq_len=8, fractions=(0.0, 1.0, 0.0), cache_dir=tmp_path / "c", fitted=run.tokenizer)


def test_a_part_of_a_folder_too_small_for_a_window_says_how_many_files_it_holds(tmp_path):
    """Three files with fractions (0.9, 0.05, 0.05) give the val part round(3 x 0.05) = 0 files; the error said
    only '0 tokens ... use a longer file', where the fractions split whole files and no longer file helps."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for index in range(3):
        (folder / f"d{index}.txt").write_text("abc abc\n" * 40, encoding="utf-8")
    val_files = round(3 * 0.05)
    with pytest.raises(ValueError, match=rf"the val part has 0 tokens \({val_files} of the 3 files: the "
                                         r"fractions split whole files\).*use more or longer files"):  # fmt: skip
        load_text_lm(folder, seq_len=8, cache_dir=tmp_path / "c")
    (tmp_path / "one.txt").write_text("abc abc\n" * 20, encoding="utf-8")  # val: round(160 x 0.05) = 8 tokens
    with pytest.raises(ValueError, match=r"the val part has 8 tokens, fewer than .*use a longer file"):
        load_text_lm(tmp_path / "one.txt", seq_len=8, cache_dir=tmp_path / "c")


@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason=f"Tiny Shakespeare is not at {SHAKESPEARE}")
def test_tiny_shakespeare_store_decodes_to_the_file(tmp_path):
    bundle = load_text_lm(SHAKESPEARE, seq_len=64, cache_dir=tmp_path / "c")
    assert bundle.tokenizer.decode(_whole_tokens(bundle)) == SHAKESPEARE.read_text(encoding="utf-8")
    meta = json.loads((bundle.train.store.folder / "meta.json").read_text())
    assert meta["dtype"] == "uint8" and meta["num_tokens"] == 1_115_394


def test_reading_random_windows_keeps_resident_memory_flat(tmp_path):
    """Windows are read with pread: read through the map, each made the kernel map the page-cache folios around it
    into the process (about 0.7 MB a window here), so resident memory grew with the number of windows read."""
    from markovformer.bench.measure import status_mib
    from markovformer.data.readers.store_windows import store_example

    if status_mib("RssFile") is None:
        pytest.skip("needs /proc/self/status with RssFile")
    path = tmp_path / "corpus.txt"
    with path.open("w", encoding="ascii") as out:
        for block in range(32):
            out.write(chr(97 + block % 26) * (1 << 20))
    store = open_or_build([Segment(str(path), 0, 32 << 20)], "{}", lambda text: np.frombuffer(text.encode(), np.uint8),
                          256, None, tmp_path / "cache")  # fmt: skip
    starts = np.random.default_rng(0).integers(0, len(store) - 300, 300)
    before = status_mib("RssFile")
    windows = [store_example(store, int(start), int(start) + 257)["input_ids"] for start in starts]
    assert status_mib("RssFile") - before < 16
    letters = [97 + int(start) // (1 << 20) % 26 for start in starts]
    assert [int(w[0]) for w in windows] == letters and {len(w) for w in windows} == {257}


@pytest.mark.parametrize("documents", ["file", "blank_line", "jsonl"])
def test_the_progress_bar_ends_at_the_bytes_it_was_given(tmp_path, monkeypatch, documents):
    """The bar's total is the corpus's bytes; records counted by their characters left it short of 100 % (59.5 of
    60.2 MB on a paragraph corpus): separators, JSON syntax and multi-byte characters are bytes too."""
    from markovformer.data.readers import token_store

    bars = []

    class Bar:
        def __init__(self, total):
            self.total, self.n = total, 0
            bars.append(self)

        def update(self, count):
            self.n += count

        def close(self):
            pass

    monkeypatch.setattr(token_store, "_progress", Bar)
    texts = [_MIXED * (1 + i % 3) for i in range(12)]
    path = tmp_path / "corpus.txt"
    if documents == "jsonl":
        path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    else:
        path.write_text("\n \n".join(text.strip() for text in texts) + "\n", encoding="utf-8")
    load_text_lm(path, seq_len=4, fractions=(0.6, 0.2, 0.2), cache_dir=tmp_path / "cache", documents=documents)
    assert [(bar.n, bar.total) for bar in bars] == [(path.stat().st_size, path.stat().st_size)]


def test_a_build_removes_only_its_own_stores_abandoned_staging_never_another_builders(tmp_path):
    """A cache shared by several machines (a home folder on a cluster): a build removed every staging folder whose
    pid was not a live process of its own machine, so it deleted the folder another node was writing another store
    into (that build then failed); now it removes only abandoned staging folders of its own store, which it holds
    the build lock of."""
    import shutil
    import subprocess

    cache = tmp_path / "cache"
    path = tmp_path / "corpus.txt"
    path.write_text("the chain\n" * 50, encoding="utf-8")
    store = load_text_lm(path, seq_len=8, cache_dir=cache).train.store.folder
    elsewhere = subprocess.Popen(["true"])
    elsewhere.wait()  # its pid is no process here, as a builder's on another machine is not
    others = cache / f".0123456789abcdef.staging-{elsewhere.pid}-0badc0de"
    others.mkdir()
    (others / "tokens.bin").write_bytes(b"\0" * 8)
    abandoned = cache / f".{store.name}.staging-{elsewhere.pid}-deadbeef"
    abandoned.mkdir()
    shutil.rmtree(store)
    rebuilt = load_text_lm(path, seq_len=8, cache_dir=cache)
    assert rebuilt.tokenizer.decode(_whole_tokens(rebuilt)) == path.read_text()
    assert (others / "tokens.bin").is_file() and not abandoned.exists()


def test_a_cache_on_a_filesystem_without_file_locks_is_one_line_naming_the_lock(tmp_path, monkeypatch):
    """flock's ENOSYS (Lustre mounted without -o flock) ended a text run in 'error: a file: Function not
    implemented', naming neither the cache nor the variable that moves it."""
    import errno
    import fcntl

    def no_locks(handle, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    path = tmp_path / "corpus.txt"
    path.write_text("abc\n" * 100, encoding="utf-8")
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match=rf"^cannot lock {cache}/\.[\w-]+\.lock \(Function not implemented\).*"
                                         r"data.cache_dir or as \$MARKOVFORMER_CACHE"):  # fmt: skip
        load_text_lm(path, seq_len=8, cache_dir=cache)


def test_a_cache_another_user_keeps_private_is_one_line_naming_the_cache(tmp_path, monkeypatch):
    """A shared cache folder that another user made 0700: looking for a store in it raised PermissionError on the
    store's folder, which the command line read as 'cannot write /cache/<key> (Permission denied); choose a writable
    output_dir', though no output_dir was at fault. (Root reads any folder: the refused look-ups are simulated.)"""
    path = tmp_path / "corpus.txt"
    path.write_text("abc\n" * 100, encoding="utf-8")
    cache = tmp_path / "cache"
    load_text_lm(path, seq_len=8, cache_dir=cache)  # the other user's store
    real_stat = Path.stat

    def private(self, *args, **kwargs):
        if self.parent == cache and not self.name.startswith("."):
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", private)
    with pytest.raises(ValueError, match=rf"^cannot read the token cache {cache} \(Permission denied\).*"
                                         r"data.cache_dir or as \$MARKOVFORMER_CACHE"):  # fmt: skip
        load_text_lm(path, seq_len=8, cache_dir=cache)


def test_a_private_cache_is_said_before_the_tokenizer_is_fitted(tmp_path, monkeypatch):
    """A text run in another user's private cache read no cached plan (the refusal was taken for 'absent'), fitted
    its tokenizer (a BPE fit: minutes on a large corpus) and only then stopped at the store: the cache is now looked
    in before anything is fitted. (Root reads any folder: the refused look-ups are simulated as above.)"""
    path = tmp_path / "corpus.txt"
    path.write_text("the chain moves from state to state\n" * 50, encoding="utf-8")
    cache = tmp_path / "cache"
    cache.mkdir()
    real_stat, fits = Path.stat, []

    def private(self, *args, **kwargs):
        if self.parent == cache and not self.name.startswith("."):
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)

    def recorded_train(*args, **kwargs):
        fits.append(args)
        return real_train(*args, **kwargs)

    real_train = BPETokenizer.train
    monkeypatch.setattr(Path, "stat", private)
    monkeypatch.setattr(BPETokenizer, "train", recorded_train)
    with pytest.raises(ValueError, match=rf"^cannot read the token cache {cache} \(Permission denied\)"):
        load_text_lm(path, seq_len=8, tokenizer="bpe", vocab_size=270, cache_dir=cache)
    assert fits == []


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [False, True])
def test_a_progress_bar_is_drawn_on_a_terminal_only(tmp_path, monkeypatch, terminal):
    """stderr sent to a file (`2> log`, nohup) received tqdm's carriage-return frames (3 for a 55 MB corpus in one
    second; one a second while BPE encodes at ~1 MB/s); a log gets one line instead."""
    monkeypatch.setattr(token_store, "_PROGRESS_ABOVE_BYTES", 100)
    stream = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    path = tmp_path / "corpus.txt"
    path.write_text(_MIXED * 40, encoding="utf-8")
    load_text_lm(path, seq_len=8, cache_dir=tmp_path / "cache")
    shown = stream.getvalue()
    if terminal:
        assert "\r" in shown and "tokenizing" in shown
    else:
        assert shown == f"tokenizing {len((_MIXED * 40).encode()) / 1e6:.1f} MB into the token store\n"

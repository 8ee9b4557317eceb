"""The token cache's integrity: a damaged store is found when opened and rebuilt, and two builders of one store
leave one store and no staging folder."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from markovformer.data.readers.text import load_text_lm
from markovformer.data.readers.token_store import Segment, open_or_build


def _unorder_offsets(folder):
    offsets = np.load(folder / "offsets.npy")  # (4,): the bounds of the train, val and test segments
    np.save(folder / "offsets.npy", np.array([0, offsets[-1], 1, offsets[-1]], dtype=offsets.dtype))


def _shorten_offsets(folder):
    offsets = np.load(folder / "offsets.npy")
    np.save(folder / "offsets.npy", offsets[:-1])


def _flip_a_token(folder):
    tokens = bytearray((folder / "tokens.bin").read_bytes())
    tokens[len(tokens) // 2] ^= 1  # same size: only the recorded hash tells
    (folder / "tokens.bin").write_bytes(bytes(tokens))


def _unorder_documents(folder):
    starts = np.load(folder / "documents.npy")
    starts[[1, 2]] = starts[[2, 1]]  # the first and last still in place
    np.save(folder / "documents.npy", starts)


@pytest.mark.parametrize("damage, documents, said", [
    (_flip_a_token, "file", "tokens.bin does not match the hash recorded when it was written"),
    (_unorder_offsets, "file", "offsets.npy is not in order"),
    (_shorten_offsets, "file", "offsets.npy does not bound 3 segments of"),
    (_unorder_documents, "jsonl", "documents.npy does not hold 40 ordered starts"),
])  # fmt: skip
def test_a_damaged_store_of_the_right_size_is_found_and_rebuilt(tmp_path, capsys, damage, documents, said):
    """A store whose files have the right sizes but the wrong content (a flipped bit, files of another store) would
    train on other tokens: it is named damaged and rebuilt from the text."""
    path = tmp_path / ("corpus.jsonl" if documents == "jsonl" else "corpus.txt")
    lines = [f"record {index} of the chain" for index in range(40)]
    path.write_text("".join((json.dumps({"text": line}) if documents == "jsonl" else line) + "\n" for line in lines))
    options = {"seq_len": 8, "cache_dir": tmp_path / "cache", "documents": documents}
    built = load_text_lm(path, **options).train.store
    expected = built.read(0, len(built)).tolist()
    damage(built.folder)
    rebuilt = load_text_lm(path, **options).train.store
    assert said in capsys.readouterr().err
    assert rebuilt.read(0, len(rebuilt)).tolist() == expected


def test_a_store_another_builder_renamed_into_place_first_is_kept_and_this_staging_removed(tmp_path, monkeypatch):
    """Two builders of one store (one that took no lock): the later rename fails on the finished store, which is
    opened, and the later builder's staging folder is removed; a rename failing with no store there is the cache's
    error, leaving nothing."""
    path = tmp_path / "corpus.txt"
    path.write_text("abc\n" * 100, encoding="utf-8")
    segments, cache = [Segment(str(path), 0, 400)], tmp_path / "cache"
    rename, ids = os.rename, {"a": 1, "b": 2, "c": 3, "\n": 4}

    def encode(text):
        return np.array([ids[c] for c in text], np.int64)

    def finished_first(source, target):  # the other builder's store lands just before this rename
        shutil.copytree(source, target)
        rename(source, target)  # a folder onto a non-empty folder: OSError

    monkeypatch.setattr(os, "rename", finished_first)
    store = open_or_build(segments, "{}", encode, 10, None, cache)
    assert store.read(0, 400).tolist() == [1, 2, 3, 4] * 100
    assert [p.name for p in cache.iterdir()] == [store.folder.name]

    def failed(source, target):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "rename", failed)
    shutil.rmtree(store.folder)
    with pytest.raises(ValueError, match="Input/output error.*nothing was cached"):
        open_or_build(segments, "{}", encode, 10, None, cache)
    assert list(cache.iterdir()) == []


def test_a_cache_that_cannot_be_looked_in_is_said_whatever_path_is_dir_answers(tmp_path, monkeypatch):
    """cache_holds relied on Path.is_dir raising PermissionError: a Python whose is_dir answers False for a denial
    would take another user's private cache for empty and say so only after a tokenizer fit. It asks stat."""
    from markovformer.data.readers import token_store

    real_stat = Path.stat

    def denied(self, *args, **kwargs):
        if str(self).startswith(str(tmp_path / "private")):
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", denied)
    monkeypatch.setattr(Path, "is_dir", lambda self: False)  # as a Python that swallows the denial would answer
    with pytest.raises(ValueError, match=r"cannot read the token cache .*private \(Permission denied\): give a folder "
                                         r"of your own as data.cache_dir"):  # fmt: skip
        token_store.cache_holds(tmp_path / "private", "store")
    assert token_store.cache_holds(tmp_path, "absent") is False
    (tmp_path / "present").mkdir()
    monkeypatch.undo()
    assert token_store.cache_holds(tmp_path, "present") is True


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device whose every write fails full")
@pytest.mark.parametrize(("file", "record_bytes"), [("tokens.bin", 20), ("tokens.bin", 20_000), ("offsets.npy", 20),
                                                    ("documents.npy", 20)])  # fmt: skip
def test_a_full_disk_under_any_file_of_a_store_is_said_as_one_and_leaves_no_cache(tmp_path, monkeypatch, file,
                                                                                  record_bytes):  # fmt: skip
    """numpy's tofile writes past Python's file object and drops the errno: on a full disk a short write was lost
    without an error, and the store, renamed into the cache, failed as it opened ("tokens.bin has 0 bytes, not 600
    x 1"); a long one raised "19999 requested and 0 written". Each file of a store written on a full device now
    reads as the token cache's own line, and leaves nothing in the cache."""
    import builtins
    import io

    path = tmp_path / "corpus.txt"
    path.write_text(("x" * (record_bytes - 1) + "\n\n") * 30, encoding="utf-8")
    segments = [Segment(str(path), 0, path.stat().st_size, end_of_document=True, documents="blank_line")]
    real_open = io.open

    def on_a_full_disk(name, mode="r", *args, **kwargs):  # the file is made, and its writes land on /dev/full
        if "w" in mode and os.path.basename(os.fspath(name)) == file:
            real_open(name, mode).close()
            name = "/dev/full"
        return real_open(name, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", on_a_full_disk)
    monkeypatch.setattr(builtins, "open", on_a_full_disk)
    with pytest.raises(ValueError, match=r"^no space left on the device while writing the token cache in .*; "
                                         r"nothing was cached"):  # fmt: skip
        open_or_build(segments, "{}", lambda text: np.frombuffer(text.encode(), np.uint8), 256, 0,
                      tmp_path / "cache")  # fmt: skip
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []

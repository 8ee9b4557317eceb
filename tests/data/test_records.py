"""Records as documents: JSONL lines and blank-line separated paragraphs become documents of the token store, each
closed by the end-of-document token; bad records and unreadable files are named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from markovformer.data.readers.text import load_text_lm

_TEXTS = ["the chain moves on.", "é ß € 漢字 😀 a state\nwith two lines", "order, order", "x" * 50, "the end of it"]


def _write_jsonl(path, texts, column="text"):
    path.write_text("".join(json.dumps({"id": i, column: t}) + "\n" for i, t in enumerate(texts)), encoding="utf-8")


def _expected(tokenizer, texts) -> list[int]:
    """Each record encoded alone, then the end-of-document token: the naive reference."""
    eod = tokenizer.end_of_document_id
    return [i for text in texts for i in [*tokenizer.encode(text), eod]]


@pytest.mark.parametrize("tokenizer, vocab", [("char", None), ("bpe", 300)])
@pytest.mark.parametrize("documents", ["jsonl", "blank_line"])
def test_records_become_documents_of_the_store(tmp_path, tokenizer, vocab, documents):
    texts = _TEXTS * 8
    folder = tmp_path / "corpus"
    folder.mkdir()
    halves = (texts[:17], texts[17:])  # two files: records of both, in file order
    for index, part in enumerate(halves):
        if documents == "jsonl":
            _write_jsonl(folder / f"{index}.jsonl", part)
        else:
            (folder / f"{index}.txt").write_text("\n\n \n".join(part) + "\n", encoding="utf-8")
    bundle = load_text_lm(folder, tokenizer=tokenizer, vocab_size=vocab, seq_len=4, fractions=(0.8, 0.1, 0.1),
                          cache_dir=tmp_path / "cache", documents=documents)  # fmt: skip
    store = bundle.train.store
    assert np.asarray(store.tokens[:]).tolist() == _expected(bundle.tokenizer, texts)
    lengths = [len(bundle.tokenizer.encode(text)) + 1 for text in texts]
    assert store.document_starts.tolist() == np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    # the splits cut between records, in order, and cover the store
    cuts = [bundle.train.start, bundle.train.stop, bundle.val.start, bundle.val.stop, bundle.test.start,
            bundle.test.stop]  # fmt: skip
    assert cuts[0] == 0 and cuts[1] == cuts[2] and cuts[3] == cuts[4] and cuts[5] == len(store)
    assert set(cuts) <= set(store.document_starts.tolist()) | {len(store)}
    assert 0.6 < cuts[1] / len(store) < 0.95 and cuts[2] < cuts[3] < cuts[5]


def test_a_bad_jsonl_line_or_a_missing_column_is_named_with_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    _write_jsonl(path, _TEXTS * 4)
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[:6] + ["{not json"] + lines[6:]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 7 is not JSON"):
        load_text_lm(path, seq_len=4, cache_dir=tmp_path / "cache", documents="jsonl")
    _write_jsonl(path, _TEXTS * 4)
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 1 has no text column 'body'"):
        load_text_lm(path, seq_len=4, cache_dir=tmp_path / "cache", documents="jsonl", text_column="body")
    _write_jsonl(path, _TEXTS * 4, column="body")
    bundle = load_text_lm(path, seq_len=4, cache_dir=tmp_path / "cache", documents="jsonl", text_column="body")
    assert bundle.tokenizer.decode(np.asarray(bundle.train.store.tokens[:]).tolist()) == "".join(_TEXTS * 4)


def test_an_unreadable_file_in_a_directory_is_named(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("the chain moves on.\n" * 40, encoding="utf-8")
    (folder / "b.txt").symlink_to(tmp_path / "gone.txt")  # a link to nothing: unreadable
    with pytest.raises(ValueError, match=r"b\.txt: cannot read"):
        load_text_lm(folder, seq_len=4, cache_dir=tmp_path / "cache")

"""The tokenizers' contracts that the round-trip tests do not reach: a char alphabet has no repeats, vocab_size
covers every id (end of document included), BPE's smallest vocab_size is the special tokens plus the 256 bytes, the
Hugging Face backend gives the char tokenizer's own ids, a Hugging Face file is read as a char tokenizer only with
its special ids, save_hf_format keeps the ids a config sets, and a record keeps its end-of-document token."""

from __future__ import annotations

import json

import pytest

from markovformer.data.readers.tokenizer import (
    BPETokenizer,
    CharTokenizer,
    load_tokenizer,
    save_hf_format,
    tokenizer_from_record,
)


@pytest.mark.parametrize("alphabet", ["aab", "abca", "  "])
def test_a_char_alphabet_with_a_repeated_character_is_refused(alphabet):
    """A repeated character would take two sorted positions but one id (the dict keeps the last), so the ids would
    no longer be 1..len(alphabet) and decode would map an id to the wrong character."""
    with pytest.raises(ValueError, match="no repeats"):
        CharTokenizer(alphabet)


@pytest.mark.parametrize("end_of_document", [False, True])
def test_char_vocab_size_covers_every_id_including_end_of_document(end_of_document):
    """vocab_size is one past the largest id that padding (0), the text or the end-of-document token uses: an
    embedding of that size has a row for every id. By hand: 4 characters take ids 1..4, <eod> 5, so 5 or 6."""
    tokenizer = CharTokenizer("xyz\n", end_of_document=end_of_document)
    ids = set(tokenizer.encode("xyz\n")) | {0}
    if end_of_document:
        ids.add(tokenizer.end_of_document_id)
    assert tokenizer.vocab_size == max(ids) + 1 == len(ids) == (6 if end_of_document else 5)


@pytest.mark.parametrize("special_tokens", [("<pad>",), ("<pad>", "<eod>", "<bos>", "<eos>")])
def test_bpe_smallest_vocab_size_is_exactly_the_special_tokens_plus_256_bytes(special_tokens):
    """The documented floor: len(special_tokens) + 256 is accepted (and every byte still encodes), one less is
    refused naming vocab_size."""
    smallest = len(special_tokens) + 256
    with pytest.raises(ValueError, match="vocab_size"):
        BPETokenizer.train("abc abc", vocab_size=smallest - 1, special_tokens=special_tokens)
    tokenizer = BPETokenizer.train("abc abc", vocab_size=smallest, special_tokens=special_tokens)
    assert tokenizer.vocab_size <= smallest
    text = "abc \u00e9\U0001f600"
    assert tokenizer.decode(tokenizer.encode(text)) == text


@pytest.mark.parametrize("end_of_document", [False, True])
def test_char_hf_backend_gives_the_same_ids_and_text_as_the_tokenizer(end_of_document):
    """hf_backend is documented as "the same ids": a literal "<pad>"/"<eod>" in the text encodes as its characters
    (as ``encode`` does), and decoding with special tokens skipped gives ``decode``'s text (which drops <eod>)."""
    pytest.importorskip("tokenizers")
    tokenizer = CharTokenizer("<>eodpa x", end_of_document=end_of_document)
    backend = tokenizer.hf_backend()
    literal = "a <eod> x <pad> d"
    assert backend.encode(literal).ids == tokenizer.encode(literal)
    ids = tokenizer.encode("ax d")
    if end_of_document:
        ids = ids[:2] + [tokenizer.end_of_document_id] + ids[2:] + [tokenizer.end_of_document_id]
    assert backend.decode(ids, skip_special_tokens=True) == tokenizer.decode(ids) == "ax d"
    assert backend.get_vocab_size() == tokenizer.vocab_size


@pytest.mark.parametrize("token", ["<eod>", "<pad>"])
def test_a_hugging_face_char_file_with_special_ids_elsewhere_is_refused(tmp_path, token):
    """load_tokenizer reads a word-level Hugging Face file as a char tokenizer only when its ids are the char
    tokenizer's (<pad> = 0, <eod> = n + 1): any other id would be silently renumbered, changing the ids."""
    pytest.importorskip("tokenizers")
    tokenizer = CharTokenizer("abc", end_of_document=True)
    save_hf_format(tokenizer, tmp_path)
    assert load_tokenizer(tmp_path).record() == tokenizer.record()  # the file as written reads back
    path = tmp_path / "tokenizer.json"
    record = json.loads(path.read_text())
    record["model"]["vocab"][token] = 7  # neither <pad>'s 0 nor <eod>'s n + 1 = 4
    for added in record.get("added_tokens", []):
        if added["content"] == token:
            added["id"] = 7
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="not a markovformer tokenizer"):
        load_tokenizer(tmp_path)


def test_save_hf_format_keeps_special_ids_a_config_already_sets_and_adds_the_missing_ones(tmp_path):
    """Documented: the special ids go into config.json "unless set there already"."""
    pytest.importorskip("tokenizers")
    tokenizer = BPETokenizer.train("the cat sat. " * 20, vocab_size=270,
                                   special_tokens=("<pad>", "<eod>", "<bos>", "<eos>"))  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "x", "eos_token_id": 99}))
    ids = save_hf_format(tokenizer, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert ids["eos_token_id"] == tokenizer.token_to_id("<eos>") != 99
    assert config["eos_token_id"] == 99  # set already: kept
    assert (config["pad_token_id"], config["bos_token_id"]) == (0, tokenizer.token_to_id("<bos>"))  # added


@pytest.mark.parametrize("end_of_document", [False, True])
def test_a_char_record_round_trips_its_end_of_document_token(tmp_path, end_of_document):
    """record() is what save writes and what a token store's cache key reads: a tokenizer with documents reads back
    with its <eod> id (save/load and tokenizer_from_record), and its record differs from the same alphabet's without
    documents (else the two would share cached tokens)."""
    tokenizer = CharTokenizer("ab \n", end_of_document=end_of_document)
    tokenizer.save(tmp_path)
    for loaded in (load_tokenizer(tmp_path), tokenizer_from_record(tokenizer.record())):
        assert loaded.end_of_document_id == tokenizer.end_of_document_id
        assert loaded.vocab_size == tokenizer.vocab_size
    other = CharTokenizer("ab \n", end_of_document=not end_of_document)
    assert tokenizer.record() != other.record()


@pytest.mark.parametrize("text", ["{not json", "[" * 100_000 + "]" * 100_000], ids=["not-json", "nested-too-deeply"])
def test_a_tokenizer_file_that_is_not_json_raises_naming_it(tmp_path, text):
    """A run's tokenizer/tokenizer.json nested 100,000 deep (a colleague's crafted run) raised RecursionError, a
    traceback in eval and generate, where '{not json' raises ValueError naming the file."""
    (tmp_path / "tokenizer.json").write_text(text)
    with pytest.raises(ValueError, match="tokenizer.json: cannot read a tokenizer"):
        load_tokenizer(tmp_path)

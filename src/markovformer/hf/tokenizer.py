"""A markovformer tokenizer (char or BPE) in the Hugging Face format: ``tokenizer.json`` + ``tokenizer_config.json``
+ special tokens, so that ``AutoTokenizer.from_pretrained`` and ``pipeline("text-generation", model=...)`` read a
model directory directly. The ids are markovformer's (id 0 is ``<pad>``). The files are written by
``markovformer.data.readers.tokenizer.save_hf_format`` (a run writes them into its ``model/`` itself, no
``transformers`` needed); this module adds the ``transformers`` object and the export of an existing tokenizer
directory."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerFast

from markovformer.atomic import atomic_write_text
from markovformer.data.readers.tokenizer import (
    BPETokenizer,
    CharTokenizer,
    load_tokenizer,
    save_hf_format,
    special_ids,
    with_special_ids,
)
from markovformer.file_digest import file_sha256
from markovformer.strict_json import read_json_object


def to_transformers(tokenizer: CharTokenizer | BPETokenizer) -> PreTrainedTokenizerFast:
    """The same ids in a ``transformers`` fast tokenizer (what ``AutoTokenizer`` loads from ``save_hf_format``'s
    files): ``<pad>`` its pad token, ``<bos>``/``<eos>``/``<unk>`` its special tokens where the vocabulary has
    them, and ``<eod>`` its eos token where there is no ``<eos>`` (a tokenizer of text with documents)."""
    with tempfile.TemporaryDirectory() as folder:
        save_hf_format(tokenizer, folder)
        return AutoTokenizer.from_pretrained(folder)


def export_tokenizer(tokenizer: CharTokenizer | BPETokenizer | str | Path, model_directory: str | Path) -> None:
    """Write ``tokenizer`` (or the markovformer tokenizer saved in that directory, e.g. a run's ``tokenizer/``) into
    ``model_directory`` (a saved model's) in the Hugging Face format, and its pad/bos/eos ids into the model's
    ``config.json`` (see ``save_hf_format``). Runs do this themselves; this is for a run trained before they did:
    when ``model_directory`` is a run's ``model/`` whose fingerprint matched its ``config.json``, the fingerprint
    is brought up to date with the edited file (else the run would refuse its own ``model/``). The fingerprint is
    written first, for the file as it will be: a kill before ``config.json`` is written leaves them disagreeing,
    and exporting again writes that file and so mends the pair."""
    from markovformer.training.fingerprint import FINGERPRINT_FILE

    directory = Path(model_directory)
    tokenizer = load_tokenizer(tokenizer) if isinstance(tokenizer, (str, Path)) else tokenizer
    record_path, config_path = directory / FINGERPRINT_FILE, directory / "config.json"
    record = read_json_object(record_path, "a fingerprint record") if record_path.is_file() else None
    if record is not None and config_path.is_file() and record.get("config_sha256") == file_sha256(config_path):
        edited = with_special_ids(config_path, special_ids(tokenizer))
        if edited is not None:
            digest = hashlib.sha256(edited.encode()).hexdigest()
            atomic_write_text(record_path, json.dumps({**record, "config_sha256": digest}, indent=2) + "\n")
    save_hf_format(tokenizer, directory)


__all__ = ["export_tokenizer", "to_transformers"]

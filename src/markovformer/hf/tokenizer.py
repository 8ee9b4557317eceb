"""A markovformer tokenizer (char or BPE) in the Hugging Face format: ``tokenizer.json`` + ``tokenizer_config.json``
+ special tokens, so that ``AutoTokenizer.from_pretrained`` and ``pipeline("text-generation", model=...)`` read a
model directory directly. The ids are markovformer's (id 0 is ``<pad>``)."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from markovformer.data.text import BPETokenizer, CharTokenizer, load_tokenizer

PAD_TOKEN = "<pad>"


def to_transformers(tokenizer: CharTokenizer | BPETokenizer) -> PreTrainedTokenizerFast:
    """The same ids in a ``PreTrainedTokenizerFast``: a char tokenizer becomes a word-level vocabulary over single
    characters (every character its own piece, joined back without spaces); a BPE tokenizer is already a
    ``tokenizers`` object. ``<bos>``/``<eos>``/``<unk>``, when the vocabulary has them, become the special tokens."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers

    if isinstance(tokenizer, CharTokenizer):
        vocabulary = {PAD_TOKEN: 0, **{char: index + 1 for index, char in enumerate(tokenizer.alphabet)}}
        backend = tokenizers.Tokenizer(models.WordLevel(vocabulary, unk_token=None))
        backend.pre_tokenizer = pre_tokenizers.Split(tokenizers.Regex(r"[\s\S]"), behavior="isolated")
        backend.decoder = decoders.Fuse()
        backend.add_special_tokens([PAD_TOKEN])
    else:
        backend = tokenizers.Tokenizer.from_str(tokenizer._tokenizer.to_str())
    vocabulary = backend.get_vocab()
    special = {f"{name}_token": f"<{name}>" for name in ("bos", "eos", "unk") if f"<{name}>" in vocabulary}
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD_TOKEN, **special)


def export_tokenizer(tokenizer: CharTokenizer | BPETokenizer | str | Path, model_directory: str | Path) -> None:
    """Write ``tokenizer`` (or the markovformer tokenizer saved in that directory, e.g. a run's ``tokenizer/``) into
    ``model_directory`` (a saved model's) in the Hugging Face format, and its pad/bos/eos ids into the model's
    ``config.json`` (``transformers``' generation reads them there; markovformer's loader ignores them)."""
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(tokenizer)
    exported = to_transformers(tokenizer)
    directory = Path(model_directory)
    exported.save_pretrained(directory)
    config_path = directory / "config.json"
    if config_path.is_file():
        values = json.loads(config_path.read_text())
        for name in ("pad", "bos", "eos"):
            token_id = getattr(exported, f"{name}_token_id")
            if token_id is not None and f"{name}_token_id" not in values:
                values[f"{name}_token_id"] = token_id
        config_path.write_text(json.dumps(values, indent=2) + "\n")


__all__ = ["export_tokenizer", "to_transformers"]

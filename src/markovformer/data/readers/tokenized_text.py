"""The options of the sources whose text is encoded into a cached, memory-mapped token store (``token_store``) and
cut into causal-LM windows (``text.store_bundle``): text files (``text.load_text_lm``) and local datasets
(``hf_dataset.load_hf_dataset_lm``). Their one list, defaults and check: the sources extend this dataclass, the
loaders take its fields as keywords and build it."""

from __future__ import annotations

import dataclasses
import sys

# Default bytes of the train part BPE merges are learned on (data.fit_bytes). The trainer's memory grows with the
# distinct words of the sample (not with the corpus): peak RSS of a whole prepare, the process's 225 MiB (torch)
# included, fitting 8k merges on 16 / 64 / 128 MB: 350 / 476 / 704 MiB on Python source code (many distinct words),
# 301 MiB at 64 MB of the 1 GB Shakespeare-copies corpus. 64 MB keeps a diverse corpus about half the 1 GB target.
# DNA is all distinct words: fitting 4k merges held 27 bytes a base on 80-base lines and 56 on documents=fasta
# (1,024-base words), 724 / 1,491 MiB above the interpreter on 26.6 MB: a genome wants a smaller fit_bytes.
FIT_BYTES = 64 << 20


@dataclasses.dataclass
class TokenizedText:
    """How text becomes windows of tokens; ``cache_dir`` '' (or None): the default (``token_store.cache_root``)."""

    tokenizer: str = "char"
    vocab_size: int | None = None
    seq_len: int = 128
    fractions: tuple[float, float, float] = (0.9, 0.05, 0.05)
    overlap: int = 0
    cache_dir: str = ""
    fit_bytes: int = FIT_BYTES
    window_starts: str = "contiguous"
    packing: bool = False
    text_column: str = "text"

    def check(self, fitted=None, end_of_document: bool = False) -> None:
        """ValueError naming the first bad option; ``fitted``: a saved tokenizer the text is encoded with (then
        ``vocab_size`` is not needed); ``end_of_document``: the text has documents (BPE then holds ``<eod>`` too)."""
        tokenizer, vocab_size, seq_len, overlap = self.tokenizer, self.vocab_size, self.seq_len, self.overlap
        if tokenizer not in ("char", "bpe"):
            raise ValueError(f"data.tokenizer must be 'char' or 'bpe', got {tokenizer!r}")
        if tokenizer == "char" and vocab_size is not None and fitted is None:
            raise ValueError(f"data.vocab_size={vocab_size} applies only to data.tokenizer='bpe' (the char "
                             f"vocabulary is fitted)")  # fmt: skip
        if tokenizer == "bpe" and vocab_size is None and fitted is None:
            raise ValueError("data.tokenizer='bpe' needs data.vocab_size (the size of the BPE vocabulary to fit)")
        smallest = 256 + 1 + end_of_document  # the bytes, <pad> and <eod>: the byte-level BPE of no merge
        if tokenizer == "bpe" and fitted is None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int)
                                                      or vocab_size < smallest):  # fmt: skip
            specials = "<pad>, <eod>" if end_of_document else "<pad>"
            raise ValueError(f"data.vocab_size={vocab_size!r} must be an int of at least {smallest} ({specials} and "
                             f"the 256 bytes of byte-level BPE)")  # fmt: skip
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"data.seq_len must be a positive int, got {seq_len!r}")
        if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < seq_len:
            raise ValueError(f"data.overlap={overlap!r} must be an int in [0, data.seq_len={seq_len})")
        if self.window_starts not in ("contiguous", "random"):
            raise ValueError(f"data.window_starts={self.window_starts!r} must be 'contiguous' or 'random'")
        fit_bytes = self.fit_bytes
        if isinstance(fit_bytes, bool) or not isinstance(fit_bytes, int) or fit_bytes < 1 << 10:
            raise ValueError(f"data.fit_bytes={fit_bytes!r} must be an int of at least 1024")

    def announce_fitted(self, fitted, where: str, train_size: int, unit: str = "bytes") -> None:
        """``announce_fitted``, for every source of these options; ``train_size``: the train part's size in the
        ``unit`` ``fit_bytes`` counts (FASTA records: bases), of which a BPE fit reads ``fit_bytes`` only (spread
        evenly) when it is larger: then the sample, not the text, held no more merges."""
        sampled = self.tokenizer == "bpe" and self.fit_bytes < train_size
        announce_fitted(fitted, self.vocab_size, where, (self.fit_bytes, train_size, unit) if sampled else None)

    def options(self) -> dict:
        """These options by name (a source that extends the dataclass passes just these to its loader)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(TokenizedText)}


def announce_fitted(fitted, vocab_size: int | None, where: str,
                    sampled: tuple[int, int, str] | None = None) -> None:  # fmt: skip
    """One line on stderr when the BPE vocabulary just fitted on the train part of ``where`` is smaller than
    ``vocab_size`` (a small text offers no more merges): the model's vocabulary is the fitted one. ``sampled``:
    (data.fit_bytes, the train part's size, the unit both count: bytes, or a FASTA's bases) when the merges were
    learned on a sample of the part, which is then what offered no more."""
    if vocab_size is None or fitted.vocab_size >= vocab_size:
        return
    source, advice = f"the train part of {where} offers", ""
    if sampled is not None:
        fit_bytes, size, unit = sampled
        source = f"the data.fit_bytes={fit_bytes} {unit} of the train part of {where} that BPE learned its merges on " \
                 f"offer"  # fmt: skip
        advice = f"; raise data.fit_bytes (the train part has {size:,} {unit}) to learn them on more of it"
    print(f"data.vocab_size={vocab_size}: {source} no more merges, so the BPE vocabulary has {fitted.vocab_size} "
          f"tokens (the model's vocab_size){advice}", file=sys.stderr, flush=True)

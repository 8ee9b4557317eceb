"""Character and byte-level BPE tokenizers, saved as markovformer's ``tokenizer.json`` or in the Hugging Face format
(``save_hf_format``), and read back from either (``load_tokenizer``).

Token id 0 is padding for both tokenizers (it never appears in an encoding), so ``vocab_size`` counts it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import partial
from pathlib import Path

import numpy as np

from markovformer.atomic import atomic_write_text
from markovformer.data.readers.bpe_cuts import safe_cut, safe_pieces
from markovformer.data.readers.token_store import UnknownCharacter
from markovformer.strict_json import parse_json, read_json_object

TOKENIZER_FILE = "tokenizer.json"
HF_TOKENIZER_CONFIG = "tokenizer_config.json"  # with TOKENIZER_FILE, the Hugging Face format (``save_hf_format``)
PAD_TOKEN = "<pad>"
END_OF_DOCUMENT = "<eod>"  # BPE's end-of-document token (id 1) when the text has documents
# Characters per sequence the BPE trainer is fed (``BPETokenizer.train``). Its memory grows with the length of the
# sequences in flight (each is held with per-byte alignments and its pre-tokens as strings): 4 MB reads of a 10 MB
# text peaked at 1,050 MiB; cut to 64 KB pieces, 301 MiB (the process's 225 MiB included).
FIT_PIECE = 1 << 16
# Bytes of a pre-token that BPE reads at most (``BPETokenizer.train``'s pre-tokenizer). GPT-2's pre-tokenizer cannot
# cut a run without whitespace (a line of DNA; Chinese or Japanese without punctuation): the run was one word, which
# the trainer merges by shifting the rest of it at every occurrence (one line of bases fitted in 4.8 s at 100k bases,
# over 60 s at 300k) and the encoder in more than linear time (1.7 us a base at 1M bases, 3.0 us at 10M). A longer
# pre-token is cut every WORD_BYTES bytes from its start, and no token spans such a cut: on DNA with repeats, tokens
# per base held out stayed within 0.4% of the uncut run's (in-sample +2%: a repeat learned whole may straddle a cut).
WORD_BYTES = 1024


class CharTokenizer:
    """One id per character of ``alphabet`` (ids 1..len(alphabet) in sorted character order; 0 is padding)."""

    kind = "char"

    def __init__(self, alphabet: str, end_of_document: bool = False) -> None:
        if not alphabet or len(set(alphabet)) != len(alphabet):
            raise ValueError(f"a character alphabet must be non-empty with no repeats, got {alphabet!r}")
        self.alphabet = "".join(sorted(alphabet))
        self._ids = {char: index + 1 for index, char in enumerate(self.alphabet)}
        # with documents, one more id after the characters ends each document (it decodes to nothing)
        self.end_of_document_id = len(self.alphabet) + 1 if end_of_document else None
        codepoints = np.frombuffer(self.alphabet.encode("utf-32-le"), dtype=np.uint32)
        self._table = np.zeros(int(codepoints.max()) + 1, dtype=np.int64)  # codepoint -> id, 0 = not in the alphabet
        self._table[codepoints] = np.arange(1, len(codepoints) + 1)

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer whose alphabet is the sorted set of characters in ``text``."""
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet) + 1 + (self.end_of_document_id is not None)

    def encode_array(self, text: str) -> np.ndarray:
        """Ids of ``text`` as an int64 array, through a codepoint lookup table (no Python loop); a character
        outside the alphabet raises ``UnknownCharacter`` with its index in ``text``."""
        codepoints = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        if len(codepoints) and codepoints.max() < len(self._table):  # the usual case: one gather, no mask
            ids = self._table[codepoints]
        else:
            inside = codepoints < len(self._table)
            ids = np.zeros(len(codepoints), dtype=np.int64)
            ids[inside] = self._table[codepoints[inside]]
        if not ids.all():
            index = int(np.argmin(ids != 0))
            raise UnknownCharacter(text[index], index)
        return ids

    def safe_cut(self, text: str) -> int:
        """Where ``text`` may be cut, its two sides encoding as the whole does: anywhere, so at its end."""
        return len(text)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """``encode_array`` of each text (one lookup over their concatenation)."""
        ids = self.encode_array("".join(texts))
        return np.split(ids, np.cumsum([len(text) for text in texts])[:-1]) if texts else []

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``'s characters; a character outside the alphabet raises, naming it and its offset."""
        try:
            return [self._ids[char] for char in text]
        except KeyError as error:
            offset = next(i for i, char in enumerate(text) if char not in self._ids)
            raise ValueError(f"character {error.args[0]!r} at offset {offset} is not in the char alphabet") from None

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids`` (exact inverse of ``encode``); an id outside 1..len(alphabet) raises."""
        ids = [int(i) for i in ids]
        for i in ids:
            if not 1 <= i <= len(self.alphabet) and i != self.end_of_document_id:
                raise ValueError(f"token id {i} is outside the character ids 1..{len(self.alphabet)}")
        return "".join(self.alphabet[i - 1] for i in ids if i != self.end_of_document_id)

    def characters_of_ids(self) -> np.ndarray:
        """The characters each id adds to decoded text (int64, one per id): 1, none for padding and ``<eod>``."""
        counts = np.ones(self.vocab_size, dtype=np.int64)
        counts[[0, *([self.end_of_document_id] if self.end_of_document_id is not None else [])]] = 0
        return counts

    def hf_backend(self):
        """The same ids as a Hugging Face ``tokenizers.Tokenizer``: a word-level vocabulary over single characters
        (each character its own piece, joined back without spaces), ``<pad>`` (and ``<eod>``) special tokens."""
        hf = _import_tokenizers()
        vocabulary = {PAD_TOKEN: 0, **self._ids}
        if self.end_of_document_id is not None:
            vocabulary[END_OF_DOCUMENT] = self.end_of_document_id
        backend = hf.Tokenizer(hf.models.WordLevel(vocabulary, unk_token=None))
        backend.pre_tokenizer = hf.pre_tokenizers.Split(hf.Regex(r"[\s\S]"), behavior="isolated")
        backend.decoder = hf.decoders.Fuse()
        backend.add_special_tokens([token for token in vocabulary if token in (PAD_TOKEN, END_OF_DOCUMENT)])
        backend.encode_special_tokens = True  # a literal "<eod>" is five characters, as in ``encode``
        return backend

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/tokenizer.json`` ({"kind": "char", "alphabet": ...}); returns its path."""
        return _write_json(Path(directory), self.record())

    def record(self) -> dict:
        """What ``save`` writes (and what a token store's cache key reads)."""
        record = {"kind": self.kind, "alphabet": self.alphabet}
        return {**record, "end_of_document": True} if self.end_of_document_id is not None else record


class BPETokenizer:
    """Byte-level BPE (Hugging Face ``tokenizers``): every text encodes, unseen characters as bytes, and decodes
    back exactly. Id 0 is the ``<pad>`` special token. Special tokens are never read from text: a literal
    ``<eod>`` or ``<pad>`` in a corpus encodes as its bytes (``encode_special_tokens``), only the library adds
    their ids (Hugging Face's default would make the text ``<eos>`` end a reference there, and count as padding)."""

    kind = "bpe"

    def __init__(self, hf_tokenizer) -> None:
        self._tokenizer = hf_tokenizer
        if hf_tokenizer.token_to_id(PAD_TOKEN) != 0:
            raise ValueError(f"a BPE tokenizer must have {PAD_TOKEN!r} as id 0")
        hf_tokenizer.encode_special_tokens = True  # not saved with it: set on every tokenizer made or loaded
        # WORD_BYTES when the pre-tokenizer cuts long pre-tokens (``train``'s), None for one saved before that cut or
        # a foreign tokenizer.json: a long run of text without whitespace is then cut nowhere
        self._word_bytes = WORD_BYTES if _pre_tokenizer_record(hf_tokenizer) == _pre_tokenizer_record() else None

    @classmethod
    def train(
        cls, text: str | Iterable[str], vocab_size: int, seed: int = 0, special_tokens: tuple[str, ...] = (PAD_TOKEN,),
        text_bytes: int | None = None,
    ) -> BPETokenizer:
        """Learn merges on ``text`` (a string, or an iterable of strings read once) up to ``vocab_size`` tokens (at
        least len(special_tokens) + 256: the special tokens, then the 256 bytes; fewer when the text offers fewer
        merges). Words are GPT-2's pre-tokens, a longer one cut every ``WORD_BYTES`` bytes from its start (a run
        without whitespace: DNA, Chinese or Japanese), so that no token spans such a cut; ``special_tokens`` take ids
        0, 1, ... in order (the first must be ``<pad>``) and are never produced by splitting text; translation adds
        ``<bos>``, ``<eos>`` and ``<unk>``. ``seed`` keeps the signature uniform with other fitted objects: the
        Hugging Face BPE trainer is deterministic, so the merges depend on ``text`` and ``vocab_size`` only.
        ``text_bytes``: at most this many UTF-8 bytes of text are fed (counted here for a string). Each merge
        shortens the text by a token, so there are fewer merges than bytes: a larger ``vocab_size`` is cut to that
        bound, which changes no merge (the trainer reserves memory for ``vocab_size`` entries up front, and aborted
        the process for a ``vocab_size`` of billions)."""
        special_tokens = tuple(special_tokens)
        if not special_tokens or special_tokens[0] != PAD_TOKEN or len(set(special_tokens)) != len(special_tokens):
            raise ValueError(f"special_tokens must start with {PAD_TOKEN!r} and not repeat, got {special_tokens!r}")
        smallest = len(special_tokens) + 256
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < smallest:
            raise ValueError(
                f"BPE vocab_size must be an int >= {smallest} ({len(special_tokens)} special tokens + 256 bytes), "
                f"got {vocab_size!r}"
            )
        if isinstance(text, str):
            text_bytes = len(text.encode("utf-8"))
        if text_bytes is not None:
            vocab_size = min(vocab_size, smallest + text_bytes)
        hf = _import_tokenizers()
        tokenizer = hf.Tokenizer(hf.models.BPE())
        tokenizer.pre_tokenizer = _word_split_pre_tokenizer()
        tokenizer.decoder = hf.decoders.ByteLevel()
        trainer = hf.trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(special_tokens),
            initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        texts = [text] if isinstance(text, str) else text
        # The trainer holds each sequence it is fed with per-byte alignments and its pre-tokens as strings, several
        # sequences at once (a 4 MB sequence cost ~800 MB): it is fed pieces of at most ~FIT_PIECE characters cut
        # where the pre-tokenizer cuts anyway, so the word counts, hence the merges, equal those of the whole text.
        cut = partial(safe_cut, word_bytes=WORD_BYTES)
        pieces = (piece for whole in texts for piece in safe_pieces(whole, FIT_PIECE, cut))
        tokenizer.train_from_iterator(pieces, trainer=trainer)
        return cls(tokenizer)

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size()

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (a special token such as ``"<eos>"``, or a vocabulary entry), None if absent."""
        return self._tokenizer.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (any text encodes)."""
        return self._tokenizer.encode(text).ids

    @property
    def end_of_document_id(self) -> int | None:
        return self._tokenizer.token_to_id(END_OF_DOCUMENT)

    def safe_cut(self, text: str) -> int:
        """The last index in the second half of ``text`` where it may be cut: encoding the two sides apart gives the
        ids of ``text`` (0 when there is none, then the text is carried on whole)."""
        return safe_cut(text, self._word_bytes)

    def encode_array(self, text: str, pieces: int = 64) -> np.ndarray:
        """Ids of ``text`` as an int64 array, encoded with the Hugging Face batch API (on every core) in about
        ``pieces`` pieces cut where the pre-tokenizer cuts anyway (``safe_cut``), so the ids equal ``encode(text)``."""
        parts = list(safe_pieces(text, max(len(text) // pieces, 1 << 14), self.safe_cut))
        encodings = self._batch(parts)
        return np.concatenate([np.asarray(encoding.ids, dtype=np.int64) for encoding in encodings] or
                              [np.zeros(0, np.int64)])  # fmt: skip

    def _batch(self, texts: list[str]):
        """The batch API without offsets (``encode_batch_fast``, tokenizers >= 0.20; the ids are the same)."""
        fast = getattr(self._tokenizer, "encode_batch_fast", None)
        return fast(texts) if fast is not None else self._tokenizer.encode_batch(texts)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """The ids of each text, encoded together with the Hugging Face batch API (on every core)."""
        return [np.asarray(encoding.ids, dtype=np.int64) for encoding in self._batch(list(texts))]

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids`` (exact inverse of ``encode``)."""
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def characters_of_ids(self) -> np.ndarray | None:
        """The characters each id adds to decoded text (int64, one per id): a token's UTF-8 bytes that start a
        character (not 0b10xxxxxx), so that a character split across tokens counts once, in the token holding its
        first byte; none for special tokens. None for a tokenizer that is not byte-level (a foreign tokenizer.json):
        one that decodes otherwise (no ByteLevel decoder: tokens joined with spaces, a suffix dropped) or whose entries
        are no byte-level characters."""
        if not isinstance(self._tokenizer.decoder, _import_tokenizers().decoders.ByteLevel):
            return None
        counts = np.zeros(self.vocab_size, dtype=np.int64)
        special = {token.content for token in self._tokenizer.get_added_tokens_decoder().values()}
        byte_of = _byte_level_bytes()
        for token, index in self._tokenizer.get_vocab(with_added_tokens=True).items():
            if token in special:
                continue
            if any(char not in byte_of for char in token):
                return None
            counts[index] = sum(byte_of[char] & 0xC0 != 0x80 for char in token)
        return counts

    def hf_backend(self):
        """A copy of the Hugging Face ``tokenizers.Tokenizer`` that encodes (the same ids)."""
        backend = _import_tokenizers().Tokenizer.from_str(self._tokenizer.to_str())
        backend.encode_special_tokens = True
        return backend

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/tokenizer.json`` ({"kind": "bpe", "tokenizer": <HF tokenizer JSON>}); returns its path."""
        return _write_json(Path(directory), self.record())

    def record(self) -> dict:
        """What ``save`` writes (and what a token store's cache key reads)."""
        return {"kind": self.kind, "tokenizer": json.loads(self._tokenizer.to_str())}


def load_tokenizer(directory: str | Path) -> CharTokenizer | BPETokenizer:
    """Read back a tokenizer written by ``CharTokenizer.save`` or ``BPETokenizer.save``, or one in the Hugging Face
    format written by ``save_hf_format`` (a run's ``model/``; also after ``transformers``' ``save_pretrained``):
    the same ids either way."""
    path = Path(directory) / TOKENIZER_FILE
    try:
        record = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: cannot read a tokenizer ({error})") from None
    if isinstance(record, dict) and "kind" not in record and isinstance(record.get("model"), dict):
        return _from_hf_record(record, path)
    return tokenizer_from_record(record, path)


def tokenizer_from_record(record: dict, path: str | Path = "tokenizer") -> CharTokenizer | BPETokenizer:
    """The tokenizer of a record written by ``record()`` (``path``: where it came from, for errors)."""
    kind = record.get("kind") if isinstance(record, dict) else None
    if kind == "char":
        return CharTokenizer(record["alphabet"], end_of_document=bool(record.get("end_of_document")))
    if kind == "bpe":
        return BPETokenizer(_import_tokenizers().Tokenizer.from_str(json.dumps(record["tokenizer"])))
    raise ValueError(f"{path}: unknown tokenizer kind {kind!r} (expected 'char' or 'bpe')")


def _from_hf_record(record: dict, path: Path) -> CharTokenizer | BPETokenizer:
    """The markovformer tokenizer of a Hugging Face ``tokenizer.json``: a word-level vocabulary of single
    characters (ids 1..n in sorted order, ``<pad>`` 0, ``<eod>`` n+1 if present) is a char tokenizer; a BPE model
    is a BPE tokenizer as it stands."""
    model_type = record["model"].get("type")
    if model_type == "BPE":
        processor = record.get("post_processor") or {}
        if processor.get("type") == "TemplateProcessing" and not processor.get("special_tokens"):
            record = {**record, "post_processor": None}  # transformers' save adds this one; it adds no token
        return BPETokenizer(_import_tokenizers().Tokenizer.from_str(json.dumps(record)))
    if model_type == "WordLevel":
        vocabulary = dict(record["model"].get("vocab", {}))
        end_of_document = vocabulary.pop(END_OF_DOCUMENT, None)
        pad = vocabulary.pop(PAD_TOKEN, None)
        alphabet = "".join(sorted(vocabulary))
        if (pad == 0 and alphabet and all(len(char) == 1 for char in vocabulary)
                and [vocabulary[char] for char in alphabet] == list(range(1, len(alphabet) + 1))
                and end_of_document in (None, len(alphabet) + 1)):  # fmt: skip
            return CharTokenizer(alphabet, end_of_document=end_of_document is not None)
    raise ValueError(f"{path}: a Hugging Face tokenizer.json of model type {model_type!r} that is not a markovformer "
                     f"tokenizer (a byte-level BPE, or single characters with ids 1..n and <pad> as 0)")  # fmt: skip


def save_hf_format(tokenizer: CharTokenizer | BPETokenizer, directory: str | Path) -> dict[str, int]:
    """Write ``tokenizer`` into ``directory`` in the Hugging Face format (``tokenizer.json`` +
    ``tokenizer_config.json``, whose special tokens are ``<pad>`` and, where the vocabulary has them, ``<bos>``,
    ``<eos>`` (else ``<eod>``, the end of a document), ``<unk>``), which
    ``transformers.AutoTokenizer.from_pretrained(directory)`` reads with no markovformer code. When ``directory``
    holds a model's ``config.json``, the special tokens' ids go into it as ``pad_token_id`` / ``bos_token_id`` /
    ``eos_token_id`` (unless set there already), and into its
    ``generation_config.json`` when there is one: ``transformers``' generation reads them from there; markovformer's
    loader ignores them. Returns those ids."""
    directory = Path(directory)
    backend = tokenizer.hf_backend()
    special = _special_tokens(backend)
    # split_special_tokens: transformers encodes a literal "<eod>" in text as its characters, as markovformer does
    settings = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
                "split_special_tokens": True,
                **{f"{name}_token": token for name, token in special.items()}}  # fmt: skip
    ids = special_ids(tokenizer)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_text(directory / TOKENIZER_FILE, backend.to_str(pretty=True))
    atomic_write_text(directory / HF_TOKENIZER_CONFIG, json.dumps(settings, indent=2) + "\n")
    # the model's config.json, and its generation_config.json where transformers' save_pretrained wrote one (generate
    # reads the ids from there when it exists: without them it ran to max_new_tokens past the end of sequence)
    generation_config = directory / "generation_config.json"
    if _is_causal_lm(directory / "config.json"):
        atomic_write_text(generation_config, _suppressing_padding(generation_config, ids["pad_token_id"]))
    for config_path in (directory / "config.json", generation_config):
        edited = with_special_ids(config_path, ids)
        if edited is not None:
            atomic_write_text(config_path, edited)
    return ids


def _is_causal_lm(config_path: Path) -> bool:
    """Whether ``config_path`` is the config.json of a causal language model (markovformer's save names the class,
    transformers' save_pretrained the wrapper's: both end in ForCausalLM)."""
    if not config_path.is_file():
        return False
    values = read_json_object(config_path, "a model's config")
    names = [values.get("architecture") or "", *(values.get("architectures") or ())]
    return any(name.endswith("ForCausalLM") for name in names)


def _suppressing_padding(generation_config: Path, pad_id: int) -> str:
    """The text of a causal LM's generation_config.json whose ``suppress_tokens`` hold ``<pad>``: padding is never a
    target, and markovformer's generate never chooses it, but transformers' generate and pipeline sample from every
    id (after 5 steps of a char run, 4 of 1,200 sampled tokens were <pad>). Other settings are kept."""
    values = read_json_object(generation_config, "a generation config") if generation_config.is_file() else {}
    suppressed = list(values.get("suppress_tokens") or ())
    values["suppress_tokens"] = suppressed if pad_id in suppressed else [*suppressed, pad_id]
    return json.dumps(values, indent=2) + "\n"


def special_ids(tokenizer: CharTokenizer | BPETokenizer) -> dict[str, int]:
    """The ``pad_token_id`` / ``bos_token_id`` / ``eos_token_id`` that ``save_hf_format`` writes for ``tokenizer``
    (those its vocabulary has)."""
    backend = tokenizer.hf_backend()
    return {f"{name}_token_id": backend.token_to_id(token) for name, token in _special_tokens(backend).items()
            if name != "unk"}  # fmt: skip


def _special_tokens(backend) -> dict[str, str]:
    """transformers' special tokens (pad, bos, eos, unk) that the vocabulary of ``backend`` has: ``<pad>``, ...,
    and ``<eod>`` as eos where there is no ``<eos>`` (a text run with documents: generation ends with one, as
    GPT-2's ends with its end of text)."""
    found = {name: f"<{name}>" for name in ("pad", "bos", "eos", "unk") if backend.token_to_id(f"<{name}>") is not None}
    if "eos" not in found and backend.token_to_id(END_OF_DOCUMENT) is not None:
        found["eos"] = END_OF_DOCUMENT
    return found


def with_special_ids(config_path: Path, ids: dict[str, int]) -> str | None:
    """The text ``save_hf_format`` writes into the JSON config at ``config_path``: its values with the ids it does
    not set yet; None when there is no such file or nothing changes."""
    if not config_path.is_file():
        return None
    values = read_json_object(config_path, "a JSON config")
    merged = {**values, **{key: value for key, value in ids.items() if values.get(key) is None}}
    return json.dumps(merged, indent=2) + "\n" if merged != values else None


def _byte_level_bytes() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2's): the character that stands for each byte in a vocabulary entry -> the
    byte. Printable Latin-1 bytes stand for themselves; the other bytes, in order, for U+0100 onwards."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]  # "!".."~", "¡".."¬", "®".."ÿ"
    others = [byte for byte in range(256) if byte not in printable]
    return {**{chr(byte): byte for byte in printable}, **{chr(256 + n): byte for n, byte in enumerate(others)}}


def _word_split_pre_tokenizer():
    """``BPETokenizer.train``'s pre-tokenizer: GPT-2's, then a longer pre-token cut every ``WORD_BYTES`` bytes."""
    hf = _import_tokenizers()
    # after ByteLevel every character stands for one byte: "." counts bytes
    return hf.pre_tokenizers.Sequence([
        hf.pre_tokenizers.ByteLevel(add_prefix_space=False),
        hf.pre_tokenizers.Split(hf.Regex(f".{{1,{WORD_BYTES}}}"), behavior="isolated")])  # fmt: skip


def _pre_tokenizer_record(hf_tokenizer=None) -> dict | None:
    """The saved form of the pre-tokenizer of ``hf_tokenizer`` (None: of ``_word_split_pre_tokenizer``), read from the
    pre-tokenizer alone (the whole tokenizer's JSON holds its vocabulary and merges)."""
    pre_tokenizer = _word_split_pre_tokenizer() if hf_tokenizer is None else hf_tokenizer.pre_tokenizer
    return None if pre_tokenizer is None else json.loads(pre_tokenizer.__getstate__())


def _import_tokenizers():
    """Hugging Face ``tokenizers``, imported only when BPE or the Hugging Face format is used (a dependency of the
    command, not of the core)."""
    try:
        import tokenizers
    except ImportError:
        raise ModuleNotFoundError("BPE and the Hugging Face tokenizer format need Hugging Face 'tokenizers', a "
                                  "dependency of markovformer: pip install markovformer", name="tokenizers") from None
    return tokenizers


def _write_json(directory: Path, record: dict) -> Path:
    """Write ``record`` to ``directory/tokenizer.json`` atomically (temporary file, then rename)."""
    return atomic_write_text(Path(directory) / TOKENIZER_FILE, json.dumps(record))

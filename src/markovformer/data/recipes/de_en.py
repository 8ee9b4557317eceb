"""German-English sentence pairs from the example sentences of the Ding dictionary (Debian package ``trans-de-en``).

The dictionary file (``/usr/share/trans/de-en`` in the package) is UTF-8, one entry per line:

    German :: English
    annehmbar; passabel {adj} | halbwegs annehmbar | Seine Noten sind passabel. :: decent; respectable | ...

``#`` starts a comment line. `` | `` separates the senses of an entry, in the same order on both sides; ``; ``
separates synonyms within a sense; ``{...}`` (grammar), ``[...]`` (domain, register), ``<...>`` (other spellings),
``(...)`` (optional words, comments) and ``/.../`` (abbreviations) annotate. Example sentences are senses like
``Seine Noten sind passabel. :: His marks are decent / respectable.``; ``parse_ding`` keeps those.

The dictionary is GPL-2+ (Frank Richter, TU Chemnitz); the pairs are written to a file of yours, not shipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from markovformer.atomic import atomic_write_text
from markovformer.data.recipes.debian import package_file, unpacked_debian_package

PACKAGE = "trans-de-en"
DICTIONARY_PATH = "usr/share/trans/de-en"  # inside the unpacked package
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>|\([^)]*\)|(?<!\S)/[^/\s][^/]*/(?!\S)")
# Placeholders (jdm. = somebody, etw. = something ...) mark a phrase pattern, not a sentence.
_PLACEHOLDERS = re.compile(r"(?<!\w)(jd|jdm|jdn|jds|etw|sb|sth|sb's|sth's)\.(?!\w)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?][\"'“”’»«]?$")


def _clean(text: str) -> str:
    """One sense without annotations: its first synonym, annotations removed, spaces normalised."""
    text = text.split("; ")[0]
    previous = None
    while previous != text:  # nested brackets, e.g. "(a (b) c)", come off from the inside out
        previous, text = text, _ANNOTATION.sub(" ", text)
    text = re.sub(r"\s+", " ", text).strip()
    return re.sub(r" ([.,!?;:])", r"\1", text)


def _is_sentence(text: str, min_words: int) -> bool:
    return (
        len(text.split()) >= min_words
        and (text[0].isupper() or text[0].isdigit() or text[0] in "\"'„“»")
        and _SENTENCE_END.search(text) is not None
        and not any(char in text for char in "/\t{}[]<>()|")
        and _PLACEHOLDERS.search(text) is None
        and "..." not in text
        and "…" not in text
    )


def parse_ding(lines: Iterable[str], *, min_words: int = 3, source: str = "<lines>") -> list[tuple[str, str]]:
    """Example sentence pairs ``(german, english)`` of Ding dictionary lines, in order, without repeats.

    From each entry, every pair of aligned senses (`` | ``-separated, counted alike on both sides; an entry whose
    counts differ is skipped) is cleaned (first ``; ``-synonym, annotations dropped) and kept when both sides read as
    a sentence: at least ``min_words`` words, a capital (or digit, or quote) first, ``.``/``!``/``?`` last, and no
    leftover alternatives (``/``), placeholders (``etw.``, ``sth.``) or ellipses. A non-comment line without exactly
    one `` :: `` raises ValueError naming ``source`` and the line.
    """
    if isinstance(min_words, bool) or not isinstance(min_words, int) or min_words < 1:
        raise ValueError(f"min_words must be a positive int, got {min_words!r}")
    pairs: dict[tuple[str, str], None] = {}  # a dict keeps the first occurrence's order
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\n").rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        sides = line.split(" :: ")
        if len(sides) != 2:
            raise ValueError(
                f"{source}: line {number}: expected 'German :: English' (one ' :: '), found {len(sides) - 1} in "
                f"{line[:60]!r}"
            )
        german_senses, english_senses = (side.split(" | ") for side in sides)
        if len(german_senses) != len(english_senses):
            continue
        for german, english in zip(german_senses, english_senses, strict=True):
            german, english = _clean(german), _clean(english)
            if _is_sentence(german, min_words) and _is_sentence(english, min_words):
                pairs[(german, english)] = None
    return list(pairs)


def prepare_de_en(out_path: str | Path, *, min_words: int = 3) -> Path:
    """Write the Ding example sentence pairs as a TSV (``German<TAB>English`` per line) to ``out_path``, atomically.

    The dictionary comes from the Debian package (``recipes.debian.unpacked_debian_package``: fetched and unpacked in a
    temporary folder, nothing installed). Raises RuntimeError when apt-get or dpkg is missing, the download fails
    or the package lacks the dictionary. Returns ``out_path``.
    """
    with unpacked_debian_package(PACKAGE) as root:
        dictionary = package_file(root, DICTIONARY_PATH, PACKAGE)
        with dictionary.open(encoding="utf-8") as lines:
            pairs = parse_ding(lines, min_words=min_words, source=f"{PACKAGE}:{DICTIONARY_PATH}")
    if not pairs:
        raise RuntimeError(f"no example sentence pairs found in {PACKAGE} (min_words={min_words})")
    return atomic_write_text(out_path, "".join(f"{german}\t{english}\n" for german, english in pairs))

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
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from markovformer.atomic import atomic_write_text

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
    """Write the Ding example sentence pairs as a TSV (``German<TAB>English`` per line) to ``out_path``.

    Fetches the Debian package with ``apt-get download trans-de-en`` into a temporary folder and unpacks it there
    with ``dpkg -x``: nothing is installed system-wide, and the folder is removed afterwards. The file is written
    atomically. Raises RuntimeError when apt-get or dpkg is missing, the download fails (no network, or the package
    lists need ``apt-get update``) or the package lacks the dictionary. Returns ``out_path``.
    """
    for tool in ("apt-get", "dpkg"):
        if shutil.which(tool) is None:
            raise RuntimeError(
                f"prepare_de_en needs {tool!r} (a Debian or Ubuntu system) to fetch the {PACKAGE} package; "
                "it is not on PATH"
            )
    with tempfile.TemporaryDirectory(prefix="markovformer-de-en-") as folder:
        folder = Path(folder)
        _run(["apt-get", "download", PACKAGE], folder, "download")
        packages = sorted(folder.glob(f"{PACKAGE}_*.deb"))
        if not packages:
            raise RuntimeError(f"apt-get download {PACKAGE} finished but left no .deb file in {folder}")
        _run(["dpkg", "-x", str(packages[0]), str(folder / "unpacked")], folder, "unpack")
        dictionary = folder / "unpacked" / DICTIONARY_PATH
        if not dictionary.is_file():
            raise RuntimeError(f"{packages[0].name} has no {DICTIONARY_PATH}; the package layout has changed")
        with dictionary.open(encoding="utf-8") as lines:
            pairs = parse_ding(lines, min_words=min_words, source=f"{packages[0].name}:{DICTIONARY_PATH}")
    if not pairs:
        raise RuntimeError(f"no example sentence pairs found in {PACKAGE} (min_words={min_words})")
    return atomic_write_text(out_path, "".join(f"{german}\t{english}\n" for german, english in pairs))


def _run(command: list[str], folder: Path, what: str) -> None:
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RuntimeError(f"could not {what} {PACKAGE} ({' '.join(command)}): {error}") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        hint = " (no network, or run 'apt-get update' first?)" if what == "download" else ""
        raise RuntimeError(
            f"could not {what} {PACKAGE}{hint}: '{' '.join(command)}' exited {done.returncode}: "
            f"{message[-1] if message else 'no message'}"
        )

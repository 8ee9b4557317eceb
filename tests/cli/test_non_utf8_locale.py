"""The command line under a locale that is not UTF-8 (``LC_ALL=C`` with ``PYTHONUTF8=0``: Python's standard streams
are then ASCII): what it prints keeps its characters, and nothing fails for a character the locale lacks."""

from __future__ import annotations

import pytest
from conftest import ASCII_LOCALE, run_cli


@pytest.mark.parametrize(("command", "text"), [(("kind", "list"), "O(T·k)"), (("experiment", "list"), "H(π)")])
def test_catalogues_print_their_text_as_utf8(command, text):
    """Both failed: "'ascii' codec can't encode character '\\xb7'" (kind list), '\\u03c0' (experiment list)."""
    done = run_cli(*command, env=ASCII_LOCALE, encoding="utf-8")
    assert done.returncode == 0, done.stderr
    assert text in done.stdout


def test_a_character_another_encoding_lacks_is_printed_as_an_escape():
    done = run_cli("experiment", "list", env={"PYTHONIOENCODING": "latin-1"}, encoding="latin-1")
    assert done.returncode == 0, done.stderr
    assert "H(\\u03c0)" in done.stdout


def test_a_utf8_prompt_the_ascii_locale_decoded_byte_by_byte_is_read_as_typed():
    """`generate RUN --prompt 'Grüße'` there was refused: "--prompt: byte 0xc3 at offset 2 is not UTF-8" (it is)."""
    from markovformer.cli.generate import utf8_prompt

    typed = "Grüße 中文😀"
    assert utf8_prompt(typed.encode("utf-8").decode("ascii", "surrogateescape")) == typed  # as Python holds argv
    assert utf8_prompt(typed) == typed and utf8_prompt(None) is None
    latin1 = "Grüße".encode("latin-1").decode("utf-8", "surrogateescape")  # a Latin-1 terminal's bytes
    with pytest.raises(ValueError, match="--prompt: byte 0xfc at offset 2 is not UTF-8"):
        utf8_prompt(latin1)

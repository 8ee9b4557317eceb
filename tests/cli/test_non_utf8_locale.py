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

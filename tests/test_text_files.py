"""Every text file the package reads or writes is UTF-8, whatever the locale: a run written on a cluster node whose
locale is not UTF-8 (Python's ASCII under ``LC_ALL=C`` with ``PYTHONUTF8=0``, Latin-1 elsewhere) reads back
anywhere, and the shipped configs, whose comments hold non-ASCII characters, read under any locale."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from conftest import ASCII_LOCALE

import markovformer

PACKAGE = Path(markovformer.__file__).parent
BINARY_OPENERS = {"os", "gzip", "bz2", "lzma", "wave", "tarfile", "zipfile", "tokenize"}  # modules whose open differs


def _mode(call: ast.Call, position: int) -> str | None:
    """The call's mode argument when it is a literal (positional at ``position`` or ``mode=``)."""
    given = next((word.value for word in call.keywords if word.arg == "mode"), None)
    if given is None and len(call.args) > position:
        given = call.args[position]
    return given.value if isinstance(given, ast.Constant) and isinstance(given.value, str) else None


def _text_access_without_encoding(call: ast.Call) -> bool:
    """Whether ``call`` opens, reads or writes a text file without naming its encoding (the locale's then)."""
    if any(word.arg == "encoding" for word in call.keywords):
        return False
    function = call.func
    if isinstance(function, ast.Name) and function.id == "open":
        return "b" not in (_mode(call, 1) or "r")
    if not isinstance(function, ast.Attribute):
        return False
    if isinstance(function.value, ast.Name) and function.value.id in BINARY_OPENERS and function.attr == "open":
        return False
    if function.attr in ("read_text", "write_text"):
        return True
    if function.attr == "open":  # Path.open(mode)
        return "b" not in (_mode(call, 0) or "r")
    if function.attr == "fdopen":
        return "b" not in (_mode(call, 1) or "r")
    return False


def test_every_text_file_access_names_its_encoding():
    offenders = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and _text_access_without_encoding(node)
    ]
    assert offenders == []


def test_the_shipped_configs_read_under_an_ascii_locale():
    """`markovformer config list` failed there: 'ascii' codec can't decode byte 0xe2 (a dash in a comment)."""
    script = ("from markovformer.training.config_files import config_summary, shipped_configs\n"
              "print(len([config_summary(path) for path in shipped_configs().values()]))\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, **ASCII_LOCALE}, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(list((PACKAGE / "configs").glob("*.yaml")))

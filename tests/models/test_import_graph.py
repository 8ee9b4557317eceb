"""The core and data modules import markovformer modules at module top, so the import graph is the one the files
show: no function-local markovformer import outside the listed cycle breaks, no cycle between the MAT modeling and
generation modules or the translation loader and batching modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import markovformer

PACKAGE = Path(markovformer.__file__).parent
# deferred on purpose, each with a comment at the import
ALLOWED = {
    # exporting an old run's tokenizer edits its model/config.json, so it refreshes the run's fingerprint (a
    # training concept) there, and only there
    ("hf/tokenizer.py", "markovformer.training.fingerprint"),
}


def _local_imports(path: Path) -> list[str]:
    """The markovformer modules imported inside a function body of ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("markovformer"):
                    found.append(inner.module)
                elif isinstance(inner, ast.Import):
                    found += [alias.name for alias in inner.names if alias.name.startswith("markovformer")]
    return found


def test_no_function_local_markovformer_imports_in_models_data_markov_hf():
    offenders = [
        (str(path.relative_to(PACKAGE)), module)
        for folder in ("models", "data", "markov", "hf")
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        for module in _local_imports(path)
    ]
    assert set(offenders) <= ALLOWED, offenders


# one interpreter imports torch (the slow part, outside markovformer) and forks a fresh child per module, which
# imports that module first: no markovformer module is loaded before the fork, so each child meets the package's
# own import order as a new interpreter would (four interpreters each importing torch took ~4x as long)
FORK_EACH_FIRST = """
import importlib, os, sys, traceback
import torch  # noqa: F401
assert not [name for name in sys.modules if name.startswith("markovformer")]
failed = []
for first in sys.argv[1:]:
    child = os.fork()
    if child == 0:
        try:
            importlib.import_module(first)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    if os.waitpid(child, 0)[1] != 0:
        failed.append(first)
sys.exit(f"importing these first failed: {failed}" if failed else 0)
"""


def test_the_former_circles_import_either_side_first():
    firsts = ("markovformer.models.markov_translator.generation", "markovformer.models.markov_translator.modeling",
              "markovformer.data.translation.batching", "markovformer.data.translation.parallel")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", FORK_EACH_FIRST, *firsts], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr

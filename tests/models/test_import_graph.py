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


def test_the_former_circles_import_either_side_first():
    for first in ("markovformer.models.markov_translator.generation", "markovformer.models.markov_translator.modeling",
                  "markovformer.data.translation.batching", "markovformer.data.translation.parallel"):  # fmt: skip
        result = subprocess.run([sys.executable, "-c", f"import {first}"], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr

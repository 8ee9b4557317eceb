"""What a user's type checker sees of markovformer: the names the package exports have their classes' types, not
Any. (mypy itself, on a script using the public API, takes longer than the suite allows: README, "Typing".)"""

from __future__ import annotations

import ast
from pathlib import Path

import markovformer

PACKAGE = Path(markovformer.__file__).parent


def test_every_top_level_name_is_imported_for_type_checkers_from_the_module_it_is_loaded_from():
    """``markovformer.NAME`` is loaded on first use by ``__getattr__``, which a type checker cannot follow: the
    ``if TYPE_CHECKING:`` block must import each exported name, re-exported (``NAME as NAME``), from its module."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    }
    assert imported == markovformer._EXPORTS


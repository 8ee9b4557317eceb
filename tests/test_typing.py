"""What a user's type checker sees of markovformer: the names the package exports have their classes' types, not
Any. (mypy itself, on a script using the public API, takes longer than the suite allows: README, "Typing".)"""

from __future__ import annotations

import ast
import inspect
import typing
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


def test_the_python_api_reaches_a_type_checker_with_its_signatures():
    """Each function of the Python API annotates its parameters and result, and ``built_on_the_cpu``, which wraps
    several of them, returns the type it is given: unannotated, it made ``evaluate``, ``load_trained_run`` and
    ``write_inspection_report`` untyped (Any) to mypy and pyright."""
    from markovformer.training.evaluation import evaluate
    from markovformer.training.inspection import write_inspection_report
    from markovformer.training.isolation import built_on_the_cpu
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.run_dir import load_run, load_trained_run
    from markovformer.training.runner import resume, train

    decorator = typing.get_type_hints(built_on_the_cpu)
    assert decorator["return"] == decorator["function"]
    for function in (train, resume, evaluate, load_run, load_trained_run, write_inspection_report, resolve_run_config):
        hints = typing.get_type_hints(function)
        assert set(hints) == {*inspect.signature(function).parameters, "return"}, function.__name__
    assert typing.get_type_hints(write_inspection_report)["return"] is Path


"""What a user's type checker sees of markovformer: a package marked typed whose public names carry their
annotations, not Any. (mypy itself, on a script using the public API, takes longer than the suite allows: README,
"Typing".)"""

from __future__ import annotations

import ast
import inspect
import sys
import types
import typing
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the dev extra's tomli, the same parser
    import tomli as tomllib

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


def _admits(annotation: object, value: object) -> bool:
    """Whether ``value`` is of the type ``annotation`` at its outer level (a union's members, a generic's origin)."""
    if isinstance(annotation, types.UnionType):
        return any(_admits(member, value) for member in typing.get_args(annotation))
    if annotation is None or annotation is type(None):
        return value is None
    return isinstance(value, typing.get_origin(annotation) or annotation)


def test_generation_config_annotations_admit_the_lists_generate_takes():
    """``suppress_tokens`` takes any sequence of ids (the README's list, the causal-LM task's own ``[pad]``) and keeps
    a tuple; annotated ``tuple[int, ...]``, every list a user passed was a type error."""
    from markovformer.models.generation import GenerationConfig

    hints = typing.get_type_hints(GenerationConfig)
    for value in ([0, 2], (0, 2), None):
        assert _admits(hints["suppress_tokens"], value), value
    assert _admits(hints["suppress_tokens"], GenerationConfig(suppress_tokens=[0, 2]).suppress_tokens)


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


def test_the_package_declares_itself_typed_and_the_wheel_ships_the_marker():
    """PEP 561: without ``py.typed`` in the installed package, mypy reports every markovformer import as "missing
    library stubs or py.typed marker" and pyright treats the names as unknown. (The slow wheel test in
    tests/test_install.py checks the built wheel holds it.)"""
    project = tomllib.loads((PACKAGE.parents[1] / "pyproject.toml").read_text())
    assert (PACKAGE / "py.typed").is_file()
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["markovformer"]


def test_a_model_output_class_stays_its_own_dataclass_to_a_type_checker():
    """``@model_output`` returned ``type``: pyright then took ``MarkovianTransformerOutput`` for a plain ``type`` (no
    ``logits``, unusable as an annotation) and mypy rejected its keyword construction. It returns the class it is
    given, marked a dataclass transform."""
    from markovformer.models.pretrained import model_output

    hints = typing.get_type_hints(model_output)
    (given,), (returned,) = typing.get_args(hints["cls"]), typing.get_args(hints["return"])
    assert isinstance(given, typing.TypeVar) and returned is given
    assert hasattr(model_output, "__dataclass_transform__")


def test_each_model_declares_its_own_config_class_to_a_type_checker():
    """``model.config`` was the base ``ModelConfig`` to a type checker, so ``model.config.vocab_size`` of any family
    was an error ("ModelConfig" has no attribute ...): each family annotates ``config`` as its ``config_class``."""
    for name in markovformer.__all__:
        cls = getattr(markovformer, name)
        if name != "PreTrainedModel" and issubclass(cls, markovformer.PreTrainedModel):
            assert typing.get_type_hints(cls)["config"] is cls.config_class, name


def test_transition_strengths_reach_a_type_checker_with_the_past_direction_a_tensor():
    """The README's quickstart reads ``model.transition_strengths()[0]["past"].shape``: annotated
    ``dict[str, Tensor | None]``, ``mypy --strict`` refused it (Item "None" has no attribute "shape"), though every
    Markov layer has the past direction and only ``future`` may be None."""
    from torch import Tensor

    from markovformer import PreTrainedModel

    strengths = typing.get_args(typing.get_type_hints(PreTrainedModel.transition_strengths)["return"])[0]
    assert typing.get_type_hints(strengths) == {"past": Tensor, "future": Tensor | None}

"""The public API as ``help()`` shows it: every function and class a public package exports (its ``__all__``) has a
docstring of its own, and so do their public methods and what the models' ``forward`` returns; the parameters an
``Args:`` section lists are the signature's, ``generate``'s names every option, and the dotted names the docstrings
point to (``ops.segments``, ``markovformer.hf.wrapper.Wrapper``) exist."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import re
import typing

import pytest

from markovformer.models.generation import GenerationConfig, GenerationMixin

PACKAGES = ["markovformer", "markovformer.layers", "markovformer.ops", "markovformer.markov", "markovformer.data",
            "markovformer.experiments", "markovformer.bench", "markovformer.hf"]  # fmt: skip
SUBPACKAGES = {"markovformer", "models", "layers", "ops", "markov", "data", "training", "hf", "experiments", "bench",
               "plots", "cli"}  # fmt: skip
FILE_SUFFIXES = {"png", "json", "md", "py", "yaml", "csv", "txt", "safetensors"}  # ``ops.png`` names a file


def package(name: str):
    if name == "markovformer.hf":
        pytest.importorskip("transformers", reason="markovformer.hf needs the hf extra")
    return importlib.import_module(name)


def exported(name: str) -> list[tuple[str, object]]:
    """The functions and classes of a package's ``__all__`` (its constants carry no docstrings of their own)."""
    members = [(f"{name}.{attribute}", getattr(package(name), attribute)) for attribute in package(name).__all__]
    return [(where, obj) for where, obj in members if inspect.isfunction(obj) or inspect.isclass(obj)]


def documented(name: str) -> list[tuple[str, object, str]]:
    """Each exported function and class with its docstring, and each method of a class with its own, with the
    package's docstring first."""
    found = [(name, package(name), package(name).__doc__ or "")]
    for where, obj in exported(name):
        found.append((where, obj, obj.__doc__ or ""))
        for attribute, member in vars(obj).items() if inspect.isclass(obj) else ():
            function = getattr(member, "fget", None) or getattr(member, "__func__", member)
            if inspect.isfunction(function) and function.__doc__:
                found.append((f"{where}.{attribute}", function, function.__doc__))
    return found


def generated_docstring(name: str, obj: object) -> bool:
    """The docstring dataclasses and NamedTuple write for a class without one: its name and fields."""
    return inspect.isclass(obj) and (obj.__doc__ or "").startswith(f"{name.rsplit('.', 1)[-1]}(")


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_function_and_class_has_a_docstring_of_its_own(name):
    missing = [where for where, obj in exported(name) if not (obj.__doc__ or "").strip()
               or generated_docstring(where, obj)]  # fmt: skip
    assert not missing, f"no docstring for help() to show: {missing}"


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_method_of_an_exported_class_has_a_docstring(name):
    """Its own, or one it inherits from a markovformer class (what ``help()`` shows); torch's and transformers'
    methods are theirs to document."""
    missing = []
    for where, cls in exported(name):
        for attribute in dir(cls) if inspect.isclass(cls) else ():
            owner = next((base for base in cls.__mro__ if attribute in vars(base)), None)
            if attribute.startswith("_") or owner is None or not owner.__module__.startswith("markovformer"):
                continue
            member = vars(owner)[attribute]
            if isinstance(member, property) or inspect.isfunction(getattr(member, "__func__", member)):
                if not inspect.getdoc(member if isinstance(member, property) else getattr(cls, attribute)):
                    missing.append(f"{where}.{attribute}")
    assert not missing, f"no docstring for help() to show: {missing}"


def args_section_names(doc: str) -> list[str]:
    """The parameters a Google-style ``Args:`` section lists: the names before the first colon of each entry
    (``q, k: (B, H, T, Dh)`` lists q and k; ``n_heads, max_order (K): ...`` lists n_heads and max_order)."""
    match = re.search(r"^( *)Args:\n(.*?)(?=^\s*$|^ *Returns:|\Z)", doc, re.MULTILINE | re.DOTALL)
    if match is None:
        return []
    entries = [line for line in match.group(2).splitlines() if line.strip()]
    indent = min(len(line) - len(line.lstrip()) for line in entries)
    names = []
    for line in entries:
        if len(line) - len(line.lstrip()) == indent and ":" in line:
            names += [re.sub(r"\s*\(.*", "", part).strip() for part in line.split(":", 1)[0].split(",")]
    return names


def signature_of(obj: object) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):  # a builtin without one
        return None


@pytest.mark.parametrize("name", PACKAGES)
def test_the_parameters_an_args_section_lists_are_in_the_signature(name):
    checked, wrong = 0, []
    for where, obj, doc in documented(name):
        listed = args_section_names(doc)
        signature = signature_of(obj) if listed and callable(obj) else None
        if signature is None:
            continue
        parameters = signature.parameters
        if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters.values()):
            continue
        checked += 1
        wrong += [f"{where}: {listed_name}" for listed_name in listed if listed_name not in parameters]
    assert not wrong, f"Args: lists parameters the signature does not have: {wrong}"
    if name == "markovformer.markov":  # the section parser reads something (MarkovChain, add_beta_predict, ...)
        assert checked >= 3


def names_a_module_path(reference: str) -> bool:
    """``layers.registry`` or ``markovformer.hf.wrapper.Wrapper``, not a field (``config.initializer_range``) or a
    file (``ops.png``)."""
    return reference.split(".")[0] in SUBPACKAGES and reference.split(".")[-1] not in FILE_SUFFIXES


def resolves(reference: str) -> bool:
    """Whether ``a.b.c`` (relative to markovformer, or from ``markovformer.``) is a module or an attribute of one."""
    parts = reference.split(".")
    parts = parts if parts[0] == "markovformer" else ["markovformer", *parts]
    for cut in range(len(parts), 0, -1):
        try:  # found without running the module: ``markovformer.hf`` exists without the hf extra
            found = importlib.util.find_spec(".".join(parts[:cut])) is not None
        except ImportError:  # a part of the path is no package
            found = False
        if not found:
            continue
        if cut == len(parts):
            return True
        obj = importlib.import_module(".".join(parts[:cut]))
        for part in parts[cut:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


@pytest.mark.parametrize("name", PACKAGES)
def test_the_dotted_names_the_docstrings_point_to_exist(name):
    references = [(where, reference) for where, _, doc in documented(name)
                  for reference in re.findall(r"``([a-z_]+(?:\.[A-Za-z_]\w*)+)(?:\(\))?``", doc)]  # fmt: skip
    references = [(where, reference) for where, reference in references if names_a_module_path(reference)]
    assert [(where, reference) for where, reference in references if not resolves(reference)] == []


def test_generate_names_every_field_of_its_generation_config():
    """``help(model.generate)`` is where a notebook user reads which keyword options it takes."""
    fields = [field.name for field in dataclasses.fields(GenerationConfig)]
    assert [name for name in fields if f"``{name}``" not in GenerationMixin.generate.__doc__] == []


def test_what_each_exported_models_forward_returns_has_a_docstring_of_its_own():
    """``help(model(x))`` shows the output's docstring: the fields, shapes and units, not only their names."""
    outputs = {typing.get_type_hints(cls.forward).get("return") for _, cls in exported("markovformer")
               if hasattr(cls, "forward")}  # fmt: skip
    outputs = {output for output in outputs if inspect.isclass(output) and output.__module__.startswith("markovformer")}
    assert len(outputs) >= 5, outputs  # every family's
    assert sorted(output.__name__ for output in outputs if generated_docstring(output.__name__, output)) == []

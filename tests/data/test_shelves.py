"""The shelves of ``markovformer.data`` as its modules' imports show them (read from the source with ``ast``, imports
inside functions included): no import circle among them, nothing from the layers above, and each shelf importing
only the shelves its ``__init__`` docstring allows; that docstring names each of the shelf's modules."""

from __future__ import annotations

import ast
from pathlib import Path

import markovformer.data

DATA = Path(markovformer.data.__file__).parent
CORE = {"markovformer.data.bundle", "markovformer.data.collate", "markovformer.data.splits"}
# what each shelf may import from markovformer.data besides itself and the core
SHELF_MAY_IMPORT = {
    "core": set(),
    "readers": set(),
    "synthetic": set(),
    "recipes": {"readers"},
    "translation": {"readers"},
}
ABOVE_DATA = ("training", "experiments", "cli", "bench", "plots", "models", "layers", "hf")


def _module_name(path: Path) -> str:
    parts = path.relative_to(DATA.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])  # below markovformer/
    package = DATA.parent
    return (package / relative).with_suffix(".py").is_file() or (package / relative / "__init__.py").is_file()


def _imports(path: Path) -> set[str]:
    """The markovformer modules ``path`` imports, wherever in the file (``from pkg import module`` names the module)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per dot after the first
                parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parents, base] if base else parents)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base)
    return {module for module in found if module.startswith("markovformer.")}


def _graph() -> dict[str, set[str]]:
    return {_module_name(path): _imports(path) for path in sorted(DATA.rglob("*.py"))}


def _shelf(module: str) -> str | None:
    """The shelf of a module of markovformer.data; None for the registry and the package's face (above all)."""
    if module in CORE:
        return "core"
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and (DATA / parts[2]).is_dir() else None


def test_no_import_circle_in_data():
    graph = _graph()
    inside = {module: {target for target in targets if target in graph} for module, targets in graph.items()}
    state: dict[str, str] = {}  # "open" while on the current path, "done" once every path from it was followed

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(inside[module]):
            assert state.get(target) != "open", "import circle: " + " -> ".join([*path, module, target])
            if target not in state:
                visit(target, [*path, module])
        state[module] = "done"

    for module in sorted(inside):
        if module not in state:
            visit(module, [])
    assert len(state) == len(graph) > 20  # every module was read (a wrong DATA would see none)


def test_data_imports_nothing_from_the_layers_above():
    offenders = {(module, target) for module, targets in _graph().items() for target in targets
                 if target.split(".")[1] in ABOVE_DATA}  # fmt: skip
    assert not offenders, offenders


def test_each_shelf_imports_only_the_shelves_below_it():
    graph = _graph()
    offenders = set()
    for module, targets in graph.items():
        shelf = _shelf(module)
        if shelf is None:
            continue
        for target in targets:
            other = _shelf(target) if target.startswith("markovformer.data") else "outside"
            if other not in {"core", "outside", shelf, *SHELF_MAY_IMPORT[shelf]}:
                offenders.add((module, target))
    assert not offenders, offenders
    assert {_shelf(module) for module in graph} == {None, *SHELF_MAY_IMPORT}  # a new shelf gets its rule here


def test_each_shelf_names_its_modules_in_its_docstring():
    """A contributor finds a reader, recipe or generator by the shelf's docstring: a new module is named there."""
    for shelf in SHELF_MAY_IMPORT.keys() - {"core"}:
        docstring = ast.get_docstring(ast.parse((DATA / shelf / "__init__.py").read_text(encoding="utf-8")))
        unnamed = sorted(path.stem for path in (DATA / shelf).glob("*.py")
                         if path.stem != "__init__" and f"``{path.stem}``" not in docstring)  # fmt: skip
        assert not unnamed, f"data/{shelf}/__init__.py's docstring does not name {unnamed}: say there what each does"

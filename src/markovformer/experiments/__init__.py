"""Named reproductions: ``markovformer experiment NAME`` runs one and writes ``report.md``, ``results.json`` and
figures into its output folder. To add one, write a module with ``NAME``, ``SUMMARY``, ``QUICK`` (its settings
for ``--quick``) and ``run(out_dir, *, quick, seeds, overrides, log) -> Path`` (see ``icl_depth``), and list
its module name in ``_MODULES``, whose order is ``experiment list``'s (README.md's "An experiment" says the rest)."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markovformer.advice import said_as, suggest
from markovformer.experiments.report import (
    call_on_open,
    experiment_named,
    given_from_cells,
    recompute_cells,
    stored_cells_only,
)

_MODULES = ("weight_tying", "landscape", "icl_depth", "order_recovery", "mat_order", "scan_shakespeare", "vmt",
            "table1", "mixers", "position_biases", "shakespeare_char")  # fmt: skip


@dataclass(frozen=True)
class Experiment:
    """One named reproduction: its ``name`` as ``experiment list`` shows it, its one-line ``summary`` and the
    ``module`` of this package that holds it; ``run`` imports that module and gives its ``run`` function (call it
    through ``run_experiment``, which checks the arguments and keeps the caller's random states and default
    device)."""

    name: str
    summary: str
    module: str  # its module's name in this package, imported by ``run``

    @property
    def run(self) -> Callable[..., Path]:
        """The module's ``run(out_dir, *, quick, seeds, overrides, log) -> Path``, imported when read."""
        return importlib.import_module(f"{__name__}.{self.module}").run


def _declared(module: str) -> Experiment:
    """The experiment a module declares by its literal ``NAME`` and ``SUMMARY``, read from its source without
    importing it: ``experiment list`` and a mistyped name answer without the seconds the experiments' imports
    (Lightning, torchmetrics, the models) take."""
    values = {}
    for node in ast.parse((Path(__file__).parent / f"{module}.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("NAME", "SUMMARY"):
                values[node.targets[0].id] = ast.literal_eval(node.value)
    if set(values) != {"NAME", "SUMMARY"} or not all(isinstance(value, str) for value in values.values()):
        raise ImportError(f"experiments/{module}.py must assign NAME and SUMMARY plain string literals "
                          f"(NAME = \"...\"), read without importing it; found {sorted(values)}")  # fmt: skip
    return Experiment(values["NAME"], values["SUMMARY"], module)


EXPERIMENTS: dict[str, Experiment] = {experiment.name: experiment for experiment in map(_declared, _MODULES)}


def find_experiment(name: str) -> Experiment:
    """The experiment called ``name`` (a key of ``EXPERIMENTS``, e.g. "icl-depth"); ValueError naming the nearest
    name (if one is close) and every known one otherwise."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}{suggest(name, EXPERIMENTS)}; known: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


def run_experiment(
    name: str,
    out_dir: str | Path,
    *,
    quick: bool = False,
    seeds: tuple[int, ...] | None = None,
    overrides: dict[str, Any] | None = None,
    recompute: Sequence[str] = (),
    from_cells: bool = False,
    log: Callable[[str], None] = print,
    on_open: Callable[[], None] | None = None,
) -> Path:
    """Run experiment ``name`` into ``out_dir`` (finished cells found there are reused); returns the report path.

    ``overrides`` change fields of the experiment's settings (its grid, steps, sizes), e.g. ``{"steps": 500}``.
    ``recompute``: glob patterns of cell keys (``*forgetting*``) to compute again instead of reusing, e.g. cells
    trained before a fix; each must match a cell (``forget_cells``). They are forgotten once the experiment has
    checked its settings and opened its folder (``report.recompute_cells``): bad settings, or a folder of another
    experiment, are refused with every cell still there. ``from_cells``: write the report from the cells
    already in ``out_dir``, training nothing (``report.stored_cells_only``): ``mixers`` reports the learning rates and
    seeds each grid point has (a grid run one process per kind or rate, or cut short, read as it stands); any other
    experiment stops at its first missing cell, naming it. ``on_open``: called once the experiment has checked its
    settings and opened its folder, before its first cell (the command line quiets Lightning there, whose import a
    refused setting need not wait for).
    """
    experiment = find_experiment(name)
    for seed in seeds or ():
        if not 0 <= seed < 2**32:  # a run config's trainer.seed range
            raise ValueError(f"{said_as(f'--seeds {seed}', f'seeds={seeds!r}: {seed}')} must lie in [0, 2**32)")
    if seeds is not None and len(set(seeds)) < len(seeds):  # one cell counted twice: a spread of no information
        from markovformer.experiments.settings import given_seeds  # it imports the run config: not for `list`

        raise ValueError(f"{given_seeds(seeds)} repeats a seed; give each once")
    if recompute and from_cells:
        both = said_as("--recompute forgets cells that --from-cells", f"recompute={list(recompute)!r} forgets cells "
                       f"that {given_from_cells()}")  # fmt: skip
        raise ValueError(f"{both} would read: use one or the other")
    if from_cells and not (Path(out_dir) / "cells").is_dir():
        raise ValueError(f"{given_from_cells()}: {out_dir} has no cells/ folder (run the experiment into it first)")
    # (torch: not for `experiment list`)
    import torch

    from markovformer.training.isolation import built_on_the_cpu, process_settings_kept, random_states_kept

    # the cells are forgotten when the experiment opens its folder: its settings checked, the folder claimed; the
    # cells seed the global random states for themselves, and the caller's are put back; they build on the CPU and
    # from a float32 default dtype, as a run does, whatever default device and dtype the caller set
    with (stored_cells_only() if from_cells else nullcontext(), experiment_named(name),
          recompute_cells(recompute) as pending, call_on_open(on_open), random_states_kept(),
          process_settings_kept(torch.get_num_threads())):  # fmt: skip
        report = built_on_the_cpu(experiment.run)(Path(out_dir), quick=quick, seeds=seeds, overrides=overrides or {},
                                                  log=log)  # fmt: skip
    if not pending["done"]:  # an experiment that wrote its report without an ExperimentReport
        undone = said_as(f"--recompute {' '.join(recompute)}", f"recompute={list(recompute)!r}")
        raise RuntimeError(f"experiment {name} did not open an ExperimentReport: {undone} not done")
    return report


__all__ = ["EXPERIMENTS", "Experiment", "find_experiment", "run_experiment"]

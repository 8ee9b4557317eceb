"""What every experiment writes: ``report.md`` (tables, text, figures), ``results.json`` (the numbers), and one
cached JSON per finished cell under ``cells/`` so a killed experiment resumes where it stopped; while a cell
computes, its fits keep their progress beside it (``cells/KEY.fitN.partial.pt``), so a killed cell resumes too.
Also what cells share: their identity (``cell_settings``, ``revisions_of``, ``file_digest``), the summary of a
number over seeds (``seed_summary``, shown by ``mean_std``), and reports from the stored cells only
(``stored_cells_only``)."""

from __future__ import annotations

import contextvars
import dataclasses
import fnmatch
import hashlib
import json
import math
import re
import shutil
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from markovformer.advice import said_as
from markovformer.atomic import atomic_write_text, exclusive_lock
from markovformer.experiments.fitting import PARTIAL, checkpoints_for_cell
from markovformer.file_digest import file_sha256
from markovformer.layers.registry import kind_revisions
from markovformer.strict_json import parse_json, read_json_object, strict_dumps, strict_json
from markovformer.training.durations import format_duration
from markovformer.training.environment import code_version


def _cell(value: Any, decimals: int | None = None) -> str:
    """A table cell's text; a float with ``decimals`` (its column's) or, when None, 4 decimals (4 significant
    digits from 10,000 on, or not finite)."""
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) >= 1e4:
            return f"{value:.4g}"
        return f"{value:.{4 if decimals is None else decimals}f}"
    return str(value)


def _column_decimals(values: Sequence[Any]) -> int | None:
    """The decimals of a column's floats: as few as show each exactly when every one has at most 2 (settings such
    as p = 0.2 and 0.25, or seconds 33.0 and 36.4, written alike), else None (4: measurements, 0.0550 beside
    0.7600, where 0.76 was written as a setting beside 0.0550)."""
    floats = [value for value in values if isinstance(value, float) and math.isfinite(value) and abs(value) < 1e4]
    if not floats or any(value != round(value, 2) for value in floats):
        return None
    return max((len(f"{value:.2f}".rstrip("0").split(".")[1]) for value in floats), default=0)


def _escape(text: str) -> str:
    """A table cell's text with its pipes escaped, so that ``P(1|0)`` stays one cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; the floats of a column with one number of decimals (``_column_decimals``). Raises
    ValueError for a row whose length is not the header's."""
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"table row {list(row)!r} has {len(row)} cells for {len(columns)} columns")
    decimals = [_column_decimals([row[index] for row in rows]) for index in range(len(columns))]
    lines = ["| " + " | ".join(_escape(str(c)) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_escape(_cell(value, places)) for value, places in zip(row, decimals, strict=True))
              + " |" for row in rows]  # fmt: skip
    return "\n".join(lines)


def seed_summary(values: Sequence[float | None]) -> dict:
    """Mean, sample standard deviation (n - 1 in the denominator; None for one value: no spread to report) and count
    of one number over seeds. A None is a non-finite number as a cell stores it (strict JSON's null): it counts as
    NaN, so the mean and spread are NaN ("nan" in a table) rather than a TypeError or a mean of the other seeds."""
    numbers = [math.nan if value is None else value for value in values]
    # statistics.stdev raises on a NaN (it converts each number to an exact fraction)
    spread = (math.nan if any(math.isnan(number) for number in numbers) else statistics.stdev(numbers)) if len(
        numbers) > 1 else None  # fmt: skip
    return {"mean": statistics.fmean(numbers), "std": spread, "n": len(numbers), "values": list(values)}


def seed_reference(cells: Sequence[dict], key: str, label: str) -> dict[str, float]:
    """A figure's reference line ``{label: value}`` from ``cells[...][key]``, a floor each cell computed on its own
    seed's held-out set (``cell["seed"]``): the value when the seeds agree, else their mean over seeds, labelled
    ``"<label>, mean of N seeds"``. The first cell's alone drew every seed's curve against seed 0's floor (icl-depth
    with seeds 0 and 1: Bayes add-1 0.5071 for both, seed 1's own 0.4792)."""
    per_seed = {cell["seed"]: cell[key] for cell in cells}
    values = list(per_seed.values())
    if len(set(values)) == 1:
        return {label: values[0]}
    return {f"{label}, mean of {len(values)} seeds": statistics.fmean(values)}


def mean_std(entry: dict | None, digits: int = 3) -> str:
    """A ``seed_summary`` as ``mean ± std`` (the mean alone for one seed); an em dash when not measured."""
    if entry is None:
        return "—"
    if entry["std"] is None:
        return f"{entry['mean']:.{digits}f}"
    return f"{entry['mean']:.{digits}f} ± {entry['std']:.{digits}f}"


def thread_counts(cells: Sequence[dict]) -> str:
    """The intra-op thread counts the cells trained with, for a caption ("1", "1 and 4"): each cell's own record
    (an engine run's metrics.json ``threads``), not the process's count when the report is written (the engine caps
    and restores it, and ``--from-cells`` writes the report on another machine); "?" for cells that kept none."""
    counts = sorted({cell.get("threads") for cell in cells}, key=lambda n: (n is None, n))
    return " and ".join("?" if n is None else str(n) for n in counts) or "?"


def file_digest(path: str | Path) -> str:
    """The first 10 hex digits of a data file's SHA-256: what a cell trained on the file adds to its ``depends_on``
    (its path left out, so that the data may move), so that a changed or re-prepared file recomputes the cell."""
    return file_sha256(path)[:10]


def device_name(device: torch.device) -> str:
    """How a cell names the device it was measured on: the GPU's name, or "cpu"."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def cell_settings(settings: Any, left_out: Sequence[str]) -> dict:
    """What a cell of a grid depends on (its ``depends_on``, before ``revisions_of`` and data digests): the
    experiment's ``settings`` (a dataclass) without ``left_out``, the grid's axes (the lists of orders, depths,
    sources, ... whose own entry the cell's key holds) and any setting the cell does not read, so that a run with
    one more entry on an axis reads back every cell it already has. KeyError for a name that is no setting (a typo
    would leave the setting in)."""
    values = dataclasses.asdict(settings)
    if unknown := sorted(set(left_out) - set(values)):
        raise KeyError(f"cell_settings: {unknown} are not settings of {type(settings).__name__}")
    return {key: value for key, value in values.items() if key not in left_out}


def revisions_of(section: dict) -> dict:
    """What a cell that trains the model ``section`` adds to its ``depends_on``: the revisions of its attention kinds
    (``{"revisions": {kind: n}}``, nothing for kinds never revised), so that a fix that raises a kind's revision
    recomputes the cells it made wrong."""
    revisions = kind_revisions(section["attention"]) if "attention" in section else {}
    return {"revisions": revisions} if revisions else {}


def code_provenance(cell_code: dict[str, dict | None]) -> str:
    """The report's closing line: which code computed its cells (``cell_code``: key -> ``code_version()`` or None
    for a cell stored before cells recorded it), so that a report mixing cells from before and after a fix says so."""

    def name(code: dict | None) -> str:
        if code is None:
            return "code not recorded (stored before cells kept it)"
        commit = code.get("git_commit")
        if commit is None:
            return f"markovformer {code.get('markovformer')}, no git commit"
        dirty = "+dirty" if commit.endswith("+dirty") else ""
        return f"markovformer {code.get('markovformer')}, commit {commit[:10]}{dirty}"

    counts = Counter(name(code) for code in cell_code.values())
    if len(cell_code) == 1:
        return f"*1 cell, computed by {next(iter(counts))}.*"
    if len(counts) == 1:
        return f"*{len(cell_code)} cells, all computed by {next(iter(counts))}.*"
    listed = "; ".join(f"{label}: {count}" for label, count in counts.most_common())
    return (f"*{len(cell_code)} cells, computed by {len(counts)} versions of the code ({listed}). A cell computed "
            "before a fix to what it measures is stale: `--recompute PATTERN` computes it again.*")


def recorded_run_dirs(result: Any) -> list[str] | None:
    """The run directories a cell's result records (every ``run_dir`` value in it, ``None`` values left out), or None
    when it records none at all (a cell stored before cells named the runs they trained)."""
    if isinstance(result, dict):
        groups = [[result["run_dir"]]] if "run_dir" in result else []
        groups += [found for value in result.values() if (found := recorded_run_dirs(value)) is not None]
    elif isinstance(result, list):
        groups = [found for value in result if (found := recorded_run_dirs(value)) is not None]
    else:
        return None
    return [run for group in groups for run in group if run is not None] if groups else None


REPLACED = re.compile(r"(?P<key>.+)\.[0-9a-f]{12}\.json")  # a cell kept in cells/replaced/ (``replaced_cell``)


def replaced_cell(path: Path, settings: Any) -> Path:
    """Where the cell stored at ``path`` under ``settings`` is kept once a run under other settings recomputes it:
    ``cells/replaced/KEY.<digest of the settings>.json``, one file per settings."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return path.parent / "replaced" / f"{path.stem}.{digest}.json"


def read_cell(path: Path) -> dict:
    """The cell stored at ``path`` (its ``settings``, ``code`` and ``result``); ValueError naming the file when it
    cannot be read (cut short by a disk's fault: cells are written whole)."""
    try:
        stored = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} cannot be read ({error})") from None
    if not isinstance(stored, dict) or "result" not in stored:
        raise ValueError(f"{path} cannot be read (not a stored cell)")
    return stored


def forget_cells(out_dir: str | Path, patterns: Sequence[str], log: Callable[[str], None] = print) -> list[Path]:
    """Delete the cached cells of ``out_dir`` whose keys match any of the glob ``patterns`` (``*forgetting*``), their
    fits' saved progress and the engine runs they trained (under ``out_dir/runs``: a finished run would otherwise be
    read back instead of trained again), so that the next run computes them from the start; returns the deleted
    paths. Raises ValueError, deleting nothing, when a pattern matches no cell (a typo would otherwise reuse every
    stale cell it was meant to catch), or when a chosen cell of an experiment that trains runs names none."""
    folder = Path(out_dir) / "cells"
    files = {path: path.stem for path in folder.glob("*.json")}  # each file -> the key of its cell
    files |= {path: match["key"] for path in folder.glob("*.partial.pt") if (match := PARTIAL.fullmatch(path.name))}
    # kept copies (``replaced_cell``): forgotten with their key, else a run under their settings takes one back
    files |= {path: match["key"] for path in (folder / "replaced").glob("*.json")
              if (match := REPLACED.fullmatch(path.name))}  # fmt: skip
    chosen: dict[Path, None] = {}
    for pattern in patterns:
        matched = [path for path, key in sorted(files.items()) if fnmatch.fnmatchcase(key, pattern)]
        if not matched:
            keys = sorted(set(files.values()))
            known = ", ".join(keys[:5]) + (", ..." if len(keys) > 5 else "")
            raise ValueError(f"recompute pattern {pattern!r} matches no cell in {folder}"
                             + (f" (cells there: {known})" if keys else " (it holds none)"))  # fmt: skip
        chosen.update(dict.fromkeys(matched))
    runs_folder = Path(out_dir) / "runs"
    runs: dict[Path, None] = {}
    for path in chosen:
        if path.suffix != ".json" or not runs_folder.is_dir():
            continue
        try:
            recorded = recorded_run_dirs(read_cell(path)["result"])
        except ValueError as error:  # its run cannot be known: not left to be read back as the recomputed cell
            raise ValueError(f"{error}: the run its cell trained is not known; delete that run under {runs_folder} "
                             f"and {path} by hand, then recompute it") from None  # fmt: skip
        if recorded is None:
            raise ValueError(f"cell {path.stem} does not name the run it trained (stored before cells did): delete "
                             f"its run under {runs_folder} by hand, then recompute it")  # fmt: skip
        runs.update(dict.fromkeys(Path(run) for run in recorded if Path(run).resolve().parent == runs_folder.resolve()))
    for path in chosen:
        path.unlink()
        log(f"  {path.name}: removed, to be recomputed")
    removed_runs = [run for run in runs if run.is_dir()]  # a run deleted by hand before is not deleted again
    for run in removed_runs:
        shutil.rmtree(run)
        log(f"  {run}: its run, removed, to be trained again")
    return [*chosen, *removed_runs]


class MissingCell(ValueError):
    """A cell that a report written from the stored cells only (``stored_cells_only``) needs and does not find."""


# while set, ExperimentReport.cached computes nothing: a cell not stored (under the same settings) raises MissingCell
_STORED_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("stored_cells_only", default=False)


@contextmanager
def stored_cells_only() -> Iterator[None]:
    """Within it, experiments write their reports from the cells already stored in their output folders and train
    nothing: an experiment that can report a partial grid (``mixers``: the rates and seeds each grid point has)
    catches ``MissingCell``; any other stops at its first missing cell, naming it."""
    token = _STORED_ONLY.set(True)
    try:
        yield
    finally:
        _STORED_ONLY.reset(token)


def given_from_cells() -> str:
    """``stored_cells_only``'s switch in its caller's words (``advice.said_as``): ``--from-cells`` on the command
    line, run_experiment's ``from_cells=True`` from Python."""
    return said_as("--from-cells", "from_cells=True")


# the experiment whose folder ExperimentReport opens (set by ``experiments.run_experiment``); None: not checked
_EXPERIMENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("experiment", default=None)
EXPERIMENT_MARKER = "experiment.json"  # in an experiment's output folder: which experiment it holds


@contextmanager
def experiment_named(name: str) -> Iterator[None]:
    """Within it, an ``ExperimentReport`` claims its folder for experiment ``name`` (``claim_folder``)."""
    token = _EXPERIMENT.set(name)
    try:
        yield
    finally:
        _EXPERIMENT.reset(token)


# --recompute's patterns, forgotten (``forget_cells``) by the ExperimentReport that opens its folder: after the
# experiment has checked its settings and claimed the folder, so that a misspelt --set or another experiment's
# folder is refused before any cell is deleted (they were deleted first, then the run refused)
_RECOMPUTE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("recompute", default=None)


@contextmanager
def recompute_cells(patterns: Sequence[str]) -> Iterator[dict]:
    """Within it, the first ``ExperimentReport`` forgets the cells matching ``patterns`` when it opens its folder;
    the dict yielded says whether it did (``done``)."""
    pending = {"patterns": list(patterns), "done": not patterns}
    token = _RECOMPUTE.set(pending)
    try:
        yield pending
    finally:
        _RECOMPUTE.reset(token)


# what runs once an experiment has checked its settings and opened its folder, before its first cell (set by
# ``experiments.run_experiment``: the command line quiets Lightning there, whose import a refused setting need not
# wait for)
_ON_OPEN: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar("on_open", default=None)


@contextmanager
def call_on_open(action: Callable[[], None] | None) -> Iterator[None]:
    """Within it, the first ``ExperimentReport`` calls ``action`` (if any) when it opens its folder."""
    token = _ON_OPEN.set(action)
    try:
        yield
    finally:
        _ON_OPEN.reset(token)


def claim_folder(out_dir: Path, name: str) -> None:
    """Mark ``out_dir`` as experiment ``name``'s (``experiment.json``), or refuse it when another experiment holds
    it: its report, results and figures would have been replaced and the cells of both mixed in one folder. Two
    experiments started at once into one new folder take turns (``atomic.exclusive_lock``): both had found no marker
    and both claimed it."""
    marker = out_dir / EXPERIMENT_MARKER
    with exclusive_lock(out_dir / f".{EXPERIMENT_MARKER}.lock", "its filesystem takes no file locks, which keep two "
                        f"experiments from claiming one folder; give {said_as('--out', 'an out_dir')} on another "
                        f"filesystem"):  # fmt: skip
        if marker.is_file():
            held = read_json_object(marker, "an experiment folder's marker").get("experiment")
            if held != name:
                raise ValueError(f"{out_dir} holds the experiment {held!r} ({EXPERIMENT_MARKER}); give {name} "
                                 f"another {said_as('--out', 'out_dir')}")  # fmt: skip
            return
        atomic_write_text(marker, json.dumps({"experiment": name}) + "\n")


def _differences(stored: dict, wanted: dict, shown: int = 3) -> str:
    """The settings that differ between a stored cell and this run, as ``key: stored -> now`` (the first few)."""
    keys = [key for key in sorted({*stored, *wanted}) if stored.get(key) != wanted.get(key)]
    parts = [f"{key}: {_cell_setting(stored.get(key))} -> {_cell_setting(wanted.get(key))}" for key in keys[:shown]]
    return "; ".join(parts) + (f"; ... ({len(keys)} in all)" if len(keys) > shown else "")


def _cell_setting(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


class ExperimentReport:
    """Accumulates an experiment's report and writes it into ``out_dir`` atomically.

    ``cached(key, compute)`` returns ``compute()``'s JSON-serialisable result as stored (tuples as lists, a
    non-finite float as None: strict JSON has no NaN), in ``cells/<key>.json`` with the experiment's ``settings``
    the first time: rerunning a killed experiment skips every cell that already
    finished under the same settings, and recomputes cells stored under other settings (naming the settings that
    differ, the stored cell moved to ``cells/replaced/``, from where a run under its settings takes it back). A cell
    that depends on less than all the settings passes what it depends on as ``depends_on``: it is then reused by any
    run of the experiment that would compute it the same way (another seed list, more domains, a second process on
    others).

    Progress: each cell is logged as ``cell i/N KEY`` (N from ``expect_cells``) with an estimate of the time left,
    the mean time of the cells computed so far times the cells still to come.

    Within ``stored_cells_only`` nothing is computed: a cell not stored under the same settings raises
    ``MissingCell`` (``stored_only`` is True for such a report).

    Each cell also stores the ``code`` that computed it (markovformer's version and git commit, ``+dirty`` for
    uncommitted changes), for finding cells that predate a fix; ``forget_cells`` removes them so they are recomputed.
    """

    def __init__(
        self, out_dir: str | Path, title: str, log: Callable[[str], None] = print, settings: dict | None = None
    ) -> None:
        self.out_dir = Path(out_dir)
        if _EXPERIMENT.get() is not None:
            claim_folder(self.out_dir, _EXPERIMENT.get())
        if (pending := _RECOMPUTE.get()) is not None and not pending["done"]:
            forget_cells(self.out_dir, pending["patterns"], log)  # the settings are checked, the folder is ours
            pending["done"] = True
        if (action := _ON_OPEN.get()) is not None:
            _ON_OPEN.set(None)  # once: a second report of the experiment finds it done
            action()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.title = title
        self.log = log
        self.settings = json.loads(strict_dumps(settings or {}))  # as stored (tuples become lists)
        self.sections: list[str] = []
        self.results: dict[str, Any] = {}
        self.expected_cells: int | None = None
        self.cells_seen = 0
        self.cell_seconds: list[float] = []  # wall time of each cell computed (not reused) by this run
        self.code = code_version()  # read at the start: the checkout may change while the cells compute
        self.cell_code: dict[str, dict | None] = {}  # the code each cell of this run came from (None: not recorded)
        self.stored_only = _STORED_ONLY.get()
        self.headline: str | None = None  # the first table with its caption: logged by ``write``

    def expect_cells(self, count: int) -> None:
        """Announce how many ``cached`` calls are coming, for the ``cell i/N`` progress lines."""
        self.expected_cells = count
        self.cells_seen = 0

    def _progress(self, key: str) -> str:
        """``cell i/N KEY`` and, once a cell has been computed, the estimated time left (the rest at the mean)."""
        total = self.expected_cells
        position = f"cell {self.cells_seen}/{total}" if total else f"cell {self.cells_seen}"
        if not self.cell_seconds or not total:
            return f"{position} {key}"
        remaining = max(total - self.cells_seen + 1, 0) * sum(self.cell_seconds) / len(self.cell_seconds)
        return f"{position} {key}  (about {format_duration(remaining)} left)"

    def cached(self, key: str, compute: Callable[[], Any], depends_on: dict | None = None) -> Any:
        if not re.fullmatch(r"[A-Za-z0-9_.=+-]+", key):
            raise ValueError(f"cell key {key!r} must be a plain file name (letters, digits, _.=+-)")
        settings = self.settings if depends_on is None else json.loads(strict_dumps(depends_on))
        path = self.out_dir / "cells" / f"{key}.json"
        self.cells_seen += 1
        if (stored := self._stored_cell(path)) is not None:
            if stored.get("settings") == settings:
                self.log(f"{self._progress(key)}: done earlier, read from {path}")
                self.cell_code[key] = stored.get("code")
                return stored["result"]
            if self.stored_only:
                raise MissingCell(f"cell {key} is stored in {path.parent} under other settings; without "
                                  f"{given_from_cells()} the experiment computes it again")  # fmt: skip
            kept = replaced_cell(path, stored.get("settings"))  # not lost: a --quick run into a full run's folder
            kept.parent.mkdir(exist_ok=True)
            path.replace(kept)
            changed = _differences(stored.get("settings") or {}, settings)
            self.log(f"  {key}: stored under other settings, recomputing ({changed}); the stored cell is kept as "
                     f"{kept}, which a run under its settings takes back")  # fmt: skip
        kept = replaced_cell(path, settings)
        if (stored := self._stored_cell(kept)) is not None:  # computed earlier under these settings, then replaced:
            if not self.stored_only:  # taken back (read, with --from-cells)
                kept.replace(path)
            self.log(f"{self._progress(key)}: done earlier, taken back from {kept}")
            self.cell_code[key] = stored.get("code")
            return stored["result"]
        if self.stored_only:
            raise MissingCell(f"cell {key} is not stored in {path.parent}; without {given_from_cells()} the "
                              f"experiment computes it")  # fmt: skip
        self.log(self._progress(key))
        start = time.perf_counter()
        path.parent.mkdir(exist_ok=True)
        with checkpoints_for_cell(path.parent, key, settings):
            value = compute()
        self.cell_seconds.append(time.perf_counter() - start)
        value = strict_json(value)  # as a rerun reads it back: a non-finite float is None (null) in both
        stored = {"settings": settings, "code": self.code, "result": value}
        atomic_write_text(path, strict_dumps(stored, indent=1) + "\n")
        for partial in path.parent.glob(f"{key}.fit*.partial.pt"):  # the cell is whole: its fits' progress goes
            if PARTIAL.fullmatch(partial.name)["key"] == key:
                partial.unlink(missing_ok=True)
        self.cell_code[key] = self.code
        return value

    def _stored_cell(self, path: Path) -> dict | None:
        """The cell stored at ``path``; None when there is none, or when it cannot be read (cut short by a disk's
        fault: cells are written whole), which is said, and the cell computed again over it."""
        if not path.is_file():
            return None
        try:
            return read_cell(path)
        except ValueError as error:
            self.log(f"  {error}" + ("" if self.stored_only else ": computing it again"))
            return None

    def text(self, markdown: str) -> None:
        self.sections.append(markdown.strip())

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = "") -> None:
        """A table (and its caption) in the report; the first one, the experiment's headline, is also logged when
        the report is written, so that the terminal shows the result and not only where it is."""
        self.sections.append((f"{caption}\n\n" if caption else "") + markdown_table(columns, rows))
        if self.headline is None:
            self.headline = self.sections[-1]

    def figure(self, path: Path, caption: str) -> None:
        relative = Path(path).resolve().relative_to(self.out_dir.resolve()).as_posix()
        self.sections.append(f"![{caption}]({relative})\n\n*{caption}*")

    def write(self) -> Path:
        """Write ``report.md`` and ``results.json``, log the headline table; returns the report's path."""
        sections = self.sections + ([code_provenance(self.cell_code)] if self.cell_code else [])
        body = f"# {self.title}\n\n" + "\n\n".join(sections) + "\n"
        atomic_write_text(self.out_dir / "results.json", strict_dumps(self.results, indent=2) + "\n")
        path = atomic_write_text(self.out_dir / "report.md", body)
        if self.headline is not None:
            self.log(f"\n{self.headline}\n")
        return path

"""Numeric time series from a CSV file: rows in time order, split chronologically, cut into windows per split."""

from __future__ import annotations

import csv
import re
from datetime import datetime
from functools import partial
from pathlib import Path

import numpy as np
import torch

from markovformer.data.bundle import DataBundle, label_names_in_order
from markovformer.data.collate import IGNORE_INDEX
from markovformer.data.readers.text_stream import check_utf8
from markovformer.data.splits import contiguous_split

# Spellings of a missing value (pandas reads these as NA): a label cell holding one is an error, not a class.
MISSING_LABELS = frozenset({"nan", "-nan", "na", "n/a", "null", "none", "<na>", "#n/a"})

# Words (any case) in the name of a column whose dates, when it is no feature, must not decrease: rows are taken in
# time order ("Date", "trade_date", "timestamp_utc").
DATE_WORDS = frozenset({"date", "datetime", "time", "timestamp"})
# Dates as spreadsheets and price downloads write them besides ISO 8601, each also with a time of day; day-first and
# month-first both: a column is in time order when one reading of all its cells is.
DATE_FORMATS = tuple(f"{day}{time}" for day in ("%m/%d/%Y", "%d/%m/%Y", "%Y/%m/%d", "%d.%m.%Y", "%m/%d/%y", "%d-%m-%Y")
                     for time in ("", " %H:%M", " %H:%M:%S"))  # fmt: skip

# A window's labels, from the (rows,) label ids and the window's rows: the last row's label for one label per
# window, every row's label for one label per step. The keys are the tasks a CSV series can feed.
WINDOW_LABELS = {
    "sequence_classification": lambda labels, rows: labels[rows.stop - 1],
    "token_classification": lambda labels, rows: labels[rows],
}
TASKS = tuple(WINDOW_LABELS)
_SPLIT_NAMES = ("train", "val", "test")


def load_csv_series(
    path: str | Path,
    *,
    label_column: str,
    feature_columns: list[str] | None = None,
    window: int,
    stride: int = 1,
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
    task: str = "sequence_classification",
    label_leads: int = 0,
) -> DataBundle:
    """A CSV with a header row, one time step per row, as windows of ``window`` consecutive rows.

    Rows are split in order (train first, then val, then test; row ranges in ``splits``, rows counted from 0 after
    the header), and windows start every ``stride`` rows inside each split, so none straddles two splits. File order
    is time order, oldest first: a non-feature column whose name holds the word date, datetime, time or timestamp
    (any case: Date, trade_date) and whose values all read as dates (ISO, or as in ``DATE_FORMATS``: 01/31/2024)
    must not decrease (a file sorted newest first would train on the future). Features
    (default: every column but ``label_column``, in file order) are normalised with the per-feature mean and
    (population) standard deviation of the train rows only; a constant feature keeps std 1. Label strings map to
    0..C-1 in ``label_names_in_order`` order over all rows.

    Example: {"input_features": (window, F) float32, "labels": 0-dim long (the window's last row) for
    ``task="sequence_classification"`` or (window,) long (every row) for ``"token_classification"``}. Windows that
    overlap (``stride < window``) hold a row several times: validation and test score each row once, in the first
    window holding it (-100 elsewhere), so that their numbers are per row, and where windows tile or overlap
    (``stride <= window``) a last window ends at the split's last row, so that every row is scored; training keeps
    every label of its windows, and the bundle's ``scored_train`` is the training split as ``eval`` scores it, each
    row once (``split_windows``).
    info: {"input_dim": F, "num_labels": C, "label_names", "feature_columns", "normalisation": {"mean", "std"},
    "label_leads"}.

    ``label_leads``: how many rows ahead a row's label looks (1 for a forecast of the next row's move, whose return
    is the next row's feature): recorded in info, where token classification refuses a model that sees later rows.
    The labels of a split's last ``label_leads`` rows are made of the next split's rows (the last training day's
    next-day move is the first validation day's return), so they are purged when a later split has rows: no window
    labelled by one (sequence classification), -100 for them (token classification; a window left with no label
    is dropped). ``window_starts`` gives the windows of a split.
    """
    path = Path(path)
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    for name, value in (("window", window), ("stride", stride)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if isinstance(label_leads, bool) or not isinstance(label_leads, int) or label_leads < 0:
        raise ValueError(f"label_leads must be an int >= 0, got {label_leads!r}")
    header, rows = _read_rows(path)
    every_column = feature_columns is None
    feature_columns = _choose_features(path, header, label_column, feature_columns)
    feature_index = [header.index(column) for column in feature_columns]
    label_index = header.index(label_column)
    _check_date_order(path, header, rows, [*feature_columns, label_column])

    features = np.empty((len(rows), len(feature_columns)), dtype=np.float64)
    label_strings = []
    for row, (line, cells) in enumerate(rows):
        for position, (column, index) in enumerate(zip(feature_columns, feature_index, strict=True)):
            try:
                features[row, position] = _parse_number(cells[index], path, line, column)
            except ValueError as error:
                if every_column and not any(_is_number(other[index]) for _, other in rows):
                    raise ValueError(f"{error}, nor is any value of that column: feature_columns is null, so every "
                                     f"column but the label is read as a feature; list the numeric ones in "
                                     f"feature_columns") from None  # fmt: skip
                raise
        label = cells[label_index].strip()
        if not label:
            raise ValueError(f"{path}: line {line}, column {label_column!r}: the label is empty")
        if label.lower() in MISSING_LABELS:  # pandas' NA spellings: a missing label, not a class of its own
            raise ValueError(f"{path}: line {line}, column {label_column!r}: the label {label!r} marks a missing "
                             f"value; give every row a label or drop the row")  # fmt: skip
        label_strings.append(label)

    _refuse_float_labels(path, label_column, label_strings)

    ranges = contiguous_split(len(rows), fractions)
    if not ranges[0]:
        raise ValueError(f"{path}: {len(rows)} rows leave no train row with fractions {tuple(fractions)}")
    mean = features[ranges[0].start : ranges[0].stop].mean(axis=0)
    std = features[ranges[0].start : ranges[0].stop].std(axis=0)
    std[std == 0] = 1.0
    normalised = torch.from_numpy(((features - mean) / std).astype(np.float32))
    names = label_names_in_order(label_strings, f"{path}, column {label_column!r}")
    label_ids = {name: index for index, name in enumerate(names)}
    labels = torch.tensor([label_ids[label] for label in label_strings], dtype=torch.long)

    examples, scored_train = {}, None
    for index, (name, rows_range, fraction) in enumerate(zip(_SPLIT_NAMES, ranges, fractions, strict=True)):
        purged = purged_rows(ranges, index, label_leads)
        starts = window_starts(rows_range, window, stride, task, purged)
        if not starts and fraction > 0:
            short = (f"too few for window={window} with a label not purged (label_leads={label_leads}: the labels "
                     f"of its last {purged} rows are made of the next split's rows)" if purged
                     else f"fewer than window={window}")  # fmt: skip
            raise ValueError(f"{path}: the {name} split has {len(rows_range)} rows, {short}; use more rows, a shorter "
                             f"window or other fractions")  # fmt: skip
        kept = labels.clone()  # this split's: its purged rows unlabelled
        kept[rows_range.stop - purged : rows_range.stop] = IGNORE_INDEX
        cut = partial(split_windows, normalised, kept, starts, window, task, rows_range.stop)
        examples[name] = cut(scoring=name != "train")
        if name == "train" and task == "token_classification":  # as eval scores it: each row once
            scored_train = cut(scoring=True)
    info = {
        "input_dim": len(feature_columns),
        "num_labels": len(names),
        "label_names": names,
        "feature_columns": feature_columns,
        "normalisation": {"mean": mean.tolist(), "std": std.tolist()},
        "label_leads": label_leads,
    }
    splits = {
        "kind": "chronological_rows",
        "path": str(path),
        "num_rows": len(rows),
        **{name: [r.start, r.stop] for name, r in zip(_SPLIT_NAMES, ranges, strict=True)},
        "window": window,
        "stride": stride,
        "task": task,
        "label_leads": label_leads,
    }
    return DataBundle(**examples, info=info, splits=splits, scored_train=scored_train)


def split_windows(features: torch.Tensor, labels: torch.Tensor, starts: range, window: int, task: str, stop: int,
                  scoring: bool) -> list[dict]:  # fmt: skip
    """A split's examples: the windows of ``window`` rows at ``starts`` (the split ends at row ``stop``), labelled by
    ``labels`` as ``task`` labels a window. ``scoring`` a token classification split (validation, test, or the
    training split as eval scores it): each row once, in the first window holding it (-100 elsewhere; a window left
    with no label is dropped), and where windows tile or overlap one more window ends at the split's last row, so
    that every row is scored; training keeps every label of its windows."""
    once = scoring and task == "token_classification"
    if once and starts and starts.step <= window and starts[-1] + window < stop:
        starts = [*starts, stop - window]
    examples, scored_until = [], 0  # rows before scored_until are scored in an earlier window
    for start in starts:
        window_label = WINDOW_LABELS[task](labels, slice(start, start + window))
        if once and scored_until > start:
            # scored rows: each once, in the first window that holds it (the most rows before it)
            window_label = window_label.clone()
            window_label[: scored_until - start] = IGNORE_INDEX
            if bool((window_label == IGNORE_INDEX).all()):
                continue
        scored_until = start + window
        examples.append({"input_features": features[start : start + window], "labels": window_label})
    return examples


def purged_rows(ranges: tuple[range, range, range], index: int, label_leads: int) -> int:
    """How many of split ``index``'s last rows have labels made of a later split's rows: ``label_leads`` (at most
    the split's rows) when a later split has rows, else 0 (the last split's labels reach past it into no split)."""
    later = any(len(rows) for rows in ranges[index + 1 :])
    return min(label_leads, len(ranges[index])) if later else 0


def window_starts(rows: range, window: int, stride: int, task: str, purged: int = 0) -> range:
    """The first rows of a split's windows (``rows``: the split's row range), every ``stride`` rows: windows inside
    the split holding a label not ``purged`` (one of the split's last ``purged`` rows): sequence classification's
    window ends before them, token classification's starts before them."""
    kept_stop = rows.stop - purged  # the split's rows whose labels are kept
    if task == "sequence_classification":
        last = kept_stop - window  # the window ends at its labelled row
    else:
        last = min(rows.stop - window, kept_stop - 1)
    return range(rows.start, max(rows.start, last + 1), stride)


def _read_rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header (stripped names) and the data rows as (file line number, cells); blank lines skipped."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = [name.strip() for name in next(reader, [])]
            if not header:
                raise ValueError(f"{path}: the file is empty; a header row is required")
            duplicate = next((name for i, name in enumerate(header) if name in header[:i]), None)
            if duplicate is not None:
                raise ValueError(f"{path}: line 1: column {duplicate!r} appears twice in the header")
            rows = []
            for cells in reader:
                if not cells:
                    continue
                if len(cells) != len(header):
                    raise ValueError(
                        f"{path}: line {reader.line_num}: {len(cells)} cells but the header has {len(header)} columns"
                    )
                rows.append((reader.line_num, cells))
    except UnicodeDecodeError as error:  # its position is in the decoder's buffer: the file's line and offset
        check_utf8(path)
        raise ValueError(f"{path}: cannot read as a UTF-8 CSV file ({error})") from None
    except (OSError, csv.Error) as error:
        raise ValueError(f"{path}: cannot read as a UTF-8 CSV file ({error})") from None
    if not rows:
        raise ValueError(f"{path}: no data rows after the header")
    return header, rows


def _choose_features(path: Path, header: list[str], label_column: str, feature_columns: list[str] | None) -> list[str]:
    if label_column not in header:
        raise ValueError(f"{path}: label column {label_column!r} is not in the header; columns are {header}")
    if feature_columns is None:
        feature_columns = [column for column in header if column != label_column]
    feature_columns = list(feature_columns)
    if not feature_columns:
        raise ValueError(f"{path}: no feature columns (the header has only {header})")
    for column in feature_columns:
        if column not in header:
            raise ValueError(f"{path}: feature column {column!r} is not in the header; columns are {header}")
        if column == label_column:
            raise ValueError(f"{path}: column {column!r} cannot be both the label and a feature")
    if len(set(feature_columns)) != len(feature_columns):
        raise ValueError(f"{path}: feature_columns repeats a column: {feature_columns}")
    return feature_columns


def _check_date_order(path: Path, header: list[str], rows: list[tuple[int, list[str]]], used: list[str]) -> None:
    """Raise at the first row whose date is earlier than the row before's, in each column not in ``used`` whose name
    holds a word of ``DATE_WORDS`` and whose cells all read as dates (ISO 8601 or a ``DATE_FORMATS`` form), unless
    another reading of them (day-first for month-first) is in order; any other column is let be."""
    for index, column in enumerate(header):
        if column in used or not DATE_WORDS & set(re.split(r"[^a-z]+", column.lower())):
            continue
        cells = [cells[index].strip() for _, cells in rows]
        first_earlier = None
        for read in (datetime.fromisoformat, *(partial(_strptime, form=form) for form in DATE_FORMATS)):
            try:
                dates = [read(cell) for cell in cells]
                earlier = next((row for row in range(1, len(dates)) if dates[row] < dates[row - 1]), None)
            except (ValueError, TypeError):  # not dates of this form, or naive and zoned times mixed
                continue
            if earlier is None:
                break
            first_earlier = earlier if first_earlier is None else first_earlier
        else:
            if first_earlier is not None:
                (line, cells), (before, previous) = rows[first_earlier], rows[first_earlier - 1]
                raise ValueError(f"{path}: line {line}, column {column!r}: {cells[index].strip()!r} is earlier than "
                                 f"{previous[index].strip()!r} on line {before}; rows are taken in time order (train "
                                 f"first, then val, then test): sort the file oldest first")  # fmt: skip


def _strptime(cell: str, form: str) -> datetime:
    return datetime.strptime(cell, form)


def _refuse_float_labels(path: Path, label_column: str, labels: list[str]) -> None:
    """Labels are classes: a column whose every value is a finite number, at least one not an integer (returns such
    as 0.0123), raises, as each distinct value would become a class of its own. Integer values (0/1/2) are classes."""
    example = None
    for label in labels:
        try:
            value = float(label)
        except ValueError:
            return
        if not np.isfinite(value):
            return
        if example is None and not value.is_integer():
            example = label
    if example is not None:
        raise ValueError(f"{path}: column {label_column!r} holds numbers such as {example!r} ({len(set(labels))} "
                         f"distinct values), but labels are classes, each distinct value one: bin the target into "
                         f"classes first (e.g. up/down)")  # fmt: skip


def _is_number(cell: str) -> bool:
    try:
        return bool(np.isfinite(float(cell)))
    except ValueError:
        return False


def _parse_number(cell: str, path: Path, line: int, column: str) -> float:
    """The cell as a finite float; empty, non-numeric, NaN or infinite cells raise naming line and column."""
    try:
        value = float(cell)
    except ValueError:
        value = None
    if value is None or not np.isfinite(value):
        raise ValueError(f"{path}: line {line}, column {column!r}: value {cell!r} is not a finite number")
    return value

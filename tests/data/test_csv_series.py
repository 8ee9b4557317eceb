"""CSV time series: chronological splits, windows inside splits, train-only normalisation, labels and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from markovformer.data.readers.csv_series import load_csv_series

_NAMES = ["calm", "rising", "storm"]


def _write_series(path, num_rows: int, *, override: dict | None = None) -> None:
    """Columns t (= row index), wave, constant, state (label: _NAMES[(row // 2) % 3]); ``override`` maps
    (row, column) to a replacement cell."""
    override = override or {}
    lines = ["t,wave,constant,state"]
    for row in range(num_rows):
        cells = {"t": str(row), "wave": f"{np.sin(row * 0.7) * 3 + row * 0.1:.6f}", "constant": "4.5"}
        cells["state"] = _NAMES[(row // 2) % 3]
        cells.update({column: value for (r, column), value in override.items() if r == row})
        lines.append(",".join(cells[column] for column in ("t", "wave", "constant", "state")))
    path.write_text("\n".join(lines) + "\n")


def _row_indices(bundle, example) -> list[int]:
    """The file rows a window covers, read back from the normalised 't' feature."""
    mean, std = bundle.info["normalisation"]["mean"][0], bundle.info["normalisation"]["std"][0]
    return [round(float(value) * std + mean) for value in example["input_features"][:, 0]]


def test_splits_are_chronological_and_windows_stay_inside(tmp_path):
    path = tmp_path / "series.csv"
    _write_series(path, 100)
    bundle = load_csv_series(path, label_column="state", window=6, stride=2, fractions=(0.6, 0.2, 0.2))
    assert [bundle.splits[name] for name in ("train", "val", "test")] == [[0, 60], [60, 80], [80, 100]]
    bounds = {}
    for name in ("train", "val", "test"):
        start, stop = bundle.splits[name]
        windows = [_row_indices(bundle, example) for example in getattr(bundle, name)]
        assert [window[0] for window in windows] == list(range(start, stop - 6 + 1, 2))
        for window in windows:
            assert window == list(range(window[0], window[0] + 6))  # consecutive rows
            assert start <= window[0] and window[-1] < stop  # never straddles a split boundary
        bounds[name] = (min(w[0] for w in windows), max(w[-1] for w in windows))
    assert bounds["train"][1] < bounds["val"][0] and bounds["val"][1] < bounds["test"][0]


def test_sequence_labels_are_the_last_rows_label(tmp_path):
    path = tmp_path / "series.csv"
    _write_series(path, 40)
    bundle = load_csv_series(path, label_column="state", window=5, fractions=(0.5, 0.25, 0.25))
    assert bundle.info["label_names"] == sorted(_NAMES) and bundle.info["num_labels"] == 3
    assert bundle.info["feature_columns"] == ["t", "wave", "constant"] and bundle.info["input_dim"] == 3
    for example in bundle.train + bundle.val + bundle.test:
        last = _row_indices(bundle, example)[-1]
        assert example["labels"].dim() == 0 and example["labels"].dtype == torch.long
        assert bundle.info["label_names"][int(example["labels"])] == _NAMES[(last // 2) % 3]
        assert example["input_features"].shape == (5, 3) and example["input_features"].dtype == torch.float32


def test_token_labels_cover_every_row(tmp_path):
    path = tmp_path / "series.csv"
    _write_series(path, 40)
    bundle = load_csv_series(
        path, label_column="state", feature_columns=["t"], window=4, stride=3, task="token_classification"
    )
    assert bundle.info["input_dim"] == 1
    for example in bundle.train + bundle.val + bundle.test:
        rows = _row_indices(bundle, example)
        expected = [sorted(_NAMES).index(_NAMES[(row // 2) % 3]) for row in rows]
        assert [label for label in example["labels"].tolist() if label != -100] == [
            label for label, given in zip(expected, example["labels"].tolist(), strict=True) if given != -100]
    assert all(bool((example["labels"] != -100).all()) for example in bundle.train)  # training keeps every label


@pytest.mark.parametrize(("window", "stride"), [(6, 1), (5, 2), (4, 4), (7, 3), (10, 4), (6, 8)])
def test_validation_and_test_score_each_row_once_in_its_first_window(tmp_path, window, stride):
    """Overlapping windows (stride < window) held a row up to window / stride times, each with another number of
    rows before it: a token classifier's validation accuracy was an average over those copies (27,445 labelled
    positions for about 1,400 rows in the finance walk-through), not a number per row. Validation and test now
    label each covered row once, in the first window holding it; training keeps every label. Windows that tile or
    overlap cover every row: the last rows after the last stride (2 of 20 at window 7, stride 3) were never
    scored; windows with gaps between them (stride > window) score the rows they hold."""
    path = tmp_path / "series.csv"
    _write_series(path, 80)
    bundle = load_csv_series(path, label_column="state", feature_columns=["t"], window=window, stride=stride,
                             fractions=(0.5, 0.25, 0.25), task="token_classification")  # fmt: skip
    for name in ("val", "test"):
        start, stop = bundle.splits[name]
        scored, firsts = [], {}
        for example in getattr(bundle, name):
            rows = _row_indices(bundle, example)
            for position, (row, label) in enumerate(zip(rows, example["labels"].tolist(), strict=True)):
                firsts.setdefault(row, (rows[0], position))
                if label != -100:
                    scored.append(row)
                    assert (rows[0], position) == firsts[row]  # the first window holding the row
        covered = sorted(firsts)
        assert sorted(scored) == covered  # every covered row, once
        assert covered[0] == start and covered[-1] < stop
        if stride <= window:
            assert covered == list(range(start, stop))


@pytest.mark.parametrize("task", ["sequence_classification", "token_classification"])
def test_labels_that_look_ahead_never_reach_into_a_later_split(tmp_path, task):
    """With ``label_leads=k`` a row's label is made of the next k rows: the last k rows of train (of val) are labelled
    with validation (test) rows, the last training day's next-day move being the first validation day's return.
    No example carries such a label; every other row's label is carried, and the last split keeps all of its own."""
    path = tmp_path / "series.csv"
    _write_series(path, 60)
    leads, window = 3, 5
    bundle = load_csv_series(path, label_column="state", window=window, fractions=(0.5, 0.25, 0.25), task=task,
                             label_leads=leads)  # fmt: skip
    for name in ("train", "val", "test"):
        start, stop = bundle.splits[name]
        labelled = []
        for example in getattr(bundle, name):
            rows = _row_indices(bundle, example)
            assert start <= rows[0] and rows[-1] < stop
            carried = rows[-1:] if task == "sequence_classification" else rows
            for row, label in zip(carried, example["labels"].reshape(-1).tolist(), strict=True):
                if label != -100:
                    assert bundle.info["label_names"][label] == _NAMES[(row // 2) % 3]
                    labelled.append(row)
        horizon_stop = stop if name == "test" else stop - leads  # rows whose label is made of this split's rows
        first = start + window - 1 if task == "sequence_classification" else start
        assert sorted(set(labelled)) == list(range(first, horizon_stop)), name
    with pytest.raises(ValueError, match=r"the val split has 15 rows, too few for window=13 with a label not purged "
                                         r"\(label_leads=3: the labels of its last 3 rows"):
        load_csv_series(path, label_column="state", window=13, fractions=(0.5, 0.25, 0.25), label_leads=3)
    assert len(load_csv_series(path, label_column="state", window=13, fractions=(0.5, 0.25, 0.25)).val) == 3


def test_normalisation_uses_train_rows_only(tmp_path):
    clean, spiked = tmp_path / "clean.csv", tmp_path / "spiked.csv"
    _write_series(clean, 50)
    _write_series(spiked, 50, override={(45, "wave"): "1e6", (35, "t"): "-999"})  # rows in val and test
    options = {"label_column": "state", "window": 1, "fractions": (0.6, 0.2, 0.2)}
    first, second = load_csv_series(clean, **options), load_csv_series(spiked, **options)
    assert first.info["normalisation"] == second.info["normalisation"]
    for a, b in zip(first.train, second.train, strict=True):
        assert torch.equal(a["input_features"], b["input_features"])

    train = torch.cat([example["input_features"] for example in first.train]).double()  # window 1: one row each
    assert train.shape == (30, 3)
    zeros, ones = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    torch.testing.assert_close(train[:, :2].mean(0), zeros, atol=1e-6, rtol=0)
    torch.testing.assert_close(train[:, :2].std(0, unbiased=False), ones, atol=1e-6, rtol=0)
    assert first.info["normalisation"]["std"][2] == 1.0 and torch.all(train[:, 2] == 0)  # constant column
    raw_t = np.arange(50.0)
    expected_val = (raw_t[30:40] - raw_t[:30].mean()) / raw_t[:30].std()
    got_val = torch.cat([example["input_features"][:, 0] for example in first.val]).numpy()
    np.testing.assert_allclose(got_val, expected_val, rtol=1e-6)


def test_integer_labels_sort_numerically(tmp_path):
    path = tmp_path / "series.csv"
    path.write_text("x,y\n" + "".join(f"{i}.5,{[10, 2, 0][i % 3]}\n" for i in range(30)))
    bundle = load_csv_series(path, label_column="y", window=2, fractions=(0.8, 0.1, 0.1))
    assert bundle.info["label_names"] == ["0", "2", "10"]
    assert int(bundle.train[0]["labels"]) == 1  # row 1 has label 2


def test_float_labels_are_refused_but_integer_labels_stay_classes(tmp_path):
    path = tmp_path / "fin.csv"
    returns = [0.0123, -1.5, 0.0123, 2.0, -0.25, 0.5] * 5  # 30 rows, 5 distinct values
    path.write_text("x,ret\n" + "".join(f"{i},{value}\n" for i, value in enumerate(returns)))
    message = (r"fin.csv: column 'ret' holds numbers such as '0.0123' \(5 distinct values\), but labels are classes, "
               r"each distinct value one: bin the target into classes first \(e.g. up/down\)")
    with pytest.raises(ValueError, match=message):
        load_csv_series(path, label_column="ret", window=2)
    path.write_text("x,y\n" + "".join(f"{i},{[0, 1, 2][i % 3]}.0\n" for i in range(30)))  # integer-valued floats
    assert load_csv_series(path, label_column="y", window=2).info["label_names"] == ["0.0", "1.0", "2.0"]


def test_a_date_column_must_be_oldest_first(tmp_path):
    path = tmp_path / "prices.csv"
    days = [f"2024-01-{day:02d}" for day in range(1, 31)]
    rows = [f"{day},{100 + i},{'up' if i % 2 else 'down'}\n" for i, day in enumerate(days)]
    path.write_text("Date,close,move\n" + "".join(reversed(rows)))  # newest first, as many price downloads are
    message = (r"prices.csv: line 3, column 'Date': '2024-01-29' is earlier than '2024-01-30' on line 2; rows are "
               r"taken in time order \(train first, then val, then test\): sort the file oldest first")
    with pytest.raises(ValueError, match=message):
        load_csv_series(path, label_column="move", feature_columns=["close"], window=2)
    rows[5] = rows[4].replace(",104,", ",105,")  # line 7 repeats line 6's date: not earlier, kept
    path.write_text("Date,close,move\n" + "".join(rows))
    assert load_csv_series(path, label_column="move", feature_columns=["close"], window=2).splits["num_rows"] == 30
    path.write_text("date,close,move\n" + "".join(f"day{30 - i},{i},{'up' if i % 2 else 'down'}\n" for i in range(30)))
    assert load_csv_series(path, label_column="move", feature_columns=["close"], window=2).splits["num_rows"] == 30


@pytest.mark.parametrize(
    "column, form",
    [("Date", "%m/%d/%Y"), ("date", "%d.%m.%Y"), ("trade_date", "%Y-%m-%d"), ("Timestamp UTC", "%m/%d/%Y %H:%M")],
)
def test_a_date_column_of_another_form_or_name_must_be_oldest_first_too(tmp_path, column, form):
    """Only ISO dates in a column named exactly date/datetime/time/timestamp were checked: a price download's
    "01/31/2024" or a "trade_date" column sorted newest first trained on the future without a word."""
    from datetime import date, timedelta

    days = [(date(2023, 12, 20) + timedelta(days=i)).strftime(form) for i in range(30)]  # days past the 12th
    rows = [f"{day},{100 + i},{'up' if i % 2 else 'down'}\n" for i, day in enumerate(days)]
    path = tmp_path / "prices.csv"
    path.write_text(f"{column},close,move\n" + "".join(rows))
    assert load_csv_series(path, label_column="move", feature_columns=["close"], window=2).splits["num_rows"] == 30
    path.write_text(f"{column},close,move\n" + "".join(reversed(rows)))
    with pytest.raises(ValueError, match=f"prices.csv: line 3, column '{column}': '{days[28]}' is earlier than "
                                         f"'{days[29]}' on line 2; .*sort the file oldest first"):
        load_csv_series(path, label_column="move", feature_columns=["close"], window=2)


@pytest.mark.parametrize("bad", ["nan", "", "abc", "inf"])
def test_bad_feature_cell_names_line_and_column(tmp_path, bad):
    path = tmp_path / "series.csv"
    _write_series(path, 30, override={(2, "wave"): bad})
    with pytest.raises(ValueError, match=f"series.csv: line 4, column 'wave': value '{bad}' is not a finite number"):
        load_csv_series(path, label_column="state", window=3)


def test_a_column_of_no_numbers_read_by_default_says_to_list_the_features(tmp_path):
    """A date column (any text column) is a feature when feature_columns is null: the error says so, and how to leave
    it out, where a bad cell of a numeric column keeps the plain error."""
    path = tmp_path / "series.csv"
    _write_series(path, 30)
    lines = path.read_text().splitlines()
    dated = [f"date,{lines[0]}"] + [f"2024-01-{row + 1:02d},{line}" for row, line in enumerate(lines[1:])]
    path.write_text("\n".join(dated) + "\n")
    with pytest.raises(ValueError, match=r"line 2, column 'date': value '2024-01-01' is not a finite number, nor is "
                                         r"any value of that column: feature_columns is null.*list the numeric ones"):
        load_csv_series(path, label_column="state", window=3)
    bundle = load_csv_series(path, label_column="state", feature_columns=["t", "wave"], window=3)
    assert bundle.info["feature_columns"] == ["t", "wave"]
    _write_series(path, 30, override={(2, "wave"): "abc"})
    with pytest.raises(ValueError) as error:
        load_csv_series(path, label_column="state", window=3)
    assert str(error.value).endswith("column 'wave': value 'abc' is not a finite number")


def test_missing_label_column_lists_the_columns(tmp_path):
    path = tmp_path / "series.csv"
    _write_series(path, 30)
    with pytest.raises(ValueError, match=r"label column 'label' is not in the header; columns are \['t', 'wave'"):
        load_csv_series(path, label_column="label", window=3)


@pytest.mark.parametrize(
    "options, content, message",
    [
        ({"window": 3}, "", "empty"),
        ({"window": 3}, "a,state\n", "no data rows"),
        ({"window": 3}, "a,state\n1,x\n2\n", "line 3: 1 cells but the header has 2"),
        ({"window": 3}, "a,a,state\n1,2,x\n", "'a' appears twice"),
        ({"window": 3}, "a,state\n1,\n", "line 2, column 'state': the label is empty"),
        ({"window": 3, "feature_columns": ["b"]}, "a,state\n1,x\n", "feature column 'b'"),
        ({"window": 3, "task": "regression"}, "a,state\n1,x\n", "'regression'"),
        ({"window": 0}, "a,state\n1,x\n", "window"),
        ({"window": 8}, "a,state\n" + "1,x\n2,y\n" * 20, "the val split has 6 rows, fewer than window=8"),
        ({"window": 3}, "a,state\n" + "1,x\n" * 40, "column 'state': every label is 'x': classification needs"),
    ],
)
def test_bad_files_and_options_raise(tmp_path, options, content, message):
    path = tmp_path / "series.csv"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_csv_series(path, label_column="state", **options)

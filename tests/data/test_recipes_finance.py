"""Finance recipes and readers: daily-bar features against their formulas, causality (no feature or fitted quantity
reads the future), thresholds that balance the training period, volatility regimes, the CSV through csv_series
(chronological splits, training-only normalisation), the recipes with a fake ``arch``, and the LOB reader."""

from __future__ import annotations

import csv
import sys
import types
from datetime import date

import numpy as np
import pytest

from markovformer.data.readers.csv_series import load_csv_series
from markovformer.data.recipes import finance
from markovformer.data.recipes.finance import (
    DAILY_FEATURES,
    FRACTIONS,
    DailyBars,
    balanced_thresholds,
    daily_features,
    daily_move_table,
    load_order_book,
    mid_price_moves,
    move_labels,
    order_book_table,
    prepare_nasdaq,
    prepare_sp500,
    read_order_book,
    regimes_of_examples,
)
from markovformer.data.sources import DATA_SOURCES, source_tasks
from markovformer.data.splits import contiguous_split


def _replace(bars: DailyBars, start: int, seed: int) -> DailyBars:
    """The same bars up to ``start``, different ones from there on."""
    other = finance.synthetic_bars(len(bars.dates), seed)
    arrays = {}
    for name in ("open", "high", "low", "close", "volume"):
        values = getattr(bars, name).copy()
        scale = bars.close[start - 1] / other.close[start - 1] if name != "volume" else 1.0
        values[start:] = getattr(other, name)[start:] * scale
        arrays[name] = values
    return DailyBars(bars.dates, **arrays)


def test_daily_features_follow_their_formulas():
    bars = finance.synthetic_bars(300)
    features = daily_features(bars)
    c, o, h, l, v = bars.close, bars.open, bars.high, bars.low, bars.volume
    t = 50
    returns = np.log(c[1:] / c[:-1])
    expected = {
        "return_1d": np.log(c[t] / c[t - 1]), "return_5d": np.log(c[t] / c[t - 5]),
        "return_20d": np.log(c[t] / c[t - 20]), "gap": np.log(o[t] / c[t - 1]), "intraday": np.log(c[t] / o[t]),
        "range": np.log(h[t] / l[t]), "close_location": (c[t] - l[t]) / (h[t] - l[t]),
        "volatility_20d": np.std(returns[t - 20 : t]), "volume_change": np.log(v[t] / v[t - 1]),
        "volume_vs_20d": np.log(v[t]) - np.mean(np.log(v[t - 19 : t + 1])),
    }  # fmt: skip
    assert set(features) == set(DAILY_FEATURES)
    for name, value in expected.items():
        assert features[name][t] == pytest.approx(value, rel=1e-12, abs=1e-15), name
    assert np.isnan(features["return_20d"][19]) and np.isfinite(features["return_20d"][20])


def test_zero_volume_repeats_the_previous_day_and_flat_bars_sit_mid_range():
    bars = finance.synthetic_bars(40)
    volume, high, low = bars.volume.copy(), bars.high.copy(), bars.low.copy()
    volume[30] = 0.0
    high[31] = low[31] = bars.open[31] = bars.close[31] = bars.close[30]
    features = daily_features(DailyBars(bars.dates, bars.open, high, low, bars.close, volume))
    assert features["volume_change"][30] == 0.0 and features["volume_change"][31] == pytest.approx(
        np.log(volume[31] / volume[29])
    )
    assert features["close_location"][31] == 0.5


def test_features_never_read_the_future():
    bars, cut = finance.synthetic_bars(300), 150
    before, after = daily_features(bars), daily_features(_replace(bars, cut, seed=9))
    for name in DAILY_FEATURES:
        np.testing.assert_array_equal(before[name][:cut], after[name][:cut], err_msg=name)
        assert not np.allclose(before[name][cut + 25 :], after[name][cut + 25 :]), name


def test_bars_are_validated():
    bars = finance.synthetic_bars(30)
    with pytest.raises(ValueError, match="low <= open, close <= high"):
        DailyBars(bars.dates, bars.open, bars.low, bars.high, bars.close, bars.volume)
    with pytest.raises(ValueError, match="strictly increasing"):
        DailyBars(bars.dates[::-1], bars.open, bars.high, bars.low, bars.close, bars.volume)
    with pytest.raises(ValueError, match="volume must be 30 finite values"):
        DailyBars(bars.dates, bars.open, bars.high, bars.low, bars.close, bars.volume * np.nan)


def test_thresholds_balance_and_label_the_moves():
    moves = np.random.default_rng(1).normal(size=300)
    low, high = balanced_thresholds(moves)
    labels = move_labels(moves, low, high)
    assert {label: labels.count(label) for label in ("down", "flat", "up")} == {"down": 100, "flat": 100, "up": 100}
    assert move_labels([-1.0, 0.0, 0.5, 2.0], -0.5, 0.5) == ["down", "flat", "flat", "up"]
    with pytest.raises(ValueError, match="at least 3 finite moves"):
        balanced_thresholds([0.1, np.nan, 0.2])


def _table(bars: DailyBars):
    header, rows, fitted = daily_move_table(bars)
    return header, rows, fitted, {name: [row[header.index(name)] for row in rows] for name in header}


def test_daily_table_labels_the_next_day_and_balances_the_training_period():
    bars = finance.synthetic_bars(300)
    header, rows, fitted, columns = _table(bars)
    assert header == ["date", *DAILY_FEATURES, "regime", "label"]
    assert len(rows) == len(bars.dates) - 21  # 20 days of history, and the last day has no next day
    train = contiguous_split(len(rows), FRACTIONS)[0]
    assert fitted["train_rows"] == [train.start, train.stop]
    low, high = fitted["move_thresholds"]
    day = {d: i for i, d in enumerate(bars.dates)}
    for row_date, label in zip(columns["date"], columns["label"], strict=True):
        t = day[row_date]
        assert label == move_labels([np.log(bars.close[t + 1] / bars.close[t])], low, high)[0]
    counts = [columns["label"][: train.stop - 1].count(name) for name in ("down", "flat", "up")]
    assert max(counts) - min(counts) <= 1  # balanced on the moves realised inside training
    regimes = [columns["regime"][: train.stop].count(name) for name in ("low", "medium", "high")]
    assert max(regimes) - min(regimes) <= 1
    assert columns["date"] == sorted(columns["date"])


def test_nothing_fitted_reads_past_the_training_period():
    bars = finance.synthetic_bars(300)
    _, rows, fitted, _ = _table(bars)
    train_stop = fitted["train_rows"][1]
    first_validation_day = 20 + train_stop  # row i is bar 20 + i: the first 20 bars are history
    _, other_rows, other_fitted, _ = _table(_replace(bars, first_validation_day, seed=5))
    assert other_fitted == fitted
    # every training row but the last, whose label is the move into the first validation day
    assert other_rows[: train_stop - 1] == rows[: train_stop - 1]
    assert other_rows[train_stop + 5 :] != rows[train_stop + 5 :]


def _write_table(path, bars: DailyBars):
    finance.write_csv(path, *daily_move_table(bars)[:2])
    return path


def test_the_csv_loads_in_csv_series_with_chronological_splits_and_training_statistics(tmp_path):
    bars = finance.synthetic_bars(300)
    path = _write_table(tmp_path / "bars.csv", bars)
    bundle = load_csv_series(path, label_column="label", feature_columns=list(DAILY_FEATURES), window=10, stride=3)
    with path.open() as handle:
        table = list(csv.DictReader(handle))
    train, val, test = (range(*bundle.splits[name]) for name in ("train", "val", "test"))
    assert max(table[i]["date"] for i in train) < min(table[i]["date"] for i in val)
    assert max(table[i]["date"] for i in val) < min(table[i]["date"] for i in test)
    raw = np.array([[float(row[name]) for name in DAILY_FEATURES] for row in table])
    np.testing.assert_allclose(bundle.info["normalisation"]["mean"], raw[: train.stop].mean(0), rtol=1e-12)
    np.testing.assert_allclose(bundle.info["normalisation"]["std"], raw[: train.stop].std(0), rtol=1e-12)
    first_val = (raw[val.start : val.start + 10] - raw[: train.stop].mean(0)) / raw[: train.stop].std(0)
    np.testing.assert_allclose(bundle.val[0]["input_features"].numpy(), first_val, rtol=1e-5, atol=1e-6)
    regimes = regimes_of_examples(path, bundle.splits, "test")
    assert len(regimes) == len(bundle.test)
    assert regimes == [table[start + 9]["regime"] for start in range(test.start, test.stop - 9, 3)]


def test_no_training_label_is_made_of_a_validation_day_and_regimes_follow_the_windows(tmp_path):
    """The daily label of row t is the move to day t + 1 (``label_leads: 1``): the last training row's is made of the
    first validation day's close, so no training example carries it (nor a validation example the last validation
    row's); ``regimes_of_examples`` follows the same windows."""
    path = _write_table(tmp_path / "bars.csv", finance.synthetic_bars(300))
    window = 10
    bundle = load_csv_series(path, label_column="label", feature_columns=list(DAILY_FEATURES), window=window,
                             label_leads=1)  # fmt: skip
    with path.open() as handle:
        table = list(csv.DictReader(handle))
    for name in ("train", "val", "test"):
        start, stop = bundle.splits[name]
        last_labelled = stop - 1 if name == "test" else stop - 2  # the row before a split's last: its move ends inside
        assert len(getattr(bundle, name)) == last_labelled - (start + window - 1) + 1, name
        regimes = regimes_of_examples(path, bundle.splits, name)
        labels = [bundle.info["label_names"][int(example["labels"])] for example in getattr(bundle, name)]
        rows = range(start + window - 1, last_labelled + 1)
        assert labels == [table[row]["label"] for row in rows] and regimes == [table[row]["regime"] for row in rows]


class _Column:
    def __init__(self, values):
        self.values = values

    def to_numpy(self, dtype):
        return np.asarray(self.values, dtype=dtype)


class _Frame:
    """What ``arch.data.X.load()`` returns, as far as the recipe reads it."""

    def __init__(self, bars: DailyBars):
        self.index = [date.fromisoformat(d) for d in bars.dates]
        self.columns = {"Open": bars.open, "High": bars.high, "Low": bars.low, "Close": bars.close,
                        "Adj Close": bars.close, "Volume": bars.volume}  # fmt: skip

    def __getitem__(self, name):
        return _Column(self.columns[name])


@pytest.mark.parametrize("name, prepare", [("sp500", prepare_sp500), ("nasdaq", prepare_nasdaq)])
def test_recipes_write_the_table_of_the_arch_data(tmp_path, monkeypatch, name, prepare):
    bars = finance.synthetic_bars(300)
    module = types.ModuleType(f"arch.data.{name}")
    module.load = lambda: _Frame(bars)
    monkeypatch.setitem(sys.modules, f"arch.data.{name}", module)
    out = prepare(tmp_path / f"{name}.csv")
    expected = _write_table(tmp_path / "expected.csv", bars)
    assert out.read_text() == expected.read_text()
    assert not list(tmp_path.glob(".*.tmp"))


def test_recipe_without_arch_or_with_too_little_data_raises_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "arch.data.sp500", None)  # importing it raises ImportError
    with pytest.raises(RuntimeError, match="pip install arch"):
        prepare_sp500(tmp_path / "sp500.csv")
    module = types.ModuleType("arch.data.sp500")
    module.load = lambda: _Frame(finance.synthetic_bars(24))
    monkeypatch.setitem(sys.modules, "arch.data.sp500", module)
    with pytest.raises(ValueError, match="training days"):
        prepare_sp500(tmp_path / "sp500.csv")
    assert list(tmp_path.iterdir()) == []


# Limit-order books


def _book_csv(path, n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    mid = 100 + np.cumsum(rng.normal(0, 0.02, n))
    half = 0.01 + np.abs(rng.normal(0, 0.005, n))
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["timestamp", "bid_price_1", "bid_size_1", "ask_price_1", "ask_size_1", "bid_price_2",
                         "bid_size_2", "ask_price_2", "ask_size_2", "venue"])  # fmt: skip
        for t in range(n):
            bid, ask = mid[t] - half[t], mid[t] + half[t]
            writer.writerow([f"09:30:{t:05d}", bid, rng.integers(1, 50), ask, rng.integers(1, 50), bid - 0.01,
                             rng.integers(1, 50), ask + 0.01, rng.integers(1, 50), "X"])  # fmt: skip
    return path


def test_order_book_reader_and_mid_price_moves(tmp_path):
    book = read_order_book(_book_csv(tmp_path / "book.csv", n=30))
    assert book.bid_prices.shape == (30, 2) and book.timestamps[3] == "09:30:00003"
    mid = (book.bid_prices[:, 0] + book.ask_prices[:, 0]) / 2
    np.testing.assert_allclose(book.mid, mid)
    moves = mid_price_moves(book, horizon=4)
    assert moves[7] == pytest.approx((mid[8:12].mean() - mid[7]) / mid[7])
    assert np.isnan(moves[-4:]).all() and np.isfinite(moves[:-4]).all()


def test_order_book_table_features_and_thresholds(tmp_path):
    book = read_order_book(_book_csv(tmp_path / "book.csv"))
    header, rows, fitted = order_book_table(book, horizon=5, threshold=1e-4)
    assert header[0] == "timestamp" and header[-1] == "label" and len(rows) == 400 - 5
    assert fitted["move_thresholds"] == [-1e-4, 1e-4]
    row = dict(zip(header, rows[10], strict=True))
    assert float(row["ask_price_1"]) == pytest.approx(book.ask_prices[10, 0] / book.mid[10] - 1)
    bid, ask = book.bid_sizes[10, 0], book.ask_sizes[10, 0]
    assert float(row["imbalance"]) == pytest.approx((bid - ask) / (bid + ask))
    assert row["label"] == move_labels(mid_price_moves(book, 5)[10:11], -1e-4, 1e-4)[0]
    _, rows, fitted = order_book_table(book, horizon=5)
    train = contiguous_split(len(rows), FRACTIONS)[0]
    labels = [row[-1] for row in rows[: train.stop - 5]]
    counts = [labels.count(name) for name in ("down", "flat", "up")]
    assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda rows: rows[2].__setitem__(3, rows[2][1]), "line 4: the best ask is not above the best bid"),
        (lambda rows: rows[4].__setitem__(2, "-1"), "line 6: a size is negative"),
        (lambda rows: rows[1].__setitem__(1, "abc"), "line 3, column 'bid_price_1': 'abc' is not a finite number"),
        (lambda rows: rows[3].__setitem__(5, "1000"), "line 5: bid prices must fall"),
    ],
)
def test_order_book_reader_rejects_malformed_books(tmp_path, edit, message):
    path = _book_csv(tmp_path / "book.csv", n=10)
    rows = [row.split(",") for row in path.read_text().splitlines()]
    edit(rows[1:])
    path.write_text("\n".join(",".join(row) for row in rows) + "\n")
    with pytest.raises(ValueError, match=message):
        read_order_book(path)


def test_order_book_reader_needs_the_level_columns(tmp_path):
    (tmp_path / "bad.csv").write_text("timestamp,bid_price_1,ask_price_1\n1,1,2\n")
    with pytest.raises(ValueError, match="the header needs timestamp, bid_price_1, bid_size_1"):
        read_order_book(tmp_path / "bad.csv")


def test_order_book_source_windows_normalise_on_training_rows(tmp_path):
    path = _book_csv(tmp_path / "book.csv")
    source = DATA_SOURCES["order_book"](path=str(path), horizon=5, window=20, stride=10)
    bundle = source.build(seed=0)
    assert source_tasks("order_book") == ("sequence_classification", "token_classification")
    assert bundle.info["input_dim"] == 10 and bundle.info["label_names"] == ["down", "flat", "up"]
    assert bundle.splits["path"] == str(path) and len(bundle.info["move_thresholds"]) == 2
    header, rows, _ = order_book_table(read_order_book(path), horizon=5)
    train_rows = np.array([[float(v) for v in row[1:-1]] for row in rows[: bundle.splits["train"][1]]])
    np.testing.assert_allclose(bundle.info["normalisation"]["mean"], train_rows.mean(0), rtol=1e-10)
    direct = load_order_book(path, horizon=5, window=20, stride=10)
    assert len(direct.train) == len(bundle.train) == (bundle.splits["train"][1] - 20) // 10 + 1


@pytest.mark.parametrize("task", ["sequence_classification", "token_classification"])
def test_no_order_book_label_of_a_split_is_made_of_a_later_splits_snapshots(tmp_path, task):
    """A snapshot's label is the mean of the next ``horizon`` mid prices: the last ``horizon`` training snapshots'
    labels are made of validation snapshots. Every label an example carries has its horizon inside its split."""
    horizon, window = 5, 20
    bundle = load_order_book(_book_csv(tmp_path / "book.csv"), horizon=horizon, window=window, task=task)
    for name in ("train", "val", "test"):
        start, stop = bundle.splits[name]
        labelled = set()
        for first, example in zip(range(start, stop), getattr(bundle, name), strict=False):  # stride 1
            labels = example["labels"].reshape(-1).tolist()
            rows = [first + window - 1] if task == "sequence_classification" else range(first, first + window)
            labelled |= {row for row, label in zip(rows, labels, strict=True) if label != -100}
        horizon_stop = stop if name == "test" else stop - horizon  # the order-book table holds no row past its moves
        assert max(labelled) == horizon_stop - 1, name


def test_a_label_that_looks_ahead_refuses_a_per_step_model_that_sees_later_rows(tmp_path):
    """A snapshot's order-book label is the move over the next ``horizon`` ones, whose prices are their features
    (the daily table's, the next day's return: the next row's return_1d, ``label_leads: 1``). A bidirectional model
    labelling every step would read it there: refused; a causal one, or one label per window (the window ends at
    the labelled row), is not."""
    from markovformer.training.build import build_data, build_model, build_run_task
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.trainer_config import ConfigError

    book = {"source": "order_book", "path": str(_book_csv(tmp_path / "book.csv")), "horizon": 5, "window": 20,
            "stride": 10}  # fmt: skip

    def prepare(task: str, causal: bool) -> None:
        config = resolve_run_config({"task": task, "data": book, "output_dir": str(tmp_path / "run"),
                                     "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "causal": causal,
                                               "pooling": "mean"}})  # fmt: skip
        bundle = build_data(config)
        build_run_task(config, bundle).prepare_model(build_model(config, bundle.info))

    with pytest.raises(ConfigError, match=r"look 5 row\(s\) ahead .*causal=false"):
        prepare("token_classification", causal=False)
    prepare("token_classification", causal=True)
    prepare("sequence_classification", causal=False)


def test_eval_of_a_later_book_labels_it_with_the_runs_thresholds(tmp_path):
    """The class thresholds belong to the run (fitted on its training moves): ``eval --data path=later.csv`` fitted
    them again on the later file's own moves, labels a live model could not have had (balanced by construction on
    the scored period). The later book, three times as volatile, is labelled with the run's; a threshold given on
    the command line still wins."""
    from markovformer.training.evaluation import evaluate
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    book = _book_csv(tmp_path / "book.csv", n=200)
    values = {"task": "sequence_classification", "output_dir": str(tmp_path / "run"),
              "model": {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2, "pooling": "last"},
              "data": {"source": "order_book", "path": str(book), "horizon": 5, "window": 8, "stride": 4},
              "trainer": {"max_steps": 2, "batch_size": 4, "eval_every": 2, "checkpoint_every": 2, "log_every": 2}}
    train(resolve_run_config(values))
    run_thresholds = load_order_book(book, horizon=5, window=8, stride=4).info["move_thresholds"]
    later = _book_csv(tmp_path / "later.csv", n=120, seed=1)
    header, *rows = [line.split(",") for line in later.read_text().splitlines()]
    prices = [column for column, name in enumerate(header) if "price" in name]
    for row in rows:  # every price three times as far from 100: moves about three times as large
        row[:] = [repr(100 + 3 * (float(cell) - 100)) if column in prices else cell for column, cell in enumerate(row)]
    later.write_text("\n".join(",".join(row) for row in [header, *rows]) + "\n")
    moves = mid_price_moves(read_order_book(later), 5)[:-5]
    for threshold, (low, high) in ((None, run_thresholds), (1e-4, (-1e-4, 1e-4))):
        overrides = {"path": str(later), "fractions": [1, 0, 0], "stride": 1}
        scored = evaluate(tmp_path / "run", "train", {**overrides, **({"threshold": threshold} if threshold else {})})
        supports = [scored["per_class"][name]["support"] for name in ("down", "flat", "up")]
        labels = move_labels(moves[8 - 1 :], low, high)  # the label of each window's last row
        assert supports == [labels.count(name) for name in ("down", "flat", "up")]
    assert load_order_book(later, horizon=5, window=8, fractions=(1, 0, 0)).info["move_thresholds"] != run_thresholds
    with pytest.raises(ValueError, match=r"threshold as a pair must be \[low, high\], finite, low <= high"):
        order_book_table(read_order_book(later), 5, (1e-4, -1e-4))


def test_an_order_book_out_of_time_order_is_refused_naming_the_users_file(tmp_path):
    """The order book is read through csv_series from a converted copy in a temporary folder: its date check (and
    any other error of that reader) named the copy, a file the user never saw and that is gone."""
    path = _book_csv(tmp_path / "book.csv", n=60)
    rows = path.read_text().splitlines()
    stamps = [f"2024-01-02T09:30:{59 - t:02d}" for t in range(60)]  # newest first
    path.write_text("\n".join([rows[0], *(f"{stamp},{row.split(',', 1)[1]}" for stamp, row in
                                          zip(stamps, rows[1:], strict=True))]) + "\n")  # fmt: skip
    with pytest.raises(ValueError, match=f"^{path} \\(its order-book table\\): line 3, column 'timestamp'"):
        load_order_book(path, horizon=5, window=10)

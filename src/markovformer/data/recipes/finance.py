"""Market data for three-class move prediction (down / flat / up): daily OHLCV bars (the ``arch`` package's S&P 500
and NASDAQ, 1999-2018) and limit-order-book snapshots, turned into CSV files the ``csv_series`` source reads.

One convention throughout: row t holds features computed from data up to and including t, and the label of row t is
the move from t to the next step (t + 1 for bars; the mean of the next ``horizon`` mid prices for a book). Everything
fitted to data (the class thresholds, the volatility-regime cut-offs; ``csv_series`` fits the feature normalisation)
uses training rows only, the first rows of ``contiguous_split(rows, FRACTIONS)``, so the CSV must be loaded with
``fractions=FRACTIONS``; a threshold is fitted on the moves realised inside the training period only, and
``csv_series`` purges the labels whose move ends in a later split (``label_leads``).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from markovformer.atomic import atomic_write_text
from markovformer.data.bundle import DataBundle
from markovformer.data.readers.csv_series import load_csv_series, purged_rows, window_starts
from markovformer.data.splits import contiguous_split

FRACTIONS = (0.7, 0.15, 0.15)  # the csv_series default: train, val, test rows in time order
MOVE_CLASSES = ("down", "flat", "up")
REGIMES = ("low", "medium", "high")
VOLATILITY_WINDOW = 20  # trading days (about a month) of daily returns behind the rolling volatility
DAILY_FEATURES = (
    "return_1d", "return_5d", "return_20d", "gap", "intraday", "range", "close_location", "volatility_20d",
    "volume_change", "volume_vs_20d",
)  # fmt: skip


@dataclass(frozen=True)
class DailyBars:
    """Daily OHLCV bars in time order: ``dates`` (ISO strings), float64 arrays of equal length."""

    dates: list[str]
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.dates)
        arrays = {name: getattr(self, name) for name in ("open", "high", "low", "close", "volume")}
        for name, values in arrays.items():
            if values.shape != (n,) or not np.isfinite(values).all():
                raise ValueError(f"bars: {name} must be {n} finite values, got shape {values.shape}")
        prices = np.stack([self.open, self.high, self.low, self.close])
        bad = np.flatnonzero((prices <= 0).any(0) | (self.high < prices.max(0)) | (self.low > prices.min(0)))
        if len(bad):
            raise ValueError(f"bar {self.dates[bad[0]]}: prices must be positive with low <= open, close <= high")
        if any(later <= earlier for earlier, later in zip(self.dates, self.dates[1:], strict=False)):
            raise ValueError("bars: dates must be strictly increasing")
        if (self.volume < 0).any():
            raise ValueError(f"bar {self.dates[int(np.argmax(self.volume < 0))]}: negative volume")


def synthetic_bars(days: int, seed: int = 0) -> DailyBars:
    """Random-walk daily bars from ``seed`` with three volatility regimes in turn (daily σ 1%, 3%, 1.5% of the
    close): data of the recipes' shape without the arch package, for tests and trials. Dates from 2000-01-03."""
    from datetime import date, timedelta

    rng = np.random.default_rng(seed)
    scale = np.repeat([1.0, 3.0, 1.5], days // 3 + 1)[:days]
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, days) * scale))
    open_ = close * np.exp(rng.normal(0, 0.003, days))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 0.004, days)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 0.004, days)))
    volume = rng.integers(1_000, 5_000, days).astype(float)
    dates = [(date(2000, 1, 3) + timedelta(days=i)).isoformat() for i in range(days)]
    return DailyBars(dates, open_, high, low, close, volume)


def bars_from_arch(name: str) -> DailyBars:
    """``arch.data.<name>.load()`` (``sp500`` or ``nasdaq``: columns Open, High, Low, Close, Adj Close, Volume,
    indexed by date) as DailyBars."""
    import importlib

    try:
        frame = importlib.import_module(f"arch.data.{name}").load()
    except ImportError:
        raise RuntimeError(f"the {name} data comes with the 'arch' package: pip install arch") from None
    return DailyBars(
        [date.strftime("%Y-%m-%d") for date in frame.index],
        *(frame[column].to_numpy(dtype=np.float64) for column in ("Open", "High", "Low", "Close", "Volume")),
    )


def daily_features(bars: DailyBars) -> dict[str, np.ndarray]:
    """Causal features per day (NaN until enough history): log returns over 1, 5 and 20 days; overnight gap
    log(O_t / C_t-1); intraday log(C_t / O_t); range log(H_t / L_t); where the close sits in the day's range (0 at
    the low, 1 at the high, 0.5 when H = L); the standard deviation of the last 20 daily log returns; log volume
    change; log volume minus its 20-day mean. A zero volume (a missing record) repeats the previous day's."""
    close, n = bars.close, len(bars.dates)
    log_close = np.log(close)

    def lagged(values: np.ndarray, lag: int) -> np.ndarray:
        out = np.full(n, np.nan)
        out[lag:] = values[lag:] - values[:-lag]
        return out

    volume = bars.volume.copy()
    for t in np.flatnonzero(volume == 0):
        volume[t] = volume[t - 1] if t > 0 else np.nan
    log_volume = np.log(volume)
    returns = lagged(log_close, 1)
    spread = bars.high - bars.low
    location = np.divide(close - bars.low, spread, out=np.full(n, 0.5), where=spread > 0)
    return {
        "return_1d": returns,
        "return_5d": lagged(log_close, 5),
        "return_20d": lagged(log_close, 20),
        "gap": np.concatenate([[np.nan], np.log(bars.open[1:] / close[:-1])]),
        "intraday": np.log(close / bars.open),
        "range": np.log(bars.high / bars.low),
        "close_location": location,
        "volatility_20d": _rolling(returns, VOLATILITY_WINDOW, np.std),
        "volume_change": lagged(log_volume, 1),
        "volume_vs_20d": log_volume - _rolling(log_volume, VOLATILITY_WINDOW, np.mean),
    }


def _rolling(values: np.ndarray, window: int, reduce) -> np.ndarray:
    """``reduce`` over each trailing window of ``window`` values ending at t (NaN where it holds a NaN)."""
    out = np.full(len(values), np.nan)
    if len(values) >= window:
        out[window - 1 :] = reduce(np.lib.stride_tricks.sliding_window_view(values, window), axis=1)
    return out


def balanced_thresholds(moves: np.ndarray) -> tuple[float, float]:
    """The 1/3 and 2/3 quantiles of ``moves``: down below the first, up above the second, flat between, so the
    three classes are (up to ties) equally frequent in ``moves``."""
    moves = np.asarray(moves, dtype=np.float64)
    if len(moves) < 3 or not np.isfinite(moves).all():
        raise ValueError(f"need at least 3 finite moves to balance three classes, got {len(moves)}")
    low, high = np.quantile(moves, [1 / 3, 2 / 3])
    return float(low), float(high)


def move_labels(moves: np.ndarray, low: float, high: float) -> list[str]:
    """'down' where move < low, 'up' where move > high, else 'flat'."""
    return [MOVE_CLASSES[0] if m < low else MOVE_CLASSES[2] if m > high else MOVE_CLASSES[1] for m in moves]


def regime_labels(volatility: np.ndarray, low: float, high: float) -> list[str]:
    """'low' below ``low``, 'high' above ``high``, else 'medium' (cut-offs: training terciles)."""
    return [REGIMES[0] if v < low else REGIMES[2] if v > high else REGIMES[1] for v in volatility]


def daily_move_table(
    bars: DailyBars, fractions: tuple[float, float, float] = FRACTIONS
) -> tuple[list[str], list[list[str]], dict]:
    """The CSV table of the daily task: header, rows, and what was fitted.

    Rows: the days with full feature history and a next day. Columns: ``date``, ``DAILY_FEATURES``, ``regime``
    (low/medium/high rolling volatility, cut at the training rows' terciles), ``label`` (the next day's log return
    r_t+1 = log C_t+1/C_t as down/flat/up, cut at the terciles of the r_t+1 realised inside the training period,
    i.e. of the training rows but the last, whose next day is the first validation day).
    """
    features = daily_features(bars)
    next_return = np.concatenate([np.log(bars.close[1:] / bars.close[:-1]), [np.nan]])
    matrix = np.stack([features[name] for name in DAILY_FEATURES], axis=1)
    rows = np.flatnonzero(np.isfinite(matrix).all(axis=1) & np.isfinite(next_return))
    train = contiguous_split(len(rows), fractions)[0]
    if len(train) < 4:
        raise ValueError(f"{len(rows)} usable days leave {len(train)} training days; at least 4 are needed")
    low, high = balanced_thresholds(next_return[rows[train.start : train.stop - 1]])
    volatility = features["volatility_20d"][rows]
    regime_cut = np.quantile(volatility[train.start : train.stop], [1 / 3, 2 / 3])
    labels = move_labels(next_return[rows], low, high)
    regimes = regime_labels(volatility, *regime_cut)
    table = [
        [bars.dates[t], *(repr(float(value)) for value in matrix[t]), regime, label]
        for t, regime, label in zip(rows, regimes, labels, strict=True)
    ]
    fitted = {"move_thresholds": [low, high], "regime_cutoffs": [float(c) for c in regime_cut],
              "train_rows": [train.start, train.stop]}  # fmt: skip
    return ["date", *DAILY_FEATURES, "regime", "label"], table, fitted


def write_csv(path: str | Path, header: list[str], rows: list[list[str]]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return atomic_write_text(path, buffer.getvalue())


def prepare_sp500(out_path: str | Path) -> Path:
    """The daily S&P 500 move task (``daily_move_table``) as a CSV at ``out_path``, written atomically."""
    return write_csv(out_path, *daily_move_table(bars_from_arch("sp500"))[:2])


def prepare_nasdaq(out_path: str | Path) -> Path:
    """The daily NASDAQ Composite move task (``daily_move_table``) as a CSV at ``out_path``, written atomically."""
    return write_csv(out_path, *daily_move_table(bars_from_arch("nasdaq"))[:2])


def regimes_of_examples(csv_path: str | Path, splits: dict, split: str = "test") -> list[str]:
    """The ``regime`` of each example of a ``csv_series`` bundle's ``split`` (its ``splits`` record): the regime
    of the row whose label the example carries (a window's last row), for F1 by volatility regime."""
    with Path(csv_path).open(newline="", encoding="utf-8-sig") as handle:
        regimes = [row["regime"] for row in csv.DictReader(handle)]
    if splits.get("kind") != "chronological_rows" or splits.get("task") != "sequence_classification":
        raise ValueError("regimes_of_examples needs the splits of a csv_series sequence_classification bundle")
    ranges = tuple(range(*splits[name]) for name in ("train", "val", "test"))
    index = ("train", "val", "test").index(split)
    purged = purged_rows(ranges, index, splits.get("label_leads", 0))
    window = splits["window"]
    starts = window_starts(ranges[index], window, splits["stride"], splits["task"], purged)
    return [regimes[first + window - 1] for first in starts]


# Limit-order books: snapshots of the best ``levels`` bid and ask prices and sizes.


@dataclass(frozen=True)
class OrderBook:
    """Snapshots in time order: ``timestamps`` (strings as in the file), ``bid_prices``/``bid_sizes``/
    ``ask_prices``/``ask_sizes`` (N, levels) float64, level 1 the best."""

    timestamps: list[str]
    bid_prices: np.ndarray
    bid_sizes: np.ndarray
    ask_prices: np.ndarray
    ask_sizes: np.ndarray

    @property
    def mid(self) -> np.ndarray:
        return (self.bid_prices[:, 0] + self.ask_prices[:, 0]) / 2


def read_order_book(path: str | Path) -> OrderBook:
    """A LOB CSV: a header with ``timestamp`` and, for levels 1..L, ``bid_price_i``, ``bid_size_i``,
    ``ask_price_i``, ``ask_size_i`` (other columns ignored). Rows in time order; bids fall and asks rise with the
    level, the best ask is above the best bid, sizes are non-negative. Violations raise ValueError naming the line."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = [name.strip() for name in reader.fieldnames or []]
            rows = [(reader.line_num, row) for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise ValueError(f"{path}: cannot read as a UTF-8 CSV file ({error})") from None
    levels = 0
    while all(f"{side}_{kind}_{levels + 1}" in header for side in ("bid", "ask") for kind in ("price", "size")):
        levels += 1
    if "timestamp" not in header or levels == 0:
        raise ValueError(f"{path}: the header needs timestamp, bid_price_1, bid_size_1, ask_price_1, ask_size_1; "
                         f"got {header}")  # fmt: skip
    if not rows:
        raise ValueError(f"{path}: no rows after the header")
    names = [f"{side}_{kind}_{level}" for side in ("bid", "ask") for kind in ("price", "size")
             for level in range(1, levels + 1)]  # fmt: skip
    values = np.empty((len(rows), len(names)))
    for index, (line, row) in enumerate(rows):
        row = {key.strip(): value for key, value in row.items() if key is not None}
        for column, name in enumerate(names):
            try:
                values[index, column] = float(row[name])
            except (TypeError, ValueError):
                values[index, column] = math.nan
            if not math.isfinite(values[index, column]):
                raise ValueError(f"{path}: line {line}, column {name!r}: {row[name]!r} is not a finite number")
    bid_prices, bid_sizes, ask_prices, ask_sizes = np.split(values, 4, axis=1)
    checks = (
        ((bid_sizes < 0) | (ask_sizes < 0)).any(1), "a size is negative",
        ask_prices[:, 0] <= bid_prices[:, 0], "the best ask is not above the best bid",
        (np.diff(bid_prices, axis=1) > 0).any(1) | (np.diff(ask_prices, axis=1) < 0).any(1),
        "bid prices must fall and ask prices rise with the level",
    )  # fmt: skip
    for bad, message in zip(checks[::2], checks[1::2], strict=True):
        if bad.any():
            raise ValueError(f"{path}: line {rows[int(np.argmax(bad))][0]}: {message}")
    return OrderBook([row["timestamp"] for _, row in rows], bid_prices, bid_sizes, ask_prices, ask_sizes)


def mid_price_moves(book: OrderBook, horizon: int) -> np.ndarray:
    """(N,) relative move of the mid price m: (mean(m_t+1 .. m_t+horizon) - m_t) / m_t, the smoothed label of
    the FI-2010 benchmark and DeepLOB; NaN for the last ``horizon`` rows."""
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
        raise ValueError(f"horizon must be a positive int, got {horizon!r}")
    mid = book.mid
    moves = np.full(len(mid), np.nan)
    if len(mid) > horizon:
        future = np.lib.stride_tricks.sliding_window_view(mid[1:], horizon).mean(axis=1)
        moves[: len(future)] = (future - mid[: len(future)]) / mid[: len(future)]
    return moves


def order_book_table(
    book: OrderBook,
    horizon: int = 10,
    threshold: float | tuple[float, float] | None = None,
    fractions: tuple[float, float, float] = FRACTIONS,
) -> tuple[list[str], list[list[str]], dict]:
    """The CSV table of the book task: features per snapshot (every price relative to the mid, every size, the
    spread relative to the mid, the level-1 size imbalance (bid - ask) / (bid + ask)) and the label of
    ``mid_price_moves``: up above ``threshold``, down below ``-threshold``, flat between (a pair (low, high): down
    below low, up above high, as a run's fitted ``move_thresholds``); ``threshold=None`` takes the training-period
    terciles instead (classes balanced on the rows whose horizon ends inside training). Rows without a full horizon
    are dropped."""
    moves = mid_price_moves(book, horizon)
    rows = np.flatnonzero(np.isfinite(moves))
    train = contiguous_split(len(rows), fractions)[0]
    if threshold is None:
        inside = rows[train.start : max(train.start, train.stop - horizon)]  # moves realised inside training
        low, high = balanced_thresholds(moves[inside])
    elif isinstance(threshold, (list, tuple)):
        if len(threshold) != 2 or not all(math.isfinite(cut) for cut in threshold) or threshold[0] > threshold[1]:
            raise ValueError(f"threshold as a pair must be [low, high], finite, low <= high; got {list(threshold)}")
        low, high = (float(cut) for cut in threshold)
    else:
        if not threshold >= 0:
            raise ValueError(f"threshold must be >= 0, a pair [low, high] or None, got {threshold!r}")
        low, high = -threshold, threshold
    mid = book.mid[:, None]
    levels = book.bid_prices.shape[1]
    best_bid, best_ask = book.bid_sizes[:, :1], book.ask_sizes[:, :1]
    total = best_bid + best_ask
    columns = {
        **{f"bid_price_{i + 1}": book.bid_prices[:, i : i + 1] / mid - 1 for i in range(levels)},
        **{f"ask_price_{i + 1}": book.ask_prices[:, i : i + 1] / mid - 1 for i in range(levels)},
        **{f"bid_size_{i + 1}": book.bid_sizes[:, i : i + 1] for i in range(levels)},
        **{f"ask_size_{i + 1}": book.ask_sizes[:, i : i + 1] for i in range(levels)},
        "spread": (book.ask_prices[:, :1] - book.bid_prices[:, :1]) / mid,
        "imbalance": np.divide(best_bid - best_ask, total, out=np.zeros_like(total), where=total > 0),
    }
    matrix = np.concatenate(list(columns.values()), axis=1)
    labels = move_labels(moves[rows], low, high)
    table = [
        [book.timestamps[t], *(repr(float(v)) for v in matrix[t]), label] for t, label in zip(rows, labels, strict=True)
    ]
    return ["timestamp", *columns, "label"], table, {"move_thresholds": [low, high], "horizon": horizon}


def load_order_book(
    path: str | Path,
    *,
    horizon: int = 10,
    threshold: float | tuple[float, float] | None = None,
    window: int = 100,
    stride: int = 1,
    fractions: tuple[float, float, float] = FRACTIONS,
    task: str = "sequence_classification",
) -> DataBundle:
    """A LOB CSV (``read_order_book``) as a ``csv_series`` DataBundle of ``order_book_table`` rows: windows of
    ``window`` snapshots, chronological splits, features normalised with training rows only. ``info`` adds the
    ``move_thresholds``, and ``label_leads`` = ``horizon`` (a snapshot's label is the move of the next ones, whose
    prices are their features: token classification needs a causal model); ``splits`` names ``path``."""
    import tempfile

    header, table, fitted = order_book_table(read_order_book(path), horizon, threshold, tuple(fractions))
    with tempfile.TemporaryDirectory(prefix="markovformer-lob-") as folder:
        converted = write_csv(Path(folder) / "book.csv", header, table)
        try:
            bundle = load_csv_series(converted, label_column="label", feature_columns=header[1:-1],
                                     window=window, stride=stride, fractions=tuple(fractions), task=task,
                                     label_leads=horizon)  # fmt: skip
        except ValueError as error:  # (a timestamp out of order, a split shorter than the window): the user's file
            raise ValueError(str(error).replace(str(converted), f"{path} (its order-book table)")) from None
    bundle.info.update(fitted)
    bundle.splits["path"] = str(path)
    return bundle

"""Tables, within-run ratios and the targets of issues 8 and 21, read from the suite's rows (pure Python, no torch)."""

from __future__ import annotations

import math


def _table(rows: list[dict], key: str) -> dict[str, dict[int, float]]:
    """{kind: {T: row[key]}} over the rows that measured it."""
    table: dict[str, dict[int, float]] = {}
    for row in rows:
        if row.get(key) is not None:
            table.setdefault(row["kind"], {})[row["T"]] = row[key]
    return table


def _not_measured(rows: list[dict]) -> dict[str, dict[int, str]]:
    table: dict[str, dict[int, str]] = {}
    for row in rows:
        reason = row.get("skipped") or row.get("error")
        if reason:
            table.setdefault(row["kind"], {})[row["T"]] = reason
    return table


def _warm_up_only(rows: list[dict]) -> dict[str, list[int]]:
    """{kind: [T]} of the rows timed by their warm-up step alone (``runs`` 0: the warm-up exceeded the time cap), a
    cold step with one-time costs rather than the median of warm runs."""
    cold: dict[str, list[int]] = {}
    for row in rows:
        if row.get("runs") == 0 and row.get("seconds") is not None:
            cold.setdefault(row["kind"], []).append(row["T"])
    return cold


def _ratio(table: dict, top: tuple[str, int], bottom: tuple[str, int]) -> float | None:
    numerator, denominator = table.get(top[0], {}).get(top[1]), table.get(bottom[0], {}).get(bottom[1])
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _target(value: float | None, bound: float, at_most: bool, needs: str) -> dict:
    if value is None:
        return {"value": None, "target": f"{'<=' if at_most else '>='} {bound:g}", "met": None, "missing": needs}
    met = value <= bound if at_most else value >= bound
    return {"value": round(value, 4), "target": f"{'<=' if at_most else '>='} {bound:g}", "met": met}


def _growth_exponent(series: dict[int, float]) -> float | None:
    """Least-squares exponent p of value ~ T**p over every measured T (None with fewer than two)."""
    points = [(math.log(int(t)), math.log(v)) for t, v in series.items() if v and v > 0]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else None


def targets(parts: dict) -> dict:
    """The issue-8 targets this run measured (``met`` None with ``missing`` for those it could not)."""
    found = {}
    ops_rows = parts.get("ops", {}).get("rows", [])
    seconds, peaks = _table(ops_rows, "seconds"), _table(ops_rows, "peak_mib")
    for name, table in (("time", seconds), ("memory", peaks)):
        value = _ratio(table, ("markov_local", 65536), ("markov_local", 8192))
        found[f"markov_local_{name}_64k_over_8k"] = _target(value, 9.0, True, "ops markov_local at T=8192 and 65536")
    paired = _table(ops_rows, "over_projections")  # median of per-turn ratios, timed in the same process
    for length in (4096, 16384):
        value = paired.get("markov_layer", {}).get(length)
        found[f"markov_layer_over_projections_{length}"] = _target(value, 1.5, True, f"ops markov_layer at T={length}")
    # GPU rows (CUDA only): the bias against FlexAttention's plain sliding window, and against causal SDPA (flash).
    value = _ratio(seconds, ("markov_local", 16384), ("sliding_window_flex", 16384))
    found["markov_local_over_flex_sliding_window_16384"] = _target(
        value, 1.3, True, "ops on CUDA: markov_local and sliding_window_flex at T=16384"
    )
    for length in (16384, 65536):
        value = _ratio(seconds, ("markov_local", length), ("softmax_sdpa", length))
        found[f"markov_local_over_softmax_sdpa_{length}"] = _target(
            value, 1.0, True, f"ops markov_local and softmax_sdpa at T={length}"
        )
    exponent = _growth_exponent(peaks.get("markov_global", {}))
    found["markov_global_memory_growth_exponent"] = _target(
        exponent, 1.2, True, "ops markov_global peak memory at two sizes"
    )
    model_rows = parts.get("models", {}).get("rows", [])
    rates, model_peaks = _table(model_rows, "tokens_per_second"), _table(model_rows, "peak_mib")
    for length, bound in ((2048, 2.0), (8192, 8.0)):
        value = _ratio(rates, ("markov_local", length), ("softmax", length))
        found[f"markov_local_over_softmax_tokens_per_second_{length}"] = _target(
            value, bound, False, f"models markov_local and softmax at T={length}"
        )
    value = _ratio(model_peaks, ("markov_local", 4096), ("softmax", 4096))
    found["markov_local_over_softmax_peak_memory_4096"] = _target(
        value, 1.0, True, "models markov_local and softmax at T=4096"
    )
    for paper in ("paper_hybrid_gru", "paper_hybrid_min_gru"):  # the paper's configuration, with either injection
        for length, bound in ((2048, 2.0), (8192, 4.0)):
            value = _ratio(rates, (paper, length), ("softmax", length))
            found[f"{paper}_over_softmax_tokens_per_second_{length}"] = _target(
                value, bound, False, f"models {paper} and softmax at T={length}"
            )
    for length in (8192, 32768):  # flat cost per token: the pure local model's rate should not fall with T
        value = _ratio(rates, ("markov_local", length), ("markov_local", 2048))
        found[f"markov_local_tokens_per_second_{length}_over_2048"] = _target(
            value, 0.85, False, f"models markov_local at T=2048 and {length}"
        )
    found.update(_window_targets(parts.get("windows", {})))
    return found


def _window_targets(part: dict) -> dict:
    """banded no slower than local-attention at the same window, for every (W, T) of the part (default grid if
    the part did not run)."""
    rows = part.get("rows", [])
    seconds = _table(rows, "seconds")
    windows = part.get("windows") or (16, 64, 256, 1024)
    lengths = sorted({row["T"] for row in rows}) or (4096, 16384)
    found = {}
    for window in windows:
        for length in lengths:
            value = _ratio(seconds, (f"banded_w{window}", length), (f"local_attention_w{window}", length))
            found[f"banded_over_local_attention_w{window}_{length}"] = _target(
                value, 1.0, True, f"windows banded_w{window} and local_attention_w{window} at T={length}"
            )
    return found


def time_per_key(part: dict) -> dict[str, dict[int, float]]:
    """Nanoseconds per (query, visible key) pair, {kind: {T: ns}}: flat in T and W when time ~ T·W (SDPA: T²/2). A
    causal window W shows query t the keys max(0, t - W)..t, so the first W queries see fewer than W + 1."""
    table: dict[str, dict[int, float]] = {}
    for row in part.get("rows", []):
        if row.get("seconds") is None:
            continue
        kind, length = row["kind"], row["T"]
        window = int(kind.rpartition("_w")[2]) if "_w" in kind else length  # query t sees keys max(0, t-W)..t
        full = max(0, length - window - 1)  # the queries that see all W + 1 keys; the first ones see t + 1
        pairs = (length - full) * (length - full + 1) / 2 + full * (window + 1)
        table.setdefault(kind, {})[length] = row["seconds"] / pairs * 1e9
    return table


def summarise(parts: dict) -> dict:
    """Tables {kind: {T: value}} per part, the skip/error reasons, the longest contexts and the targets."""
    summary: dict = {}
    if "ops" in parts:
        rows = parts["ops"]["rows"]
        summary["ops"] = {"seconds": _table(rows, "seconds"), "peak_mib": _table(rows, "peak_mib"),
                          "not_measured": _not_measured(rows), "warm_up_only": _warm_up_only(rows)}  # fmt: skip
    if "windows" in parts:
        rows = parts["windows"]["rows"]
        summary["windows"] = {"seconds": _table(rows, "seconds"), "ns_per_query_key": time_per_key(parts["windows"]),
                              "not_measured": _not_measured(rows), "warm_up_only": _warm_up_only(rows)}  # fmt: skip
    if "models" in parts:
        rows, described = parts["models"]["rows"], parts["models"].get("models", {})
        ran = {row["kind"] for row in rows}  # the models --set models=[...] kept, not every one described
        counts = {name: model["parameters"] for name, model in described.items() if "parameters" in model
                  and name in ran}  # fmt: skip
        summary["models"] = {"tokens_per_second": _table(rows, "tokens_per_second"),
                             "peak_mib": _table(rows, "peak_mib"), "not_measured": _not_measured(rows),
                             "warm_up_only": _warm_up_only(rows), "parameters": counts}  # fmt: skip
    if "longest" in parts:
        summary["longest"] = {model: entry["T"] for model, entry in parts["longest"]["longest"].items()}
    if "decode" in parts:  # per model and batch, per length: last-token / first-token time (local: <= 1.3), ...
        table: dict = {}
        for row in parts["decode"]["rows"]:
            if "end_over_start" in row:
                entry = {key: row[key] for key in ("end_over_start", "tokens_per_second", "peak_mib")}
                table.setdefault(f"{row['kind']} B={row['batch']}", {})[row["T"]] = entry
        summary["decode"] = table
    if "translation_decode" in parts:  # per kind and batch, per length: tokens/s and last/first step time
        part = parts["translation_decode"]
        table = {}
        for row in part["rows"]:
            if "end_over_start" in row:
                entry = {key: row[key] for key in ("end_over_start", "tokens_per_second", "peak_mib")}
                table.setdefault(f"{row['kind']} B={row['batch']}", {})[row["T"]] = entry
        summary["translation_decode"] = {"table": table, "mat_faster_from_length": part.get("mat_faster_from_length")}
    if "scan" in parts:
        rows = parts["scan"]["rows"]
        seconds = _table(rows, "seconds")
        ratios = {f"{slow}_over_{fast}_at_{t}": seconds[slow][t] / seconds[fast][t]
                  for t in sorted({row["T"] for row in rows}) for fast in ("sequential", "chunked")
                  for slow in ("naive", "naive_unbind")
                  if t in seconds.get(slow, {}) and t in seconds.get(fast, {})}  # fmt: skip
        training = {row["kind"]: row.get("chars_per_second") for row in parts["scan"]["training"]}
        if training.get("library") and training.get("seed_style"):
            ratios["library_over_seed_style_chars_per_second"] = training["library"] / training["seed_style"]
        summary["scan"] = {"seconds": seconds, "not_measured": _not_measured(rows), "ratios": ratios,
                           "training_chars_per_second": training}  # fmt: skip
    summary["targets"] = targets(parts)
    return summary


def _grid(table: dict[str, dict], columns: list[str], fmt, header: str, not_measured: dict | None = None,
          marked: dict | None = None) -> list[str]:
    """One line per length, one column per name; a length at which nothing was measured (every case skipped or
    failed: ``not_measured``, {name: {T: reason}}) is a line of dashes, not left out. A cell of ``marked`` ({name:
    [T]}) ends in ``*``."""
    lengths = sorted({int(t) for series in [*table.values(), *(not_measured or {}).values()] for t in series})
    lines = [f"{header:>8} | " + " | ".join(f"{name:>20}" for name in columns)]
    for length in lengths:
        cells = []
        for name in columns:
            series = table.get(name, {})
            value = series.get(length, series.get(str(length)))
            star = "*" if value is not None and int(length) in {int(t) for t in (marked or {}).get(name, ())} else ""
            cells.append(f"{'—' if value is None else fmt(value) + star:>20}")
        lines.append(f"{length:>8} | " + " | ".join(cells))
    return lines


def _pairs(first: dict[str, dict], second: dict[str, dict], names: list[str]) -> dict[str, dict]:
    """{name: {T: (first value, second value)}} over the T that ``first`` has."""
    return {name: {t: (value, second.get(name, {}).get(t)) for t, value in first.get(name, {}).items()}
            for name in names}  # fmt: skip


def format_summary(record: dict) -> str:
    """The record's tables and targets as plain text (what ``markovformer bench`` prints at the end)."""
    summary, lines = record.get("summary", {}), []
    if "ops" in summary:
        ops = summary["ops"]
        kinds = list(dict.fromkeys([*ops["seconds"], *ops["not_measured"]]))
        lines += ["attention ops, forward+backward: ms / peak MiB (— = skipped, reasons in bench.json)"]
        pairs = _pairs(ops["seconds"], ops["peak_mib"], kinds)
        lines += _grid(pairs, kinds, lambda v: f"{v[0] * 1e3:.1f} / {v[1]:.0f}", "T", ops["not_measured"],
                       ops.get("warm_up_only"))  # fmt: skip
    if "windows" in summary:
        windows = summary["windows"]
        kinds = list(dict.fromkeys([*windows["seconds"], *windows["not_measured"]]))
        lines += ["", "local attention by window, forward+backward: ms / ns per (query, visible key)"]
        pairs = _pairs(windows["seconds"], windows["ns_per_query_key"], kinds)
        lines += _grid(pairs, kinds, lambda v: f"{v[0] * 1e3:.1f} / {v[1]:.2f}", "T", windows["not_measured"],
                       windows.get("warm_up_only"))  # fmt: skip
    if "models" in summary:
        models = summary["models"]
        names = list(dict.fromkeys([*models["tokens_per_second"], *models["not_measured"]]))
        lines += ["", "models, training step: tokens/s / peak MiB"]
        pairs = _pairs(models["tokens_per_second"], models["peak_mib"], names)
        lines += _grid(pairs, names, lambda v: f"{v[0]:.0f} / {v[1]:.0f}", "T", models["not_measured"],
                       models.get("warm_up_only"))  # fmt: skip
        if models.get("parameters"):  # one shape (d_model, layers, heads), not one size: the kinds' counts differ
            lines.append("  parameters (same d_model, layers and heads; the kinds' own weights differ): "
                         + ", ".join(f"{name} {count:,}" for name, count in models["parameters"].items()))  # fmt: skip
    if "longest" in summary:
        lines += ["", "longest context trained: " + ", ".join(f"{k} {v}" for k, v in summary["longest"].items())]
    rate_and_flatness = lambda v: f"{v['tokens_per_second']:.0f} / {v['end_over_start']:.2f}"  # noqa: E731
    if summary.get("decode"):
        lines += ["", "decoding one token per step: tokens/s / last-over-first step time"]
        lines += _grid(summary["decode"], list(summary["decode"]), rate_and_flatness, "L")
        for target in record.get("parts", {}).get("decode", {}).get("targets", []):
            state = "met" if target["met"] else "NOT met"
            lines.append(f"  at L = {target['T']}, {target['target']}: {target['value']:.2f}, {state}")
    if "translation_decode" in summary:
        decode = summary["translation_decode"]
        lines += ["", "translation greedy decoding: tokens/s / last-over-first step time"]
        lines += _grid(decode["table"], list(decode["table"]), rate_and_flatness, "L")
        for batch, length in (decode["mat_faster_from_length"] or {}).items():
            where = f"first at L = {length} (of those measured)" if length is not None else "at no measured length"
            lines.append(f"MAT decodes more tokens/s than AT ({batch}): {where}")
    if "scan" in summary:
        scan = summary["scan"]
        kinds = list(dict.fromkeys([*scan["seconds"], *scan["not_measured"]]))
        lines += ["", "linear scan, forward+backward: ms"]
        lines += _grid(scan["seconds"], kinds, lambda v: f"{v * 1e3:.1f}", "T", scan["not_measured"])
        for kind, speed in scan["training_chars_per_second"].items():
            lines.append(f"Scan Markov training, {kind}: " + ("—" if speed is None else f"{speed:,.0f} characters/s"))
        for name, value in scan["ratios"].items():
            lines.append(f"  {name}: {value:.1f}x")
    if any(summary.get(part, {}).get("warm_up_only") for part in ("ops", "windows", "models")):
        lines += ["", "* the warm-up step alone, cold (one-time costs included): it exceeded the time cap, so no "
                  "warm run was timed"]  # fmt: skip
    lines += ["", "targets:"]
    for name, target in summary.get("targets", {}).items():
        state = {True: "met", False: "NOT met", None: "not measured"}[target["met"]]
        value = "—" if target["value"] is None else f"{target['value']:.3g}"
        lines.append(f"  {name:56} {value:>8} (target {target['target']}): {state}")
    return "\n".join(lines)

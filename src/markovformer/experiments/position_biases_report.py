"""The ``position-biases`` report: parameter counts, one table per task (mean +- std over seeds), the distance-profile
figure and the length-extrapolation table and figure."""

from __future__ import annotations

from markovformer.experiments.report import ExperimentReport, mean_std
from markovformer.training.durations import format_duration


def _point(points: list[dict], task: str, kind: str) -> dict | None:
    return next((p for p in points if p["task"] == task and p["kind"] == kind), None)


def write_report(report: ExperimentReport, settings, seeds: tuple[int, ...], quick: bool, kinds: dict) -> None:
    """Fill ``report`` from ``report.results``."""
    results = report.results
    points, tasks = results["points"], list(results["parameters"])
    labels = {kind: kinds[kind][0] for kind in settings.kinds}
    count = "one seed" if len(seeds) == 1 else f"{len(seeds)} seeds"  # --quick --seeds 0 1 said "one seed"
    report.text(
        (f"Quick run (`--quick`): short training, {count} — the ordering, not the final numbers. " if quick else "")
        + f"Every kind at the parameter count of softmax + rotary at d = {settings.d_model} ({settings.n_layers} "
        f"layers, {settings.n_heads} heads, SwiGLU); training length T = {settings.seq_len}, {settings.steps} steps "
        f"of {settings.batch_size}, AdamW, lr picked among {list(settings.lrs)} on the first seed's validation score; "
        f"seeds {list(seeds)} (mean ± sample std, n − 1). Local kinds see a window W = {settings.window} (keys "
        f"t − {settings.window}..t: {settings.window + 1}, the query's own included); Markov attention "
        f"K = {settings.max_order} lags. Wall time {format_duration(results['wall_seconds'])}, CPU time "
        f"{format_duration(results['cpu_seconds'])} (this run's: the cells it read from earlier runs took none of "
        f"it); the runs reported took {format_duration(sum(p['seconds'] for p in points))} of training, cells read "
        "from earlier runs included."
    )
    _parameters(report, settings, tasks, labels)
    hidden = [t for t in tasks if t.startswith("hidden_")]
    if hidden:
        rows = [[labels[kind], *(_cell(_point(points, t, kind), "excess", 4) for t in hidden)] for kind in labels]
        report.table(["kind", *(t.removeprefix("hidden_") for t in hidden)], rows,
                     caption="Hidden-order chains (fixed-k: lags 1..k, lag-k: lag k only): test loss above the "
                     "entropy rate (nats, exact expected loss; lower is better).")  # fmt: skip
        _profiles(report, settings, points, hidden, labels)
        _extrapolation(report, settings, points, hidden, labels)
    icl = [t for t in tasks if t.startswith("icl_")]
    if icl:
        rows = [[labels[kind], *(_cell(_point(points, t, kind), "excess", 4) for t in icl)] for kind in labels]
        bayes = [_point(points, t, next(iter(labels)))["bayes_add1"]["mean"] for t in icl]
        report.table(["kind", *(t.replace("icl_order", "order ") for t in icl)], rows,
                     caption="In-context chains (a fresh kernel per sequence): test loss above the Bayes add-1 "
                     f"predictor's (nats; its loss: {', '.join(f'{b:.4f}' for b in bayes)}).")  # fmt: skip
    mixer = [t for t in tasks if not t.startswith(("hidden_", "icl_"))]
    if mixer:
        rows = [[labels[kind], *(_cell(_point(points, t, kind), "test_accuracy", 3) for t in mixer)] for kind in labels]
        report.table(["kind", *mixer], rows, caption="MQAR and selective copying (the mixer suite's tasks at "
                     f"T = {settings.seq_len}): test accuracy.")  # fmt: skip


def _cell(point: dict | None, metric: str, digits: int) -> str:
    return "—" if point is None else f"{mean_std(point[metric], digits)} (lr {point['lr']:g})"


def _parameters(report: ExperimentReport, settings, tasks: list[str], labels: dict) -> None:
    counts = report.results["parameters"]
    rows = []
    for kind in labels:
        row = [labels[kind]]
        for task in tasks:
            entry = counts[task][kind]
            flag = "" if abs(entry["ratio"] - 1) <= settings.tolerance else f" (outside ±{settings.tolerance:.0%})"
            row.append(f"d={entry['d_model']}: {entry['parameters']:,} ({entry['ratio']:.3f}){flag}")
        rows.append(row)
    report.table(["kind", *tasks], rows, caption="Width, parameters and ratio to softmax + rotary per task "
                 f"(matched within ±{settings.tolerance:.0%} where the width grid allows).")  # fmt: skip


def _profiles(report: ExperimentReport, settings, points: list[dict], hidden: list[str], labels: dict) -> None:
    from markovformer.plots.position_biases import ProfilePanel, plot_distance_profiles

    panels = []
    for task in hidden:
        rows = {}
        for kind, label in labels.items():
            point = _point(points, task, kind)
            per_seed = [[max(layer[lag] for layer in profile) for lag in range(settings.profile_lags + 1)]
                        for profile in point["profile"]]  # fmt: skip
            rows[label] = [sum(seed[lag] for seed in per_seed) / len(per_seed) for lag in range(len(per_seed[0]))]
        needed = tuple(lag - 1 for lag in report.results["lags"][task])  # x_{t+1} reads x_{t+1-l}
        panels.append(ProfilePanel(f"{task.removeprefix('hidden_')} (framed: the lags the chain reads)", rows, needed))
    figure = plot_distance_profiles(panels, report.out_dir / "distance_profiles.png")
    report.figure(figure, "Distance profile of each kind: attention mass on each lag (mean over queries and seeds, "
                  "max over heads and layers). The position predicting x_{t+1} sits at x_t, so a chain reading lag l "
                  "needs attention lag l − 1 (framed). Layers compose: two layers each reading lag 1 reach lag 2, "
                  "and FoX Pro's key/value shift already brings the previous token to lag 0.")  # fmt: skip


def _extrapolation(report: ExperimentReport, settings, points: list[dict], hidden: list[str], labels: dict) -> None:
    from markovformer.plots.position_biases import plot_extrapolation

    multiples = [1, *settings.extrapolate]
    curves = {}
    for task in hidden:
        rows, series = [], {}
        for kind, label in labels.items():
            by_length = _point(points, task, kind)["excess_by_length"]
            rows.append([label, *(mean_std(by_length[str(m)], 4) for m in multiples)])
            series[label] = [by_length[str(m)]["mean"] for m in multiples]
        report.table(["kind", *(f"{m}T = {m * settings.seq_len}" if m > 1 else f"T = {settings.seq_len}"
                                for m in multiples)], rows,
                     caption=f"Length extrapolation on {task.removeprefix('hidden_')}: trained at T, test loss above "
                     "the entropy rate at longer lengths (nats).")  # fmt: skip
        curves[task.removeprefix("hidden_")] = series
    figure = plot_extrapolation(curves, multiples, report.out_dir / "extrapolation.png")
    report.figure(figure, "Test loss above the entropy rate as the evaluation length grows past the training length")


__all__ = ["write_report"]

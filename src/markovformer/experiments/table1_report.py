"""``table1``'s report: Table I (models), the matched parameter counts, F1 by volatility regime, Table II
(ablations), Table III (hybrid ratio per domain) and a figure, all read from the experiment's ``results``."""

from __future__ import annotations

import math

from markovformer.data.recipes.finance import REGIMES
from markovformer.experiments.report import ExperimentReport, mean_std, thread_counts
from markovformer.experiments.table1_models import DOMAIN_SPECS, MARKOVIAN, METRIC_LABELS, MODELS, ratio_of


def _k(count: int) -> str:
    return f"{count / 1000:.0f}K" if count >= 10_000 else f"{count:,}"


def _domains(results: dict) -> list[str]:
    return list(results["setups"])


def _table_one(report: ExperimentReport, results: dict, settings) -> None:
    domains, summaries, speed = _domains(results), results["summaries"], results["speed"]
    columns = ["model"]
    for domain in domains:
        columns += [f"{domain}: {METRIC_LABELS[m]}" for m in DOMAIN_SPECS[domain].shown]
    columns += ["parameters (" + " / ".join(domains) + ")"]
    if speed:
        columns += [f"peak train MiB @ {settings.memory_length}", f"train tokens/s @ {settings.speed_length}"]
    rows = []
    for variant in (v for v in results["rows"] if v in MODELS):
        row = [results["rows"][variant]]
        for domain in domains:
            row += [mean_std(summaries[domain][variant].get(m), 4) for m in DOMAIN_SPECS[domain].shown]
        row.append(" / ".join(_k(results["setups"][d]["parameters"][variant]) for d in domains))
        if speed:
            measured = speed.get(variant, {})
            if "skipped" in measured:
                row += [f"skipped: {measured['skipped']}", ""]
            else:
                note = f" ({measured['peak_note']})" if measured.get("peak_note") else ""  # not this step's alone
                row += [f"{measured['peak_mib']:.0f}{note}", f"{measured['tokens_per_second']:.0f}"]
        rows.append(row)
    directions = {d: "higher" if DOMAIN_SPECS[d].higher_is_better else "lower" for d in domains}
    higher = ", ".join(f"{d} {METRIC_LABELS[DOMAIN_SPECS[d].primary]} {directions[d]} is better" for d in domains)
    report.table(columns, rows, caption=f"**Table I.** Test metrics, mean ± sample std over seeds ({higher}). "
                 + (f"Memory and throughput: one training step (forward, backward, AdamW) on one sequence, the "
                    f"{domains[0]} models, {next(iter(speed.values()), {}).get('threads', '?')} thread(s), each model "
                    f"in its own process." if speed else ""))  # fmt: skip


def _parameter_table(report: ExperimentReport, results: dict, tolerance: float) -> None:
    domains = _domains(results)
    columns = ["model", *(f"{d}: d_model / parameters / vs MT" for d in domains)]
    rows = []
    for variant, label in results["rows"].items():
        row = [label]
        for domain in domains:
            setup = results["setups"][domain]
            count, target = setup["parameters"][variant], setup["parameters"][MARKOVIAN]
            row.append(f"{setup['d_model'][variant]} / {count:,} / {100 * (count / target - 1):+.1f}%")
        rows.append(row)
    report.table(columns, rows, caption=f"Widths and parameter counts. Baselines are matched to the Markovian "
                 f"Transformer (MT) within ±{100 * tolerance:.0f}% where a width step allows; ablations and ratios "
                 "keep its width, so their counts move with what they remove.")  # fmt: skip
    unmatched = [f"{domain}/{variant}" for domain in domains for variant in results["rows"] if variant in MODELS
                 and abs(results["setups"][domain]["parameters"][variant]
                         / results["setups"][domain]["parameters"][MARKOVIAN] - 1) > tolerance]  # fmt: skip
    if unmatched:
        report.text(f"**Not matched within ±{100 * tolerance:.0f}%:** {', '.join(unmatched)}.")


def _regime_table(report: ExperimentReport, results: dict) -> None:
    finance = results["summaries"].get("finance")
    if not finance:
        return

    rows = [[results["rows"][v], *(mean_std(finance[v].get(f"f1_{r}"), 4) for r in REGIMES)]
            for v in results["rows"] if v in finance]  # fmt: skip
    report.table(["model", *(f"F1, {r} volatility" for r in REGIMES)], rows,
                 caption="Finance: test macro-F1 within each volatility regime (terciles of the training period's "
                 "20-day volatility).")  # fmt: skip


def _ablation_table(report: ExperimentReport, results: dict) -> None:
    ablations = [v for v in results["rows"] if v.startswith("ablation-")]
    if not ablations:
        return
    domains, summaries = _domains(results), results["summaries"]
    columns = ["Markovian Transformer", *(f"{d}: {METRIC_LABELS[DOMAIN_SPECS[d].primary]} (Δ vs full)"
                                          for d in domains), "parameters"]  # fmt: skip
    rows = []
    for variant in (MARKOVIAN, *ablations):
        row = ["full model" if variant == MARKOVIAN else results["rows"][variant]]
        for domain in domains:
            primary = DOMAIN_SPECS[domain].primary
            entry, full = summaries[domain][variant][primary], summaries[domain][MARKOVIAN][primary]
            delta = "" if variant == MARKOVIAN else f" ({entry['mean'] - full['mean']:+.4f})"
            row.append(mean_std(entry, 4) + delta)
        row.append(" / ".join(_k(results["setups"][d]["parameters"][variant]) for d in domains))
        rows.append(row)
    report.table(columns, rows, caption="**Table II.** Ablations of the Markovian Transformer (test, mean ± std "
                 "over seeds).")  # fmt: skip


def _ratio_table(report: ExperimentReport, results: dict) -> None:
    rows = []
    for domain in _domains(results):
        primary, summaries = DOMAIN_SPECS[domain].primary, results["summaries"][domain]
        hybrids = sorted((v for v in summaries if v == MARKOVIAN or v.startswith("ratio=")), key=ratio_of)
        if len(hybrids) < 2:
            continue
        for variant in hybrids:
            chosen = "**chosen**" if variant == results["chosen_ratio"][domain] else ""
            rows.append([domain, f"{ratio_of(variant):g}", mean_std(summaries[variant][f"val_{primary}"], 4),
                         mean_std(summaries[variant][primary], 4), chosen])  # fmt: skip
    if rows:
        report.table(["domain", "Markov head ratio", "validation (primary)", "test (primary)", ""], rows,
                     caption="**Table III.** Hybrid ratio (share of Markov heads) per domain: chosen on the "
                     "validation mean over seeds, reported on test.")  # fmt: skip


def _verdicts(report: ExperimentReport, results: dict) -> None:
    lines = []
    for domain in _domains(results):
        spec, summaries = DOMAIN_SPECS[domain], results["summaries"][domain]
        models = [v for v in results["rows"] if v in MODELS]
        if MARKOVIAN not in models or len(models) < 2:
            continue
        sign = -1 if spec.higher_is_better else 1
        score = {v: sign * summaries[v][spec.primary]["mean"] for v in models}  # lower is better
        best = min(models, key=score.get)
        rank = 1 + sum(score[v] < score[MARKOVIAN] for v in models)
        tied = [results["rows"][v] for v in models if v != MARKOVIAN and score[v] == score[MARKOVIAN]]
        lines.append(f"- {domain}: the Markovian Transformer ranks {rank} of {len(models)} on test "
                     f"{METRIC_LABELS[spec.primary]} ({summaries[MARKOVIAN][spec.primary]['mean']:.4f}"
                     f"{', tied with ' + ', '.join(tied) if tied else ''}); best {results['rows'][best]} "
                     f"({summaries[best][spec.primary]['mean']:.4f}).")  # fmt: skip
    if lines:
        report.text("Where the Markovian Transformer stands:\n\n" + "\n".join(lines))


def _figure(report: ExperimentReport, results: dict) -> None:
    # deferred: plots import matplotlib
    from markovformer.plots.saving import new_figure, save_figure

    domains = _domains(results)
    models = [v for v in results["rows"] if v in MODELS]
    figure = new_figure(4.2 * len(domains), 3.8)
    axes = figure.subplots(1, len(domains), squeeze=False)[0]
    for ax, domain in zip(axes, domains, strict=True):
        primary, summaries = DOMAIN_SPECS[domain].primary, results["summaries"][domain]
        means = [summaries[v][primary]["mean"] for v in models]
        errors = [summaries[v][primary]["std"] or 0.0 for v in models]
        colours = ["C3" if v == MARKOVIAN else "C0" for v in models]
        ax.bar(range(len(models)), means, yerr=errors, color=colours, capsize=3)
        ax.set_xticks(range(len(models)), [results["rows"][v] for v in models], rotation=60, ha="right", fontsize=7)
        finite = [m for m in means if math.isfinite(m)]
        if finite:
            ax.set_ylim(max(0.0, min(finite) - 0.1), max(finite) + 0.05)
        ax.set_title(f"{domain}: test {METRIC_LABELS[primary]}", fontsize=10)
    path = save_figure(figure, report.out_dir / "table1.png")
    report.figure(path, "Test primary metric per model and domain (bars: mean over seeds, whiskers: std; red: the "
                  "Markovian Transformer)")  # fmt: skip


def write_report(report: ExperimentReport, settings, quick: bool) -> None:
    """Every section of the report, in order, from ``report.results``."""
    results = report.results
    domains = _domains(results)
    setups = results["setups"]
    data = "; ".join(f"{d}: `{setups[d]['dataset']}` ({DOMAIN_SPECS[d].task})" for d in domains)
    budget = (
        f"{settings.steps} steps, batch {settings.batch_size} ({settings.ctc_steps} steps, batch "
        f"{settings.ctc_batch_size} for CTC), AdamW lr "
        f"{settings.lr:g}, cosine decay, seeds {results['seeds']}, {thread_counts(results['cells'])} intra-op thread(s)"
    )
    report.text(f"Data: {data} (from `{settings.data_dir}`). Every model: {settings.n_layers} layers, "
                f"{settings.n_heads} heads, SwiGLU FFN, non-causal, mean pooling; the same budget per domain: {budget}."
                + (" **Quick mode**: few models and steps — a smoke test of the pipeline, not a result."
                   if quick else ""))  # fmt: skip
    if results["skipped"]:
        report.text("Skipped (data not prepared):\n\n" + "\n".join(f"- {m}" for m in results["skipped"].values()))
    _table_one(report, results, settings)
    _verdicts(report, results)
    _parameter_table(report, results, settings.tolerance)
    _regime_table(report, results)
    _ablation_table(report, results)
    _ratio_table(report, results)
    _figure(report, results)

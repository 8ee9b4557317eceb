"""The ``mixers`` report: accuracy tables and figures per task, which kinds solve which task at which width, where the
Markov gates put their mass, and the comparison with Zoology's and Mamba's published findings, cell by cell."""

from __future__ import annotations

from markovformer.data.synthetic.tasks import chance_accuracy
from markovformer.experiments import mixers_models as zoo
from markovformer.experiments.report import mean_std

ICL_SOLVED_GAP = 0.02  # nats above the Bayes add-1 loss that count as solving icl_markov


def _points(points: list[dict], **where) -> list[dict]:
    return [p for p in points if all(p[key] == value for key, value in where.items())]


def solves(point: dict, settings) -> bool:
    """Mean test accuracy >= ``settings.solved``; icl_markov: mean test loss within ``ICL_SOLVED_GAP`` of add-1."""
    if zoo.TASK_SPECS[point["task"]].bayes_reference:
        return point["test_loss"]["mean"] <= point["bayes_add1"]["loss"]["mean"] + ICL_SOLVED_GAP
    return point["test_accuracy"]["mean"] >= settings.solved


def chance_of(task: str, settings) -> float:
    return chance_accuracy(task, getattr(settings, zoo.TASK_SPECS[task].vocab_setting))


def _coverage(point: dict, settings, seeds: int) -> str:
    """`` (2/4 lrs, 1/2 seeds)`` for a point of a report from the stored cells that lacks some; else empty."""
    rates = len(point["val_by_lr"]) + len(point.get("diverged_by_lr", {}))  # a diverged rate was tried
    runs = point["test_accuracy"]["n"]
    parts = [f"{rates}/{len(settings.lrs)} lrs"] if rates < len(settings.lrs) else []
    parts += [f"{runs}/{seeds} seeds"] if runs < seeds else []
    return f" ({', '.join(parts)})" if parts else ""


def _partial(points: list[dict], settings, seeds: int, task: str, kinds, length: int, width: int | None = None) -> str:
    """`` (from a partial search: h3 (2/4 lrs))`` when a point a verdict reads lacks learning rates or seeds (a report
    written from the stored cells); else empty. ``width`` None: every width of the grid."""
    where = {"task": task, "length": length, **({} if width is None else {"width": width})}
    marks = [f"{kind} at d={point['width']}{_coverage(point, settings, seeds)}" for kind in kinds
             for point in _points(points, kind=kind, **where) if _coverage(point, settings, seeds)]  # fmt: skip
    return f" (from a partial search: {', '.join(marks)})" if marks else ""


def _diverged(report, **where) -> list[dict]:
    """The diverged cells (``mixers.run_grid_point``) matching ``where``."""
    return [cell for cell in report.results.get("diverged", ()) if all(cell[k] == v for k, v in where.items())]


def accuracy_tables(report, points: list[dict], settings) -> None:
    seeds = len(report.results["seeds"])
    grid = [(length, width) for length in settings.lengths for width in settings.widths]
    for task in settings.tasks:
        rows = []
        for kind in settings.kinds:
            row = [zoo.KINDS[kind][0]]
            for length, width in grid:
                found = _points(points, task=task, kind=kind, length=length, width=width)
                if found:
                    row.append(mean_std(found[0]["test_accuracy"]) + (" ✓" if solves(found[0], settings) else "")
                               + _coverage(found[0], settings, seeds))  # fmt: skip
                else:
                    where = {"task": task, "kind": kind, "length": length, "width": width}
                    row.append("diverged" if _diverged(report, **where) else "—")
            rows.append(row)
        extra = ""
        if zoo.TASK_SPECS[task].bayes_reference:
            add1 = [_points(points, task=task, length=length, width=width) for length, width in grid]
            rows.append(["Bayes add-1 (reference)", *(mean_std(found[0]["bayes_add1"]["accuracy"]) if found else "—"
                                                       for found in add1)])  # fmt: skip
            extra = f" ✓: test loss within {ICL_SOLVED_GAP} nats of the Bayes add-1 predictor's."
        else:
            extra = f" ✓: mean test accuracy ≥ {settings.solved}."
        caption = (f"**{task}**: test accuracy on the scored positions, mean ± std over seeds, at the learning rate "
                   f"chosen on validation; chance {chance_of(task, settings):.3f}.{extra}")  # fmt: skip
        if report.stored_only:
            caption += " Written from the stored cells only: (k/N lrs) marks a point chosen among the k lrs stored."
        report.table(["kind", *(f"T={length}, d={width}" for length, width in grid)], rows, caption=caption)


def rate_table(report, points: list[dict], settings) -> None:
    """Test accuracy at every learning rate (first seed), one column per (length, width, lr): the grid cell by cell,
    "—" where a cell was not run; the lr chosen on validation in bold."""
    if len(settings.lrs) < 2:
        return
    columns = [(length, width, lr) for length in settings.lengths for width in settings.widths for lr in settings.lrs]
    for task in settings.tasks:
        rows = []
        for kind in settings.kinds:
            found = {(p["length"], p["width"]): p for p in _points(points, task=task, kind=kind)}
            cells = []
            for length, width, lr in columns:
                point = found.get((length, width))
                value = point["test_by_lr"].get(f"{lr:g}") if point else None
                where = {"task": task, "kind": kind, "length": length, "width": width, "lr": lr}
                if value is not None:
                    text = f"{value:.3f}"
                else:
                    text = "diverged" if _diverged(report, **where, seed=report.results["seeds"][0]) else "—"
                cells.append(f"**{text}**" if value is not None and point["lr"] == lr else text)
            if any(cell != "—" for cell in cells):
                rows.append([zoo.KINDS[kind][0], *cells])
        if rows:
            report.table(["kind", *(f"T={length}, d={width}, lr {lr:.2g}" for length, width, lr in columns)], rows,
                         caption=f"**{task}** test accuracy at each learning rate (first seed; bold: the rate chosen "
                                 "on validation; —: not run; diverged: its training loss turned "
                                 "non-finite).")  # fmt: skip


def diverged_list(report) -> None:
    """Every cell whose training loss turned non-finite: no accuracy, never chosen, listed with where it broke."""
    cells = report.results.get("diverged", ())
    if cells:
        report.text("Cells that diverged (no accuracy; a rate the search tried, never the one chosen):\n\n"
                    + "\n".join(f"- {cell['why']}" for cell in cells))  # fmt: skip


def recall_distance_table(report, points: list[dict], settings) -> None:
    """MQAR test accuracy by how far back each query's value stands (``mixers_models.recall_by_distance``), summed
    over seeds; cells trained before it was kept show "—"."""
    found = [p for p in _points(points, task="mqar") if any(p.get("test_by_distance") or ())]
    if not found:
        return
    spans = [span for p in found for run in p["test_by_distance"] if run for span in run]
    labels = list(dict.fromkeys(span["distances"] for span in spans))  # a shorter T has fewer spans
    rows = []
    for point in _points(points, task="mqar"):
        totals = {label: [0, 0] for label in labels}
        for span in (span for run in point.get("test_by_distance") or () if run for span in run):
            totals[span["distances"]][0] += span["correct"]
            totals[span["distances"]][1] += span["count"]
        cells = [f"{correct / count:.3f}" if count else "—" for correct, count in totals.values()]
        rows.append([zoo.KINDS[point["kind"]][0], point["length"], point["width"], *cells])
    first = next(run for run in found[0]["test_by_distance"] if run)
    total = sum(span["count"] for span in first)
    shares = ", ".join(f"{span['distances']}: {span['count'] / total:.1%}" for span in first)
    report.table(["kind", "T", "d", *(f"{label} back" for label in labels)], rows,
                 caption="**mqar** test accuracy by how far back each query's value stands (the token after its key's "
                         f"first occurrence); local kinds see keys t − {settings.window}..t (W = {settings.window}). "
                         f"The test queries per span (T = {found[0]['length']}, first seed): {shares}.")  # fmt: skip


def parameter_table(report, points: list[dict], settings) -> None:
    rows = []
    for task in settings.tasks:
        for length in settings.lengths:
            for width in settings.widths:
                found = _points(points, task=task, length=length, width=width)
                if not found:
                    continue
                ratios = [p["ratio"] for p in found]
                outside = [f"{p['kind']} ({p['ratio']:.2f})" for p in found if abs(p["ratio"] - 1) > settings.tolerance]
                rows.append([task, length, width, _points(found, kind=zoo.REFERENCE_KIND)[0]["parameters"]
                             if _points(found, kind=zoo.REFERENCE_KIND) else "—", f"{min(ratios):.3f}",
                             f"{max(ratios):.3f}", ", ".join(outside) or "none"])  # fmt: skip
    report.table(["task", "T", "d (softmax)", "softmax parameters", "min ratio", "max ratio",
                  f"outside ±{settings.tolerance:g}"], rows,
                 caption="Parameter matching: each kind's count over the global softmax model's at the grid width "
                         "(each kind's own d_model is in results.json).")  # fmt: skip


def solved_summary(report, points: list[dict], settings) -> None:
    rows, seeds = [], len(report.results["seeds"])
    for task in settings.tasks:
        for kind in settings.kinds:
            cells = []
            for length in settings.lengths:
                found = _points(points, task=task, kind=kind, length=length)
                widths = [p["width"] for p in found if solves(p, settings)]
                cell = f"d={min(widths)}" if widths else "no" if found else "—"
                cells.append(cell + _partial(points, settings, seeds, task, [kind], length))
            rows.append([task, zoo.KINDS[kind][0], *cells])
    report.table(["task", "kind", *(f"smallest width solving, T={length}" for length in settings.lengths)], rows,
                 caption="Which kinds solve which task at which width (grid widths; 'no': none of them; '—': no cell "
                         "stored).")  # fmt: skip


def gate_tables(report, points: list[dict], settings) -> None:
    rows = []
    for task in settings.tasks:
        for kind in (k for k in settings.kinds if k in zoo.MARKOV_KINDS):
            for point in _points(points, task=task, kind=kind, length=max(settings.lengths),
                                 width=max(settings.widths)):  # fmt: skip
                layers = point["gates"][0] or []
                for index, layer in enumerate(layers):
                    gate = layer["gate"]
                    lags = sorted(range(settings.max_order), key=lambda k: -gate[k])[:3]
                    null = gate[settings.max_order] if len(gate) > settings.max_order else 0.0
                    effective = layer["effective_bias"]
                    top = max(range(settings.max_order), key=lambda k: effective[k])
                    rows.append([task, zoo.KINDS[kind][0], index,
                                 ", ".join(f"{k + 1}: {gate[k]:.2f}" for k in lags), f"{null:.2f}",
                                 f"{top + 1} ({effective[top]:.2f})"])  # fmt: skip
    if rows:
        report.table(["task", "kind", "layer", "largest gate mass (lag: mass)", "null slot", "largest effective bias "
                      "(lag, logits)"], rows,
                     caption=f"Where the Markov order gates put their mass at the positions that answer a query "
                             f"(T={max(settings.lengths)}, d={max(settings.widths)}, first seed), averaged over "
                             "heads. Effective bias = gate × transition strength, the mean logit added at that lag. "
                             "Attention lag k from the answering position is the token k places back.")  # fmt: skip


def figures(report, points: list[dict], settings) -> None:
    # deferred: plots import matplotlib
    from markovformer.plots.experiments import Panel, plot_panels

    for task in settings.tasks:
        panels = []
        for length in settings.lengths:
            curves = {}
            for kind in settings.kinds:
                found = sorted(_points(points, task=task, kind=kind, length=length), key=lambda p: p["width"])
                curves[zoo.KINDS[kind][0]] = ([p["width"] for p in found],
                                              [p["test_accuracy"]["mean"] for p in found])  # fmt: skip
            references = {"chance": chance_of(task, settings)}
            if zoo.TASK_SPECS[task].bayes_reference and (found := _points(points, task=task, length=length)):
                references["Bayes add-1"] = found[0]["bayes_add1"]["accuracy"]["mean"]
            panels.append(Panel(f"{task}, T = {length}", curves, references))
        path = plot_panels(panels, report.out_dir / f"accuracy_{task}.png", "d_model (softmax reference)",
                           "test accuracy")  # fmt: skip
        report.figure(path, f"{task}: test accuracy against model width, one panel per sequence length")


def _accuracy(points, task, kind, length, width) -> float | None:
    found = _points(points, task=task, kind=kind, length=length, width=width)
    return found[0]["test_accuracy"]["mean"] if found else None


def published_comparison(report, points: list[dict], settings, quick: bool) -> None:
    """Zoology (MQAR) and Mamba (selective copying), cell by cell."""
    lines = ["## Against the published picture", ""]
    seeds = len(report.results["seeds"])
    if "mqar" in settings.tasks:
        lines += _zoology_lines(points, settings, seeds)
    if "selective_copy" in settings.tasks:
        lines += _mamba_lines(points, settings, seeds)
    if quick:
        lines.append("These are `--quick` numbers: a few hundred steps per model, far below the published budgets "
                     "(Zoology trains each model for tens of thousands of steps), so 'not reproduced' here is a "
                     "statement about the budget unless the slow learning test (global softmax reaches ≥ 0.99 on "
                     "MQAR T = 64 through the engine) says otherwise.")  # fmt: skip
    report.text("\n".join(lines))


def _zoology_lines(points: list[dict], settings, seeds: int) -> list[str]:
    """Zoology's three MQAR claims: attention solves it at d_model = 64; gated convolutions need far larger widths;
    the gap grows with the number of pairs."""
    if zoo.REFERENCE_KIND not in settings.kinds:
        return ["**Zoology's MQAR claims** compare each kind with global softmax, which this run does not train: not "
                "compared here (add `softmax` to `kinds`; finished cells in the output folder are reused).", ""]
    lines = []
    width = 64 if 64 in settings.widths else max(settings.widths)
    lines.append(f"**Zoology: attention solves MQAR at d_model = 64** (here d = {width}, ≥ {settings.solved}):")
    for length in settings.lengths:
        value = _accuracy(points, "mqar", "softmax", length, width)
        if value is not None:
            verdict = "reproduced" if value >= settings.solved else "not reproduced"
            verdict += _partial(points, settings, seeds, "mqar", ["softmax"], length, width)
            lines.append(f"- T = {length} ({mqar_pairs_text(length, settings)}): softmax {value:.3f}: {verdict}.")
    lines.append("")
    lines.append("**Zoology: gated convolutions need far larger widths** (test accuracy at each width, softmax "
                 "first):")  # fmt: skip
    for length in settings.lengths:
        for grid_width in settings.widths:
            values = {kind: _accuracy(points, "mqar", kind, length, grid_width)
                      for kind in ("softmax", *zoo.GATED_CONVOLUTIONS) if kind in settings.kinds}  # fmt: skip
            values = {k: v for k, v in values.items() if v is not None}
            if "softmax" not in values:
                continue
            text = ", ".join(f"{k} {v:.3f}" for k, v in values.items())
            verdict = gated_convolution_verdict(values, settings.solved)
            verdict += _partial(points, settings, seeds, "mqar", values, length, grid_width)
            lines.append(f"- T = {length}, d = {grid_width}: {text}; {verdict}.")
    if len(settings.lengths) > 1:
        lines += _gap_growth_lines(points, settings, width, seeds)
    lines.append("")
    return lines


def _gap_growth_lines(points: list[dict], settings, width: int, seeds: int) -> list[str]:
    """Softmax minus the best gated convolution on MQAR at ``width``, per length, and whether it grows."""
    lines = []
    lines.append("")
    lines.append("**Zoology: the gap grows with the number of pairs** (softmax minus the best gated "
                 f"convolution, d = {width}):")  # fmt: skip
    gaps = []
    for length in settings.lengths:
        soft = _accuracy(points, "mqar", "softmax", length, width)
        others = [_accuracy(points, "mqar", k, length, width) for k in zoo.GATED_CONVOLUTIONS
                  if k in settings.kinds]  # fmt: skip
        others = [v for v in others if v is not None]
        if soft is not None and others:
            gaps.append((length, soft - max(others)))
    kinds = ["softmax", *zoo.GATED_CONVOLUTIONS]
    lines += [f"- T = {length} ({mqar_pairs_text(length, settings)}): gap {gap:+.3f}"
              f"{_partial(points, settings, seeds, 'mqar', kinds, length, width)}" for length, gap in gaps]  # fmt: skip
    if len(gaps) > 1:
        grows = all(b[1] > a[1] for a, b in zip(gaps, gaps[1:], strict=False))
        lines.append(f"- {'reproduced' if grows else 'not reproduced'}: the gap "
                     f"{'grows' if grows else 'does not grow'} with the pairs.")  # fmt: skip
    return lines


def _mamba_lines(points: list[dict], settings, seeds: int) -> list[str]:
    """Mamba's claim: selective (input-dependent) recurrences solve selective copying, LTI ones do not."""
    if not set(settings.kinds) & {*zoo.SELECTIVE, *zoo.LTI}:
        return []
    lines = []
    lines.append("**Mamba: selective (input-dependent) recurrences solve selective copying, LTI ones do not** "
                 f"(≥ {settings.solved} counts as solved):")  # fmt: skip
    for length in settings.lengths:
        for grid_width in settings.widths:
            parts = []
            for group, kinds in (("selective", zoo.SELECTIVE), ("LTI", zoo.LTI)):
                for kind in kinds:
                    value = _accuracy(points, "selective_copy", kind, length, grid_width)
                    if value is not None:
                        parts.append((group, kind, value))
            if not parts:
                continue
            text = ", ".join(f"{kind} ({group}) {value:.3f}" for group, kind, value in parts)
            verdict = selective_copy_verdict([(g, v) for g, _, v in parts], settings.solved)
            verdict += _partial(points, settings, seeds, "selective_copy", [k for _, k, _ in parts], length, grid_width)
            lines.append(f"- T = {length}, d = {grid_width}: {text}: {verdict}.")
    lines.append("")
    return lines


def gated_convolution_verdict(values: dict[str, float], solved: float) -> str:
    """Zoology's width claim on one cell from {kind: accuracy}, softmax among them."""
    behind = [kind for kind, value in values.items() if kind != "softmax" and value < values["softmax"] - 0.05]
    if len(values) == 1:
        return "not tested: no gated convolution in this run (add h3, hyena, rwkv, retnet or s4d to kinds)"
    if values["softmax"] < solved:
        return (f"not testable here: softmax itself does not solve it at this budget (trailing it by > 0.05: "
                f"{', '.join(behind) or 'none'})")  # fmt: skip
    if len(behind) == len(values) - 1:
        return "reproduced: softmax solves it and every gated convolution trails it by > 0.05"
    return f"not reproduced: only {', '.join(behind) or 'none'} trail softmax by > 0.05"


def selective_copy_verdict(results: list[tuple[str, float]], solved: float) -> str:
    """Mamba's claim on one cell from (group, accuracy) pairs, group "selective" or "LTI"."""
    selective = [v >= solved for g, v in results if g == "selective"]
    lti = [v >= solved for g, v in results if g == "LTI"]
    if any(lti):
        return "not reproduced (an LTI kind solves it)"
    if not selective or not lti:
        return f"not tested: no {'selective' if not selective else 'LTI'} kind in this run"
    if all(selective):
        return "reproduced"
    if any(selective):
        return "partly reproduced (LTI kinds fail; only some selective kinds solve it)"
    return "not separated (no kind of either group solves it at this budget)"


def mqar_pairs_text(length: int, settings) -> str:
    return f"{zoo.mqar_pairs(length, settings)} pairs"


def write_report(report, settings, seeds: tuple[int, ...], quick: bool) -> None:
    points = report.results["points"]
    minutes = report.results["wall_seconds"] / 60
    trained = sum(p["seconds"] for p in points) / 60
    report.text(
        f"Every kind is a Markovian Transformer configuration ({settings.n_layers} layers, {settings.n_heads} heads, "
        f"SwiGLU, causal) differing only in its sequence mixer; widths are matched to the global softmax model's "
        f"parameter count at the grid's d_model. Markov kinds use K = {settings.max_order} lags; local kinds see "
        f"keys t − {settings.window}..t (W = {settings.window}, the query's own key included). Each model trains "
        f"{settings.steps} steps of {settings.batch_size} fresh "
        f"sequences (AdamW, {settings.warmup_steps} warm-up steps, then constant); the learning rate is chosen among "
        f"{list(settings.lrs)} on the first seed's validation accuracy; seeds {list(seeds)}. MQAR: vocabulary "
        f"{settings.mqar_vocab}, length/{settings.mqar_pairs_per_length} pairs; induction: vocabulary "
        f"{settings.induction_vocab}; selective copying: {settings.copy_tokens} tokens, vocabulary "
        f"{settings.copy_vocab}; in-context chains: order {settings.icl_order} over {settings.icl_symbols} symbols. "
        f"Linformer is not run: it is non-causal. Wall time {minutes:.1f} min, CPU time "
        f"{report.results['cpu_seconds'] / 60:.1f} min (this run's cells only; {trained:.1f} min training wall time "
        f"over all cells, cached ones included), {report.results['threads']} thread(s)."
    )
    accuracy_tables(report, points, settings)
    rate_table(report, points, settings)
    diverged_list(report)
    figures(report, points, settings)
    solved_summary(report, points, settings)
    gate_tables(report, points, settings)
    recall_distance_table(report, points, settings)
    parameter_table(report, points, settings)
    published_comparison(report, points, settings, quick)


__all__ = [
    "ICL_SOLVED_GAP",
    "chance_of",
    "gated_convolution_verdict",
    "recall_distance_table",
    "selective_copy_verdict",
    "solves",
    "write_report",
]

"""What the ``vmt`` experiment's report shows of its cells: the models compared, part 1's bound-gap figure, and the
tables, sentences and loss panels of parts 2 and 3."""

from __future__ import annotations

from typing import TYPE_CHECKING

from markovformer.experiments.report import ExperimentReport

if TYPE_CHECKING:  # for annotations only: experiments.vmt imports this module, and plots import matplotlib
    from markovformer.experiments.vmt import VMTSettings
    from markovformer.plots.experiments import Panel

MODELS = ("vmt_carry", "vmt_no_carry", "transformer")
LABELS = {"vmt_carry": "VMT, carry", "vmt_no_carry": "VMT, no carry", "transformer": "Transformer (window)"}


def linear_gaussian_figure(report: ExperimentReport, lg: dict, settings: VMTSettings) -> None:
    """Part 1's figure: per model, the gap between the exact log-likelihood and each bound against the step."""
    # deferred: plots import matplotlib
    from markovformer.plots.experiments import Panel, plot_panels

    panels = []
    for kind, record in lg["models"].items():
        kept = [i for i, step in enumerate(record["steps"]) if step > 0] or list(range(len(record["steps"])))
        steps = [record["steps"][i] for i in kept]
        curves = {"ELBO": (steps, [lg["exact"] - record["evaluations"][i]["elbo"] for i in kept])}
        for k in settings.lg_iw_samples:
            curves[f"IW K={k}"] = (steps, [lg["exact"] - record["evaluations"][i][f"iw_{k}"] for i in kept])
        panels.append(Panel(f"VMT, {'learned' if kind == 'learned' else 'true'} P", curves, {"exact": 0.0}))
    figure = plot_panels(panels, report.out_dir / "linear_gaussian.png", "training step", "exact − bound (nats/step)")
    report.figure(figure, "Gap between the exact held-out log-likelihood and each bound during training (from the "
                  "first evaluation after step 0)")  # fmt: skip


def sequence_table(cells: list[dict], unit: str, iw_samples: int, scale: float = 1.0) -> tuple[list[str], list[list]]:
    restart = "restart" in cells[0]
    columns = ["window", "model", "parameters", f"loss ({unit})", *([f"IW K={iw_samples} ({unit})"] if iw_samples
               else []), "KL/token (nats)", "train KL/token", *(["restart floor", "exact floor"] if restart else []),
               "train s"]  # fmt: skip
    rows = []
    for cell in cells:
        vmt = cell["model"] != "transformer"
        iw = [cell["iw_loss"] * scale if vmt else ""] if iw_samples else []
        rows.append([cell["window"], LABELS[cell["model"]], cell["parameters"], cell["loss"] * scale, *iw,
                     cell["kl"] if vmt else "", cell["train_kl"] if vmt else "",
                     *([cell["restart"], cell["exact"]] if restart else []), round(cell["seconds"])])  # fmt: skip
    return columns, rows


def comparison(cells: list[dict], unit: str, scale: float = 1.0) -> str:
    """One line per window: what the carry gains (no carry − carry) and where the VMT stands against the
    Transformer (VMT with carry − Transformer), both in ``unit``; positive means the first one is worse."""
    parts = []
    for window in sorted({cell["window"] for cell in cells}):
        loss = {cell["model"]: cell["loss"] * scale for cell in cells if cell["window"] == window}
        parts.append(f"W={window}: carry gains {loss['vmt_no_carry'] - loss['vmt_carry']:+.4f}, VMT with carry − "
                     f"Transformer {loss['vmt_carry'] - loss['transformer']:+.4f}")  # fmt: skip
    return f"Differences in {unit} (−ELBO for the VMT): " + "; ".join(parts) + "."


def loss_panel(cells: list[dict], title: str, references: dict, scale: float = 1.0, restart: bool = False) -> Panel:
    # deferred: plots import matplotlib
    from markovformer.plots.experiments import Panel

    curves = {}
    for kind in MODELS:
        mine = sorted((c for c in cells if c["model"] == kind), key=lambda c: c["window"])
        curves[LABELS[kind]] = ([c["window"] for c in mine], [c["loss"] * scale for c in mine])
    if restart:
        mine = sorted((c for c in cells if c["model"] == MODELS[0]), key=lambda c: c["window"])
        curves["restart floor"] = ([c["window"] for c in mine], [c["restart"] for c in mine])
    return Panel(title, curves, references)

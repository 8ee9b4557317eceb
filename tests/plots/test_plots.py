"""The inspection figures and the HTML report: valid PNGs whose pixels follow the data, atomic writes that leave no
temporary files, Lightning CSV parsing with blanks, escaped and relative HTML, and no global matplotlib state."""

from __future__ import annotations

import csv
import math
import struct
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch
from matplotlib import colormaps
from matplotlib.figure import Figure

from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.plots import (
    metric_family,
    plot_attention_maps,
    plot_order_gates,
    plot_training_curves,
    plot_transition_strengths,
    read_metric_series,
    write_html_report,
)

LAYERS, HEADS, K, T, BATCH = 2, 3, 4, 12, 2
TOKENS = [f"t{i}" for i in range(T)]


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, after checking the PNG signature."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _valid_png(path: Path) -> tuple[int, int]:
    width, height = _png_size(path)
    assert 200 <= width <= 6000 and 200 <= height <= 6000, (width, height)
    return width, height


def _pixels(path: Path) -> np.ndarray:
    return matplotlib.image.imread(path)


def _only(folder: Path, *names: str) -> None:
    """The folder holds exactly these files: no temporary leftovers."""
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)


def _strengths(seed: int, future: bool = False) -> list[dict[str, torch.Tensor | None]]:
    g = torch.Generator().manual_seed(seed)
    return [
        {"past": torch.rand(HEADS, K, generator=g) * 3, "future": torch.rand(HEADS, K, generator=g) if future else None}
        for _ in range(LAYERS)
    ]


def _gates(seed: int) -> list[dict[str, torch.Tensor] | None]:
    """Layer 0 and 2 gated (past), layer 1 a non-Markov layer (None): probabilities over K lags + null."""
    g = torch.Generator().manual_seed(seed)
    gated = [{"past": torch.randn(BATCH, HEADS, T, K + 1, generator=g).mul(3).softmax(-1)} for _ in range(2)]
    return [gated[0], None, gated[1]]


def _attentions(seed: int) -> list[torch.Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = torch.randn(LAYERS, BATCH, HEADS, T, T, generator=g).masked_fill(~causal, -math.inf)
    return [*scores.softmax(-1).unbind(0), None]  # the last layer: random features, no T x T map


# --------------------------------------------------------------------------- transition strengths


def test_strength_pixels_follow_the_data(tmp_path):
    first = plot_transition_strengths(_strengths(0), tmp_path / "a.png")
    again = plot_transition_strengths(_strengths(0), tmp_path / "b.png")
    other = plot_transition_strengths(_strengths(1), tmp_path / "c.png")
    marked = plot_transition_strengths(_strengths(0), tmp_path / "d.png", true_lags=(1, 3))
    assert first == tmp_path / "a.png"
    _valid_png(first)
    np.testing.assert_array_equal(_pixels(first), _pixels(again))
    assert _pixels(first).shape == _pixels(other).shape and not np.array_equal(_pixels(first), _pixels(other))
    assert not np.array_equal(_pixels(first), _pixels(marked))
    # Positive strengths use 0..max on viridis: the largest one's square is a block of the map's top colour.
    top = np.asarray(colormaps["viridis"](1.0)[:3])
    assert (np.abs(_pixels(first)[..., :3] - top).max(-1) < 1.5 / 255).sum() > 500
    _only(tmp_path, "a.png", "b.png", "c.png", "d.png")


def test_strengths_add_a_future_column_and_check_true_lags(tmp_path):
    causal_width, _ = _valid_png(plot_transition_strengths(_strengths(0), tmp_path / "causal.png"))
    both_width, _ = _valid_png(plot_transition_strengths(_strengths(0, future=True), tmp_path / "both.png"))
    assert both_width > causal_width * 1.4
    with pytest.raises(ValueError, match="true_lags"):
        plot_transition_strengths(_strengths(0), tmp_path / "bad.png", true_lags=(0,))
    with pytest.raises(ValueError, match="no Markov layer"):
        plot_transition_strengths([], tmp_path / "none.png")


# --------------------------------------------------------------------------- order gates


def _with_example_one_redrawn(gates: list[dict[str, torch.Tensor] | None]) -> list[dict[str, torch.Tensor] | None]:
    redrawn = _gates(1)
    return [
        None if layer is None else {d: torch.stack([a[0], redrawn[i][d][1]]) for d, a in layer.items()}
        for i, layer in enumerate(gates)
    ]


def test_gate_pixels_follow_the_chosen_example(tmp_path):
    gates, changed = _gates(0), _with_example_one_redrawn(_gates(0))  # same example 0, different example 1
    first = plot_order_gates(gates, TOKENS, tmp_path / "a.png", example=0)
    again = plot_order_gates(changed, TOKENS, tmp_path / "b.png", example=0)
    second = plot_order_gates(gates, TOKENS, tmp_path / "c.png", example=1)
    second_changed = plot_order_gates(changed, TOKENS, tmp_path / "d.png", example=1)
    _valid_png(first)
    np.testing.assert_array_equal(_pixels(first), _pixels(again))
    assert not np.array_equal(_pixels(second), _pixels(second_changed))
    _only(tmp_path, "a.png", "b.png", "c.png", "d.png")


def test_gates_validate_their_inputs(tmp_path):
    with pytest.raises(ValueError, match="tokens"):
        plot_order_gates(_gates(0), TOKENS[:-1], tmp_path / "x.png")
    with pytest.raises(ValueError, match="example"):
        plot_order_gates(_gates(0), TOKENS, tmp_path / "x.png", example=BATCH)
    with pytest.raises(ValueError, match="return_gates"):
        plot_order_gates([None, None], TOKENS, tmp_path / "x.png")
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------- attention maps


def test_attention_maps_grid_follows_layers_heads_and_example(tmp_path):
    attentions = _attentions(0)
    full = plot_attention_maps(attentions, [0, 1], tmp_path / "full.png", tokens=TOKENS)
    one_head = plot_attention_maps(attentions, [0, 1], tmp_path / "one.png", heads=[2], tokens=TOKENS)
    one_layer = plot_attention_maps(attentions, [1], tmp_path / "layer.png")
    changed = [
        None if a is None else torch.stack([a[0], b[1]]) for a, b in zip(attentions, _attentions(1), strict=True)
    ]
    other = plot_attention_maps(attentions, [0, 1], tmp_path / "other.png", example=1, tokens=TOKENS)
    other_changed = plot_attention_maps(changed, [0, 1], tmp_path / "changed.png", example=1, tokens=TOKENS)
    same = plot_attention_maps(changed, [0, 1], tmp_path / "same.png", tokens=TOKENS)  # example 0 kept
    (full_w, full_h), (one_w, one_h) = _valid_png(full), _valid_png(one_head)
    assert full_w > 2 * one_w and abs(full_h - one_h) < 0.1 * full_h
    assert _valid_png(one_layer)[1] < 0.7 * full_h
    np.testing.assert_array_equal(_pixels(full), _pixels(same))
    assert not np.array_equal(_pixels(other), _pixels(other_changed))
    with pytest.raises(ValueError, match="no attention weights"):
        plot_attention_maps(attentions, [LAYERS], tmp_path / "x.png")
    with pytest.raises(ValueError, match="head"):
        plot_attention_maps(attentions, [0], tmp_path / "x.png", heads=[HEADS])
    _only(tmp_path, "full.png", "one.png", "layer.png", "other.png", "changed.png", "same.png")


def _drawn_panels(monkeypatch) -> list[list[tuple[str, np.ndarray]]]:
    """Filled as the inspection figures are saved: per figure, each heatmap panel's (title, drawn array)."""
    from markovformer.plots import markov

    drawn, save = [], markov.save_figure

    def record(figure, out):
        drawn.append([(ax.get_title(), np.asarray(ax.images[0].get_array())) for ax in figure.axes if ax.images])
        return save(figure, out)

    monkeypatch.setattr(markov, "save_figure", record)
    return drawn


def test_figures_from_a_real_model_draw_its_numbers(tmp_path, monkeypatch):
    """The model's own outputs (strengths, gates, weights) are accepted as they come, and every panel draws the
    model's numbers of its layer, head and example: strengths heads x lags, gates one row per (head, slot) over the
    positions, attention queries down and keys across."""
    drawn = _drawn_panels(monkeypatch)
    torch.manual_seed(0)
    config = MarkovianTransformerConfig(
        vocab_size=11, d_model=16, n_layers=2, n_heads=2, max_order=3, attention=["markov", "softmax"]
    )
    model = MarkovianTransformerForCausalLM(config).eval()
    with torch.no_grad():
        output = model(torch.randint(0, 11, (2, 9)), return_gates=True, return_weights=True)
        strengths = model.transition_strengths()
    tokens = [str(i) for i in range(9)]
    _valid_png(plot_transition_strengths(strengths, tmp_path / "s.png", true_lags=(2,)))
    _valid_png(plot_order_gates(output.gates, tokens, tmp_path / "g.png", example=1, null_slot=config.gate_null))
    _valid_png(plot_attention_maps(output.attentions, [0, 1], tmp_path / "a.png", example=1, tokens=tokens))
    shown_strengths, shown_gates, shown_maps = drawn
    assert len(strengths) == 1 and strengths[0]["future"] is None  # one causal Markov layer
    assert [title for title, _ in shown_strengths] == ["Markov layer 0, past"]
    np.testing.assert_array_equal(shown_strengths[0][1], strengths[0]["past"].double().numpy())  # (H, K)
    gates = output.gates[0]["past"][1].double()  # (H, T, K + 1) of example 1
    assert output.gates[1] is None and gates.shape == (2, 9, 4)
    assert [title for title, _ in shown_gates] == ["layer 0, past gates"]
    np.testing.assert_array_equal(shown_gates[0][1], gates.transpose(1, 2).reshape(8, 9).numpy())
    expected = [(f"layer {layer}, head {head}", output.attentions[layer][1, head].double().numpy())
                for layer in (0, 1) for head in (0, 1)]  # fmt: skip
    assert [title for title, _ in shown_maps] == [title for title, _ in expected]
    for (_, shown), (_, weights) in zip(shown_maps, expected, strict=True):
        np.testing.assert_array_equal(shown, weights)
    assert not np.allclose(output.attentions[0][0], output.attentions[0][1])  # example 0 drawn would not pass
    assert not np.allclose(output.gates[0]["past"][0], gates)


# --------------------------------------------------------------------------- training curves


def _write_lightning_csv(path: Path, rows: list[dict[str, object]], extra_columns: tuple[str, ...] = ()) -> Path:
    """As Lightning's CSVLogger writes it: sorted header, one row per logging call, blanks elsewhere."""
    keys = sorted({key for row in rows for key in row} | set(extra_columns))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _training_rows(with_lr: bool = True) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for step in range(0, 60, 5):
        rows.append({"epoch": 0, "step": step, "train/loss": 3.0 - step / 40})
        if with_lr:
            rows.append({"step": step, "lr-AdamW": 1e-3 * (step + 5) / 60})
        if step % 20 == 15:
            rows.append({"epoch": 0, "step": step, "val/loss": 2.9 - step / 40, "val/bits_per_token": 4.0 - step / 30})
    return rows


def test_metric_series_skip_blanks_and_empty_columns(tmp_path):
    path = _write_lightning_csv(tmp_path / "metrics.csv", _training_rows(), extra_columns=("val/accuracy",))
    series = read_metric_series(path)
    assert list(series) == ["lr-AdamW", "train/loss", "val/bits_per_token", "val/loss"]  # val/accuracy: all blank
    assert series["val/loss"] == ([15, 35, 55], [2.9 - 15 / 40, 2.9 - 35 / 40, 2.9 - 55 / 40])
    assert series["train/loss"][0] == list(range(0, 60, 5))
    assert [metric_family(c) for c in ("train/loss", "val/loss_epoch", "train/loss_step", "lr-AdamW/pg1")] == [
        "loss",
        "loss",
        "loss",
        "learning rate",
    ]
    assert metric_family("val/bits_per_token") == "bits_per_token"


def test_training_curves_panels_and_reference_lines(tmp_path):
    full = _write_lightning_csv(tmp_path / "full.csv", _training_rows())
    no_lr = _write_lightning_csv(tmp_path / "no_lr.csv", _training_rows(with_lr=False), extra_columns=("lr-AdamW",))
    three = plot_training_curves(full, tmp_path / "three.png")
    two = plot_training_curves(no_lr, tmp_path / "two.png")
    referenced = plot_training_curves(full, tmp_path / "ref.png", reference_lines={"entropy rate": 1.73})
    (_, three_h), (_, two_h) = _valid_png(three), _valid_png(two)
    assert three_h > two_h * 1.2  # one panel per family: loss, learning rate, bits per token vs. two of them
    assert not np.array_equal(_pixels(three), _pixels(referenced))
    _only(tmp_path, "full.csv", "no_lr.csv", "three.png", "two.png", "ref.png")


@pytest.mark.parametrize("content", ["", "epoch,step,train/loss\n", "epoch,step,train/loss\n0,0,\n"])
def test_training_curves_reject_an_empty_csv_by_name(tmp_path, content):
    path = tmp_path / "empty_metrics.csv"
    path.write_text(content)
    with pytest.raises(ValueError, match="empty_metrics.csv"):
        plot_training_curves(path, tmp_path / "curves.png")
    assert not (tmp_path / "curves.png").exists()


# --------------------------------------------------------------------------- report


def test_html_report_links_relative_existing_figures_and_escapes(tmp_path):
    out_dir = tmp_path / "report"
    inside = plot_transition_strengths(_strengths(0), out_dir / "figures" / "strengths.png")
    outside = plot_transition_strengths(_strengths(1), tmp_path / "elsewhere.png")
    index = write_html_report(
        out_dir,
        "Run <7>",
        [("T per <b>head</b>", inside), ("other & more", outside)],
        summary={"val/loss": 1.23456789, "<script>": "a < b"},
    )
    assert index == out_dir / "index.html"
    page = index.read_text()
    sources = [part.split('"', 1)[0] for part in page.split('<img src="')[1:]]
    assert sources == ["figures/strengths.png", "../elsewhere.png"]
    assert all(
        (out_dir / source).resolve() == path.resolve() for source, path in zip(sources, [inside, outside], strict=True)
    )
    assert "T per &lt;b&gt;head&lt;/b&gt;" in page and "<b>head" not in page
    assert "other &amp; more" in page and "&lt;script&gt;" in page and "a &lt; b" in page
    assert "<title>Run &lt;7&gt;</title>" in page and "1.23457" in page
    _only(out_dir, "figures", "index.html")
    with pytest.raises(FileNotFoundError, match="missing.png"):
        write_html_report(out_dir, "x", [("gone", out_dir / "missing.png")])
    assert index.read_text() == page  # the failed call left the previous page as it was


# --------------------------------------------------------------------------- atomic writes and global state


def test_a_failed_save_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    out = plot_transition_strengths(_strengths(0), tmp_path / "strengths.png")
    before = out.read_bytes()

    def half_written(self, path, **kwargs):
        Path(path).write_bytes(b"\x89PNG half")
        raise KeyboardInterrupt  # the process is stopped mid-write

    monkeypatch.setattr(Figure, "savefig", half_written)
    with pytest.raises(KeyboardInterrupt):
        plot_transition_strengths(_strengths(1), out)
    with pytest.raises(KeyboardInterrupt):
        plot_order_gates(_gates(0), TOKENS, tmp_path / "gates.png")
    assert out.read_bytes() == before
    _only(tmp_path, "strengths.png")


def test_no_figure_stays_open_and_import_markovformer_loads_no_matplotlib(tmp_path):
    import matplotlib.pyplot as plt

    plot_transition_strengths(_strengths(0), tmp_path / "s.png")
    plot_order_gates(_gates(0), None, tmp_path / "g.png")
    plot_attention_maps(_attentions(0), [0], tmp_path / "a.png")
    plot_training_curves(_write_lightning_csv(tmp_path / "m.csv", _training_rows()), tmp_path / "c.png")
    assert plt.get_fignums() == []
    probe = "import sys, markovformer; assert 'matplotlib' not in sys.modules, 'import markovformer loaded matplotlib'"
    subprocess.run([sys.executable, "-c", probe], check=True)

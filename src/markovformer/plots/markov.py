"""Inspection figures for Markovian attention: transition strengths, order gates, attention maps.

Inputs are the plain tensors the model hands out: ``model.transition_strengths()`` (per Markov layer
``{"past": (H, K), "future": (H, K) or None}``), and the ``gates`` / ``attentions`` of a forward pass with
``return_gates=True`` / ``return_weights=True`` (per model layer: ``{direction: (B, H, T, K [+1])}`` or None, and
``(B, H, T, T)`` or None). Lags follow the attention's convention: past lag k is the key at t - k, labelled ``k``;
future lag k is the key at t + k, labelled ``-k``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import Normalize, PowerNorm
from matplotlib.patches import Rectangle
from torch import Tensor

from markovformer.plots.legends import place_legend
from markovformer.plots.saving import new_figure, save_figure

DIRECTIONS = ("past", "future")
_GATE_ROW = 0.14  # inches per (head, slot) row: room for a 7 pt label
_MINUS = "\u2212"  # a typographic minus: "-3" in DejaVu Sans reads as a hyphen


def _array(values: Tensor | np.ndarray) -> np.ndarray:
    if isinstance(values, Tensor):
        values = values.detach().to("cpu").float().numpy()
    return np.asarray(values, dtype=np.float64)


def _lag_labels(direction: str, max_order: int) -> list[str]:
    sign = "" if direction == "past" else _MINUS
    return [f"{sign}{k}" for k in range(1, max_order + 1)]


def _token_ticks(ax, tokens: Sequence[str] | None, seq_len: int, limit: int, axes: str = "x") -> None:
    """Token strings as tick labels when there are at most ``limit`` positions, otherwise matplotlib's own ticks."""
    if tokens is None or seq_len > limit:
        return
    size = 8 if seq_len <= 24 else 7
    if "x" in axes:
        ax.set_xticks(range(seq_len), [str(t) for t in tokens], rotation=90, fontsize=size)
    if "y" in axes:
        ax.set_yticks(range(seq_len), [str(t) for t in tokens], fontsize=size)


def _check_tokens(tokens: Sequence[str] | None, seq_len: int) -> None:
    if tokens is not None and len(tokens) != seq_len:
        raise ValueError(f"{len(tokens)} tokens given for a sequence of length {seq_len}")


def _check_index(name: str, index: int, size: int) -> None:
    if not 0 <= index < size:
        raise ValueError(f"{name} {index} out of range [0, {size})")


def _head_label(head_labels: dict[int, Sequence[str]] | None, layer: int, head: int) -> str:
    """The name of map ``head`` of ``layer``: its given label (a hybrid's map is not always one head), else
    ``head h``."""
    labels = (head_labels or {}).get(layer)
    return str(labels[head]) if labels is not None else f"head {head}"


def _lags_beyond(lags: Sequence[int], last: int, limit: str) -> str:
    """The marked lags a panel cannot show, its lags stopping at ``last``, as "lag 4 lies beyond max_order 2"
    (``limit``); "" if none. A chain may depend on lags the model cannot reach: saying so beats an error or silence."""
    beyond = [lag for lag in lags if lag > last]
    if not beyond:
        return ""
    verb = "lies" if len(beyond) == 1 else "lie"
    return f"lag{'s' if len(beyond) > 1 else ''} {', '.join(map(str, beyond))} {verb} beyond {limit}"


# --------------------------------------------------------------------------- transition strengths


def _strength_colours(values: np.ndarray) -> tuple[Normalize, object]:
    """One scale for every cell: diverging around 0 when any strength is negative (``signed``), else 0..max."""
    largest = float(np.abs(values).max()) or 1.0
    if values.min() < 0:
        return Normalize(-largest, largest), colormaps["RdBu_r"]
    return Normalize(0.0, largest), colormaps["viridis"]


def _annotation(value: float) -> str:
    text = f"{value:.2f}" if abs(value) < 10 else f"{value:.3g}"
    return text.replace("-", _MINUS)


def plot_transition_strengths(
    strengths: list[dict[str, Tensor | None]],
    out: Path,
    true_lags: tuple[int, ...] | None = None,
    layer_indices: Sequence[int] | None = None,
) -> Path:
    """Heatmaps of the transition strengths T; returns ``out``.

    A grid with one row per Markov layer and one column per direction (``future`` only when some layer has it);
    each cell shows heads (rows) x lags (columns) with the value written in every square. All cells share one
    colour scale and colour bar, diverging around zero when any strength is negative (``transition="signed"``).
    ``layer_indices`` (the model layer of each entry, ``run_report.markov_layers``) titles the rows ``layer i``
    as the gate and attention figures do; without them a row is ``Markov layer i``, its rank among Markov layers.
    ``true_lags`` (1-based lags of the generating chain) are marked by an outlined column and a bold ``k*`` tick
    label; a dependency at lag k ties t to t - k and t + k to t, so both directions mark it. A true lag beyond a
    layer's max_order is not an error (a chain may reach further than the model): the titles name it instead.
    A 1-D strength ``(K,)`` is drawn as a single row.
    """
    if not strengths:
        raise ValueError("strengths is empty: the model has no Markov layer")
    layers = [
        {d: np.atleast_2d(_array(t)) for d, t in layer.items() if d in DIRECTIONS and t is not None}
        for layer in strengths
    ]
    directions = [d for d in DIRECTIONS if any(d in layer for layer in layers)]
    if not directions:
        raise ValueError("no layer has a past or future strength tensor")
    values = np.concatenate([m.ravel() for layer in layers for m in layer.values()])
    norm, cmap = _strength_colours(values)
    n_heads = max(m.shape[0] for layer in layers for m in layer.values())
    max_order = max(m.shape[1] for layer in layers for m in layer.values())
    marked = tuple(sorted(set(true_lags or ())))
    if any(lag < 1 for lag in marked):
        raise ValueError(f"true_lags {true_lags} must be lags >= 1 (lag 0 has no transition strength)")
    if layer_indices is None:
        names = [f"Markov layer {row}" for row in range(len(layers))]
    elif len(layer_indices) == len(layers):
        names = [f"layer {index}" for index in layer_indices]
    else:
        raise ValueError(f"{len(layer_indices)} layer_indices given for {len(layers)} Markov layers")

    figure = new_figure(
        max(len(directions) * (0.62 * max_order + 1.4) + 1.3, 5.5), len(layers) * (0.36 * n_heads + 1.1) + 0.9
    )
    axes = figure.subplots(len(layers), len(directions), squeeze=False)
    title = "Transition strengths T per head and lag k"
    shown = [lag for lag in marked if lag <= max_order]
    notes = []
    if shown:
        notes.append(f"outlined, *: the chain's lag{'s' if len(shown) > 1 else ''} {', '.join(map(str, shown))}")
    beyond = _lags_beyond(marked, max_order, f"max_order {max_order}")
    if beyond:
        notes.append(f"the chain's {beyond}")
    if notes:
        title += f"\n({'; '.join(notes)})"
    figure.suptitle(title, wrap=True)  # a note on lags beyond max_order ran past a narrow figure's edges
    for row, layer in enumerate(layers):
        for column, direction in enumerate(directions):
            ax = axes[row, column]
            if direction not in layer:
                ax.set_axis_off()
                ax.text(0.5, 0.5, f"{names[row]}: no {direction} term", ha="center", va="center")
                continue
            _strength_cell(ax, layer[direction], direction, norm, cmap, marked)
            # a lag within the largest max_order (so not named above) may still lie beyond this layer's
            own = [lag for lag in marked if lag <= max_order]
            beyond = _lags_beyond(own, layer[direction].shape[1], f"its max_order {layer[direction].shape[1]}")
            ax.set_title(f"{names[row]}, {direction}" + (f"\n({beyond})" if beyond else ""), fontsize=10)
    mappable = axes.flat[0].images[0] if axes.flat[0].images else next(a.images[0] for a in axes.flat if a.images)
    figure.colorbar(mappable, ax=axes, shrink=0.9, label="transition strength T (added to the attention logit)")
    return save_figure(figure, out)


def _strength_cell(ax, matrix: np.ndarray, direction: str, norm: Normalize, cmap, marked: tuple[int, ...]) -> None:
    n_heads, max_order = matrix.shape
    ax.imshow(matrix, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    for head in range(n_heads):
        for lag in range(max_order):
            red, green, blue, _ = cmap(norm(matrix[head, lag]))
            ink = "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"
            ax.text(lag, head, _annotation(matrix[head, lag]), ha="center", va="center", fontsize=7, color=ink)
    labels = [label + ("*" if k + 1 in marked else "") for k, label in enumerate(_lag_labels(direction, max_order))]
    ax.set_xticks(range(max_order), labels)
    for lag, tick in enumerate(ax.get_xticklabels()):
        if lag + 1 in marked:
            tick.set_fontweight("bold")
    for lag in marked:
        if lag <= max_order:  # white under black: visible on either colour map
            for colour, width in (("white", 4.0), ("black", 2.0)):
                ax.add_patch(Rectangle((lag - 1.5, -0.5), 1, n_heads, fill=False, edgecolor=colour, lw=width))
    ax.set_yticks(range(n_heads), [str(h) for h in range(n_heads)])
    ax.set_xlabel("lag k (key at query " + ("\u2212 k)" if direction == "past" else "+ k, shown as \u2212k)"))
    ax.set_ylabel("head")


# --------------------------------------------------------------------------- order gates


def plot_order_gates(
    gates: list[dict[str, Tensor] | None],
    tokens: Sequence[str] | None,
    out: Path,
    example: int = 0,
    null_slot: bool | Sequence[bool] = True,
    true_lags: Sequence[int] | None = None,
) -> Path:
    """The order-gate probabilities α of one example over its positions; returns ``out``.

    Every (head, slot) pair gets its own row rather than a summary (a mean over heads hides heads that disagree,
    an argmax hides how sure a gate is): one heatmap per Markov layer (grid rows; layers whose entry is None are
    skipped, titles keep the model's layer index) and direction (grid columns), x = position with the tokens as
    tick labels when T <= 64, y = slots ``lag 1..K`` (``lag -1..-K`` for the future direction) then ``null``,
    grouped by head (head names on the right, white lines between heads). Colour: probability on a fixed 0..1
    scale. ``null_slot`` says whether the last slot is the null slot: one bool for every layer, or one per entry
    of ``gates`` (each layer's own ``MarkovBias.gate_null``: layers may differ); 8 heads x (K=8 + 1)
    slots stay readable at 0.14 inch per row. ``true_lags`` (lags >= 1 the data depends on) get a ``*`` label.
    """
    layers = [(index, layer) for index, layer in enumerate(gates) if layer]
    if not layers:
        raise ValueError("no layer returned gates (run the forward pass with return_gates=True on a gated model)")
    null_slots = [null_slot] * len(gates) if isinstance(null_slot, bool) else list(null_slot)
    if len(null_slots) != len(gates):
        raise ValueError(f"null_slot: {len(null_slots)} entries for {len(gates)} layers of gates")
    directions = [d for d in DIRECTIONS if any(d in layer for _, layer in layers)]
    panels: dict[tuple[int, str], np.ndarray] = {}
    for index, layer in layers:
        for direction, alpha in layer.items():
            alpha = _array(alpha)
            if alpha.ndim != 4:
                raise ValueError(f"layer {index} {direction} gates: expected (B, H, T, slots), got {alpha.shape}")
            _check_index("example", example, alpha.shape[0])
            panels[index, direction] = alpha[example]  # (H, T, slots)
    seq_len = next(iter(panels.values())).shape[1]
    _check_tokens(tokens, seq_len)
    rows = {index: max(p.shape[0] * p.shape[2] for (i, _), p in panels.items() if i == index) for index, _ in layers}

    width = len(directions) * min(max(0.2 * seq_len + 2.6, 6.0), 16.0) + 1.0
    heights = [_GATE_ROW * r + 1.4 for r in rows.values()]
    figure = new_figure(width, sum(heights) + 0.6)
    axes = figure.subplots(len(layers), len(directions), squeeze=False, gridspec_kw={"height_ratios": heights})
    figure.suptitle(f"Order gates \u03b1 of example {example} (rows: head x slot; colour: probability)")
    image = None
    for row, (index, _) in enumerate(layers):
        for column, direction in enumerate(directions):
            ax = axes[row, column]
            if (index, direction) not in panels:
                ax.set_axis_off()
                ax.text(0.5, 0.5, f"layer {index}: no {direction} gate", ha="center", va="center")
                continue
            image = _gate_cell(ax, panels[index, direction], direction, bool(null_slots[index]), tokens,
                               tuple(true_lags or ()))  # fmt: skip
            ax.set_title(f"layer {index}, {direction} gates", fontsize=10)
    figure.colorbar(image, ax=axes, shrink=0.6, label="gate probability \u03b1 (0..1)")
    return save_figure(figure, out)


def _gate_cell(ax, alpha: np.ndarray, direction: str, null_slot: bool, tokens: Sequence[str] | None,
               marked: tuple[int, ...] = ()):  # fmt: skip
    n_heads, seq_len, slots = alpha.shape
    max_order = slots - int(null_slot)
    if max_order < 1:
        raise ValueError(f"{slots} gate slots leave no lag slot (null_slot={null_slot})")
    rows = alpha.transpose(0, 2, 1).reshape(n_heads * slots, seq_len)  # row h * slots + s
    image = ax.imshow(rows, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    stars = ["*" if k + 1 in marked else "" for k in range(max_order)]
    slot_labels = [f"lag {k}{star}" for k, star in zip(_lag_labels(direction, max_order), stars, strict=True)]
    slot_labels += ["null"] if null_slot else []
    ax.set_yticks(range(n_heads * slots), slot_labels * n_heads, fontsize=7 if n_heads * slots > 24 else 8)
    for head in range(1, n_heads):
        ax.axhline(head * slots - 0.5, color="white", lw=1.5)
    heads_axis = ax.secondary_yaxis("right")
    heads_axis.set_yticks([h * slots + (slots - 1) / 2 for h in range(n_heads)], [f"head {h}" for h in range(n_heads)])
    heads_axis.tick_params(length=0, labelsize=8)
    _token_ticks(ax, tokens, seq_len, limit=64)
    ax.set_xlabel("position t (token)")
    ax.set_ylabel("gate slot")
    return image


# --------------------------------------------------------------------------- attention maps


@dataclass(frozen=True)
class WeightScale:
    """How attention weights are coloured and named: probabilities (every value in 0..1) on a fixed 0..1 scale with a
    square-root stretch; any other weights (RetNet's signed, unnormalised retention, Linformer's weights carried back
    through its projection) on a linear scale symmetric around 0 that holds the largest magnitude, so that no value
    is clipped to the end of the scale and a negative weight never reads as no attention."""

    probabilities: bool
    norm: Normalize
    cmap: object
    label: str
    noun: str  # "probabilities" or "weights", for titles


def weight_scale(values: Sequence[np.ndarray]) -> WeightScale:
    """The ``WeightScale`` of the maps ``values`` (drawn together, so on one scale)."""
    low = min((float(np.min(v)) for v in values if v.size), default=0.0)
    high = max((float(np.max(v)) for v in values if v.size), default=0.0)
    if low >= 0.0 and high <= 1.0 + PROBABILITY_SLACK:
        return WeightScale(True, PowerNorm(0.5, vmin=0.0, vmax=1.0), colormaps["magma_r"],
                           "attention probability (square-root colour scale)", "probabilities")  # fmt: skip
    largest = max(abs(low), abs(high)) or 1.0
    return WeightScale(False, Normalize(-largest, largest), colormaps["RdBu_r"],
                       "attention weight (signed, not a probability; linear scale)", "weights")  # fmt: skip


PROBABILITY_SLACK = 1e-5  # a softmax row's largest entry may round a little above 1 in float32


def plot_attention_maps(
    attentions: list[Tensor | None],
    layers: list[int],
    out: Path,
    example: int = 0,
    heads: list[int] | None = None,
    tokens: Sequence[str] | None = None,
    head_labels: dict[int, Sequence[str]] | None = None,
) -> Path:
    """``attention_maps_figure`` saved as a PNG to ``out``; returns ``out``."""
    return save_figure(attention_maps_figure(attentions, layers, example, heads, tokens, head_labels), out)


def attention_maps_figure(
    attentions: list[Tensor | None],
    layers: list[int],
    example: int = 0,
    heads: list[int] | None = None,
    tokens: Sequence[str] | None = None,
    head_labels: dict[int, Sequence[str]] | None = None,
):
    """T x T attention weights of one example.

    A grid with one row per chosen layer and one column per chosen head (default: all of each layer's maps; a
    layer with fewer leaves its last cells empty), query positions down the rows and key positions across the
    columns. All maps share one colour scale (``weight_scale``): probabilities on 0..1 with a square-root stretch
    so that small probabilities spread over long contexts remain visible; weights outside 0..1 (RetNet's signed
    retention, Linformer's) on a linear scale symmetric around 0, titled weights, not probabilities. Tokens label
    the axes when T <= 32. ``head_labels`` ({layer: one label per map}) names the maps of a layer whose maps are
    not one per head (hybrid_parallel: each head's Markov part, then its random-feature part); the others are
    ``head h``.
    """
    if not layers:
        raise ValueError("layers is empty: choose at least one layer to draw")
    maps = []
    for layer in layers:
        _check_index("layer", layer, len(attentions))
        if attentions[layer] is None:
            raise ValueError(f"layer {layer} returned no attention weights (its kind mixes without a T x T map: "
                             "random features, S4D, H3, Hyena, RWKV, GRU, scan)")
        weights = _array(attentions[layer])
        if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
            raise ValueError(f"layer {layer} attentions: expected (B, H, T, T), got {weights.shape}")
        _check_index("example", example, weights.shape[0])
        maps.append(weights[example])
    row_heads = [list(range(weights.shape[0])) if heads is None else list(heads) for weights in maps]
    for weights, chosen in zip(maps, row_heads, strict=True):
        for head in chosen:
            _check_index("head", head, weights.shape[0])
    columns = max(len(chosen) for chosen in row_heads)
    seq_len = maps[0].shape[-1]
    _check_tokens(tokens, seq_len)
    scale = weight_scale([weights[chosen] for weights, chosen in zip(maps, row_heads, strict=True)])

    cell = min(max(0.12 * seq_len, 2.2), 4.0)
    figure = new_figure(columns * cell + 1.6, len(layers) * (cell + 0.5) + 0.8)
    axes = figure.subplots(len(layers), columns, squeeze=False)
    figure.suptitle(f"Attention {scale.noun} of example {example} (rows: query, columns: key)",
                    wrap=True)  # one head on a short sequence is a narrower figure than this title
    image = None
    for row, (layer, weights) in enumerate(zip(layers, maps, strict=True)):
        for ax in axes[row, len(row_heads[row]) :]:
            ax.set_axis_off()
        for column, head in enumerate(row_heads[row]):
            ax = axes[row, column]
            image = ax.imshow(weights[head], cmap=scale.cmap, norm=scale.norm, interpolation="nearest")
            ax.set_title(f"layer {layer}, {_head_label(head_labels, layer, head)}", fontsize=9)
            _token_ticks(ax, tokens, seq_len, limit=32, axes="xy")
            if column == 0:
                ax.set_ylabel("query position")
            if row == len(layers) - 1:
                ax.set_xlabel("key position")
    figure.colorbar(image, ax=axes, shrink=0.8, label=scale.label)
    return figure


# --------------------------------------------------------------------------- attention by lag


def plot_attention_lag_profile(profiles: dict[int, Tensor | np.ndarray], out: Path,
                               true_lags: Sequence[int] | None = None,
                               head_labels: dict[int, Sequence[str]] | None = None,
                               future: dict[int, Tensor | np.ndarray] | None = None) -> Path:  # fmt: skip
    """``attention_lag_figure`` saved as a PNG to ``out``; returns ``out``."""
    return save_figure(attention_lag_figure(profiles, true_lags, head_labels, future), out)


MAX_LAG_TICKS = 12  # more lag ticks than this would overlap in a panel: every few lags are labelled instead
WHOLE = 0.995  # a panel whose lags hold less of every query's attention than this says how much they hold


def lag_rows(profiles: dict[int, np.ndarray], future: dict[int, np.ndarray] | None = None
             ) -> dict[int, tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """{layer: (lags, (H, n) values)}: what each panel of ``attention_lag_figure`` draws. A layer with a ``future``
    profile (column k: the key k tokens after the query) is drawn over lags -L..L (lag k = t - j: the key -k
    tokens after the query at negative k), the others over 0..L. Lags past the last one any layer attends on either
    side (beyond a window: exactly 0 for every head) are left out."""
    future = future or {}
    for layer, profile in profiles.items():
        if profile.ndim != 2 or profile.shape[1] < 2:
            raise ValueError(f"layer {layer} profile: expected (heads, lags >= 2), got {profile.shape}")
        if layer in future and future[layer].shape != profile.shape:
            raise ValueError(f"layer {layer}: future profile {future[layer].shape} for a past one {profile.shape}")
    attended = [np.flatnonzero((side != 0).any(axis=0)) for side in [*profiles.values(), *future.values()]]
    last = max(max([int(found[-1]) for found in attended if len(found)], default=1), 1)
    rows = {}
    for layer, profile in profiles.items():
        past = profile[:, : last + 1]
        if layer in future:
            ahead = future[layer][:, 1 : last + 1][:, ::-1]  # keys last..1 tokens after the query: lags -last..-1
            rows[layer] = (np.arange(-ahead.shape[1], past.shape[1]), np.concatenate([ahead, past], axis=1))
        else:
            rows[layer] = (np.arange(past.shape[1]), past)
    return rows


def attention_lag_figure(profiles: dict[int, Tensor | np.ndarray], true_lags: Sequence[int] | None = None,
                         head_labels: dict[int, Sequence[str]] | None = None,
                         future: dict[int, Tensor | np.ndarray] | None = None):  # fmt: skip
    """Which offset each head prefers: mean attention weight against the lag k.

    ``profiles`` maps a layer index to its (H, L + 1) profile over the keys k = 0..L tokens before the query
    (``training.lag_profiles.attention_by_lag``; L may differ between layers, each read up to its own window);
    ``future``, for a bidirectional layer, its (H, L + 1) profile over the keys k = 0..L tokens after the query,
    drawn at lags -L..-1 (``lag_rows``). One panel per layer, one line per head (markers at the measured lags only,
    k is an integer; ``head_labels`` as in ``plot_attention_maps``). Probabilities get an axis from 0 fitted to the
    largest mean (a flat profile is not flattened further by a 0..1 axis), and a panel whose lags hold less than
    all of the attention (a global layer read to a few lags) says how much they hold; other weights (RetNet's
    signed retention) get an axis that holds their negative means too. ``true_lags`` are shaded, and the title
    names those beyond every panel's lags. Lags past the last one any head attends (beyond a window: exactly 0 for
    every head) are not drawn, and the title says so. The legend stands where it covers no point
    (``legends.place_legend``). Unlike a T x T map this shows a head's preference at a glance.
    """
    if not profiles:
        raise ValueError("profiles is empty: no layer returned attention weights")
    arrays = {layer: _array(profile) for layer, profile in profiles.items()}
    ahead = {layer: _array(profile) for layer, profile in (future or {}).items()}
    rows = lag_rows(arrays, ahead)
    dropped = any(len(lags) < arrays[layer].shape[1] + (arrays[layer].shape[1] - 1) * (layer in ahead)
                  for layer, (lags, _) in rows.items())  # fmt: skip
    last = max(int(lags[-1]) for lags, _ in rows.values())
    scale = weight_scale([values for _, values in rows.values()])
    top = max(float(values.max()) for _, values in rows.values())
    bottom = min(float(values.min()) for _, values in rows.values())
    figure = new_figure(4.6 * len(rows) + 0.8, 3.8)
    axes = figure.subplots(1, len(rows), sharey=True, squeeze=False)[0]
    legends = {layer: [_head_label(head_labels, layer, head) for head in range(len(values))]
               for layer, (_, values) in rows.items()}  # fmt: skip
    for ax, (layer, (lags, values)) in zip(axes, rows.items(), strict=True):
        for lag in true_lags or ():
            if lag <= lags[-1]:
                ax.axvspan(lag - 0.4, lag + 0.4, color="gold", alpha=0.35, lw=0)
        for head, row in enumerate(values):
            ax.plot(lags, row, marker="o", markersize=4 if len(lags) <= 17 else 2.5, lw=1.2,
                    label=legends[layer][head])  # fmt: skip
        step = -(-len(lags) // MAX_LAG_TICKS)
        ax.set_xticks([lag for lag in lags if lag % step == 0])
        ax.set_xlabel("lag k = t \u2212 j (k < 0: the key \u2212k tokens after the query)" if lags[0] < 0 else
                      "lag k (key k tokens before the query; 0 = itself)", fontsize=9)  # fmt: skip
        title = f"layer {layer}"
        held = values.sum(axis=1)
        if scale.probabilities and held.min() < WHOLE:
            title += (f"\n(lags drawn: {held.min():.0%}\u2013{held.max():.0%} of the attention)" if held.max() -
                      held.min() >= 0.005 else f"\n(lags drawn: {held.max():.0%} of the attention)")  # fmt: skip
        ax.set_title(title, fontsize=10)
        if scale.probabilities:
            ax.set_ylim(0, min(1.0, 1.1 * top) if top > 0 else 1.0)
        else:
            margin = 0.1 * ((max(top, 0.0) - min(bottom, 0.0)) or 1.0)
            ax.set_ylim(min(bottom, 0.0) - margin, max(top, 0.0) + margin)
            ax.axhline(0.0, color="black", lw=0.8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean attention probability" if scale.probabilities else
                       "mean attention weight (signed, not a probability)")  # fmt: skip
    last_legend = list(legends.values())[-1]
    for ax, legend in zip(axes, legends.values(), strict=True):  # one legend, unless the panels' heads differ
        if ax is axes[-1] or legend != last_legend:
            place_legend(ax, fontsize=7)
    title = "Attention by lag"
    shown = [lag for lag in true_lags or () if lag <= last]
    if shown:
        title += f" (shaded: the chain's lags {', '.join(map(str, shown))})"
    beyond = _lags_beyond(true_lags or (), last, f"the lags drawn (0..{last})")
    if beyond:  # each note on its own line: a one-panel figure is too narrow for them side by side
        title += f"\nthe chain's {beyond}"
    if dropped:
        past = f"lags beyond \u00b1{last}" if ahead else f"lags > {last}"
        title += f"\n{past}, past the window and never attended, not drawn"
    figure.suptitle(title, fontsize=11)
    return figure

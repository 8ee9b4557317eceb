"""A legend put where it hides no data: matplotlib's ``loc="best"`` weighs only the data points' centres, so a
marker at the axes' edge (a lone k = ∞ star) could sit half under the box it chose."""

from __future__ import annotations

import numpy as np

# inside the axes, tried in this order; a legend that would cover data at each of them goes outside, to the right
INSIDE = ("upper right", "upper left", "lower right", "lower left", "center right", "center left", "upper center",
          "lower center")  # fmt: skip
SEGMENT_SAMPLES = 24  # points looked at along each joining segment of a curve


def drawn_points(ax) -> list[tuple[np.ndarray, float]]:
    """(display points (N, 2), radius in pixels) of every data line of ``ax``: its markers, with their size, and points
    along the segments that join them. Lines drawn across the whole axes (``axhline``, ``axvline``: references,
    dividers) are left out: a legend box may stand over a stretch of them."""
    shown = []
    scale = ax.figure.dpi / 72.0
    for line in ax.get_lines():
        if line.get_transform() != ax.transData or not line.get_visible():
            continue
        xy = np.asarray(line.get_xydata(), float)
        xy = xy[np.isfinite(xy).all(axis=1)]
        if not len(xy):
            continue
        marker = line.get_marker()
        if marker not in (None, "", "None", " ", "none"):
            shown.append((ax.transData.transform(xy), line.get_markersize() * scale / 2 + 1))
        if line.get_linestyle() not in ("None", "", " ", "none") and len(xy) > 1:
            fractions = np.linspace(0.0, 1.0, SEGMENT_SAMPLES)[:, None, None]
            along = (xy[:-1] + fractions * (xy[1:] - xy[:-1])).reshape(-1, 2)  # transData: log axes sampled in data
            shown.append((ax.transData.transform(along), line.get_linewidth() * scale / 2))
    return shown


def drawn_patches(ax) -> list[tuple[np.ndarray, float]]:
    """The bars (and other patches drawn in data coordinates) of ``ax`` as display points: each patch's outline,
    filled in along its edges, so that ``covers`` sees a box over any part of it (spans across the whole axes,
    ``axvspan`` shading, are left out)."""
    shown = []
    for patch in ax.patches:
        if patch.get_transform() != ax.transData and patch.get_data_transform() != ax.transData:
            continue
        box = patch.get_window_extent()
        xs, ys = np.linspace(box.x0, box.x1, SEGMENT_SAMPLES), np.linspace(box.y0, box.y1, SEGMENT_SAMPLES)
        grid = np.stack(np.meshgrid(xs, ys), axis=-1).reshape(-1, 2)
        shown.append((grid, 0.0))
    return shown


def covers(box, points: list[tuple[np.ndarray, float]]) -> bool:
    """Whether the display-space ``box`` (a Bbox) overlaps any of ``points`` (each array of points with a radius)."""
    for xy, radius in points:
        inside = ((xy[:, 0] + radius >= box.x0) & (xy[:, 0] - radius <= box.x1) & (xy[:, 1] + radius >= box.y0)
                  & (xy[:, 1] - radius <= box.y1))  # fmt: skip
        if inside.any():
            return True
    return False


def place_legend(ax, **kwargs):
    """``ax.legend(**kwargs)`` at the first of ``INSIDE`` where its box covers no marker, curve or bar of ``ax``
    (lines and spans across the whole axes aside); outside the axes on the right when every one would. The figure
    is drawn once first, so that its layout and limits are final. Returns the legend."""
    figure = ax.figure
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    points = drawn_points(ax) + drawn_patches(ax)
    for loc in INSIDE:
        legend = ax.legend(loc=loc, **kwargs)
        if not covers(legend.get_window_extent(renderer), points):
            return legend
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)

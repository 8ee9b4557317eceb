"""The ``mixers`` report's claim lines against the published picture, read from the grid's points: Zoology's gap
between softmax and the best gated convolution across lengths, and Mamba's selective-copy verdict per cell."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from markovformer.experiments import mixers
from markovformer.experiments.mixers_report import published_comparison

_SETTINGS = mixers.MixersSettings(tasks=("mqar", "selective_copy"), kinds=("softmax", "hyena", "s4d", "scan", "gru"),
                                  lengths=(64, 128, 256), widths=(64,))  # fmt: skip


def _point(task: str, kind: str, length: int, accuracy: float) -> dict:
    """A finished grid point: every rate of the search, the one seed."""
    return {"task": task, "kind": kind, "length": length, "width": 64, "val_by_lr": dict.fromkeys(_SETTINGS.lrs, 0.5),
            "test_accuracy": {"mean": accuracy, "std": 0.0, "n": 1}}  # fmt: skip


def _written(points: list[dict]) -> str:
    written = []
    published_comparison(SimpleNamespace(text=written.append, results={"seeds": [0]}), points, _SETTINGS, quick=False)
    return written[0]


@pytest.mark.parametrize("convolutions, grows", [
    ({64: (0.9, 0.8), 128: (0.7, 0.6), 256: (0.5, 0.2)}, True),  # gaps 0.09, 0.29, 0.49
    ({64: (0.5, 0.8), 128: (0.7, 0.6), 256: (0.9, 0.2)}, False),  # gaps 0.19, 0.29, 0.09
])  # fmt: skip
def test_the_gap_is_softmax_minus_the_best_gated_convolution_per_length_and_must_grow_at_every_step(
    convolutions, grows
):
    points = [_point("mqar", "softmax", length, 0.99) for length in _SETTINGS.lengths]
    points += [_point("mqar", kind, length, value) for length, values in convolutions.items()
               for kind, value in zip(("hyena", "s4d"), values, strict=True)]  # fmt: skip
    lines = _written(points).split("\n")
    gap_lines = [line for line in lines if ": gap " in line]
    expected = [f"- T = {length} ({length // 16} pairs): gap {0.99 - max(values):+.3f}"  # the naive reference
                for length, values in convolutions.items()]  # fmt: skip
    assert gap_lines == expected
    verdict = lines[lines.index(gap_lines[-1]) + 1]
    assert verdict == ("- reproduced: the gap grows with the pairs." if grows else
                       "- not reproduced: the gap does not grow with the pairs.")  # fmt: skip


def test_the_selective_copy_lines_put_each_kind_in_its_group_and_skip_cells_not_run():
    """scan and gru are selective, s4d is LTI (hyena, a gated convolution, is neither); a length with no
    selective-copy point gets no line."""
    points = [_point("selective_copy", kind, length, value) for length in (64, 256)
              for kind, value in (("scan", 0.95), ("gru", 0.93 if length == 64 else 0.4), ("s4d", 0.3))]  # fmt: skip
    points.append(_point("selective_copy", "hyena", 64, 0.99))
    lines = [line for line in _written(points).split("\n") if line.startswith("- T = ") and "(LTI)" in line]
    assert lines == [
        "- T = 64, d = 64: scan (selective) 0.950, gru (selective) 0.930, s4d (LTI) 0.300: reproduced.",
        "- T = 256, d = 64: scan (selective) 0.950, gru (selective) 0.400, s4d (LTI) 0.300: partly reproduced (LTI "
        "kinds fail; only some selective kinds solve it).",
    ]

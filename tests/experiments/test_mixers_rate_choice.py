"""How a ``mixers`` grid point chooses its learning rate (on the first seed's validation, never on test) and which
seeds' cells it reports (the chosen rate's, a seed that diverged at it left out)."""

from __future__ import annotations

import pytest

from markovformer.experiments import mixers
from markovformer.experiments.report import ExperimentReport
from markovformer.training.trainer_config import TrainingDiverged


def _grid_point_of(fake_cell, seeds: tuple[int, ...], tmp_path, monkeypatch, diverged=None) -> dict:
    """run_grid_point of one MQAR softmax point over the rates 1e-3, 3e-3 and 1e-2, each cell from ``fake_cell``."""
    monkeypatch.setattr(mixers, "train_cell", fake_cell)
    settings = mixers.MixersSettings(tasks=("mqar",), kinds=("softmax",), lengths=(32,), widths=(32,),
                                     lrs=(1e-3, 3e-3, 1e-2))  # fmt: skip
    matched = {"section": {"attention": "softmax", "d_model": 32}, "parameters": 1000, "ratio": 1.0}
    report = ExperimentReport(tmp_path, "t", log=lambda line: None)
    return mixers.run_grid_point(report, "mqar", 32, 32, "softmax", matched, settings, seeds, lambda line: None,
                                 diverged)


def test_the_rate_is_chosen_on_validation_accuracy_never_on_test(tmp_path, monkeypatch):
    """run_grid_point with train_cell replaced by a table in which validation prefers 3e-3 while test prefers 1e-2
    and 1e-3 is neither's best: the point's rate is 3e-3 (the rate of the lowest validation accuracy, or of the best
    test accuracy, would be another: picking on test would leak the split the point reports), the second seed trains
    at that rate only, and the reported test accuracy and loss are those of 3e-3's cells, one per seed."""
    val = {1e-3: 0.5, 3e-3: 0.8, 1e-2: 0.2}  # the first seed's validation accuracy per rate
    test = {1e-3: 0.3, 3e-3: 0.1, 1e-2: 0.9}  # and its test accuracy; seed s adds s / 100 to both
    trained = []

    def fake_cell(task, length, section, lr, seed, settings, log=None, kind=None):
        trained.append((lr, seed))
        return {"val": {"accuracy": val[lr] + seed / 100, "loss": 1.0},
                "test": {"accuracy": test[lr] + seed / 100, "loss": 2.0 + seed}, "seconds": 10.0 + seed,
                "gates": None, "val_curve": [[], []]}  # fmt: skip

    point = _grid_point_of(fake_cell, (0, 1), tmp_path, monkeypatch)
    assert trained == [(1e-3, 0), (3e-3, 0), (1e-2, 0), (3e-3, 1)]
    assert point["lr"] == 3e-3
    assert point["val_by_lr"] == {"0.001": 0.5, "0.003": 0.8, "0.01": 0.2}
    assert point["test_by_lr"] == {"0.001": 0.3, "0.003": 0.1, "0.01": 0.9}
    assert point["test_accuracy"]["values"] == pytest.approx([0.1, 0.11])
    assert point["test_accuracy"]["mean"] == pytest.approx(0.105)
    assert point["test_loss"]["values"] == [2.0, 3.0] and point["seconds"] == 21.0


def test_a_tie_in_validation_accuracy_goes_to_the_rate_of_the_lower_validation_loss(tmp_path, monkeypatch):
    """Three rates at chance on validation (accuracy 0.0, as a short run's are): the point takes the rate whose
    validation loss is lowest, 3e-3 (the middle one: ``max`` on accuracy alone kept the first listed)."""
    loss = {1e-3: 5.0, 3e-3: 4.0, 1e-2: 6.0}

    def fake_cell(task, length, section, lr, seed, settings, log=None, kind=None):
        return {"val": {"accuracy": 0.0, "loss": loss[lr]}, "test": {"accuracy": 0.0, "loss": loss[lr]},
                "seconds": 1.0, "gates": None, "val_curve": [[], []]}  # fmt: skip

    point = _grid_point_of(fake_cell, (0,), tmp_path, monkeypatch)
    assert point["lr"] == 3e-3 and point["test_loss"]["values"] == [4.0]
    assert point["val_loss_by_lr"] == {"0.001": 5.0, "0.003": 4.0, "0.01": 6.0}


def test_a_seed_that_diverges_at_the_chosen_rate_is_left_out_of_the_points_summary(tmp_path, monkeypatch):
    """The first seed chose 3e-3; the second diverges there: the point reports seeds 0 and 2 (n = 2, the mean of
    their test accuracies), lists seed 1 as diverged, and the grid goes on (the diverged cell, which holds no test
    score, was summarised with the others and ended the report in a KeyError after hours of training)."""
    val = {1e-3: 0.5, 3e-3: 0.8, 1e-2: 0.2}

    def fake_cell(task, length, section, lr, seed, settings, log=None, kind=None):
        if seed == 1:
            raise TrainingDiverged(f"the training loss is nan at step 2 (lr {lr:g})")
        return {"val": {"accuracy": val[lr], "loss": 1.0}, "test": {"accuracy": 0.5 + seed / 10, "loss": 2.0},
                "seconds": 1.0, "gates": None, "val_curve": [[], []]}  # fmt: skip

    diverged = []
    point = _grid_point_of(fake_cell, (0, 1, 2), tmp_path, monkeypatch, diverged)
    assert point["lr"] == 3e-3
    assert point["test_accuracy"]["values"] == pytest.approx([0.5, 0.7])
    assert point["test_accuracy"]["n"] == 2 and point["test_accuracy"]["mean"] == pytest.approx(0.6)
    assert [(cell["lr"], cell["seed"]) for cell in diverged] == [(3e-3, 1)]

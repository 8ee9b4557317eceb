"""The weight-tying behaviour (tied, d = 4, p + q > 1 ends at the unigram minimum), trained for real (a short
version of ``markovformer experiment weight-tying``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from markovformer.experiments.weight_tying import WeightTyingSettings, train_switching_cell

FAST = replace(WeightTyingSettings(), steps=600, eval_every=600)


def test_tied_model_with_p_plus_q_above_one_ends_at_the_unigram_minimum():
    cell = train_switching_cell(0.7, 0.9, tied=True, seed=0, settings=FAST)
    assert cell["final_loss"] == pytest.approx(cell["unigram_entropy"], abs=0.01)
    # a near-constant prediction, close to π₁ = p / (p + q), whatever the last symbol
    assert abs(cell["p1_given_0"] - cell["p1_given_1"]) < 0.02
    assert cell["p1_given_0"] == pytest.approx(0.7 / 1.6, abs=0.02)


def test_untied_model_reaches_the_entropy_rate():
    cell = train_switching_cell(0.7, 0.9, tied=False, seed=0, settings=FAST)
    assert cell["final_loss"] == pytest.approx(cell["entropy_rate"], abs=0.01)
    assert cell["p1_given_0"] == pytest.approx(0.7, abs=0.03)  # P(1 | 0) = p
    assert cell["p1_given_1"] == pytest.approx(0.1, abs=0.03)  # P(1 | 1) = 1 - q

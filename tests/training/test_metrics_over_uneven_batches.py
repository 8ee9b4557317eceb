"""Metrics averaged over batches of different sizes weigh each batch by what its value averages over (worked out by
hand here), and perplexity is exp(loss) wherever that is a float."""

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from markovformer.training.metrics import DocumentMetrics, perplexity
from markovformer.training.run_config import TrainerConfig
from markovformer.training.tasks import build_task


def test_token_classification_loss_weighs_each_batch_by_its_labelled_positions():
    """A token classifier's loss is a mean over labelled positions: a batch's weight is its labelled positions, not
    its positions (the -100 padding of a short batch would count)."""
    metrics = build_task("token_classification", TrainerConfig(), {"num_labels": 3}).new_metrics()
    padded = torch.tensor([[0, 1, -100, -100], [2, -100, -100, -100]])  # 3 labelled of 8 positions
    full = torch.tensor([[0, 1, 2, 1]])  # 4 of 4
    for loss, labels in ((2.0, padded), (0.5, full)):
        logits = F.one_hot(labels.clamp(min=0), 3).float()
        metrics.update(SimpleNamespace(loss=torch.tensor(loss), logits=logits), {"labels": labels})
    assert metrics.compute()["loss"] == pytest.approx((2.0 * 3 + 0.5 * 4) / 7)  # 8/7; by positions 1.5


def test_vmt_bounds_are_token_weighted_across_batches_of_different_lengths():
    """Every bound (the ELBO, its terms and the IW bound) is per token of all the documents: each batch weighs by
    its real tokens, so a batch of 30 tokens counts ten times one of 3 (a mean of batch means reads 1.5 for elbo)."""
    metrics = DocumentMetrics()
    batches = [((-1.0, -0.8, 0.2, -0.9), 30), ((-2.0, -1.5, 0.5, -1.8), 3)]
    for (elbo, reconstruction, kl, iw_bound), tokens in batches:
        values = {"elbo": elbo, "reconstruction": reconstruction, "kl": kl}
        metrics.update_documents(SimpleNamespace(num_tokens=tokens, **{k: torch.tensor(v) for k, v in values.items()}),
                                 SimpleNamespace(per_token=torch.tensor(iw_bound)))  # fmt: skip
    results = metrics.compute()
    for index, name in enumerate(("elbo", "reconstruction", "kl", "iw_bound")):
        expected = (batches[0][0][index] * 30 + batches[1][0][index] * 3) / 33
        assert results[name] == pytest.approx(expected, rel=1e-6), name
    assert results["loss"] == pytest.approx(-(-1.0 * 30 - 2.0 * 3) / 33, rel=1e-6)
    assert results["bits_per_token"] == pytest.approx(results["loss"] / math.log(2), rel=1e-6)


def test_perplexity_is_exp_of_the_loss_up_to_float_range_inf_past_it_and_nan_of_nan():
    """A large but finite mean loss has a finite perplexity wherever exp(loss) is a float (up to ln(max float) =
    709.78); past it, and for an infinite loss, inf; a nan loss (a diverged run) has no perplexity: nan, not inf."""
    for loss in (0.0, 2.5, 700.0, 709.5, 709.78):
        assert perplexity(loss) == math.exp(loss), loss
    assert perplexity(709.79) == math.inf and perplexity(1e6) == math.inf and perplexity(math.inf) == math.inf
    assert math.isnan(perplexity(math.nan))

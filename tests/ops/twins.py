"""What the baseline-kernel tests share (imported as ``twins``: pytest puts this folder on the path): seeded float64
inputs, the check that two forms of one computation have the same gradients, and the check of dropout on attention
probabilities."""

import torch


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    """A float64 standard normal tensor from its own seeded generator."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def gradients(output: torch.Tensor, inputs: list[torch.Tensor], seed: int = 9) -> list[torch.Tensor]:
    """Gradients in every input of a fixed random projection of ``output``."""
    weights = randn(*output.shape, seed=seed)
    return list(torch.autograd.grad((output * weights).sum(), inputs, retain_graph=True))  # forms may share a graph


def assert_same_gradients(got: torch.Tensor, want: torch.Tensor, inputs: list[torch.Tensor], **tolerance) -> None:
    """Two forms of one computation have the same gradients (of the same random projection) in every input."""
    for got_grad, want_grad in zip(gradients(got, inputs), gradients(want, inputs), strict=True):
        torch.testing.assert_close(got_grad, want_grad, **tolerance)


def assert_dropout_of_probabilities(attention, batch: int, heads: int, length: int, dropout_p: float) -> None:
    """``attention(v, dropout_p)`` drops attention probabilities: with one-hot values (v = I) each output row is its
    probability row, so every entry is 0 or its undropped probability / (1 - p), some are dropped, and the gradient
    in v (probabilities^T @ upstream) shows the backward pass (recomputing each chunk) dropped the same entries."""
    identity = torch.eye(length, dtype=torch.float64).expand(batch, heads, length, length)
    probabilities = attention(identity, 0.0).detach()
    v = identity.clone().requires_grad_(True)
    torch.manual_seed(0)
    dropped = attention(v, dropout_p)
    kept = dropped != 0
    torch.testing.assert_close(dropped[kept], probabilities[kept] / (1 - dropout_p))
    visible = probabilities > 0
    assert 0.3 < (~kept & visible).sum() / visible.sum() < 0.7  # p = 0.5 of the visible keys dropped
    upstream = randn(*dropped.shape, seed=5)
    (grad_v,) = torch.autograd.grad((dropped * upstream).sum(), v)
    torch.testing.assert_close(grad_v, dropped.detach().transpose(-1, -2) @ upstream)

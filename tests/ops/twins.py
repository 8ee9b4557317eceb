"""What the baseline-kernel tests share (imported as ``twins``: pytest puts this folder on the path): seeded float64
inputs, and the check that two forms of one computation have the same gradients."""

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

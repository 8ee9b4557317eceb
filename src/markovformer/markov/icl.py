"""Random Markov chains with Dirichlet(β) rows, drawn once or per sequence (in-context learning).

Two labelled modes of ``RandomChainSampler``:

- ``mode == "fixed"``: one kernel is drawn when the sampler is built (``.chain``); every sequence comes from it,
  so a model can learn the kernel in its weights.
- ``mode == "per_sequence"``: every sequence gets its own freshly drawn kernel (``.chain`` is None), so the only
  way to predict well is to estimate the kernel in context (the add-β estimator of ``markov.estimators``).

Kernels use the context convention of ``markov.chains`` (row index = base-S context, oldest symbol most
significant). Losses are in nats. Randomness only from an explicit ``torch.Generator`` (None = seeded with 0).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from markovformer.markov.chains import (
    MarkovChain,
    check_chain_arguments,
    check_rows,
    check_symbols,
    context_indices,
    dirichlet_kernels,
    random_chain,
    resolve_generator,
)

MODES = ("fixed", "per_sequence")


def _order_of(kernels: Tensor) -> int:
    """k such that kernels (B, S**k, S) has S**k rows; ValueError unless every row is a distribution."""
    if not isinstance(kernels, Tensor):
        raise ValueError(f"kernels must be a torch.Tensor, got {type(kernels).__name__}")
    if kernels.ndim != 3 or kernels.shape[-1] < 2 or kernels.shape[0] < 1:
        raise ValueError(f"kernels must have shape (B, S**k, S) with B >= 1, S >= 2, got {tuple(kernels.shape)}")
    num_symbols, num_contexts = kernels.shape[-1], kernels.shape[-2]
    order = round(math.log(num_contexts) / math.log(num_symbols)) if num_contexts > 0 else 0
    if order < 1 or num_symbols**order != num_contexts:
        raise ValueError(f"kernels have {num_contexts} rows, not a power S**k of S={num_symbols}")
    check_rows(kernels.detach().to(torch.float64), "kernels")
    return order


def sample_from_kernels(x_length: int, kernels: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One sequence per kernel, LongTensor (B, x_length), from kernels (B, S**k, S).

    The first k symbols are uniform (a per-sequence kernel has no cheap stationary distribution); afterwards
    x_t ~ kernels[b, context(x_{t-k..t-1})]. Vectorised over the batch, one step per time position.
    """
    if isinstance(x_length, bool) or not isinstance(x_length, int) or x_length < 0:
        raise ValueError(f"x_length must be an integer >= 0, got {x_length!r}")
    generator = resolve_generator(generator, torch.device("cpu"))
    order = _order_of(kernels)
    batch, num_contexts, num_symbols = kernels.shape
    device = kernels.device
    sequence = torch.randint(num_symbols, (batch, max(x_length, order)), generator=generator, device=device)
    context = context_indices(sequence[:, :order], num_symbols)
    cumulative = kernels.to(torch.float64).cumsum(-1)
    rows = torch.arange(batch, device=device)
    for t in range(order, x_length):
        row_cdf = cumulative[rows, context]
        # scaling by the row total keeps zero-probability trailing symbols unreachable despite rounding
        u = torch.rand(batch, 1, generator=generator, dtype=torch.float64, device=device) * row_cdf[:, -1:]
        symbol = torch.searchsorted(row_cdf, u, right=True).squeeze(-1).clamp_(max=num_symbols - 1)
        sequence[:, t] = symbol
        context = (context % (num_contexts // num_symbols)) * num_symbols + symbol
    return sequence[:, :x_length]


def oracle_loss(x: Tensor, kernels: Tensor) -> float:
    """Mean cross-entropy in nats of each sequence's own kernel, over target positions t >= k.

    x: LongTensor (B, T) with T > k; kernels: (B, S**k, S), row b the kernel that generated x[b].
    """
    order = _order_of(kernels)
    num_symbols = kernels.shape[-1]
    check_symbols(x, num_symbols)
    if x.ndim != 2 or x.shape[0] != kernels.shape[0]:
        raise ValueError(f"x must have shape (B, T) with B={kernels.shape[0]}, got {tuple(x.shape)}")
    if x.shape[1] <= order:
        raise ValueError(f"x must have length T > order={order}, got T={x.shape[1]}")
    contexts = context_indices(x.unfold(1, order, 1)[:, :-1], num_symbols)  # (B, T-k): context of target t
    rows = torch.arange(x.shape[0], device=x.device)[:, None]
    probability = kernels.to(torch.float64)[rows, contexts, x[:, order:].long()]
    return float(-probability.log().mean())


class RandomChainSampler:
    """Sequences from random order-k chains with rows ~ Dirichlet(β), in mode "fixed" or "per_sequence".

    Args:
        order: k >= 1.
        num_symbols: S >= 2.
        beta: Dirichlet concentration β > 0 (β = 1: rows uniform on the simplex, U[0,1] for S = 2).
        per_sequence: True redraws the kernel for every sequence (in-context learning); False draws it once here.
        generator: used only in fixed mode, to draw ``.chain`` (None = seeded with 0).
    """

    def __init__(
        self,
        order: int,
        num_symbols: int,
        beta: float = 1.0,
        *,
        per_sequence: bool,
        generator: torch.Generator | None = None,
    ) -> None:
        if not isinstance(per_sequence, bool):
            raise ValueError(f"per_sequence must be a bool, got {per_sequence!r}")
        check_chain_arguments(order, num_symbols, beta)
        self.order = order
        self.num_symbols = num_symbols
        self.beta = float(beta)
        self.per_sequence = per_sequence
        self.chain: MarkovChain | None = None
        if not per_sequence:
            self.chain = random_chain(
                order, num_symbols, beta, generator=resolve_generator(generator, torch.device("cpu"))
            )

    @property
    def mode(self) -> str:
        """Either "fixed" (one kernel, ``.chain``) or "per_sequence" (a fresh kernel per sequence)."""
        return "per_sequence" if self.per_sequence else "fixed"

    def __repr__(self) -> str:
        return (
            f"RandomChainSampler(order={self.order}, num_symbols={self.num_symbols}, beta={self.beta}, "
            f"mode={self.mode!r})"
        )

    def sample(self, batch: int, length: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """(x LongTensor (batch, length), kernels float64 (batch, S**k, S)); kernels[b] generated x[b].

        The first k symbols of each sequence are uniform. In fixed mode every kernels[b] equals ``chain.transition``.
        """
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise ValueError(f"length must be an integer >= 0, got {length!r}")
        generator = resolve_generator(generator, torch.device("cpu"))
        if self.chain is None:
            kernels = dirichlet_kernels(batch, self.order, self.num_symbols, self.beta, generator)
        else:
            kernels = self.chain.transition.expand(batch, -1, -1).clone()
        return sample_from_kernels(length, kernels, generator), kernels

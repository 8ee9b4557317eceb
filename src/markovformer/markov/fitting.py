"""Markov chains fitted to observed symbols, and the choice of their order.

``fit_chain`` estimates a k-th order transition table from sequences of symbols (maximum likelihood, or add-β);
``select_order`` compares orders 0..K on the same targets by BIC and AIC, the classic estimators of a chain's order
(Katz 1981; BIC is consistent for it, Csiszár and Talata 2006). Order 0 is the i.i.d. model of the symbols'
frequencies. Contexts use the base-S encoding of ``markov.chains`` (oldest symbol most significant).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from markovformer.markov.chains import MarkovChain, check_symbols, context_indices

MAX_COUNTS = 2**26  # (context, next symbol) pairs counted at most: S**(k+1)


def _as_rows(x: Tensor | Sequence[Tensor], num_symbols: int) -> list[Tensor]:
    """x (T,), (B, T) or a sequence of 1-D tensors of any lengths (FASTA records, documents) -> (1, T_i) or (B, T)
    long tensors, each checked."""
    if isinstance(num_symbols, bool) or not isinstance(num_symbols, int) or num_symbols < 2:
        raise ValueError(f"num_symbols must be an integer >= 2, got {num_symbols!r}")
    if isinstance(x, (list, tuple)):
        if not x:
            raise ValueError("x is an empty list: give at least one sequence")
        for index, row in enumerate(x):
            check_symbols(row, num_symbols, f"x[{index}]")
            if row.ndim != 1:
                raise ValueError(f"x[{index}] must be one sequence, shape (T,); got {tuple(row.shape)}")
        return [row.long()[None] for row in x]
    check_symbols(x, num_symbols)
    if x.ndim not in (1, 2):
        raise ValueError(f"x must have shape (T,) or (B, T), or be a list of (T_i,) sequences; got {tuple(x.shape)}")
    return [(x[None] if x.ndim == 1 else x).long()]


def _check_order(order: int, num_symbols: int, name: str, lowest: int) -> None:
    if isinstance(order, bool) or not isinstance(order, int) or order < lowest:
        raise ValueError(f"{name} must be an integer >= {lowest}, got {order!r}")
    if num_symbols ** (order + 1) > MAX_COUNTS:
        raise ValueError(f"{name}={order} with num_symbols={num_symbols} needs {num_symbols}**{order + 1} counts, "
                         f"more than {MAX_COUNTS:,}: choose a lower order")  # fmt: skip


def _counts(rows: list[Tensor], order: int, num_symbols: int, first_target: int) -> Tensor:
    """n_{c,j}, float64 (S**k, S): context c followed by j, over the targets at positions >= first_target (>= k) of
    every row (a row no longer than first_target has none)."""
    counts = torch.zeros(num_symbols ** (order + 1), dtype=torch.float64)
    for batch in (batch for batch in rows if batch.shape[1] > first_target):  # a shorter row has no target
        # each target with the k symbols before it: a window of k + 1 whose index is (context, next symbol)
        pairs = context_indices(batch[:, first_target - order :].unfold(1, order + 1, 1), num_symbols).flatten().cpu()
        counts += torch.bincount(pairs, minlength=num_symbols ** (order + 1)).to(torch.float64)
    return counts.reshape(num_symbols**order, num_symbols)


def fit_chain(x: Tensor | Sequence[Tensor], order: int, num_symbols: int, beta: float = 0.0) -> MarkovChain:
    """The k-th order chain estimated from x (T,), (B, T) or a list of (T_i,) sequences of any lengths (each row a
    sequence of its own): row c of the
    transition is (n_{c,j} + β) / (n_c + Sβ) over every fully observed transition (targets at positions >= k).
    β = 0 is maximum likelihood; a context never observed then gets the uniform row (it has no evidence), which
    β > 0 gives it anyway."""
    rows = _as_rows(x, num_symbols)
    _check_order(order, num_symbols, "order", lowest=1)
    if not (isinstance(beta, (int, float)) and not isinstance(beta, bool) and math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
    if not any(row.shape[1] > order for row in rows):
        raise ValueError(f"x must be longer than order={order} to hold a transition; its longest sequence has "
                         f"{max(row.shape[1] for row in rows)} symbols")  # fmt: skip
    counts = _counts(rows, order, num_symbols, order) + beta
    totals = counts.sum(-1, keepdim=True)
    table = torch.where(totals > 0, counts / totals.clamp_min(1e-300), torch.full_like(counts, 1.0 / num_symbols))
    return MarkovChain(order, num_symbols, table)


@dataclass(frozen=True)
class OrderSelection:
    """``select_order``'s comparison: per order 0..K (``orders``), the maximised log-likelihood in nats of the same
    ``targets`` symbols, the free parameters S**k (S - 1), BIC = -2 log L + p ln n and AIC = -2 log L + 2p (lower is
    better); ``order`` is the criterion's choice (the lowest order among equals)."""

    orders: tuple[int, ...]
    log_likelihood: tuple[float, ...]
    parameters: tuple[int, ...]
    bic: tuple[float, ...]
    aic: tuple[float, ...]
    targets: int
    criterion: str
    order: int

    def entropy_rate(self, order: int | None = None) -> float:
        """The fitted chain's cross-entropy on the targets it was fitted to, nats per symbol (of ``order``, default
        the chosen one): the plug-in estimate of the entropy rate, biased low on small data (the fit has seen its
        targets); a reference for a model's loss on the same symbols."""
        return -self.log_likelihood[self.orders.index(self.order if order is None else order)] / self.targets


CRITERIA = ("bic", "aic")


def select_order(x: Tensor | Sequence[Tensor], num_symbols: int, max_order: int, criterion: str = "bic",
                 ) -> OrderSelection:  # fmt: skip
    """Choose a chain's order in 0..``max_order`` for x (T,), (B, T) or a list of (T_i,) sequences: each order's
    maximum-likelihood fit scored on the same targets (positions >= max_order of every row, so that every order sees
    a full context; a row no longer than max_order has none), by BIC
    (consistent: the true order with probability -> 1 as the data grow) or AIC (prone to overestimate it)."""
    rows = _as_rows(x, num_symbols)
    _check_order(max_order, num_symbols, "max_order", lowest=0)
    if criterion not in CRITERIA:
        raise ValueError(f"criterion={criterion!r} must be one of {CRITERIA}")
    targets = sum(batch.shape[0] * max(batch.shape[1] - max_order, 0) for batch in rows)
    if targets == 0:
        raise ValueError(f"x must be longer than max_order={max_order}; its longest sequence has "
                         f"{max(row.shape[1] for row in rows)} symbols")  # fmt: skip
    orders = tuple(range(max_order + 1))
    log_likelihood, parameters = [], []
    for order in orders:
        counts = _counts(rows, order, num_symbols, max_order)
        totals = counts.sum(-1, keepdim=True)
        seen = counts > 0  # 0 log 0 = 0
        log_likelihood.append(float((counts[seen] * (counts / totals.clamp_min(1.0))[seen].log()).sum()))
        parameters.append(num_symbols**order * (num_symbols - 1))
    bic = tuple(-2 * ll + p * math.log(targets) for ll, p in zip(log_likelihood, parameters, strict=True))
    aic = tuple(-2 * ll + 2 * p for ll, p in zip(log_likelihood, parameters, strict=True))
    scores = bic if criterion == "bic" else aic
    chosen = min(orders, key=lambda order: (scores[order], order))
    return OrderSelection(orders, tuple(log_likelihood), tuple(parameters), bic, aic, targets, criterion, chosen)


__all__ = ["OrderSelection", "fit_chain", "select_order"]

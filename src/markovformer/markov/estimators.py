"""In-context add-β estimators of order k: P̂(j | c) = (n_{c,j} + β) / (n_c + Sβ).

Indexing: for a sequence x_0, ..., x_{T-1}, row t of ``add_beta_predict`` is the predictive distribution of
x_{t+1} given x_0..x_t. Its context is c = (x_{t-k+1}, ..., x_t) and the counts n_{c,j} are over the transitions
(x_{i-k}, ..., x_{i-1}) -> x_i fully observed inside x_0..x_t, i.e. k <= i <= t. Rows t < k-1 have no full context
and are uniform (1/S). Contexts use the base-S encoding of ``markov.chains`` (oldest symbol most significant).

Losses are in nats and average over target positions t' = t+1 >= k, the same positions as
``MarkovChain.oracle_loss`` and ``markov.icl.oracle_loss``. add-1 (β = 1) is Bayes-optimal for Dirichlet(1) rows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.markov.chains import check_chain_arguments, check_symbols, context_indices


def _check_arguments(x: Tensor, order: int, num_symbols: int, beta: float) -> None:
    check_chain_arguments(order, num_symbols, beta)
    check_symbols(x, num_symbols)
    if x.ndim != 2:
        raise ValueError(f"x must have shape (B, T), got {tuple(x.shape)}")


def _context_counts(x: Tensor, order: int, num_symbols: int) -> Tensor:
    """Counts n_{c_t, j}, long (B, T-k+1, S), for the query rows t = k-1..T-1 (needs T >= k).

    Query row t has context c_t = window x_{t-k+1..t}, which is also the context of transition i = t+1, so its
    counts are the number of *earlier* transitions i <= t with the same context and next symbol j. That is an
    exclusive prefix sum within groups of equal context: a stable sort by context keeps time order inside each
    group, so one cumsum over the sorted axis minus the value at each group's start gives every count at once
    in O(B T S) memory (no one-hot over S**(k+1) pairs, so large orders stay cheap).
    """
    batch, length = x.shape
    contexts = context_indices(x.unfold(1, order, 1), num_symbols)  # (B, T-k+1): context of transition k..T
    next_symbol = torch.zeros(batch, length - order + 1, num_symbols, dtype=torch.long, device=x.device)
    # the last query (t = T-1) has no observed next symbol: its one-hot row stays zero
    next_symbol[:, :-1].scatter_(-1, x[:, order:].long()[..., None], 1)
    sorted_contexts, permutation = torch.sort(contexts, dim=1, stable=True)
    gather_index = permutation[..., None].expand(-1, -1, num_symbols)
    sorted_next = next_symbol.gather(1, gather_index)
    exclusive = sorted_next.cumsum(1) - sorted_next
    positions = torch.arange(sorted_contexts.shape[1], device=x.device).expand_as(sorted_contexts)
    is_start = torch.ones_like(sorted_contexts, dtype=torch.bool)
    is_start[:, 1:] = sorted_contexts[:, 1:] != sorted_contexts[:, :-1]
    group_start = torch.where(is_start, positions, torch.zeros_like(positions)).cummax(1).values
    sorted_counts = exclusive - exclusive.gather(1, group_start[..., None].expand(-1, -1, num_symbols))
    return torch.empty_like(sorted_counts).scatter_(1, gather_index, sorted_counts)


def add_beta_predict(x: Tensor, order: int, num_symbols: int, beta: float) -> Tensor:
    """Add-β predictive distributions, float64 (B, T, S): row t predicts x_{t+1} from x_0..x_t.

    Args:
        x: LongTensor (B, T) of symbols in [0, S).
        order: k >= 1, the context length.
        num_symbols: S >= 2.
        beta: pseudo-count β > 0 added to every (context, next) count.

    Row t (t >= k-1) is (n_{c,j} + β) / (n_c + Sβ) with c = (x_{t-k+1}, ..., x_t) and counts over transitions
    i -> x_i with k <= i <= t; rows t < k-1 (no full context yet) are uniform 1/S. Every row sums to 1.
    Vectorised: no Python loop over positions.
    """
    _check_arguments(x, order, num_symbols, beta)
    batch, length = x.shape
    prediction = torch.full((batch, length, num_symbols), 1.0 / num_symbols, dtype=torch.float64, device=x.device)
    if length >= order:
        counts = _context_counts(x, order, num_symbols).to(torch.float64)
        prediction[:, order - 1 :] = (counts + beta) / (counts.sum(-1, keepdim=True) + num_symbols * beta)
    return prediction


def add_beta_loss(x: Tensor, order: int, num_symbols: int, beta: float) -> float:
    """Mean cross-entropy in nats of the add-β estimator on x (B, T), over target positions t' = k..T-1.

    Target x_{t'} is predicted by row t'-1 of ``add_beta_predict``; the positions match ``oracle_loss``.
    Needs T > k.
    """
    _check_arguments(x, order, num_symbols, beta)
    if x.shape[1] <= order:
        raise ValueError(f"x must have length T > order={order}, got T={x.shape[1]}")
    prediction = add_beta_predict(x, order, num_symbols, beta)[:, order - 1 : -1]
    targets = x[:, order:].long()
    return float(-prediction.gather(-1, targets[..., None]).log().mean())

"""Markov chains of order k over S symbols and their exact quantities.

A chain of order k has a transition table ``P`` of shape (S**k, S): row ``c`` is the distribution of the next
symbol given the context ``c`` of the last k symbols. The context index is the base-S number of those symbols
with the **oldest symbol most significant**: context (x_{t-k}, ..., x_{t-1}) has index
``sum_i x_{t-k+i} * S**(k-1-i)``, so the newest symbol is ``index % S``. ``context_index`` and
``context_symbols`` own this convention.

All entropies and losses are in nats. Randomness comes only from an explicit ``torch.Generator``; passing
``generator=None`` means a fresh generator seeded with 0 (deterministic), never torch's global RNG.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

# Up to this many contexts the stationary distribution is found by squaring the dense context matrix.
DENSE_STATIONARY_MAX_CONTEXTS = 256
# method="auto" falls back to the dense solve, up to this many contexts, where power iteration cannot converge
# (up to 64 squarings of a 1024 x 1024 matrix: 5-10 s on 2 CPU cores).
DENSE_STATIONARY_FALLBACK_MAX_CONTEXTS = 1024
_ROW_SUM_TOLERANCE = 1e-6
_POWER_MAX_ITERATIONS = 200_000
# power iteration reads its step size on the host (a device sync) only every this many steps
_POWER_CHECK_EVERY = 64
_POWER_ROUNDING_FLOOR = 8 * torch.finfo(torch.float64).eps
# the largest local-balance distance (L1) accepted from power iteration; converged chains measure ~1e-11 at most
_POWER_BALANCE_TOLERANCE = 1e-9


def resolve_generator(generator: torch.Generator | None, device: torch.device) -> torch.Generator:
    """The caller's generator, or a fresh one seeded with 0 so results never depend on global RNG state."""
    if generator is not None:
        return generator
    return torch.Generator(device=device).manual_seed(0)


def context_indices(windows: Tensor, num_symbols: int) -> Tensor:
    """Context indices (...) of symbol windows (..., k), oldest symbol first and most significant: the base-S
    encoding every table of this package is indexed by (k = 0: the one empty context, 0)."""
    place_values = num_symbols ** torch.arange(windows.shape[-1] - 1, -1, -1, device=windows.device)
    return (windows.long() * place_values).sum(-1)


def _symbols_of_context(index: Tensor, order: int, num_symbols: int) -> Tensor:
    """Symbols (..., order), oldest first, of context indices (...): the inverse of the base-S encoding."""
    place_values = num_symbols ** torch.arange(order - 1, -1, -1, device=index.device)
    return (index.long()[..., None] // place_values) % num_symbols


def _entropy(probabilities: Tensor) -> Tensor:
    """Shannon entropy in nats over the last axis, with 0 log 0 = 0."""
    return -torch.xlogy(probabilities, probabilities).sum(-1)


def _hold_what_does_not_leave(lazy: Tensor) -> Tensor:
    """Set each diagonal entry of a stochastic matrix (n, n) to 1 - its row's off-diagonal sum, in place.

    Renormalising rows instead loses the mass leaving through rates below float64 eps: 1 - 1e-17 is 1.0, so rows
    summed to 1 + 1e-17 and dividing by that shrank the leaving mass into rounding (a switching chain at
    p = 1e-17, q = 3e-17 came out uniform, not (0.75, 0.25)). The off-diagonal entries keep their precision.
    """
    lazy.fill_diagonal_(0.0)
    lazy.diagonal().copy_(1.0 - lazy.sum(-1))
    return lazy


class MarkovChain:
    """A k-th order Markov chain over ``num_symbols`` symbols with a fixed transition table.

    Args:
        order: k >= 1, the number of past symbols the next symbol depends on.
        num_symbols: S >= 2.
        transition: (S**k, S) table indexed by context (see module docstring), or (S,)*k + (S,) with axes
            (x_{t-k}, ..., x_{t-1}, x_t). Entries must be >= 0 and rows must sum to 1 within 1e-6; rows are
            then renormalised exactly and stored as float64 in ``self.transition`` (treat as read-only).
        true_lags: the lags (1 <= lag <= order) the kernel actually depends on; defaults to all of 1..order.
    """

    def __init__(
        self,
        order: int,
        num_symbols: int,
        transition: Tensor,
        *,
        true_lags: tuple[int, ...] | None = None,
    ) -> None:
        check_chain_arguments(order, num_symbols)
        if not isinstance(transition, Tensor):
            raise ValueError(f"transition must be a torch.Tensor, got {type(transition).__name__}")
        num_contexts = num_symbols**order
        flat_shape = (num_contexts, num_symbols)
        nested_shape = (num_symbols,) * (order + 1)
        if tuple(transition.shape) not in (flat_shape, nested_shape):
            raise ValueError(
                f"transition must have shape {flat_shape} or {nested_shape} for order={order}, "
                f"num_symbols={num_symbols}; got {tuple(transition.shape)}"
            )
        if not (transition.is_floating_point() or transition.dtype in (torch.int32, torch.int64)):
            raise ValueError(f"transition must be a real-valued tensor, got dtype {transition.dtype}")
        table = transition.detach().to(torch.float64).reshape(flat_shape).clone()
        row_sums = check_rows(table, "transition")
        self.order = order
        self.num_symbols = num_symbols
        self.num_contexts = num_contexts
        self.transition = table / row_sums[:, None]
        if true_lags is None:
            true_lags = tuple(range(1, order + 1))
        true_lags = tuple(true_lags)
        if not true_lags or any(
            isinstance(lag, bool) or not isinstance(lag, int) or not 1 <= lag <= order for lag in true_lags
        ):
            raise ValueError(f"true_lags must be non-empty integers in [1, {order}], got {true_lags}")
        self.true_lags = tuple(sorted(set(true_lags)))
        self._stationary_cache: dict[str, Tensor] = {}

    def __repr__(self) -> str:
        return f"MarkovChain(order={self.order}, num_symbols={self.num_symbols}, true_lags={self.true_lags})"

    # ---- the context convention ---------------------------------------------------------------------

    def context_index(self, x: Tensor) -> Tensor:
        """Context indices, shape (...), of symbol windows x, shape (..., order), oldest symbol first."""
        check_symbols(x, self.num_symbols)
        if x.ndim == 0 or x.shape[-1] != self.order:
            raise ValueError(f"x must have last dimension order={self.order}, got shape {tuple(x.shape)}")
        return context_indices(x, self.num_symbols)

    def context_symbols(self, index: Tensor) -> Tensor:
        """Inverse of ``context_index``: symbols (..., order), oldest first, of context indices (...)."""
        return _symbols_of_context(index, self.order, self.num_symbols)

    def _next_context(self, index: Tensor, symbol: Tensor) -> Tensor:
        """Context index after appending ``symbol`` to context ``index`` (the oldest symbol drops out)."""
        return (index % (self.num_contexts // self.num_symbols)) * self.num_symbols + symbol

    # ---- sampling -----------------------------------------------------------------------------------

    def sample(
        self,
        batch: int,
        length: int,
        *,
        generator: torch.Generator | None = None,
        initial: str = "stationary",
    ) -> Tensor:
        """Draw ``batch`` independent sequences, LongTensor (batch, length), on the transition's device.

        The first ``order`` symbols are a context drawn from ``stationary()`` (initial="stationary") or
        uniformly (initial="uniform"); if length < order the first ``length`` of them are returned.
        """
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise ValueError(f"length must be an integer >= 0, got {length!r}")
        if initial not in ("stationary", "uniform"):
            raise ValueError(f"initial must be 'stationary' or 'uniform', got {initial!r}")
        device = self.transition.device
        generator = resolve_generator(generator, device)
        if initial == "stationary":
            context = torch.multinomial(self.stationary(), batch, replacement=True, generator=generator)
        else:
            context = torch.randint(self.num_contexts, (batch,), generator=generator, device=device)
        sequence = torch.empty(batch, max(length, self.order), dtype=torch.long, device=device)
        sequence[:, : self.order] = self.context_symbols(context)
        cumulative = self.transition.cumsum(-1)
        for t in range(self.order, length):
            row_cdf = cumulative[context]
            # scaling by the row total keeps zero-probability trailing symbols unreachable despite rounding
            u = torch.rand(batch, 1, generator=generator, dtype=torch.float64, device=device)
            u = u * row_cdf[:, -1:]
            symbol = torch.searchsorted(row_cdf, u, right=True).squeeze(-1).clamp_(max=self.num_symbols - 1)
            sequence[:, t] = symbol
            context = self._next_context(context, symbol)
        return sequence[:, :length]

    # ---- exact quantities ---------------------------------------------------------------------------

    def stationary(self, *, method: str = "auto") -> Tensor:
        """Stationary distribution over contexts, float64 (S**order,), of the chain on contexts.

        The chain on contexts moves (x_1, ..., x_k) -> (x_2, ..., x_k, x_next). method="dense" squares the
        lazy (S**k x S**k) context matrix; method="power" runs lazy power iteration (0.5 I + 0.5 P, same
        stationary distribution, immune to periodicity) without building that matrix, until one step moves less
        than float64 rounding (8 eps in L1): a chain whose slowest mode contracts by 1 - g per step is then about
        8 eps / g away (1e-11 at g = 1e-4). It raises RuntimeError where it cannot get there: after 200,000 steps
        (g below ~1e-4), or where a context that is left only rarely (rate a) is still out of balance by more than
        1e-9 in L1 (see ``_balance_distance``): its mass moves ~a per step, below rounding when a < ~1e-14, so small
        steps alone cannot tell it from convergence. It does not see a slow mode between two groups of contexts
        joined by a rare link and each left often (no context holds its mass) whose step is below rounding.
        "auto" picks dense up to ``DENSE_STATIONARY_MAX_CONTEXTS`` contexts, power above, and dense again up to
        ``DENSE_STATIONARY_FALLBACK_MAX_CONTEXTS`` where power raises. Both start from the uniform
        distribution, so for a reducible chain they return the limit reached from uniform.
        """
        if method not in ("auto", "dense", "power"):
            raise ValueError(f"method must be 'auto', 'dense' or 'power', got {method!r}")
        if method not in self._stationary_cache:
            self._stationary_cache[method] = self._solve_stationary(method)
        return self._stationary_cache[method].clone()

    def _solve_stationary(self, method: str) -> Tensor:
        if method == "dense" or (method == "auto" and self.num_contexts <= DENSE_STATIONARY_MAX_CONTEXTS):
            return self._stationary_dense()
        pi, failure = self._stationary_power()
        if failure is None:
            return pi
        if method == "auto" and self.num_contexts <= DENSE_STATIONARY_FALLBACK_MAX_CONTEXTS:
            return self._stationary_dense()
        raise RuntimeError(f"stationary: power iteration {failure} ({self.num_contexts} contexts); the chain mixes "
                           "too slowly, try method='dense'")  # fmt: skip

    def _stationary_dense(self) -> Tensor:
        n, device = self.num_contexts, self.transition.device
        contexts = torch.arange(n, device=device)
        successors = self._next_context(contexts[:, None], torch.arange(self.num_symbols, device=device))
        lazy = torch.zeros(n, n, dtype=torch.float64, device=device)
        lazy[contexts[:, None], successors] = 0.5 * self.transition
        _hold_what_does_not_leave(lazy)
        # 128 squarings reach step 2**128: converged for any chain whose rates are not below ~1e-38
        # A chain that has barely moved yet (rates near 1e-15) also changes by < 1e-14 per squaring, far from its
        # limit; but there the change doubles with every squaring, while near the limit it shrinks quadratically.
        # So a small change counts only once it is also smaller than the one before (or exactly 0: a fixed matrix).
        previous_change = 0.0
        for _ in range(128):
            squared = _hold_what_does_not_leave(lazy @ lazy)
            # off the diagonal only: the diagonal (1 - rate, rounded to eps) steps by eps where the rates double
            change = float((squared - lazy).fill_diagonal_(0.0).abs().max())
            lazy = squared
            if change == 0 or (change < 1e-14 and change < previous_change):
                break
            previous_change = change
        else:
            raise RuntimeError(f"stationary: dense squaring still changed {change:.1e} per squaring after 128 "
                               "squarings; the chain mixes too slowly")  # fmt: skip
        pi = torch.full((n,), 1.0 / n, dtype=torch.float64, device=device) @ lazy
        return pi / pi.sum()

    def _lazy_step(self, pi: Tensor) -> Tensor:
        """One step of the lazy context chain on a distribution pi (S**order,), in O(S**(order+1))."""
        flow = (pi[:, None] * self.transition).reshape(self.num_symbols, -1, self.num_symbols)
        # successor (x_2..x_k, j) collects the flow from every dropped oldest symbol x_1
        return 0.5 * pi + 0.5 * flow.sum(0).reshape(-1)

    def _stationary_power(self) -> tuple[Tensor, str | None]:
        """Lazy power iteration from uniform: (pi, None), or (last pi, why it is not trusted)."""
        # Iterate until a step is float64 rounding, not until an extrapolated tail is small: a fast mode decaying
        # geometrically can hide a slower one whose steps are smaller still, and its tail estimate then stops while
        # the slow mode is far from done. Going on to the rounding floor costs at most ~200 steps more.
        n = self.num_contexts
        pi = torch.full((n,), 1.0 / n, dtype=torch.float64, device=self.transition.device)
        # A step's size is read (a host sync) only every _POWER_CHECK_EVERY steps: stopping a few steps after the
        # first step below rounding only converges further; reading every step cost up to a third of it on CPU.
        for iteration in range(1, _POWER_MAX_ITERATIONS + 1):
            updated = self._lazy_step(pi)
            updated /= updated.sum()
            read = iteration % _POWER_CHECK_EVERY == 0 or iteration == _POWER_MAX_ITERATIONS
            step = float((updated - pi).abs().sum()) if read else math.inf
            pi = updated
            if step < _POWER_ROUNDING_FLOOR:
                break
        else:
            return pi, f"still moved {step:.1e} (L1) per step after {_POWER_MAX_ITERATIONS} steps"
        distance = self._balance_distance(pi)
        if distance > _POWER_BALANCE_TOLERANCE:
            return pi, f"stalled {distance:.1e} (L1) from balance at contexts it leaves rarely"
        return pi, None

    def _balance_distance(self, pi: Tensor) -> float:
        """How far pi (S**order,) is from balance, context by context: sum over contexts c of
        |flow into c - flow out of c| / (a_c + b_c), self-loops left out of both flows, where a_c is the rate of
        leaving c and b_c = (flow into c) / (mass outside c) the rate at which the rest of the mass enters c.

        That is how far pi_c must move to balance c with the rest of the chain, c and the rest seen as two groups:
        the distance left where pi is off at contexts that hold their mass (a self-loop near 1). Their steps are
        ~a * distance, lost in rounding for rates below ~1e-14, while this ratio never subtracts the self-loop, so it
        keeps its precision at any rate. b_c matters where c holds nearly all the mass and the rest, small, returns
        to it fast: there the rest moves, not pi_c, and |in - out| / a_c alone overstated the distance by b_c / a_c
        (a switching chain at p = 1e-9, q = 0.5, exact to 4e-15, measured 1e-6). Contexts never left are skipped.
        """
        contexts = torch.arange(self.num_contexts, device=pi.device)
        successors = self._next_context(contexts[:, None], torch.arange(self.num_symbols, device=pi.device))
        leaving = successors != contexts[:, None]
        leave_rate = (self.transition * leaving).sum(1)
        inflow = torch.zeros_like(pi).index_add_(0, successors[leaving], (pi[:, None] * self.transition)[leaving])
        # the mass outside each context; for the one context that may hold more than half, summed without it
        # (1 - pi_c cancels there)
        rest = pi.sum() - pi
        largest = int(pi.argmax())
        rest[largest] = torch.cat([pi[:largest], pi[largest + 1 :]]).sum()
        # b = inflow / rest, 0 where nothing lies outside c (c then cannot be told from a context never returned to)
        returning = torch.where(rest > 0, inflow / rest.clamp(min=torch.finfo(pi.dtype).tiny), torch.zeros_like(pi))
        held = leave_rate > 0
        imbalance = (inflow - pi * leave_rate)[held].abs()
        return float((imbalance / (leave_rate + returning)[held]).sum())

    def symbol_stationary(self) -> Tensor:
        """Stationary marginal over single symbols, float64 (S,) (pi = (q, p)/(p+q) for a switching chain)."""
        return self.stationary().reshape(-1, self.num_symbols).sum(0)

    def entropy_rate(self) -> float:
        """Entropy rate in nats: sum_c pi(c) H(P[c]), the least achievable next-symbol loss."""
        return float((self.stationary() * _entropy(self.transition)).sum())

    def marginal_entropy(self) -> float:
        """H(pi) in nats of the stationary symbol marginal: the loss of the best unigram predictor."""
        return float(_entropy(self.symbol_stationary()))

    def log_prob_next(self, x: Tensor) -> Tensor:
        """True log-probabilities, float64 (B, T - order, S), of x[:, t] for t = order..T-1; x is (B, T)."""
        check_symbols(x, self.num_symbols)
        if x.ndim != 2:
            raise ValueError(f"x must have shape (B, T), got {tuple(x.shape)}")
        if x.shape[1] <= self.order:
            raise ValueError(f"x must have length T > order={self.order}, got T={x.shape[1]}")
        windows = x.long().unfold(1, self.order, 1)[:, :-1]  # (B, T - order, order)
        contexts = self.context_index(windows)
        return self.transition.to(x.device).log()[contexts]

    def expected_loss(self, x: Tensor, log_probs: Tensor) -> float:
        """Mean cross-entropy in nats of predictions against the true next-symbol distribution of each context.

        log_probs: (B, T, S), row t a model's log-distribution of x_{t+1} given x_0..x_t. Averages
        −Σ_s P(s | context) log_probs[t, s] over t = order−1..T−2, so it has no sampling noise from the targets;
        with the true kernel's predictions it is the mean conditional entropy, whose expectation is the entropy rate.
        """
        if log_probs.shape != (*x.shape, self.num_symbols):
            raise ValueError(f"log_probs must have shape {(*x.shape, self.num_symbols)}; got {tuple(log_probs.shape)}")
        truth = self.log_prob_next(x).exp()
        predicted = log_probs[:, self.order - 1 : -1].to(torch.float64)
        # 0 · log 0 = 0: a symbol the kernel never emits costs nothing, whatever its predicted log-probability
        weighted = torch.where(truth > 0, truth * predicted, torch.zeros_like(predicted))
        return float(-weighted.sum(-1).mean())

    def oracle_loss(self, x: Tensor) -> float:
        """Mean cross-entropy in nats of the true kernel on x (B, T) over positions t >= order."""
        log_prob = self.log_prob_next(x)
        targets = x[:, self.order :].long()
        return float(-log_prob.gather(-1, targets[..., None]).mean())


def switching_chain(p: float, q: float) -> MarkovChain:
    """Binary first-order chain [[1-p, p], [q, 1-q]], pi = (q, p)/(p+q); needs 0 <= p, q <= 1 and p+q > 0."""
    check_switching_rates(p, q)
    return MarkovChain(1, 2, torch.tensor([[1.0 - p, p], [q, 1.0 - q]], dtype=torch.float64))


def check_switching_rates(p: float | Tensor, q: float | Tensor, prefix: str = "") -> None:
    """ValueError naming the value unless the switching chain's rates (numbers or tensors) lie in [0, 1] with
    p + q > 0 everywhere; ``prefix`` goes before each name (``data.`` where they are a source's options)."""
    numbers = all(isinstance(rate, (int, float)) for rate in (p, q))  # the common case, without tensor ops

    def inside(rate: float | Tensor) -> bool:
        return 0 <= rate <= 1 if numbers else bool(((torch.as_tensor(rate) >= 0) & (torch.as_tensor(rate) <= 1)).all())

    for name, value in (("p", p), ("q", q)):
        if not inside(value):
            raise ValueError(f"{prefix}{name} must lie in [0, 1], got {value!r}")
    if not (p + q > 0 if numbers else bool((torch.as_tensor(p) + torch.as_tensor(q) > 0).all())):
        raise ValueError(f"{prefix}p + {prefix}q must be > 0 for a unique stationary distribution, got p={p!r}, "
                         f"q={q!r}")  # fmt: skip


def check_rows(table: Tensor, name: str) -> Tensor:
    """ValueError naming ``name`` unless every row (last axis) of ``table`` is a probability distribution: finite,
    >= 0, summing to 1 within 1e-6. Returns the row sums."""
    if not torch.isfinite(table).all():
        raise ValueError(f"{name} contains NaN or infinite entries")
    if (table < 0).any():
        raise ValueError(f"{name} entries must be >= 0, got minimum {table.min().item():.3g}")
    row_sums = table.sum(-1)
    worst = (row_sums - 1.0).abs().argmax()
    if (row_sums.flatten()[worst] - 1.0).abs() > _ROW_SUM_TOLERANCE:
        where = tuple(int(i) for i in torch.unravel_index(worst, row_sums.shape))
        raise ValueError(
            f"{name} rows must sum to 1 (within {_ROW_SUM_TOLERANCE}); row {where[0] if len(where) == 1 else where} "
            f"sums to {row_sums.flatten()[worst].item():.9g}"
        )
    return row_sums


def check_symbols(x: Tensor, num_symbols: int, name: str = "x") -> None:
    """ValueError naming ``name`` unless ``x`` is an integer tensor of symbols in [0, num_symbols)."""
    if not isinstance(x, Tensor):
        kind = f"{type(x).__module__}.{type(x).__qualname__}".removeprefix("builtins.")
        raise ValueError(f"{name} must be a torch.Tensor of integer symbols, got {kind} (torch.as_tensor({name}) "
                         "converts it)")  # fmt: skip
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer symbol tensor, got {x.dtype}")
    if x.numel() and (x.min() < 0 or x.max() >= num_symbols):
        raise ValueError(f"{name} holds symbols outside [0, {num_symbols}): min {x.min().item()}, max {x.max().item()}")


def check_chain_arguments(order: int, num_symbols: int, beta: float | None = None, prefix: str = "") -> None:
    """ValueError naming the argument unless order >= 1, num_symbols >= 2 (integers) and beta (if given) > 0;
    ``prefix`` goes before each name (``data.`` where they are a source's options)."""
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"{prefix}order must be an integer >= 1, got {order!r}")
    if isinstance(num_symbols, bool) or not isinstance(num_symbols, int) or num_symbols < 2:
        raise ValueError(f"{prefix}num_symbols must be an integer >= 2, got {num_symbols!r}")
    if beta is not None and not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise ValueError(f"{prefix}beta must be a finite number > 0, got {beta!r}")


def dirichlet_kernels(
    batch: int, order: int, num_symbols: int, beta: float, generator: torch.Generator | None = None
) -> Tensor:
    """``batch`` independent kernels, float64 (batch, S**order, S), every row ~ Dirichlet(beta, ..., beta).

    torch has no generator-aware Gamma sampler, so one 63-bit seed is drawn from ``generator`` and the Gammas
    come from numpy's PCG64 with that seed: the same generator state gives the same kernels. Gammas are drawn in
    log space (Gamma(b) = Gamma(b + 1) * U**(1/b)) so rows stay well defined for very small beta.
    """
    check_chain_arguments(order, num_symbols, beta)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
    generator = resolve_generator(generator, torch.device("cpu"))
    seed = int(torch.randint(0, 2**63 - 1, (1,), generator=generator, device=generator.device).item())
    rng = np.random.default_rng(seed)
    shape = (batch, num_symbols**order, num_symbols)
    log_gamma = np.log(rng.gamma(beta + 1.0, size=shape)) + np.log1p(-rng.random(size=shape)) / beta
    return torch.softmax(torch.from_numpy(log_gamma), dim=-1)


def random_chain(
    order: int,
    num_symbols: int,
    beta: float = 1.0,
    *,
    generator: torch.Generator | None = None,
) -> MarkovChain:
    """A chain whose S**order rows are drawn independently from Dirichlet(beta, ..., beta), once
    (see :func:`dirichlet_kernels`)."""
    check_chain_arguments(order, num_symbols, beta)
    rows = dirichlet_kernels(1, order, num_symbols, beta, generator)[0]
    return MarkovChain(order, num_symbols, rows)


def lagged_chain(
    num_symbols: int,
    lags: tuple[int, ...],
    *,
    strength: float = 2.0,
    generator: torch.Generator | None = None,
) -> MarkovChain:
    """A hidden-order source: P(x_t = j | past) ∝ exp(strength * sum_{l in lags} M_l[x_{t-l}, j]).

    Each M_l is an (S, S) standard normal matrix drawn from ``generator`` in increasing lag order; the chain
    has order max(lags) and ``true_lags`` = sorted(lags), so the kernel is constant along every other lag.
    """
    if isinstance(num_symbols, bool) or not isinstance(num_symbols, int) or num_symbols < 2:
        raise ValueError(f"num_symbols must be an integer >= 2, got {num_symbols!r}")
    lags = tuple(lags)
    if not lags or any(isinstance(lag, bool) or not isinstance(lag, int) or lag < 1 for lag in lags):
        raise ValueError(f"lags must be a non-empty tuple of integers >= 1, got {lags!r}")
    if len(set(lags)) != len(lags):
        raise ValueError(f"lags must not repeat, got {lags!r}")
    if not (isinstance(strength, (int, float)) and math.isfinite(strength)):
        raise ValueError(f"strength must be a finite number, got {strength!r}")
    order = max(lags)
    generator = resolve_generator(generator, torch.device("cpu"))
    num_contexts = num_symbols**order
    symbols = _symbols_of_context(torch.arange(num_contexts), order, num_symbols)  # (S**order, order)
    logits = torch.zeros(num_contexts, num_symbols, dtype=torch.float64)
    for lag in sorted(lags):
        weights = torch.randn(num_symbols, num_symbols, generator=generator, dtype=torch.float64)
        logits += strength * weights[symbols[:, order - lag]]
    return MarkovChain(order, num_symbols, torch.softmax(logits, dim=-1), true_lags=tuple(sorted(lags)))

"""The VMT's metrics: per-token bounds on whole documents' log-likelihood (ELBO, its terms, the IW bound)."""

from __future__ import annotations

import math

from torch import nn

from markovformer.training.metrics.base import LossMetric, WeightedMean
from markovformer.training.tasks.vmt import BOUNDS


class DocumentMetrics(LossMetric):
    """Per token, in nats, weighted by the windows' real tokens: ``elbo``, ``reconstruction``, ``kl``, ``iw_bound``
    (log-likelihood bounds, higher is better), ``loss`` = −ELBO and ``bits_per_token`` = loss / ln 2."""

    def __init__(self) -> None:
        super().__init__()
        self.bounds = nn.ModuleDict({name: WeightedMean() for name in (*BOUNDS, "iw_bound")})

    def update(self, output, batch: dict) -> None:
        raise ValueError("VMT metrics add whole documents' bounds: use update_documents")

    def update_documents(self, elbo, bound=None) -> None:
        """Add one batch of windows: ``elbo`` a ``VMTElbo``, ``bound`` a ``VMTBound`` of the same windows (or None)."""
        tokens = elbo.num_tokens
        for name in BOUNDS:
            self.bounds[name].update(getattr(elbo, name).detach(), weight=tokens)
        if bound is not None:
            self.bounds["iw_bound"].update(bound.per_token.detach(), weight=tokens)

    def compute(self) -> dict[str, float]:
        elbo = float(self.bounds["elbo"].compute())
        results = {"loss": -elbo, "bits_per_token": -elbo / math.log(2), "elbo": elbo}
        for name in ("reconstruction", "kl", "iw_bound"):
            if self.bounds[name].update_count:
                results[name] = float(self.bounds[name].compute())
        return results

"""Scoring whole documents with a VMT: consecutive windows of ``config.window`` tokens, the latent carried from one
to the next, so that the ELBOs (and importance-weighted bounds) of the windows sum to a bound on the document."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch
from torch import Tensor

from markovformer.models.vmt.outputs import VMTBound, VMTElbo
from markovformer.ops.padding import check_attention_mask


class WindowScores(NamedTuple):
    rows: Tensor  # (b,) the documents that reach this window
    elbo: VMTElbo  # of those rows' window
    bounds: dict[int, VMTBound]  # K -> the importance-weighted bound with K samples


@torch.no_grad()
def walk_documents(
    model,
    documents: Tensor,
    attention_mask: Tensor | None = None,
    *,
    window: int | None = None,
    carry: bool = True,
    iw_samples: tuple[int, ...] = (),
    num_samples: int = 1,
    elbo_generator: torch.Generator | None = None,
    iw_generator: torch.Generator | None = None,
) -> Iterator[WindowScores]:
    """The scores of each window of ``documents`` (token ids (N, L) or features (N, L, F), right-padded by
    ``attention_mask``), in order; windows are ``window`` tokens (default ``model.config.window``) and never
    overlap, so every token is scored once. With ``carry`` each window starts from the latent of the one before:
    the ELBO's own path, and for each K, each path from its own of K final latents resampled by importance weight
    (a particle filter's: the summed bounds tend to the document's log-likelihood as K grows); without, every
    window starts from P(x_1). Noise for the ELBO and for the bounds comes from ``elbo_generator`` and
    ``iw_generator`` (they may be the same one), drawn window by window, ELBO first."""
    mask = attention_mask
    if mask is not None:
        check_attention_mask(mask, documents.shape[:2])
    lengths = (
        torch.full((len(documents),), documents.shape[1], device=documents.device)
        if mask is None
        else mask.long().sum(-1)
    )
    window = model.config.window if window is None else window
    state: Tensor | None = None
    iw_states: dict[int, Tensor | None] = dict.fromkeys(iw_samples)
    for start in range(0, int(lengths.max()), window):
        rows = (lengths > start).nonzero().squeeze(-1)
        piece = documents[rows, start : start + window]
        piece_mask = None if mask is None else mask[rows, start : start + window]
        elbo = model.elbo(piece, piece_mask, carry=_rows(state, rows), num_samples=num_samples,
                          generator=elbo_generator)  # fmt: skip
        bounds = {k: model.iw_bound(piece, k, piece_mask, carry=_rows(iw_states[k], rows), generator=iw_generator)
                  for k in iw_samples}  # fmt: skip
        yield WindowScores(rows, elbo, bounds)
        if carry:
            state = _set_rows(state, rows, elbo.carry, len(documents))
            iw_states = {k: _set_rows(iw_states[k], rows, bound.carry, len(documents)) for k, bound in bounds.items()}


def _rows(state: Tensor | None, rows: Tensor) -> Tensor | None:
    return None if state is None else state[..., rows, :]


def _set_rows(state: Tensor | None, rows: Tensor, values: Tensor, count: int) -> Tensor:
    """``state`` ([K,] count, D) (zeros when None) with ``rows`` set to ``values`` ([K,] rows, D): the ELBO's one
    latent a document, or the K particles of an importance-weighted bound."""
    state = values.new_zeros(*values.shape[:-2], count, values.shape[-1]) if state is None else state.clone()
    state[..., rows, :] = values
    return state

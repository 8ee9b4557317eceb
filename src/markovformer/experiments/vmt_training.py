"""The ``vmt`` experiment's baseline and scoring beside the engine (which trains every VMT, ``vmt_runs``):
next-token training for the windowed Transformer, and held-out scores of both models on the same tokens (every
token of the held-out documents)."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.models.markovian_transformer import MarkovianTransformerForCausalLM
from markovformer.models.vmt import VariationalMarkovTransformer
from markovformer.models.vmt.documents import walk_documents


def _window(documents: Tensor, rows: Tensor, starts: Tensor, length: int) -> Tensor:
    """documents (N, L[, F]); one window of ``length`` per row from its start: (B, length[, F])."""
    index = starts[:, None] + torch.arange(length)[None]
    return documents[rows[:, None], index]


def evaluate_vmt(
    model: VariationalMarkovTransformer,
    documents: Tensor,
    *,
    window: int,
    carry: bool,
    iw_samples: tuple[int, ...] = (),
    num_samples: int = 1,
    seed: int = 0,
) -> dict:
    """Bounds on held-out documents (N, L[, F]) cut into consecutive windows (the last may be shorter), all rows
    together. With ``carry`` each window starts from the latent of the one before (the ELBO's path; for an
    importance-weighted bound, each path from its own of K latents resampled by weight: a particle filter), so the
    totals bound log P(document); without, every window starts from P(x_1). Returns nats per token: ``elbo``,
    ``reconstruction``, ``kl``, ``iw_K`` for each K, and ``window_elbo``, the ELBO per token of each window
    position (a list)."""
    was_training = model.training
    model.eval()
    totals = {"elbo": 0.0, "reconstruction": 0.0, "kl": 0.0, **{f"iw_{k}": 0.0 for k in iw_samples}}
    window_elbo = []
    generator = torch.Generator().manual_seed(seed)
    walk = walk_documents(model, documents, window=window, carry=carry, iw_samples=iw_samples,
                          num_samples=num_samples, elbo_generator=generator, iw_generator=generator)  # fmt: skip
    for scores in walk:
        tokens = scores.elbo.num_tokens
        for name in ("elbo", "reconstruction", "kl"):
            totals[name] += float(getattr(scores.elbo, name)) * tokens
        window_elbo.append(float(scores.elbo.elbo))
        for k, bound in scores.bounds.items():
            totals[f"iw_{k}"] += float(bound.per_token) * tokens
    model.train(was_training)
    count = documents.shape[0] * documents.shape[1]
    return {**{name: value / count for name, value in totals.items()}, "window_elbo": window_elbo}


def train_transformer(
    model: MarkovianTransformerForCausalLM,
    documents: Tensor,
    *,
    window: int,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
) -> float:
    """Next-token training on random windows of ``window + 1`` tokens of the documents (N, L): the same tokens per
    step as the VMT's ``batch_size`` windows. AdamW, no weight decay, clipping at 1. Returns seconds."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    count, length = documents.shape
    start_time = time.perf_counter()
    model.train()
    for _ in range(steps):
        rows = torch.randint(0, count, (batch_size,), generator=generator)
        starts = torch.randint(0, length - window, (batch_size,), generator=generator)
        piece = _window(documents, rows, starts, window + 1)
        loss = model(piece, labels=piece).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return time.perf_counter() - start_time


def add_one_frequencies(documents: Tensor, vocab_size: int) -> Tensor:
    """The add-one (Laplace) frequencies of the tokens of ``documents``: (vocab_size,) probabilities."""
    counts = torch.bincount(documents.flatten(), minlength=vocab_size).double() + 1.0
    return counts / counts.sum()


@torch.no_grad()
def evaluate_transformer(model: MarkovianTransformerForCausalLM, documents: Tensor, *, window: int,
                         first_token_probs: Tensor) -> float:  # fmt: skip
    """Cross-entropy per token (nats) of every token of the documents (N, L), as the VMT's bounds: the documents
    cut into consecutive windows, each predicted with the window's tokens before it and the last token of the window
    before; a document's first token, which the Transformer has no context for, by ``first_token_probs`` (the
    training tokens' ``add_one_frequencies``)."""
    model.eval()
    total = -float(first_token_probs.double().log()[documents[:, 0]].sum())
    count = documents.shape[0]
    length = documents.shape[1]
    for start in range(0, length, window):
        context = max(0, start - 1)
        piece = documents[:, context : start + window]
        logits = model(piece).logits[:, :-1]
        targets = piece[:, 1:]
        total += float(F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum"))
        count += targets.numel()
    return total / count


__all__ = ["add_one_frequencies", "evaluate_transformer", "evaluate_vmt", "train_transformer"]

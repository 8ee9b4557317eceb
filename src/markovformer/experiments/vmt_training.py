"""The ``vmt`` experiment's small loops beside the engine: the text's Algorithm 1 for the one VMT the engine cannot
train (part 1's "true P", whose generative part is fixed at the true parameters), next-token training for the
windowed Transformer, and held-out scores of both models on the same tokens. Every other VMT trains through the
engine (``vmt_runs``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.models.markovian_transformer import MarkovianTransformerForCausalLM
from markovformer.models.vmt import VariationalMarkovTransformer
from markovformer.models.vmt.documents import walk_documents


@dataclass
class TrainRecord:
    seconds: float = 0.0
    steps: list[int] | None = None
    evaluations: list[dict] | None = None
    last_kl: float = 0.0  # training KL per token over the last tenth of the steps


def _window(documents: Tensor, rows: Tensor, starts: Tensor, length: int) -> Tensor:
    """documents (N, L[, F]); one window of ``length`` per row from its start: (B, length[, F])."""
    index = starts[:, None] + torch.arange(length)[None]
    return documents[rows[:, None], index]


def train_vmt(
    model: VariationalMarkovTransformer,
    documents: Tensor,
    *,
    window: int,
    steps: int,
    batch_size: int,
    lr: float,
    carry: bool,
    overlap: bool,
    kl_warmup_steps: int,
    seed: int,
    evaluate: Callable[[], dict] | None = None,
    eval_every: int | None = None,
    log: Callable[[str], None] | None = None,
    label: str = "",
) -> TrainRecord:
    """Algorithm 1 on long documents (N, L) token ids or (N, L, F) features: each of ``batch_size`` rows walks a
    document from a random window-aligned start, ``window`` tokens a step (half of it with ``overlap``), its latent
    carried (``carry``) into the next window; at a document's end the row takes a new random document and starts
    without a carry. AdamW (no weight decay), gradient norm clipped at 1, KL weight rising linearly to 1 over
    ``kl_warmup_steps``. ``evaluate()`` runs (in eval mode, no gradients) at step 0, every ``eval_every`` steps and
    at the end. Only parameters with ``requires_grad`` train."""
    count, length = documents.shape[:2]
    if window > length:
        raise ValueError(f"window={window} is longer than the documents ({length} tokens)")
    stride = max(1, window // 2) if overlap else window
    generator = torch.Generator().manual_seed(seed)
    noise = torch.Generator().manual_seed(seed + 1)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    positions_per_document = (length - window) // stride + 1
    rows = torch.randint(0, count, (batch_size,), generator=generator)
    starts = torch.randint(0, positions_per_document, (batch_size,), generator=generator) * stride
    state = torch.zeros(batch_size, model.config.latent_dim)
    carried = torch.zeros(batch_size, dtype=torch.bool)
    record = TrainRecord(steps=[], evaluations=[])
    kls: list[float] = []
    start_time = time.perf_counter()

    def run_evaluation(step: int) -> None:
        if evaluate is None:
            return
        model.eval()
        with torch.no_grad():
            result = evaluate()
        model.train()
        record.steps.append(step)
        record.evaluations.append(result)
        if log is not None:
            shown = ", ".join(f"{k} {v:.4f}" for k, v in result.items() if isinstance(v, float))
            log(f"  {label} step {step}/{steps}: {shown} ({time.perf_counter() - start_time:.0f}s)")

    run_evaluation(0)
    model.train()
    for step in range(1, steps + 1):
        piece = _window(documents, rows, starts, window)
        inputs = {"input_ids": piece} if model.tokens else {"input_features": piece}
        use = carry and bool(carried.any())
        out = model(**inputs, carry=state if use else None, carry_mask=carried if use else None,
                    kl_weight=min(1.0, step / max(1, kl_warmup_steps)), generator=noise,
                    carry_index=stride - 1)  # fmt: skip
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        kls.append(float(out.kl.detach()))
        state, carried = out.carry, torch.full((batch_size,), carry)
        starts = starts + stride
        finished = starts + window > length
        if bool(finished.any()):  # those rows start a new document, without a carry
            rows[finished] = torch.randint(0, count, (int(finished.sum()),), generator=generator)
            starts[finished] = 0
            carried[finished] = False
        if eval_every is not None and (step % eval_every == 0 or step == steps):
            run_evaluation(step)
    record.seconds = time.perf_counter() - start_time
    tail = kls[-max(1, steps // 10) :]
    record.last_kl = sum(tail) / len(tail)
    return record


@torch.no_grad()
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
    importance-weighted bound, a path resampled by weight), so the totals bound log P(document); without, every
    window starts from P(x_1). Returns nats per token: ``elbo``, ``reconstruction``, ``kl``, ``iw_K`` for each K,
    and ``window_elbo``, the ELBO per token of each window position (a list)."""
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


@torch.no_grad()
def evaluate_transformer(model: MarkovianTransformerForCausalLM, documents: Tensor, *, window: int) -> float:
    """Cross-entropy per token (nats) of the documents (N, L) cut into consecutive windows, each predicted with
    the window's tokens before it and the last token of the window before (the first token of a document is not
    scored: it has no context)."""
    model.eval()
    total, count = 0.0, 0
    length = documents.shape[1]
    for start in range(0, length, window):
        context = max(0, start - 1)
        piece = documents[:, context : start + window]
        logits = model(piece).logits[:, :-1]
        targets = piece[:, 1:]
        total += float(F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum"))
        count += targets.numel()
    return total / count


__all__ = ["TrainRecord", "evaluate_transformer", "evaluate_vmt", "train_transformer", "train_vmt"]

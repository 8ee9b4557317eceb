"""The ``scan`` part: forward+backward time of the linear-scan backends against T, and the Scan Markov model's
training throughput in this library's form against the source's.

Scan kinds, each running ``h, h_last = linear_scan(a, b, h0)`` (h_t = a_t ⊙ h_{t-1} + b_t; a, b (B, T, D), h0 (B, D))
and back-propagating dense upstream gradients into a, b and h0 at B=8, D=128:
- ``naive``: the shipped reference loop; its backward is O(T²) (every ``a[:, t]`` gradient is a full-size tensor),
  so the part skips it beyond ``NAIVE_MAX_T``;
- ``naive_unbind``: the same loop over ``unbind`` views, whose backward is O(T): the best a plain autograd loop does;
- ``sequential`` and ``chunked``: the library's backends.

Training throughput (kinds ``library`` and ``seed_style``), in scored characters per second (forward, backward and
an AdamW step) of the Scan Markov model of ``configs/scan_shakespeare.yaml`` (d=128): this library's training
(16 windows of 129 characters, every position predicting its next character from its last n, one n in 2..5 per
step) against the source's (batches of 256 separate n-gram samples, the recurrence run step by step over each
sample's n characters, one target per sample), with the same parameters and label smoothing.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM
from markovformer.ops.scan import DEFAULT_CHUNK_SIZE, linear_scan

SCAN_KINDS = ("naive", "naive_unbind", "sequential", "chunked")
SCAN_SHAPE = dict(batch=8, dim=128, chunk_size=DEFAULT_CHUNK_SIZE)
SCAN_LENGTHS = (256, 1024, 2048, 4096, 16384)
NAIVE_MAX_T = 4096  # the naive loop's O(T²) backward: beyond this it takes minutes
TRAINING_KINDS = ("library", "seed_style")
TRAINING_STEPS = 40  # timed steps per throughput case (quick: 12)


def unbind_loop(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The naive loop over unbind views: one autograd node per step and an O(T) backward."""
    state, states = h0, []
    for gate, inject in zip(a.unbind(1), b.unbind(1), strict=True):
        state = gate * state + inject
        states.append(state)
    return torch.stack(states, dim=1), state


def scan_step(kind: str, seq_len: int, device: str = "cpu"):
    """One forward + backward of the ``kind`` scan at length ``seq_len`` (``SCAN_SHAPE``), gradients cleared."""
    if kind not in SCAN_KINDS:
        raise ValueError(f"unknown scan kind {kind!r}; expected one of {SCAN_KINDS}")
    batch, dim = SCAN_SHAPE["batch"], SCAN_SHAPE["dim"]
    generator = torch.Generator().manual_seed(0)
    a = torch.rand(batch, seq_len, dim, generator=generator).to(device).requires_grad_()
    b = torch.randn(batch, seq_len, dim, generator=generator).to(device).requires_grad_()
    h0 = torch.randn(batch, dim, generator=generator).to(device).requires_grad_()
    upstream = torch.randn(batch, seq_len, dim, generator=generator).to(device)
    upstream_last = torch.randn(batch, dim, generator=generator).to(device)

    def step() -> None:
        if kind == "naive_unbind":
            states, last = unbind_loop(a, b, h0)
        else:
            states, last = linear_scan(a, b, h0, backend=kind, chunk_size=SCAN_SHAPE["chunk_size"])
        torch.autograd.backward((states, last), (upstream, upstream_last))
        for leaf in (a, b, h0):
            leaf.grad = None

    return step


def seed_style_loss(model: ScanMarkovForCausalLM, contexts: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The source's training step on n-gram samples (B, n) -> next characters (B,): the gated recurrence run one
    position at a time over each sample, the last state decoded; the same parameters as ``model``."""
    e = model.embed(contexts) + model.position_embedding(torch.arange(contexts.shape[1]))
    gate, inject = torch.sigmoid(model.gate_proj(e)).chunk(2, dim=-1)
    state = inject[:, 0] * e[:, 0]
    for t in range(1, contexts.shape[1]):
        state = gate[:, t] * state + inject[:, t] * e[:, t]
    logits = model.lm_head(model.decoder(model.norm(state)))
    return F.cross_entropy(logits, targets, label_smoothing=0.1)


def training_throughput(kind: str, steps: int, vocab: int = 66) -> dict:
    """Scored characters per second of ``steps`` training steps (after two warm-up steps) on random characters."""
    if kind not in TRAINING_KINDS:
        raise ValueError(f"unknown scan training kind {kind!r}; expected one of {TRAINING_KINDS}")
    torch.manual_seed(0)
    config = ScanMarkovConfig(vocab_size=vocab, d_model=128, context_mode="markov", order=5, max_positions=5)
    model = ScanMarkovForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(1)
    times, scored = [], 0
    for step in range(steps + 2):
        n = 2 + step % 4
        if kind == "library":
            ids = torch.randint(1, vocab, (16, 129), generator=generator)
            began = time.perf_counter()
            loss = model(ids, labels=ids, order=n, label_smoothing=0.1).loss
            targets = 16 * 128
        else:
            samples = torch.randint(1, vocab, (256, n + 1), generator=generator)
            began = time.perf_counter()
            loss = seed_style_loss(model, samples[:, :n], samples[:, n])
            targets = 256
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step >= 2:
            times.append(time.perf_counter() - began)
            scored += targets
    return {"seconds": sum(times), "chars_per_second": scored / sum(times), "targets_per_step": scored // steps}

"""minGRU on the linear scan: pinned to the loop of its definition (outputs and all gradients, both directions,
with and without padding) on every scan backend; masked steps leave the carried state unchanged."""

from __future__ import annotations

import pytest
import torch

from markovformer.ops.scan import min_gru, min_gru_naive

DTYPE = torch.float64


def _inputs(batch: int, length: int, dim: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    # Logits up to ±8 reach gates near 0 and 1, where 1 - σ(x) loses digits if formed naively.
    gate_logits = (4 * torch.randn(batch, length, dim, generator=g, dtype=DTYPE)).requires_grad_()
    candidates = torch.randn(batch, length, dim, generator=g, dtype=DTYPE).requires_grad_()
    return gate_logits, candidates


def _mask(batch: int, length: int, pattern: str):
    mask = torch.ones(batch, length, dtype=torch.long)
    if pattern == "right":
        mask[1, length // 2 :] = 0
        mask[2, 1:] = 0
    elif pattern == "holes":  # padding anywhere: the op does not need right padding
        g = torch.Generator().manual_seed(5)
        mask = (torch.rand(batch, length, generator=g) > 0.3).long()
    return None if pattern == "none" else mask


def _outputs_and_grads(fn, gate_logits, candidates, mask, reverse):
    states = fn(gate_logits, candidates, mask, reverse)
    upstream = torch.randn(states.shape, generator=torch.Generator().manual_seed(9), dtype=DTYPE)
    grads = torch.autograd.grad((states * upstream).sum(), [gate_logits, candidates])
    return states.detach(), *grads


@pytest.mark.parametrize("backend", ["naive", "sequential", "chunked"])
@pytest.mark.parametrize("pattern", ["none", "right", "holes"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length", [1, 7, 33])
def test_min_gru_matches_loop_outputs_and_gradients(backend, pattern, reverse, length):
    gate_logits, candidates = _inputs(3, length, 4)
    mask = _mask(3, length, pattern)

    def fast(*args):
        return min_gru(*args, backend=backend)

    got = _outputs_and_grads(fast, gate_logits, candidates, mask, reverse)
    expected = _outputs_and_grads(min_gru_naive, gate_logits, candidates, mask, reverse)
    for name, x, y in zip(("states", "grad_gate_logits", "grad_candidates"), got, expected, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12, msg=lambda m, name=name: f"{name}: {m}")


def test_loop_matches_closed_form():
    """h_t = Σ_s z_s h̃_s Π_{r=s+1..t} (1 - z_r): the reference itself against the unrolled sum."""
    gate_logits, candidates = (t.detach() for t in _inputs(2, 5, 3))
    z = torch.sigmoid(gate_logits)
    states = min_gru_naive(gate_logits, candidates)
    for t in range(5):
        expected = sum(z[:, s] * candidates[:, s] * (1 - z[:, s + 1 : t + 1]).prod(1) for s in range(t + 1))
        torch.testing.assert_close(states[:, t], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reverse", [False, True])
def test_masked_steps_never_change_the_carried_state(reverse):
    """A row with padding gives, at its real steps, the states of the same row with the padding cut out."""
    gate_logits, candidates = (t.detach() for t in _inputs(1, 9, 3))
    mask = torch.tensor([[1, 0, 1, 1, 0, 0, 1, 1, 0]])
    real = mask[0].bool()
    padded = min_gru(gate_logits, candidates, mask, reverse=reverse)
    alone = min_gru(gate_logits[:, real], candidates[:, real], reverse=reverse)
    torch.testing.assert_close(padded[:, real], alone, rtol=1e-12, atol=1e-12)


def test_bad_shapes_are_named():
    gate_logits, candidates = _inputs(2, 4, 3)
    with pytest.raises(ValueError, match=r"gate_logits must be \(B, T, D\), got shape \(4, 3\)"):
        min_gru(gate_logits[0], candidates[0])
    with pytest.raises(ValueError, match="candidates must match"):
        min_gru(gate_logits, candidates[:, :3])
    with pytest.raises(ValueError, match="mask must be"):
        min_gru(gate_logits, candidates, torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"resets must be \(B, T\) = \(2, 4\), got shape \(2, 5\)"):
        min_gru(gate_logits, candidates, resets=torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"initial_state must be \(B, D\) = \(2, 3\), got shape \(2, 5\)"):
        min_gru(gate_logits, candidates, initial_state=torch.zeros(2, 5, dtype=DTYPE))

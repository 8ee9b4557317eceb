"""WKV: the stable parallel form (``wkv_scan``) and the stable recurrence against the dense formula, forward and
gradients, causal and bidirectional, and where the dense formula overflows."""

from __future__ import annotations

import pytest
import torch
from twins import assert_same_gradients, randn

from markovformer.ops.wkv import wkv_naive, wkv_recurrent, wkv_scan

LENGTH = 11


def _wkv_inputs(seed: int = 0, length: int = LENGTH, scale: float = 2.0):
    w = torch.exp(randn(6, seed=seed)).requires_grad_()
    u = randn(6, seed=seed + 1).requires_grad_()
    k = (scale * randn(3, length, 6, seed=seed + 2)).requires_grad_()
    v = randn(3, length, 6, seed=seed + 3).requires_grad_()
    return w, u, k, v


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_stable_wkv_equals_naive_formula(causal):
    inputs = _wkv_inputs()
    naive = wkv_naive(*inputs, causal=causal)
    scan = wkv_scan(*inputs, causal=causal)
    torch.testing.assert_close(scan, naive, rtol=1e-12, atol=1e-12)
    assert_same_gradients(scan, naive, list(inputs), rtol=1e-10, atol=1e-12)
    if causal:
        torch.testing.assert_close(wkv_recurrent(*inputs), naive, rtol=1e-12, atol=1e-12)
    single = wkv_scan(*(x.float() for x in inputs), causal=causal)
    assert single.dtype == torch.float32
    torch.testing.assert_close(single.double(), naive, rtol=1e-5, atol=1e-5)


def test_stable_wkv_survives_keys_where_the_naive_formula_overflows():
    w, u, k, v = (x.detach() for x in _wkv_inputs(length=300))
    reference = wkv_naive(w, u, k, v)
    shifted = k + 1000.0  # WKV is invariant to a common shift of the keys; e^1000 overflows even in float64
    assert not torch.isfinite(wkv_naive(w, u, shifted, v)).all()
    torch.testing.assert_close(wkv_scan(w, u, shifted, v), reference, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(wkv_recurrent(w, u, shifted, v), reference, rtol=1e-9, atol=1e-9)
    fast = torch.full_like(w, 50.0)  # decays so fast that e^{-(t-1-i)w} underflows: wkv ≈ the last two tokens
    out = wkv_scan(fast, u, k.float(), v.float())
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), wkv_naive(fast, u, k, v), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_padded_wkv_is_each_rows_real_run_alone_and_zero_at_padding(causal):
    """Left, right and both-end padding: real tokens read as the formula on their run alone, padding reads 0."""
    w, u, k, v = (x.detach() for x in _wkv_inputs(seed=7))
    runs = [(0, LENGTH - 4), (3, LENGTH), (2, LENGTH - 3)]  # [start, end) of each row's real tokens
    mask = torch.zeros(3, LENGTH)
    for row, (start, end) in enumerate(runs):
        mask[row, start:end] = 1
    out = wkv_scan(w, u, k, v, causal=causal, attention_mask=mask)
    for row, (start, end) in enumerate(runs):
        alone = wkv_naive(w, u, k[row : row + 1, start:end], v[row : row + 1, start:end], causal=causal)
        torch.testing.assert_close(out[row : row + 1, start:end], alone, rtol=1e-12, atol=1e-12)
    assert torch.equal(out[mask == 0], torch.zeros_like(out[mask == 0]))


@pytest.mark.parametrize("length", [2, 7, 13])  # at T = 1 the output does not depend on w
def test_stable_recurrence_gradients_equal_naive_at_odd_lengths(length):
    inputs = _wkv_inputs(seed=4, length=length)
    recurrent, naive = wkv_recurrent(*inputs), wkv_naive(*inputs)
    torch.testing.assert_close(recurrent, naive, rtol=1e-12, atol=1e-12)
    assert_same_gradients(recurrent, naive, list(inputs), rtol=1e-10, atol=1e-12)


def test_wkv_names_a_bad_input():
    w, u, k, v = (x.detach() for x in _wkv_inputs())
    with pytest.raises(ValueError, match=r"w must be one value per channel, \(C,\) = \(6,\); got shape \(5,\)"):
        wkv_scan(w[:5], u, k, v)
    with pytest.raises(ValueError, match=r"attention_mask must be \(B, T\) = \(3, 11\), got shape \(3, 12\)"):
        wkv_scan(w, u, k, v, attention_mask=torch.ones(3, 12))
    with pytest.raises(ValueError, match=r"initial_state must be .* \(3, 6\); got shapes .*\(3,\)\]"):
        wkv_recurrent(w, u, k, v, initial_state=(k[:, 0], k[:, 0], k[:, 0, 0]))
    with pytest.raises(ValueError, match=r"k must be \(B, T, C\), got shape \(11, 6\)"):
        wkv_scan(w, u, k[0], v[0])
    with pytest.raises(ValueError, match=r"v must match k \(3, 11, 6\) \(B, T, C\), got shape \(3, 10, 6\)"):
        wkv_recurrent(w, u, k, v[:, :10])
    with pytest.raises(ValueError, match="bidirectional WKV reads the whole sequence: it carries no state"):
        wkv_scan(w, u, k, v, causal=False, output_final_state=True)
    with pytest.raises(ValueError, match=r"packed documents \(segment_ids\) carry no WKV state"):
        wkv_scan(w, u, k, v, output_final_state=True, segment_ids=torch.zeros(3, LENGTH, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_padded_keys_far_above_the_real_ones_do_not_poison_the_row(dtype):
    """A padded key (0 after the layer zeroes padding) far above every real key (here -1000): its weight e^{k - top}
    overflowed, and zero_padding's product made it NaN, which the scan spread over the whole row."""
    w, u, k, v = (x.detach() for x in _wkv_inputs(seed=3))
    k = k - 1000.0
    mask = torch.ones(3, LENGTH)
    mask[1, :-2] = 0  # left padding: one row with two real tokens
    k[1, :-2] = 0.0
    leaves = [x.to(dtype).requires_grad_() for x in (w, u, k, v)]
    out = wkv_scan(*leaves, attention_mask=mask)
    alone = wkv_naive(w, u, k[1:2, -2:] + 1000.0, v[1:2, -2:])  # WKV is invariant to a common shift of the keys
    torch.testing.assert_close(out[1:2, -2:].double(), alone, rtol=1e-5, atol=1e-5)
    assert torch.equal(out[1, :-2], torch.zeros_like(out[1, :-2]))
    grads = torch.autograd.grad(out.sum(), leaves)
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize(("dtype", "gap"), [(torch.float32, 120.0), (torch.float64, 800.0)])
def test_a_bonus_far_below_the_decay_still_gives_the_first_real_token_its_own_value(dtype, gap):
    """At a row's first real token nothing real lies before it (``has_real_before``, strictly before): its output is
    its own v whatever u is. With the history taken as inclusive, its reference exponent became k + w, and where the
    bonus u lies ``gap`` below w, e^{u + k - top} underflowed: the token gave 0 instead of v (measured)."""
    w, _, k, v = (x.detach().to(dtype) for x in _wkv_inputs(seed=4, length=6))
    u = w - gap
    mask = torch.ones(3, 6)
    mask[1, :2] = 0  # left padding: row 1's first real token is at t = 2
    out = wkv_scan(w, u, k, v, attention_mask=mask)
    torch.testing.assert_close(out[:, 0][[0, 2]], v[:, 0][[0, 2]], rtol=0, atol=0)
    torch.testing.assert_close(out[1, 2], v[1, 2], rtol=0, atol=0)
    torch.testing.assert_close(out[[0, 2]], wkv_recurrent(w, u, k[[0, 2]], v[[0, 2]]), rtol=1e-6, atol=1e-6)

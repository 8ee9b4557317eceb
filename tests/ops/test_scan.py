"""The linear scan: every backend pinned to the naive loop (outputs, final state, all gradients), the loop pinned
to the closed form, the windowed variant pinned to per-window recomputation, and the dispatchers' errors."""

from __future__ import annotations

import pytest
import torch

from markovformer.ops.scan import (
    linear_scan,
    linear_scan_chunked,
    linear_scan_naive,
    window_offsets,
    windowed_linear_scan,
    windowed_linear_scan_naive,
)

DTYPE = torch.float64


def _inputs(batch: int, length: int, dim: int, with_h0: bool, seed: int = 0):
    """a in [0, 1) with about a fifth of the entries exactly 0; b and h0 standard normal; all leaves, float64."""
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(batch, length, dim, generator=g, dtype=DTYPE)
    a = torch.where(torch.rand(a.shape, generator=g, dtype=DTYPE) < 0.2, torch.zeros_like(a), a)
    b = torch.randn(batch, length, dim, generator=g, dtype=DTYPE)
    h0 = torch.randn(batch, dim, generator=g, dtype=DTYPE) if with_h0 else None
    return [t.requires_grad_() if t is not None else None for t in (a, b, h0)]


def _outputs_and_grads(scan, a, b, h0, seed: int = 1):
    """(h, h_last, grad a, grad b[, grad h0]) under random upstream gradients for both outputs."""
    h, last = scan(a, b, h0)
    g = torch.Generator().manual_seed(seed)
    loss = (h * torch.randn(h.shape, generator=g, dtype=DTYPE)).sum()
    loss = loss + (last * torch.randn(last.shape, generator=g, dtype=DTYPE)).sum()
    leaves = [t for t in (a, b, h0) if t is not None]
    # T = 1 without h0 does not depend on a at all: its gradient is zero, which autograd reports as unused.
    grads = torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True)
    return (h.detach(), last.detach(), *grads)


def _assert_all_close(got, expected):
    for name, x, y in zip(("h", "h_last", "grad_a", "grad_b", "grad_h0"), got, expected, strict=False):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12, msg=lambda m, name=name: f"{name}: {m}")


def test_naive_matches_closed_form():
    a, b, h0 = (t.detach() for t in _inputs(2, 6, 3, with_h0=True))
    h, last = linear_scan_naive(a, b, h0)
    for t in range(6):
        expected = a[:, : t + 1].prod(1) * h0
        for s in range(t + 1):
            expected = expected + a[:, s + 1 : t + 1].prod(1) * b[:, s]
        torch.testing.assert_close(h[:, t], expected, rtol=1e-12, atol=1e-12)
    assert torch.equal(last, h[:, -1])


@pytest.mark.parametrize("backend", ["sequential", "chunked", "auto"])
@pytest.mark.parametrize("length", [1, 2, 3, 4, 5, 13, 17, 40, 97])
@pytest.mark.parametrize("with_h0", [False, True])
def test_backends_match_naive(backend, length, with_h0):
    a, b, h0 = _inputs(3, length, 5, with_h0, seed=length)
    expected = _outputs_and_grads(lambda *x: linear_scan(*x, backend="naive"), a, b, h0)
    got = _outputs_and_grads(lambda *x: linear_scan(*x, backend=backend, chunk_size=4), a, b, h0)
    _assert_all_close(got, expected)


@pytest.mark.parametrize("chunk_size", [2, 3, 5, 8, 64])
def test_chunked_matches_naive_for_any_chunk_size(chunk_size):
    a, b, h0 = _inputs(2, 37, 4, with_h0=True, seed=chunk_size)
    expected = _outputs_and_grads(linear_scan_naive, a, b, h0)
    got = _outputs_and_grads(lambda *x: linear_scan_chunked(*x, chunk_size=chunk_size), a, b, h0)
    _assert_all_close(got, expected)


@pytest.mark.parametrize("backend", ["sequential", "chunked"])
def test_zero_gate_cuts_the_past(backend):
    """a_t = 0 resets the state: h_t = b_t exactly, and nothing before t gets a gradient from h after t."""
    a, b, h0 = (t.detach() for t in _inputs(2, 9, 3, with_h0=True, seed=5))
    a = a.clamp_min(0.5)
    a[:, 4] = 0
    a, b, h0 = (t.requires_grad_() for t in (a, b, h0))
    h, _ = linear_scan(a, b, h0, backend=backend, chunk_size=3)
    assert torch.equal(h[:, 4], b[:, 4])
    grad_a, grad_b, grad_h0 = torch.autograd.grad(h[:, 6:].sum(), (a, b, h0))
    assert torch.all(grad_b[:, :4] == 0) and torch.all(grad_a[:, :4] == 0) and torch.all(grad_h0 == 0)
    assert torch.all(grad_b[:, 4:7] != 0)


def test_sequential_gradcheck():
    a, b, h0 = _inputs(2, 6, 3, with_h0=True, seed=7)
    assert torch.autograd.gradcheck(lambda *x: linear_scan(*x, backend="sequential"), (a, b, h0))


def test_auto_picks_sequential_on_cpu():
    a, b, _ = _inputs(1, 4, 2, with_h0=False)
    h, _ = linear_scan(a, b)
    assert type(h.grad_fn).__name__ == "_SequentialScanBackward"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a, b, h0: (a[0], b, h0, {}), "a must be (B, T, D)"),
        (lambda a, b, h0: (a, b[:, :-1], h0, {}), "b must match a"),
        (lambda a, b, h0: (a, b, h0[:, :-1], {}), "h0 must be (B, D)"),
        (lambda a, b, h0: (a[:, :0], b[:, :0], h0, {}), "a must have at least one time step"),
        (lambda a, b, h0: (a.long(), b, h0, {}), "a must be a floating-point tensor"),
        (lambda a, b, h0: (a, b.float(), h0, {}), "b has dtype torch.float32 but a has torch.float64"),
        (lambda a, b, h0: (a, b, h0.float(), {}), "h0 has dtype torch.float32 but a has torch.float64"),
        (lambda a, b, h0: (a, b, h0, {"backend": "cuda"}), "backend='cuda'"),
        (lambda a, b, h0: (a, b, h0, {"backend": "chunked", "chunk_size": 1}), "chunk_size=1"),
    ],
)
def test_linear_scan_errors_name_the_argument(change, message):
    a, b, h0 = (t.detach() for t in _inputs(2, 5, 3, with_h0=True))
    a, b, h0, options = change(a, b, h0)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        linear_scan(a, b, h0, **options)


@pytest.mark.parametrize("backend", ["naive", "sequential", "chunked"])
def test_under_autocast_mixed_dtypes_run_in_float32(backend):
    """Mixed precision (Lightning's bf16-mixed) hands the scan a bfloat16 gate beside a float32 input: under an active
    autocast the recurrence runs in float32 on the inputs as given, exactly as a float32 call outside it; outside
    autocast the same mix stays an error (the errors test above)."""
    a, b, h0 = (t.detach() for t in _inputs(2, 9, 3, with_h0=True))
    a, b, h0 = a.bfloat16(), b.float(), h0.float()
    expected = linear_scan(a.float(), b, h0, backend=backend)
    windowed_expected = windowed_linear_scan(a.float(), b, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = linear_scan(a, b, h0, backend=backend)
        windowed = windowed_linear_scan(a, b, 3)
    for x, y in zip(got, expected, strict=True):
        assert x.dtype == torch.float32
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    torch.testing.assert_close(windowed, windowed_expected, rtol=0, atol=0)


def test_window_offsets_convention():
    source, position, present = window_offsets(4, 3)
    assert source.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3]]
    assert present.tolist() == [[False, False, True], [False, True, True], [True, True, True], [True, True, True]]
    assert position.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [0, 1, 2]]


@pytest.mark.parametrize("window", [1, 2, 3, 5])
def test_windowed_naive_is_the_scan_of_each_window(window):
    a, b, _ = (t.detach() if t is not None else None for t in _inputs(2, 7, 3, with_h0=False, seed=window))
    got = windowed_linear_scan_naive(a, b, window)
    for t in range(7):
        start = max(0, t - window + 1)
        torch.testing.assert_close(got[:, t], linear_scan_naive(a[:, start : t + 1], b[:, start : t + 1])[1])
    if window >= 7:
        torch.testing.assert_close(got, linear_scan_naive(a, b)[0])


def _per_window(x: torch.Tensor, window: int) -> torch.Tensor:
    """(B, T, D) shared inputs -> (B, T, window, D) per-window inputs holding the same values."""
    source, _, _ = window_offsets(x.shape[1], window)
    return x[:, source]


@pytest.mark.parametrize("per_window", [False, True])
@pytest.mark.parametrize("window", [1, 2, 3, 5])
@pytest.mark.parametrize("length", [1, 2, 4, 9])
def test_windowed_offsets_matches_naive(per_window, window, length):
    a, b, _ = _inputs(2, length, 3, with_h0=False, seed=10 * window + length)
    if per_window:
        g = torch.Generator().manual_seed(length)
        a = torch.rand(2, length, window, 3, generator=g, dtype=DTYPE).requires_grad_()
        b = torch.randn(2, length, window, 3, generator=g, dtype=DTYPE).requires_grad_()
    upstream = torch.randn(2, length, 3, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    results = []
    for backend in ("naive", "offsets"):
        h = windowed_linear_scan(a, b, window, backend=backend)
        grads = torch.autograd.grad((h * upstream).sum(), (a, b), allow_unused=True, materialize_grads=True)
        results.append((h.detach(), *grads))
    for got, expected in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_windowed_per_window_form_of_shared_inputs_is_the_shared_result():
    a, b, _ = (t.detach() if t is not None else None for t in _inputs(2, 8, 3, with_h0=False, seed=4))
    shared = windowed_linear_scan(a, b, 3)
    torch.testing.assert_close(windowed_linear_scan(_per_window(a, 3), _per_window(b, 3), 3), shared)


@pytest.mark.parametrize(
    "args, message",
    [
        (lambda a, b: (a, b, 0, {}), "window=0"),
        (lambda a, b: (a, b, 2, {"backend": "chunked"}), "backend='chunked'"),
        (lambda a, b: (a[0], b[0], 2, {}), "a must be (B, T, D) or (B, T, window, D)"),
        (lambda a, b: (a, b[:, :-1], 2, {}), "b must match a"),
        (lambda a, b: (a.unsqueeze(2), b.unsqueeze(2), 2, {}), "a is per-window"),
        (lambda a, b: (a, b.float(), 2, {}), "b has dtype"),
        (lambda a, b: (a[:, :0], b[:, :0], 2, {}), "a must have at least one time step (T >= 1), got shape (2, 0, 3)"),
    ],
)
def test_windowed_errors_name_the_argument(args, message):
    a, b, _ = (t.detach() if t is not None else None for t in _inputs(2, 5, 3, with_h0=False))
    a, b, window, options = args(a, b)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        windowed_linear_scan(a, b, window, **options)


def test_the_sequential_loops_step_count_is_the_one_its_documents_give():
    """The module, the package and the README said "about 3√(T/2) Python steps (T = 2048: 95)": with blocks of C ≈
    √(T/2) there are n ≈ 2C of them, and the three loops take C - 1, n - 1 and C steps, 4√(T/2) in all (126 at
    T = 2048). Counted here as the loops' own in-place updates (one per step) in the forward scan."""
    import math
    import re
    from pathlib import Path

    from torch.utils._python_dispatch import TorchDispatchMode

    import markovformer.ops.scan as package
    from markovformer.ops.scan import sequential

    class Steps(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            # loop 1: addcmul_, loop 2: addcmul(out=), loop 3: mul_ then add_ (one of them counted)
            self.count += func in (torch.ops.aten.addcmul_.default, torch.ops.aten.addcmul.out,
                                   torch.ops.aten.mul_.Tensor)  # fmt: skip
            return func(*args, **(kwargs or {}))

    length = 2048
    a, b = torch.rand(1, length, 4), torch.randn(1, length, 4)
    with Steps() as steps:
        sequential._scan(a, b, None)
    assert abs(steps.count - 4 * math.sqrt(length / 2)) <= 4
    documented = int(re.search(r"T = 2048: (\d+) instead", sequential.__doc__).group(1))
    assert documented == steps.count
    assert "about 4√(T/2)" in package.__doc__
    performance = (Path(__file__).parents[2] / "docs/performance.md").read_text(encoding="utf-8")
    assert "loops over about\n4√(T/2) blocked steps" in performance

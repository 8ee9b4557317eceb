"""The hand-written backwards (``ops.first_order``) under ``create_graph=True``, as a gradient penalty runs them:
a clear error naming the function, never an ``out=`` crash inside it nor a second derivative that silently leaves
out its share (``once_differentiable`` did, under ``torch.autograd.grad(penalty, inputs)``: 97 % off through the
Scan mixer). Each function's first derivative, without a graph, still equals its reference's."""

from __future__ import annotations

import pytest
import torch

from markovformer.ops.lag_bias_attention import lag_bias_attention
from markovformer.ops.scan import linear_scan
from markovformer.ops.swiglu import swiglu_lean, swiglu_naive


def _tensors(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes]


def _attention(backend, window):
    def run(q, k, v, past):
        return lag_bias_attention(q, k, v, past, window=window, causal=True, backend=backend)

    return run, ((1, 2, 6, 3), (1, 2, 6, 3), (1, 2, 6, 3), (1, 2, 6, 2))


def _scan(backend):
    def run(a, b, h0):
        return linear_scan(torch.sigmoid(a), b, h0, backend=backend)[0]

    return run, ((2, 7, 3), (2, 7, 3), (2, 3))


def _swiglu(lean):
    return (swiglu_lean if lean else swiglu_naive), ((5, 4), (12, 4), (4, 6))


CASES = {  # name in the error: (the hand-written path, its reference with every derivative)
    "banded lag-bias attention": (_attention("banded", 2), _attention("naive", 2)),
    "chunked lag-bias attention": (_attention("chunked", None), _attention("naive", None)),
    "sequential linear scan": (_scan("sequential"), _scan("naive")),
    "lean SwiGLU": (_swiglu(True), _swiglu(False)),
}


@pytest.mark.parametrize("name", CASES)
def test_create_graph_raises_naming_the_function_and_plain_gradients_match(name):
    (fast, shapes), (reference, _) = CASES[name]
    inputs = _tensors(*shapes)
    with pytest.raises(RuntimeError, match=f"{name} has no second derivative"):
        torch.autograd.grad(fast(*inputs).pow(2).sum(), inputs, create_graph=True)
    got = torch.autograd.grad(fast(*inputs).pow(2).sum(), inputs)
    expected = torch.autograd.grad(reference(*inputs).pow(2).sum(), inputs)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)
    # the reference's second derivative exists and is not zero: what the error sends the user to
    first = torch.autograd.grad(reference(*inputs).pow(2).sum(), inputs, create_graph=True)
    second = torch.autograd.grad(sum(f.pow(2).sum() for f in first), inputs)
    assert all(s.abs().sum() > 0 for s in second)

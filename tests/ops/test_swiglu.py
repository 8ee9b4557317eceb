"""The lean SwiGLU pinned to the plain composition on outputs and every gradient, and the memory it was built to
save; the layer picks the composition where dropout or autocast need it."""

from __future__ import annotations

import pytest
import torch

from markovformer.layers.ffn import SwiGLU
from markovformer.ops.swiglu import swiglu_lean, swiglu_naive

DTYPE = torch.float64


def _inputs(shape: tuple[int, ...], hidden: int, out: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=DTYPE)
    gate_up = torch.randn(2 * hidden, shape[-1], generator=g, dtype=DTYPE) / shape[-1] ** 0.5
    down = torch.randn(out, hidden, generator=g, dtype=DTYPE) / hidden**0.5
    return [t.requires_grad_() for t in (x, gate_up, down)]


def _result_and_grads(fn, tensors, needs):
    out = fn(*tensors)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    leaves = [t for t, need in zip(tensors, needs, strict=True) if need]
    return (out.detach(), *torch.autograd.grad((out * upstream).sum(), leaves))


@pytest.mark.parametrize("shape", [(7, 5), (2, 9, 6), (1, 1, 3, 4), (3, 400, 6)])  # the last: 1200 rows, two passes
@pytest.mark.parametrize("needs", [(True, True, True), (True, False, False), (False, True, True)])
def test_lean_matches_naive(shape, needs):
    tensors = _inputs(shape, hidden=11, out=3)
    for tensor, need in zip(tensors, needs, strict=True):
        tensor.requires_grad_(need)
    expected = _result_and_grads(swiglu_naive, tensors, needs)
    got = _result_and_grads(swiglu_lean, tensors, needs)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_lean_saves_half_the_activations():
    """The naive composition saves x, the projections, SiLU(gate) and the product: 1 + 2H + H + H floats per token
    (plus weights); the lean path x and the projections: 1 + 2H."""
    tokens, width, hidden = 64, 8, 32
    tensors = _inputs((tokens, width), hidden=hidden, out=width)

    def saved_bytes(fn) -> int:
        storages = {}

        def pack(tensor):
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            fn(*tensors)
        weights = sum(t.untyped_storage().nbytes() for t in tensors[1:])
        return sum(storages.values()) - weights

    per_token = DTYPE.itemsize * tokens
    assert saved_bytes(swiglu_naive) == per_token * (width + 4 * hidden)
    assert saved_bytes(swiglu_lean) == per_token * (width + 2 * hidden)


def test_layer_uses_lean_path_and_keeps_dropout():
    torch.manual_seed(0)
    layer = SwiGLU(8, mult=2).double()
    x = torch.randn(3, 5, 8, dtype=DTYPE)
    expected = swiglu_naive(x, layer.gate_up.weight, layer.down.weight)
    out = layer(x)
    assert type(out.grad_fn).__name__ == "_LeanSwiGLUBackward"
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    dropped = SwiGLU(8, mult=2, dropout=0.5).double().train()
    assert type(dropped(x).grad_fn).__name__ != "_LeanSwiGLUBackward"
    assert torch.equal(dropped.eval()(x), swiglu_lean(x, dropped.gate_up.weight, dropped.down.weight))


def test_layer_compiles_and_exports_as_the_composition():
    """Inside torch.compile and torch.export the layer runs the plain composition: the lean function's out=
    products broke the graph around every FFN (fullgraph=True raised) and made torch.export fail on any model."""
    torch.manual_seed(0)
    layer = SwiGLU(8, mult=2).double()
    x = torch.randn(3, 5, 8, dtype=DTYPE, requires_grad=True)
    expected = _result_and_grads(lambda x, *w: layer(x), (x, *layer.parameters()), (True, True, True))
    compiled = torch.compile(layer, backend="eager", fullgraph=True)
    got = _result_and_grads(lambda x, *w: compiled(x), (x, *layer.parameters()), (True, True, True))
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    exported = torch.export.export(layer, (x.detach(),), strict=False).module()
    other = torch.randn(3, 5, 8, dtype=DTYPE)
    torch.testing.assert_close(exported(other), swiglu_naive(other, layer.gate_up.weight, layer.down.weight),
                               rtol=1e-12, atol=1e-12)  # fmt: skip

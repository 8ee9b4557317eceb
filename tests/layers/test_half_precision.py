"""Layers cast to bf16 (``model.to(torch.bfloat16)``) over long sequences: the quantities whose rounding grows with
the position (decays' prefix sums, RetNet's decays, rotary frequencies, S4D's poles) stay float32, so what remains
is rounding, in the full forward and in decoding."""

from __future__ import annotations

import pytest
import torch

from markovformer.layers.decay_attention import AlibiAttention, ForgettingAttention
from markovformer.layers.registry import build_attention


def _in_bfloat16(layer, x, pieces: list[int]):
    """The float32 layer's output of x, then the layer cast to bf16: its full forward, and its decoding of x in
    pieces of those lengths through one state, both as float32."""
    with torch.no_grad():
        reference = layer(x)
        half = layer.to(torch.bfloat16)
        full = half(x.bfloat16()).float()
        state: dict = {}
        starts = [sum(pieces[:index]) for index in range(len(pieces))]
        decoded = torch.cat([half(x[:, start : start + size].bfloat16(), state=state)
                             for start, size in zip(starts, pieces, strict=True)], dim=1).float()  # fmt: skip
    return reference, full, decoded


def _error(output, reference, positions: slice) -> float:
    """The relative error of output at those positions."""
    return float((output[:, positions] - reference[:, positions]).norm() / reference[:, positions].norm())


@pytest.mark.parametrize("layer_class", [AlibiAttention, ForgettingAttention])
def test_a_layer_cast_to_bfloat16_keeps_its_decay_over_long_sequences(layer_class):
    """The decay between positions t and j is a difference of prefix sums of log forget gates: in bf16 a prefix near
    -1024 is stored in steps of 8, so neighbours lost their decay (0.34-0.42 relative error at T = 2,048, growing
    with the position). The gates and their sums are float32 whatever the layer's dtype: only rounding remains,
    in the full forward and in decoding from the cache."""
    torch.manual_seed(1)
    reference, full, decoded = _in_bfloat16(layer_class(d_model=64, n_heads=4).eval(), torch.randn(1, 1024, 64),
                                            [16] + [1] * 1008)  # fmt: skip
    for output in (full, decoded):
        assert _error(output, reference, slice(768, 1024)) < 0.02


def test_retnet_cast_to_bfloat16_decodes_as_its_full_forward():
    """RetNet's decays γ_h = 1 - 2^(-5-h) lie within 2^-12 of 1: the one-token recurrence held them and its state
    in bf16, where the slowest four heads' γ is exactly 1, and decoding drifted 0.16 from the full forward by 1,000
    tokens (a review's measurement). Decay and state are float32 now: decoding is as close as the full forward."""
    torch.manual_seed(0)
    layer = build_attention("retnet", d_model=64, n_heads=8, causal=True, rotary=False).eval()
    # a chunk of 24 after a step: the float32 state enters the chunkwise path
    reference, full, decoded = _in_bfloat16(layer, torch.randn(1, 768, 64), [16, 1, 24] + [1] * 727)
    full_error, decoded_error = (_error(output, reference, slice(640, 768)) for output in (full, decoded))
    assert full_error < 0.03 and decoded_error < 2 * full_error, (full_error, decoded_error)


@pytest.mark.parametrize("kind", ["softmax", "s4d", "h3", "hyena"])
def test_a_layer_cast_to_bfloat16_keeps_its_rotary_frequencies_and_ssm_poles_in_float32(kind):
    """Rotary frequencies and S4D's poles and steps, rounded to bf16, bend the angles more with every position:
    0.08 off at positions 3,000-4,000 for rotary softmax, 0.17-0.26 for S4D and H3 (a review's measurements); so do
    Hyena's filter frequencies and decays. They keep float32 through the cast (``KeepsFloat32``), and float64 casts
    still widen them; S4D's are made float32 under a bf16 default dtype too (transformers' bf16 loading)."""
    torch.manual_seed(0)
    layer = build_attention(kind, d_model=64, n_heads=4, causal=True, rotary=kind == "softmax").eval()
    x = torch.randn(1, 2048, 64)
    with torch.no_grad():
        reference = layer(x)
        half = layer.to(torch.bfloat16)
        output = half(x.bfloat16()).float()
    names = ("inv_freq", "log_dt", "log_a_real", "a_imag", "c", "angular", "decay")
    kept = [tensor for name, tensor in [*half.named_parameters(), *half.named_buffers()]
            if name.rsplit(".", 1)[-1] in names]  # fmt: skip
    assert kept and all(tensor.dtype == torch.float32 for tensor in kept)
    assert all(tensor.dtype == torch.float64 for tensor in half.double().parameters())
    late = slice(1536, 2048)
    error = (output[:, late] - reference[:, late]).norm() / reference[:, late].norm()
    assert error < 0.02, float(error)


def test_s4ds_poles_and_steps_are_made_float32_under_a_half_precision_default_dtype():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        layer = build_attention("s4d", d_model=16, n_heads=2, causal=True, rotary=False)
    finally:
        torch.set_default_dtype(previous)
    assert {name: p.dtype for name, p in layer.named_parameters() if name in ("log_dt", "log_a_real")} == {
        "log_dt": torch.float32, "log_a_real": torch.float32}


@pytest.mark.parametrize("kind", ["s4d", "h3"])
def test_s4d_and_h3_built_under_a_float64_default_dtype_hold_and_compute_float64(kind):
    """Under a float64 default every parameter is float64, the SSM's poles and steps too (they were made float32
    whatever the default, so the kernel carried float32 rounding into a float64 model): the kernel matches the
    closed form K_l = 2 Re(Σ_n C_n B̄_n exp(l Δ A_n)) worked out in float64 from the parameters to float64 rounding."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        layer = build_attention(kind, d_model=16, n_heads=2, causal=True, rotary=False)
    finally:
        torch.set_default_dtype(previous)
    tensors = dict([*layer.named_parameters(), *layer.named_buffers()])
    assert {name: tensor.dtype for name, tensor in tensors.items() if tensor.dtype != torch.float64} == {}
    ssm = layer if kind == "s4d" else layer.kv_ssm
    with torch.no_grad():
        a = torch.complex(-torch.exp(ssm.log_a_real.double()), ssm.a_imag.double())
        dt_a = a * torch.exp(ssm.log_dt.double())[:, None]
        c_b = torch.view_as_complex(ssm.c.double()) * (torch.exp(dt_a) - 1) / a
        lags = torch.arange(200, dtype=torch.float64)
        reference = 2 * (c_b[..., None] * torch.exp(dt_a[..., None] * lags)).sum(1).real.T
        kernel = ssm.kernel(200)
    assert kernel.dtype == torch.float64
    assert float((kernel - reference).abs().max() / reference.abs().max()) < 1e-12


def test_rotary_frequencies_and_hyena_filters_built_under_a_float64_default_dtype_are_float64():
    """Rotary frequencies and Hyena's filter frequencies and decays were made float32 whatever the default, so a
    model built under a float64 default rotated position 4,000 by angles off by ~1e-4 rad: they follow the default
    dtype (float32 at least) as S4D's poles do, and the rotation matches cos/sin of p·base^(-2i/Dh) in float64."""
    from markovformer.layers.baselines.hyena import ImplicitFilter
    from markovformer.layers.position import RotaryEmbedding

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        rotary, hyena = RotaryEmbedding(16), ImplicitFilter(4)
    finally:
        torch.set_default_dtype(previous)
    assert {rotary.inv_freq.dtype, hyena.angular.dtype, hyena.decay.dtype} == {torch.float64}
    position = 4000
    pairs = torch.tensor([1.0, 0.0], dtype=torch.float64).repeat(8)[None, :]  # (T = 1, Dh): each pair is 1 + 0i
    rotated = rotary(pairs, start=position)[0]
    angles = position * 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    torch.testing.assert_close(rotated, torch.stack([angles.cos(), angles.sin()], -1).flatten(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["softmax", "s4d", "h3", "hyena"])
def test_a_layer_built_under_a_float64_default_and_cast_to_float32_holds_float32_only(kind):
    """A cast to float32 narrows the kept tensors as it does the rest (they keep their dtype through a cast to half
    precision only): from_pretrained of a float32 model under a float64 default builds it in float64 and then casts
    it to the saved float32, which left S4D's poles float64 and its logits 3.7e-8 off the saved model's."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        layer = build_attention(kind, d_model=16, n_heads=2, causal=True, rotary=kind == "softmax")
    finally:
        torch.set_default_dtype(previous)
    cast = layer.float()
    dtypes = {name: tensor.dtype for name, tensor in [*cast.named_parameters(), *cast.named_buffers()]}
    assert {name: dtype for name, dtype in dtypes.items() if dtype != torch.float32} == {}

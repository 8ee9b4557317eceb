"""SoftmaxAttention's SDPA path against the naive masked softmax, padding and empty rows included."""

from __future__ import annotations

import pytest
import torch

from markovformer.layers import SoftmaxAttention
from markovformer.ops.lag_bias_attention import lag_bias_attention_naive

D_MODEL, HEADS, LENGTH = 16, 2, 8


def _mask() -> torch.Tensor:
    """(4, T): no padding, left padding, right padding, everything padded."""
    mask = torch.ones(4, LENGTH, dtype=torch.long)
    mask[1, :3] = 0
    mask[2, 5:] = 0
    mask[3] = 0
    return mask


def _by_hand(layer: SoftmaxAttention, x: torch.Tensor, causal: bool, mask: torch.Tensor | None) -> torch.Tensor:
    batch = x.shape[0]
    q, k, v = layer.qkv(x).view(batch, LENGTH, 3, HEADS, D_MODEL // HEADS).permute(2, 0, 3, 1, 4)
    q, k = layer.rotary(q), layer.rotary(k)
    heads = lag_bias_attention_naive(q, k, v, window=None, causal=causal, attention_mask=mask)[0]
    return layer.out_proj(heads.transpose(1, 2).reshape(batch, LENGTH, D_MODEL))


@pytest.mark.parametrize("masked", [False, True], ids=["no_mask", "mask"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_sdpa_path_matches_naive(causal, masked):
    torch.manual_seed(0)
    layer = SoftmaxAttention(d_model=D_MODEL, n_heads=HEADS, causal=causal).double().eval()
    x = torch.randn(4, LENGTH, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = _mask() if masked else None
    out = layer(x, mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, _by_hand(layer, x, causal, mask), rtol=1e-12, atol=1e-12)
    weights_path = layer(x, mask, return_weights=True)
    torch.testing.assert_close(weights_path.output, out, rtol=1e-12, atol=1e-12)
    if masked:
        assert torch.equal(out[3], torch.zeros_like(out[3]))  # every key padded: zeros, not NaN
        if causal:  # left-padded queries see no real key under the causal mask
            assert torch.equal(out[1, :3], torch.zeros_like(out[1, :3]))
        assert (out[1, 3:].abs() > 0).all() and (out[:3] != 0).any()


@pytest.mark.parametrize("kind", ["softmax", "alibi", "stick_breaking", "cope", "selective"])
def test_local_scope_without_a_window_is_refused(kind):
    """SoftmaxAttention(scope="local") and build_attention(KIND, scope="local") without a window attended to every
    key, as global scope, though the options' help says local scope needs a window (only the model config refused
    it)."""
    from markovformer.layers.registry import build_attention

    with pytest.raises(ValueError, match="scope='local' needs a window"):
        build_attention(kind, d_model=D_MODEL, n_heads=HEADS, causal=True, rotary=False, scope="local")
    with pytest.raises(ValueError, match="scope='local' needs a window"):
        SoftmaxAttention(d_model=D_MODEL, n_heads=HEADS, scope="local")

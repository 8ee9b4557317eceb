"""Every attention kind at the shapes the other tests pass by: one row, one head of odd width (3, no rotary), float64,
and lengths 1, 2, 4, 5 around a chunk of 4 positions (rff, retnet) and a window of 3 (a rolling cache of 4): token by
token decoding equals the full forward, left padding leaves the real tokens' outputs as they are alone (the row of one
real token included), and the gradients are finite."""

from __future__ import annotations

import pytest
import torch

from markovformer.layers.attention import AttentionOutput
from markovformer.layers.hybrid_attention import unread_at_ratio
from markovformer.layers.registry import ATTENTION_KINDS, attention_option_names, build_attention

SMALL = dict(max_positions=16, linformer_k=3, chunk_size=4, ssm_state_size=4, shift_taps=2, head_dim=1, num_features=4,
             max_order=2, npos_max=3)  # fmt: skip
# every kind once (its causal layer where it has one); each scoped kind also in local scope, window 3
CASES = [(kind, None) for kind in sorted(ATTENTION_KINDS)] + [
    (kind, "local") for kind in sorted(ATTENTION_KINDS) if "scope" in attention_option_names(kind)
]
LENGTHS = (1, 2, 4, 5)


def _layer(kind: str, scope: str | None) -> torch.nn.Module:
    torch.manual_seed(0)
    options = dict(SMALL, **({} if scope is None else {"scope": scope, "window": 3}))
    options = {name: value for name, value in options.items() if name in attention_option_names(kind)}
    if kind == "hybrid_split":  # one head, Markov (at 0.5 it would have none: refused); no random-feature options
        options = {name: value for name, value in options.items() if name not in unread_at_ratio(1.0)}
        options["markov_head_ratio"] = 1.0
    causal = ATTENTION_KINDS[kind].accepts_causal(True)
    layer = build_attention(kind, d_model=3, n_heads=1, causal=causal, rotary=False, **options).double().eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # weights far from the init, so that every path matters
        for parameter in layer.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return layer


def _output(layer: torch.nn.Module, x: torch.Tensor, **options) -> torch.Tensor:
    out = layer(x, **options)
    return out.output if isinstance(out, AttentionOutput) else out


@pytest.mark.parametrize("kind, scope", CASES, ids=[f"{kind}-{scope or 'default'}" for kind, scope in CASES])
def test_one_head_of_odd_width_decodes_pads_and_differentiates_at_short_lengths(kind, scope):
    layer = _layer(kind, scope)
    for length in LENGTHS:
        x = torch.randn(1, length, 3, generator=torch.Generator().manual_seed(length), dtype=torch.float64,
                        requires_grad=True)  # fmt: skip
        full = _output(layer, x)
        full.pow(2).sum().backward()
        assert torch.isfinite(x.grad).all() and all(torch.isfinite(p.grad).all() for p in layer.parameters()
                                                    if p.grad is not None), (kind, length)  # fmt: skip
        layer.zero_grad()
        x = x.detach()
        with torch.no_grad():
            if getattr(layer, "supports_state", False):
                state: dict = {}
                steps = torch.cat([_output(layer, x[:, t : t + 1], state=state) for t in range(length)], dim=1)
                torch.testing.assert_close(steps, full, rtol=1e-9, atol=1e-12, msg=f"{kind}: decoding, T={length}")
            pad = torch.randn(1, 2, 3, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
            padded = torch.cat([pad.expand(2, -1, -1), x.expand(2, -1, -1)], dim=1)
            mask = torch.ones(2, length + 2, dtype=torch.long)
            mask[:, :2] = 0
            mask[1, : length + 1] = 0  # row 1: padding but for its last token
            out = _output(layer, padded, attention_mask=mask)
            torch.testing.assert_close(out[0, 2:], full[0], rtol=1e-9, atol=1e-12, msg=f"{kind}: left padding")
            alone = _output(layer, x[:, -1:])
            torch.testing.assert_close(out[1, -1], alone[0, 0], rtol=1e-9, atol=1e-12, msg=f"{kind}: one real token")

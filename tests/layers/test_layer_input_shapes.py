"""A layer called directly with a wrongly shaped input (a 2-D tensor, another width, a mask of another length) names
the expected and the given shape in one ValueError, where it had failed deep inside a matmul or einsum ('mat1 and
mat2 shapes cannot be multiplied', 'not enough values to unpack') or, for the GRU, run on silently."""

from __future__ import annotations

import re

import pytest
import torch

from markovformer.layers.gru import GRUInjection
from markovformer.layers.min_gru import MinGRUInjection
from markovformer.layers.registry import ATTENTION_KINDS, build_attention

BAD_INPUTS = {
    "2-D x": ((torch.randn(5, 16),), "x must be (B, T, D) = (B, T, 16); got (5, 16)"),
    "another width": ((torch.randn(2, 5, 12),), "x must be (B, T, D) = (B, T, 16); got (2, 5, 12)"),
    "a shorter mask": ((torch.randn(2, 5, 16), torch.ones(2, 4)),
                       "attention_mask must be (B, T) = (2, 5); got (2, 4)"),
}


def _layers() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    layers = {kind: build_attention(kind, d_model=16, n_heads=2, causal=ATTENTION_KINDS[kind].accepts_causal(True),
                                    rotary=True, **({"max_positions": 8} if kind == "linformer" else {}))
              for kind in ATTENTION_KINDS}  # fmt: skip
    return layers | {"gru injection": GRUInjection(16), "minGRU injection": MinGRUInjection(16, bidirectional=True)}


LAYERS = _layers()


@pytest.mark.parametrize("case", BAD_INPUTS)
@pytest.mark.parametrize("name", LAYERS)
def test_a_wrongly_shaped_input_is_refused_naming_the_expected_and_the_given_shape(name, case):
    layer = LAYERS[name]
    arguments, message = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=re.escape(f"{type(layer).__name__}: {message}")):
        layer(*arguments)

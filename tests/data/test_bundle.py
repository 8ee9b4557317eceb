"""DataBundle as a notebook shows it: its repr names the splits' sizes and what a run reads from it."""

from __future__ import annotations

import torch

from markovformer.data.bundle import DataBundle


def test_a_bundles_repr_gives_the_split_sizes_not_every_example():
    """The dataclass repr listed every example's tensors: 164,084 characters for a 512/64/32 chain of 24 tokens
    (build_data's bundle shown in a notebook cell), growing with the data."""
    example = {"input_ids": torch.arange(24), "labels": torch.arange(24)}
    info = {"vocab_size": 24, "label_names": [f"class {index}" for index in range(1000)]}
    bundle = DataBundle(train=[example] * 512, val=[example] * 64, test=[example] * 32, info=info)
    shown = repr(bundle)
    assert shown.startswith("DataBundle(train=512 examples, val=64 examples, test=32 examples, info={")
    assert "'vocab_size': 24" in shown and "tensor" not in shown and len(shown) < 600

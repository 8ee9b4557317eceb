"""DataBundle as a notebook shows it; JoinedSplits (eval --split all) as the concatenation of its splits."""

from __future__ import annotations

import pytest
import torch

from markovformer.data.bundle import DataBundle, JoinedSplits


def test_a_bundles_repr_gives_the_split_sizes_not_every_example():
    """The dataclass repr listed every example's tensors: 164,084 characters for a 512/64/32 chain of 24 tokens
    (build_data's bundle shown in a notebook cell), growing with the data."""
    example = {"input_ids": torch.arange(24), "labels": torch.arange(24)}
    info = {"vocab_size": 24, "label_names": [f"class {index}" for index in range(1000)]}
    bundle = DataBundle(train=[example] * 512, val=[example] * 64, test=[example] * 32, info=info)
    shown = repr(bundle)
    assert shown.startswith("DataBundle(train=512 examples, val=64 examples, test=32 examples, info={")
    assert "'vocab_size': 24" in shown and "tensor" not in shown and len(shown) < 600


@pytest.mark.parametrize("splits", [(["a", "b"], [], ["c"]), (["a"], ["b", "c"], []), ([], [], ["a", "b", "c"])])
def test_joined_splits_index_as_their_concatenation_and_refuse_past_either_end(splits):
    """eval --split all: the splits one after another, an empty one included; negative indices count from the end."""
    joined, concatenated = JoinedSplits(*splits), [example for split in splits for example in split]
    assert len(joined) == 3
    assert [joined[index] for index in range(-3, 3)] == concatenated[-3:] + concatenated
    for outside in (3, -4):
        with pytest.raises(IndexError, match=f"^example {outside} of 3$"):
            joined[outside]

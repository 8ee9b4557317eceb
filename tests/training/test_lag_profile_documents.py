"""The attention-by-lag profile of packed documents averages only the queries whose lags lie in their own document."""

from __future__ import annotations

import torch

from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.training.lag_profiles import lag_profiles


def _packed(lengths: list[int], generator: torch.Generator) -> dict[str, torch.Tensor]:
    """One packed example: documents of ``lengths`` tokens back to back, positions restarting at each."""
    positions = torch.cat([torch.arange(length) for length in lengths])
    ids = torch.randint(0, 11, (len(positions),), generator=generator)
    return {"input_ids": ids, "labels": ids.clone(), "position_ids": positions}


def test_a_packed_profile_averages_only_queries_whose_lags_are_in_their_document():
    """A query near a document's start sees no key of the document before it (those keys get 0): counting it
    put the profile of 3-8 token documents at lag 0 far above, and at the far lags below, what the queries that
    have those lags give them."""
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(
        vocab_size=11, d_model=16, n_layers=1, n_heads=2, max_order=3, scope="local")).eval()  # fmt: skip
    generator = torch.Generator().manual_seed(1)
    examples = [_packed(lengths, generator) for lengths in ([5, 7, 4, 8], [3, 6, 8, 7], [8, 8, 8], [4, 4, 4, 4, 8])]
    profile = lag_profiles(model, examples, [0])
    last = profile.max_lag  # the window 3, + 1
    with torch.no_grad():
        weights = model(input_ids=torch.stack([e["input_ids"] for e in examples]),
                        position_ids=torch.stack([e["position_ids"] for e in examples]),
                        return_weights=True).attentions[0]  # fmt: skip
    picked = [weights[row, :, t, t - torch.arange(last + 1)] for row, example in enumerate(examples)
              for t in range(last, 24) if example["position_ids"][t] >= last]  # fmt: skip
    torch.testing.assert_close(profile.profiles[0], torch.stack(picked).mean(0))

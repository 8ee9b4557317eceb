"""inspect's readings of packed documents (position_ids): the attention-by-lag profile and FoX's decay by lag read
only the queries whose lags lie in their own document, the keys they see."""

from __future__ import annotations

import torch

from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.training.lag_profiles import lag_profiles, profile_caption
from markovformer.training.learned_positions import ReadPositions, position_cores


def _packed(lengths: list[int], generator: torch.Generator) -> dict[str, torch.Tensor]:
    """One packed example: documents of ``lengths`` tokens back to back, positions restarting at each."""
    positions = torch.cat([torch.arange(length) for length in lengths])
    ids = torch.randint(0, 11, (len(positions),), generator=generator)
    return {"input_ids": ids, "labels": ids.clone(), "position_ids": positions}


DOCUMENTS = ([5, 7, 4, 8], [3, 6, 8, 7], [8, 8, 8], [4, 4, 4, 4, 8])


def test_a_packed_profile_averages_only_queries_whose_lags_are_in_their_document():
    """A query near a document's start sees no key of the document before it (those keys get 0): counting it
    put the profile of 3-8 token documents at lag 0 far above, and at the far lags below, what the queries that
    have those lags give them."""
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(
        vocab_size=11, d_model=16, n_layers=1, n_heads=2, max_order=3, scope="local")).eval()  # fmt: skip
    generator = torch.Generator().manual_seed(1)
    examples = [_packed(lengths, generator) for lengths in DOCUMENTS]
    profile = lag_profiles(model, examples, [0])
    last = profile.max_lag  # the window 3, + 1
    with torch.no_grad():
        weights = model(input_ids=torch.stack([e["input_ids"] for e in examples]),
                        position_ids=torch.stack([e["position_ids"] for e in examples]),
                        return_weights=True).attentions[0]  # fmt: skip
    picked = [weights[row, :, t, t - torch.arange(last + 1)] for row, example in enumerate(examples)
              for t in range(last, 24) if example["position_ids"][t] >= last]  # fmt: skip
    torch.testing.assert_close(profile.profiles[0], torch.stack(picked).mean(0))
    assert f"queries {last}..23 of the first 4 validation sequences, those at least {last} tokens into their packed " \
           "document" in profile_caption(profile, None)


def test_a_packed_runs_forget_gate_decay_reads_only_keys_of_the_querys_document():
    """FoX's decay at lag k, sum of log f over the k latest tokens, was read at every query t >= k: near a
    document's start that key is masked and the sum ran over two documents' gates."""
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(
        vocab_size=11, d_model=16, n_layers=1, n_heads=2, attention="forgetting", position="none")).eval()  # fmt: skip
    core = position_cores(model)[0]
    with torch.no_grad():  # gates far from 1 and varied, so that a sum over the wrong tokens shows
        core.forget_gate.bias.fill_(-1.0)
        core.forget_gate.weight.normal_(0, 1.0)
    generator = torch.Generator().manual_seed(1)
    examples = [_packed(lengths, generator) for lengths in DOCUMENTS]
    seen = []
    handle = core.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with ReadPositions(model) as read:
        lag_profiles(model, examples, [0])
    handle.remove()
    gates = read.forget_gates({0: 7})[0]
    with torch.no_grad():
        log_forget = torch.cat([core.log_forget(x, 2) for x in seen]).double()  # (B, H, T)
    positions = torch.stack([example["position_ids"] for example in examples])
    for index, lag in enumerate(gates.lags.tolist()):
        if lag == 0:
            continue
        sums = [log_forget[row, :, t - lag + 1 : t + 1].sum(-1) for row in range(len(examples))
                for t in range(lag, 24) if positions[row, t] >= lag]  # fmt: skip
        median = torch.quantile(torch.stack(sums), 0.5, dim=0)
        torch.testing.assert_close(torch.from_numpy(gates.decay[:, index, 1]), median, rtol=1e-5, atol=1e-5)


def test_a_packed_runs_cope_positions_count_only_keys_of_the_querys_document():
    """CoPE's largest contextual position per query (the sum of its gates over the keys it sees) counted the
    keys of the documents before it too, which the layer hides from it."""
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(
        vocab_size=11, d_model=16, n_layers=1, n_heads=2, attention="cope", position="none")).eval()  # fmt: skip
    core = position_cores(model)[0]
    generator = torch.Generator().manual_seed(1)
    examples = [_packed(lengths, generator) for lengths in DOCUMENTS]
    seen = []
    handle = core.register_forward_pre_hook(lambda module, args: seen.append(args[1:3]))
    with ReadPositions(model) as read:
        lag_profiles(model, examples, [0])
    handle.remove()
    terms = read.cope_terms()[0]
    q, k = (torch.cat(parts).double() for parts in zip(*seen, strict=True))  # (B, H, T, Dh)
    gates = torch.sigmoid(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5)
    positions = torch.stack([example["position_ids"] for example in examples])
    largest = [gates[row, :, t, t - positions[row, t] : t + 1].sum(-1).clamp(max=core.position_embeddings.shape[0] - 1)
               for row in range(len(examples)) for t in range(24)]  # fmt: skip
    expected = torch.quantile(torch.stack(largest), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64), dim=0).T
    torch.testing.assert_close(torch.from_numpy(terms.positions), expected, rtol=1e-5, atol=1e-5)

"""`markovformer inspect`'s attention-by-lag profile reads bounded prefixes of the validation sequences (the full
computation when they are short, the first rows of the full maps when they are cut), by index only, and a
[CLS]-pooled classifier's sequences each as read alone."""

from __future__ import annotations

import pytest
import torch
from inspected_run import train_inspected_run

from markovformer.data.collate import collate
from markovformer.training import lag_profiles as lag_profiles_module
from markovformer.training.build import build_data
from markovformer.training.lag_profiles import attention_by_lag, lag_profiles
from markovformer.training.run_dir import load_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_inspected_run(tmp_path_factory.mktemp("inspect"))


def _model_and_validation(run_dir):
    config, model, _ = load_run(run_dir)
    return model.eval(), build_data(config).val


def _full_maps(model, validation) -> torch.Tensor:
    """Layer 0's (32, H, T, T) attention maps of the first 32 whole sequences: what inspect used to compute."""
    with torch.no_grad():
        return model(input_ids=collate(validation[:32])["input_ids"], return_weights=True).attentions[0]


def test_the_profile_of_short_sequences_is_the_full_computation(trained):
    model, validation = _model_and_validation(trained)
    profile = lag_profiles(model, validation, [0])
    assert (profile.max_lag, profile.length, profile.sequences, profile.cut) == (3, 24, 32, False)
    torch.testing.assert_close(profile.profiles[0], attention_by_lag(_full_maps(model, validation), 3))


class IndexOnly:
    """A split as a token store gives it: examples by integer index only (slicing it raises, as StoreWindows)."""

    def __init__(self, examples: list) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int):
        return self.examples[int(index)]


def test_the_profile_reads_a_split_by_index_only(trained):
    """A text run's validation split cannot be sliced: inspect crashed on every text run with a TypeError."""
    model, validation = _model_and_validation(trained)
    profile = lag_profiles(model, IndexOnly(validation), [0])
    torch.testing.assert_close(profile.profiles[0], lag_profiles(model, validation, [0]).profiles[0])


def test_long_sequences_are_read_in_bounded_prefixes_whose_maps_are_the_full_maps_first_rows(trained, monkeypatch):
    """With 10 positions read, 4 sequences per pass, no map the model hands out is larger than (4, H, 10, 10), and
    the causal model's profile over queries 3..9 is that of the whole sequences' maps."""
    monkeypatch.setattr(lag_profiles_module, "PROFILE_LENGTH", 10)
    monkeypatch.setattr(lag_profiles_module, "PROFILE_BATCH", 4)
    model, validation = _model_and_validation(trained)
    full = _full_maps(model, validation)
    shapes = []
    forward = model.forward

    def recording_forward(*args, **kwargs):
        output = forward(*args, **kwargs)
        shapes.extend(tuple(weights.shape) for weights in output.attentions)
        return output

    monkeypatch.setattr(model, "forward", recording_forward)
    profile = lag_profiles(model, validation, [0])
    assert shapes == [(4, 2, 10, 10)] * 8
    assert (profile.max_lag, profile.length, profile.sequences, profile.cut) == (3, 10, 32, True)
    torch.testing.assert_close(profile.profiles[0], attention_by_lag(full[:, :, :10, :10], 3))
    assert not torch.allclose(profile.profiles[0], attention_by_lag(full, 3))  # the cut is seen


def test_the_profile_says_cut_only_for_sequences_longer_than_it_reads(trained, monkeypatch):
    """``cut``: some sequence was longer than PROFILE_LENGTH; the validation sequences of 24 tokens are read whole
    at PROFILE_LENGTH 24 and cut at 23."""
    model, validation = _model_and_validation(trained)
    monkeypatch.setattr(lag_profiles_module, "PROFILE_LENGTH", 24)
    assert lag_profiles(model, validation, [0]).cut is False
    monkeypatch.setattr(lag_profiles_module, "PROFILE_LENGTH", 23)
    assert lag_profiles(model, validation, [0]).cut is True


def test_attention_by_lag_needs_a_query_with_every_lag():
    """Queries t >= max_lag have every lag 0..max_lag: T = max_lag + 1 gives one such query (its row, read by lag);
    T = max_lag gives none and is refused, never an all-zero profile."""
    max_lag = 3
    weights = torch.rand(2, 2, max_lag + 1, max_lag + 1, generator=torch.Generator().manual_seed(0))
    expected = weights[:, :, max_lag, :].flip(-1).mean(0)  # the last query's keys t, t-1, ..., 0
    torch.testing.assert_close(attention_by_lag(weights, max_lag), expected)
    with pytest.raises(ValueError, match="no query with all lags"):
        attention_by_lag(weights[:, :, :max_lag, :max_lag], max_lag)


def _cls_classifier():
    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForSequenceClassification

    config = MarkovianTransformerConfig(vocab_size=6, d_model=8, n_layers=1, n_heads=2, max_order=2, causal=False,
                                        pooling="cls", num_labels=2)  # fmt: skip
    torch.manual_seed(0)
    return MarkovianTransformerForSequenceClassification(config).eval()


def test_the_lag_profile_of_a_cls_pooled_classifier_is_its_sequences_read_alone():
    """pooling='cls' puts a [CLS] vector before each row: the maps cover T + 1 positions, which the batch's (B, T)
    mask did not (inspect failed). Padded together, the profile is each sequence's, read alone, summed."""
    from markovformer.training.lag_profiles import _lag_sums

    model = _cls_classifier()
    generator = torch.Generator().manual_seed(2)
    validation = [{"input_ids": torch.randint(1, 6, (n,), generator=generator), "labels": torch.tensor(0)}
                  for n in (11, 7, 9)]  # fmt: skip
    profile = lag_profiles(model, validation, [0])
    last_lag = profile.profiles[0].shape[1] - 1
    total = count = 0
    for example in validation:
        with torch.no_grad():
            maps = model(example["input_ids"][None], return_weights=True).attentions[0]
        summed, queries = _lag_sums(maps, last_lag, None, first_query=profile.max_lag, ahead=profile.max_lag)
        total, count = total + summed, count + queries
    torch.testing.assert_close(profile.profiles[0], total / count)

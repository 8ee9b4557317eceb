"""The engine's translation task, from batches to scores: length-bucketed training batches as a function of (seed,
step), token-weighted loss and sacrebleu BLEU on detokenised translations, and each translation cut at its own
source's cap whatever shares its batch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from markovformer.data.translation import (
    SyntheticTranslationSource,
    collate_translation,
    corpus_bleu,
    decode_generated,
    translation_lengths,
)
from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration
from markovformer.training.batches import EpochBatches
from markovformer.training.metrics import TranslationMetrics
from markovformer.training.tasks import build_task


def _pairs(lengths: list[int]) -> list[dict]:
    return [{"src_ids": torch.arange(4, 4 + n), "tgt_ids": torch.arange(5, 5 + n)} for n in lengths]


def test_length_bucketed_batches_cover_each_epoch_group_lengths_and_resume_exactly():
    lengths = [1 + (7 * i) % 40 for i in range(400)]
    examples = _pairs(lengths)
    padded = translation_lengths(examples)

    def stream(start: int, count: int, bucketed: bool = True) -> list[dict]:
        batches = EpochBatches(examples, 8, seed=3, collate=collate_translation, start=lambda: start,
                               lengths=padded if bucketed else None, pool_batches=10)  # fmt: skip
        iterator = iter(batches)
        return [next(iterator) for _ in range(count)]

    per_epoch = 400 // 80 * 10  # 5 full pools of 10 batches of 8: no short batch is dropped
    first_epoch = stream(0, per_epoch)
    assert sum(len(batch["src_ids"]) for batch in first_epoch) == 400
    rows = sorted(int(batch["src_mask"][row].sum()) for batch in first_epoch for row in range(8))
    assert rows == sorted(lengths)  # every example exactly once in the epoch

    def spread(batches: list[dict]) -> float:
        sizes = [batch["src_mask"].sum(-1).float() for batch in batches]
        return float(torch.stack([s.max() - s.min() for s in sizes]).mean())

    assert spread(first_epoch) < 0.25 * spread(stream(0, per_epoch, bucketed=False))  # similar lengths together
    whole = stream(0, per_epoch + 7)
    for later, batch in zip(stream(per_epoch - 3, 10), whole[per_epoch - 3 :], strict=True):
        assert torch.equal(later["src_ids"], batch["src_ids"])  # a resumed stream continues the same sequence
    assert not torch.equal(whole[per_epoch]["src_ids"], whole[0]["src_ids"])  # a new epoch, a new order


def test_every_example_is_trained_on_when_the_split_is_not_a_whole_number_of_batches():
    """100 examples, batches of 8, one pool: the remainder of 4 must be a random one each epoch. Grouping by length
    first left the pool's short last batch, its 4 longest examples, out of every epoch: never trained on (28 of 300
    synthetic translation pairs, the longest, in a review's run)."""
    lengths = list(range(1, 101))
    examples = _pairs(lengths)
    batches = EpochBatches(examples, 8, seed=0, collate=collate_translation, lengths=translation_lengths(examples))
    assert batches.batches_per_epoch(8) == 12
    iterator = iter(batches)
    seen = {int(batch["src_mask"][row].sum()) for _ in range(12 * 20) for batch in [next(iterator)] for row in range(8)}
    assert seen == set(lengths)  # over 20 epochs, the longest too


class _WordTokenizer:
    """Ids 4.. are the words w0, w1, ...; decode joins them with spaces."""

    def decode(self, ids: list[int]) -> str:
        return " ".join(f"w{i - 4}" for i in ids)


def test_translation_metrics_weigh_the_loss_by_tokens_and_score_bleu_on_detokenised_text():
    metrics = TranslationMetrics(_WordTokenizer())
    losses, counts = [], []
    for tokens in (3, 9):
        labels = torch.full((2, 10), -100)
        labels[0, :tokens] = 5
        logits = torch.randn(2, 10, 12, generator=torch.Generator().manual_seed(tokens))
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        metrics.update(type("Output", (), {"loss": loss, "logits": logits})(), {"labels": labels})
        losses.append(float(loss))
        counts.append(tokens)
    expected = sum(loss * count for loss, count in zip(losses, counts, strict=True)) / sum(counts)
    generated = torch.tensor([[4, 5, 6, 2, 0], [4, 4, 7, 8, 2]])  # <eos> = 2 ends a translation, <pad> = 0 dropped
    labels = torch.tensor([[4, 5, 6, 2, -100], [4, 5, 7, 8, 2]])
    metrics.update_translations(generated, labels, generated)
    results = metrics.compute()
    assert results["loss"] == pytest.approx(expected, rel=1e-6)
    hypotheses, references = ["w0 w1 w2", "w0 w0 w3 w4"], ["w0 w1 w2", "w0 w1 w3 w4"]
    assert results["bleu"] == pytest.approx(corpus_bleu(hypotheses, references))
    assert results["exact_match"] == 0.5
    metrics.reset()  # the next validation scores its own translations only
    metrics.update(type("Output", (), {"loss": torch.tensor(1.5)})(), {"labels": torch.tensor([[5, 5, -100]])})
    metrics.update_translations(generated[1:], labels[1:], generated[1:])
    again = metrics.compute()
    assert again["loss"] == 1.5 and again["exact_match"] == 0.0
    assert again["bleu"] == pytest.approx(corpus_bleu(hypotheses[1:], references[1:]))
    with pytest.raises(ValueError, match="tokenizer"):
        TranslationMetrics(None)


def test_a_greedy_validation_translation_stops_at_its_own_sources_cap_not_the_batchs_longest():
    """A hypothesis that never ends (no <eos>) is cut at 2 |x| + 10 tokens of its own source x, as it would be
    decoded alone: it does not depend on which sources share its batch (eval_batch_size, processes)."""
    from types import SimpleNamespace

    bundle = SyntheticTranslationSource(train_examples=8, val_examples=4, test_examples=4, max_length=8).build(0)
    word = next(i for i in range(4, 100) if bundle.tokenizer.decode([i]).strip())  # a token that decodes to text
    pairs = [{"src_ids": torch.tensor([word] * n), "tgt_ids": torch.tensor([word, word])} for n in (2, 9)]
    batch = collate_translation(pairs)

    class Looping(torch.nn.Module):  # generates ``word`` for ever; its loss is fixed
        config = SimpleNamespace(max_positions=64)

        def target_score(self, **inputs):
            return SimpleNamespace(loss=torch.tensor(1.0))

        def generate(self, src_ids, src_mask, generation, max_lengths):  # each row runs on to its own cap
            rows = torch.full((len(src_ids), generation.max_new_tokens), word)
            return rows.masked_fill(torch.arange(rows.shape[1]) >= max_lengths[:, None], 0)

    metrics = TranslationMetrics(bundle.tokenizer)
    build_task("translation").score(Looping(), batch, metrics)
    expected = [decode_generated(bundle.tokenizer, [[word] * (2 * n + 10)])[0] for n in (2, 9)]
    assert metrics.hypotheses == expected  # 14 and 28 tokens (each source's cap), not 28 and 28


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_translation_is_cut_at_its_own_sources_cap_whichever_sources_share_its_batch(beam_size):
    """Beam search ran every source of a batch to the batch's longest cap, so a short source's hypothesis could run
    on to a long neighbour's 2 |x| + 10: eval --beam-size 4 scored BLEU 3.20 at --batch-size 1 and 2.50 at 100 on the
    same run, and `generate --beam-size 4` (batches of 32 in file order) differed from eval's lines. Each source is
    now searched to its own cap: its translation is the one it gets alone."""
    from markovformer.models.generation import GenerationConfig
    from markovformer.training.tasks.translation import translate_capped

    torch.manual_seed(0)
    model = MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=50, d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=2, order=3, max_positions=64,
        dropout=0.0)).eval()  # fmt: skip
    short, long = ({"src_ids": ids, "tgt_ids": torch.tensor([], dtype=torch.long)}
                   for ids in (torch.tensor([5, 6, 7]), torch.arange(5, 25)))  # fmt: skip
    generation = GenerationConfig(num_beams=beam_size)

    def tokens(row: torch.Tensor) -> list[int]:
        return [int(t) for t in row if t != model.config.pad_token_id]

    alone = tokens(translate_capped(model, collate_translation([short]), generation)[0])
    assert len(alone) == 2 * 3 + 10 and model.config.eos_token_id not in alone  # it runs on to its cap
    batched = translate_capped(model, collate_translation([short, long]), generation)
    assert tokens(batched[0]) == alone
    assert tokens(batched[1]) == tokens(translate_capped(model, collate_translation([long]), generation)[0])

"""Each task's validation metrics against values worked out by hand on small fixed examples (never by calling the
libraries again)."""

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCTC
from markovformer.training.run_config import ConfigError, TrainerConfig, resolve_run_config
from markovformer.training.tasks import CausalLMOptions, build_task
from markovformer.training.tasks.ctc import frames_needed, greedy_ctc_decode, symbols_to_words


def task_metrics(task: str, num_labels=None, label_names=None, orders=()):
    """A task's fresh validation metrics, built as a run builds them."""
    info = {"num_labels": num_labels, "label_names": label_names}
    return build_task(task, TrainerConfig(), info, options=CausalLMOptions(orders) if orders else None).new_metrics()


def fake_output(loss: float, logits=None) -> SimpleNamespace:
    """What a head returns, as far as the metrics read it."""
    return SimpleNamespace(loss=torch.tensor(loss), logits=None if logits is None else torch.as_tensor(logits))


def log_probabilities(rows: list[list[float]]) -> torch.Tensor:
    """Logits whose softmax is ``rows`` (each row sums to 1), so scores can be read off by hand. Each row is shifted
    by its own constant, which softmax ignores but which reorders the raw logits: scoring logits instead of
    probabilities would give another AUROC."""
    shifts = torch.tensor([3.0, -2.0, 1.0, -1.5, 2.5, 0.0, -3.0], dtype=torch.float64)[: len(rows), None]
    return (torch.tensor(rows, dtype=torch.float64).log() + shifts).float()


def rank_statistic(scores: list[float], positive: list[bool]) -> float:
    """Mann-Whitney U / (n_pos * n_neg): the fraction of (positive, negative) pairs ordered correctly, ties half."""
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


def f1_from_confusion(confusion: list[list[int]]) -> list[float]:
    """Per-class F1 = 2 TP / (2 TP + FP + FN) from confusion[true][predicted]."""
    n = len(confusion)
    scores = []
    for c in range(n):
        tp = confusion[c][c]
        fn = sum(confusion[c]) - tp
        fp = sum(confusion[r][c] for r in range(n)) - tp
        scores.append(2 * tp / (2 * tp + fp + fn))
    return scores


def word_edit_distance(reference: list[str], hypothesis: list[str]) -> int:
    """Levenshtein distance over words (substitutions, insertions, deletions all cost 1)."""
    previous = list(range(len(hypothesis) + 1))
    for i, r in enumerate(reference, 1):
        current = [i]
        for j, h in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1]


# ---- helpers themselves, on cases small enough to count on paper ---------------------------------------------------


def test_the_hand_helpers_on_paper_examples():
    # positives {0.9, 0.4}, negatives {0.5, 0.4, 0.1}: 0.9 beats all 3; 0.4 beats 0.1, ties 0.4 -> (3 + 1.5) / 6
    assert rank_statistic([0.9, 0.5, 0.4, 0.4, 0.1], [True, False, True, False, False]) == 4.5 / 6
    assert f1_from_confusion([[2, 1], [0, 3]]) == [2 * 2 / (4 + 0 + 1), 2 * 3 / (6 + 1 + 0)]
    assert word_edit_distance("a b c".split(), "a x c d".split()) == 2  # one substitution, one insertion
    assert word_edit_distance([], ["a"]) == 1 and word_edit_distance(["a", "b"], []) == 2


# ---- causal_lm -------------------------------------------------------------------------------------------------------


def test_causal_lm_loss_is_token_weighted_over_uneven_batches():
    metrics = task_metrics("causal_lm")
    # The model predicts labels[:, 1:], so the first label never counts. Batch 1 has 2 + 1 = 3 targets.
    batch_1 = {"labels": torch.tensor([[5, 1, -100, 2], [3, -100, -100, 4]])}
    # Batch 2: one row, 4 targets (its first label, 7, is not a target).
    batch_2 = {"labels": torch.tensor([[7, 1, 2, 3, 4]])}
    metrics.update(fake_output(2.0), batch_1)
    metrics.update(fake_output(0.5), batch_2)
    results = metrics.compute()

    loss = (2.0 * 3 + 0.5 * 4) / (3 + 4)  # = 8/7, not the batch mean 1.25 nor (2*5 + 0.5*5)/10 counting every label
    assert results["loss"] == pytest.approx(loss, rel=1e-6)
    assert results["bits_per_token"] == pytest.approx(loss / math.log(2), rel=1e-6)
    assert results["perplexity"] == pytest.approx(math.exp(loss), rel=1e-6)
    assert set(results) == {"loss", "bits_per_token", "perplexity"}


def test_causal_lm_loss_equals_the_mean_nll_over_every_target_token_of_both_batches():
    """The weights match the heads' loss convention (logits[:, :-1] predict labels[:, 1:], -100 ignored): the
    metric equals the per-token negative log-likelihood averaged over all targets, worked out with math.log."""
    generator = torch.Generator().manual_seed(0)
    batches = [torch.tensor([[2, 0, -100, 1, 2], [1, 1, 2, -100, -100]]), torch.tensor([[0, 2, 1, 0, 0, 2, 1]])]
    metrics, nll = task_metrics("causal_lm"), []
    for labels in batches:
        logits = torch.randn(*labels.shape, 3, generator=generator, dtype=torch.float64)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        metrics.update(SimpleNamespace(loss=loss, logits=logits), {"labels": labels})
        for b in range(labels.shape[0]):
            for t in range(1, labels.shape[1]):
                target = int(labels[b, t])
                if target != -100:
                    row = logits[b, t - 1].tolist()
                    nll.append(math.log(sum(math.exp(v) for v in row)) - row[target])
    assert len(nll) == (3 + 2) + 6
    assert metrics.compute()["loss"] == pytest.approx(sum(nll) / len(nll), rel=1e-5)


# ---- sequence_classification -----------------------------------------------------------------------------------------

# Seven examples, three classes with unequal support (2, 2, 3), so micro, macro and support-weighted averages all
# differ: softmax(logits) is exactly PROBS up to rounding, and no positive ties a negative within a column.
PROBS = [
    [0.7, 0.2, 0.1],  # true 0, predicted 0
    [0.3, 0.6, 0.1],  # true 0, predicted 1
    [0.25, 0.15, 0.6],  # true 1, predicted 2
    [0.1, 0.8, 0.1],  # true 1, predicted 1
    [0.15, 0.3, 0.55],  # true 2, predicted 2
    [0.45, 0.05, 0.5],  # true 2, predicted 2
    [0.35, 0.4, 0.25],  # true 2, predicted 1
]
TARGETS = [0, 0, 1, 1, 2, 2, 2]


def test_sequence_classification_three_classes_by_hand():
    metrics = task_metrics("sequence_classification", num_labels=3)
    # two batches of different sizes: the state accumulates across them
    metrics.update(fake_output(1.0, log_probabilities(PROBS[:4])), {"labels": torch.tensor(TARGETS[:4])})
    metrics.update(fake_output(0.4, log_probabilities(PROBS[4:])), {"labels": torch.tensor(TARGETS[4:])})
    results = metrics.compute()

    assert results["accuracy"] == pytest.approx(4 / 7)  # micro: 4 of 7 right (the macro recall would be 5/9)
    # confusion[true][predicted]
    confusion = [[1, 1, 0], [0, 1, 1], [0, 1, 2]]
    # per class: F1_0 = 2/(2+0+1) = 2/3, F1_1 = 2/(2+2+1) = 2/5, F1_2 = 4/(4+1+1) = 2/3
    assert f1_from_confusion(confusion) == pytest.approx([2 / 3, 2 / 5, 2 / 3])
    assert results["macro_f1"] == pytest.approx((2 / 3 + 2 / 5 + 2 / 3) / 3, rel=1e-6)  # 26/45; weighted: 62/105
    # one-vs-rest AUROC per class from the probability columns, then the plain mean over classes
    per_class = [rank_statistic([p[c] for p in PROBS], [t == c for t in TARGETS]) for c in range(3)]
    # by hand: class 0: pos {.7, .3} vs neg {.25, .1, .15, .45, .35}: 5 + 3 = 8 of 10 pairs;
    # class 1: pos {.15, .8} vs neg {.2, .6, .3, .05, .4}: 1 + 5 = 6 of 10;
    # class 2: pos {.55, .5, .25} vs neg {.1, .1, .6, .1}: 3 + 3 + 3 = 9 of 12
    assert per_class == [8 / 10, 6 / 10, 9 / 12]
    assert results["auroc"] == pytest.approx((8 / 10 + 6 / 10 + 9 / 12) / 3, rel=1e-6)
    # loss: weighted by examples per batch
    assert results["loss"] == pytest.approx((1.0 * 4 + 0.4 * 3) / 7, rel=1e-6)


def test_binary_auroc_is_the_mann_whitney_statistic_with_ties_counted_half():
    # class-1 logit minus class-0 logit orders the examples; two examples share exactly the same logits (a tie)
    logits = torch.tensor([[0.0, 2.0], [0.0, 0.5], [1.0, 0.0], [0.0, 0.5], [0.0, -1.0], [0.0, 1.0], [0.3, 0.0]])
    targets = [1, 1, 1, 0, 0, 0, 0]
    metrics = task_metrics("sequence_classification", num_labels=2)
    metrics.update(fake_output(0.0, logits), {"labels": torch.tensor(targets)})
    results = metrics.compute()
    # margins: positives {2.0, 0.5, -1.0}, negatives {0.5, -1.0, 1.0, -0.3}
    # 2.0 beats all 4; 0.5 beats -1.0 and -0.3, ties 0.5, loses to 1.0 -> 2.5; -1.0 ties -1.0 -> 0.5. (4 + 2.5 + .5)/12
    assert results["auroc"] == pytest.approx(7 / 12, rel=1e-6)
    assert rank_statistic((logits[:, 1] - logits[:, 0]).tolist(), [t == 1 for t in targets]) == 7 / 12
    # predicted 1 where the margin is > 0: examples 0, 1, 3, 5 -> correct are 0, 1, 4, 6
    assert results["accuracy"] == pytest.approx(4 / 7)
    # confusion[true][pred]: true 0 -> (2, 2); true 1 -> (1, 2). F1_0 = 4/(4+1+2) = 4/7, F1_1 = 4/(4+2+1) = 4/7
    assert results["macro_f1"] == pytest.approx(4 / 7, rel=1e-6)


def test_auroc_ranks_probabilities_even_when_every_logit_lies_in_0_1():
    """torchmetrics softmaxes only scores outside [0, 1], so logits inside it would be ranked raw."""
    logits = torch.tensor([[0.0, 0.5], [0.9, 0.9], [0.2, 0.4], [1.0, 0.6]])  # margins 0.5, 0, 0.2, -0.4
    targets = [1, 0, 1, 0]
    metrics = task_metrics("sequence_classification", num_labels=2)
    metrics.update(fake_output(0.0, logits), {"labels": torch.tensor(targets)})
    # the margins put both positives first; the raw class-1 logits (0.5, 0.9, 0.4, 0.6) put both negatives first
    assert rank_statistic((logits[:, 1] - logits[:, 0]).tolist(), [t == 1 for t in targets]) == 1.0
    assert rank_statistic(logits[:, 1].tolist(), [t == 1 for t in targets]) == 0.0
    assert metrics.compute()["auroc"] == pytest.approx(1.0)


def test_macro_auroc_averages_the_classes_the_split_holds():
    """A class with no example in the split has no AUROC; torchmetrics' macro average scored it 0 and counted it, so
    a perfect classifier on three of four classes read 0.75. The mean is over the classes present (here classes 0,
    1 and 2 of the three-class example, scored as a four-class model whose class 3 never occurs)."""
    metrics = task_metrics("sequence_classification", num_labels=4)
    probabilities = [[p * 0.9 for p in row] + [0.1] for row in PROBS]  # class 3 gets 0.1 everywhere, never the target
    metrics.update(fake_output(1.0, log_probabilities(probabilities)), {"labels": torch.tensor(TARGETS)})
    assert metrics.compute()["auroc"] == pytest.approx((8 / 10 + 6 / 10 + 9 / 12) / 3, rel=1e-6)
    perfect = task_metrics("sequence_classification", num_labels=4)
    perfect.update(fake_output(0.0, torch.eye(4)[[0, 1, 2, 0, 1, 2]] * 5), {"labels": torch.tensor([0, 1, 2, 0, 1, 2])})
    assert perfect.compute()["auroc"] == pytest.approx(1.0)
    alone = task_metrics("sequence_classification", num_labels=2)  # one class only: no pair to rank
    alone.update(fake_output(0.0, torch.zeros(3, 2)), {"labels": torch.tensor([1, 1, 1])})
    assert math.isnan(alone.compute()["auroc"])


@pytest.mark.parametrize("task", ["causal_lm", "sequence_classification"])
def test_a_batch_whose_loss_is_nan_makes_the_loss_nan(task):
    """torchmetrics' mean dropped a nan batch with its weight (a warning once): batches at 2.0 and nan read 2.0,
    a finite validation loss that early stopping and metrics.json took as real."""
    metrics = task_metrics(task, num_labels=2)
    labels = torch.tensor([[0, 1, 1, 0]]) if task == "causal_lm" else torch.tensor([0, 1, 1, 0])
    logits = None if task == "causal_lm" else torch.zeros(4, 2)
    metrics.update(fake_output(2.0, logits), {"labels": labels})
    metrics.update(fake_output(math.nan, logits), {"labels": labels})
    assert math.isnan(metrics.compute()["loss"])


def test_an_infinite_loss_has_an_infinite_perplexity():
    metrics = task_metrics("causal_lm")
    metrics.update(fake_output(math.inf), {"labels": torch.tensor([[0, 1, 1]])})
    assert metrics.compute()["perplexity"] == math.inf  # it read exp(700) = 1.01e304


# ---- token_classification --------------------------------------------------------------------------------------------


def test_token_classification_ignores_positions_labelled_minus_100():
    # predictions by argmax of one-hot-ish logits; the ignored positions are all predicted wrongly as class 2, so
    # counting them (as anything) would change both numbers
    predicted = torch.tensor([[0, 0, 1, 2, 2], [1, 1, 0, 2, 2]])
    labels = torch.tensor([[0, 1, 1, -100, -100], [1, 0, 0, 1, -100]])
    logits = F.one_hot(predicted, 3).float() * 5.0
    metrics = task_metrics("token_classification", num_labels=3)
    metrics.update(fake_output(0.3, logits), {"labels": labels})
    results = metrics.compute()

    # the 7 kept positions as (true, predicted): (0,0) (1,0) (1,1) | (1,1) (0,1) (0,0) (1,2)
    correct = 4
    assert results["accuracy"] == pytest.approx(correct / 7)
    # confusion[true][predicted]: true 0 -> (2, 1, 0); true 1 -> (1, 2, 1); class 2 never true
    confusion = [[2, 1, 0], [1, 2, 1], [0, 0, 0]]
    f1 = f1_from_confusion(confusion)  # F1_0 = 4/(4+1+1) = 2/3, F1_1 = 4/(4+1+2) = 4/7, F1_2 = 0/(0+1+0) = 0
    assert f1 == pytest.approx([2 / 3, 4 / 7, 0.0])
    assert results["macro_f1"] == pytest.approx(sum(f1) / 3, rel=1e-6)
    assert set(results) == {"loss", "accuracy", "macro_f1"}


# ---- ctc -------------------------------------------------------------------------------------------------------------


def frames(path: list[int], num_classes: int = 5) -> torch.Tensor:
    """Logits (T, C) whose argmax per frame is ``path``."""
    return F.one_hot(torch.tensor(path), num_classes).float() * 3.0 - 1.0


def test_greedy_ctc_decode_merges_repeats_drops_blanks_and_respects_lengths():
    logits = torch.stack([
        frames([1, 1, 0, 1, 2, 2, 0, 3]),  # 1 1 | blank | 1 | 2 2 | blank | 3  -> 1 1 2 3
        frames([0, 2, 2, 2, 0, 0, 4, 4]),  # only the first 5 frames count -> 2  (4 4 lies beyond the length)
        frames([3, 3, 3, 3, 0, 0, 0, 0]),  # length 3: 3 3 3 -> 3
        frames([0, 0, 0, 0, 0, 0, 0, 0]),  # all blank -> nothing
    ])  # fmt: skip
    lengths = torch.tensor([8, 5, 3, 8])
    assert greedy_ctc_decode(logits, lengths) == [[1, 1, 2, 3], [2], [3], []]
    # with a length cutting a run of repeats and a different blank index
    assert greedy_ctc_decode(frames([2, 2, 1, 2])[None], torch.tensor([4]), blank=2) == [[1]]
    assert greedy_ctc_decode(frames([2, 2, 1, 2])[None], torch.tensor([2]), blank=0) == [[2]]


def test_frames_needed_is_where_the_ctc_loss_turns_finite():
    """``frames_needed`` (labels plus a blank between equal neighbours) against torch's CTC loss: infinite below it,
    finite from it."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(40):
        labels = torch.randint(1, 3, (int(torch.randint(1, 6, (), generator=generator)),), generator=generator)
        need = frames_needed(labels.tolist())
        for frames in (need - 1, need) if need > 1 else (need,):  # torch refuses 0 frames
            log_probs = torch.randn(frames, 1, 3, generator=generator).log_softmax(-1)
            loss = F.ctc_loss(log_probs, labels[None], torch.tensor([frames]), torch.tensor([len(labels)]))
            assert math.isinf(loss) == (frames < need), (labels.tolist(), frames)
    assert frames_needed([1, 1, 2, 2, 2]) == 5 + 3 and frames_needed([]) == 0


# Two utterances, blank 0; the first is padded (attention_mask) after 6 frames, labels padded with -100.
CTC_LOGITS = torch.stack([
    frames([1, 2, 0, 3, 3, 4, 1, 1]),  # 6 frames -> 1 2 3 4   (the 1 1 in the padding must not count)
    frames([4, 0, 4, 1, 3, 3, 0, 2]),  # 8 frames -> 4 4 1 3 2
])  # fmt: skip
CTC_BATCH = {
    "labels": torch.tensor([[1, 2, 4, -100, -100], [4, 1, 1, 3, 2]]),
    "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0], [1] * 8]),
}


def test_wer_without_label_names_counts_each_symbol_as_a_word():
    metrics = task_metrics("ctc")
    metrics.update(fake_output(1.5, CTC_LOGITS), CTC_BATCH)
    # utterance 1: ref 1 2 4, hyp 1 2 3 4 -> one insertion; utterance 2: ref 4 1 1 3 2, hyp 4 4 1 3 2 -> one
    # substitution. Corpus WER = (1 + 1) / (3 + 5)
    assert word_edit_distance("1 2 4".split(), "1 2 3 4".split()) == 1
    assert word_edit_distance("4 1 1 3 2".split(), "4 4 1 3 2".split()) == 1
    results = metrics.compute()
    assert results["wer"] == pytest.approx(2 / 8)
    assert results["loss"] == pytest.approx(1.5)
    assert set(results) == {"loss", "wer"}


def test_the_ctc_loss_is_the_mean_over_utterances_of_the_models_per_symbol_losses_whatever_the_batches():
    """The model's CTC loss averages each utterance's NLL over its target length across the batch; the metric
    weighs batches by utterances, so any batching of the split gives the mean over all its utterances."""
    config = MarkovianTransformerConfig(input_dim=8, num_labels=5, d_model=16, n_layers=1, n_heads=2, max_order=2,
                                        causal=False)  # fmt: skip
    torch.manual_seed(0)
    model = MarkovianTransformerForCTC(config).eval()
    features = torch.randn(5, 12, 8)
    labels = torch.tensor([[1, 2, -100, -100], [3, 4, 1, 2], [2, -100, -100, -100], [4, 4, 1, -100], [1, 3, 2, 4]])
    with torch.no_grad():
        each = [float(model(input_features=features[i : i + 1], labels=labels[i : i + 1]).loss) for i in range(5)]
        for cut in (1, 2, 4):  # batches of other sizes: [0:1] + [1:5], [0:2] + [2:5], [0:4] + [4:5]
            metrics = task_metrics("ctc")
            for part in (slice(0, cut), slice(cut, 5)):
                metrics.update(model(input_features=features[part], labels=labels[part]),
                               {"labels": labels[part]})  # fmt: skip
            assert metrics.compute()["loss"] == pytest.approx(sum(each) / 5, rel=1e-5), cut


def test_an_utterance_without_reference_words_counts_its_hypothesised_words_as_insertions():
    """(it was scored against a one-word "<empty>" reference: a correct empty hypothesis counted one error)"""
    empty = {"labels": torch.tensor([[1, 2, 4, -100, -100], [-100, -100, -100, -100, -100]]),
             "attention_mask": CTC_BATCH["attention_mask"]}  # fmt: skip
    metrics = task_metrics("ctc")
    metrics.update(fake_output(1.5, CTC_LOGITS), empty)  # hypotheses 1 2 3 4 (1 insertion) and 4 4 1 3 2 (5)
    assert metrics.compute()["wer"] == pytest.approx((1 + 5) / 3)
    silent = task_metrics("ctc")
    silent.update(fake_output(1.5, CTC_LOGITS[:1]), {"labels": torch.tensor([[1, 2, 3, 4]]),
                                                     "attention_mask": CTC_BATCH["attention_mask"][:1]})  # right
    silent.update(fake_output(1.5, frames([0, 0, 0])[None]), {"labels": torch.full((1, 3), -100)})  # blank
    assert silent.compute()["wer"] == 0.0


def test_wer_with_label_names_joins_characters_and_splits_words_on_spaces():
    names = ["<blank>", "a", "b", " ", "c"]  # id 3 is the space
    metrics = task_metrics("ctc", label_names=names)
    metrics.update(fake_output(1.5, CTC_LOGITS), CTC_BATCH)
    # utterance 1: ref ids 1 2 4 = "abc" (1 word), hyp 1 2 3 4 = "ab c" (2 words): 1 substitution + 1 insertion
    # utterance 2: ref ids 4 1 1 3 2 = "caa b", hyp 4 4 1 3 2 = "cca b": 1 substitution. (2 + 1) / (1 + 2)
    assert symbols_to_words([1, 2, 3, 4], names) == "ab c"
    assert word_edit_distance(["abc"], ["ab", "c"]) == 2
    assert word_edit_distance(["caa", "b"], ["cca", "b"]) == 1
    assert metrics.compute()["wer"] == pytest.approx(3 / 3)
    # characters: "abc" -> "ab c" one insertion, "caa b" -> "cca b" one substitution, over 3 + 5 characters
    assert metrics.compute()["cer"] == pytest.approx(2 / 8)
    empty = task_metrics("ctc", label_names=names)  # no reference characters: each hypothesised one is an insertion
    empty.update(fake_output(1.5, CTC_LOGITS), {"labels": torch.tensor([[1, 2, 4, -100, -100], [-100] * 5]),
                                                "attention_mask": CTC_BATCH["attention_mask"]})  # fmt: skip
    assert empty.compute()["cer"] == pytest.approx((1 + 5) / 3)


def test_a_reference_of_spaces_alone_counts_its_characters_in_the_cer():
    """(it was scored as a reference with no characters: its spaces left the CER's total, and a hypothesis that
    missed them counted no error)"""
    names = ["<blank>", "a", "b", " ", "c"]  # id 3 is the space
    metrics = task_metrics("ctc", label_names=names)
    spaces = {"labels": torch.tensor([[3, 3, -100, -100, -100], [4, 1, 1, 3, 2]]),
              "attention_mask": torch.tensor([[1, 1, 1, 0, 0, 0, 0, 0], [1] * 8])}  # fmt: skip
    logits = torch.stack([frames([0, 0, 0, 0, 0, 0, 0, 0]), CTC_LOGITS[1]])  # hypotheses "" and "cca b"
    metrics.update(fake_output(1.5, logits), spaces)
    # "  " -> "": two deletions; "caa b" -> "cca b": one substitution; over 2 + 5 reference characters
    assert word_edit_distance(list("  "), []) == 2
    assert metrics.compute()["cer"] == pytest.approx((2 + 1) / (2 + 5))
    # words: "  " has none (nothing hypothesised, no error), "caa b" two with one substituted
    assert metrics.compute()["wer"] == pytest.approx(1 / 2)


def test_wer_uses_the_full_length_without_an_attention_mask():
    metrics = task_metrics("ctc")
    metrics.update(fake_output(1.0, CTC_LOGITS[:1]), {"labels": torch.tensor([[1, 2, 3, 4]])})
    # all 8 frames: 1 2 0 3 3 4 1 1 -> 1 2 3 4 1; ref 1 2 3 4 -> one insertion over 4 words
    assert metrics.compute()["wer"] == pytest.approx(1 / 4)


# ---- reset -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["causal_lm", "sequence_classification", "token_classification", "ctc"])
def test_reset_clears_everything(task):
    """After reset, the results are those of the batches seen since, as if the metric were new."""
    if task == "causal_lm":
        first = (fake_output(9.0), {"labels": torch.tensor([[1, 2, 3]])})
        second = (fake_output(1.0), {"labels": torch.tensor([[1, 2, -100]])})
    elif task == "sequence_classification":
        first = (fake_output(9.0, log_probabilities(PROBS)), {"labels": torch.tensor([2, 2, 0, 0, 1, 1, 0])})
        second = (fake_output(1.0, log_probabilities(PROBS)), {"labels": torch.tensor(TARGETS)})
    elif task == "token_classification":
        labels = torch.tensor([[0, 1, 2, -100]])
        first = (fake_output(9.0, F.one_hot(torch.tensor([[2, 2, 2, 2]]), 3).float()), {"labels": labels})
        second = (fake_output(1.0, F.one_hot(torch.tensor([[0, 1, 1, 0]]), 3).float()), {"labels": labels})
    else:
        first = (fake_output(9.0, CTC_LOGITS), CTC_BATCH)
        second = (fake_output(1.0, CTC_LOGITS[1:]), {"labels": torch.tensor([[4, 4, 1, 3, 2]])})
    num_labels = None if task in ("causal_lm", "ctc") else 3

    used = task_metrics(task, num_labels)
    used.update(*first)
    used.compute()
    used.reset()
    used.update(*second)
    fresh = task_metrics(task, num_labels)
    fresh.update(*second)
    assert used.compute() == fresh.compute()
    assert used.compute()["loss"] == pytest.approx(1.0)
    if task == "ctc":
        assert used.compute()["wer"] == 0.0  # the first batch's references and hypotheses are gone
        used.reset()
        assert float(used.wer.errors) == 0 and float(used.wer.total) == 0


def test_orders_report_each_n_token_weighted_and_their_mean_as_the_loss():
    metrics = task_metrics("causal_lm", orders=(2, 5))
    batch_1 = {"labels": torch.tensor([[5, 1, -100, 2]])}  # 2 targets
    batch_2 = {"labels": torch.tensor([[7, 1, 2, 3, 4]])}  # 4 targets
    for batch, (loss_2, loss_5) in ((batch_1, (3.0, 1.0)), (batch_2, (1.5, 0.4))):
        metrics.update(fake_output(loss_2), batch, 2)
        metrics.update(fake_output(loss_5), batch, 5)
    results = metrics.compute()
    n2, n5 = (2 * 3.0 + 4 * 1.5) / 6, (2 * 1.0 + 4 * 0.4) / 6
    assert results["loss_n2"] == pytest.approx(n2) and results["loss_n5"] == pytest.approx(n5)
    assert results["loss"] == pytest.approx((n2 + n5) / 2)
    assert results["bits_per_token"] == pytest.approx((n2 + n5) / 2 / math.log(2))
    metrics.reset()
    metrics.update(fake_output(1.0), batch_1, 2)
    metrics.update(fake_output(3.0), batch_1, 5)
    assert metrics.compute()["loss"] == pytest.approx(2.0)  # reset cleared the per-n means too
    for wrong in (None, 3):
        with pytest.raises(ValueError, match=f"order={wrong}"):
            metrics.update(fake_output(1.0), batch_1, wrong)
    with pytest.raises(ValueError, match="order=2"):
        task_metrics("causal_lm").update(fake_output(1.0), batch_1, 2)
    with pytest.raises(ConfigError, match=r"task_options.orders is not an option of task ctc \(its options: none\)"):
        resolve_run_config({"task": "ctc", "data": {"source": "synthetic_ctc"}, "task_options": {"orders": [2]}})
    with pytest.raises(ConfigError, match="trainer.orders=.* is set but task ctc does not use it"):  # an old config
        resolve_run_config({"task": "ctc", "data": {"source": "synthetic_ctc"}, "trainer": {"orders": [2]}})
    with pytest.raises(ConfigError, match="task ctc takes TaskOptions, not CausalLMOptions"):
        build_task("ctc", options=CausalLMOptions((2,)))


@pytest.mark.parametrize("precision", [torch.bfloat16, torch.float16])
def test_metrics_cast_with_a_half_precision_module_count_in_float32_after_reset(precision):
    """trainer.precision bf16-true casts the whole LightningModule, the metrics' states with it: validation resets
    them into float32, so 300 batches of 6,001 tokens at a loss of 2.5 read 2.5 (without: 2.39 in bf16, nan in fp16)."""
    metrics = task_metrics("causal_lm")
    metrics.to(dtype=precision)  # what Lightning's HalfPrecision.convert_module does to the module holding them
    metrics.reset()  # each validation epoch's start
    labels = torch.ones(1, 6001, dtype=torch.long)
    for _ in range(300):
        metrics.update(fake_output(2.5), {"labels": labels})
    assert metrics.compute()["loss"] == pytest.approx(2.5, rel=1e-6)
    accuracy = task_metrics("sequence_classification", 3).to(dtype=precision)
    accuracy.reset()
    assert accuracy.accuracy.tp.dtype == torch.long  # counts stay integers

"""A CTC run's metrics: word (and character) error rate of the greedy decoding, as ``generate`` transcribes."""

from __future__ import annotations

import torch
from torchmetrics.text import CharErrorRate, WordErrorRate

from markovformer.training.metrics.base import LossMetric
from markovformer.training.tasks.ctc import greedy_ctc_decode, symbols_to_words


class CTCMetrics(LossMetric):
    """The loss, and the word error rate of the greedy decoding against the labels (-100 padded); with symbol names
    (characters), the character error rate too (``cer``: the edit distance over the characters, spaces included).

    The model's CTC loss is torch's mean reduction: each utterance's negative log-likelihood over its target length,
    averaged over the batch. Weighting each batch by its utterances makes the loss that mean over every utterance of
    the split, whatever the batches (weighting by symbols gave a number that moved with eval_batch_size)."""

    PREDICTION_COLUMNS = ("reference", "hypothesis")  # the greedy decoding, as WER reads them

    def __init__(self, label_names: list[str] | None = None) -> None:
        super().__init__()
        self.label_names = label_names
        self.wer = WordErrorRate()
        self.cer = CharErrorRate() if label_names is not None else None

    def update(self, output, batch: dict) -> None:
        labels = batch["labels"]
        self.loss.update(output.loss.detach(), weight=len(labels))
        logits = output.logits.detach().float()
        mask = batch.get("attention_mask")
        lengths = mask.long().sum(-1) if mask is not None else torch.full((len(labels),), logits.shape[1])
        hypotheses, references = [], []  # WER's pairs: references of at least one word
        characters, texts = [], []  # CER's: references of at least one character (spaces count)
        for hypothesis, reference in zip(greedy_ctc_decode(logits, lengths), labels.tolist(), strict=True):
            words = symbols_to_words([r for r in reference if r != -100], self.label_names)
            said = symbols_to_words(hypothesis, self.label_names)
            if self.keep_predictions:
                self.predictions.append((words, said))
            if words.strip():
                hypotheses.append(said)
                references.append(words)
            else:  # no reference words: every hypothesised word is an insertion (torchmetrics refuses such pairs)
                self.wer.errors += len(said.split())
            if words:  # a reference of spaces alone has characters to get right (it was left out of the CER)
                characters.append(said)
                texts.append(words)
            elif self.cer is not None:  # no reference characters: every hypothesised one is an insertion
                self.cer.errors += len(said)
        if references:
            self.wer.update(hypotheses, references)
        if texts and self.cer is not None:
            self.cer.update(characters, texts)

    def compute(self) -> dict[str, float]:
        rates = {"wer": float(self.wer.compute())}
        if self.cer is not None:
            rates["cer"] = float(self.cer.compute())
        return {**super().compute(), **rates}

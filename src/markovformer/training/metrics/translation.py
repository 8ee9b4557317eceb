"""A translation run's metrics: the loss, and corpus BLEU and exact match of its decoded translations."""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.data.translation import PAD_TOKEN_ID, corpus_bleu, decode_generated, one_line
from markovformer.training.batches import world
from markovformer.training.metrics.base import LossMetric, perplexity


class TranslationMetrics(LossMetric):
    """Token-weighted loss and perplexity; with translations added, corpus BLEU and the exact-match rate of the
    detokenised hypotheses against the references: of every process's share, gathered (the loss's torchmetrics
    state syncs itself; these lists of text are gathered in ``compute``, which every process calls)."""

    PREDICTION_COLUMNS = ("source", "reference", "translation")  # BLEU on the columns is the BLEU reported

    def __init__(self, tokenizer) -> None:
        super().__init__()
        if tokenizer is None:
            raise ValueError("translation metrics need the run's tokenizer to detokenise for BLEU")
        self.tokenizer = tokenizer
        self.hypotheses: list[str] = []
        self.references: list[str] = []

    def update_translations(self, generated: Tensor, labels: Tensor, sources: Tensor) -> None:
        """Add decoded translations (B, L), their references (the labels ``y <eos>``, -100 padded) and, with
        ``keep_predictions``, rows with their sources (B, S) (``<pad>`` padded)."""
        # on one line, as the predictions file and ``generate`` write them: BLEU on those lines is the BLEU reported
        # (sacrebleu's 13a deletes a "-\n", which one_line makes "- ")
        hypotheses = [one_line(text) for text in decode_generated(self.tokenizer, generated)]
        references = [one_line(text) for text in decode_generated(self.tokenizer,
                                                                   labels.masked_fill(labels == -100, PAD_TOKEN_ID))]
        self.hypotheses += hypotheses
        self.references += references
        if self.keep_predictions:
            self.predictions += zip(decode_generated(self.tokenizer, sources), references, hypotheses, strict=True)

    def compute(self) -> dict[str, float]:
        loss = float(self.loss.compute())
        results = {"loss": loss, "perplexity": perplexity(loss)}
        hypotheses, references = self.gathered()
        if hypotheses:
            results["bleu"] = corpus_bleu(hypotheses, references)
            exact = sum(h == r for h, r in zip(hypotheses, references, strict=True))
            results["exact_match"] = exact / len(references)
        return results

    def gathered(self) -> tuple[list[str], list[str]]:
        """The hypotheses and references of every process (corpus BLEU sums n-gram counts: their order is moot)."""
        _, size = world()
        if size == 1:
            return self.hypotheses, self.references
        shares: list = [None] * size
        torch.distributed.all_gather_object(shares, (self.hypotheses, self.references))
        return [h for share in shares for h in share[0]], [r for share in shares for r in share[1]]

    def reset(self) -> None:
        super().reset()
        self.hypotheses, self.references = [], []

"""A classifier's metrics (sequence or token classification): accuracy, macro F1, macro AUROC, per-class numbers."""

from __future__ import annotations

import math

from torch import Tensor
from torchmetrics.classification import (
    MulticlassAccuracy,
    MulticlassAUROC,
    MulticlassF1Score,
    MulticlassStatScores,
)

from markovformer.training.metrics.base import LossMetric


class ClassificationMetrics(LossMetric):
    """Loss weighted by what it averages over (sequences, or labelled tokens), accuracy, macro F1 and, with
    ``auroc``, macro AUROC of the softmax probabilities; logits (B, C) or, per token, (B, T, C).

    Macro AUROC averages the classes that have both positive and negative examples in the split (nan if none):
    torchmetrics' macro average scores a class absent from the split as 0 and counts it (a perfect classifier read
    0.75 with one class of four absent), and validation and test splits often miss a rare class."""

    def __init__(self, num_labels: int, auroc: bool = False, label_names: list | None = None,
                 per_token: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.label_names = [str(name) for name in label_names or range(num_labels)]
        place = ("example", "position") if per_token else ("example",)
        self.PREDICTION_COLUMNS = (*place, "label", "predicted", *(f"p({name})" for name in self.label_names))
        self.examples = 0  # scored so far: the number of the next example in the split's order
        self.accuracy = MulticlassAccuracy(num_labels, average="micro", ignore_index=-100)
        self.macro_f1 = MulticlassF1Score(num_labels, average="macro", ignore_index=-100)
        self.auroc = MulticlassAUROC(num_labels, average="none") if auroc else None
        self.stats = MulticlassStatScores(num_labels, average="none", ignore_index=-100)  # per class: tp fp tn fn n

    def update(self, output, batch: dict) -> None:
        super().update(output, batch)
        logits, labels = output.logits.detach().float(), batch["labels"]
        if self.keep_predictions:
            self.keep(logits, labels)
        self.examples += len(labels)
        if labels.dim() > 1:  # per token
            logits, labels = logits.flatten(0, 1), labels.flatten()
        self.accuracy.update(logits, labels)
        self.macro_f1.update(logits, labels)
        self.stats.update(logits, labels)
        if self.auroc is not None:
            self.auroc.update(logits.softmax(-1), labels)

    def keep(self, logits: Tensor, labels: Tensor) -> None:
        """A row per example (per labelled position): its number in the split, the label, the most probable class
        and every class's probability."""
        names, rows = self.label_names, zip(labels.tolist(), logits.argmax(-1).tolist(), logits.softmax(-1).tolist(),
                                            strict=True)  # fmt: skip
        for row, (label, predicted, chances) in enumerate(rows):
            places = [((), label, predicted, chances)] if labels.dim() == 1 else [
                ((position,), at, predicted[position], chances[position])
                for position, at in enumerate(label) if at != -100]  # fmt: skip
            for place, target, guess, shares in places:
                self.predictions.append((self.examples + row, *place, names[target], names[guess],
                                         *(f"{share:.6g}" for share in shares)))  # fmt: skip

    def reset(self) -> None:
        super().reset()
        self.examples = 0

    def breakdown(self) -> dict[str, dict[str, dict[str, float]]]:
        """Per class (by name): precision, recall and F1 of the most probable class, and the class's support (its
        examples, or labelled positions, in the split); nan where a ratio has nothing to divide (no prediction of
        the class, or none of it in the split). Macro F1 is the mean F1 of the classes that occur or are predicted."""
        tp, fp, _, fn, support = self.stats.compute().double().unbind(-1)
        rows = zip(self.label_names, (tp / (tp + fp)).tolist(), (tp / (tp + fn)).tolist(),  # 0 / 0: nan
                   (2 * tp / (2 * tp + fp + fn)).tolist(), support.tolist(), strict=True)  # fmt: skip
        return {"per_class": {name: {"precision": p, "recall": r, "f1": f, "support": int(n)}
                              for name, p, r, f, n in rows}}  # fmt: skip

    def compute(self) -> dict[str, float]:
        results = {**super().compute(), "accuracy": float(self.accuracy.compute()),
                   "macro_f1": float(self.macro_f1.compute())}  # fmt: skip
        if self.auroc is not None:
            positives = self.stats.compute()[:, 4]  # tp, fp, tn, fn, support
            scorable = (positives > 0) & (positives < positives.sum())
            by_class = self.auroc.compute()
            results["auroc"] = float(by_class[scorable].mean()) if scorable.any() else math.nan
        return results

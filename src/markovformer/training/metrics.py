"""Validation metrics per task, from torchmetrics (never hand-written), synced across processes."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric
from torchmetrics.classification import MulticlassAccuracy, MulticlassAUROC, MulticlassF1Score
from torchmetrics.text import WordErrorRate


def greedy_ctc_decode(logits: Tensor, lengths: Tensor, blank: int = 0) -> list[list[int]]:
    """Best-path CTC decoding: argmax per frame, merge repeats, drop blanks. logits (B, T, C), lengths (B,)."""
    best = logits.argmax(-1)
    decoded = []
    for row, length in zip(best, lengths.tolist(), strict=True):
        path = torch.unique_consecutive(row[:length]).tolist()
        decoded.append([s for s in path if s != blank])
    return decoded


def symbols_to_words(ids: list[int], names: list[str] | None) -> str:
    """Label ids as text for WER: with symbol names (characters) they are joined and split on spaces; without, each
    id is one word (then WER is the symbol error rate)."""
    if names is None:
        return " ".join(str(i) for i in ids)
    return "".join(names[i] for i in ids)


class TaskMetrics(nn.Module):
    """Accumulates one task's validation metrics over batches; ``compute()`` returns plain floats.

    ``orders`` (causal LM with a markov window): every batch is scored once per n, ``update`` is told
    which, and ``loss`` is the mean over n of each n's token-weighted loss (``loss_n<n>``): the cross-entropy of an
    equal mixture of the n-gram predictions, since every n is scored on the same tokens.

    Task vmt: ``update_documents`` adds windows' bounds; per token, in nats: ``elbo``, ``reconstruction``, ``kl``,
    ``iw_bound`` (log-likelihood bounds, higher is better), ``loss`` = −ELBO and ``bits_per_token`` = loss / ln 2.
    """

    def __init__(
        self,
        task: str,
        num_labels: int | None = None,
        label_names: list[str] | None = None,
        orders: tuple[int, ...] = (),
        tokenizer=None,
    ) -> None:
        super().__init__()
        self.task, self.label_names, self.orders = task, label_names, tuple(orders)
        if task == "translation" and tokenizer is None:
            raise ValueError("translation metrics need the run's tokenizer to detokenise for BLEU")
        self.tokenizer = tokenizer
        self.hypotheses: list[str] = []  # translation: detokenised, for sacrebleu (this process's share only)
        self.references: list[str] = []
        if self.orders and task != "causal_lm":
            raise ValueError(f"orders (a mixture of markov windows) apply to causal_lm only, not task={task!r}")
        self.loss = MeanMetric()
        self.loss_by_order = nn.ModuleList(MeanMetric() for _ in self.orders)
        if task in ("sequence_classification", "token_classification"):
            self.accuracy = MulticlassAccuracy(num_labels, average="micro", ignore_index=-100)
            self.macro_f1 = MulticlassF1Score(num_labels, average="macro", ignore_index=-100)
        if task == "sequence_classification":
            self.auroc = MulticlassAUROC(num_labels, average="macro")
        if task == "ctc":
            self.wer = WordErrorRate()
        if task == "vmt":
            self.bounds = nn.ModuleDict({name: MeanMetric() for name in ("elbo", "reconstruction", "kl", "iw_bound")})

    def update(self, output, batch: dict, order: int | None = None) -> None:
        """Add one batch's model output; with orders, ``order`` says which n produced it."""
        if self.task == "vmt":
            raise ValueError("VMT metrics add whole documents' bounds: use update_documents")
        labels = batch["labels"]
        expected = order in self.orders if self.orders else order is None
        if not expected:
            raise ValueError(f"order={order!r}: these metrics score n in {self.orders}")
        if self.task in ("causal_lm", "translation"):
            count = (labels[:, 1:] if self.task == "causal_lm" else labels) != -100  # causal LM shifts inside
            count = count.sum()
            index = None if order is None else self.orders.index(order)
            loss = self.loss if index is None else self.loss_by_order[index]
            loss.update(output.loss.detach(), weight=count)  # token-weighted: uneven batches average correctly
            return
        # Weighted by what each batch's loss averages over: tokens for token classification, sequences otherwise.
        self.loss.update(output.loss.detach(), weight=(labels != -100).sum() if labels.dim() > 1 else len(labels))
        logits = output.logits.detach().float()
        if self.task == "sequence_classification":
            self.accuracy.update(logits, labels)
            self.macro_f1.update(logits, labels)
            self.auroc.update(logits.softmax(-1), labels)
        elif self.task == "token_classification":
            self.accuracy.update(logits.flatten(0, 1), labels.flatten())
            self.macro_f1.update(logits.flatten(0, 1), labels.flatten())
        else:  # ctc
            mask = batch.get("attention_mask")
            lengths = mask.long().sum(-1) if mask is not None else torch.full((len(labels),), logits.shape[1])
            hypotheses, references = [], []
            for hypothesis, reference in zip(greedy_ctc_decode(logits, lengths), labels.tolist(), strict=True):
                hypotheses.append(symbols_to_words(hypothesis, self.label_names))
                words = symbols_to_words([r for r in reference if r != -100], self.label_names)
                references.append(words if words.strip() else "<empty>")  # an empty reference has no words to score
            self.wer.update(hypotheses, references)

    def update_documents(self, elbo, bound=None) -> None:
        """Add one batch of VMT windows: ``elbo`` a ``VMTElbo``, ``bound`` a ``VMTBound`` of the same windows (or
        None); each weighted by the windows' real tokens."""
        tokens = elbo.num_tokens
        for name in ("elbo", "reconstruction", "kl"):
            self.bounds[name].update(getattr(elbo, name).detach(), weight=tokens)
        if bound is not None:
            self.bounds["iw_bound"].update(bound.per_token.detach(), weight=tokens)

    def update_translations(self, generated: Tensor, labels: Tensor) -> None:
        """Add decoded translations (B, L) and their references (the labels ``y <eos>``, -100 padded) for BLEU."""
        from markovformer.data.translation import PAD_TOKEN_ID, decode_generated

        self.hypotheses += decode_generated(self.tokenizer, generated)
        self.references += decode_generated(self.tokenizer, labels.masked_fill(labels == -100, PAD_TOKEN_ID))

    def compute(self) -> dict[str, float]:
        if self.task == "vmt":
            elbo = float(self.bounds["elbo"].compute())
            results = {"loss": -elbo, "bits_per_token": -elbo / math.log(2), "elbo": elbo}
            for name in ("reconstruction", "kl", "iw_bound"):
                if self.bounds[name].update_count:
                    results[name] = float(self.bounds[name].compute())
            return results
        by_order = {f"loss_n{n}": float(m.compute()) for n, m in zip(self.orders, self.loss_by_order, strict=True)}
        loss = sum(by_order.values()) / len(by_order) if by_order else float(self.loss.compute())
        results = {"loss": loss}
        if self.task == "translation":
            from markovformer.data.translation import corpus_bleu

            results["perplexity"] = math.exp(min(loss, 700.0))
            if self.hypotheses:
                results["bleu"] = corpus_bleu(self.hypotheses, self.references)
                exact = sum(h == r for h, r in zip(self.hypotheses, self.references, strict=True))
                results["exact_match"] = exact / len(self.references)
        elif self.task == "causal_lm":
            results["bits_per_token"] = loss / math.log(2)
            results["perplexity"] = math.exp(min(loss, 700.0))
            results.update(by_order)
        elif self.task in ("sequence_classification", "token_classification"):
            results["accuracy"] = float(self.accuracy.compute())
            results["macro_f1"] = float(self.macro_f1.compute())
            if self.task == "sequence_classification":
                results["auroc"] = float(self.auroc.compute())
        else:
            results["wer"] = float(self.wer.compute())
        return results

    def reset(self) -> None:
        self.hypotheses, self.references = [], []
        for module in self.modules():
            if isinstance(module, Metric):
                module.reset()

"""Corpus BLEU and chrF through sacrebleu, on detokenised strings (the numbers MT papers report)."""

from __future__ import annotations

from collections.abc import Sequence


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu's corpus BLEU (0-100; its default ``13a`` tokenisation, exponential smoothing) of detokenised
    ``hypotheses`` against one detokenised reference each, in the same order."""
    sacrebleu = _checked("corpus_bleu", hypotheses, references)
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu's corpus chrF (0-100; character 6-grams, beta 2) of detokenised ``hypotheses`` against one
    reference each, in the same order."""
    sacrebleu = _checked("corpus_chrf", hypotheses, references)
    return float(sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score)


def _checked(name: str, hypotheses: Sequence[str], references: Sequence[str]):
    """The sacrebleu module, once the arguments are sentence lists of one length."""
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise ValueError(f"{name} takes sequences of sentences, not one string")
    if len(hypotheses) != len(references):
        raise ValueError(f"{name} got {len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError(f"{name} needs at least one sentence")
    try:
        import sacrebleu
    except ImportError:
        raise ImportError("BLEU needs sacrebleu: pip install 'markovformer[train]'") from None
    return sacrebleu

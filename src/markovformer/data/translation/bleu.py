"""Corpus BLEU through sacrebleu, on detokenised strings (the number MT papers report)."""

from __future__ import annotations

from collections.abc import Sequence


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu's corpus BLEU (0-100; its default ``13a`` tokenisation, exponential smoothing) of detokenised
    ``hypotheses`` against one detokenised reference each, in the same order."""
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise ValueError("corpus_bleu takes sequences of sentences, not one string")
    if len(hypotheses) != len(references):
        raise ValueError(f"corpus_bleu got {len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("corpus_bleu needs at least one sentence")
    try:
        import sacrebleu
    except ImportError:
        raise ImportError("BLEU needs sacrebleu: pip install 'markovformer[train]'") from None
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)

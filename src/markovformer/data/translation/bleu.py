"""Corpus BLEU and chrF through sacrebleu, on detokenised strings (the numbers MT papers report)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


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


@dataclass(frozen=True)
class BootstrapBleu:
    """One system's corpus BLEU under sacrebleu's paired bootstrap: the score, the half-width of its 95% interval
    over resampled test sets, and the p-value of its difference from the baseline (None for the baseline)."""

    bleu: float
    ci95: float
    p_value: float | None


def paired_bootstrap_bleu(systems: Mapping[str, Sequence[str]], references: Sequence[str], baseline: str, *,
                          samples: int = 1000) -> dict[str, BootstrapBleu]:  # fmt: skip
    """sacrebleu's paired bootstrap resampling (Koehn 2004; its fixed seed, so repeatable) of every system in
    ``systems`` against ``baseline``, all on the same ``references``: which BLEU differences the test set can tell
    apart from resampling noise."""
    if baseline not in systems:
        raise ValueError(f"baseline {baseline!r} is not one of the systems {list(systems)}")
    for name, hypotheses in systems.items():
        sacrebleu = _checked(f"paired_bootstrap_bleu (system {name!r})", hypotheses, references)
    if samples < 2:
        raise ValueError(f"paired_bootstrap_bleu needs at least 2 samples, got {samples}")
    order = [baseline] + [name for name in systems if name != baseline]
    test = sacrebleu.significance.PairedTest([(name, list(systems[name])) for name in order],
                                             {"BLEU": sacrebleu.metrics.BLEU()}, [list(references)], test_type="bs",
                                             n_samples=samples)  # fmt: skip
    _, results = test()
    same = {name for name in order[1:] if list(systems[name]) == list(systems[baseline])}
    # sacrebleu counts a zero difference as significant (p = 1/(samples+1)): a copy of the baseline differs by nothing
    return {name: BootstrapBleu(float(r.score), float(r.ci),
                                1.0 if name in same else None if r.p_value is None else float(r.p_value))
            for name, r in zip(order, results["BLEU"], strict=True)}  # fmt: skip


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
        import sacrebleu.significance
    except ImportError:
        raise ModuleNotFoundError("BLEU needs 'sacrebleu', a dependency of markovformer: pip install markovformer",
                                  name="sacrebleu") from None  # fmt: skip
    return sacrebleu

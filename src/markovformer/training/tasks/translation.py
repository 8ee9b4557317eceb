"""Translation: teacher-forced cross-entropy per target token; validation and ``eval`` also decode the sources
(greedy, or beam search) and score the detokenised translations with corpus BLEU and exact match."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor, nn

from markovformer.data.translation import (
    PAD_TOKEN_ID,
    collate_translation,
    corpus_bleu,
    decode_generated,
    load_translation_tokenizer,
)
from markovformer.training.tasks.base import GenerationRequest, LossMetric, Task, model_inputs

TRANSLATE_BATCH = 32  # sources decoded together by `generate --input`


class TranslationMetrics(LossMetric):
    """Token-weighted loss and perplexity; with translations added, corpus BLEU and the exact-match rate of the
    detokenised hypotheses against the references (this process's share only)."""

    def __init__(self, tokenizer) -> None:
        super().__init__()
        if tokenizer is None:
            raise ValueError("translation metrics need the run's tokenizer to detokenise for BLEU")
        self.tokenizer = tokenizer
        self.hypotheses: list[str] = []
        self.references: list[str] = []

    def update_translations(self, generated: Tensor, labels: Tensor) -> None:
        """Add decoded translations (B, L) and their references (the labels ``y <eos>``, -100 padded)."""
        self.hypotheses += decode_generated(self.tokenizer, generated)
        self.references += decode_generated(self.tokenizer, labels.masked_fill(labels == -100, PAD_TOKEN_ID))

    def compute(self) -> dict[str, float]:
        loss = float(self.loss.compute())
        results = {"loss": loss, "perplexity": math.exp(min(loss, 700.0))}
        if self.hypotheses:
            results["bleu"] = corpus_bleu(self.hypotheses, self.references)
            exact = sum(h == r for h, r in zip(self.hypotheses, self.references, strict=True))
            results["exact_match"] = exact / len(self.references)
        return results

    def reset(self) -> None:
        super().reset()
        self.hypotheses, self.references = [], []


class Translation(Task):
    name = "translation"

    def new_metrics(self) -> TranslationMetrics:
        return TranslationMetrics(self.tokenizer)

    def score(self, model: nn.Module, batch: dict, metrics: TranslationMetrics, beam_size: int = 1) -> None:
        metrics.update(model(**model_inputs(batch)), batch)
        source_length = int(batch["src_mask"].sum(-1).max()) if "src_mask" in batch else batch["src_ids"].shape[1]
        max_length = min(2 * source_length + 10, model.config.max_positions)  # fairseq's usual a·|x| + b cap
        generated = model.generate(batch["src_ids"], batch.get("src_mask"), max_new_tokens=max_length,
                                   num_beams=beam_size)  # fmt: skip
        metrics.update_translations(generated, batch["labels"])

    def generate(self, model: nn.Module, run_dir: Path, request: GenerationRequest) -> Iterator[str]:
        """One translation per source: ``request.prompt``, or each line of the file ``request.input``."""
        if (request.prompt is None) == (request.input is None):
            raise ValueError("a translation run translates either --prompt SENTENCE or --input FILE (one per line)")
        if request.input is not None and not Path(request.input).is_file():
            raise ValueError(f"--input {request.input!r}: no such file")
        sentences = ([request.prompt] if request.input is None
                     else Path(request.input).read_text(encoding="utf-8").splitlines())  # fmt: skip
        if not sentences or any(not sentence.strip() for sentence in sentences):
            raise ValueError(f"{request.input or '--prompt'}: every source sentence must be non-empty")
        tokenizer = load_translation_tokenizer(Path(run_dir) / "tokenizer")
        # translation searches (greedy or beams): --temperature is a language model's
        generation = request.generation.replace(do_sample=False,
                                                max_new_tokens=min(request.generation.max_new_tokens,
                                                                   model.config.max_positions))  # fmt: skip
        model.eval()
        for start in range(0, len(sentences), TRANSLATE_BATCH):
            examples = [{"src_ids": torch.tensor(tokenizer.encode(s)), "tgt_ids": torch.tensor([], dtype=torch.long)}
                        for s in sentences[start : start + TRANSLATE_BATCH]]  # fmt: skip
            batch = collate_translation(examples)
            generated = model.generate(batch["src_ids"], batch["src_mask"], generation)
            yield from decode_generated(tokenizer, generated)

"""Translation: teacher-forced cross-entropy per target token; validation and ``eval`` also decode the sources
(greedy, or beam search) and score the detokenised translations with corpus BLEU and exact match."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from markovformer.advice import said_as
from markovformer.data.bundle import DataBundle
from markovformer.data.translation import (
    collate_translation,
    decode_generated,
    load_translation_tokenizer,
    one_line,
    text_lines,
    translation_lengths,
)
from markovformer.models.generation import GenerationConfig
from markovformer.training.tasks.base import (
    GenerationRequest,
    Task,
    model_inputs,
    refuse_prompt_flags,
)
from markovformer.training.trainer_config import ConfigError

if TYPE_CHECKING:  # the metrics are imported where scoring starts (``new_metrics``)
    from markovformer.training.metrics import TranslationMetrics

TRANSLATE_BATCH = 32  # sources decoded together by `generate --input`


class Translation(Task):
    name = "translation"
    writes_predictions = True

    longest: dict[str, int] = {}  # positions the longest pair of each split needs (check_data)

    def check_data(self, bundle: DataBundle) -> None:
        """Notes each split's longest pair, in positions: max(source tokens, target tokens + 1)."""
        super().check_data(bundle)
        self.longest = {name: max(bundle.lengths(split), default=0) for name, split in
                        (("train", bundle.train), ("val", bundle.val), ("test", bundle.test))}  # fmt: skip

    def check_model(self, model: nn.Module) -> None:
        """ConfigError when a pair is longer than the model reads: before training, not at the first validation
        (the first two validation pairs alone are scored up front), since validation and test keep their long
        pairs (data.max_length drops training pairs only)."""
        super().check_model(model)
        limit = model.config.max_positions
        over = {name: longest for name, longest in self.longest.items() if longest > limit}
        if over:
            splits = ", ".join(f"{name} {longest}" for name, longest in over.items())
            dropping = " (data.max_length drops long training pairs)" if "train" in over else ""
            raise ConfigError(f"model.max_positions={limit} is shorter than the data's longest pairs (positions: "
                              f"{splits}; the longer side, with <bos>/<eos>): set model.max_positions >= "
                              f"{max(over.values())}, or take the long pairs out of the data{dropping}")  # fmt: skip

    def check_scored(self, model: nn.Module, examples, split: str) -> None:
        """ConfigError when pairs are longer than the model reads (``eval --data`` with other pairs), before any
        translation: scoring died at the first long pair on a bare "position N is beyond max_positions"."""
        limit = model.config.max_positions
        long = [length for length in translation_lengths(examples) if length > limit]
        if long:
            raise ConfigError(f"{len(long)} of the {len(examples)} pairs of the {split} split are longer than the "
                              f"model reads (max_positions={limit}; the longest needs {max(long)} positions: the "
                              f"longer side, with <bos>/<eos>): take the long pairs out of the data")  # fmt: skip

    def new_metrics(self) -> TranslationMetrics:
        from markovformer.training.metrics import TranslationMetrics  # deferred: see Task.new_metrics

        return TranslationMetrics(self.tokenizer)

    def scoring_settings(self, beam_size: int = 1) -> dict:
        return {"beam_size": beam_size}  # BLEU and exact match are of its translations

    def score(self, model: nn.Module, batch: dict, metrics: TranslationMetrics, beam_size: int = 1) -> None:
        """The loss (the translator's ``target_score``: its forward's without its logits), and the translations of
        the batch (``translate_capped``)."""
        metrics.update(model.target_score(**model_inputs(batch)), batch)
        generated = translate_capped(model, batch, GenerationConfig(num_beams=beam_size))
        metrics.update_translations(generated, batch["labels"], batch["src_ids"])

    def generate(self, model: nn.Module, run_dir: Path, request: GenerationRequest) -> Iterator[str]:
        """One translation per source: ``request.prompt``, or each line of the file ``request.input``. Its refusals
        name the request's fields in the caller's words (``advice.said_as``)."""
        given_prompt, given_input = said_as("--prompt", "prompt"), said_as(f"--input {request.input!r}",
                                                                           f"input={request.input!r}")  # fmt: skip
        if (request.prompt is None) == (request.input is None):
            raise ValueError(f"a translation run translates either {said_as('--prompt SENTENCE', 'prompt=SENTENCE')} "
                             f"or {said_as('--input FILE', 'input=FILE')} (one per line)")  # fmt: skip
        if request.input is not None and not Path(request.input).is_file():
            what = "a directory, not a file" if Path(request.input).is_dir() else "no such file"
            raise ValueError(f"{given_input}: {what}")
        try:  # bytes, not read_text: its universal newlines split at a lone \r, which read_parallel keeps
            sentences = ([request.prompt] if request.input is None
                         else text_lines(Path(request.input).read_bytes().decode("utf-8")))  # fmt: skip
        except UnicodeDecodeError as error:
            where = f"{error.reason} at byte {error.start}"
            raise ValueError(f"{given_input}: not UTF-8 text ({where})") from None
        blank = next((number for number, sentence in enumerate(sentences, 1) if not sentence.strip()), None)
        if not sentences or blank is not None:
            where = f" (line {blank} is blank)" if request.input is not None and blank is not None else ""
            raise ValueError(f"{request.input or given_prompt}: every source sentence must be non-empty{where}")
        refuse_prompt_flags(request, "translation")
        given = request.generation
        temperature = given.temperature if given.temperature not in (0.0, 1.0) else None
        sampling = {("--temperature", "temperature"): temperature, ("--top-k", "top_k"): given.top_k,
                    ("--top-p", "top_p"): given.top_p}  # fmt: skip
        for (flag, name), value in sampling.items():
            if value is not None:
                raise ValueError(f"{said_as(f'{flag} {value}', f'{name}={value}')}: a translation run searches "
                                 f"(greedy, or {said_as('--beam-size N', 'num_beams=N')}) and samples nothing; "
                                 f"sampling {said_as('flags', 'options')} are a language model's")  # fmt: skip
        tokenizer = load_translation_tokenizer(Path(run_dir) / "tokenizer")
        generation = request.generation.replace(do_sample=False,
                                                max_new_tokens=min(request.generation.max_new_tokens,
                                                                   model.config.max_positions))  # fmt: skip
        encoded = [tokenizer.encode(sentence) for sentence in sentences]
        limit = model.config.max_positions
        long = next((number for number, ids in enumerate(encoded, 1) if len(ids) > limit), None)
        if long is not None:  # before any translation is printed, not halfway through the file
            where = f"{request.input}: line {long}" if request.input is not None else given_prompt
            raise ValueError(f"{where} is {len(encoded[long - 1])} tokens long, more than the model reads "
                             f"(max_positions={limit}); split or shorten it")  # fmt: skip
        model.eval()
        for start in range(0, len(sentences), TRANSLATE_BATCH):
            examples = [{"src_ids": torch.tensor(ids), "tgt_ids": torch.tensor([], dtype=torch.long)}
                        for ids in encoded[start : start + TRANSLATE_BATCH]]  # fmt: skip
            batch = collate_translation(examples)
            if request.length_given:
                generated = model.generate(batch["src_ids"], batch["src_mask"], generation)
            else:  # eval's caps: the BLEU of these lines is the BLEU eval reports
                generated = translate_capped(model, batch, generation)
            # one line per source: the byte-level vocabulary has line-break tokens, which a model may emit
            yield from map(one_line, decode_generated(tokenizer, generated))


def translate_capped(model: nn.Module, batch: dict, generation: GenerationConfig) -> Tensor:
    """The translations of the batch's sources, each searched to at most 2 |x| + 10 tokens for its own source x
    (fairseq's usual a·|x| + b cap, within max_positions), greedy or beam, so that a hypothesis does not depend on
    the sources batched with it (by eval_batch_size, the number of processes, or ``generate``'s batches).
    ``generation``'s max_new_tokens is replaced by the caps."""
    sources = batch["src_ids"]
    lengths = batch["src_mask"].sum(-1) if "src_mask" in batch else torch.full((len(sources),), sources.shape[1])
    caps = (2 * lengths + 10).clamp(max=model.config.max_positions)
    return model.generate(sources, batch.get("src_mask"), generation.replace(max_new_tokens=int(caps.max())),
                          max_lengths=caps)

"""CTC: per-frame label distributions aligned to a shorter label sequence; scored by word error rate (and, for
characters, character error rate) of the greedy (best-path) decoding."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from markovformer.advice import said_as
from markovformer.data.collate import collate
from markovformer.data.readers.audio import read_recording_list
from markovformer.training.tasks.base import GenerationRequest, Task, model_inputs, refuse_prompt_flags

if TYPE_CHECKING:  # the metrics are imported where scoring starts (``new_metrics``)
    from markovformer.training.metrics import CTCMetrics


def greedy_ctc_decode(logits: Tensor, lengths: Tensor, blank: int = 0) -> list[list[int]]:
    """Best-path CTC decoding: argmax per frame, merge repeats, drop blanks. logits (B, T, C), lengths (B,)."""
    best = logits.argmax(-1)
    decoded = []
    for row, length in zip(best, lengths.tolist(), strict=True):
        path = torch.unique_consecutive(row[:length]).tolist()
        decoded.append([s for s in path if s != blank])
    return decoded


def frames_needed(labels: list[int]) -> int:
    """The fewest frames a CTC path of ``labels`` takes: one per label, plus a blank between each two equal neighbours
    (``aa`` needs ``a _ a``)."""
    return len(labels) + sum(first == second for first, second in pairwise(labels))


def unalignable(examples) -> tuple[int, str]:
    """How many of ``examples`` (``input_features`` (T, F) and ``labels`` (L,)) have fewer frames than their labels
    need (``frames_needed``), and the first one said in words ("" when none)."""
    count, first = 0, ""
    for index in range(len(examples)):
        example = examples[index]
        inputs = example["input_features"] if "input_features" in example else example["input_ids"]
        labels, frames = example["labels"].tolist(), len(inputs)
        if frames < frames_needed(labels):
            count += 1
            first = first or (f"the split's example {index}, from 0: {frames} frames for {len(labels)} labels, which "
                              f"need {frames_needed(labels)}")  # fmt: skip
    return count, first


def warn_unalignable(examples, what: str, consequence: str) -> None:
    """A line on stderr when some of ``examples`` cannot be aligned to their labels (their CTC loss is infinite)."""
    count, first = unalignable(examples)
    if count:
        print(f"markovformer: warning: {count} of the {len(examples)} {what} utterances have fewer frames than their "
              f"labels need ({first}; a repeated label needs a blank between): {consequence}", file=sys.stderr,
              flush=True)  # fmt: skip


def symbols_to_words(ids: list[int], names: list[str] | None) -> str:
    """Label ids as text for WER: with symbol names (characters) they are joined and split on spaces; without, each
    id is one word (then WER is the symbol error rate)."""
    if names is None:
        return " ".join(str(i) for i in ids)
    return "".join(names[i] for i in ids)


TRANSCRIBE_BATCH = 16  # recordings transcribed together by `generate --input`


class CTC(Task):
    name = "ctc"
    loss_unit = "nats/target symbol"
    writes_predictions = True

    def loss_items(self, batch: dict) -> int:
        """The utterances: the CTC loss is the mean over them of each one's nats per target symbol (so a step weighs
        every utterance alike, not every symbol)."""
        return len(batch["labels"])

    def new_metrics(self) -> CTCMetrics:
        from markovformer.training.metrics import CTCMetrics  # deferred: see Task.new_metrics

        return CTCMetrics(self.info.get("label_names"))

    def train_batches(self, bundle, model, start):
        """As every task's, after a line on stderr for each of the training and validation splits with utterances
        too short for their labels (``warn_unalignable``)."""
        warn_unalignable(bundle.train, "training", "training counts their loss as 0, without a "
                         "gradient (a lower data.stack_frames gives more frames)")  # fmt: skip
        warn_unalignable(bundle.val, "validation", "the validation loss is infinite")
        return super().train_batches(bundle, model, start)

    def describe_split(self, examples, tokenizer) -> None:
        """The split ``eval`` scores: a line on stderr when utterances in it are too short for their labels."""
        warn_unalignable(examples, "scored", "their CTC loss, and the split's, is infinite")

    def generate(self, model, run_dir: Path, request: GenerationRequest) -> Iterator[str]:
        """Greedy (best-path) transcripts of recordings, one line each in the order given: ``--input`` a WAV file,
        or a text file of WAV paths, one per line (``audio.read_recording_list``), each read as the run read its
        own (``speech.recording_features``: its rate, the speech file's trimmed layout, log-Mel front end,
        normalisation and stacked frames). Runs of recordings only (``audio_manifest``, ``speech_features``): other
        CTC data has no front end to turn audio into the model's inputs."""
        from markovformer.data.recipes.speech import recording_features  # deferred: the speech recipes
        from markovformer.training.data_record import read_data_info

        if request.prompt is not None or request.input is None:
            raise ValueError(f"a CTC run transcribes recordings: give {said_as('--input FILE', 'input=FILE')} (a WAV "
                             f"file, or a list of WAV paths, one per line)")  # fmt: skip
        refuse_prompt_flags(request, "CTC")
        given = request.generation  # a transcript is the best path: no flag of search, sampling or length shapes it
        temperature = given.temperature if given.temperature not in (0.0, 1.0) else None
        decoding = {("--beam-size", "num_beams"): given.num_beams if given.num_beams != 1 else None,
                    ("--temperature", "temperature"): temperature,
                    ("--top-k", "top_k"): given.top_k, ("--top-p", "top_p"): given.top_p,
                    ("--max-new-tokens", "max_new_tokens"): given.max_new_tokens if request.length_given else None,
                    ("--compile-step", "compile_step"): True if given.compile_step else None}  # fmt: skip
        that = said_as("that flag", "that option")
        for (flag, name), value in decoding.items():
            if value is not None:
                if value is True:  # a switch
                    raise ValueError(f"{said_as(flag, f'{name}=True')}: a CTC run transcribes each batch of recordings "
                                     f"in one forward pass; it has no decoding step to compile ({that} is a language "
                                     f"model's)")  # fmt: skip
                raise ValueError(f"{said_as(f'{flag} {value}', f'{name}={value}')}: a CTC run transcribes greedily "
                                 f"(the best path), one transcript per recording; {that} is a language model's or a "
                                 f"translation run's")  # fmt: skip
        info = read_data_info(run_dir)
        if not info.get("log_mel") or "normalisation" not in info:
            raise ValueError(f"{run_dir}: its data holds no audio front end (log-Mel settings and normalisation) to "
                             f"read recordings with; generate transcribes runs trained on recordings "
                             f"(data.source audio_manifest or speech_features)")  # fmt: skip
        paths = read_recording_list(request.input)
        model.eval()
        for start in range(0, len(paths), TRANSCRIBE_BATCH):
            batch = collate([{"input_features": recording_features(path, info)}
                             for path in paths[start : start + TRANSCRIBE_BATCH]])  # fmt: skip
            with torch.no_grad():
                logits = model(**model_inputs(batch)).logits.float()
            for ids in greedy_ctc_decode(logits, batch["attention_mask"].sum(-1)):
                yield symbols_to_words(ids, info.get("label_names"))

"""``markovformer generate``: its options as one checked ``GenerationConfig`` (errors named by the flag typed),
then the run's task samples, translates or transcribes. Imports no torch until it runs (``main``'s --help stays
fast)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys

DEFAULT_NEW_TOKENS = 200  # generate's --max-new-tokens for a language model
MAX_NEW_TOKENS = 100_000  # far beyond any use here; a larger number is a typo that would run for days


GENERATION_FLAGS = {"max_new_tokens": "--max-new-tokens", "temperature": "--temperature", "top_k": "--top-k",
                    "top_p": "--top-p", "num_beams": "--beam-size", "length_penalty": "--length-penalty",
                    "compile_step": "--compile-step"}  # fmt: skip


def generation_config(args: argparse.Namespace):
    """The ``GenerationConfig`` of ``markovformer generate``'s options (its fields check them, once); a ValueError
    names the flag. --beam-size > 1 searches (translation); otherwise --temperature > 0 samples."""
    from markovformer.models.generation import GenerationConfig, sampling_options  # deferred: --help loads no torch

    given = getattr(args, "max_new_tokens", None)  # SUPPRESS: absent unless given
    if given is not None and not 1 <= given <= MAX_NEW_TOKENS:
        raise ValueError(f"--max-new-tokens {given} must lie in [1, {MAX_NEW_TOKENS}]")
    if not 0 <= args.seed < 2**63:
        raise ValueError(f"--seed {args.seed} must lie in [0, 2**63)")
    values = dict(max_new_tokens=given or DEFAULT_NEW_TOKENS, temperature=args.temperature, top_k=args.top_k,
                  top_p=args.top_p, num_beams=args.beam_size, length_penalty=args.length_penalty,
                  compile_step=args.compile_step)  # fmt: skip
    sample = args.beam_size == 1 and args.temperature != 0
    ignored = {} if sample else sampling_options(args.temperature, args.top_k, args.top_p)
    if ignored:  # the config's refusal names do_sample, which no flag sets: here, the flag that turned sampling off
        name, value = next(iter(ignored.items()))
        flag, off = GENERATION_FLAGS[name], "--temperature 0 (greedy decoding)"
        if args.beam_size > 1:
            off = f"--beam-size {args.beam_size} (beam search)"
        raise ValueError(f"{flag} {value}: {off} does not sample, so {flag} would be ignored; give one of them")
    try:
        return GenerationConfig(do_sample=sample, **values)
    except ValueError as error:
        raise named_by_flag(error, values) from None


def named_by_flag(error: ValueError, values: dict) -> ValueError:
    """``error`` about a GenerationConfig field (``num_beams=4: ...``) reworded to name the flag the user typed
    (``--beam-size 4: ...``; a switch alone: ``--compile-step: ...``), and the other fields it names by their flags
    (``num_beams > 1``: ``--beam-size > 1``); other errors as they are."""
    field_name = str(error).split("=", 1)[0]
    flag = GENERATION_FLAGS.get(field_name)
    if flag is None:
        return error
    reason = str(error).split(": ", 1)[-1]
    for name, other in GENERATION_FLAGS.items():
        if "_" in name:  # an identifier, never an English word (temperature is both)
            reason = re.sub(rf"\b{name}\b", other, reason)
    value = values[field_name]
    return ValueError(f"{flag}: {reason}" if value is True else f"{flag} {value}: {reason}")


def utf8_prompt(prompt: str | None) -> str | None:
    """``--prompt`` as the text typed. Python decodes the command line with the locale's encoding and keeps each byte
    it cannot decode as a lone surrogate, which no tokenizer encodes (a BPE run failed with a TypeError traceback, a
    char run named '\\udcff' as a character outside its alphabet). Under the C locale with UTF-8 mode off every
    byte of a UTF-8 'ü' is one: the command line's bytes are read again as UTF-8. Bytes that are not UTF-8 either (a
    Latin-1 terminal) are a ValueError naming ``--prompt`` and the first such byte."""
    try:
        (prompt or "").encode("utf-8")
        return prompt
    except UnicodeEncodeError:
        typed = os.fsencode(prompt)  # the bytes the command line held
    try:
        return typed.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"--prompt: byte {typed[error.start]:#04x} at offset {error.start} is not UTF-8; give the "
                         f"prompt as UTF-8 text (a UTF-8 terminal or locale)") from None


def run_generate(args: argparse.Namespace) -> None:
    from markovformer.training.run_dir import load_trained_run, weights_described  # deferred: --help loads no torch
    from markovformer.training.tasks import GenerationRequest, build_task

    generation = generation_config(args)
    prompt = utf8_prompt(args.prompt)
    config, model, run_dir, weights = load_trained_run(args.target)
    if not weights["finished"]:  # a run's own model/ goes without saying; a checkpoint is named (on stderr)
        print(f"generating with {weights_described(weights)}", file=sys.stderr)
    request = GenerationRequest(prompt, args.input, generation, args.seed, args.skip_unknown, args.through_eod,
                                length_given=hasattr(args, "max_new_tokens"))
    task = build_task(config.task, config.trainer, options=config.task_options)
    try:
        for line in task.generate(model, run_dir, request):
            print(line, flush=True)
    except ValueError as error:  # the model's own refusals (no beam search in a language model)
        raise named_by_flag(error, dataclasses.asdict(generation)) from None

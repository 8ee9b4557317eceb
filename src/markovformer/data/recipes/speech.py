"""Spoken number-word strings for CTC recognition: synthesised with espeak-ng over many voices, speeds and pitches
plus noise, with real recordings (Debian's Asterisk English prompts) as a held-out test set, stored as 80-dim log-Mel
frames in one safetensors file; and the loaders that turn such a file, or a manifest of WAV files, into a DataBundle.

The file (``write_speech_features``): ``features`` (frames, n_mels) float16 of every utterance end to end,
``frame_offsets`` (N + 1,), ``labels`` (characters, ids of ``audio.ALPHABET`` + 1) and ``label_offsets`` (N + 1,),
``split`` (N,) with ids of ``SPEECH_SPLITS``; its metadata holds the front end (``LogMelConfig``) and the recipe.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from markovformer.atomic import atomic_write
from markovformer.data.bundle import DataBundle
from markovformer.data.readers.audio import (
    ALPHABET,
    CTC_LABEL_NAMES,
    LogMelConfig,
    encode_transcript,
    log_mel,
    mel_filterbank,
    read_audio_manifest,
    read_wav,
    resample,
)
from markovformer.data.recipes.debian import package_file, unpacked_debian_package
from markovformer.data.recipes.espeak import espeak_ng, synthesise
from markovformer.data.splits import split_indices

FILE_FORMAT = "markovformer-speech-features/1"
SPEECH_SPLITS = ("train", "val", "test", "recorded")
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
TEENS_AND_TENS = (
    "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
)  # fmt: skip
WORDS = (*DIGITS, "oh", *TEENS_AND_TENS, "hundred", "thousand")  # every one has an Asterisk recording
# espeak-ng accents x speaker variants; val and test speak with variants training never hears.
ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
TRAIN_VARIANTS = ("m1", "m2", "m3", "m4", "m5", "f1", "f2", "f3", "klatt", "klatt2")
HELD_OUT_VARIANTS = ("m7", "f4", "f5", "klatt3")
# The recipe's utterances are speech cut to its loud span (``trim_silence``) between 50-200 ms of silence each side
# (``pad_silence``); a recording given to a run of them is laid out alike (``as_recipe_utterance``).
EDGE_SILENCE_S = (0.05, 0.2)


@dataclasses.dataclass(frozen=True)
class DigitsRecipe:
    """What ``prepare_digits`` synthesises: ``counts`` utterances per split of 1..``max_words`` words drawn from
    ``WORDS`` (digits twice as likely as other words), at ``speeds`` words/min and ``pitches`` (espeak's 0-99;
    both ranges inclusive),
    word gaps of 0..``max_gap_ms``, 50-200 ms of leading and trailing silence, white noise at an SNR drawn from
    ``snr_db``; ``recorded`` strings of Asterisk's recordings joined by 30-200 ms pauses, without added noise."""

    counts: tuple[int, int, int] = (2000, 250, 250)
    recorded: int = 250
    max_words: int = 4
    speeds: tuple[int, int] = (120, 200)
    pitches: tuple[int, int] = (20, 80)
    max_gap_ms: int = 60
    snr_db: tuple[float, float] = (5.0, 30.0)
    seed: int = 0


def sample_words(rng: np.random.Generator, max_words: int) -> str:
    """A transcript of 1..max_words words of ``WORDS``; a digit word is twice as likely as any other word."""
    weights = np.array([2.0 if word in DIGITS else 1.0 for word in WORDS])
    count = int(rng.integers(1, max_words + 1))
    return " ".join(WORDS[i] for i in rng.choice(len(WORDS), size=count, p=weights / weights.sum()))


def trim_silence(waveform: Tensor, threshold: float = 0.02) -> Tensor:
    """The span from the first to the last sample whose magnitude reaches ``threshold`` x the peak."""
    loud = (waveform.abs() >= threshold * waveform.abs().max()).nonzero().flatten()
    return waveform[int(loud[0]) : int(loud[-1]) + 1] if len(loud) else waveform


def add_noise(waveform: Tensor, snr_db: float, rng: np.random.Generator) -> Tensor:
    """``waveform`` plus white Gaussian noise at ``snr_db`` below its mean power."""
    power = float(waveform.square().mean())
    noise = torch.from_numpy(rng.standard_normal(len(waveform)))
    return waveform + noise * (power / 10 ** (snr_db / 10)) ** 0.5


def pad_silence(waveform: Tensor, rate: int, rng: np.random.Generator) -> Tensor:
    before, after = (int(rng.uniform(*EDGE_SILENCE_S) * rate) for _ in range(2))
    return torch.cat([torch.zeros(before, dtype=waveform.dtype), waveform, torch.zeros(after, dtype=waveform.dtype)])


def as_recipe_utterance(waveform: Tensor, rate: int) -> Tensor:
    """A recording laid out as the recipe lays out its utterances: its loud span (``trim_silence``) between zeros
    of the middle of the recipe's edge silences (125 ms) each side, whatever silence it came with."""
    edge = torch.zeros(int(sum(EDGE_SILENCE_S) / 2 * rate), dtype=waveform.dtype)
    return torch.cat([edge, trim_silence(waveform), edge])


# Asterisk's recordings: WAVs under usr/share/asterisk/sounds/<voice>/, transcripts in core-sounds-en.txt.

ASTERISK_SOUNDS = "asterisk-core-sounds-en-wav"
ASTERISK_TRANSCRIPTS = ("asterisk-core-sounds-en", "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz")


def parse_asterisk_transcripts(lines: Sequence[str]) -> dict[str, str]:
    """``{"digits/7": "seven", ...}`` from ``core-sounds-en.txt`` lines (``key: transcript``; ``;`` comments)."""
    transcripts = {}
    for line in lines:
        key, colon, text = line.partition(": ")
        if colon and not line.startswith(";") and key.strip():
            transcripts[key.strip()] = text.strip()
    return transcripts


def recorded_words(sounds: Path, transcripts: dict[str, str], rate: int) -> dict[str, Tensor]:
    """Each word of ``WORDS`` -> its recording (resampled to ``rate``, silence trimmed): the ``digits/`` prompt
    whose transcript is exactly that word. A word without one raises RuntimeError."""
    words = {}
    for key, text in sorted(transcripts.items()):
        word = text.lower().strip(" .")
        if key.startswith("digits/") and word in WORDS and word not in words and (sounds / f"{key}.wav").is_file():
            samples, source_rate = read_wav(sounds / f"{key}.wav")
            words[word] = trim_silence(resample(samples, source_rate, rate))
    missing = [word for word in WORDS if word not in words]
    if missing:
        raise RuntimeError(f"the Asterisk prompts have no recording of {missing[0]!r} under {sounds}")
    return words


def join_recordings(text: str, words: dict[str, Tensor], rate: int, rng: np.random.Generator) -> Tensor:
    """The recordings of ``text``'s words one after another, 30-200 ms of silence between them."""
    pieces = []
    for index, word in enumerate(text.split()):
        if index:
            pieces.append(torch.zeros(int(rng.uniform(0.03, 0.2) * rate), dtype=torch.float64))
        pieces.append(words[word])
    return torch.cat(pieces)


# The file.


def write_speech_features(path: str | Path, utterances: list[tuple[Tensor, str, str]], metadata: dict) -> Path:
    """Write ``(features (T, F), transcript, split name)`` utterances (see the module docstring), atomically."""
    from safetensors.torch import save_file

    if not utterances:
        raise ValueError("no utterances to write")
    frames = [features.shape[0] for features, _, _ in utterances]
    labels = [encode_transcript(text) for _, text, _ in utterances]
    tensors = {
        "features": torch.cat([features for features, _, _ in utterances]).to(torch.float16),
        "frame_offsets": torch.tensor([0, *np.cumsum(frames)], dtype=torch.int64),
        "labels": torch.cat(labels).to(torch.int8),
        "label_offsets": torch.tensor([0, *np.cumsum([len(ids) for ids in labels])], dtype=torch.int64),
        "split": torch.tensor([SPEECH_SPLITS.index(split) for _, _, split in utterances], dtype=torch.int8),
    }
    header = {"format": FILE_FORMAT, "alphabet": ALPHABET, "splits": json.dumps(SPEECH_SPLITS),
              **{key: json.dumps(value) for key, value in metadata.items()}}  # fmt: skip
    return atomic_write(path, lambda temporary: save_file(tensors, temporary, metadata=header))


def read_speech_features(path: str | Path) -> tuple[dict[str, list[tuple[Tensor, Tensor]]], dict]:
    """``({split name: [(features (T, F) float32, label ids (L,) long), ...]}, metadata)`` of a speech file;
    a file of another format or alphabet raises ValueError."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    try:
        with safe_open(str(path), "pt") as handle:
            header = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (not a dict)
    except (OSError, SafetensorError) as error:
        raise ValueError(f"{path}: cannot read as a safetensors speech file ({error})") from None
    if header.get("format") != FILE_FORMAT or header.get("alphabet") != ALPHABET:
        raise ValueError(f"{path}: not a {FILE_FORMAT} file with alphabet {ALPHABET!r}")
    frames, labels = tensors["frame_offsets"].tolist(), tensors["label_offsets"].tolist()
    parts: dict[str, list[tuple[Tensor, Tensor]]] = {name: [] for name in SPEECH_SPLITS}
    for index, split in enumerate(tensors["split"].tolist()):
        parts[SPEECH_SPLITS[split]].append((
            tensors["features"][frames[index] : frames[index + 1]].float(),
            tensors["labels"][labels[index] : labels[index + 1]].long(),
        ))  # fmt: skip
    metadata = {key: value if key in ("format", "alphabet") else json.loads(value) for key, value in header.items()}
    return parts, metadata


def stack_frames(features: Tensor, factor: int) -> Tensor:
    """Every ``factor`` consecutive frames side by side, the last group padded with zeros: (T, F) ->
    (ceil(T / factor), factor * F). The same audio at a 1/factor frame rate (factor 3: one frame per 30 ms)."""
    if factor == 1:
        return features
    length, width = features.shape
    padded = features.new_zeros(-(-length // factor) * factor, width)
    padded[:length] = features
    return padded.reshape(-1, factor * width)


def check_stack_frames(factor: int) -> None:
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ValueError(f"stack_frames must be an integer >= 1, got {factor!r}")


def speech_bundle(
    parts: dict[str, list[tuple[Tensor, Tensor]]], splits: dict, info: dict | None = None, stack: int = 1
) -> DataBundle:
    """A CTC DataBundle of ``train``/``val``/``test`` ``(features, label ids)`` lists: features normalised per
    dimension with the mean and (population) std of every training frame (without training utterances: left as
    read, statistics 0 and 1, for ``eval`` to normalise with a run's), then ``stack`` frames to one
    (``stack_frames``; zero padding is the training mean).

    Example: {"input_features": (T / stack, stack * F) float32, "labels": (L,) long, characters 1..28 (0 is the
    CTC blank)}. info: {"input_dim": stack * F, "num_labels": 29, "label_names": CTC_LABEL_NAMES, "normalisation":
    {"mean", "std"} per original dimension, "stack_frames": stack} and ``info``'s entries (the front end: "log_mel";
    "trim_silence": True where the utterances are laid out by ``as_recipe_utterance``).
    """
    check_stack_frames(stack)
    if parts["train"]:
        frames = torch.cat([features for features, _ in parts["train"]]).double()
        mean, std = frames.mean(0), frames.std(0, correction=0)
        std[std == 0] = 1.0
    else:  # data to score with a trained run (eval --data ... fractions=[0,0,1]): the features as read, which eval
        # normalises with the run's own statistics (training refuses a split without examples)
        width = next((features.shape[1] for split in parts.values() for features, _ in split), None)
        if width is None:
            raise ValueError("the speech data has no utterance")
        mean, std = torch.zeros(width, dtype=torch.float64), torch.ones(width, dtype=torch.float64)
    examples = {
        name: [{"input_features": stack_frames(((features - mean) / std).float(), stack), "labels": ids}
               for features, ids in parts[name]]
        for name in ("train", "val", "test")
    }  # fmt: skip
    info = {"input_dim": stack * len(mean), "num_labels": len(CTC_LABEL_NAMES),
            "label_names": list(CTC_LABEL_NAMES), "normalisation": {"mean": mean.tolist(), "std": std.tolist()},
            "stack_frames": stack, **(info or {})}  # fmt: skip
    return DataBundle(**examples, info=info, splits=splits)


def recording_features(path: str | Path, info: dict) -> Tensor:
    """A WAV file's features as a run of recordings read its own (``info``: the run's data info, with ``log_mel``,
    ``normalisation`` and ``stack_frames``): resampled to its rate, laid out as the recipe's utterances where the
    run's were (``trim_silence``: a speech file's), its log-Mel frames, normalised with its training statistics, its
    frames stacked. (T / stack, stack * F) float32."""
    config = LogMelConfig(**info["log_mel"])
    samples, rate = read_wav(path)
    waveform = resample(samples, rate, config.sample_rate)
    if info.get("trim_silence"):
        waveform = as_recipe_utterance(waveform, config.sample_rate)
    features = log_mel(waveform, config)
    mean, std = (torch.tensor(info["normalisation"][key], dtype=torch.float64) for key in ("mean", "std"))
    return stack_frames(((features - mean) / std).float(), info.get("stack_frames", 1))


def load_speech_features(path: str | Path, test_set: str = "recorded", stack: int = 1) -> DataBundle:
    """The speech file's train and val splits, and as test its ``recorded`` utterances (real speech) or its
    synthetic ``test`` split (``test_set="synthetic"``: unseen voices); ``stack`` frames to one (``speech_bundle``)."""
    if test_set not in ("recorded", "synthetic"):
        raise ValueError(f"test_set must be 'recorded' or 'synthetic', got {test_set!r}")
    parts, metadata = read_speech_features(path)
    if test_set == "recorded" and not parts["recorded"]:
        raise ValueError(f"{path}: holds no recorded utterances; use test_set='synthetic'")
    chosen = {
        "train": parts["train"],
        "val": parts["val"],
        "test": parts[test_set if test_set == "recorded" else "test"],
    }
    splits = {"kind": "speech_features", "path": str(path), "test_set": test_set,
              **{name: len(items) for name, items in chosen.items()}}  # fmt: skip
    return speech_bundle(chosen, splits, {"log_mel": metadata.get("log_mel"), "trim_silence": True}, stack)


def load_audio_manifest(
    path: str | Path, *, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1), seed: int = 0,
    sample_rate: int = 8000, stack: int = 1,
) -> DataBundle:  # fmt: skip
    """Utterances of a ``path<TAB>transcript`` manifest (``audio.read_audio_manifest``; WAVs resampled to
    ``sample_rate``, log-Mel frames of ``LogMelConfig.for_rate``), split at random by utterance (seeded);
    ``stack`` frames to one (``speech_bundle``). The bundle's ``files`` are the recordings, so that a run records
    their sha256 beside the manifest's."""
    check_stack_frames(stack)
    entries = read_audio_manifest(path)
    config = LogMelConfig.for_rate(sample_rate)
    filterbank = mel_filterbank(config)
    utterances = []
    for audio_path, transcript in entries:
        samples, rate = read_wav(audio_path)
        try:
            ids = encode_transcript(transcript)
        except ValueError as error:
            raise ValueError(f"{path}: {audio_path.name}: {error}") from None
        utterances.append((log_mel(resample(samples, rate, sample_rate), config, filterbank), ids))
    indices = dict(zip(("train", "val", "test"), split_indices(len(utterances), fractions, seed), strict=True))
    splits = {"kind": "random_utterances", "path": str(path), "seed": seed, "fractions": list(fractions),
              **{name: [str(entries[i][0]) for i in chosen] for name, chosen in indices.items()}}  # fmt: skip
    parts = {name: [utterances[i] for i in chosen] for name, chosen in indices.items()}
    bundle = speech_bundle(parts, splits, {"log_mel": dataclasses.asdict(config)}, stack)
    return dataclasses.replace(bundle, files=[audio_path.resolve() for audio_path, _ in entries])


# The recipe.


def synthesis_settings(rng: np.random.Generator, split: str, recipe: DigitsRecipe) -> dict:
    """One utterance's espeak-ng settings: an accent, a speaker variant (``TRAIN_VARIANTS`` for train,
    ``HELD_OUT_VARIANTS`` otherwise), a speed, a pitch and a word gap, each uniform over the recipe's range."""
    variants = TRAIN_VARIANTS if split == "train" else HELD_OUT_VARIANTS
    return {
        "voice": f"{ACCENTS[rng.integers(len(ACCENTS))]}+{variants[rng.integers(len(variants))]}",
        "speed": int(rng.integers(recipe.speeds[0], recipe.speeds[1] + 1)),
        "pitch": int(rng.integers(recipe.pitches[0], recipe.pitches[1] + 1)),
        "gap_ms": int(rng.integers(0, recipe.max_gap_ms + 1)),
    }


def asterisk_words(rate: int) -> dict[str, Tensor]:
    """``recorded_words`` of Debian's Asterisk English prompts (transcripts from ``asterisk-core-sounds-en``,
    WAVs from ``asterisk-core-sounds-en-wav``), fetched and unpacked in temporary folders."""
    package, member = ASTERISK_TRANSCRIPTS
    with unpacked_debian_package(package) as root:
        with _gzip_lines(package_file(root, member, package)) as lines:
            transcripts = parse_asterisk_transcripts(lines)
    with unpacked_debian_package(ASTERISK_SOUNDS) as root:
        digits = sorted(root.glob("usr/share/asterisk/sounds/*/digits"))
        if not digits:
            raise RuntimeError(f"the {ASTERISK_SOUNDS} package has no usr/share/asterisk/sounds/*/digits folder")
        return recorded_words(digits[0].parent, transcripts, rate)


def prepare_digits(out_path: str | Path, recipe: DigitsRecipe | None = None) -> Path:
    """Synthesise ``recipe`` with espeak-ng, add Asterisk's recordings as the ``recorded`` split, and write the
    log-Mel frames (``LogMelConfig()``: 8 kHz telephone band, 80 mels) to ``out_path`` atomically. Raises
    RuntimeError when espeak-ng or the Asterisk packages cannot be had (espeak-ng is looked for first)."""
    recipe = DigitsRecipe() if recipe is None else recipe
    config = LogMelConfig()
    filterbank = mel_filterbank(config)
    rate = config.sample_rate
    rng = np.random.default_rng(recipe.seed)
    utterances = []
    with espeak_ng() as (command, environment):
        words = asterisk_words(rate)
        for _ in range(recipe.recorded):
            text = sample_words(rng, recipe.max_words)
            waveform = pad_silence(join_recordings(text, words, rate, rng), rate, rng)
            utterances.append((log_mel(waveform, config, filterbank), text, "recorded"))
        total, done = sum(recipe.counts), 0
        for split, count in zip(("train", "val", "test"), recipe.counts, strict=True):
            for _ in range(count):
                if done % max(total // 10, 1) == 0:  # it takes minutes: say how far it is
                    print(f"synthesising utterance {done + 1:,} of {total:,} ({split})", flush=True)
                done += 1
                text = sample_words(rng, recipe.max_words)
                samples, source_rate = synthesise(command, environment, text, **synthesis_settings(rng, split, recipe))
                waveform = trim_silence(resample(samples, source_rate, rate))
                peak = float(waveform.abs().max())
                if peak == 0:
                    raise RuntimeError(f"espeak-ng rendered {text!r} as silence")
                waveform = pad_silence(waveform / peak * rng.uniform(0.2, 0.9), rate, rng)
                waveform = add_noise(waveform, rng.uniform(*recipe.snr_db), rng)
                utterances.append((log_mel(waveform, config, filterbank), text, split))
    metadata = {"log_mel": dataclasses.asdict(config), "recipe": dataclasses.asdict(recipe), "words": WORDS,
                "accents": ACCENTS, "train_variants": TRAIN_VARIANTS, "held_out_variants": HELD_OUT_VARIANTS,
                "recorded_from": ASTERISK_SOUNDS}  # fmt: skip
    return write_speech_features(out_path, utterances, metadata)


@contextmanager
def _gzip_lines(path: Path) -> Iterator[list[str]]:
    import gzip

    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
        yield handle.read().splitlines()

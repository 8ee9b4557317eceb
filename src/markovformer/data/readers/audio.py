"""Audio for speech recognition: WAV files (the standard ``wave`` module), band-limited resampling, log-Mel
features (``torch.stft``-free: frames, a Hann window and ``torch.fft.rfft``), character transcripts, and manifests of
``path<TAB>transcript`` lines."""

from __future__ import annotations

import math
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

# Characters a transcript may hold (lowercased): id 0 is the CTC blank, so character ALPHABET[i] has id i + 1 and
# " " (id 1) separates words, as in the synthetic CTC task; the label names are ``CTC_LABEL_NAMES``.
ALPHABET = " abcdefghijklmnopqrstuvwxyz'"
CTC_LABEL_NAMES = ["<blank>", *ALPHABET]


@dataclass(frozen=True)
class LogMelConfig:
    """How waveforms become feature frames: 25 ms Hann windows every 10 ms (at 8 kHz: 200 and 80 samples), each
    zero-padded to ``n_fft`` points, power spectrum, ``n_mels`` triangular filters on the Slaney mel scale from
    ``f_min`` to ``f_max`` (None: half the sample rate), natural log of the filter energies (floored at ``floor``).

    The default is telephone band (8 kHz), so synthetic speech and the real 8 kHz recordings share one front end.
    """

    sample_rate: int = 8000
    n_fft: int = 512
    win_length: int = 200
    hop_length: int = 80
    n_mels: int = 80
    f_min: float = 0.0
    f_max: float | None = None
    floor: float = 1e-10

    def __post_init__(self) -> None:
        for name in ("sample_rate", "n_fft", "win_length", "hop_length", "n_mels"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"LogMelConfig.{name} must be a positive int, got {value!r}")
        if self.win_length > self.n_fft:
            raise ValueError(f"win_length={self.win_length} must be <= n_fft={self.n_fft}")
        top = self.sample_rate / 2 if self.f_max is None else self.f_max
        if not 0 <= self.f_min < top <= self.sample_rate / 2:
            raise ValueError(f"need 0 <= f_min < f_max <= sample_rate/2, got f_min={self.f_min}, f_max={top}")

    @classmethod
    def for_rate(cls, sample_rate: int, n_mels: int = 80) -> LogMelConfig:
        """25 ms windows, 10 ms hops and an FFT of at least 512 points at ``sample_rate``."""
        win_length = round(0.025 * sample_rate)
        return cls(sample_rate, max(512, 1 << (win_length - 1).bit_length()), win_length,
                   round(0.010 * sample_rate), n_mels)  # fmt: skip


def hz_to_mel(hz: Tensor) -> Tensor:
    """Slaney's mel scale (librosa's default): linear below 1 kHz (15 mel at 1 kHz), logarithmic above."""
    hz = torch.as_tensor(hz, dtype=torch.float64)
    log_step = math.log(6.4) / 27.0
    return torch.where(hz < 1000.0, hz * 3.0 / 200.0, 15.0 + torch.log(hz.clamp(min=1e-9) / 1000.0) / log_step)


def mel_to_hz(mel: Tensor) -> Tensor:
    mel = torch.as_tensor(mel, dtype=torch.float64)
    log_step = math.log(6.4) / 27.0
    return torch.where(mel < 15.0, mel * 200.0 / 3.0, 1000.0 * torch.exp(log_step * (mel - 15.0)))


def mel_filterbank(config: LogMelConfig) -> Tensor:
    """(n_mels, n_fft // 2 + 1) float64 triangular filters, peak 1 at each filter's centre frequency.

    Centres are ``n_mels`` points evenly spaced in mel between f_min and f_max (exclusive); filter m rises linearly
    (in Hz) from centre m-1 to centre m and falls to centre m+1, so adjacent filters sum to 1 between the first and
    last centres. A filter narrower than the FFT bins would be empty: that raises (use a larger ``n_fft``).
    """
    top = config.sample_rate / 2 if config.f_max is None else config.f_max
    mels = torch.linspace(float(hz_to_mel(config.f_min)), float(hz_to_mel(top)), config.n_mels + 2, dtype=torch.float64)
    edges = mel_to_hz(mels)
    bins = torch.arange(config.n_fft // 2 + 1, dtype=torch.float64) * config.sample_rate / config.n_fft
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins - lower) / (centre - lower)
    falling = (upper - bins) / (upper - centre)
    weights = torch.minimum(rising, falling).clamp(min=0.0)
    empty = (weights.sum(dim=1) == 0).nonzero().flatten()
    if len(empty):
        raise ValueError(
            f"mel filter {int(empty[0])} (centre {float(centre[empty[0]]):.1f} Hz) covers no FFT bin: with "
            f"n_mels={config.n_mels} use an n_fft above {config.n_fft}"
        )
    return weights


def power_spectrogram(waveform: Tensor, config: LogMelConfig) -> Tensor:
    """(frames, n_fft // 2 + 1) power |X|^2 of Hann-windowed frames of a 1-D waveform (frame f starts at sample
    f * hop_length; the end is zero-padded so every sample lies in a frame; a waveform shorter than one window
    gives one frame)."""
    if waveform.dim() != 1 or len(waveform) == 0:
        raise ValueError(f"waveform must be a non-empty 1-D tensor, got shape {tuple(waveform.shape)}")
    waveform = waveform.to(torch.float64)
    frames = max(1, math.ceil((len(waveform) - config.win_length) / config.hop_length) + 1)
    padded = torch.nn.functional.pad(
        waveform, (0, (frames - 1) * config.hop_length + config.win_length - len(waveform))
    )
    windows = padded.unfold(0, config.win_length, config.hop_length)
    window = torch.hann_window(config.win_length, periodic=False, dtype=torch.float64)
    return torch.fft.rfft(windows * window, n=config.n_fft).abs().square()


def log_mel(waveform: Tensor, config: LogMelConfig, filterbank: Tensor | None = None) -> Tensor:
    """(frames, n_mels) float32 log-Mel energies of a 1-D waveform sampled at ``config.sample_rate``."""
    filterbank = mel_filterbank(config) if filterbank is None else filterbank
    energies = power_spectrogram(waveform, config) @ filterbank.T
    return energies.clamp(min=config.floor).log().float()


def resample(waveform: Tensor, from_rate: int, to_rate: int) -> Tensor:
    """Band-limited resampling by the FFT (scipy.signal.resample's method): the spectrum is cut (or zero-extended)
    to the new length's band. Exact for signals periodic over the clip; speech clips that start and end in silence
    come out within float error of a polyphase resampler. Returns float64 of length round(N * to / from)."""
    waveform = torch.as_tensor(waveform, dtype=torch.float64)
    if from_rate == to_rate:
        return waveform.clone()
    length = len(waveform)
    new_length = max(1, round(length * to_rate / from_rate))
    spectrum = torch.fft.rfft(waveform)
    kept = min(len(spectrum), new_length // 2 + 1)
    cut = torch.zeros(new_length // 2 + 1, dtype=spectrum.dtype)
    cut[:kept] = spectrum[:kept]
    if new_length < length and new_length % 2 == 0:  # the new Nyquist bin gathers X[k] and its mirror X[-k]
        cut[-1] = 2 * cut[-1]
    if new_length > length and length % 2 == 0:  # the old Nyquist bin splits between +f and -f
        cut[length // 2] = cut[length // 2] / 2
    return torch.fft.irfft(cut, n=new_length) * (new_length / length)


# A data chunk size that recorders writing a stream leave in the header (its length unknown): read to the end.
STREAMED_FRAMES = 0xFFFFFFFF


def read_wav(path: str | Path) -> tuple[Tensor, int]:
    """(samples float64 in [-1, 1), sample rate) of an uncompressed PCM WAV (8, 16, 24 or 32 bit); several
    channels are averaged. Other formats, and a file cut short of the samples its header declares, raise ValueError
    naming the file."""
    path = Path(path)
    try:
        with wave.open(str(path), "rb") as handle:
            channels, width, rate = handle.getnchannels(), handle.getsampwidth(), handle.getframerate()
            declared = handle.getnframes()
            raw = handle.readframes(declared)
    except (OSError, EOFError, wave.Error) as error:  # an EOFError says nothing: the file ends inside its header
        reason = str(error) or "the file ends before its header does"
        raise ValueError(f"{path}: cannot read as a PCM WAV file ({reason})") from None
    if len(raw) % (width * channels):  # a sample cut in two (numpy's error named no file)
        raise ValueError(f"{path}: the WAV file ends inside a sample: cut short after {len(raw)} bytes of audio")
    if len(raw) < declared * width * channels and declared < STREAMED_FRAMES // (width * channels):
        raise ValueError(f"{path}: the WAV file is cut short: {len(raw) // (width * channels)} of the "
                         f"{declared} samples its header declares")  # fmt: skip
    if width == 1:  # 8-bit WAV is unsigned
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.float64) - 128.0) / 128.0
    elif width == 3:
        widened = np.zeros((len(raw) // 3, 4), dtype=np.uint8)  # each sample in the top 3 bytes of an int32
        widened[:, 1:] = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3)
        samples = (widened.view("<i4")[:, 0] >> 8) / float(1 << 23)
    elif width in (2, 4):
        samples = np.frombuffer(raw, dtype=f"<i{width}").astype(np.float64) / float(1 << (8 * width - 1))
    else:
        raise ValueError(f"{path}: {8 * width}-bit samples are not supported (8, 16, 24 or 32 bit PCM)")
    if len(samples) == 0:
        raise ValueError(f"{path}: the WAV file holds no samples")
    return torch.from_numpy(samples.reshape(-1, channels).mean(axis=1)), rate


def write_wav(path: str | Path, samples: Tensor, sample_rate: int) -> None:
    """A mono 16-bit PCM WAV of samples in [-1, 1] (clipped)."""
    pcm = (torch.as_tensor(samples, dtype=torch.float64).clamp(-1.0, 1.0 - 1.0 / 32768) * 32768).round()
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(sample_rate)
        handle.writeframes(pcm.to(torch.int16).numpy().astype("<i2").tobytes())


def encode_transcript(text: str) -> Tensor:
    """(L,) long CTC label ids of a transcript: lowercased, runs of whitespace as one space, stripped; a character
    outside ``ALPHABET`` raises ValueError naming it."""
    text = " ".join(text.lower().split())
    if not text:
        raise ValueError("the transcript is empty")
    bad = next((char for char in text if char not in ALPHABET), None)
    if bad is not None:
        raise ValueError(f"character {bad!r} of transcript {text!r} is outside the alphabet {ALPHABET!r}")
    return torch.tensor([ALPHABET.index(char) + 1 for char in text], dtype=torch.long)


def decode_transcript(ids: Tensor | list[int]) -> str:
    return "".join(ALPHABET[int(i) - 1] for i in ids)


def read_recording_list(path: str | Path) -> list[Path]:
    """The recordings ``path`` names: itself when it is a WAV file (it starts with ``RIFF``), else a text file of WAV
    paths, one per line (relative to its folder; a manifest's ``<TAB>transcript`` ignored; blank lines and ``#``
    comments skipped). A missing file or an empty list raises ValueError naming the list and line."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            if handle.read(4) == b"RIFF":
                return [path]
        lines = path.read_text(encoding="utf-8-sig").splitlines()  # -sig: a BOM (Notepad) is no part of a path
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read as a WAV file or a UTF-8 list of WAV files ({error})") from None
    recordings = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith("#"):
            continue
        audio = Path(line.partition("\t")[0].strip())
        audio = audio if audio.is_absolute() else path.parent / audio
        if not audio.is_file():
            raise ValueError(f"{path}: line {number}: no such audio file {audio}")
        recordings.append(audio)
    if not recordings:
        raise ValueError(f"{path}: lists no audio file")
    return recordings


def read_audio_manifest(path: str | Path) -> list[tuple[Path, str]]:
    """``(wav path, transcript)`` per ``path<TAB>transcript`` line; relative paths are taken from the manifest's
    folder; blank lines and ``#`` comments are skipped. A line without a tab, an empty transcript or a missing WAV
    file raises ValueError naming the manifest and line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()  # -sig: a BOM (Notepad) is no part of a path
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read as a UTF-8 manifest ({error})") from None
    entries = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith("#"):
            continue
        audio, tab, transcript = line.partition("\t")
        if not tab or not audio.strip() or not transcript.strip():
            raise ValueError(f"{path}: line {number}: expected 'path<TAB>transcript', got {line[:60]!r}")
        audio_path = Path(audio.strip())
        audio_path = audio_path if audio_path.is_absolute() else path.parent / audio_path
        if not audio_path.is_file():
            raise ValueError(f"{path}: line {number}: no such audio file {audio_path}")
        entries.append((audio_path, transcript.strip()))
    if not entries:
        raise ValueError(f"{path}: the manifest lists no audio file")
    return entries

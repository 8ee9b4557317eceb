"""Speech: the log-Mel front end against closed forms (mel scale, triangular filters, a pure tone's power and mel
bin), band-limited resampling, WAV reading, transcripts, manifests, the speech-features file and its source, the
Asterisk prompts, espeak-ng discovery, and the digits recipe with fake espeak-ng / apt-get / dpkg."""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
import stat
import sys
import wave

import numpy as np
import pytest
import torch
from debian_fakes import fake_debian

from markovformer.data.readers.audio import (
    ALPHABET,
    CTC_LABEL_NAMES,
    LogMelConfig,
    decode_transcript,
    encode_transcript,
    hz_to_mel,
    log_mel,
    mel_filterbank,
    mel_to_hz,
    power_spectrogram,
    read_audio_manifest,
    read_wav,
    resample,
    write_wav,
)
from markovformer.data.recipes import espeak
from markovformer.data.recipes.espeak import espeak_ng, packages_to_fetch, parse_apt_depends
from markovformer.data.recipes.speech import (
    ASTERISK_SOUNDS,
    ASTERISK_TRANSCRIPTS,
    HELD_OUT_VARIANTS,
    SPEECH_SPLITS,
    TRAIN_VARIANTS,
    WORDS,
    DigitsRecipe,
    add_noise,
    join_recordings,
    load_speech_features,
    parse_asterisk_transcripts,
    prepare_digits,
    read_speech_features,
    recorded_words,
    recording_features,
    sample_words,
    synthesis_settings,
    trim_silence,
    write_speech_features,
)
from markovformer.data.sources import DATA_SOURCES, source_tasks


def _tone(frequency: float, seconds: float, rate: int, amplitude: float = 0.5) -> torch.Tensor:
    t = torch.arange(round(seconds * rate), dtype=torch.float64) / rate
    return amplitude * torch.sin(2 * math.pi * frequency * t)


# The front end


def test_slaney_mel_scale_closed_form():
    hz = torch.tensor([0.0, 200.0, 1000.0, 2000.0, 6400.0])
    expected = [0.0, 3.0, 15.0, 15.0 + 27 * math.log(2) / math.log(6.4), 42.0]
    torch.testing.assert_close(hz_to_mel(hz), torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(mel_to_hz(hz_to_mel(hz)), hz.double())


def test_filterbank_is_the_triangles_between_neighbouring_centres():
    config = LogMelConfig()
    weights = mel_filterbank(config)
    assert weights.shape == (80, 257)
    edges = [float(mel_to_hz(torch.tensor(m))) for m in np.linspace(0.0, float(hz_to_mel(4000.0)), 82)]
    for m in (0, 17, 79):
        for k in range(257):
            f = k * 8000 / 512
            lower, centre, upper = edges[m : m + 3]
            expected = max(0.0, min((f - lower) / (centre - lower), (upper - f) / (upper - centre)))
            assert weights[m, k].item() == pytest.approx(expected, abs=1e-12)
    inside = slice(math.ceil(edges[1] * 512 / 8000), math.floor(edges[-2] * 512 / 8000) + 1)
    torch.testing.assert_close(weights[:, inside].sum(0), torch.ones(inside.stop - inside.start, dtype=torch.float64))


def test_filterbank_refuses_empty_filters():
    with pytest.raises(ValueError, match="covers no FFT bin"):
        mel_filterbank(LogMelConfig(n_fft=256, win_length=200, n_mels=200))


def test_power_of_a_bin_centred_tone_is_the_closed_form():
    config = LogMelConfig()
    amplitude, bin_index = 0.3, 64  # 64 * 8000 / 512 = 1000 Hz, a whole number of periods per FFT
    power = power_spectrogram(_tone(bin_index * 8000 / 512, 0.1, 8000, amplitude), config)
    window = torch.hann_window(config.win_length, periodic=False, dtype=torch.float64)
    # A sine of amplitude A puts |A/2 * sum_n w[n] e^{i phase}|^2 in its bin, up to the other sign's tiny leakage.
    expected = (amplitude / 2 * window.sum()) ** 2
    assert power[2, bin_index].item() == pytest.approx(expected.item(), rel=2e-3)
    assert power.shape == (math.ceil((800 - 200) / 80) + 1, 257)


@pytest.mark.parametrize("mel_bin", [3, 30, 61, 79])
def test_a_pure_tone_lands_in_its_mel_bin(mel_bin):
    config = LogMelConfig()
    centres = mel_to_hz(torch.linspace(0.0, float(hz_to_mel(4000.0)), 82))[1:-1]
    features = log_mel(_tone(float(centres[mel_bin]), 0.5, 8000), config)
    assert features.shape[1] == 80 and features.dtype == torch.float32
    assert int(features.mean(0).argmax()) == mel_bin


def test_log_mel_of_silence_is_the_floor():
    config = LogMelConfig()
    assert torch.all(log_mel(torch.zeros(1000), config) == math.log(config.floor))


def test_resampling_a_periodic_tone_is_exact():
    moved = resample(_tone(440.0, 1.0, 22050), 22050, 8000)
    assert len(moved) == 8000
    torch.testing.assert_close(moved, _tone(440.0, 1.0, 8000), atol=1e-9, rtol=0)
    torch.testing.assert_close(resample(_tone(300.0, 0.5, 8000), 8000, 16000), _tone(300.0, 0.5, 16000), atol=1e-9,
                               rtol=0)  # fmt: skip


def test_config_for_other_rates():
    config = LogMelConfig.for_rate(16000)
    assert (config.win_length, config.hop_length, config.n_fft) == (400, 160, 512)
    with pytest.raises(ValueError, match="win_length=600 must be <= n_fft=512"):
        LogMelConfig(win_length=600)


# Files


def test_wav_round_trip_and_other_sample_widths(tmp_path):
    samples = _tone(500.0, 0.05, 8000)
    write_wav(tmp_path / "a.wav", samples, 8000)
    read, rate = read_wav(tmp_path / "a.wav")
    assert rate == 8000
    torch.testing.assert_close(read, samples, atol=1 / 32768, rtol=0)
    values = [-(1 << 23), -1, 0, 1, (1 << 23) - 1]
    with wave.open(str(tmp_path / "b.wav"), "wb") as handle:  # 24-bit stereo: left = values, right = 0
        handle.setnchannels(2)
        handle.setsampwidth(3)
        handle.setframerate(16000)
        handle.writeframes(b"".join(v.to_bytes(3, "little", signed=True) + bytes(3) for v in values))
    read, rate = read_wav(tmp_path / "b.wav")
    torch.testing.assert_close(read, torch.tensor(values, dtype=torch.float64) / (1 << 23) / 2)
    with wave.open(str(tmp_path / "c.wav"), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(1)
        handle.setframerate(8000)
        handle.writeframes(bytes([0, 128, 255]))
    torch.testing.assert_close(
        read_wav(tmp_path / "c.wav")[0], torch.tensor([-1.0, 0.0, 127 / 128], dtype=torch.float64)
    )
    (tmp_path / "d.wav").write_bytes(b"not a wav file")
    with pytest.raises(ValueError, match="cannot read as a PCM WAV"):
        read_wav(tmp_path / "d.wav")


def test_a_wav_cut_short_is_refused_naming_the_file(tmp_path):
    """(a file cut inside a sample failed with numpy's "buffer size must be a multiple of element size", naming no
    file; one cut between samples read part of the recording without a word; one cut in its header said "()")"""
    write_wav(tmp_path / "whole.wav", _tone(500.0, 0.05, 8000), 8000)  # 400 16-bit samples after a 44-byte header
    data = (tmp_path / "whole.wav").read_bytes()
    assert len(data) == 44 + 2 * 400
    for size, message in ((44 + 2 * 100 + 1, "ends inside a sample"), (44 + 2 * 100, "100 of the 400 samples"),
                          (30, "ends before its header does"), (0, "cannot read as a PCM WAV")):  # fmt: skip
        (tmp_path / "cut.wav").write_bytes(data[:size])
        with pytest.raises(ValueError, match=message) as error:
            read_wav(tmp_path / "cut.wav")
        assert str(error.value).startswith(f"{tmp_path / 'cut.wav'}: ")


def test_transcripts_encode_to_ctc_ids():
    ids = encode_transcript("  Twenty   ONE ")
    assert ids.tolist() == [ALPHABET.index(c) + 1 for c in "twenty one"]
    assert decode_transcript(ids) == "twenty one" and CTC_LABEL_NAMES[0] == "<blank>"
    assert "".join(CTC_LABEL_NAMES[i] for i in ids.tolist()) == "twenty one"  # how the CTC metrics spell words
    with pytest.raises(ValueError, match="character '7'"):
        encode_transcript("room 7")


def _manifest(tmp_path, count: int = 10):
    (tmp_path / "audio").mkdir()
    lines = ["# path<TAB>transcript"]
    for i in range(count):
        write_wav(tmp_path / "audio" / f"{i}.wav", _tone(300.0 + 50 * i, 0.2 + 0.01 * i, 16000), 16000)
        lines.append(f"audio/{i}.wav\tword {WORDS[i]}")
    (tmp_path / "manifest.tsv").write_text("\n".join(lines) + "\n")
    return tmp_path / "manifest.tsv"


def test_manifest_reader_resolves_paths_and_names_bad_lines(tmp_path):
    path = _manifest(tmp_path, 2)
    assert read_audio_manifest(path) == [
        (tmp_path / "audio/0.wav", "word zero"),
        (tmp_path / "audio/1.wav", "word one"),
    ]
    cases = [
        ("audio/0.wav no tab\n", "line 1: expected 'path<TAB>transcript'"),
        ("audio/9.wav\tnine\n", "line 1: no such audio file"),
        ("\n", "lists no audio file"),
    ]
    for text, message in cases:
        (tmp_path / "bad.tsv").write_text(text)
        with pytest.raises(ValueError, match=message):
            read_audio_manifest(tmp_path / "bad.tsv")


def test_audio_manifest_source_builds_normalised_ctc_examples(tmp_path):
    path = _manifest(tmp_path)
    bundle = DATA_SOURCES["audio_manifest"](path=str(path), fractions=(0.6, 0.2, 0.2)).build(seed=0)
    assert source_tasks("audio_manifest") == ("ctc",)
    assert bundle.info["input_dim"] == 80 and bundle.info["label_names"] == CTC_LABEL_NAMES
    assert (len(bundle.train), len(bundle.val), len(bundle.test)) == (6, 2, 2)
    reseeded = DATA_SOURCES["audio_manifest"](path=str(path), fractions=(0.6, 0.2, 0.2)).build(seed=1)
    assert set(reseeded.splits["val"]) != set(bundle.splits["val"])  # the random split follows the run seed
    example, name = bundle.val[0], bundle.splits["val"][0]
    index = int(name.rsplit("/", 1)[1].split(".")[0])
    assert decode_transcript(example["labels"]) == f"word {WORDS[index]}"
    assert example["input_features"].shape[0] == math.ceil((round((0.2 + 0.01 * index) * 8000) - 200) / 80) + 1
    train = torch.cat([e["input_features"] for e in bundle.train]).double()
    torch.testing.assert_close(train.mean(0), torch.zeros(80, dtype=torch.float64), atol=1e-5, rtol=0)
    raw = torch.cat([log_mel(resample(read_wav(tmp_path / n)[0], 16000, 8000), LogMelConfig()) for n in
                     bundle.splits["train"]]).double()  # fmt: skip
    torch.testing.assert_close(
        torch.tensor(bundle.info["normalisation"]["mean"], dtype=torch.float64), raw.mean(0), atol=1e-5, rtol=0
    )


def _utterances(count: int, seed: int = 0) -> list[tuple[torch.Tensor, str, str]]:
    rng = np.random.default_rng(seed)
    return [(torch.randn(int(rng.integers(5, 30)), 80, generator=torch.Generator().manual_seed(i)),
             sample_words(rng, 3), SPEECH_SPLITS[i % 4]) for i in range(count)]  # fmt: skip


def test_speech_file_round_trips_and_the_source_picks_the_test_set(tmp_path):
    utterances = _utterances(12)
    path = write_speech_features(tmp_path / "s.safetensors", utterances, {"note": [1, 2]})
    parts, metadata = read_speech_features(path)
    assert metadata["note"] == [1, 2] and metadata["alphabet"] == ALPHABET
    for split in SPEECH_SPLITS:
        expected = [(f, t) for f, t, s in utterances if s == split]
        assert [decode_transcript(ids) for _, ids in parts[split]] == [t for _, t in expected]
        for (features, _), (original, _) in zip(parts[split], expected, strict=True):
            torch.testing.assert_close(features, original.half().float())
    recorded = DATA_SOURCES["speech_features"](path=str(path)).build(seed=0)
    synthetic = load_speech_features(path, test_set="synthetic")
    assert source_tasks("speech_features") == ("ctc",)
    assert [decode_transcript(e["labels"]) for e in recorded.test] == [t for _, t, s in utterances if s == "recorded"]
    assert [decode_transcript(e["labels"]) for e in synthetic.test] == [t for _, t, s in utterances if s == "test"]
    frames = torch.cat([f.half().float() for f, _, s in utterances if s == "train"]).double()
    mean, std = frames.mean(0), frames.std(0, correction=0)
    first_val = next(f for f, _, s in utterances if s == "val").half().double()
    torch.testing.assert_close(recorded.val[0]["input_features"].double(), (first_val - mean) / std, atol=1e-5,
                               rtol=0)  # fmt: skip
    with pytest.raises(ValueError, match="test_set must be"):
        load_speech_features(path, test_set="real")


def test_stacked_frames_are_the_normalised_frames_side_by_side(tmp_path):
    path = write_speech_features(tmp_path / "s.safetensors", _utterances(12), {})
    plain = load_speech_features(path, test_set="synthetic")
    stacked = DATA_SOURCES["speech_features"](path=str(path), test_set="synthetic", stack_frames=3).build(seed=0)
    assert stacked.info["input_dim"] == 240 and stacked.info["stack_frames"] == 3
    for split in ("train", "val", "test"):
        for original, grouped in zip(getattr(plain, split), getattr(stacked, split), strict=True):
            frames, wide = original["input_features"], grouped["input_features"]
            assert wide.shape == (math.ceil(len(frames) / 3), 240)
            for t in range(len(frames)):  # frame t is slot t % 3 of row t // 3; the rest of the last row is zero
                torch.testing.assert_close(wide[t // 3, 80 * (t % 3) : 80 * (t % 3 + 1)], frames[t])
            assert not wide.flatten()[len(frames) * 80 :].any()
            assert torch.equal(grouped["labels"], original["labels"])
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match=f"stack_frames must be an integer >= 1, got {bad!r}"):
            load_speech_features(path, stack=bad)


def test_a_recording_given_to_a_run_of_a_speech_file_is_laid_out_as_the_files_utterances(tmp_path):
    """The recipe cuts its speech to the loud span and borders it with 50-200 ms of silence; generate read a
    recording with the silences it came with (0.6 s and 0.9 s of hum here: 60 + 30 + 90 frames where the model saw
    5-20 + speech + 5-20). Laid out with the middle of the recipe's silences (125 ms), a
    recording's features are those of the same speech in the file: the file's frames of trim_silence(recording)
    between 1,000 zero samples each side."""
    rate, config = 8000, LogMelConfig()
    hum = _tone(50.0, 1.5, rate, amplitude=0.002)  # 0.4 % of the speech's peak: below trim_silence's 2 %
    recording = torch.cat([hum[: round(0.6 * rate)], _tone(440.0, 0.3, rate), hum[round(0.6 * rate) :]])
    write_wav(tmp_path / "recording.wav", recording, rate)
    samples, _ = read_wav(tmp_path / "recording.wav")  # the 16-bit samples generate reads
    edge = torch.zeros(1000, dtype=torch.float64)
    same_speech = log_mel(torch.cat([edge, trim_silence(samples), edge]), config)
    others = [log_mel(torch.cat([edge, _tone(300.0 + 100 * i, 0.2 + 0.1 * i, rate), edge]), config) for i in range(3)]
    utterances = [(same_speech, "one", "train"), (others[0], "two", "train"), (others[1], "three", "val"),
                  (others[2], "four", "recorded")]  # fmt: skip
    path = write_speech_features(tmp_path / "s.safetensors", utterances, {"log_mel": dataclasses.asdict(config)})
    for stack in (1, 3):
        bundle = load_speech_features(path, stack=stack)
        assert bundle.info["trim_silence"] is True
        trained = bundle.train[0]["input_features"]  # float16 in the file: within its rounding
        torch.testing.assert_close(recording_features(tmp_path / "recording.wav", bundle.info), trained, rtol=0,
                                   atol=5e-3)  # fmt: skip


def test_speech_file_of_another_format_is_refused(tmp_path):
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a markovformer-speech-features/1 file"):
        read_speech_features(tmp_path / "other.safetensors")


# The synthesis pieces


def test_sampled_transcripts_and_settings_follow_the_recipe():
    rng, recipe = np.random.default_rng(0), DigitsRecipe()
    texts = [sample_words(rng, 4) for _ in range(300)]
    assert all(1 <= len(t.split()) <= 4 and set(t.split()) <= set(WORDS) for t in texts)
    assert {len(t.split()) for t in texts} == {1, 2, 3, 4}
    for split, variants in [("train", TRAIN_VARIANTS), ("val", HELD_OUT_VARIANTS), ("test", HELD_OUT_VARIANTS)]:
        settings = [synthesis_settings(rng, split, recipe) for _ in range(50)]
        assert {s["voice"].split("+")[1] for s in settings} <= set(variants)
        assert all(120 <= s["speed"] <= 200 and 20 <= s["pitch"] <= 80 for s in settings)
    assert not set(TRAIN_VARIANTS) & set(HELD_OUT_VARIANTS)


def test_trim_and_noise():
    signal = torch.cat([torch.zeros(100), _tone(400.0, 0.1, 8000), torch.zeros(50)])
    trimmed = trim_silence(signal)
    assert len(trimmed) < 800 and trimmed.abs().max() == signal.abs().max()
    tone = _tone(400.0, 5.0, 8000)
    noisy = add_noise(tone, 10.0, np.random.default_rng(0))
    snr = 10 * math.log10(tone.square().mean() / (noisy - tone).square().mean())
    assert snr == pytest.approx(10.0, abs=0.1)


def test_apt_depends_output_parses_into_or_groups():
    text = ("libpulse0\n  Depends: libc6\n |Depends: libsystemd0\n  Depends: libelogind0\n  Depends: <debconf-2.0>\n"
            "    debconf\n  Depends: libsndfile1\n    libsndfile-alt\n  Suggests: pulseaudio\n"
            "  PreDepends: dpkg\n  Depends: <nothing>\n")  # fmt: skip
    assert parse_apt_depends(text) == [["libc6"], ["libsystemd0", "libelogind0"], ["debconf"], ["libsndfile1"],
                                       ["dpkg"], []]  # fmt: skip


def _fake_tool(folder, name: str, body: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(body)
    (folder / name).chmod((folder / name).stat().st_mode | stat.S_IEXEC)


def test_packages_to_fetch_follows_what_is_missing(tmp_path, monkeypatch):
    depends = {
        "espeak-ng": "  Depends: libc6\n  Depends: libespeak-ng1\n",
        "libespeak-ng1": "  Depends: libpcaudio0\n  Depends: espeak-ng-data\n",
        "libpcaudio0": " |Depends: libasound2\n  Depends: libasound-alt\n  Depends: libespeak-ng1\n",
        "espeak-ng-data": "",
    }
    cases = "".join(f'  {name}) printf "{name}\\n{text}" ;;\n' for name, text in depends.items())
    _fake_tool(tmp_path, "apt-cache", f'#!/bin/sh\ncase "$2" in\n{cases}  *) exit 100 ;;\nesac\n')
    _fake_tool(tmp_path, "dpkg-query", '#!/bin/sh\ncase "$3" in libc6|libasound2) printf installed ;; '
               '*) exit 1 ;; esac\n')  # fmt: skip
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert packages_to_fetch("espeak-ng") == ["espeak-ng", "libespeak-ng1", "libpcaudio0", "espeak-ng-data"]


def test_espeak_missing_with_no_apt_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(espeak.shutil, "which", lambda tool: None)
    with pytest.raises(RuntimeError, match="speech synthesis needs espeak-ng"):
        with espeak_ng():
            pass


def _asterisk_tree(tmp_path) -> dict[str, dict[str, bytes]]:
    """The two Asterisk packages: a recording (a short tone) and a transcript per number word, plus other prompts."""
    keys = {word: f"digits/{i}" for i, word in enumerate(WORDS)}
    lines = ["; Core Asterisk Sounds in English", "activated: Activated.", "digits/hundred-extra: Hundred and more"]
    lines += [f"{key}: {word.capitalize() if i % 2 else word}" for i, (word, key) in enumerate(keys.items())]
    sounds = {}
    for i, key in enumerate(keys.values()):
        write_wav(tmp_path / "w.wav", torch.cat([torch.zeros(80), _tone(200.0 + 20 * i, 0.1, 8000)]), 8000)
        sounds[f"usr/share/asterisk/sounds/en_US_f_Allison/{key}.wav"] = (tmp_path / "w.wav").read_bytes()
    transcripts = gzip.compress(("\n".join(lines) + "\n").encode())
    return {ASTERISK_TRANSCRIPTS[0]: {ASTERISK_TRANSCRIPTS[1]: transcripts}, ASTERISK_SOUNDS: sounds}


def test_asterisk_words_come_from_their_transcripts(tmp_path):
    tree = _asterisk_tree(tmp_path)
    transcripts = parse_asterisk_transcripts(gzip.decompress(tree[ASTERISK_TRANSCRIPTS[0]][ASTERISK_TRANSCRIPTS[1]])
                                             .decode().splitlines())  # fmt: skip
    assert transcripts["digits/0"] == "zero" and transcripts["activated"] == "Activated."
    root = tmp_path / "root"
    for member, content in tree[ASTERISK_SOUNDS].items():
        (root / member).parent.mkdir(parents=True, exist_ok=True)
        (root / member).write_bytes(content)
    words = recorded_words(root / "usr/share/asterisk/sounds/en_US_f_Allison", transcripts, 8000)
    assert set(words) == set(WORDS) and 798 <= len(words["zero"]) <= 800  # the leading silence is trimmed
    joined = join_recordings("zero one", words, 8000, np.random.default_rng(0))
    assert 1600 + 240 <= len(joined) <= 1600 + 1600
    del transcripts["digits/5"]
    with pytest.raises(RuntimeError, match="no recording of 'five'"):
        recorded_words(root / "usr/share/asterisk/sounds/en_US_f_Allison", transcripts, 8000)


FAKE_ESPEAK = """#!{python}
import math, struct, sys, wave
args = sys.argv[1:]
if args == ["--version"]:
    sys.exit(0)
rate, text = 22050, args[-1]
frequency = 200 + 10 * (sum(map(ord, text)) % 80)
samples = [0] * 2000 + [int(12000 * math.sin(2 * math.pi * frequency * i / rate))
                        for i in range(int(0.2 * rate * len(text.split())))] + [0] * 2000
with wave.open(args[args.index("-w") + 1], "wb") as handle:
    handle.setnchannels(1)
    handle.setsampwidth(2)
    handle.setframerate(rate)
    handle.writeframes(struct.pack("<%dh" % len(samples), *samples))
"""


def _speech_tools(tmp_path, monkeypatch, failing: tuple[str, ...] = ()) -> None:
    path = fake_debian(tmp_path / "debian", _asterisk_tree(tmp_path), failing)
    _fake_tool(tmp_path / "espeak", "espeak-ng", FAKE_ESPEAK.format(python=sys.executable))
    monkeypatch.setenv("PATH", f"{tmp_path / 'espeak'}{os.pathsep}{path}")


SMALL = DigitsRecipe(counts=(4, 2, 2), recorded=3, max_words=3)


def test_prepare_digits_writes_every_split(tmp_path, monkeypatch):
    _speech_tools(tmp_path, monkeypatch)
    path = prepare_digits(tmp_path / "out" / "digits.safetensors", SMALL)
    parts, metadata = read_speech_features(path)
    assert {name: len(items) for name, items in parts.items()} == {"train": 4, "val": 2, "test": 2, "recorded": 3}
    assert metadata["recipe"]["counts"] == [4, 2, 2] and metadata["log_mel"]["n_mels"] == 80
    for items in parts.values():
        for features, ids in items:
            words = decode_transcript(ids).split()
            assert 1 <= len(words) <= 3 and set(words) <= set(WORDS)
            assert features.shape[1] == 80 and torch.isfinite(features).all()
            # the fake voice speaks 0.2 s a word; the recordings are 0.1 s a word plus pauses; 50-200 ms padding
            assert features.shape[0] >= 10 * len(words) + 2 * 5
    again, again_metadata = read_speech_features(prepare_digits(tmp_path / "again.safetensors", SMALL))
    assert again_metadata == metadata  # seeded: the same data every time
    for name, items in parts.items():
        for (features, ids), (same_features, same_ids) in zip(items, again[name], strict=True):
            assert torch.equal(features, same_features) and torch.equal(ids, same_ids)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["digits.safetensors"]


def test_prepare_digits_failed_download_writes_nothing(tmp_path, monkeypatch):
    _speech_tools(tmp_path, monkeypatch, failing=(ASTERISK_SOUNDS,))
    with pytest.raises(RuntimeError, match=f"could not download {ASTERISK_SOUNDS}"):
        prepare_digits(tmp_path / "out" / "digits.safetensors", SMALL)
    assert not (tmp_path / "out").exists()

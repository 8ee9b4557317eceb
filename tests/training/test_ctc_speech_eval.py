"""A CTC run on recordings (``audio_manifest``) scored with ``eval --data``: another manifest as a test set of its
own, and audio turned into features otherwise than the run's training data was."""

from __future__ import annotations

import json
import math

import pytest
import torch

from markovformer.cli.main import main
from markovformer.data.readers.audio import write_wav
from markovformer.training.run_config import resolve_run_config
from markovformer.training.runner import train


def _manifest(folder, texts: list[str]):
    folder.mkdir()
    lines = []
    for index, text in enumerate(texts):  # one tone per utterance, long enough for its characters at 10 ms frames
        t = torch.arange(int(0.04 * len(text) * 8000), dtype=torch.float64) / 8000
        write_wav(folder / f"{index}.wav", 0.5 * torch.sin(2 * math.pi * (300 + 40 * index) * t), 8000)
        lines.append(f"{index}.wav\t{text}")
    (folder / "manifest.tsv").write_text("\n".join(lines) + "\n")
    return folder / "manifest.tsv"


TEXTS = ["ab", "ba", "a b", "bb", "abba", "b a", "aa", "ab ba", "ba ab", "a", "b", "aab"]


@pytest.fixture(scope="module")
def speech_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("speech")
    manifest = _manifest(root / "audio", TEXTS)
    values = {"task": "ctc", "output_dir": str(root / "run"),
              "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2, "causal": False},
              "data": {"source": "audio_manifest", "path": str(manifest), "fractions": [0.5, 0.25, 0.25],
                       "stack_frames": 2},
              "trainer": {"max_steps": 2, "batch_size": 4, "eval_every": 2, "checkpoint_every": 2, "log_every": 2,
                          "warmup_steps": 1}}  # fmt: skip
    train(resolve_run_config(values))
    return root


def scored(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(["eval", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_manifest_of_its_own_is_a_test_set_normalised_as_the_runs_data(speech_run, capsys):
    """(``fractions=[0,0,1]`` was refused: "the speech data has no training utterance", the statistics being fitted
    on the scored data's own training part; a run's features are normalised with its own)"""
    run, manifest = speech_run / "run", speech_run / "audio" / "manifest.tsv"
    whole = scored(capsys, str(run), "--split", "all")
    alone = scored(capsys, str(run), "--split", "test", "--data", f"path={manifest}", "fractions=[0,0,1]")
    assert alone["examples"] == whole["examples"] == len(TEXTS)
    # the same utterances (in another order) with the same features: the same corpus rates and mean loss
    for key in ("loss", "wer", "cer"):
        assert alone["metrics"][key] == pytest.approx(whole["metrics"][key], rel=1e-5), key


def test_audio_turned_into_other_features_than_the_runs_is_refused(speech_run, capsys):
    """(``--data sample_rate=16000`` made 16 kHz log-Mel frames of the run's width, which its 8 kHz model scored
    without a word)"""
    run = speech_run / "run"
    for option, said in (("sample_rate=16000", "'sample_rate': 16000"), ("stack_frames=1", "stacked per input 1")):
        capsys.readouterr()
        assert main(["eval", str(run), "--split", "all", "--data", option]) == 2
        error = capsys.readouterr().err
        assert said in error and "data.json" in error and len(error.strip().splitlines()) == 1, error


def test_utterances_too_short_for_their_transcripts_are_said_beside_the_infinite_loss(speech_run, capsys):
    """(the loss read ``inf``, ``null`` in JSON, without a word of why)"""
    folder = speech_run / "short"
    manifest = _manifest(folder, ["ab", "ba"])
    write_wav(folder / "tiny.wav", 0.3 * torch.sin(torch.arange(400, dtype=torch.float64)), 8000)  # 4 frames
    with manifest.open("a") as handle:  # 4 frames stacked by 2: 2 inputs for "aabb", which needs 4 + 2
        handle.write("tiny.wav\taabb\n")
    capsys.readouterr()
    assert main(["eval", str(speech_run / "run"), "--split", "test", "--data", f"path={manifest}", "fractions=[0,0,1]",
                 "--json"]) == 0  # fmt: skip
    printed = capsys.readouterr()
    assert json.loads(printed.out)["metrics"]["loss"] is None  # JSON's inf
    warning = printed.err
    assert "1 of the 3 scored utterances have fewer frames than their labels need" in warning
    assert "example 2, from 0: 2 frames for 4 labels, which need 6" in warning


def test_generate_transcribes_recordings_as_eval_decodes_them(speech_run, tmp_path, capsys):
    """generate refused CTC runs: a speech user could not transcribe a recording without writing a transcript for
    it first. It reads each WAV as the run read its own and decodes it greedily: the transcripts equal the
    hypotheses eval --predictions writes for the same recordings (the texts are unique: keyed by reference)."""
    run, manifest = speech_run / "run", speech_run / "audio" / "manifest.tsv"
    out = tmp_path / "predictions.tsv"
    scored(capsys, str(run), "--split", "test", "--data", f"path={manifest}", "fractions=[0,0,1]",
           "--predictions", str(out))  # fmt: skip
    hypotheses = dict(line.split("\t") for line in out.read_text().splitlines()[1:])
    listing = tmp_path / "recordings.txt"
    listing.write_text("".join(f"{speech_run / 'audio' / f'{index}.wav'}\n" for index in range(len(TEXTS))))
    assert main(["generate", str(run), "--input", str(listing)]) == 0
    assert capsys.readouterr().out.splitlines() == [hypotheses[text] for text in TEXTS]
    assert main(["generate", str(run), "--input", str(speech_run / "audio" / "4.wav")]) == 0  # one WAV file
    assert capsys.readouterr().out.splitlines() == [hypotheses[TEXTS[4]]]
    assert main(["generate", str(run), "--input", str(manifest)]) == 0  # a manifest: its transcripts ignored
    assert capsys.readouterr().out.splitlines() == [hypotheses[text] for text in TEXTS]
    listing.write_text("missing.wav\n")
    assert main(["generate", str(run), "--input", str(listing)]) == 2
    assert "line 1: no such audio file" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--beam-size", "4"], ["--temperature", "0.8"], ["--top-k", "3"],
                                   ["--top-p", "0.9"], ["--max-new-tokens", "1"]])  # fmt: skip
def test_generate_refuses_a_decoding_flag_a_transcript_does_not_take(speech_run, capsys, flags):
    """A transcript is the best path: --beam-size 4 (or sampling, a length) printed the greedy one
    as if searched."""
    wav = str(speech_run / "audio" / "4.wav")
    capsys.readouterr()
    assert main(["generate", str(speech_run / "run"), "--input", wav, *flags]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and f"{flags[0]} " in printed.err and "greedily" in printed.err
    assert main(["generate", str(speech_run / "run"), "--input", wav, "--temperature", "0"]) == 0  # greedy, as asked


def test_generate_refuses_compile_step_a_length_penalty_and_prompt_flags_for_a_transcript(speech_run, capsys):
    """--compile-step was ignored (a transcript is one forward pass, no decoding step), and so was --length-penalty
    (a transcript is the best path, ranked by nothing), and --skip-unknown and --through-eod (no prompt is continued):
    each is refused in one line naming it."""
    wav = str(speech_run / "audio" / "4.wav")
    capsys.readouterr()
    for flags, named in ((["--compile-step"], "--compile-step: a CTC run transcribes each batch of recordings in one "
                                              "forward pass; it has no decoding step to compile"),
                         (["--length-penalty", "0.5"], "--length-penalty 0.5: only beam search")):  # fmt: skip
        assert main(["generate", str(speech_run / "run"), "--input", wav, *flags]) == 2
        printed = capsys.readouterr()
        assert printed.out == "" and len(printed.err.strip().splitlines()) == 1 and named in printed.err
    for flag in ("--skip-unknown", "--through-eod"):  # a language model's prompt flags: they were ignored
        assert main(["generate", str(speech_run / "run"), "--input", wav, flag]) == 2
        assert f"{flag}: a CTC run continues no prompt" in capsys.readouterr().err

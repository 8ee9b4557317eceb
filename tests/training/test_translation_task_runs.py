"""A translation run from the command line: it trains and validates with the BLEU of its own greedy translations,
eval scores (other pairs too, with the run's tokenizer) and writes what it scores, generate translates prompts and
files line by line, too-long sources and another tokenizer's data are refused, and the de-en data recipe behind
`data prepare`."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch

from markovformer.cli.main import main
from markovformer.data.translation import (
    SyntheticTranslationSource,
    collate_translation,
    corpus_bleu,
    decode_generated,
    translation_lengths,
)
from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration
from markovformer.training.metrics import TranslationMetrics
from markovformer.training.run_config import ConfigError, resolve_run_config
from markovformer.training.runner import evaluate, load_run, train
from markovformer.training.tasks import build_task


def _config(tmp_path: Path, **trainer) -> dict:
    model = {"d_model": 32, "n_heads": 2, "n_encoder_layers": 1, "n_decoder_layers": 2, "order": 2, "dropout": 0.0,
             "max_positions": 40}  # fmt: skip
    data = {"source": "synthetic_translation", "train_examples": 256, "val_examples": 24, "test_examples": 24,
            "max_length": 8}  # fmt: skip
    schedule = {"max_steps": 40, "batch_size": 16, "lr": 3e-3, "warmup_steps": 5, "eval_every": 20,
                "checkpoint_every": 20, "log_every": 20, "eval_batch_size": 10}  # fmt: skip
    return {"task": "translation", "model_type": "markov_translator", "output_dir": str(tmp_path / "run"),
            "model": model, "data": data, "trainer": {**schedule, **trainer}}  # fmt: skip


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("translation")
    results = train(resolve_run_config(_config(tmp_path)))
    return tmp_path / "run", results


def test_a_translation_run_validates_with_the_bleu_of_its_own_greedy_translations(trained_run):
    run_dir, results = trained_run
    config, model, _ = load_run(run_dir)
    assert isinstance(model, MarkovTranslatorForConditionalGeneration) and results["steps"] == 40
    bundle = SyntheticTranslationSource(train_examples=256, val_examples=24, test_examples=24, max_length=8).build(0)
    batch = collate_translation(bundle.val)
    model.eval()
    hypotheses = []
    with torch.no_grad():
        loss = model(**batch).loss
        for example in bundle.val:  # each source alone, at most 2 |source| + 10 tokens: as in any batch
            alone = collate_translation([example])
            cap = min(2 * alone["src_ids"].shape[1] + 10, 40)
            hypotheses += decode_generated(bundle.tokenizer, model.generate(alone["src_ids"], alone["src_mask"],
                                                                            max_new_tokens=cap))  # fmt: skip
    references = [bundle.tokenizer.decode(example["tgt_ids"].tolist()) for example in bundle.val]
    assert results["val"]["bleu"] == pytest.approx(corpus_bleu(hypotheses, references), rel=1e-6)
    assert results["val"]["loss"] == pytest.approx(float(loss), rel=1e-5)  # 24 pairs in 3 batches, token-weighted
    again, beam = evaluate(run_dir), evaluate(run_dir, beam_size=3)  # each says the beam its BLEU is of
    assert (results["beam_size"], again["beam_size"], beam["beam_size"]) == (1, 1, 3)
    again, beam = again["metrics"], beam["metrics"]
    assert again["bleu"] == pytest.approx(results["val"]["bleu"]) and again["loss"] == pytest.approx(float(loss))
    assert beam["loss"] == pytest.approx(again["loss"])  # the loss is teacher-forced; only the decoding changes


def test_scoring_decodes_with_the_requested_beam(trained_run):
    run_dir, _ = trained_run
    _, model, _ = load_run(run_dir)
    bundle = SyntheticTranslationSource(train_examples=256, val_examples=24, test_examples=24, max_length=8).build(0)
    batch = collate_translation(bundle.test[:6])
    metrics = TranslationMetrics(bundle.tokenizer)
    model.eval()
    with torch.no_grad():
        build_task("translation").score(model, batch, metrics, beam_size=3)
        beams = []
        for example in bundle.test[:6]:  # each source searched alone, to its own 2 |x| + 10 tokens
            alone = collate_translation([example])
            cap = min(2 * alone["src_ids"].shape[1] + 10, 40)
            beams += decode_generated(bundle.tokenizer, model.generate(alone["src_ids"], alone["src_mask"],
                                                                       max_new_tokens=cap, num_beams=3))  # fmt: skip
    assert metrics.hypotheses == beams


def test_generate_translates_a_prompt_and_a_file_of_sentences(trained_run, tmp_path, capsys):
    run_dir, _ = trained_run
    _, model, _ = load_run(run_dir)
    bundle = SyntheticTranslationSource(train_examples=256, val_examples=24, test_examples=24, max_length=8).build(0)
    sources = [bundle.tokenizer.decode(example["src_ids"].tolist()) for example in bundle.test[:3]]
    batch = collate_translation(bundle.test[:3])
    model.eval()
    expected = decode_generated(bundle.tokenizer, model.generate(batch["src_ids"], batch["src_mask"],
                                                                 max_new_tokens=40))  # fmt: skip
    assert main(["generate", str(run_dir), "--prompt", sources[0], "--max-new-tokens", "40"]) == 0
    assert capsys.readouterr().out.splitlines() == expected[:1]
    (tmp_path / "sources.txt").write_text("\n".join(sources) + "\n")
    assert main(["generate", str(run_dir), "--input", str(tmp_path / "sources.txt"), "--max-new-tokens", "40"]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    assert main(["generate", str(run_dir)]) == 2
    assert "either --prompt" in capsys.readouterr().err
    assert main(["generate", str(run_dir), "--input", str(tmp_path)]) == 2
    assert "a directory, not a file" in capsys.readouterr().err
    (tmp_path / "gap.txt").write_text(f"{sources[0]}\n\n{sources[1]}\n")  # a blank line is named by its number
    assert main(["generate", str(run_dir), "--input", str(tmp_path / "gap.txt")]) == 2
    assert "must be non-empty (line 2 is blank)" in capsys.readouterr().err
    for flag, value in (("--temperature", "0.7"), ("--top-k", "3"), ("--top-p", "0.9")):  # were ignored silently
        assert main(["generate", str(run_dir), "--prompt", sources[0], flag, value]) == 2
        assert f"{flag} {value}: a translation run searches" in capsys.readouterr().err
    for flag in ("--skip-unknown", "--through-eod"):  # a language model's prompt flags, ignored silently too
        assert main(["generate", str(run_dir), "--prompt", sources[0], flag]) == 2
        assert f"{flag}: a translation run continues no prompt" in capsys.readouterr().err
    assert main(["generate", str(run_dir), "--prompt", sources[0], "--temperature", "0", "--max-new-tokens", "40"]) == 0
    assert capsys.readouterr().out.splitlines() == expected[:1]  # 0 (greedy) is what a translation run does
    # ignored silently: the translator's searches have no one-token step to compile, and greedy no length ranking
    assert main(["generate", str(run_dir), "--prompt", sources[0], "--compile-step"]) == 2
    assert capsys.readouterr().err.strip() == ("markovformer: error: --compile-step: MarkovTranslatorForConditional"
                                               "Generation decodes without a one-token step to compile; leave "
                                               "--compile-step off")  # fmt: skip
    assert main(["generate", str(run_dir), "--prompt", sources[0], "--length-penalty", "0.5"]) == 2
    assert "--length-penalty 0.5: only beam search (--beam-size > 1)" in capsys.readouterr().err


def test_generate_without_max_new_tokens_translates_as_eval_scores(trained_run, tmp_path, capsys):
    """`eval` cuts each greedy translation at 2 |x| + 10 tokens, `generate` cut at --max-new-tokens 200: BLEU on
    generate's lines differed from eval's where a hypothesis runs on. Without --max-new-tokens, generate cuts as eval
    does, so sacrebleu on its lines is eval's BLEU; with it, the given length holds."""
    run_dir, _ = trained_run
    bundle = SyntheticTranslationSource(train_examples=256, val_examples=24, test_examples=24, max_length=8).build(0)
    (tmp_path / "val.txt").write_text("".join(bundle.tokenizer.decode(example["src_ids"].tolist()) + "\n"
                                              for example in bundle.val))  # fmt: skip
    references = [bundle.tokenizer.decode(example["tgt_ids"].tolist()) for example in bundle.val]
    assert main(["generate", str(run_dir), "--input", str(tmp_path / "val.txt")]) == 0
    hypotheses = capsys.readouterr().out.splitlines()
    assert corpus_bleu(hypotheses, references) == pytest.approx(evaluate(run_dir)["metrics"]["bleu"], rel=1e-9)
    assert main(["generate", str(run_dir), "--input", str(tmp_path / "val.txt"), "--max-new-tokens", "3"]) == 0
    short = capsys.readouterr().out.splitlines()
    assert all(len(bundle.tokenizer.encode(line)) <= 3 for line in short) and short != hypotheses


def test_eval_writes_the_translations_it_scores(trained_run, tmp_path, capsys):
    """eval wrote no hypotheses, so its BLEU could not be checked or its errors read. --translations writes each
    source, reference and translation of the split: they are the split's own pairs, in order, and sacrebleu on the
    columns is the BLEU eval prints (the beam's translations with --beam-size)."""
    run_dir, _ = trained_run
    bundle = SyntheticTranslationSource(train_examples=256, val_examples=24, test_examples=24, max_length=8).build(0)
    for beam, flag in (("1", "--predictions"), ("3", "--translations")):  # the flag every task takes, its old name
        out = tmp_path / f"beam{beam}.tsv"
        assert main(["eval", str(run_dir), "--split", "test", "--beam-size", beam, flag, str(out), "--json"]) == 0
        bleu = json.loads(capsys.readouterr().out)["metrics"]["bleu"]
        header, *rows = [line.split("\t") for line in out.read_text().splitlines()]
        assert header == ["source", "reference", "translation"] and len(rows) == len(bundle.test)
        for (source, reference, _), example in zip(rows, bundle.test, strict=True):
            assert source == bundle.tokenizer.decode(example["src_ids"].tolist())
            assert reference == bundle.tokenizer.decode(example["tgt_ids"].tolist())
        assert corpus_bleu([row[2] for row in rows], [row[1] for row in rows]) == pytest.approx(bleu, rel=1e-9)
    assert main(["eval", str(run_dir), "--translations", str(tmp_path / "no" / "such.tsv")]) == 2
    assert "in no existing directory" in capsys.readouterr().err


def test_evaluating_with_data_that_fits_another_tokenizer_is_refused(trained_run):
    run_dir, _ = trained_run
    with pytest.raises(ConfigError, match="another tokenizer"):
        evaluate(run_dir, data_overrides={"source_symbols": 3})


def _fake_apt(folder: Path, dictionary: str) -> str:
    folder.mkdir()
    (folder / "fixture").write_text(dictionary, encoding="utf-8")
    scripts = {
        "apt-get": '#!/bin/sh\n[ "$1" = download ] || exit 2\ntouch "$2_1.9-6_all.deb"\n',
        "dpkg": f'#!/bin/sh\nmkdir -p "$3/usr/share/trans"\ncp "{folder / "fixture"}" "$3/usr/share/trans/de-en"\n',
    }
    for name, body in scripts.items():
        (folder / name).write_text(body)
        (folder / name).chmod((folder / name).stat().st_mode | stat.S_IEXEC)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def test_data_prepare_writes_the_recipe_into_the_data_directory_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", _fake_apt(tmp_path / "bin", "Das ist gut. :: That is good.\n"))
    monkeypatch.setenv("MARKOVFORMER_DATA", str(tmp_path / "data"))
    assert main(["data", "prepare", "de-en"]) == 0
    assert (tmp_path / "data" / "de_en.tsv").read_text() == "Das ist gut.\tThat is good.\n"
    assert "configs/mat_de_en.yaml" in capsys.readouterr().out
    (tmp_path / "data" / "de_en.tsv").write_text("kept\tas is\n")
    assert main(["data", "prepare", "de-en"]) == 0 and "already there" in capsys.readouterr().out
    assert (tmp_path / "data" / "de_en.tsv").read_text() == "kept\tas is\n"
    assert main(["data", "prepare", "de-en", "--force", "--dir", str(tmp_path / "other")]) == 0
    assert (tmp_path / "other" / "de_en.tsv").read_text() == "Das ist gut.\tThat is good.\n"
    assert main(["data", "prepare", "de_en"]) == 2
    assert "did you mean 'de-en'" in capsys.readouterr().err


def test_data_prepare_without_apt_is_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither apt-get nor dpkg
    assert main(["data", "prepare", "de-en", "--dir", str(tmp_path)]) == 2
    assert "needs 'apt-get'" in capsys.readouterr().err and not (tmp_path / "de_en.tsv").exists()


def test_the_saved_results_name_the_translation_metrics(trained_run):
    run_dir, results = trained_run
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert set(saved["val"]) == {"loss", "perplexity", "bleu", "exact_match"}
    assert saved["val"]["perplexity"] == pytest.approx(torch.tensor(saved["val"]["loss"]).exp().item(), rel=1e-6)
    assert (run_dir / "tokenizer").is_dir() and MarkovTranslatorConfig.from_dict(
        {k: v for k, v in json.loads((run_dir / "model" / "config.json").read_text()).items() if k != "architecture"}
    ).order == 2


def test_generate_translates_one_line_of_the_input_file_per_line_of_output(trained_run, tmp_path, capsys):
    """Lines are split at newlines alone, as ``wc -l`` counts them: str.splitlines also split at U+2028 and form
    feeds inside a sentence, so 3 lines came back as 5 translations, every later one beside the wrong reference."""
    run_dir, _ = trained_run
    _, model, _ = load_run(run_dir)
    bundle = SyntheticTranslationSource(train_examples=256, val_examples=24, test_examples=24, max_length=8).build(0)
    words = [bundle.tokenizer.decode(example["src_ids"].tolist()) for example in bundle.test[:3]]
    sources = [words[0], words[1].replace(" ", "\u2028", 1), words[2].replace(" ", "\x0c", 1)]
    (tmp_path / "sources.txt").write_text("\ufeff" + "\r\n".join(sources) + "\r\n", encoding="utf-8")
    model.eval()
    expected = [decode_generated(bundle.tokenizer, model.generate(torch.tensor([bundle.tokenizer.encode(source)]),
                                                                  max_new_tokens=40))[0]
                for source in sources]  # fmt: skip
    assert main(["generate", str(run_dir), "--input", str(tmp_path / "sources.txt"), "--max-new-tokens", "40"]) == 0
    assert capsys.readouterr().out.split("\n") == expected + [""]


def test_generate_keeps_a_lone_carriage_return_inside_its_line_as_read_parallel_does(trained_run, tmp_path, capsys):
    """Path.read_text's universal newlines turned a lone \\r inside a sentence into a line break, so generate --input
    translated one line as two (every later one beside the wrong reference), where read_parallel keeps it whole."""
    from markovformer.data.translation.parallel import _read_lines

    run_dir, _ = trained_run
    _, model, _ = load_run(run_dir)
    bundle = SyntheticTranslationSource(train_examples=256, val_examples=24, test_examples=24, max_length=8).build(0)
    words = [bundle.tokenizer.decode(example["src_ids"].tolist()) for example in bundle.test[:2]]
    sources = [words[0].replace(" ", "\r", 1), words[1]]
    assert "\r" in sources[0]
    (tmp_path / "sources.txt").write_bytes("\n".join(sources).encode("utf-8") + b"\n")
    assert _read_lines(tmp_path / "sources.txt") == sources  # the training data's reading of the same file
    assert main(["generate", str(run_dir), "--input", str(tmp_path / "sources.txt"), "--max-new-tokens", "40"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(sources)


def test_a_translation_that_holds_a_line_break_token_is_printed_on_one_line(trained_run, tmp_path):
    """The joint byte-level BPE has tokens for "\\n" and "\\r": a model that emitted one printed its translation over
    two lines, and every later translation of --input came out beside the wrong source."""
    from types import SimpleNamespace

    from markovformer.data.translation import EOS_TOKEN_ID, load_translation_tokenizer
    from markovformer.training.tasks.base import GenerationRequest

    run_dir, _ = trained_run
    tokenizer = load_translation_tokenizer(run_dir / "tokenizer")
    pieces = ["ta", "\n", "tb", "\r\n", "tc"]
    row = [token for piece in pieces for token in tokenizer.encode(piece)] + [EOS_TOKEN_ID]
    assert decode_generated(tokenizer, [row]) == ["ta\ntb\r\ntc"]  # the tokens exist and decode to line breaks

    class Breaking(torch.nn.Module):  # translates every source as those tokens
        config = SimpleNamespace(max_positions=40)

        def generate(self, src_ids, src_mask, generation):
            return torch.tensor([row] * len(src_ids))

    (tmp_path / "sources.txt").write_text("sa sb\nsc\n")
    lines = list(
        build_task("translation").generate(Breaking(), run_dir, GenerationRequest(input=str(tmp_path / "sources.txt")))
    )
    assert lines == ["ta tb tc", "ta tb tc"]  # one line per source; BLEU's 13a tokenisation reads a break as a space


def test_a_source_longer_than_the_model_reads_is_refused_naming_its_line(trained_run, tmp_path, capsys):
    """It failed with "position 40 is beyond max_positions=40", naming no line (and past the first 32 lines, after
    the translations before it were printed); checked before any is."""
    run_dir, _ = trained_run
    _, model, _ = load_run(run_dir)
    from markovformer.data.translation import load_translation_tokenizer

    tokenizer = load_translation_tokenizer(run_dir / "tokenizer")
    fits, long = " ".join(["sa"] * 40), " ".join(["sb"] * 41)  # one token a word
    assert len(tokenizer.encode(fits)) == model.config.max_positions < len(tokenizer.encode(long))
    (tmp_path / "sources.txt").write_text(f"sa sb\n{fits}\n{long}\n")
    assert main(["generate", str(run_dir), "--input", str(tmp_path / "sources.txt")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"sources.txt: line 3 is {len(tokenizer.encode(long))} tokens long" in captured.err
    assert "max_positions=40" in captured.err
    assert main(["generate", str(run_dir), "--prompt", long]) == 2
    assert "--prompt is" in capsys.readouterr().err
    (tmp_path / "sources.txt").write_text(f"sa sb\n{fits}\n")
    assert main(["generate", str(run_dir), "--input", str(tmp_path / "sources.txt")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_pairs_longer_than_the_model_reads_are_refused_before_the_run_starts(tmp_path):
    """Validation and test keep their long pairs, and only the first two validation pairs were scored up front: a
    run trained to its first validation, then died on "position N is beyond max_positions", its steps lost."""
    config = _config(tmp_path)
    config["model"]["max_positions"] = 8  # sentences of 6-8 words: up to 9 positions with <bos>/<eos>
    bundle = SyntheticTranslationSource(train_examples=256, val_examples=24, test_examples=24, max_length=8).build(0)
    longest = {name: max(translation_lengths(getattr(bundle, name))) for name in ("train", "val", "test")}
    assert longest == {"train": 9, "val": 9, "test": 9}
    with pytest.raises(ConfigError, match=r"max_positions=8 is shorter .*train 9, val 9, test 9.* >= 9"):
        train(resolve_run_config(config))
    assert not (tmp_path / "run").exists()
    config["model"]["max_positions"] = 9  # every pair fits exactly
    config["trainer"].update(max_steps=2, eval_every=2, checkpoint_every=2, warmup_steps=1)
    assert train(resolve_run_config(config))["steps"] == 2


def _file_run(tmp_path: Path) -> Path:
    """A translation_file run on 200 word-for-word pairs of a toy German-English vocabulary, trained a few steps."""
    words = {"das": "the", "haus": "house", "ist": "is", "klein": "small", "mann": "man", "sieht": "sees"}
    generator = torch.Generator().manual_seed(0)
    lines = []
    for _ in range(200):
        length = int(torch.randint(3, 8, (), generator=generator))
        chosen = [list(words)[i] for i in torch.randint(len(words), (length,), generator=generator)]
        lines.append(" ".join(chosen) + "\t" + " ".join(words[word] for word in chosen) + "\n")
    (tmp_path / "pairs.tsv").write_text("".join(lines))
    values = _config(tmp_path, max_steps=4, eval_every=4, checkpoint_every=4, warmup_steps=1)
    values["data"] = {"source": "translation_file", "path": str(tmp_path / "pairs.tsv"), "vocab_size": 280,
                      "fractions": [0.8, 0.1, 0.1]}  # fmt: skip
    train(resolve_run_config(values))
    return tmp_path / "run"


def test_eval_scores_other_pairs_with_the_runs_tokenizer_as_it_scores_its_own(tmp_path, capsys):
    """`eval --data path=OTHER.tsv` refitted the BPE on the other file's training part, so scoring a trained model on
    a new test set always failed with "another tokenizer", and a file of test pairs alone "left no training pair".
    The run's own test pairs, written to a file of their own and scored whole as a test split, score as the run's
    test split does; pairs longer than the model reads are refused before any is translated."""
    run_dir = _file_run(tmp_path)
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--split", "test", "--json", "--translations", str(tmp_path / "t.tsv")]) == 0
    own = json.loads(capsys.readouterr().out)["metrics"]
    rows = [line.split("\t") for line in (tmp_path / "t.tsv").read_text().splitlines()[1:]]
    (tmp_path / "test.tsv").write_text("".join(f"{source}\t{reference}\n" for source, reference, _ in rows[::-1]))
    other = ["eval", str(run_dir), "--split", "test", "--json", "--data", f"path={tmp_path / 'test.tsv'}",
             "fractions=[0.0,0.0,1.0]"]  # fmt: skip
    assert main(other) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["examples"] == len(rows) == 20 and scored["metrics"] == pytest.approx(own, rel=1e-5)
    from markovformer.data.translation import load_translation_tokenizer

    long = (" ".join(["das"] * 30), " ".join(["the"] * 30))
    (tmp_path / "test.tsv").write_text(f"das haus\tthe house\n{long[0]}\t{long[1]}\n")
    tokenizer = load_translation_tokenizer(run_dir / "tokenizer")
    needs = max(len(tokenizer.encode(long[0])), len(tokenizer.encode(long[1])) + 1)
    assert main(other) == 2
    error = capsys.readouterr().err
    assert "1 of the 2 pairs of the test split are longer than the model reads (max_positions=40" in error
    assert f"the longest needs {needs} positions" in error and needs > 40 and "Traceback" not in error


def test_eval_scores_the_translations_as_its_predictions_file_and_generate_write_them(trained_run):
    """A translation holding a line break was written (and printed by generate) on one line, but scored as decoded:
    sacrebleu's 13a deletes "-\\n", so "ta-\\ntb tc td te tf" scored as "tatb tc td te tf" against the reference
    "ta- tb tc td te tf" (BLEU 54.75 in eval, 100 recomputed from the predictions file; exact match 0 against 1).
    Eval now scores the lines it writes."""
    from markovformer.data.translation import EOS_TOKEN_ID, PAD_TOKEN_ID, load_translation_tokenizer

    run_dir, _ = trained_run
    tokenizer = load_translation_tokenizer(run_dir / "tokenizer")
    row = [token for piece in ["ta-", "\n", "tb tc td te tf"] for token in tokenizer.encode(piece)] + [EOS_TOKEN_ID]
    reference = tokenizer.encode("ta- tb tc td te tf") + [EOS_TOKEN_ID]
    width = max(len(row), len(reference))
    generated = torch.tensor([row + [PAD_TOKEN_ID] * (width - len(row))])
    labels = torch.tensor([reference + [-100] * (width - len(reference))])
    metrics = TranslationMetrics(tokenizer)
    metrics.keep_predictions = True
    metrics.update(type("Output", (), {"loss": torch.tensor(1.0), "logits": torch.zeros(1, width, 5)})(),
                   {"labels": labels})  # fmt: skip
    metrics.update_translations(generated, labels, torch.tensor([tokenizer.encode("sa sb")]))
    results = metrics.compute()
    _, *rows = [line.split("\t") for line in metrics.table().splitlines()]
    hypotheses, references = [row[2] for row in rows], [row[1] for row in rows]
    assert hypotheses == ["ta- tb tc td te tf"] and references == hypotheses
    assert results["bleu"] == pytest.approx(corpus_bleu(hypotheses, references)) == 100.0
    assert results["exact_match"] == 1.0

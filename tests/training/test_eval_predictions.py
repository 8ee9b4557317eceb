"""``eval --predictions FILE``: a row per scored example of what the model predicted, for every task whose scoring
predicts something to read (translation: tests/training/test_translation_task_runs.py). Each file is checked against the
metrics eval prints (read off its columns) and the model's own outputs, example by example, in the split's order."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from test_eval_scores_the_asked_split import _csv_run  # beside this file
from torchmetrics.text import WordErrorRate

from markovformer.cli.main import main
from markovformer.training.build import build_data
from markovformer.training.run_config import resolve_run_config
from markovformer.training.runner import load_run, train


def read(path) -> tuple[list[str], list[list[str]]]:
    header, *rows = list(csv.reader(path.open(), delimiter="\t"))
    return header, rows


def scored(capsys, *argv: str) -> dict:
    capsys.readouterr()  # training's lines
    assert main(["eval", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_sequence_classifiers_predictions_are_its_outputs_and_give_its_accuracy(tmp_path, capsys):
    run, _ = _csv_run(tmp_path)
    out = tmp_path / "predictions.tsv"
    results = scored(capsys, str(run), "--split", "train", "--predictions", str(out), "--batch-size", "3")
    header, rows = read(out)
    config, model, run_dir = load_run(run)
    names = [str(name) for name in build_data(config, run_dir).info["label_names"]]
    assert header == ["example", "label", "predicted", *(f"p({name})" for name in names)]
    assert [int(row[0]) for row in rows] == list(range(results["examples"]))  # each example once, in order
    accuracy = sum(row[1] == row[2] for row in rows) / len(rows)
    assert accuracy == pytest.approx(results["metrics"]["accuracy"], abs=1e-6)  # float32 counts
    model.eval()
    bundle = build_data(config, run_dir)
    for row, example in zip(rows, bundle.train, strict=True):
        with torch.no_grad():
            logits = model(**{k: v[None] for k, v in example.items() if k != "labels"}).logits[0]
        assert row[1] == names[int(example["labels"])]
        assert [float(p) for p in row[3:]] == pytest.approx(logits.softmax(-1).tolist(), abs=1e-5)
        assert row[2] == names[int(logits.argmax())]


def test_a_token_classifiers_predictions_are_one_row_per_labelled_position(tmp_path, capsys):
    rows = [(i % 5 - 2.0, (i * 7) % 3) for i in range(60)]
    path = tmp_path / "series.csv"
    path.write_text("x,label\n" + "".join(f"{x},{label}\n" for x, label in rows))
    values = {"task": "token_classification", "output_dir": str(tmp_path / "run"),
              "model": {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "csv_series", "path": str(path), "window": 6, "stride": 3},
              "trainer": {"max_steps": 4, "batch_size": 4, "eval_every": 4, "checkpoint_every": 4, "log_every": 4}}
    train(resolve_run_config(values))
    out = tmp_path / "predictions.tsv"
    results = scored(capsys, str(tmp_path / "run"), "--predictions", str(out))
    header, kept = read(out)
    assert header[:4] == ["example", "position", "label", "predicted"]
    config, model, run_dir = load_run(tmp_path / "run")
    labels = [example["labels"] for example in build_data(config, run_dir).val]
    expected = [(n, t) for n, row in enumerate(labels) for t, label in enumerate(row.tolist()) if label != -100]
    assert [(int(row[0]), int(row[1])) for row in kept] == expected
    accuracy = sum(row[2] == row[3] for row in kept) / len(kept)
    assert accuracy == pytest.approx(results["metrics"]["accuracy"], abs=1e-6)  # float32 counts
    assert all(sum(map(float, row[4:])) == pytest.approx(1, abs=1e-4) for row in kept)


def test_a_ctc_recognisers_predictions_give_its_word_error_rate(tmp_path, capsys):
    values = {"task": "ctc", "output_dir": str(tmp_path / "run"),
              "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2, "causal": False},
              "data": {"source": "synthetic_ctc", "num_symbols": 4, "input_dim": 8, "train_examples": 32,
                       "val_examples": 12, "test_examples": 4},
              "trainer": {"max_steps": 6, "batch_size": 8, "eval_every": 6, "checkpoint_every": 6, "log_every": 6}}
    train(resolve_run_config(values))
    out = tmp_path / "predictions.tsv"
    results = scored(capsys, str(tmp_path / "run"), "--predictions", str(out))
    header, rows = read(out)
    assert header == ["reference", "hypothesis"] and len(rows) == results["examples"]
    wer = WordErrorRate()([row[1] for row in rows], [row[0] for row in rows])
    assert float(wer) == pytest.approx(results["metrics"]["wer"], rel=1e-6)
    # generate transcribes recordings with a run of recordings only: synthetic frames have no audio front end
    assert main(["generate", str(tmp_path / "run"), "--input", str(out)]) == 2
    err = capsys.readouterr().err  # both sources of recordings are named (it named audio_manifest only)
    assert "holds no audio front end" in err and "(data.source audio_manifest or speech_features)" in err


def test_predictions_of_a_task_that_predicts_nothing_to_read_are_refused_before_any_file(tmp_path, capsys, tiny_run):
    values = {**tiny_run, "output_dir": str(tmp_path / "run")}
    train(resolve_run_config(values))
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--predictions", str(tmp_path / "p.tsv")]) == 2
    err = capsys.readouterr().err
    assert "--predictions" in err and "causal_lm run" in err and "sequence_classification" in err
    assert not (tmp_path / "p.tsv").exists()
    # a beam width only translation decodes with: it was taken and ignored, the numbers of beam 1 printed
    assert main(["eval", str(tmp_path / "run"), "--beam-size", "4"]) == 2
    assert "--beam-size 4" in (err := capsys.readouterr().err) and "causal_lm run" in err and "translation" in err


def test_a_classifiers_numbers_per_class_are_those_of_its_predictions(tmp_path, capsys):
    """eval gave accuracy, macro F1 and AUROC only: which class a classifier misses could not be read. Per class:
    precision, recall, F1 and support, counted here off the predictions file; macro F1 is the mean of the F1s of
    the classes that occur or are predicted (torchmetrics' macro average)."""
    run, _ = _csv_run(tmp_path)
    out = tmp_path / "predictions.tsv"
    results = scored(capsys, str(run), "--split", "all", "--predictions", str(out))
    _, rows = read(out)
    per_class = results["per_class"]
    for name, numbers in per_class.items():
        tp = sum(row[1] == row[2] == name for row in rows)
        predicted, actual = sum(row[2] == name for row in rows), sum(row[1] == name for row in rows)
        assert numbers["support"] == actual
        assert numbers["precision"] == (pytest.approx(tp / predicted) if predicted else None)  # JSON: nan is null
        assert numbers["recall"] == (pytest.approx(tp / actual) if actual else None)
    f1s = [numbers["f1"] for numbers in per_class.values() if numbers["f1"] is not None]
    assert sum(f1s) / len(f1s) == pytest.approx(results["metrics"]["macro_f1"], abs=1e-6)
    assert main(["eval", str(run), "--split", "all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    columns = ["class", "precision", "recall", "f1", "support"]
    header = next(k for k, line in enumerate(lines) if line.split() == columns)
    assert [line.split()[0] for line in lines[header + 1: header + 1 + len(per_class)]] == list(per_class)


def test_eval_scores_the_training_records_not_their_reverse_complement_copies(tmp_path, capsys):
    """data.reverse_complement adds each training sequence's reverse complement to the training split; eval
    --split train scored those copies as examples of their own (48 for 24 records), so its accuracy was not that of
    the records. It scores the records once each, and the predictions file lists them."""
    import random

    from markovformer.data.readers.fasta import load_fasta_classification, write_fasta

    rng = random.Random(0)
    records = [(f"r{i}", "".join(rng.choice("ACGT") for _ in range(rng.randint(8, 20)))) for i in range(30)]
    write_fasta(records, tmp_path / "genes.fa")
    (tmp_path / "labels.tsv").write_text("".join(f"r{i}\t{'ab'[i % 2]}\n" for i in range(30)))
    values = {"task": "sequence_classification", "output_dir": str(tmp_path / "run"),
              "model": {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "fasta", "path": str(tmp_path / "genes.fa"), "labels": str(tmp_path / "labels.tsv"),
                       "reverse_complement": True},
              "trainer": {"max_steps": 4, "batch_size": 4, "eval_every": 4, "checkpoint_every": 4, "log_every": 4}}
    train(resolve_run_config(values))
    plain = load_fasta_classification(tmp_path / "genes.fa", tmp_path / "labels.tsv", seed=0)
    out = tmp_path / "predictions.tsv"
    results = scored(capsys, str(tmp_path / "run"), "--split", "train", "--predictions", str(out))
    assert results["examples"] == len(read(out)[1]) == len(plain.train) == 24

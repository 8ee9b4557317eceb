"""``eval --split test`` scores the test split: its loss is the token-weighted cross-entropy of the trained model
over the test examples, computed here by hand, and differs from the validation split's. Beside it: the data's
reference values of that split, and the data eval reads (the file the user names, the class order the run had)."""

from __future__ import annotations

import copy
import json
import math
import re

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_RUN

from markovformer.training.build import build_data
from markovformer.training.evaluation import check_same_names, recorded_data_files, reference_results
from markovformer.training.run_config import resolve_run_config
from markovformer.training.runner import evaluate, load_run, train
from markovformer.training.trainer_config import ConfigError


def hand_loss(model: torch.nn.Module, examples) -> float:
    """The mean next-token cross-entropy over every scored label of ``examples``, one example at a time: each
    position's logits predict the label one position on; a label of -100 is not scored."""
    total, count = 0.0, 0
    with torch.no_grad():
        for index in range(len(examples)):
            example = examples[index]
            logits = model(input_ids=example["input_ids"][None]).logits[0].double()
            targets = example["labels"][1:]
            scored = targets != -100
            total += float(F.cross_entropy(logits[:-1][scored], targets[scored], reduction="sum"))
            count += int(scored.sum())
    return total / count


def test_eval_of_the_test_split_is_the_hand_computed_loss_of_the_test_examples(tmp_path):
    """The splits come from different random streams and have different sizes (64 and 32 sequences), so a scoring
    pass over the wrong split gives another loss: ``eval`` read ``bundle.val`` whatever the split asked would fail."""
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=10, eval_every=10, checkpoint_every=10, log_every=10)
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))

    val, test = (evaluate(tmp_path / "run", split)["metrics"] for split in ("val", "test"))
    assert val["loss"] != pytest.approx(test["loss"], rel=1e-4)  # the check below can tell the splits apart
    # a chain source has no window_starts: an unknown key there, not "only training draws its examples so"
    with pytest.raises(ConfigError, match="unknown key data.window_starts"):
        evaluate(tmp_path / "run", "val", {"window_starts": "random"})

    config, model, run_dir = load_run(tmp_path / "run")
    model.eval()
    bundle = build_data(config, run_dir)
    assert len(bundle.test) == TINY_RUN["data"]["test_sequences"] != len(bundle.val)
    expected = hand_loss(model, bundle.test)
    assert test["loss"] == pytest.approx(expected, rel=1e-6)
    assert val["loss"] == pytest.approx(hand_loss(model, bundle.val), rel=1e-6)


def test_data_of_a_larger_vocabulary_than_the_models_is_refused_naming_the_option(tmp_path):
    """eval --data num_symbols=8 on a 4-symbol run failed in the first batch naming a token id (7, outside [0, 4)),
    not the option that made it; a smaller vocabulary is scored (the model has an output for each of its tokens)."""
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=5, eval_every=5, checkpoint_every=5, log_every=5)
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    with pytest.raises(ConfigError, match=r"data_overrides=\{'num_symbols': 8\}: the data's vocabulary has 8 tokens, "
                                          r"the run's model 4"):  # fmt: skip
        evaluate(tmp_path / "run", "val", {"num_symbols": 8})
    with pytest.raises(ConfigError, match=r"has 5 tokens, the run's model 4 .*no output for tokens 4\.\.4;"):
        evaluate(tmp_path / "run", "val", {"num_symbols": 5})  # one token beyond the model's outputs is refused too
    assert math.isfinite(evaluate(tmp_path / "run", "val", {"num_symbols": 3})["metrics"]["loss"])


def test_the_true_chain_loss_is_that_of_the_split_scored():
    reference = {"entropy_rate": 0.5, "oracle_val_loss": 0.61, "oracle_test_loss": 0.47}
    assert reference_results(reference, "test")["true_chain_loss"] == 0.47
    assert reference_results(reference, "val")["true_chain_loss"] == 0.61
    assert "true_chain_loss" not in reference_results(reference, "train")  # no oracle recorded for it


def test_eval_of_train_and_all_compares_with_the_true_chain_on_the_sequences_scored(tmp_path):
    """The true chain's loss was recorded for val and test only: ``eval --split train`` (or all) printed no floor
    of its own sequences. It is now the chain's mean -log p over those sequences (by hand here, one transition at a
    time), and all's is the three splits' sequence-weighted mean (every sequence scores as many targets)."""
    from markovformer.data.sources import DATA_SOURCES

    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=2, eval_every=2, checkpoint_every=2, log_every=2, warmup_steps=1)
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    config, _, run_dir = load_run(tmp_path / "run")
    bundle = build_data(config, run_dir)
    options = {key: value for key, value in config.data.items() if key != "source"}
    chain = DATA_SOURCES["markov_chain"](**options).chain()

    def by_hand(split) -> float:
        total = count = 0
        for index in range(len(split)):
            x = split[index]["input_ids"].tolist()
            for t in range(chain.order, len(x)):
                context = sum(x[t - chain.order + i] * chain.num_symbols ** (chain.order - 1 - i)
                              for i in range(chain.order))  # oldest symbol most significant (markov.chains)
                total -= math.log(float(chain.transition[context, x[t]]))
                count += 1
        return total / count

    losses = {name: by_hand(getattr(bundle, name)) for name in ("train", "val", "test")}
    assert evaluate(tmp_path / "run", "train")["true_chain_loss"] == pytest.approx(losses["train"], rel=1e-9)
    sizes = {name: len(getattr(bundle, name)) for name in losses}
    weighted = sum(sizes[name] * losses[name] for name in losses) / sum(sizes.values())
    assert evaluate(tmp_path / "run", "all")["true_chain_loss"] == pytest.approx(weighted, rel=1e-9)
    assert evaluate(tmp_path / "run", "test")["true_chain_loss"] == pytest.approx(losses["test"], rel=1e-9)


def test_data_whose_classes_come_in_another_order_is_refused(tmp_path):
    """The model reads classes by position: the same names in another order would score class 0 as class 1."""
    (tmp_path / "data.json").write_text(json.dumps({"info": {"label_names": ["up", "down"]}}))
    check_same_names(tmp_path, {"label_names": ["up", "down"]})
    with pytest.raises(ConfigError, match=r"classes \['down', 'up'\] are not the run's \['up', 'down'\]"):
        check_same_names(tmp_path, {"label_names": ["down", "up"]})


def test_a_data_file_is_found_again_only_where_the_run_recorded_one_place_for_it(tmp_path, monkeypatch):
    """data/corpus.txt no longer found here: eval takes the one recorded file of that name, unless the user names
    another; two recorded places of that name leave it as configured (no guessing which one was meant)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MARKOVFORMER_DATA", str(tmp_path / "empty"))
    places = [tmp_path / where / "corpus.txt" for where in ("a", "b")]
    for place in places:
        place.parent.mkdir()
        place.write_text("text\n")
    data = {"source": "text", "path": "data/corpus.txt"}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "data.json").write_text(json.dumps({"file_sha256": {str(places[0]): "0" * 64}}))
    assert recorded_data_files(run_dir, data, {}) == {"path": str(places[0])}
    assert recorded_data_files(run_dir, data, {"path": "other.txt"}) == {}
    (run_dir / "data.json").write_text(json.dumps({"file_sha256": {str(p): "0" * 64 for p in places}}))
    assert recorded_data_files(run_dir, data, {}) == {}


def test_eval_scores_the_data_file_the_user_names_rather_than_the_one_the_run_recorded(tmp_path, monkeypatch):
    """A run given path: series.csv in a/ and scored from the folder above finds a/series.csv again through data.json;
    a data.path given to eval is scored instead, as it is from a/ (here the same rows with the labels flipped)."""
    rows = [(i % 7, (i * 3) % 5, (i // 4) % 2) for i in range(80)]
    for folder, flip in (("a", 0), ("b", 1)):
        (tmp_path / folder).mkdir()
        lines = ["x,y,label", *(f"{x},{y},{label ^ flip}" for x, y, label in rows)]
        (tmp_path / folder / "series.csv").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path / "a")
    train(resolve_run_config({"task": "sequence_classification", "output_dir": "run",
                              "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
                              "data": {"source": "csv_series", "window": 4, "stride": 2, "path": "series.csv"},
                              "trainer": {"max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                                          "batch_size": 4}}))  # fmt: skip
    named = {"path": str(tmp_path / "b" / "series.csv")}
    from_a = evaluate("run", data_overrides=named)["metrics"]
    monkeypatch.chdir(tmp_path)
    assert evaluate("a/run", data_overrides=named)["metrics"] == from_a
    assert evaluate("a/run")["metrics"] != from_a  # the recorded file: the check above can tell the two apart


def _csv_run(tmp_path):
    """A tiny classifier of a CSV series (rows 0-27 train, 28-33 val, 34-39 test): its run directory and rows."""
    generator = torch.Generator().manual_seed(0)
    rows = [(float(torch.randn(1, generator=generator)) * 3 + 10, i % 3) for i in range(40)]
    path = tmp_path / "series.csv"
    path.write_text("x,label\n" + "".join(f"{x:.6f},{label}\n" for x, label in rows))
    values = {"task": "sequence_classification", "output_dir": str(tmp_path / "run"),
              "model": {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2, "pooling": "last"},
              "data": {"source": "csv_series", "path": str(path), "window": 4},
              "trainer": {"max_steps": 4, "batch_size": 4, "eval_every": 4, "checkpoint_every": 4, "log_every": 4}}
    train(resolve_run_config(values))
    return tmp_path / "run", rows


def test_eval_of_another_csv_reads_it_with_the_runs_normalisation(tmp_path):
    """The normalisation fitted on the run's training rows belongs to the model: eval --data path=other.csv
    re-fitted it on the other file's training rows, so a file whose validation rows are the run's scored them as
    other inputs. Here only the training rows differ: the validation windows are the run's, scored alike."""
    run, rows = _csv_run(tmp_path)
    other = tmp_path / "other.csv"
    other.write_text("x,label\n" + "".join(f"{(x * 5 - 40) if i < 28 else x:.6f},{label}\n"
                                           for i, (x, label) in enumerate(rows)))  # fmt: skip
    own = evaluate(run, "val")
    scored = evaluate(run, "val", {"path": str(other)})
    assert scored["examples"] == own["examples"] == 6 - 4 + 1
    assert scored["metrics"]["loss"] == pytest.approx(own["metrics"]["loss"], rel=1e-5)


def test_eval_of_all_splits_scores_every_example_of_the_three(tmp_path):
    """--split all: a file given with --data scored whole (the run's split recipe kept only its val part)."""
    run, _ = _csv_run(tmp_path)
    parts = {split: evaluate(run, split) for split in ("train", "val", "test", "all")}
    assert parts["all"]["examples"] == sum(parts[split]["examples"] for split in ("train", "val", "test")) == 25 + 3 + 3
    correct = sum(parts[split]["metrics"]["accuracy"] * parts[split]["examples"] for split in ("train", "val", "test"))
    assert parts["all"]["metrics"]["accuracy"] * 31 == pytest.approx(correct, abs=1e-6)


def test_eval_of_a_time_series_training_split_scores_each_row_once(tmp_path):
    """Token classification over windows of 4 rows every 2: training labels each row in every window holding it,
    but ``eval --split train`` scores each of the 28 training rows once, in its first window, as validation scores
    its rows (it scored 52 labels, the middle rows twice: on a 700-row file 1,520 labels for 489 rows, accuracy
    0.845 against 0.808 per row)."""
    generator = torch.Generator().manual_seed(0)
    path = tmp_path / "series.csv"
    path.write_text("x,label\n" + "".join(f"{float(torch.randn(1, generator=generator)):.6f},{i % 3}\n"
                                          for i in range(40)))  # fmt: skip
    values = {"task": "token_classification", "output_dir": str(tmp_path / "run"),
              "model": {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "csv_series", "path": str(path), "window": 4, "stride": 2},
              "trainer": {"max_steps": 4, "batch_size": 4, "eval_every": 4, "checkpoint_every": 4, "log_every": 4}}
    train(resolve_run_config(values))
    scored = evaluate(tmp_path / "run", "train")
    assert sum(row["support"] for row in scored["per_class"].values()) == 28
    config, model, run_dir = load_run(tmp_path / "run")
    model.eval()
    bundle = build_data(config, run_dir)
    assert sum(int((bundle.train[i]["labels"] != -100).sum()) for i in range(len(bundle.train))) == 52  # training's
    total = 0.0
    with torch.no_grad():
        for row in range(28):  # the windows start at rows 0, 2, ..., 24: the first holding a row
            index = max(0, (row - 4) // 2 + 1)
            example = bundle.train[index]
            logits = model(input_features=example["input_features"][None]).logits[0].double()
            total += float(F.cross_entropy(logits[row - 2 * index], example["labels"][row - 2 * index]))
    assert scored["metrics"]["loss"] == pytest.approx(total / 28, rel=1e-5)


def test_renormalised_stacked_frames_keep_the_last_inputs_padding_at_zero():
    """Frames stacked side by side (speech, stack_frames=3) repeat the per-frame statistics; the frames past the
    utterance's end are zeros after normalisation (the training mean) and stay zeros (they became the difference
    of the two means)."""
    from markovformer.data.bundle import Renormalised

    fitted, wanted = {"mean": [1.0, 2.0], "std": [2.0, 4.0]}, {"mean": [0.0, 1.0], "std": [1.0, 2.0]}
    features = torch.tensor([[0.5, -1.0, 1.0, 0.0, 2.0, 1.5], [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    (example,) = [Renormalised([{"input_features": features}], fitted, wanted)[0]]
    raw = features.double().reshape(2, 3, 2) * torch.tensor([2.0, 4.0]) + torch.tensor([1.0, 2.0])
    expected = ((raw - torch.tensor([0.0, 1.0])) / torch.tensor([1.0, 2.0])).reshape(2, 6).float()
    expected[1, 2:] = 0  # the padding frames of the last input
    torch.testing.assert_close(example["input_features"], expected)


def test_eval_batch_size_changes_the_batches_not_the_metrics(tmp_path, capsys, monkeypatch):
    """A finished run cannot be resumed to change trainer.eval_batch_size, so eval takes --batch-size: 37 validation
    sequences in batches of 5 (a short last one) or of 64 give the hand-computed loss of the split."""
    import markovformer.training.evaluation as evaluation
    from markovformer.cli.main import main

    values = copy.deepcopy(TINY_RUN)
    values["data"]["val_sequences"] = 37
    values["trainer"].update(max_steps=4, warmup_steps=1, eval_every=4, checkpoint_every=4, log_every=4)
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    config, model, run_dir = load_run(tmp_path / "run")
    model.eval()
    expected = hand_loss(model, build_data(config, run_dir).val)
    capsys.readouterr()  # the training's lines

    sizes = []
    loader = evaluation.scoring_loader
    monkeypatch.setattr(evaluation, "scoring_loader", lambda *args: sizes.append(args[2].eval_batch_size) or
                        loader(*args))  # fmt: skip
    for batch_size in (5, 64):
        assert main(["eval", str(tmp_path / "run"), "--batch-size", str(batch_size), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["metrics"]["loss"] == pytest.approx(expected, rel=1e-6)
    assert sizes == [5, 64]
    assert main(["eval", str(tmp_path / "run"), "--batch-size", "0"]) == 2
    assert capsys.readouterr().err.strip() == "markovformer: error: --batch-size 0 must be >= 1"


def test_a_task_with_answers_scores_their_accuracy_beside_chance(tmp_path):
    """MQAR records its chance accuracy, but a run reported losses only, so nothing could be set against it: a
    causal LM on such data now also scores the share of labelled targets whose most likely token is the label,
    here against the same count made by hand from the model's logits on the test split."""
    from markovformer.training.config_files import shipped_config
    from markovformer.training.run_config import load_yaml

    values = load_yaml(shipped_config("mixers_mqar"))
    values["trainer"].update(max_steps=3, warmup_steps=1, eval_every=3, checkpoint_every=3, log_every=3)
    values["data"].update(train_examples=64, val_examples=16, test_examples=24)
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    results = evaluate(tmp_path / "run", "test")
    config, model, run_dir = load_run(tmp_path / "run")
    test = build_data(config, run_dir).test
    inputs = torch.stack([test[i]["input_ids"] for i in range(len(test))])
    labels = torch.stack([test[i]["labels"] for i in range(len(test))])[:, 1:]
    with torch.no_grad():
        predicted = model.eval()(input_ids=inputs).logits[:, :-1].argmax(-1)
    expected = float((predicted == labels)[labels != -100].float().mean())
    assert results["metrics"]["accuracy"] == pytest.approx(expected, abs=1e-6)
    assert results["chance_accuracy"] == pytest.approx(1 / 64)  # one of the 64 value tokens
    assert "accuracy" not in evaluate_chain_run_metrics(tmp_path)  # a chain's data has no answers: no accuracy


def evaluate_chain_run_metrics(tmp_path) -> dict:
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=2, eval_every=2, checkpoint_every=2, log_every=2, warmup_steps=1)
    values["output_dir"] = str(tmp_path / "chain")
    train(resolve_run_config(values))
    return evaluate(tmp_path / "chain", "val")["metrics"]


def test_the_bayes_loss_is_that_of_the_split_scored():
    reference = {"chance_accuracy": 0.5, "bayes_val_loss": 0.52, "bayes_test_loss": 0.49}
    assert reference_results(reference, "test")["bayes_loss"] == 0.49
    assert reference_results(reference, "val")["bayes_loss"] == 0.52
    assert "bayes_loss" not in reference_results(reference, "train")  # not recorded for it


def naive_add_beta_loss(sequences: torch.Tensor, order: int, num_symbols: int, beta: float) -> float:
    """The add-β estimator's mean log-loss, by counting each context's earlier transitions one position at a time."""
    total, count = 0.0, 0
    for row in sequences.tolist():
        counts: dict[tuple[int, ...], list[float]] = {}
        for t in range(order, len(row)):
            seen = counts.setdefault(tuple(row[t - order : t]), [0.0] * num_symbols)
            total -= math.log((seen[row[t]] + beta) / (sum(seen) + num_symbols * beta))
            seen[row[t]] += 1
            count += 1
    return total / count


def test_train_and_eval_of_an_in_context_chain_run_show_the_bayes_loss(tmp_path, capsys):
    """The icl_markov source records the Bayes (add-β) loss of its validation and test sequences; the run's final
    report and ``eval`` set the model's loss beside it, as they set a fixed chain's beside its entropy rate."""
    from markovformer.cli.main import main

    values = copy.deepcopy(TINY_RUN)
    values["data"] = {"source": "icl_markov", "order": 2, "num_symbols": 3, "beta": 0.5, "seq_len": 24,
                      "train_examples": 64, "val_examples": 16, "test_examples": 8}  # fmt: skip
    values["trainer"].update(max_steps=2, warmup_steps=1, eval_every=2, checkpoint_every=2, log_every=2)
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    trained = capsys.readouterr().out
    config, _, run_dir = load_run(tmp_path / "run")
    bundle = build_data(config, run_dir)
    for split in ("val", "test"):
        sequences = torch.stack([example["input_ids"] for example in getattr(bundle, split)])
        bayes = naive_add_beta_loss(sequences, 2, 3, 0.5)
        assert main(["eval", str(run_dir), "--split", split]) == 0
        out = capsys.readouterr().out
        loss = float(re.search(r"loss (\d+\.\d+)", out).group(1))
        shown = re.search(r"^  vs the Bayes predictor \(add-β\) (\d\.\d{4}): ([+-]\d\.\d{4}) nats$", out, re.M)
        assert shown, out
        assert float(shown.group(1)) == pytest.approx(bayes, abs=5e-5)
        assert float(shown.group(2)) == pytest.approx(loss - bayes, abs=2e-4)
        if split == "val":
            assert f"vs the Bayes predictor (add-β) {bayes:.4f}: " in trained


def test_eval_of_the_training_text_scores_contiguous_windows_not_one_per_start(tmp_path):
    """data.window_starts=random trains on windows starting at any token, and the training split held one window per
    start token: eval --split train scored 9,390 overlapping windows of a 9,600-token text (each token ~32 times),
    seq_len times the work, for the mean over windows. It scores the training text in contiguous windows, as
    validation scores its part: the same examples and loss as the run trained with contiguous windows."""
    import random

    rng = random.Random(0)
    (tmp_path / "words.txt").write_text(" ".join(rng.choice(["to", "be", "or", "not", "that"]) for _ in range(3000)))
    results = {}
    for starts in ("random", "contiguous"):
        values = {"task": "causal_lm", "output_dir": str(tmp_path / starts),
                  "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
                  "data": {"source": "text", "path": str(tmp_path / "words.txt"), "seq_len": 32,
                           "window_starts": starts},
                  "trainer": {"max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2}}  # fmt: skip
        train(resolve_run_config(values))
        config, model, run_dir = load_run(tmp_path / starts)
        results[starts] = (evaluate(tmp_path / starts, "train"), len(build_data(config, run_dir).train), model)
    (scored, windows, model), (contiguous, _, _) = results["random"], results["contiguous"]
    assert windows > 32 * scored["examples"]  # the training split's windows: one per start token
    assert scored["examples"] == contiguous["examples"]
    config, _, run_dir = load_run(tmp_path / "random")
    plain = build_data(resolve_run_config({**config.to_dict(), "data": {**config.data, "window_starts": "contiguous"},
                                           "output_dir": str(run_dir)}), run_dir)  # fmt: skip
    assert scored["metrics"]["loss"] == pytest.approx(hand_loss(model.eval(), plain.train), rel=1e-6)
    for value in ("random", "bogus"):  # (a value of no use: it said "only training draws its examples so" too)
        with pytest.raises(ConfigError, match=f"data_overrides={{'window_starts': '{value}'}}: scoring takes "
                                              f"only window_starts='contiguous', the data as it is"):  # fmt: skip
            evaluate(tmp_path / "random", "train", {"window_starts": value})


def test_eval_says_how_many_tokens_at_the_parts_ends_fill_no_window(tmp_path, capsys):
    """Without data.overlap the windows are contiguous and the last tokens of each part, fewer than a window, are
    scored nowhere (at seq_len 8,192 some 12 % of a test text), said nowhere but in a docstring. eval --split all
    counts them: with its windows they make up every character of the file (a character tokenizer); with an
    overlap none are left."""
    import random

    from markovformer.cli.main import main

    rng = random.Random(1)
    text = " ".join(rng.choice(["to", "be", "or", "not", "that"]) for _ in range(1000))
    (tmp_path / "words.txt").write_text(text)
    for overlap in (0, 4):
        values = {"task": "causal_lm", "output_dir": str(tmp_path / f"overlap{overlap}"),
                  "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
                  "data": {"source": "text", "path": str(tmp_path / "words.txt"), "seq_len": 40, "overlap": overlap},
                  "trainer": {"max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2}}  # fmt: skip
        train(resolve_run_config(values))
        results = evaluate(tmp_path / f"overlap{overlap}", "all")
        config, _, run_dir = load_run(tmp_path / f"overlap{overlap}")
        bundle = build_data(config, run_dir)
        windows = sum(len(getattr(bundle, split)[i]["input_ids"]) for split in ("train", "val", "test")
                      for i in range(len(getattr(bundle, split))))  # fmt: skip
        if overlap:
            assert "unscored_tail_tokens" not in results
        else:
            assert windows + results["unscored_tail_tokens"] == len(text) and results["unscored_tail_tokens"] > 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "overlap0"), "--split", "test"]) == 0
    assert "at the end of the test part fill no window of seq_len + 1" in capsys.readouterr().out


def test_a_relative_link_to_a_data_file_is_found_again_from_another_working_folder(tmp_path, monkeypatch):
    """path: d/link.txt, a link to d/real.txt, trained in tmp_path: data.json records the resolved d/real.txt, which
    holds no link.txt, so ``eval`` from another folder refused the run ('data.path='d/link.txt': no such file')
    where a plain relative path is scored from the file recorded."""
    real = tmp_path / "d" / "real.txt"
    real.parent.mkdir()
    real.write_text("text\n")
    (tmp_path / "d" / "link.txt").symlink_to("real.txt")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "data.json").write_text(json.dumps({"file_sha256": {str(real.resolve()): "0" * 64}}))
    found = recorded_data_files(run_dir, {"source": "text", "path": "d/link.txt"}, {})
    assert found == {"path": str(tmp_path.resolve() / "d" / "link.txt")}


def test_a_data_file_whose_name_holds_glob_characters_is_found_again_from_another_working_folder(tmp_path,
                                                                                                 monkeypatch):
    """path: 'corpus [v1].txt', trained beside it: its name reads as a glob pattern, so eval from another folder
    left it as configured and refused the run ('the pattern matches no file')."""
    corpus = tmp_path / "g" / "corpus [v1].txt"
    corpus.parent.mkdir()
    corpus.write_text("text\n")
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "data.json").write_text(json.dumps({"file_sha256": {str(corpus): "0" * 64}}))
    assert recorded_data_files(run_dir, {"source": "text", "path": "corpus [v1].txt"}, {}) == {"path": str(corpus)}
    assert recorded_data_files(run_dir, {"source": "text", "path": "*.txt"}, {}) == {}  # a pattern is left as it is

"""table1 on tiny prepared files written by the data modules' own writers: matched widths, the cells' numbers against
``runner.evaluate`` of their runs, the statistics over seeds, the ratio choice, F1 by regime, the speech tests, the
cost measurement, skipping a domain whose data is missing, and a rerun that trains nothing."""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
from markdown_tables import markdown_tables  # beside this file

from markovformer.data.recipes.finance import FRACTIONS, daily_move_table, synthetic_bars, write_csv
from markovformer.data.recipes.genomics import write_labelled_fasta
from markovformer.data.recipes.speech import WORDS, read_speech_features, speech_bundle, write_speech_features
from markovformer.data.splits import contiguous_split
from markovformer.experiments import run_experiment, table1_speed
from markovformer.experiments.report import ExperimentReport, seed_summary
from markovformer.experiments.table1 import (
    DomainSetup,
    Table1Settings,
    check_settings,
    choose_ratio,
    regime_scores,
    run_config,
    set_up_domain,
    summarise,
    train_cell,
)
from markovformer.experiments.table1_models import (
    ABLATIONS,
    MARKOVIAN,
    MODELS,
    SPEECH_STACK,
    data_paths,
    data_section,
    markovian_section,
    parameter_count,
    variant_section,
    variants,
)
from markovformer.experiments.table1_report import write_report
from markovformer.experiments.table1_speed import build, measure, measure_in_child
from markovformer.plots import saving
from markovformer.training import runner
from markovformer.training.runner import evaluate, load_run

TINY = {"d_model": 16, "n_layers": 1, "n_heads": 2, "steps": 2, "batch_size": 8, "ctc_batch_size": 4,
        "measure": False}  # fmt: skip


def write_genomics(data_dir: Path, n: int = 40, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    records = [(f"s{i}", "".join(rng.choice(list("ACGT"), 30)), ("EI", "IE", "N")[i % 3])
               for i in range(n)]  # fmt: skip
    write_labelled_fasta(records, data_dir / "splice")


def write_finance(data_dir: Path, days: int = 320, seed: int = 0) -> None:
    header, rows, _ = daily_move_table(synthetic_bars(days, seed))
    write_csv(data_dir / "sp500.csv", header, rows)


def write_speech(data_dir: Path, seed: int = 0) -> None:
    """Utterances of at least 2 stacked inputs per character: CTC needs one per label and one per blank between
    repeated characters, else the loss is infinite on every split and the splits' scores cannot be told apart."""
    rng = np.random.default_rng(seed)
    utterances = []
    for split, count in (("train", 12), ("val", 4), ("test", 4), ("recorded", 3)):
        for _ in range(count):
            words = " ".join(rng.choice(WORDS, int(rng.integers(1, 3))))
            frames = SPEECH_STACK * (2 * len(words) + int(rng.integers(0, 6 if split != "recorded" else 12)))
            utterances.append((torch.from_numpy(rng.normal(size=(frames, 80)).astype(np.float32)), words, split))
    write_speech_features(data_dir / "digits.safetensors", utterances, {"log_mel": None})


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mf_data")
    write_genomics(folder)
    write_finance(folder)
    write_speech(folder)
    return folder


def settings_for(data_dir: Path, **changes) -> Table1Settings:
    return Table1Settings(**{"data_dir": str(data_dir), **TINY, **changes})


def test_every_baseline_gets_the_width_whose_parameter_count_is_nearest_the_markovian_transformers(data_dir):
    settings = Table1Settings(data_dir=str(data_dir), measure=False)  # the default sizes: d_model 64, 2 layers
    rows = variants(tuple(MODELS), (), ())
    for domain in ("genomics", "finance", "speech"):
        setup = set_up_domain(domain, settings, rows, log=lambda line: None)
        target = setup.parameters[MARKOVIAN]
        task = {"speech": "ctc"}.get(domain, "sequence_classification")
        for variant in rows:
            section, count = setup.sections[variant], setup.parameters[variant]
            assert count == parameter_count(task, section, setup.info)
            assert abs(count / target - 1) <= settings.tolerance, (domain, variant, count, target)
            if variant == MARKOVIAN:
                continue
            width, step = section["d_model"], 2 * section["n_heads"]
            assert width % step == 0
            for other in (width - step, width + step):  # no neighbouring width comes closer
                assert abs(parameter_count(task, {**section, "d_model": other}, setup.info) - target) >= abs(
                    count - target
                )
        assert setup.sections["linformer"]["max_positions"] == setup.longest
    parts, _ = read_speech_features(data_dir / "digits.safetensors")  # speech: the real recordings count too
    frames = max(len(features) for part in parts.values() for features, _ in part)
    assert setup.longest == math.ceil(frames / SPEECH_STACK)  # inputs of SPEECH_STACK frames each


def test_missing_domains_are_skipped_and_cells_are_the_evaluations_of_their_runs(data_dir, tmp_path):
    only_genomics = tmp_path / "data"
    write_genomics(only_genomics)
    lines: list[str] = []
    overrides = {**TINY, "data_dir": str(only_genomics), "models": [MARKOVIAN, "transformer"], "ablations": [],
                 "ratios": [0.75]}  # fmt: skip
    report = run_experiment("table1", tmp_path / "out", seeds=(0, 1), overrides=overrides, log=lines.append)

    for dataset, domain in (("sp500", "finance"), ("digits", "speech")):
        message = (f"[table1] skipping {domain}: {data_paths(domain, only_genomics, dataset)['path']} not found; "
                   f"prepare it with `markovformer data prepare {dataset} --dir {only_genomics}`")  # fmt: skip
        assert message in lines
        assert message.split("skipping ", 1)[1] in report.read_text()
    assert all(len(table) > 1 for table in markdown_tables(report.read_text()))  # well formed, none empty
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(results["skipped"]) == {"finance", "speech"} and list(results["setups"]) == ["genomics"]

    cells = results["cells"]
    assert {(c["variant"], c["seed"]) for c in cells} == {(v, s) for v in (MARKOVIAN, "transformer", "ratio=0.75")
                                                          for s in (0, 1)}  # fmt: skip
    for cell in cells:  # every number is runner.evaluate of the cell's own run
        assert cell["val"] == evaluate(cell["run_dir"], "val")["metrics"]
        test = evaluate(cell["run_dir"], "test")["metrics"]
        assert cell["test"] == test and cell["scores"]["auroc"] == test["auroc"]
        assert cell["parameters"] == load_run(cell["run_dir"])[1].num_parameters()
    assert len({c["run_dir"] for c in cells}) == len(cells)  # seeds train separate runs

    for variant in (MARKOVIAN, "transformer", "ratio=0.75"):
        values = [c["scores"]["auroc"] for c in sorted(cells, key=lambda c: c["seed"]) if c["variant"] == variant]
        entry = results["summaries"]["genomics"][variant]["auroc"]
        assert entry["mean"] == pytest.approx(sum(values) / 2)
        assert entry["std"] == pytest.approx(abs(values[0] - values[1]) / 2**0.5)  # sample std of two values
        assert f"{entry['mean']:.4f} ± {entry['std']:.4f}" in report.read_text()
    validation = {v: results["summaries"]["genomics"][v]["val_auroc"]["mean"] for v in (MARKOVIAN, "ratio=0.75")}
    assert results["chosen_ratio"]["genomics"] == max(validation, key=validation.get)
    assert (tmp_path / "out" / "table1.png").stat().st_size > 0

    lines.clear()  # a rerun reads every cell and trains nothing
    run_experiment("table1", tmp_path / "out", seeds=(0, 1), overrides=overrides, log=lines.append)
    assert not any(line.startswith("[table1] training") for line in lines)
    assert sum("done earlier" in line for line in lines) == len(cells)
    assert json.loads((tmp_path / "out" / "results.json").read_text())["cells"] == cells


def test_finance_cell_scores_f1_by_volatility_regime(data_dir, tmp_path):
    # 20 steps: after TINY's 2 the model predicted one class everywhere, the same macro-F1 on both splits
    settings = settings_for(data_dir, steps=20)
    setup = set_up_domain("finance", settings, {MARKOVIAN: "MT"}, log=lambda line: None)
    cell = train_cell(setup, MARKOVIAN, settings, 0, tmp_path, log=lambda line: None)
    test = evaluate(cell["run_dir"], "test")["metrics"]
    assert cell["scores"]["macro_f1"] == test["macro_f1"]
    # the comparison below can tell the splits apart: an eval that scored the validation split would fail it
    assert evaluate(cell["run_dir"], "val")["metrics"]["macro_f1"] != pytest.approx(test["macro_f1"], abs=1e-3)
    scores = regime_scores(cell["run_dir"])
    assert scores["macro_f1"] == pytest.approx(test["macro_f1"], abs=1e-6)  # the same predictions as the engine's
    config = load_run(cell["run_dir"])[0]
    with open(config.data["path"]) as handle:
        regimes = [line.rstrip("\n").split(",")[-2] for line in handle][1:]
    test_rows = contiguous_split(len(regimes), FRACTIONS)[2]  # each test window is labelled by its last row
    expected = [regimes[last] for last in range(test_rows.start + config.data["window"] - 1, test_rows.stop)]
    for regime in ("low", "medium", "high"):
        assert scores[f"count_{regime}"] == expected.count(regime)
        assert (f"f1_{regime}" in cell["scores"]) == (regime in expected)


@torch.no_grad()
def mean_ctc_loss(model: torch.nn.Module, examples: list[dict]) -> float:
    """The CTC metric's loss by its definition: each utterance's negative log-likelihood over its label count,
    averaged over the utterances; one utterance at a time, without the engine's batches or the model's loss."""
    model.eval()
    losses = []
    for example in examples:
        log_probs = model(input_features=example["input_features"][None]).logits.float().log_softmax(-1)
        labels, frames = example["labels"], log_probs.shape[1]
        nll = torch.nn.functional.ctc_loss(log_probs.transpose(0, 1), labels[None], [frames], [len(labels)],
                                           reduction="sum")  # fmt: skip
        losses.append(float(nll) / len(labels))
    return sum(losses) / len(losses)


def test_speech_cell_scores_unseen_voices_and_real_recordings(data_dir, tmp_path, monkeypatch):
    scorings = []  # the metrics of every evaluation train_cell makes

    def scoring(*args, **kwargs):
        result = evaluate(*args, **kwargs)
        scorings.append(result["metrics"])
        return result

    monkeypatch.setattr(runner, "evaluate", scoring)
    settings = settings_for(data_dir, ctc_steps=4)
    setup = set_up_domain("speech", settings, {"s4d": "S4D"}, log=lambda line: None)
    cell = train_cell(setup, "s4d", settings, 0, tmp_path, log=lambda line: None)
    model = load_run(cell["run_dir"])[1]
    parts, _ = read_speech_features(data_dir / "digits.safetensors")  # each set's utterances, read here
    sets = {name: speech_bundle({"train": parts["train"], "val": parts["val"], "test": parts[name]}, {},
                                stack=SPEECH_STACK).test for name in ("val", "test", "recorded")}  # fmt: skip
    expected = {name: mean_ctc_loss(model, examples) for name, examples in sets.items()}
    assert all(math.isfinite(loss) for loss in expected.values())
    # the three sets score apart (WER is 1.0 on each after 4 steps; the loss tells them apart), so a cell that
    # scored another set than the one it names fails below
    assert min(abs(a - b) for a, b in itertools.combinations(expected.values(), 2)) > 0.05
    assert cell["val"]["loss"] == pytest.approx(expected["val"], rel=1e-4)
    assert cell["test"]["loss"] == pytest.approx(expected["test"], rel=1e-4)  # the unseen voices, not val
    assert cell["scores"]["wer"] == cell["test"]["wer"]
    on_recordings = [m for m in scorings if m["loss"] == pytest.approx(expected["recorded"], rel=1e-4)]
    assert len(on_recordings) == 1  # one evaluation scored the real recordings; wer_recorded is its WER
    assert cell["scores"]["wer_recorded"] == on_recordings[0]["wer"]


def test_summaries_use_the_sample_std_and_the_ratio_is_chosen_on_validation_in_the_metrics_direction():
    def cell(domain, variant, seed, val, test):
        primary = {"speech": "wer", "genomics": "auroc"}[domain]
        return {"domain": domain, "variant": variant, "seed": seed, "val": {primary: val}, "scores": {primary: test}}

    cells = [cell("speech", MARKOVIAN, 0, 0.5, 0.4), cell("speech", MARKOVIAN, 1, 0.3, 0.2),
             cell("speech", "ratio=0.25", 0, 0.2, 0.9), cell("speech", "ratio=0.25", 1, 0.4, 0.9),
             cell("genomics", MARKOVIAN, 0, 0.7, 0.1), cell("genomics", "ratio=0.75", 0, 0.8, 0.0),
             cell("genomics", "ablation-no_gru", 0, 0.9, 0.0)]  # fmt: skip
    summaries = summarise(cells)
    assert summaries["speech"][MARKOVIAN]["wer"]["std"] == pytest.approx(statistics.stdev([0.4, 0.2]))
    assert summaries["speech"][MARKOVIAN]["val_wer"]["mean"] == pytest.approx(0.4)
    assert summaries["genomics"][MARKOVIAN]["auroc"]["std"] is None  # one seed: no spread to report
    assert choose_ratio("speech", summaries) == "ratio=0.25"  # lower validation WER (0.3 < 0.4), worse test
    assert choose_ratio("genomics", summaries) == "ratio=0.75"  # higher validation AUROC; an ablation is no ratio


def test_cost_measurement_reports_a_training_step_and_failures_come_back_as_skipped():
    section = {"vocab_size": 6, "num_labels": 3, "d_model": 16, "n_layers": 1, "n_heads": 2, "causal": False,
               "attention": "softmax"}  # fmt: skip
    job = {"model_type": "markovian_transformer", "task": "sequence_classification", "section": section,
           "memory_length": 256, "speed_length": 128, "repeats": 2}  # fmt: skip
    result = measure(job)
    assert result["tokens_per_second"] == pytest.approx(128 / result["step_seconds"])
    assert result["timed_steps"] == 2
    parameters_mib = build(job["model_type"], job["task"], section)[0].num_parameters() * 4 / 2**20
    assert result["peak_mib"] >= 3 * parameters_mib  # parameters, Adam's two moments and the step's activations
    failed = measure_in_child({**job, "section": {**section, "attention": "no_such_kind"}})
    assert failed["skipped"].startswith("the measuring process failed") and "no_such_kind" in failed["skipped"]


def test_a_cell_depends_on_its_datas_bytes_and_not_on_where_it_lies():
    """Moved files (other paths, same bytes) keep a cell and its run directory; a re-prepared file (other bytes
    under the same name) does not: its cell and run are trained again instead of being read as the old data's."""
    from markovformer.experiments.table1 import cell_inputs
    from markovformer.experiments.table1_models import run_name

    def setup(directory: str, digest: str) -> DomainSetup:
        data = data_section("finance", data_paths("finance", directory, "sp500"))
        return DomainSetup("finance", "sp500", data, {}, 0, {MARKOVIAN: markovian_section("finance")}, {},
                           {"csv": digest})  # fmt: skip

    here, moved, reprepared = setup("data", "aaaa"), setup("elsewhere", "aaaa"), setup("data", "bbbb")
    settings = Table1Settings()
    inputs = [cell_inputs(s, MARKOVIAN, settings, 0) for s in (here, moved, reprepared)]
    names = [run_name("finance", MARKOVIAN, run_config(s, MARKOVIAN, settings, 0), s.data_digests)
             for s in (here, moved, reprepared)]  # fmt: skip
    assert inputs[0] == inputs[1] and names[0] == names[1]
    assert inputs[0] != inputs[2] and names[0] != names[2]


def test_a_speed_cell_depends_on_its_kinds_revision_and_not_on_the_grids_rows(monkeypatch):
    """A fix that raises a kind's revision measures its speed and memory again (the speed cell was keyed on the
    measurement alone and read back from before the fix); the grid's other rows, seeds and steps leave it."""
    import dataclasses

    from markovformer.experiments.table1 import speed_inputs
    from markovformer.layers import registry

    data = data_section("finance", data_paths("finance", "data", "sp500"))
    setup = DomainSetup("finance", "sp500", data, {"input_dim": 4, "num_labels": 3}, 40,
                        {MARKOVIAN: markovian_section("finance")}, {})  # fmt: skip
    settings = Table1Settings()
    before = speed_inputs(setup, MARKOVIAN, settings)
    assert before == speed_inputs(setup, MARKOVIAN, dataclasses.replace(settings, models=(MARKOVIAN,), steps=10))
    kind = registry.ATTENTION_KINDS["hybrid_split"]
    monkeypatch.setitem(registry.ATTENTION_KINDS, "hybrid_split", dataclasses.replace(kind, revision=kind.revision + 1))
    assert speed_inputs(setup, MARKOVIAN, settings) != before


def test_settings_and_rows_are_refused_or_kept_at_their_boundaries():
    with pytest.raises(ValueError, match="keep it in models"):  # ablations alone compare against nothing
        check_settings(Table1Settings(models=("transformer",), ablations=("no_gru",), ratios=()))
    with pytest.raises(ValueError, match="table1.genomics='sp500'"):
        check_settings(Table1Settings(genomics="sp500"))
    for ratio in (0.0, 1.0):  # all softmax or all Markov heads: a baseline, not a hybrid
        with pytest.raises(ValueError, match=f"hybrid ratio {ratio!r}"):
            variants((MARKOVIAN,), (), (ratio,))
    assert list(variants((MARKOVIAN,), (), (0.5, 0.25))) == [MARKOVIAN, "ratio=0.25"]  # 0.5 is the MT's own row
    with pytest.raises(ValueError, match=r"table1\.ratios: 0\.25 of n_heads=2 heads gives no Markov head"):
        check_settings(Table1Settings(n_heads=2, ratios=(0.25,)))  # before any cell trains


def test_each_ablation_and_ratio_row_changes_what_it_names():
    markovian = markovian_section("genomics")
    for name in ABLATIONS:
        section = variant_section(f"ablation-{name}", markovian, 64, 100)
        assert {key for key in section if section[key] != markovian.get(key)}, name  # else the full model twice
    assert variant_section("ablation-no_gru", markovian, 64, 100)["gru"] is False and markovian["gru"] is True
    assert variant_section("ratio=0.25", markovian, 64, 100)["markov_head_ratio"] == 0.25


def test_ablations_and_ratios_keep_the_markovian_transformers_width(data_dir):
    settings = settings_for(data_dir)
    rows = variants((MARKOVIAN, "transformer"), ("no_gru", "pure_markov"), (0.75,))
    setup = set_up_domain("genomics", settings, rows, log=lambda line: None)
    for variant in ("ablation-no_gru", "ablation-pure_markov", "ratio=0.75"):
        assert setup.sections[variant]["d_model"] == settings.d_model


def test_speech_cells_train_with_the_ctc_budget():
    settings = Table1Settings(steps=400, batch_size=32, ctc_steps=1000, ctc_batch_size=16)
    for domain, dataset, steps, batch in (("speech", "digits", 1000, 16), ("finance", "sp500", 400, 32)):
        data = data_section(domain, data_paths(domain, "data", dataset))
        setup = DomainSetup(domain, dataset, data, {}, 0, {MARKOVIAN: markovian_section(domain)}, {})
        trainer = run_config(setup, MARKOVIAN, settings, 0)["trainer"]
        assert (trainer["max_steps"], trainer["batch_size"]) == (steps, batch)


def test_peak_memory_adds_the_parameters_and_optimiser_state_and_is_read_at_memory_length(monkeypatch):
    """With the process's own high-water mark at 0, the reported peak is the parameters and AdamW's two moments
    (and its step counters), float32; and only the step at ``memory_length`` runs while the peak is being read."""
    measuring = {"on": False, "lengths": []}

    class NoProcessMemory:
        isolated = True

        def __init__(self, device):
            pass

        def start(self):
            measuring["on"] = True

        def peak_mib(self):
            measuring["on"] = False
            return 0.0

    real_step = table1_speed.training_step

    def step_of_length(model, optimizer, task, seq_len, seed=0):
        step = real_step(model, optimizer, task, seq_len, seed)

        def run():
            if measuring["on"]:
                measuring["lengths"].append(seq_len)
            step()

        return run

    monkeypatch.setattr(table1_speed, "PeakMemory", NoProcessMemory)
    monkeypatch.setattr(table1_speed, "training_step", step_of_length)
    section = {"vocab_size": 6, "num_labels": 3, "d_model": 16, "n_layers": 1, "n_heads": 2, "causal": False,
               "attention": "softmax"}  # fmt: skip
    job = {"model_type": "markovian_transformer", "task": "sequence_classification", "section": section,
           "memory_length": 24, "speed_length": 16, "repeats": 1}  # fmt: skip
    result = table1_speed.measure(job)
    tensors = list(build(job["model_type"], job["task"], section)[0].parameters())
    elements = 3 * sum(t.numel() for t in tensors) + len(tensors)  # weights, exp_avg, exp_avg_sq; one step each
    assert result["peak_mib"] == pytest.approx(elements * 4 / 2**20, rel=1e-9)
    assert measuring["lengths"] == [24]


# the report from hand-made results: every number below follows from these summaries
ROWS = {MARKOVIAN: "Markovian Transformer", "transformer": "Transformer", "s4d": "S4D", "ablation-no_gru": "no GRU",
        "ratio=0.25": "hybrid, Markov head ratio 0.25"}  # fmt: skip
PARAMETERS = {MARKOVIAN: 10_000, "transformer": 10_500, "s4d": 12_000, "ablation-no_gru": 8_000, "ratio=0.25": 9_800}


def _hand_made_results() -> dict:
    S = seed_summary
    genomics = {MARKOVIAN: {"auroc": S([0.80, 0.82]), "accuracy": S([0.7, 0.7]), "val_auroc": S([0.70, 0.72])},
                "transformer": {"auroc": S([0.85, 0.85]), "accuracy": S([0.8, 0.8]), "val_auroc": S([0.8, 0.8])},
                "s4d": {"auroc": S([0.70, 0.70]), "accuracy": S([0.6, 0.6]), "val_auroc": S([0.6, 0.6])},
                "ablation-no_gru": {"auroc": S([0.78, 0.78]), "accuracy": S([0.7, 0.7]), "val_auroc": S([0.9, 0.9])},
                "ratio=0.25": {"auroc": S([0.75, 0.77]), "accuracy": S([0.7, 0.7]), "val_auroc": S([0.74, 0.76])}}
    speech = {MARKOVIAN: {"wer": S([0.30, 0.32]), "wer_recorded": S([0.5, 0.5]), "val_wer": S([0.3, 0.3])},
              "transformer": {"wer": S([0.40, 0.40]), "wer_recorded": S([0.6, 0.6]), "val_wer": S([0.4, 0.4])},
              "s4d": {"wer": S([0.30, 0.32]), "wer_recorded": S([0.6, 0.6]), "val_wer": S([0.4, 0.4])},
              "ablation-no_gru": {"wer": S([0.35, 0.35]), "wer_recorded": S([0.6, 0.6]), "val_wer": S([0.4, 0.4])},
              "ratio=0.25": {"wer": S([0.33, 0.33]), "wer_recorded": S([0.6, 0.6]), "val_wer": S([0.35, 0.35])}}
    finance = {v: {"macro_f1": S([0.4, 0.4]), "val_macro_f1": S([0.4, 0.4]), "f1_low": S([0.3, 0.3]),
                   "f1_medium": S([0.5, 0.5]), "f1_high": S([0.7, 0.7])} for v in ROWS}  # fmt: skip
    setups = {d: {"dataset": "x", "info": {}, "longest": 10, "parameters": PARAMETERS,
                  "d_model": {v: 64 for v in ROWS}} for d in ("genomics", "speech", "finance")}  # fmt: skip
    speed = {MARKOVIAN: {"peak_mib": 123.0, "tokens_per_second": 4567.0, "threads": 1},
             "transformer": {"peak_mib": 99.0, "tokens_per_second": 8000.0, "threads": 1}, "s4d": {"skipped": "oom"}}
    return {"seeds": [0, 1], "skipped": {}, "rows": ROWS, "setups": setups, "cells": [],
            "summaries": {"genomics": genomics, "speech": speech, "finance": finance},
            "chosen_ratio": {"genomics": "ratio=0.25", "speech": MARKOVIAN, "finance": MARKOVIAN}, "speed": speed}


def test_the_report_ranks_compares_and_tabulates_hand_made_results(tmp_path, kept_figures):
    kept_figures(saving)  # drawn, not rendered
    report = ExperimentReport(tmp_path, "t", log=lambda line: None, settings={})
    report.results = _hand_made_results()
    write_report(report, Table1Settings(data_dir="data"), quick=False)
    text = report.write().read_text()
    tables = markdown_tables(text)

    def table(first_header: str) -> list[list[str]]:
        (found,) = [t for t in tables if t[0][0] == first_header]
        return found

    # the verdicts rank the models only (no ablations or ratios): AUROC higher is better, WER lower is better, and
    # a tie does not push the Markovian Transformer down
    verdicts = {line[2:].split(":")[0]: line for line in text.splitlines() if line.startswith("- ") and "ranks" in line}
    assert "ranks 2 of 3" in verdicts["genomics"] and "best Transformer (0.8500)" in verdicts["genomics"]
    assert "ranks 1 of 3" in verdicts["speech"] and "tied with S4D" in verdicts["speech"]
    table_one = [t for t in tables if t[0][:2] == ["model", "genomics: AUROC"]][0]
    rows = {row[0]: row for row in table_one[1:]}
    assert rows["Markovian Transformer"][-2:] == ["123", "4567"]  # peak MiB, then tokens/s
    assert rows["S4D"][-2] == "skipped: oom"
    ablations = {row[0]: row for row in table("Markovian Transformer")[1:]}
    assert ablations["no GRU"][1].endswith(f"({0.78 - 0.81:+.4f})")  # ablation - full model, genomics AUROC
    widths = [t for t in tables if t[0][1].endswith("vs MT")][0]
    shown = {row[0]: row[1].split(" / ")[-1] for row in widths[1:]}
    assert (shown["Transformer"], shown["S4D"], shown["no GRU"]) == ("+5.0%", "+20.0%", "-20.0%")
    # only baselines count as unmatched: ablations keep the width and move the count on purpose
    (unmatched,) = [line.split(":** ")[1] for line in text.splitlines() if line.startswith("**Not matched")]
    assert sorted(unmatched.rstrip(".").split(", ")) == ["finance/s4d", "genomics/s4d", "speech/s4d"]
    genomics_ratios = [row for row in table("domain")[1:] if row[0] == "genomics"]
    assert [row[1] for row in genomics_ratios] == ["0.25", "0.5"]  # by the share of Markov heads, MT's 0.5 included
    assert genomics_ratios[0][2:] == ["0.7500 ± 0.0141", "0.7600 ± 0.0141", "**chosen**"]  # validation, test
    assert genomics_ratios[1][4] == ""
    regimes = [t for t in tables if t[0][1].startswith("F1, ")][0]
    assert regimes[1][1:] == ["0.3000 ± 0.0000", "0.5000 ± 0.0000", "0.7000 ± 0.0000"]  # low, medium, high


def test_parameter_counts_are_shown_in_thousands_of_ten_to_the_three():
    from markovformer.experiments.table1_report import _k

    assert (_k(9_999), _k(100_000), _k(1_250_000)) == ("9,999", "100K", "1250K")  # 1024 a K would say 98K, 1221K

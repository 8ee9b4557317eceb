"""The ``mixers`` experiment: matched parameter counts for every kind, its scoring against hand counts, the Bayes
add-1 reference, the verdict rules, a tiny end-to-end run that resumes from its cells, and (slow) the learning test:
global softmax attention solves MQAR through the engine while a window shorter than the pair distance cannot."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from markovformer.data.synthetic import tasks
from markovformer.experiments import mixers
from markovformer.experiments import mixers_models as zoo
from markovformer.experiments.mixers_report import (
    gated_convolution_verdict,
    published_comparison,
    selective_copy_verdict,
    solves,
)
from markovformer.markov import add_beta_predict

ROOT = Path(__file__).resolve().parents[2]


def test_every_kind_is_matched_to_the_softmax_parameter_count_within_tolerance():
    settings = mixers.MixersSettings()
    for width in (32, 64):
        sections = mixers.matched_sections("mqar", 64, width, settings)
        assert set(sections) == set(settings.kinds)
        assert sections["softmax"]["ratio"] == 1.0
        for kind, matched in sections.items():
            assert abs(matched["ratio"] - 1) <= settings.tolerance, (kind, width, matched)
            attention = matched["section"]["attention"]
            if kind == "h3":  # Zoology's H3: two channels per head, in every layer's own entry
                assert attention == [{"kind": "h3", "head_dim": 2}] * settings.n_layers
                model = mixers.MarkovianTransformerForCausalLM(mixers.MarkovianTransformerConfig(
                    vocab_size=16, **matched["section"]))  # fmt: skip
                assert {block.attention.head_dim for block in model.model.blocks} == {2}
            else:
                assert attention == zoo.KINDS[kind][1]["attention"]


def test_the_positional_bias_kinds_are_matched_too():
    settings = mixers.MixersSettings(kinds=("softmax", *zoo.POSITION_KINDS))
    sections = mixers.matched_sections("mqar", 64, 32, settings)
    for kind in zoo.POSITION_KINDS:
        assert abs(sections[kind]["ratio"] - 1) <= settings.tolerance, (kind, sections[kind])
        model = mixers.MarkovianTransformerForCausalLM(mixers.MarkovianTransformerConfig(
            vocab_size=16, **sections[kind]["section"]))  # fmt: skip
        assert model(torch.randint(0, 16, (2, 12))).logits.shape == (2, 12, 16)


class _Oracle(torch.nn.Module):
    """A causal LM whose logits at t put all mass on ``answers[t + 1]``: it scores 1 where answers equal labels."""

    def __init__(self, answers: torch.Tensor, vocab: int) -> None:
        super().__init__()
        self.answers, self.vocab = answers, vocab

    def forward(self, inputs):
        shifted = torch.cat([self.answers[:, 1:], self.answers[:, :1]], dim=1).clamp(min=0)
        return SimpleNamespace(logits=torch.nn.functional.one_hot(shifted, self.vocab).float() * 50)


def test_score_counts_only_the_labelled_positions():
    inputs, labels = tasks.mqar_examples(20, 32, 4, 64, torch.Generator().manual_seed(0))
    assert zoo.score(_Oracle(labels, 64), inputs, labels)["accuracy"] == 1.0
    wrong = labels.clone()
    wrong[:5][wrong[:5] != -100] = 0  # every answer of 5 of the 20 sequences wrong
    result = zoo.score(_Oracle(wrong, 64), inputs, labels)
    assert result["accuracy"] == pytest.approx(15 / 20)
    assert result["loss"] == pytest.approx(5 / 20 * 50, rel=1e-3)  # a wrong answer costs its 50-logit gap


def test_bayes_add1_scores_match_the_estimator():
    inputs, _ = tasks.icl_markov_examples(30, 40, 2, 2, torch.Generator().manual_seed(1))
    result = zoo.bayes_add1_scores(inputs, 2, 2)
    prediction = add_beta_predict(inputs, 2, 2, 1.0)
    hits = [int(prediction[b, t - 1].argmax()) == int(inputs[b, t]) for b in range(30) for t in range(2, 40)]
    assert result["accuracy"] == pytest.approx(sum(hits) / len(hits))


def test_gate_profile_is_a_distribution_over_lags_and_null():
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM

    inputs, labels = tasks.mqar_examples(4, 32, 4, 64, torch.Generator().manual_seed(0))
    section = zoo.kind_section("markov_global", 16, 2, 2, 4, 8)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=64, **section)).eval()
    profile = zoo.gate_profile(model, inputs, labels)
    assert len(profile) == 2 and all(len(layer["gate"]) == 4 + 1 for layer in profile)
    assert all(sum(layer["gate"]) == pytest.approx(1.0, abs=1e-5) for layer in profile)
    softmax = zoo.kind_section("softmax", 16, 2, 2, 4, 8)
    assert zoo.gate_profile(MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=64, **softmax)),
                            inputs, labels) is None  # fmt: skip


def test_recall_by_distance_counts_each_query_in_its_span():
    """Against a loop over the examples, with a stand-in model that answers a query only when its value stands at
    most 32 positions back: the counts per span are the loop's, the accuracy 1 up to 32 and 0 beyond."""
    inputs, labels = tasks.mqar_examples(64, 64, 4, 8192, torch.Generator().manual_seed(3))
    reach = 32
    logits = torch.zeros(*inputs.shape, 8192)
    expected = {"1-16": 0, "17-32": 0, "33-48": 0, "49+": 0}
    for b in range(len(inputs)):
        for q in range(63):
            if labels[b, q + 1] == -100:
                continue
            first = next(j for j in range(q) if inputs[b, j] == inputs[b, q])
            distance = q - first - 1
            expected[next(k for k, high in zip(expected, (16, 32, 48, 64), strict=True) if distance <= high)] += 1
            if distance <= reach:
                logits[b, q, labels[b, q + 1]] = 1.0

    spans = zoo.recall_by_distance(lambda x: SimpleNamespace(logits=logits), inputs, labels)
    assert {s["distances"]: s["count"] for s in spans} == expected
    assert sum(expected.values()) == int((labels != -100).sum())
    assert [s["correct"] / s["count"] for s in spans if s["count"]][:2] == [1.0, 1.0]
    assert all(s["correct"] == 0 for s in spans[2:])


def test_the_distance_table_lines_up_spans_by_label_across_lengths():
    """Rows of T = 32 (two spans), T = 64 (four, two seeds summed) and a cell from before the spans were kept."""
    from markovformer.experiments.mixers_report import recall_distance_table

    def spans(*pairs):
        labels = ["1-16", "17-32", "33-48", "49+"] if len(pairs) == 4 else ["1-16", "17+"]
        return [{"distances": label, "correct": c, "count": n} for label, (c, n) in zip(labels, pairs, strict=True)]

    points = [
        {"task": "mqar", "kind": "softmax", "length": 32, "width": 64, "test_by_distance": [spans((3, 4), (1, 4))]},
        {"task": "mqar", "kind": "softmax", "length": 64, "width": 64,
         "test_by_distance": [spans((1, 2), (1, 4), (0, 1), (2, 2)), spans((1, 2), (3, 4), (1, 1), (0, 2))]},
        {"task": "mqar", "kind": "hyena", "length": 64, "width": 64, "test_by_distance": [None]},
    ]  # fmt: skip
    tables = []
    recall_distance_table(SimpleNamespace(table=lambda header, rows, caption: tables.append((header, rows))),
                          points, SimpleNamespace(window=16))  # fmt: skip
    header, rows = tables[0]
    assert header == ["kind", "T", "d", "1-16 back", "17+ back", "17-32 back", "33-48 back", "49+ back"]
    assert rows[0][3:] == ["0.750", "0.250", "—", "—", "—"]
    assert rows[1][3:] == ["0.500", "—", "0.500", "0.500", "0.500"]
    assert rows[2][3:] == ["—"] * 5


def test_verdicts_follow_the_published_claims():
    assert gated_convolution_verdict({"softmax": 0.99, "hyena": 0.5, "s4d": 0.6}, 0.9).startswith("reproduced")
    assert gated_convolution_verdict({"softmax": 0.99, "hyena": 0.97}, 0.9).startswith("not reproduced")
    assert gated_convolution_verdict({"softmax": 0.4, "hyena": 0.1}, 0.9).startswith("not testable")
    assert gated_convolution_verdict({"softmax": 0.99}, 0.9).startswith("not tested: no gated convolution")
    assert selective_copy_verdict([("selective", 0.95), ("LTI", 0.2)], 0.9) == "reproduced"
    assert selective_copy_verdict([("selective", 0.95), ("LTI", 0.92)], 0.9).startswith("not reproduced")
    assert selective_copy_verdict([("selective", 0.3), ("LTI", 0.2)], 0.9).startswith("not separated")
    assert selective_copy_verdict([("selective", 0.95)], 0.9) == "not tested: no LTI kind in this run"
    assert selective_copy_verdict([("LTI", 0.2)], 0.9) == "not tested: no selective kind in this run"
    settings = SimpleNamespace(solved=0.9)
    assert solves({"task": "mqar", "test_accuracy": {"mean": 0.91}}, settings)
    icl = {"task": "icl_markov", "test_loss": {"mean": 0.52}, "bayes_add1": {"loss": {"mean": 0.49}}}
    assert not solves(icl, settings)


def test_a_run_without_softmax_says_it_cannot_compare_with_zoology():
    """A run of one kind (the zoology-64 cells run one kind per process) writes no empty claim headings."""
    settings = mixers.MixersSettings(tasks=("mqar", "selective_copy"), kinds=("sliding_window",), lengths=(64,),
                                     widths=(64,))  # fmt: skip
    point = {"task": "mqar", "kind": "sliding_window", "length": 64, "width": 64,
             "test_accuracy": {"mean": 0.7, "std": 0.0}}  # fmt: skip
    written = []
    published_comparison(SimpleNamespace(text=written.append, results={"seeds": [0]}), [point], settings, quick=False)
    assert "not compared here" in written[0]
    assert "attention solves MQAR" not in written[0] and "Mamba" not in written[0]


def test_settings_are_checked_with_the_bad_value_named():
    with pytest.raises(ValueError, match="'linformer'"):
        mixers.check_settings(mixers.MixersSettings(kinds=("linformer",)))
    with pytest.raises(ValueError, match="vocab_size=64 must exceed seq_len=128"):
        mixers.check_settings(mixers.MixersSettings(lengths=(128,), mqar_vocab=64))
    with pytest.raises(ValueError, match="num_features=0"):
        mixers.check_settings(mixers.MixersSettings(num_features=0))
    for lrs in ((0.0,), (3e-3, -1.0)):  # lr 0 trained and reported models that never moved; -1 failed in torch
        with pytest.raises(ValueError, match=r"mixers\.lrs=.*every learning rate must be a positive number"):
            mixers.check_settings(mixers.MixersSettings(lrs=lrs))
    with pytest.raises(ValueError, match="sizes='huge'"):
        mixers.resolve_sizes(mixers.MixersSettings(sizes="huge"))
    zoology = mixers.resolve_sizes(mixers.MixersSettings(sizes="zoology"))
    assert zoology.lengths == (64, 128, 256, 512) and zoo.mqar_pairs(512, zoology) == 64


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a GPU this torch does not see")
@pytest.mark.parametrize(("device", "message"), [("cuda", r"mixers\.device='cuda': this torch sees no GPU"),
                                                 ("gpu0", r"mixers\.device='gpu0' is no torch device")])
def test_a_device_this_process_cannot_use_is_refused_before_any_cell(tmp_path, device, message):
    """device=cuda without a GPU ended in a traceback ('Torch not compiled with CUDA enabled') from the first cell."""
    from markovformer.experiments import run_experiment
    from markovformer.training.run_config import ConfigError

    with pytest.raises(ConfigError, match=message):
        run_experiment("mixers", tmp_path, quick=True, overrides={"device": device}, log=lambda line: None)
    assert not (tmp_path / "cells").exists()


def test_num_features_reaches_every_random_feature_head_and_nothing_else(tmp_path):
    """``--set num_features=N`` draws N features per head in rff and both hybrids (the projection buffers' rows),
    leaves other kinds' sections as they were, and keys those cells apart, so one folder holds both feature counts."""
    from markovformer.experiments import run_experiment
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM

    for kind in zoo.RANDOM_FEATURE_KINDS:
        section = zoo.kind_section(kind, 32, 2, 2, 4, 8, num_features=96)
        model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=64, **section))
        rows = [buffer.shape[0] for name, buffer in model.named_buffers() if name.endswith("projection")]
        assert rows == [96, 96], kind  # one random-feature core per layer
        assert "num_features" not in zoo.kind_section(kind, 32, 2, 2, 4, 8)  # default: the section of earlier cells
    assert zoo.kind_section("softmax", 32, 2, 2, 4, 8, num_features=96) == zoo.kind_section("softmax", 32, 2, 2, 4, 8)

    overrides = {"tasks": ["mqar"], "kinds": ["softmax", "rff"], "widths": [32], "steps": 1, "warmup_steps": 1,
                 "val_examples": 8, "test_examples": 8}  # fmt: skip
    for features in (None, 96):
        run_experiment("mixers", tmp_path, quick=True, overrides={**overrides, "num_features": features},
                       log=lambda line: None)  # fmt: skip
    names = sorted(path.stem.split("_lr=")[0] for path in (tmp_path / "cells").glob("*.json"))
    assert names == ["mqar_T=32_d=32_rff", "mqar_T=32_d=32_rff_features=96", "mqar_T=32_d=32_softmax"]


def test_tiny_run_writes_the_report_and_reuses_its_cells(tmp_path):
    from markovformer.experiments import run_experiment

    overrides = {"tasks": ["mqar", "icl_markov"], "kinds": ["softmax", "markov_local"], "steps": 2,
                 "warmup_steps": 1, "val_examples": 8, "test_examples": 8, "lrs": [1e-3, 3e-3]}  # fmt: skip
    messages = []
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the process's count: the cells train on one (it said the process's)
    try:
        report = run_experiment("mixers", tmp_path, quick=True, overrides=overrides, log=messages.append)
    finally:
        torch.set_num_threads(threads)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["threads"] == 1 and "cached ones included), 1 thread(s)." in report.read_text()
    assert len(results["points"]) == 2 * 2 * 2  # tasks x widths x kinds
    assert len(list((tmp_path / "cells").glob("*.json"))) == 2 * 2 * 2 * 2  # and two lrs each
    point = results["points"][0]
    rank = {f"{lr:g}": (point["val_by_lr"][f"{lr:g}"], -point["val_loss_by_lr"][f"{lr:g}"]) for lr in (1e-3, 3e-3)}
    assert point["lr"] == max((1e-3, 3e-3), key=lambda lr: rank[f"{lr:g}"])  # accuracy, a tie to the lower loss
    text = report.read_text()
    assert "accuracy_mqar.png" in text and (tmp_path / "accuracy_icl_markov.png").is_file()
    assert "Where the Markov order gates put their mass" in text
    assert any(m.startswith("  mqar T=32 markov_local d=") for m in messages)  # progress names the kind
    assert "test accuracy by how far back each query's value stands" in text
    mqar = [p for p in results["points"] if p["task"] == "mqar"]
    spans = [[s["distances"] for s in run] for p in mqar for run in p["test_by_distance"]]
    assert spans and all(run == ["1-16", "17+"] for run in spans)  # T = 32: no span past the longest distance
    messages.clear()
    run_experiment("mixers", tmp_path, quick=True, overrides=overrides, log=messages.append)
    assert sum("done earlier" in m for m in messages) == 16  # nothing retrained


def test_cells_trained_before_a_kinds_fix_are_recomputed_and_others_reused(tmp_path):
    from markovformer.experiments import run_experiment

    overrides = {"tasks": ["mqar"], "kinds": ["softmax", "forgetting"], "widths": [32], "steps": 2,
                 "warmup_steps": 1, "val_examples": 8, "test_examples": 8, "lrs": [1e-3]}  # fmt: skip
    for kind in overrides["kinds"]:  # one process per kind into the same folder, then one run with both
        run_experiment("mixers", tmp_path, quick=True, overrides={**overrides, "kinds": [kind]}, log=lambda line: None)
    messages = []
    run_experiment("mixers", tmp_path, quick=True, overrides=overrides, log=messages.append)
    assert sum("done earlier" in m for m in messages) == 2
    (fox,) = (tmp_path / "cells").glob("*forgetting*.json")
    stored = json.loads(fox.read_text())
    assert stored["settings"]["revisions"] == {"forgetting": 2}  # FoX's forget-gate init fix (8988a4e)
    del stored["settings"]["revisions"]  # as a cell stored before that fix
    fox.write_text(json.dumps(stored))
    messages.clear()
    run_experiment("mixers", tmp_path, quick=True, overrides=overrides, log=messages.append)
    (line,) = [m for m in messages if "recomputing" in m]
    assert line.startswith(f"  {fox.stem}: stored under other settings, recomputing (revisions: null -> ")
    assert sum("done earlier" in m for m in messages) == 1  # softmax, never revised, keeps its key and its cell
    messages.clear()
    run_experiment("mixers", tmp_path, quick=True, overrides=overrides, recompute=["*_softmax_*"],
                   log=messages.append)  # fmt: skip
    assert sum("removed, to be recomputed" in m for m in messages) == 1
    assert sum("done earlier" in m for m in messages) == 1  # FoX reused this time


def _train_mqar(tmp_path: Path, name: str, **model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train configs/mixers_mqar.yaml through the engine with ``model`` changes; (inputs, labels, correct) on its
    test split, ``correct`` (B, T) True where the answer scored at t was predicted."""
    from markovformer.training.config_files import shipped_config
    from markovformer.training.run_config import load_yaml, resolve_run_config
    from markovformer.training.runner import build_data, load_run, train

    values = load_yaml(shipped_config("mixers_mqar"))
    values["model"].update(model)
    values["output_dir"] = str(tmp_path / name)
    values["trainer"].update({"max_steps": 700, "eval_every": 700, "checkpoint_every": 700})
    train(resolve_run_config(values))
    config, trained, _ = load_run(tmp_path / name)
    bundle = build_data(config)
    inputs = torch.stack([e["input_ids"] for e in bundle.test])
    labels = torch.stack([e["labels"] for e in bundle.test])
    with torch.no_grad():
        predicted = trained.eval()(inputs).logits.argmax(-1)
    correct = torch.zeros_like(labels, dtype=torch.bool)
    correct[:, 1:] = predicted[:, :-1] == labels[:, 1:]
    return inputs, labels, correct


@pytest.mark.slow
def test_global_softmax_solves_mqar(tmp_path):
    """MQAR, T = 64, 4 pairs, trained through the engine from configs/mixers_mqar.yaml: >= 0.99 test accuracy."""
    _, labels, correct = _train_mqar(tmp_path, "global")
    assert correct[labels != -100].float().mean() >= 0.99


@pytest.mark.slow
def test_a_short_window_cannot_reach_far_pairs(tmp_path):
    """The same run with a sliding window of 2 keys in each of 2 layers: it reaches 4 positions back, and on queries
    whose value lies further back it is near chance (1/64)."""
    inputs, labels, correct = _train_mqar(tmp_path, "window", attention="softmax", scope="local", window=2)
    reach = 2 * 2  # layers x window
    beyond = torch.zeros_like(labels, dtype=torch.bool)
    for b, t in (labels != -100).nonzero().tolist():
        query_key = int(inputs[b, t - 1])
        value_position = 2 * inputs[b, :8:2].tolist().index(query_key) + 1
        beyond[b, t] = (t - 1) - value_position > reach  # the answering position is t - 1
    assert beyond.sum() > 500
    assert correct[beyond].float().mean() < 0.1
    assert correct[(labels != -100) & ~beyond].float().mean() > correct[beyond].float().mean()  # it did learn


def test_zoology_64_is_zoologys_t64_panel():
    """Zoology's figure 2 at T = 64 (Arora et al., 2023): 4 key-value pairs, vocabulary 8,192, two layers, widths 64
    and 128, the best of 4 learning rates spaced evenly in log between 1e-4 and 1e-2."""
    from markovformer.experiments.settings import configure

    settings = mixers.resolve_sizes(configure(mixers.MixersSettings(), {"sizes": "zoology-64"}, "mixers"))
    mixers.check_settings(settings)
    assert settings.tasks == ("mqar",) and settings.lengths == (64,) and settings.widths == (64, 128)
    assert settings.n_layers == 2 and settings.mqar_vocab == 8192 and zoo.mqar_pairs(64, settings) == 4
    assert settings.lrs == pytest.approx([1e-4, 10**-3.3333333, 10**-2.6666667, 1e-2], rel=1e-6)
    source = mixers.source_of("mqar", 64, settings)
    inputs, labels = source.examples(16, torch.Generator().manual_seed(0))
    assert inputs.shape == (16, 64) and int(inputs.max()) < 8192
    assert ((labels != -100).sum(dim=1) == 4).all()  # every pair's key is queried once


def test_answer_loss_is_the_causal_lm_loss():
    """The head applied at the labelled positions only gives the full model's loss and gradients."""
    inputs, labels = tasks.mqar_examples(6, 32, 4, 64, torch.Generator().manual_seed(3))
    section = zoo.kind_section("softmax", 16, 2, 2, 4, 8)
    model = mixers.MarkovianTransformerForCausalLM(mixers.MarkovianTransformerConfig(vocab_size=64, **section))
    full = model(inputs, labels=labels).loss
    full_grad = torch.autograd.grad(full, model.lm_head.weight)[0]
    sparse = mixers.answer_loss(model, inputs, labels)
    sparse_grad = torch.autograd.grad(sparse, model.lm_head.weight)[0]
    assert sparse.item() == pytest.approx(full.item(), rel=1e-5)
    torch.testing.assert_close(sparse_grad, full_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_zoology_64_quick_softmax_leaves_chance(tmp_path):
    """``mixers --quick --set sizes=zoology-64``: global softmax, d = 64, 1,000 steps of 64 on Zoology's T = 64 MQAR
    (vocabulary 8,192: an answer is one of 4,096 values, chance 1/4,096) is 40 times above chance. The full run's
    first 1,000 steps are the same (same seed, lr, batches, warm-up): its validation accuracy there was 0.030."""
    from markovformer.experiments import run_experiment

    run_experiment("mixers", tmp_path, quick=True, overrides={"sizes": "zoology-64"}, log=lambda line: None)
    (point,) = json.loads((tmp_path / "results.json").read_text())["points"]
    assert (point["kind"], point["width"], point["length"]) == ("softmax", 64, 64)
    assert point["test_accuracy"]["mean"] >= 40 / 4096


def test_a_report_from_the_stored_cells_reads_each_point_from_the_rates_and_seeds_it_has(tmp_path):
    """--from-cells on a grid with some cells gone: the points whose cells are all there are the full run's; a point
    missing a rate and a seed is chosen among what is stored and says so; nothing trains."""
    from markovformer.experiments import run_experiment

    overrides = {"tasks": ["mqar"], "kinds": ["softmax", "markov_local"], "widths": [32], "steps": 2,
                 "warmup_steps": 1, "val_examples": 8, "test_examples": 8, "lrs": [1e-3, 3e-3]}  # fmt: skip
    run_experiment("mixers", tmp_path, quick=True, seeds=(0, 1), overrides=overrides, log=lambda line: None)
    full = {p["kind"]: p for p in json.loads((tmp_path / "results.json").read_text())["points"]}
    cells = tmp_path / "cells"
    for path in [cells / "mqar_T=32_d=32_softmax_lr=0.001_seed=0.json", *cells.glob("*softmax*seed=1.json")]:
        path.unlink()  # a rate of the first seed and the second seed (trained at the first's best rate)
    kept = json.loads((cells / "mqar_T=32_d=32_softmax_lr=0.003_seed=0.json").read_text())["result"]
    before = sorted(path.name for path in cells.iterdir())
    messages = []
    report = run_experiment("mixers", tmp_path, quick=True, seeds=(0, 1), overrides=overrides, from_cells=True,
                            log=messages.append)  # fmt: skip
    assert sorted(path.name for path in cells.iterdir()) == before and not any("step" in m for m in messages)
    points = {p["kind"]: p for p in json.loads((tmp_path / "results.json").read_text())["points"]}
    assert points["markov_local"] == full["markov_local"]
    softmax = points["softmax"]
    assert softmax["lr"] == 3e-3 and softmax["val_by_lr"] == {"0.003": kept["val"]["accuracy"]}
    assert softmax["test_accuracy"]["values"] == [kept["test"]["accuracy"]]
    text = report.read_text()
    assert f"| {kept['test']['accuracy']:.3f} (1/2 lrs, 1/2 seeds) |" in text  # one seed: no spread
    assert "Written from the stored cells only" in text
    rate_rows = [line for line in text.splitlines() if line.startswith("| softmax, global |") and "—" in line]
    assert rate_rows == [f"| softmax, global | — | **{kept['test']['accuracy']:.3f}** |"]  # the table of every rate
    # the verdicts drawn from that point say so too (only the accuracy table did)
    partial = "(from a partial search: softmax at d=32 (1/2 lrs, 1/2 seeds))"
    assert any(line.startswith("- T = 32") and "softmax" in line and partial in line for line in text.splitlines())
    rows = ("| mqar | softmax, global | no", "| mqar | Markov, local | no")  # the solved summary's rows
    summary = [line for line in text.splitlines() if line.startswith(rows)]
    assert [partial in line for line in summary] == [True, False], summary  # softmax's row, the local layer's


def test_a_rate_that_diverges_is_stored_as_such_and_the_grid_goes_on(tmp_path):
    """Zoology's sweep tries rates that diverge (the split hybrid's 1e-2 did, at step 450 of 10,000): such a cell is
    stored as diverged, never chosen, shown as such, and the grid goes on to the other rates and kinds (it used to
    end the command, losing the rest of a run of hours); a second run reads it back instead of training it again."""
    from markovformer.experiments import run_experiment

    overrides = {"tasks": ["mqar"], "kinds": ["softmax", "markov_local"], "widths": [32], "steps": 3,
                 "warmup_steps": 1, "val_examples": 8, "test_examples": 8, "lrs": [1e-3, 1e30]}  # fmt: skip
    messages = []
    report = run_experiment("mixers", tmp_path, quick=True, seeds=(0, 1), overrides=overrides, log=messages.append)
    results = json.loads((tmp_path / "results.json").read_text())
    assert [(p["kind"], p["lr"], p["diverged_by_lr"].keys()) for p in results["points"]] == [
        ("softmax", 1e-3, {"1e+30"}), ("markov_local", 1e-3, {"1e+30"})]  # fmt: skip
    assert all(p["test_accuracy"]["n"] == 2 for p in results["points"])  # the second seed trained at 1e-3
    assert [(c["kind"], c["lr"], c["seed"]) for c in results["diverged"]] == [
        ("softmax", 1e30, 0),
        ("markov_local", 1e30, 0),
    ]
    assert all("the training loss is nan at step 2 (lr 1e+30)" in c["why"] for c in results["diverged"])
    text = report.read_text()
    assert "| softmax, global | **" in text and "| diverged |" in text  # the table of every rate
    assert "lrs)" not in text  # a diverged rate was tried: the search is whole, not partial
    messages.clear()
    run_experiment("mixers", tmp_path, quick=True, seeds=(0, 1), overrides=overrides, log=messages.append)
    assert sum("done earlier" in m for m in messages) == 6 and not any("step" in m for m in messages)
    assert json.loads((tmp_path / "results.json").read_text())["diverged"] == results["diverged"]


def test_progress_counts_the_cells_of_the_whole_grid(tmp_path, monkeypatch):
    """mixers announced no cell count: progress read "cell 26 KEY", without the N and the time left the README
    promises ("cell i/N KEY (about T left)"). N: every rate on the first seed, the chosen rate on the others."""

    def fake_cell(task, length, section, lr, seed, settings, log=None, kind=None):
        return {"val": {"accuracy": lr, "loss": 1.0}, "test": {"accuracy": 0.5, "loss": 1.0}, "seconds": 1.0,
                "gates": None, "val_curve": [[], []]}  # fmt: skip

    monkeypatch.setattr(mixers, "train_cell", fake_cell)
    monkeypatch.setattr(mixers, "write_report", lambda *args: None)
    lines = []
    overrides = {"tasks": ["mqar"], "kinds": ["softmax", "markov_global"], "lrs": [1e-3, 3e-3]}
    mixers.run(tmp_path, quick=True, seeds=(0, 1, 2), overrides=overrides, log=lines.append)
    total = 1 * 1 * 2 * 2 * (2 + 3 - 1)  # tasks x lengths x widths x kinds x (lrs + the other seeds)
    assert len(list((tmp_path / "cells").glob("*.json"))) == total
    progress = [line.split(" ")[1] for line in lines if line.startswith("cell ")]
    assert progress == [f"{index}/{total}" for index in range(1, total + 1)]

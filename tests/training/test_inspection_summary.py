"""`markovformer inspect`'s words on the run's numbers: the summary's loss, gap, likelihood and structure lines, the
floors and the curves' captions, the head labels, the lag convention's sentence, and the end-of-run console report."""

from __future__ import annotations

import pytest
import torch
from inspected_run import train_inspected_run

from markovformer.training import inspection
from markovformer.training.build import build_data
from markovformer.training.run_dir import load_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_inspected_run(tmp_path_factory.mktemp("inspect"))


def test_the_end_of_run_report_names_markov_layers_by_their_model_layer(capsys):
    """A softmax layer, then a Markov one: the strengths printed are model layer 1's (they were called layer 0,
    the index among Markov layers, where the report's figures say layer 1)."""
    from conftest import TINY_RUN

    from markovformer.training.build import build_model
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.run_report import report_results

    values = {**TINY_RUN, "model": {**TINY_RUN["model"], "n_layers": 2, "attention": ["softmax", "markov"]}}
    config = resolve_run_config(values)
    bundle = build_data(config)
    report_results({"val": {"loss": 1.0}, "reference": {}}, build_model(config, bundle.info), bundle)
    out = capsys.readouterr().out
    assert "layer 1 past: transition strength" in out and "layer 0 past" not in out


def test_a_layer_with_no_markov_head_reports_no_strengths(capsys):
    """hybrid_split with markov_head_ratio 0 keeps a frozen, unused Markov core: its strengths (never used by any
    head) were printed and drawn as layer 0's."""
    from conftest import TINY_RUN

    from markovformer.training.build import build_model
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.run_report import markov_layers, report_results

    attention = [{"kind": "hybrid_split", "markov_head_ratio": 0.0}, "markov"]
    config = resolve_run_config({**TINY_RUN, "model": {**TINY_RUN["model"], "n_layers": 2, "attention": attention}})
    bundle = build_data(config)
    model = build_model(config, bundle.info)
    assert markov_layers(model) == [1] and len(model.transition_strengths()) == 1
    report_results({"val": {"loss": 1.0}, "reference": {}}, model, bundle)
    out = capsys.readouterr().out
    assert "layer 1 past: transition strength" in out and "layer 0 past" not in out


def test_the_end_of_run_reports_mean_gate_is_over_real_tokens(capsys):
    """The gate of every real token is all lag 1, the padding token's all null: the mean printed was over padding
    too (lag 1 0.234, null 0.766 with 45 real tokens of 192; a review's case, rebuilt here)."""
    from markovformer.data.bundle import DataBundle
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
    from markovformer.training.run_report import report_results

    config = MarkovianTransformerConfig(vocab_size=6, d_model=8, n_layers=1, n_heads=1, max_order=2, position="none")
    model = MarkovianTransformerForCausalLM(config).eval()
    gate = model.markov_biases()[0].gate_networks["past"][0]
    with torch.no_grad():  # embedding dim 0 marks the padding token (id 0), dim 1 the others; they pick the slots
        model.model.embed.weight.zero_()
        model.model.embed.weight[0, 0], model.model.embed.weight[1:, 1] = 5.0, 5.0
        gate.weight.zero_(), gate.bias.zero_()
        gate.weight[0, 0, 2], gate.weight[0, 1, 0] = 10.0, 10.0  # padding -> the null slot, real tokens -> lag 1
    generator = torch.Generator().manual_seed(1)
    val = [{"input_ids": torch.randint(1, 6, (n,), generator=generator)} for n in (24, 3, 3, 3, 3, 3, 3, 3)]
    report_results({"val": {"loss": 1.0}, "reference": {}}, model, DataBundle(val, val, val, {"vocab_size": 6}))
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  head 0:"))
    assert row.split("|")[1].split() == ["1.000", "0.000", "0.000"]


@pytest.mark.parametrize("task, unit", [("causal_lm", "nats/token"), ("sequence_classification", "nats/sequence"),
                                        ("ctc", "nats/target symbol")])  # fmt: skip
def test_the_reports_loss_is_in_its_tasks_unit(trained, task, unit):
    """Every task's loss read "nats/token" in the report: a classifier's is per sequence, CTC's per target symbol."""
    import dataclasses

    config, model, run_dir = load_run(trained)
    config = dataclasses.replace(config, task=task, task_options=None)
    summary = inspection.run_summary(config, model, run_dir, {"val": {"loss": 1.5}}, {})
    assert summary[f"validation loss ({unit})"] == 1.5


def test_bleu_is_said_to_be_on_sacrebleus_0_to_100_scale(trained, tmp_path, kept_figures):
    """A translation run's table read "validation bleu 0.108313" beside "validation exact match 0" (a fraction), and
    its curves' BLEU axis read "bleu": 0.108 of 100 reads as 10.8 %. Both now say the scale."""
    from markovformer.plots import curves

    config, model, run_dir = load_run(trained)
    summary = inspection.run_summary(config, model, run_dir, {"val": {"loss": 1.5, "bleu": 0.108}}, {})
    assert summary["validation BLEU (sacrebleu, 0-100)"] == 0.108
    figures = kept_figures(curves)
    csv = tmp_path / "metrics.csv"
    csv.write_text("step,train/loss,val/loss,val/bleu\n1,2.0,,\n1,,1.9,0.108\n")
    curves.plot_training_curves(csv, tmp_path / "curves.png")
    assert [axis.get_ylabel() for axis in figures["curves.png"].axes] == ["loss (nats)", "BLEU (sacrebleu, 0-100)"]


def test_the_reports_names_of_an_n_gram_models_metrics_are_words(trained):
    """A Scan Markov run's table read "validation bits_per_character" and "validation loss_n2"."""
    config, model, run_dir = load_run(trained)
    summary = inspection.run_summary(config, model, run_dir, {"val": {"bits_per_character": 2.1, "loss_n2": 1.7,
                                                                      "macro_f1": 0.5}}, {})  # fmt: skip
    assert summary["validation bits per character"] == 2.1 and summary["validation macro f1"] == 0.5
    assert summary["validation loss at order n = 2 (nats/token)"] == 1.7


@pytest.mark.parametrize("loss, gap", [(1.5, "+0.3000 nats (+25.00%)"), (0.9, "-0.3000 nats (-25.00%)")])
def test_the_summarys_gap_is_the_validation_loss_minus_the_entropy_rate(trained, loss, gap):
    """The gap is how far the loss lies above the floor: loss - entropy rate, in nats and as a percentage of the rate
    (by hand, with rate 1.2: ±0.3 nats, ±25 %; negative only when the loss is below it)."""
    config, model, run_dir = load_run(trained)
    results = {"val": {"loss": loss}, "reference": {"entropy_rate": 1.2}}
    summary = inspection.run_summary(config, model, run_dir, results, {})
    assert summary["gap to the entropy rate"] == gap
    assert summary["entropy rate (nats/token): the lowest expected loss of any model"] == 1.2


def test_the_summary_and_the_floors_use_the_validation_documents_likelihood(trained):
    """The exact log-likelihood shown (and drawn, negated, as a floor) is the validation split's, not another's."""
    reference = {"entropy_rate": 1.0, "val_log_likelihood_per_token": -1.25, "test_log_likelihood_per_token": -1.75,
                 "train_log_likelihood_per_token": -1.5}  # fmt: skip
    config, model, run_dir = load_run(trained)
    summary = inspection.run_summary(config, model, run_dir, {"val": {"loss": 1.3}, "reference": reference}, {})
    assert summary["exact log-likelihood of the validation documents (per token)"] == -1.25
    assert inspection.reference_lines(reference)["exact NLL (validation)"] == 1.25


def test_a_structure_only_some_layers_have_names_those_layers():
    """A Markov layer then an RWKV layer (no scope, window, max_order or gate): the summary must not state the
    Markov layer's structure as the whole model's, but as layer 0's alone."""
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig

    config = MarkovianTransformerConfig(vocab_size=4, n_layers=2, attention=[{"kind": "markov", "max_order": 3},
                                                                             {"kind": "rwkv"}])  # fmt: skip
    structure = inspection.markov_structure(config)
    assert structure.startswith("layer 0: ") and "max_order 3" in structure
    assert "layer 1" not in structure and ";" not in structure


def test_a_split_hybrid_without_a_markov_head_states_no_markov_structure():
    """markov_head_ratio 0 builds no Markov head: the report stated the unused Markov core's 'scope local, window 3,
    max_order 3, gate linear' as the model's; a layer with one Markov head keeps it. (A ratio that rounds to no head,
    0.4 of 2, is refused by the config, and so is a Markov option set for ratio 0.)"""
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig

    entries = [{"kind": "hybrid_split", "markov_head_ratio": 0.0},
               {"kind": "hybrid_split", "markov_head_ratio": 0.5, "max_order": 3}]  # fmt: skip
    config = MarkovianTransformerConfig(vocab_size=4, n_layers=2, n_heads=2, attention=entries)
    assert inspection.markov_structure(config) == "layer 1: scope local, window 3, max_order 3, gate linear"
    flat = MarkovianTransformerConfig(vocab_size=4, n_layers=2, n_heads=2, attention="hybrid_split",
                                      markov_head_ratio=0.0)  # fmt: skip
    assert inspection.markov_structure(flat) == ""


@pytest.mark.parametrize("exact", [float("-inf"), float("nan")])
def test_a_non_finite_exact_likelihood_draws_no_floor(exact):
    """The floors are drawn on the loss axis: a non-finite exact log-likelihood (a source whose documents have
    none) draws no line, the others stay."""
    lines = inspection.reference_lines({"entropy_rate": 1.1, "oracle_val_loss": 1.2,
                                        "val_log_likelihood_per_token": exact})  # fmt: skip
    assert lines == {"entropy rate": 1.1, "true chain (validation)": 1.2}


def test_hybrid_split_labels_name_exactly_the_markov_heads_markov():
    """hybrid_split's first floor(H · ratio) heads are Markov, the rest random features: by hand 2 of 4 at 0.5,
    1 of 4 at 0.25, 6 of 8 at 0.75."""
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig

    for heads, ratio, markov in ((4, 0.5, 2), (4, 0.25, 1), (8, 0.75, 6)):
        config = MarkovianTransformerConfig(vocab_size=4, n_layers=1, n_heads=heads, d_model=16, attention=[
            {"kind": "hybrid_split", "markov_head_ratio": ratio, "max_order": 2}])  # fmt: skip
        labels = inspection.head_labels(config, [torch.zeros(1, heads, 3, 3)])[0]
        assert [label.endswith("(Markov)") for label in labels] == [True] * markov + [False] * (heads - markov)


@pytest.mark.parametrize("far", [2, 3, 5])
def test_a_chain_with_one_biased_lag_names_that_lag(far):
    """Data lag l is attention lag l - 1 (lag_report's convention): a chain on data lags 1 and ``far`` depends on
    x_t and x_(t-(far-1)), and the one lag a bias can pick is far - 1; data lag 1 alone needs no bias."""
    from markovformer.training.lag_report import describe_chain

    text = describe_chain([1, far])
    assert f"x_t, x_(t\u2212{far - 1})" in text
    assert f"attention lags 0, {far - 1};" in text
    assert text.endswith(f"lag {far - 1} is the one a Markov bias can pick")
    assert describe_chain([1]).endswith("attention lags 0; no Markov bias is needed")


def test_a_vmt_runs_curves_caption_and_summary_name_the_objective_and_the_elbo(trained, tmp_path, kept_figures):
    """The VMT's train/loss is its training objective (with the auxiliary terms), its val/loss the -ELBO: drawn in
    one 'loss' panel captioned 'train and validation', they read as a 2.5x train-validation gap."""
    import dataclasses

    from markovformer.plots import curves
    from markovformer.training.tasks import TASKS

    vmt = TASKS["vmt"]
    config, model, run_dir = load_run(trained)
    summary = inspection.run_summary(dataclasses.replace(config, task="vmt", task_options=None), model, run_dir,
                                     {"val": {"loss": 3.68}}, {})  # fmt: skip
    assert summary["validation -ELBO/token (val/loss, nats)"] == 3.68 and "validation loss (nats/token)" not in summary
    # the importance-weighted bound tightens with K: a value without its K read as "the" bound (K = 10 vs 1000 on
    # the walk-through's HMM run: -2.1706 vs -2.1502)
    summary = inspection.run_summary(dataclasses.replace(config, task="vmt", task_options=None), model, run_dir,
                                     {"val": {"loss": 3.68, "iw_bound": -3.5}, "iw_samples": 10}, {})  # fmt: skip
    assert summary["validation importance-weighted bound, K = 10 (val/iw_bound, nats/token)"] == -3.5
    assert "validation iw bound" not in summary
    caption = inspection.curves_caption(vmt, {"exact NLL (validation)": 2.0})
    assert "train/loss is the train objective/token" in caption and "val/loss the -ELBO/token" in caption
    assert "train and validation" not in caption and "no train-validation gap" in caption
    csv = tmp_path / "metrics.csv"
    csv.write_text("epoch,step,train/loss,val/loss\n0,10,5.6,\n0,20,5.59,4.08\n")
    figures = kept_figures(curves)
    curves.plot_training_curves(csv, tmp_path / "curves.png", curve_labels=inspection.loss_curve_names(vmt),
                                loss_title="the title")  # fmt: skip
    loss = figures["curves.png"].axes[0]
    legend = [text.get_text() for text in loss.get_legend().get_texts()]
    assert legend == ["train/loss: train objective/token", "val/loss: -ELBO/token"] and loss.get_title() == "the title"
    assert inspection.loss_curve_names(TASKS["causal_lm"]) == {}  # one loss: the columns name themselves


def test_a_run_without_floors_gets_a_caption_without_them():
    from markovformer.training.tasks import TASKS

    assert "floors" not in inspection.curves_caption(TASKS["causal_lm"], {})
    assert "floors as black lines" in inspection.curves_caption(TASKS["causal_lm"], {"entropy rate": 1.0})


def test_the_curves_caption_names_the_rescalings_of_the_loss_the_run_logs(tmp_path):
    """A classifier logs no bits per token or perplexity: its caption said they were in the table; they were not."""
    from markovformer.training.tasks import TASKS

    csv = tmp_path / "metrics.csv"
    runs = {"sequence_classification": "step,train/loss,val/accuracy,val/auroc,val/loss,val/macro_f1",
            "causal_lm": "step,train/loss,val/bits_per_character,val/bits_per_token,val/loss,val/perplexity"}
    for task, header in runs.items():
        csv.write_text(header + "\n1,0.5,,,,\n")
        logged = [column.split("/")[1] for column in header.split(",") if column.startswith("val/")]
        caption = inspection.curves_caption(TASKS[task], {}, 0.0, inspection.rescaled_losses(csv))
        for name in ("bits_per_token", "bits_per_character", "perplexity"):
            assert (name.replace("_", " ") in caption) == (name in logged), (task, name, caption)


@pytest.mark.parametrize("attention, null", [
    (["markov", "markov"], " and the null slot"),
    ([{"kind": "markov", "gate_null": False}, {"kind": "markov", "gate_null": False}], ""),
    ([{"kind": "markov", "gate_null": False}, "markov"], " and, in layers with one, the null slot"),
    ([{"kind": "markov", "gate_null": False}, {"kind": "markov", "gate": "none"}], ""),
])  # fmt: skip
def test_the_gates_console_header_and_caption_name_a_null_slot_only_where_the_gates_have_one(capsys, attention,
                                                                                              null):  # fmt: skip
    """With gate_null: false the gates have K slots and no null slot, yet the end-of-run header read "the mean gate α
    per lag and the null slot" above K columns, and the figure's caption "the probability of each lag and the null
    slot"."""
    from markovformer.data.bundle import DataBundle
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
    from markovformer.training.run_report import report_results

    config = MarkovianTransformerConfig(vocab_size=6, d_model=8, n_layers=2, n_heads=1, max_order=2,
                                        attention=attention)  # fmt: skip
    model = MarkovianTransformerForCausalLM(config).eval()
    val = [{"input_ids": torch.randint(0, 6, (8,), generator=torch.Generator().manual_seed(n))} for n in range(2)]
    report_results({"val": {"loss": 1.0}, "reference": {}}, model, DataBundle(val, val, val, {"vocab_size": 6}))
    lines = capsys.readouterr().out.splitlines()
    for layer, bias in enumerate(model.markov_biases()):
        header = next(line for line in lines if line.startswith(f"layer {layer} past"))
        columns = next(line for line in lines[lines.index(header):] if line.strip().startswith("lag"))
        assert ("null slot" in header) == bias.gate_null == ("null" in columns)
    caption = inspection.order_gates_caption(model, 8, None)
    assert caption.startswith(f"Order gates over the first 8 tokens of a validation sequence: per head, the "
                              f"probability of each lag{null} (")  # fmt: skip


def test_a_fine_tuning_runs_report_says_which_weights_it_started_from(trained, tmp_path):
    """The report showed config.yaml's init_from, a path whose weights may since have changed (an extended run);
    its summary now names the source, the step and the digest of the weights taken (environment.json's record), and
    a run that started fresh says nothing of it."""
    import json

    from conftest import run_in_process

    tuned = run_in_process("train", str(trained.parent / "tiny.yaml"), f"output_dir={tmp_path / 'tuned'}",
                           f"init_from={trained}", "trainer.max_steps=1", cwd=tmp_path)  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    record = json.loads((tmp_path / "tuned" / "environment.json").read_text())["init_from"]
    config, model, run_dir = load_run(tmp_path / "tuned")
    summary = inspection.run_summary(config, model, run_dir, {}, {})
    assert summary["started from"] == f"{trained.resolve()} at step 2, tensors sha256 {record['tensors_sha256']}"
    config, model, run_dir = load_run(trained)
    assert "started from" not in inspection.run_summary(config, model, run_dir, {}, {})

"""`markovformer inspect`: the attention-by-lag profile reads bounded prefixes of the validation sequences (the full
computation when they are short, the first rows of the full maps when they are cut), and the report folder is
replaced whole, so a failed inspect leaves the previous report as it was. The summary's gap, likelihood and
structure lines, the floors, the head labels and the lag convention's sentence say what the run's numbers are."""

from __future__ import annotations

import shutil

import pytest
import torch
import yaml

from markovformer.cli.main import main
from markovformer.data.collate import collate
from markovformer.plots import saving
from markovformer.training import inspection
from markovformer.training import lag_profiles as lag_profiles_module
from markovformer.training.build import build_data
from markovformer.training.inspection import write_inspection_report
from markovformer.training.lag_profiles import attention_by_lag, lag_profiles
from markovformer.training.run_dir import load_run

REPORT = {"attention.png", "attention_by_lag.png", "curves.png", "index.html", "order_gates.png",
          "transition_strengths.png"}  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny causal LM (1 layer, 2 heads, window 2) trained for 2 steps on sequences of 24 tokens."""
    from conftest import TINY_RUN

    folder = tmp_path_factory.mktemp("inspect")
    trainer = {**TINY_RUN["trainer"], "max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
               "log_every": 1}
    config = folder / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer, "output_dir": str(folder / "run")}))
    assert main(["train", str(config)]) == 0
    return folder / "run"


@pytest.fixture
def run(trained, tmp_path):
    """A private copy of the trained run."""
    return shutil.copytree(trained, tmp_path / "run")


def _model_and_validation(run_dir):
    config, model, _ = load_run(run_dir)
    return model.eval(), build_data(config).val


def _full_maps(model, validation) -> torch.Tensor:
    """Layer 0's (32, H, T, T) attention maps of the first 32 whole sequences: what inspect used to compute."""
    with torch.no_grad():
        return model(input_ids=collate(validation[:32])["input_ids"], return_weights=True).attentions[0]


def test_the_profile_of_short_sequences_is_the_full_computation(trained):
    model, validation = _model_and_validation(trained)
    profile = lag_profiles(model, validation, [0])
    assert (profile.max_lag, profile.length, profile.sequences, profile.cut) == (3, 24, 32, False)
    torch.testing.assert_close(profile.profiles[0], attention_by_lag(_full_maps(model, validation), 3))


class IndexOnly:
    """A split as a token store gives it: examples by integer index only (slicing it raises, as StoreWindows)."""

    def __init__(self, examples: list) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int):
        return self.examples[int(index)]


def test_the_profile_reads_a_split_by_index_only(trained):
    """A text run's validation split cannot be sliced: inspect crashed on every text run with a TypeError."""
    model, validation = _model_and_validation(trained)
    profile = lag_profiles(model, IndexOnly(validation), [0])
    torch.testing.assert_close(profile.profiles[0], lag_profiles(model, validation, [0]).profiles[0])


def test_long_sequences_are_read_in_bounded_prefixes_whose_maps_are_the_full_maps_first_rows(trained, monkeypatch):
    """With 10 positions read, 4 sequences per pass, no map the model hands out is larger than (4, H, 10, 10), and
    the causal model's profile over queries 3..9 is that of the whole sequences' maps."""
    monkeypatch.setattr(lag_profiles_module, "PROFILE_LENGTH", 10)
    monkeypatch.setattr(lag_profiles_module, "PROFILE_BATCH", 4)
    model, validation = _model_and_validation(trained)
    full = _full_maps(model, validation)
    shapes = []
    forward = model.forward

    def recording_forward(*args, **kwargs):
        output = forward(*args, **kwargs)
        shapes.extend(tuple(weights.shape) for weights in output.attentions)
        return output

    monkeypatch.setattr(model, "forward", recording_forward)
    profile = lag_profiles(model, validation, [0])
    assert shapes == [(4, 2, 10, 10)] * 8
    assert (profile.max_lag, profile.length, profile.sequences, profile.cut) == (3, 10, 32, True)
    torch.testing.assert_close(profile.profiles[0], attention_by_lag(full[:, :, :10, :10], 3))
    assert not torch.allclose(profile.profiles[0], attention_by_lag(full, 3))  # the cut is seen


def test_a_report_that_fails_midway_leaves_the_old_one_whole_and_no_staging_folder(run, monkeypatch):
    report = run / "report"
    report.mkdir()
    for name in [*REPORT, "gone.png"]:  # contents no new report can have, so that any file rewritten would show
        (report / name).write_bytes(b"old " + name.encode())
    old = {path.name: path.read_bytes() for path in report.iterdir()}
    (run / ".report.staging-0123").mkdir()  # left by an inspect killed while writing
    writes = []
    atomic_write = saving.atomic_write

    def failing_write(path, write):
        writes.append(path.name)
        if len(writes) == 3:
            raise OSError("No space left on device")
        return atomic_write(path, write)

    monkeypatch.setattr(saving, "atomic_write", failing_write)
    with pytest.raises(OSError, match="No space left"):
        write_inspection_report(run, layers=[0])
    assert writes == ["curves.png", "transition_strengths.png", "order_gates.png"]
    assert {path.name: path.read_bytes() for path in report.iterdir()} == old
    assert sorted(path.name for path in run.iterdir() if path.name.startswith(".report")) == []

    monkeypatch.undo()
    index = write_inspection_report(run, layers=[0])
    assert {path.name for path in report.iterdir()} == REPORT  # the whole folder is new: gone.png is gone
    assert all(path.read_bytes() != old[path.name] for path in report.iterdir())
    page = index.read_text()
    assert "over queries 3..23 of the first 32 validation sequences (" in page  # what the profile read
    assert "Order gates over the first 24 tokens" in page
    assert sorted(path.name for path in run.iterdir() if path.name.startswith(".report")) == []


def test_inspect_refuses_to_replace_a_folder_holding_other_files(run, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="mine holds notes.txt, which is not a figure or page of a report"):
        write_inspection_report(run, out_dir=mine)
    assert [path.name for path in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep me"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mine", "run"]  # no staging folder beside it



def test_inspect_refuses_a_folder_of_pictures_that_is_no_report(run, tmp_path):
    """--out ~/plots, a folder of the user's own PNGs, was replaced whole: its pictures deleted, as figures of an old
    report. A folder is a report when it holds the report's page, index.html."""
    mine = tmp_path / "plots"
    mine.mkdir()
    (mine / "holiday.png").write_bytes(b"\x89PNG keep me")
    with pytest.raises(ValueError, match="plots holds no index.html: it is not a report folder, and writing the "
                                         "report there would delete holiday.png"):
        write_inspection_report(run, out_dir=mine)
    assert [path.name for path in mine.iterdir()] == ["holiday.png"]

def test_a_checkpoints_report_shows_no_final_metrics_as_its_own(run, tmp_path):
    """The final validation numbers (metrics.json) belong to the finished run's model: a report of one of its
    checkpoints showed them beside the checkpoint's figures (the review's case: 2.188 for step 10 of a 30-step run,
    whose step 10 scores 2.557). It names the weights it shows instead."""
    checkpoint = sorted((run / "checkpoints").glob("step-*.ckpt"))[0]
    final = write_inspection_report(run, out_dir=tmp_path / "final").read_text()
    partial = write_inspection_report(checkpoint, out_dir=tmp_path / "partial").read_text()
    assert "validation loss" in final and "the final model, step 2" in final
    assert "validation loss" not in partial and f"checkpoints/{checkpoint.name} at step 2" in partial
    assert "entropy rate" in partial  # the data's reference stays: it is no model's number


def test_a_checkpoints_report_goes_beside_the_runs_own(run, tmp_path):
    """inspect RUN/checkpoints/step-N.ckpt replaced the run's report/ (the final model's figures) with the step's."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    own = write_inspection_report(copy)
    page = own.read_text()
    checkpoint = sorted((copy / "checkpoints").glob("step-*.ckpt"))[0]
    index = write_inspection_report(checkpoint)
    assert index.parent == copy / f"report-{checkpoint.stem}" and own.read_text() == page


def test_an_unfinished_runs_report_says_it_is_unfinished(run, tmp_path):
    """A killed run's report showed its last checkpoint's figures without saying the run had not finished."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    (copy / "finished.json").unlink()
    page = write_inspection_report(copy).read_text()
    assert f"the run is unfinished: still training, or stopped (markovformer train --resume {copy} " in page
    assert "the run is unfinished" not in write_inspection_report(run, out_dir=tmp_path / "finished").read_text()



def test_a_report_without_curves_says_why(trained, run, tmp_path):
    """A run stopped before its first log row (trainer.log_every=100, checkpoint_every=2, killed at step 4) has
    checkpoints but no logs/metrics.csv: its report had every figure but the training curves, and no word on them."""
    shutil.rmtree(run / "logs")
    (run / "finished.json").unlink()
    page = write_inspection_report(run).read_text()
    assert not (run / "report" / "curves.png").exists()
    assert ("<td>training curves</td><td>none yet: no row in logs/metrics.csv (it takes a training row every N "
            "steps, N = min(trainer.log_every, 50) = 1, and one at each validation)</td>") in page
    assert "<td>training curves</td>" not in write_inspection_report(trained, out_dir=tmp_path / "whole").read_text()


def test_a_report_of_the_current_folder_is_titled_by_its_name(run, monkeypatch):
    """`markovformer inspect .` inside a run titled its page 'markovformer run ' (the name of '.' is empty)."""
    monkeypatch.chdir(run)
    page = write_inspection_report(".").read_text()
    assert "<title>markovformer run run</title>" in page and "<h1>markovformer run run</h1>" in page


def test_a_checkpoint_named_from_inside_its_folder_is_read_with_its_run(run, monkeypatch):
    """`markovformer inspect step-000002.ckpt` inside RUN/checkpoints/ was refused, 'not a checkpoint of a run
    directory (no config.yaml)': the run was looked for two folders up from the name as typed, '.' and '.' again,
    not from the file. (eval and generate read a checkpoint the same way.)"""
    checkpoint = sorted((run / "checkpoints").glob("step-*.ckpt"))[0]
    monkeypatch.chdir(run / "checkpoints")
    index = write_inspection_report(checkpoint.name)
    assert index.resolve() == (run / f"report-{checkpoint.stem}" / "index.html").resolve()
    assert f"checkpoints/{checkpoint.name} at step 2" in index.read_text()


def test_the_curves_of_earlier_weights_say_where_those_weights_stand(trained, run, tmp_path):
    """A killed run's report shows its last checkpoint's weights under curves logged past them (last.ckpt of step
    12 under a log to step 13), and a checkpoint's report a finished run's whole log: nothing told them apart."""
    (run / "finished.json").unlink()
    log = run / "logs" / "metrics.csv"
    columns = log.read_text().splitlines()[0].split(",")
    row = {"step": "3", "train/loss": "2.5"}  # a step logged after the last checkpoint, step 2
    log.write_text(log.read_text() + ",".join(row.get(column, "") for column in columns) + "\n")
    page = write_inspection_report(run).read_text()
    assert "; the log runs on to step 3, past step 2, whose weights the figures show" in page
    assert "the log runs on" not in write_inspection_report(trained, out_dir=tmp_path / "whole").read_text()


def test_a_model_without_attention_figures_says_so(tmp_path):
    """A Scan Markov run's report (a MAT's, a VMT's alike) held the training curves alone, under a help that promises
    'curves, strengths, gates, attention', with no word on the rest."""
    text = "".join(f"{word} " for word in ("to be or not that is the question " * 60).split())
    (tmp_path / "corpus.txt").write_text(text)
    run = {"task": "causal_lm", "model_type": "scan_markov", "output_dir": str(tmp_path / "run"),
           "model": {"d_model": 16, "ffn_mult": 2, "max_positions": 5, "order": 4},
           "data": {"source": "text", "path": str(tmp_path / "corpus.txt"), "seq_len": 16, "overlap": 4},
           "trainer": {"max_steps": 1, "batch_size": 4, "warmup_steps": 1, "eval_every": 1, "checkpoint_every": 1,
                       "log_every": 1, "eval_batch_size": 4}}  # fmt: skip
    (tmp_path / "scan.yaml").write_text(yaml.safe_dump(run))
    assert main(["train", str(tmp_path / "scan.yaml")]) == 0
    page = write_inspection_report(tmp_path / "run").read_text()
    assert sorted(path.name for path in (tmp_path / "run" / "report").iterdir()) == ["curves.png", "index.html"]
    assert ("<td>order gates and attention figures</td><td>none: ScanMarkovForCausalLM hands out no attention "
            "weights or gates</td>") in page

def test_a_run_given_a_relative_path_is_inspected_from_another_working_folder(tmp_path, monkeypatch):
    """path: corpus.txt, trained in a/: ``inspect a/run`` from the folder above drew the figures of the file data.json
    recorded, as ``eval`` scores it; it refused the run ('data.path='corpus.txt': no such file')."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "corpus.txt").write_text("".join(f"{w} " for w in ("to be or not that is the " * 60).split()))
    run = {"task": "causal_lm", "output_dir": "run", "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
           "data": {"source": "text", "path": "corpus.txt", "seq_len": 16, "cache_dir": str(tmp_path / "cache")},
           "trainer": {"max_steps": 1, "batch_size": 4, "warmup_steps": 1, "eval_every": 1, "checkpoint_every": 1,
                       "log_every": 1, "eval_batch_size": 4}}  # fmt: skip
    (tmp_path / "a" / "run.yaml").write_text(yaml.safe_dump(run))
    monkeypatch.chdir(tmp_path / "a")
    assert main(["train", "run.yaml"]) == 0
    inside = write_inspection_report("run", out_dir=tmp_path / "inside")
    monkeypatch.chdir(tmp_path)
    outside = write_inspection_report("a/run", out_dir=tmp_path / "outside")
    assert sorted(path.name for path in outside.parent.iterdir()) == sorted(REPORT)
    for name in ("attention.png", "order_gates.png"):  # drawn from the first validation example: the same text
        assert (outside.parent / name).read_bytes() == (inside.parent / name).read_bytes()


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
    assert summary["entropy rate (nats/token): the lowest loss any model can reach"] == 1.2


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
    0.4 of 2, is refused by the config.)"""
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig

    entries = [{"kind": "hybrid_split", "markov_head_ratio": ratio, "max_order": 3} for ratio in (0.0, 0.5)]
    config = MarkovianTransformerConfig(vocab_size=4, n_layers=2, n_heads=2, attention=entries)
    assert inspection.markov_structure(config) == "layer 1: scope local, window 3, max_order 3, gate linear"
    flat = MarkovianTransformerConfig(vocab_size=4, n_layers=2, n_heads=2, attention="hybrid_split",
                                      markov_head_ratio=0.0, max_order=3)  # fmt: skip
    assert inspection.markov_structure(flat) == ""


@pytest.mark.parametrize("exact", [float("-inf"), float("nan")])
def test_a_non_finite_exact_likelihood_draws_no_floor(exact):
    """The floors are drawn on the loss axis: a non-finite exact log-likelihood (a source whose documents have
    none) draws no line, the others stay."""
    lines = inspection.reference_lines({"entropy_rate": 1.1, "oracle_val_loss": 1.2,
                                        "val_log_likelihood_per_token": exact})  # fmt: skip
    assert lines == {"entropy rate": 1.1, "true chain (validation)": 1.2}


@pytest.mark.parametrize("layer", [-1, 1])
def test_inspect_refuses_a_layer_index_outside_the_model(trained, tmp_path, layer):
    """--layers names model layers 0..n-1; a negative index (Python's from-the-end) is not one and is refused by
    name, like one past the end, and no report is written."""
    with pytest.raises(ValueError, match=f"--layers {layer} is not a layer of this model \\(it has 1\\)"):
        write_inspection_report(trained, layers=[layer], out_dir=tmp_path / "report")
    assert not (tmp_path / "report").exists()



def test_a_layer_named_twice_is_drawn_once(trained, tmp_path, kept_figures):
    """--layers 0 0 drew layer 0's maps twice, one row under the other, captioned 'layers [0, 0]' (the profile, a
    dict by layer, drew it once)."""
    from markovformer.plots import markov

    figures = kept_figures(markov)
    page = write_inspection_report(trained, layers=[0, 0], out_dir=tmp_path / "report").read_text()
    heads = load_run(trained)[1].config.n_heads
    assert "Attention probabilities of layers [0] on the same" in page
    assert [axis.get_title() for axis in figures["attention.png"].axes if axis.get_images()] == [
        f"layer 0, head {head}" for head in range(heads)]

def test_a_layer_without_attention_maps_is_passed_by_and_refused_by_name(tmp_path):
    """A kind that mixes without a T x T map (scan, S4D, Hyena, ...) hands out no weights: inspect of a run with one
    such layer failed whole ("random-feature heads have no T x T map", for a scan). By default it now draws the
    layers that have maps (the profile too), and ``--layers`` naming the other is refused by name."""
    from conftest import TINY_RUN

    trainer = {**TINY_RUN["trainer"], "max_steps": 1, "warmup_steps": 1, "eval_every": 1, "checkpoint_every": 1}
    model = {**TINY_RUN["model"], "n_layers": 2, "attention": ["scan", "markov"]}
    config = tmp_path / "mixed.yaml"
    run = {**TINY_RUN, "model": model, "trainer": trainer, "output_dir": str(tmp_path / "run")}
    config.write_text(yaml.safe_dump(run))
    assert main(["train", str(config)]) == 0
    page = write_inspection_report(tmp_path / "run").read_text()
    assert "Attention probabilities of layers [1] on the same 24 tokens" in page
    assert "over queries 3..23 of the first 32 validation sequences" in page  # layer 1's profile: its window 2 + 1
    refused = r"--layers 0: that layer \(scan\) has no attention map; the layers with one: \[1\]"
    with pytest.raises(ValueError, match=refused):
        write_inspection_report(tmp_path / "run", layers=[0], out_dir=tmp_path / "report")
    assert not (tmp_path / "report").exists()


def test_a_global_position_bias_layers_profile_and_lag_convention_say_what_it_reads(tmp_path):
    """A T5-bias layer has neither window nor max_order: its profile reads lags 0..GLOBAL_PROFILE_REACH, which the
    caption did not name, and its lag 0 does get a bias (T5's bucket 0), where the convention said 'has no bias'."""
    from conftest import TINY_RUN

    trainer = {**TINY_RUN["trainer"], "max_steps": 1, "warmup_steps": 1, "eval_every": 1, "checkpoint_every": 1}
    model = {"d_model": 16, "n_layers": 1, "n_heads": 2, "attention": "t5_bias", "position": "none"}
    run = {**TINY_RUN, "model": model, "trainer": trainer, "output_dir": str(tmp_path / "run")}
    (tmp_path / "t5.yaml").write_text(yaml.safe_dump(run))
    assert main(["train", str(tmp_path / "t5.yaml")]) == 0
    page = write_inspection_report(tmp_path / "run").read_text()
    reach = lag_profiles_module.GLOBAL_PROFILE_REACH
    assert f"without a window, else {reach}): lags 0..{reach}, over queries {reach}..23 of the first 32" in page
    assert "has no bias" not in page and "gets no Markov bias" in page


def test_hybrid_split_labels_name_exactly_the_markov_heads_markov():
    """hybrid_split's first floor(H · ratio) heads are Markov, the rest random features: by hand 2 of 4 at 0.5,
    1 of 4 at 0.25, 6 of 8 at 0.75."""
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig

    for heads, ratio, markov in ((4, 0.5, 2), (4, 0.25, 1), (8, 0.75, 6)):
        config = MarkovianTransformerConfig(vocab_size=4, n_layers=1, n_heads=heads, d_model=16, attention=[
            {"kind": "hybrid_split", "markov_head_ratio": ratio, "max_order": 2}])  # fmt: skip
        labels = inspection.head_labels(config, [torch.zeros(1, heads, 3, 3)])[0]
        assert [label.endswith("(Markov)") for label in labels] == [True] * markov + [False] * (heads - markov)


def test_the_profile_says_cut_only_for_sequences_longer_than_it_reads(trained, monkeypatch):
    """``cut``: some sequence was longer than PROFILE_LENGTH; the validation sequences of 24 tokens are read whole
    at PROFILE_LENGTH 24 and cut at 23."""
    model, validation = _model_and_validation(trained)
    monkeypatch.setattr(lag_profiles_module, "PROFILE_LENGTH", 24)
    assert lag_profiles(model, validation, [0]).cut is False
    monkeypatch.setattr(lag_profiles_module, "PROFILE_LENGTH", 23)
    assert lag_profiles(model, validation, [0]).cut is True


def test_attention_by_lag_needs_a_query_with_every_lag():
    """Queries t >= max_lag have every lag 0..max_lag: T = max_lag + 1 gives one such query (its row, read by lag);
    T = max_lag gives none and is refused, never an all-zero profile."""
    max_lag = 3
    weights = torch.rand(2, 2, max_lag + 1, max_lag + 1, generator=torch.Generator().manual_seed(0))
    expected = weights[:, :, max_lag, :].flip(-1).mean(0)  # the last query's keys t, t-1, ..., 0
    torch.testing.assert_close(attention_by_lag(weights, max_lag), expected)
    with pytest.raises(ValueError, match="no query with all lags"):
        attention_by_lag(weights[:, :, :max_lag, :max_lag], max_lag)


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


def _cls_classifier():
    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForSequenceClassification

    config = MarkovianTransformerConfig(vocab_size=6, d_model=8, n_layers=1, n_heads=2, max_order=2, causal=False,
                                        pooling="cls", num_labels=2)  # fmt: skip
    torch.manual_seed(0)
    return MarkovianTransformerForSequenceClassification(config).eval()


def test_the_lag_profile_of_a_cls_pooled_classifier_is_its_sequences_read_alone():
    """pooling='cls' puts a [CLS] vector before each row: the maps cover T + 1 positions, which the batch's (B, T)
    mask did not (inspect failed). Padded together, the profile is each sequence's, read alone, summed."""
    from markovformer.training.lag_profiles import _lag_sums

    model = _cls_classifier()
    generator = torch.Generator().manual_seed(2)
    validation = [{"input_ids": torch.randint(1, 6, (n,), generator=generator), "labels": torch.tensor(0)}
                  for n in (11, 7, 9)]  # fmt: skip
    profile = lag_profiles(model, validation, [0])
    last_lag = profile.profiles[0].shape[1] - 1
    total = count = 0
    for example in validation:
        with torch.no_grad():
            maps = model(example["input_ids"][None], return_weights=True).attentions[0]
        summed, queries = _lag_sums(maps, last_lag, None, first_query=profile.max_lag, ahead=profile.max_lag)
        total, count = total + summed, count + queries
    torch.testing.assert_close(profile.profiles[0], total / count)


def test_inspect_labels_a_cls_pooled_classifiers_gates_with_its_cls_vector(tmp_path, monkeypatch):
    """The gates figure of a pooling='cls' run was refused ('17 tokens given for a sequence of length 18'): its
    first column is the [CLS] vector's, then the example's tokens."""
    generator = torch.Generator().manual_seed(0)
    records = ["".join("ACGT"[int(i)] for i in torch.randint(0, 4, (n,), generator=generator))
               for n in (5, 9, 7, 12, 6, 8, 10, 11, 4, 9)]  # fmt: skip
    (tmp_path / "seqs.fa").write_text("".join(f">r{i}\n{s}\n" for i, s in enumerate(records)))
    (tmp_path / "labels.tsv").write_text("".join(f"r{i}\t{'AB'[i % 2]}\n" for i in range(len(records))))
    run = {"task": "sequence_classification",
           "model": {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2, "causal": False, "pooling": "cls"},
           "data": {"source": "fasta", "path": str(tmp_path / "seqs.fa"), "labels": str(tmp_path / "labels.tsv"),
                    "fractions": [0.6, 0.2, 0.2]},
           "trainer": {"max_steps": 1, "batch_size": 4, "eval_every": 1, "checkpoint_every": 1, "log_every": 1},
           "output_dir": str(tmp_path / "run")}  # fmt: skip
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    assert main(["train", str(tmp_path / "run.yaml")]) == 0
    drawn = {}

    def keep(gates, tokens, out, **options):
        drawn.update(gates=gates, tokens=tokens)
        out.write_bytes(b"")
        return out

    monkeypatch.setattr(inspection, "plot_order_gates", keep)
    write_inspection_report(tmp_path / "run", out_dir=tmp_path / "report")
    config, _, run_dir = load_run(tmp_path / "run")
    first = build_data(config, run_dir).val[0]["input_ids"].tolist()
    assert drawn["tokens"] == ["[CLS]", *inspection._tokens(first, run_dir)]
    assert drawn["gates"][0]["past"].shape[2] == len(first) + 1

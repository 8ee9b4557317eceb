"""`markovformer inspect`'s report folder: it is replaced whole, so a failed inspect leaves the previous report as it
was, and a folder that is no report is refused; a checkpoint's report goes beside the run's and names its weights;
the page says what it lacks and why (curves, attention figures, an unfinished run); --layers is checked by name."""

from __future__ import annotations

import shutil

import pytest
import torch
import yaml
from inspected_run import train_inspected_run

from markovformer.cli.main import main
from markovformer.plots import saving
from markovformer.training import inspection
from markovformer.training import lag_profiles as lag_profiles_module
from markovformer.training.build import build_data
from markovformer.training.inspection import write_inspection_report
from markovformer.training.run_dir import load_run

REPORT = {"attention.png", "attention_by_lag.png", "curves.png", "index.html", "order_gates.png",
          "transition_strengths.png"}  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_inspected_run(tmp_path_factory.mktemp("inspect"))


@pytest.fixture(scope="module")
def finished_page(trained, tmp_path_factory) -> str:
    """The page of the trained (finished) run's report, written once: what the pages of the changed copies below are
    told apart from."""
    return write_inspection_report(trained, out_dir=tmp_path_factory.mktemp("finished") / "report").read_text()


@pytest.fixture
def run(trained, tmp_path):
    """A private copy of the trained run."""
    return shutil.copytree(trained, tmp_path / "run")


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


@pytest.mark.parametrize("code", ["EROFS", "ENOSPC"])
def test_a_report_that_cannot_be_written_names_its_folder_and_inspect_s_way_out(run, monkeypatch, capsys, code):
    """A run in a read-only folder: inspect said "cannot write RUN/.report.staging-<hex> (Read-only file system);
    choose a writable output_dir", a hidden folder of its own and an option it does not have, and a full disk said
    "continue with --resume". The line names the report's folder and --out; nothing is left beside the run."""
    import errno
    import os

    def unwritable(path, write):
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)), str(path))

    monkeypatch.setattr(saving, "atomic_write", unwritable)
    assert main(["inspect", str(run)]) == 2
    line = capsys.readouterr().err.strip()
    assert f"writing {run / 'report'};" in line or f"cannot write {run / 'report'} (" in line, line
    assert "--out" in line and "staging" not in line and "--resume" not in line and "output_dir" not in line
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


def test_a_checkpoints_report_shows_no_final_metrics_as_its_own(run, tmp_path, finished_page):
    """The final validation numbers (metrics.json) belong to the finished run's model: a report of one of its
    checkpoints showed them beside the checkpoint's figures (the review's case: 2.188 for step 10 of a 30-step run,
    whose step 10 scores 2.557). It names the weights it shows instead."""
    checkpoint = sorted((run / "checkpoints").glob("step-*.ckpt"))[0]
    partial = write_inspection_report(checkpoint, out_dir=tmp_path / "partial").read_text()
    assert "validation loss" in finished_page and "the final model, step 2" in finished_page
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


def test_an_unfinished_runs_report_says_it_is_unfinished(run, tmp_path, main_cli, finished_page):
    """A killed run's report showed its last checkpoint's figures without saying the run had not finished. It says
    how to evaluate and resume it in its caller's words: the commands to `inspect`'s user, the calls to Python's
    (which were told "markovformer eval on it ... markovformer train --resume RUN" too)."""
    import html
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    (copy / "finished.json").unlink()
    page = html.unescape(write_inspection_report(copy).read_text())
    checkpoint = copy / "checkpoints" / "last.ckpt"
    assert f"(its validation numbers: evaluate({str(checkpoint)!r}); the run is unfinished: still training, " \
           f"or stopped (resume({str(copy)!r}) continues a stopped one)" in page
    assert main_cli("inspect", str(copy)).returncode == 0
    page = html.unescape((copy / "report" / "index.html").read_text())
    assert f"(its validation numbers: markovformer eval on it; the run is unfinished: still training, or stopped " \
           f"(markovformer train --resume {copy} continues a stopped one)" in page
    assert "the run is unfinished" not in finished_page


def test_a_report_without_curves_says_why(run, finished_page):
    """A run stopped before its first log row (trainer.log_every=100, checkpoint_every=2, killed at step 4) has
    checkpoints but no logs/metrics.csv: its report had every figure but the training curves, and no word on them."""
    shutil.rmtree(run / "logs")
    (run / "finished.json").unlink()
    page = write_inspection_report(run).read_text()
    assert not (run / "report" / "curves.png").exists()
    assert ("<td>training curves</td><td>none yet: no row in logs/metrics.csv (it takes a training row every N "
            "steps, N = min(trainer.log_every, 50) = 1, and one at each validation)</td>") in page
    assert "<td>training curves</td>" not in finished_page


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


def test_the_curves_of_earlier_weights_say_where_those_weights_stand(run, finished_page):
    """A killed run's report shows its last checkpoint's weights under curves logged past them (last.ckpt of step
    12 under a log to step 13), and a checkpoint's report a finished run's whole log: nothing told them apart."""
    (run / "finished.json").unlink()
    log = run / "logs" / "metrics.csv"
    columns = log.read_text().splitlines()[0].split(",")
    row = {"step": "3", "train/loss": "2.5"}  # a step logged after the last checkpoint, step 2
    log.write_text(log.read_text() + ",".join(row.get(column, "") for column in columns) + "\n")
    page = write_inspection_report(run).read_text()
    assert "; the log runs on to step 3, past step 2, whose weights the figures show" in page
    assert "the log runs on" not in finished_page


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


@pytest.mark.parametrize("layer", [-1, 1])
def test_inspect_refuses_a_layer_index_outside_the_model(trained, tmp_path, layer):
    """--layers names model layers 0..n-1; a negative index (Python's from-the-end) is not one and is refused by
    name, like one past the end, and no report is written."""
    with pytest.raises(ValueError, match=f"layers=\\[{layer}\\]: {layer} is not a layer of this model \\(it has 1\\)"):
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
    refused = r"layers=\[0\]: layer 0 \(scan\) has no attention map; the layers with one: \[1\]"
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

"""A refusal's advice names what the caller can do where it called from: the command line's flag (`--resume RUN`,
`--set KEY=N`) on the command line, the Python call (`resume('RUN')`, `overrides={...}`) from the library."""

from __future__ import annotations

import contextlib
import copy
import json

import pytest
from conftest import one_line_error

from markovformer.training.demo import DEMO_CONFIG
from markovformer.training.run_config import resolve_run_config
from markovformer.training.run_dir import RESOLVED_CONFIG, write_resolved_config
from markovformer.training.runner import resume, train
from markovformer.training.trainer_config import ConfigError


def _held_run(run, steps: int | None = None):
    """A run folder with a config.yaml (and, with ``steps``, a finished.json): what the refusals look at."""
    config = resolve_run_config({**copy.deepcopy(DEMO_CONFIG), "output_dir": str(run)})
    run.mkdir()
    write_resolved_config(run, config)
    if steps is not None:
        (run / "finished.json").write_text(json.dumps({"steps": steps}))
    return config


def _trained_run(run):
    """A tiny causal_lm run of two steps, trained into ``run``: what eval, generate and inspect read."""
    from conftest import TINY_RUN

    steps = {"max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2}
    train(resolve_run_config({**TINY_RUN, "trainer": {**TINY_RUN["trainer"], **steps}, "output_dir": str(run)}))
    return run


def test_a_run_already_there_is_resumed_by_the_callers_own_means(tmp_path, main_cli):
    """`train(config)` into a folder holding a run said "resume it with --resume RUN": a flag of the command line,
    which a Python caller has not got; it names resume('RUN') there, and the command line its flag still."""
    run = tmp_path / "run"
    config = _held_run(run)
    with pytest.raises(ConfigError) as raised:
        train(config)
    assert str(raised.value) == (f"output_dir={str(run)!r} already holds a run; resume it with resume({str(run)!r}) "
                                 f"or choose another output_dir")  # fmt: skip
    one_line_error(main_cli("train", f"output_dir={run}"), f"already holds a run; resume it with --resume {run} or")


def test_a_run_that_would_start_from_itself_is_extended_by_the_callers_own_means(tmp_path, main_cli):
    """init_from inside the run's own output_dir said "extend it with --resume" to a Python caller too."""
    run = str(tmp_path / "run")
    with pytest.raises(ConfigError) as raised:
        resolve_run_config({**copy.deepcopy(DEMO_CONFIG), "output_dir": run, "init_from": run})
    assert str(raised.value).endswith(f"to train a run longer, extend it with resume({run!r})")
    one_line_error(main_cli("train", f"output_dir={run}", f"init_from={run}"), f"extend it with --resume {run}")


def test_a_finished_run_is_extended_by_the_callers_own_means(tmp_path, main_cli):
    """`resume(RUN)` of a finished run said "extend it: --resume RUN trainer.max_steps=N"; from Python it names the
    call with its overrides list."""
    run = tmp_path / "run"
    steps = _held_run(run, steps=DEMO_CONFIG["trainer"]["max_steps"]).trainer.max_steps
    assert (run / RESOLVED_CONFIG).is_file()
    with pytest.raises(ConfigError) as raised:
        resume(run)
    assert str(raised.value).endswith(f"extend it with resume({str(run)!r}, ['trainer.max_steps=N']) with N > "
                                      f"{steps}")  # fmt: skip
    one_line_error(main_cli("train", "--resume", str(run)), f"extend it with --resume {run} trainer.max_steps=N with "
                                                            f"N > {steps}")  # fmt: skip


def test_a_finished_run_already_there_is_extended_not_resumed(tmp_path, main_cli):
    """`train` into a folder holding a finished run said "resume it with --resume RUN", which then refused: "RUN is
    a finished run (300 steps); to train it longer, extend it: ...". It names the extension at once, and for a run
    early stopping ended (which an extension would stop again) a new run from its weights."""
    run = tmp_path / "run"
    config = _held_run(run, steps=300)
    (run / "metrics.json").write_text(json.dumps({"steps": 300}))
    with pytest.raises(ConfigError) as raised:
        train(config)
    assert str(raised.value) == (f"output_dir={str(run)!r} already holds a run, finished (300 steps): extend it with "
                                 f"resume({str(run)!r}, ['trainer.max_steps=N']) with N > 300, or choose another "
                                 f"output_dir")  # fmt: skip
    line = one_line_error(main_cli("train", f"output_dir={run}"))
    assert line.endswith(f"finished (300 steps): extend it with --resume {run} trainer.max_steps=N with N > 300, or "
                         f"choose another output_dir"), line  # fmt: skip
    (run / "metrics.json").write_text(json.dumps({"steps": 300, "early_stopping": {"stopped_at_step": 300}}))
    with pytest.raises(ConfigError) as raised:
        train(config)
    assert str(raised.value).endswith(f"already holds a run, finished (early stopping ended it at step 300): start a "
                                      f"new run from its weights (init_from={str(run)!r}) or choose another "
                                      f"output_dir")  # fmt: skip


def test_a_warm_up_longer_than_the_steps_is_changed_by_the_callers_own_means(main_cli):
    """An experiment's warm-up longer than its steps said "--set warmup_steps=N" to run_experiment(...)'s caller too;
    from Python it names the overrides argument."""
    from markovformer.experiments import mixers

    with pytest.raises(ConfigError) as raised:
        mixers.settings_from({"sizes": "zoology-64", "steps": 30}, quick=True)
    assert str(raised.value).endswith("never reach its peak; overrides={'warmup_steps': N} with N <= 30")
    line = one_line_error(main_cli("experiment", "mixers", "--quick", "--set", "sizes=zoology-64", "steps=30"))
    assert line.endswith("never reach its peak; --set warmup_steps=N with N <= 30"), line


def test_a_stopped_run_is_continued_by_the_callers_own_means(tmp_path):
    """A stopped run's advice said "markovformer train --resume RUN" (a full disk, a diverged step) or "--resume RUN"
    (a damaged finished.json) to a Python caller too; from Python it names resume('RUN'), with the overrides list."""
    import errno

    from markovformer.advice import command_line
    from markovformer.training.divergence import DivergenceGuard
    from markovformer.training.run_dir import continue_with_resume, finished_steps

    run = tmp_path / "run"
    _held_run(run)
    (run / "finished.json").write_text("{")
    full = OSError(errno.ENOSPC, "No space left on device", str(run / "metrics.json"))
    diverged = DivergenceGuard(run, lr=0.01)

    def advice() -> tuple[str, str, str]:
        with pytest.raises(ConfigError) as damaged:
            finished_steps(run)
        disk = continue_with_resume(full, run).strerror
        return disk, diverged.message(3, "the training loss is nan"), str(damaged.value)

    disk, divergence, damaged = advice()
    assert disk.endswith(f"No space left on device; continue it with resume({str(run)!r})"), disk
    assert divergence.endswith(f"continue with resume({str(run)!r}, ['trainer.lr=...'])"), divergence
    assert damaged.endswith(f"write the final files again with resume({str(run)!r})"), damaged
    with command_line():
        disk, divergence, damaged = advice()
    assert disk.endswith(f"No space left on device; continue it with markovformer train --resume {run}"), disk
    assert divergence.endswith(f"continue with markovformer train --resume {run} trainer.lr=..."), divergence
    assert damaged.endswith(f"write the final files again with --resume {run}"), damaged


def test_a_ctrl_c_in_the_final_writes_is_finished_by_the_callers_own_means(tmp_path, monkeypatch):
    """train(config) stopped by a Ctrl-C while it wrote its final files said "finish it with markovformer train
    --resume RUN" (the command line's words, checked in test_runner); from Python it names resume('RUN')."""
    from conftest import TINY_RUN

    from markovformer.training import runner
    from markovformer.training.trainer_config import RunTerminated

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "write_final_files", interrupted)
    run = tmp_path / "run"
    with pytest.raises(RunTerminated) as stopped:
        train(resolve_run_config({**TINY_RUN, "output_dir": str(run)}))
    assert str(stopped.value).endswith(f"it is not finished; finish it with resume({str(run)!r})"), stopped.value


def test_an_experiments_arguments_are_named_as_its_caller_gave_them(tmp_path, main_cli):
    """run_experiment(...) refused its own arguments as flags (--seeds 0 1 0, --recompute, --from-cells, --out) that a
    Python caller never gave; from Python they are named as the call's arguments (seeds=, recompute=, from_cells=,
    out_dir), on the command line as its flags still."""
    from markovformer.experiments import run_experiment
    from markovformer.experiments.report import MissingCell, claim_folder
    from markovformer.experiments.settings import single_seed

    (tmp_path / "cells").mkdir()
    claim_folder(tmp_path, "mixers")
    refusals = [  # (Python's words, the command line's words, the call, its command line)
        ("seeds=(-1,): -1 must lie in [0, 2**32)", "--seeds -1 must lie in [0, 2**32)",
         {"seeds": (-1,)}, ("--seeds=-1",)),
        ("seeds=(0, 1, 0) repeats a seed; give each once", "--seeds 0 1 0 repeats a seed; give each once",
         {"seeds": (0, 1, 0)}, ("--seeds", "0", "1", "0")),
        ("recompute=['*'] forgets cells that from_cells=True would read: use one or the other",
         "--recompute forgets cells that --from-cells would read: use one or the other",
         {"recompute": ["*"], "from_cells": True}, ("--recompute", "*", "--from-cells")),
        (f"from_cells=True: {tmp_path / 'none'} has no cells/ folder", f"--from-cells: {tmp_path / 'none'} has no "
         f"cells/ folder", {"from_cells": True, "out": tmp_path / "none"}, ("--from-cells",)),
        (f"{tmp_path} holds the experiment 'mixers' (experiment.json); give landscape another out_dir",
         f"{tmp_path} holds the experiment 'mixers' (experiment.json); give landscape another --out", {}, ()),
    ]  # fmt: skip
    for python, command_line, call, flags in refusals:
        out = call.pop("out", tmp_path)
        with pytest.raises(ValueError) as raised:
            run_experiment("landscape", out, quick=True, **call)
        assert python in str(raised.value), raised.value
        one_line_error(main_cli("experiment", "landscape", "--quick", "--out", str(out), *flags), command_line)
    with pytest.raises(ValueError) as raised:
        single_seed((0, 1), "vmt")
    assert str(raised.value) == "vmt runs one seed, got seeds=(0, 1): run it once per seed, each with its own out_dir"
    (tmp_path / "mine" / "cells").mkdir(parents=True)
    with pytest.raises(MissingCell) as raised:
        run_experiment("landscape", tmp_path / "mine", quick=True, from_cells=True)
    assert str(raised.value).endswith("without from_cells=True the experiment computes it"), raised.value


def test_an_evaluations_arguments_are_named_as_its_caller_gave_them(tmp_path, main_cli, monkeypatch):
    """evaluate(...) refused its own arguments as eval's flags (--data, --predictions, --beam-size, --split) that a
    Python caller never gave; from Python they are named as the call's arguments, on the command line as its flags."""
    from markovformer.training import evaluation
    from markovformer.training.evaluation import evaluate

    run = _trained_run(tmp_path / "run")
    loose, kept = tmp_path / "none" / "p.tsv", tmp_path / "p.tsv"
    refusals = [  # (Python's words, the command line's words, the call, its command line)
        (f"predictions={str(loose)!r} is in no existing directory", f"--predictions {loose} is in no existing",
         {"predictions": loose}, ("--predictions", str(loose))),
        (f"predictions={str(kept)!r}: {run} is a causal_lm run", f"--predictions {kept}: {run} is a causal_lm run",
         {"predictions": kept}, ("--predictions", str(kept))),
        (f"beam_size=4: {run} is a causal_lm run", f"--beam-size 4: {run} is a causal_lm run",
         {"beam_size": 4}, ("--beam-size", "4")),
        ("data_overrides={'source': 'text'}: a run is evaluated on its own data source",
         "eval --data source='text': a run is evaluated on its own data source",
         {"data_overrides": {"source": "text"}}, ("--data", "source=text")),
        ("data_overrides={'num_symbols': 8}: the data's vocabulary has 8 tokens",
         "eval --data num_symbols=8: the data's vocabulary has 8 tokens",
         {"data_overrides": {"num_symbols": 8}}, ("--data", "num_symbols=8")),
    ]  # fmt: skip
    for python, command_line, call, flags in refusals:
        with pytest.raises(ConfigError) as raised:
            evaluate(run, **call)
        assert python in str(raised.value), raised.value
        one_line_error(main_cli("eval", str(run), *flags), command_line)
    assert not kept.exists()
    monkeypatch.setattr(evaluation, "scored_split", lambda *args: [])  # a split with no example (a short file's)
    with pytest.raises(ConfigError) as raised:
        evaluate(run, "test")
    assert str(raised.value).endswith("choose another split or give the data a test part"), raised.value
    one_line_error(main_cli("eval", str(run), "--split", "test"), "choose another --split or give the data a test part")


def test_a_generation_requests_fields_are_named_as_its_caller_gave_them(tmp_path, main_cli):
    """task.generate(model, run, GenerationRequest(...)) refused the request's fields as generate's flags (--prompt,
    --input, --skip-unknown, --through-eod, --beam-size) that a Python caller never typed; from Python they are
    named as the request's fields and the GenerationConfig's, on the command line as its flags."""
    from markovformer.advice import command_line
    from markovformer.models.generation import GenerationConfig
    from markovformer.training.run_dir import load_trained_run
    from markovformer.training.tasks import GenerationRequest, build_task
    from markovformer.training.tasks.base import refuse_packed_start

    run = _trained_run(tmp_path / "run")
    config, model, _, _ = load_trained_run(run)
    language_model = build_task(config.task, config.trainer, options=config.task_options)
    refusals = [  # (Python's words, the command line's words, the request, its command line)
        ("input='sources.txt' is for translation runs: a language model continues one prompt",
         "--input is for translation runs: a language model continues one --prompt TEXT",
         {"input": "sources.txt"}, ("--input", "sources.txt")),
        ("a language model continues a prompt: give prompt=TEXT (prompt='' samples unconditionally)",
         "a language model continues a --prompt: give --prompt TEXT (--prompt '' samples unconditionally)", {}, ()),
        ("prompt: token id 99 is outside the vocabulary", "--prompt: token id 99 is outside the vocabulary",
         {"prompt": "1 99"}, ("--prompt", "1 99")),
    ]  # fmt: skip
    for python, flags_said, request, flags in refusals:
        with pytest.raises(ValueError) as raised:
            list(language_model.generate(model, run, GenerationRequest(**request)))
        assert python in str(raised.value), raised.value
        one_line_error(main_cli("generate", str(run), *flags), flags_said)

    def refused(task: str, **request) -> tuple[str, str]:  # a translation or CTC run refuses before its model is read
        said = []
        for context in (contextlib.nullcontext(), command_line()):
            with context, pytest.raises(ValueError) as raised:
                list(build_task(task).generate(None, tmp_path, GenerationRequest(**request)))
            said.append(str(raised.value))
        return said[0], said[1]

    python, flags_said = refused("translation")
    assert python.startswith("a translation run translates either prompt=SENTENCE or input=FILE"), python
    assert flags_said.startswith("a translation run translates either --prompt SENTENCE or --input FILE"), flags_said
    python, flags_said = refused("translation", prompt="hallo", skip_unknown=True)
    assert python.startswith("skip_unknown=True: a translation run continues no prompt"), python
    assert flags_said.startswith("--skip-unknown: a translation run continues no prompt"), flags_said
    python, flags_said = refused("translation", prompt="hallo", generation=GenerationConfig(do_sample=True, top_k=3))
    assert python.startswith("top_k=3: a translation run searches (greedy, or num_beams=N)"), python
    assert flags_said.startswith("--top-k 3: a translation run searches (greedy, or --beam-size N)"), flags_said
    python, flags_said = refused("translation", input=str(tmp_path))
    assert python == f"input={str(tmp_path)!r}: a directory, not a file", python
    assert flags_said == f"--input {str(tmp_path)!r}: a directory, not a file", flags_said
    python, flags_said = refused("ctc", prompt="hallo")
    assert python.startswith("a CTC run transcribes recordings: give input=FILE"), python
    assert flags_said.startswith("a CTC run transcribes recordings: give --input FILE"), flags_said
    python, flags_said = refused("ctc", input="a.wav", generation=GenerationConfig(num_beams=4))
    assert python.startswith("num_beams=4: a CTC run transcribes greedily"), python
    assert flags_said.startswith("--beam-size 4: a CTC run transcribes greedily"), flags_said
    with pytest.raises(ValueError) as raised:
        refuse_packed_start(through_eod=True, empty_prompt=False)
    assert str(raised.value).startswith("through_eod=True: this run packed its documents"), raised.value
    assert str(raised.value).endswith("without through_eod=True the sample ends with its document"), raised.value


def test_an_inspections_arguments_are_named_as_its_caller_gave_them(tmp_path, main_cli, monkeypatch):
    """write_inspection_report(run, layers=..., out_dir=...) refused its arguments as inspect's flags (--layers,
    --out FOLDER) that a Python caller never gave; from Python they are named as the call's arguments, on the
    command line as its flags."""
    import errno

    from markovformer.plots import saving
    from markovformer.training.inspection import write_inspection_report

    run = _trained_run(tmp_path / "run")
    refusals = [  # (Python's words, the command line's words, the layers, its command line)
        ("layers=[]: no layer given; name at least one (layers=[0, 1]), or leave layers=None for the first two",
         "--layers: no layer given; name at least one (--layers 0 1), or leave --layers out for the first two",
         [], ("--layers",)),
        ("layers=[5]: 5 is not a layer of this model (it has 1)", "--layers 5 is not a layer of this model (it has 1)",
         [5], ("--layers", "5")),
    ]  # fmt: skip
    for python, command_line, layers, flags in refusals:
        with pytest.raises(ValueError) as raised:
            write_inspection_report(run, layers=layers)
        assert python in str(raised.value), raised.value
        one_line_error(main_cli("inspect", str(run), *flags), command_line)

    def full(path, write):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(saving, "atomic_write", full)
    with pytest.raises(OSError) as raised:
        write_inspection_report(run)
    assert raised.value.strerror.endswith("call it again, or write the report elsewhere with out_dir=FOLDER"), raised
    one_line_error(main_cli("inspect", str(run)), "run inspect again, or write the report elsewhere with --out FOLDER")


def test_a_benchs_folder_is_named_as_its_caller_gave_it(tmp_path, main_cli, monkeypatch):
    """run_suite(out, ...) refused its folder as bench's flag ("bench --out X: is a file", "cannot write bench.json
    and the plots in --out='X'") that a Python caller never gave; from Python it is named as the call's argument
    out=, on the command line as --out."""
    from pathlib import Path

    from markovformer.bench import BenchSettings, run_suite

    settings = BenchSettings(parts=("ops",), quick=True, device="cpu", op_kinds=("markov_local",), lengths=(64,))
    flags = ("--parts", "ops", "--quick", "--device", "cpu", "--op-kinds", "markov_local", "--lengths", "64")
    taken = tmp_path / "results.txt"
    taken.write_text("kept\n")
    with pytest.raises(ValueError) as raised:
        run_suite(taken, settings, log=lambda line: None)
    assert str(raised.value).startswith(f"out={str(taken)!r}: is a file, not a folder"), raised.value
    one_line_error(main_cli("bench", "--out", str(taken), *flags), f"bench --out {taken}: is a file, not a folder")
    out, real_mkdir = tmp_path / "bench", Path.mkdir

    def refused(self, *args, **kwargs):  # root makes any folder: the refused mkdir is simulated
        if self == out:
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refused)
    with pytest.raises(ValueError) as raised:
        run_suite(out, settings, log=lambda line: None)
    assert str(raised.value).startswith(f"cannot write bench.json and the plots in out={str(out)!r}"), raised.value
    one_line_error(main_cli("bench", "--out", str(out), *flags), f"the plots in --out={str(out)!r}")


@pytest.mark.parametrize("early_stopped", [False, True])
def test_train_and_resume_of_a_finished_run_give_the_same_advice(tmp_path, early_stopped):
    """`train` into a finished run and `resume` of it each worded the way on themselves, and disagreed: "extend it
    with ..." / "to train it longer, extend it: ...", and for a run early stopping ended "at step 300" / "at step
    300 of 600; to train on, ...". One function words both."""
    run = tmp_path / "run"
    values = copy.deepcopy(DEMO_CONFIG)
    values["trainer"].update(max_steps=600, early_stopping={"monitor": "val/loss"} if early_stopped else None)
    config = resolve_run_config({**values, "output_dir": str(run)})
    run.mkdir()
    write_resolved_config(run, config)
    steps = 300 if early_stopped else 600
    (run / "finished.json").write_text(json.dumps({"steps": steps}))
    stopped = {"early_stopping": {"stopped_at_step": steps}} if early_stopped else {}
    (run / "metrics.json").write_text(json.dumps({"steps": steps, **stopped}))
    if early_stopped:
        what, how = "early stopping ended it at step 300", f"start a new run from its weights (init_from={str(run)!r})"
    else:
        what, how = "600 steps", f"extend it with resume({str(run)!r}, ['trainer.max_steps=N']) with N > 600"
    with pytest.raises(ConfigError) as raised:
        train(config)
    assert str(raised.value) == (f"output_dir={str(run)!r} already holds a run, finished ({what}): {how}"
                                 f"{'' if early_stopped else ','} or choose another output_dir")  # fmt: skip
    with pytest.raises(ConfigError) as raised:
        resume(run)
    assert str(raised.value) == f"{run} is a finished run ({what}); to train on, {how}"

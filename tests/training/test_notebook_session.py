"""The Python API in one long-lived process (a notebook): a run that stops early leaves the process as it found it."""

import random
import signal

import lightning.pytorch as L
import numpy as np
import pytest
import torch
import yaml
from conftest import TINY_RUN

from markovformer.training import runner
from markovformer.training.evaluation import evaluate
from markovformer.training.inspection import write_inspection_report
from markovformer.training.run_config import resolve_run_config
from markovformer.training.run_dir import load_run
from markovformer.training.trainer_config import ConfigError, RunTerminated


def draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def seed(value: int) -> None:
    torch.manual_seed(value), np.random.seed(value), random.seed(value)


def test_a_run_interrupted_by_ctrl_c_leaves_the_callers_random_states_as_it_found_them(tmp_path, monkeypatch):
    """Lightning's isolate_rng restores the random states only when its block ends normally: after a run stopped by
    a Ctrl-C (a real SIGINT, RunTerminated), torch, numpy and Python drew from the run's seed (trainer.seed=3:
    np.random's key began [3, ...]), not from the caller's. And the stop is no Exception (it was a RuntimeError): a
    sweep's ``except Exception`` around each run swallowed the Ctrl-C and went on to its next run."""

    class CtrlC(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 3:
                signal.raise_signal(signal.SIGINT)  # as the notebook's interrupt button sends it

    build = runner.lightning_trainer
    monkeypatch.setattr(runner, "lightning_trainer", lambda tc, run_dir, log, callbacks: build(
        tc, run_dir, log, [*callbacks, CtrlC()]))  # fmt: skip
    values = yaml.safe_load(yaml.safe_dump(TINY_RUN))
    values["trainer"]["logger"] = "csv"
    values["output_dir"] = str(tmp_path / "run")
    seed(1234)
    expected = draws()
    seed(1234)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own: a KeyboardInterrupt
    try:
        with pytest.raises(RunTerminated, match="interrupted \\(SIGINT, Ctrl-C\\) at step 3 of"):
            try:
                runner.train(resolve_run_config(values))
            except Exception as error:  # a sweep's guard around each run: the Ctrl-C must still stop the sweep
                pytest.fail(f"the Ctrl-C was caught as an error of the run: {error!r}")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    assert draws() == expected


def test_a_run_directory_and_init_from_given_as_paths_are_the_strings_they_name(tmp_path):
    """From Python a path is a pathlib.Path, as evaluate, resume and load_run take it: RunConfig(output_dir=Path)
    failed with AttributeError ('PosixPath' object has no attribute 'strip'), RunConfig(init_from=Path) wrote data.json
    and environment.json and then failed in YAML ('cannot represent an object'), and resolve_run_config refused both
    ('has the wrong type: expected str'), as they refused a data file (data.path, a list of data.data_files). Each
    path is now the string it names, wherever it is given."""
    import dataclasses

    values = yaml.safe_load(yaml.safe_dump(TINY_RUN))
    values["trainer"].update({"max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                              "logger": "csv"})  # fmt: skip
    base, tuned = tmp_path / "base", tmp_path / "tuned"
    runner.train(resolve_run_config({**values, "output_dir": base}))
    assert yaml.safe_load((base / "config.yaml").read_text())["output_dir"] == str(base)
    expected = resolve_run_config({**values, "output_dir": str(tuned), "init_from": str(base)})
    assert resolve_run_config({**values, "output_dir": tuned, "init_from": base}) == expected
    assert dataclasses.replace(expected, output_dir=tuned, init_from=base) == expected
    corpus = tmp_path / "corpus.txt"
    text = {**values, "data": {"source": "text", "path": str(corpus)}, "output_dir": str(tuned)}
    assert resolve_run_config({**text, "data": {"source": "text", "path": corpus}}) == resolve_run_config(text)
    files = {**values, "data": {"source": "hf_dataset", "data_files": [str(corpus)]}, "output_dir": str(tuned)}
    assert resolve_run_config({**files, "data": {"source": "hf_dataset", "data_files": [corpus]}}) == (
        resolve_run_config(files))


def test_a_run_named_from_the_home_folder_is_read_as_train_wrote_it(tmp_path, monkeypatch):
    """train(output_dir='~/runs/a') expands '~', as a shell would; evaluate, resume and the report took '~/runs/a'
    literally ('~/runs/a: no such run directory or checkpoint'). Each now reads the run train wrote, and writes
    where a '~' in its output's name says."""
    monkeypatch.setenv("HOME", str(tmp_path))
    values = yaml.safe_load(yaml.safe_dump(TINY_RUN))
    values["trainer"].update({"max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                              "logger": "csv"})  # fmt: skip
    trained = runner.train(resolve_run_config({**values, "output_dir": "~/runs/a"}))
    assert evaluate("~/runs/a")["metrics"]["loss"] == pytest.approx(trained["val"]["loss"], rel=1e-6)
    assert runner.resume("~/runs/a", ["trainer.max_steps=3"])["steps"] == 3
    assert write_inspection_report("~/runs/a") == tmp_path / "runs" / "a" / "report" / "index.html"
    # the files they write, named so too: a report's out_dir was made as a folder '~' of the working folder, and
    # predictions beside a run were refused ('--predictions ~/p.tsv is in no existing directory')
    monkeypatch.chdir(tmp_path / "runs")
    assert write_inspection_report("~/runs/a", out_dir="~/report") == tmp_path / "report" / "index.html"
    assert not (tmp_path / "runs" / "~").exists()
    with pytest.raises(ConfigError, match="is a causal_lm run, whose scoring predicts nothing"):
        evaluate("~/runs/a", predictions="~/predictions.tsv")


def test_a_run_trains_on_the_cpu_whatever_default_device_the_caller_set(tmp_path):
    """A notebook's torch.set_default_device (here 'meta', as 'cuda' on a GPU machine) built the run's data and model
    there: the run failed in its first steps ('Tensor.item() cannot be called on meta tensors'). It trains as in a
    fresh process, to the same loss, a run is read and scored on the CPU as in a fresh process (eval, inspect,
    load_run), and the caller's default device is back after them."""
    values = yaml.safe_load(yaml.safe_dump(TINY_RUN))
    values["trainer"].update({"max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                              "logger": "csv"})  # fmt: skip
    expected = runner.train(resolve_run_config({**values, "output_dir": str(tmp_path / "a")}))["val"]["loss"]
    scored = evaluate(tmp_path / "a")["metrics"]["loss"]
    torch.set_default_device("meta")
    try:
        trained = runner.train(resolve_run_config({**values, "output_dir": str(tmp_path / "b")}))
        # reading a run too: under 'meta' its loading failed ('Cannot copy out of meta tensor')
        rescored, model = evaluate(tmp_path / "a")["metrics"]["loss"], load_run(tmp_path / "a")[1]
        write_inspection_report(tmp_path / "a")
        assert torch.get_default_device() == torch.device("meta")
    finally:
        torch.set_default_device(None)
    assert trained["val"]["loss"] == expected and rescored == scored
    assert {parameter.device.type for parameter in model.parameters()} == {"cpu"}


def test_a_run_leaves_no_default_device_mode_in_a_session_that_set_none(tmp_path, monkeypatch):
    """Forcing the CPU with a global torch.set_default_device("cpu") installed torch's DeviceContext function mode,
    in the run (every tensor factory call went through it, twice as slow) and, left installed, in the caller's
    session after it. A session that set no default device runs, and is left, with no function mode."""
    from torch.overrides import _get_current_function_mode_stack

    # recorded as the run builds its model: inside built_on_the_cpu's scope (around _build_and_fit, a recorder
    # put in its place ran outside that scope and read [] whatever the run entered)
    modes_in_run, build = [], runner.build_model
    record = lambda *args: modes_in_run.append(_get_current_function_mode_stack()) or build(*args)  # noqa: E731
    monkeypatch.setattr(runner, "build_model", record)
    values = yaml.safe_load(yaml.safe_dump(TINY_RUN))
    values["trainer"].update({"max_steps": 1, "warmup_steps": 1, "eval_every": 1, "checkpoint_every": 1,
                              "logger": "csv"})  # fmt: skip
    runner.train(resolve_run_config({**values, "output_dir": str(tmp_path / "a")}))
    assert modes_in_run == [[]] and _get_current_function_mode_stack() == []


def test_a_run_loads_in_eval_mode_from_its_final_model_and_from_a_checkpoint(tmp_path):
    """from_pretrained returns a model in eval mode, so load_run of a finished run did; load_run of a checkpoint
    built the model and returned it in training mode (torch's default): with the run's dropout 0.1, two calls on the
    same ids gave other logits, and neither was the final model's at the same step. Both load in eval mode."""
    from markovformer.training.run_dir import LAST_CHECKPOINT

    values = yaml.safe_load(yaml.safe_dump(TINY_RUN))
    values["trainer"].update({"max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                              "logger": "csv"})  # fmt: skip
    runner.train(resolve_run_config({**values, "output_dir": str(tmp_path / "a")}))
    ids = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]])
    final, checkpoint = (load_run(target)[1] for target in (tmp_path / "a", tmp_path / "a" / "checkpoints" /
                                                             LAST_CHECKPOINT))  # fmt: skip
    for model in (final, checkpoint):
        assert not any(module.training for module in model.modules())
    assert torch.equal(checkpoint(ids).logits, final(ids).logits)

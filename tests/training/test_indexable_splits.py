"""The engine reads splits by index only: a split that counts its reads (and refuses iteration and slicing) trains,
is killed, resumes to the uninterrupted run's numbers, and is never read whole up front."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from conftest import run_in_process  # beside this folder

from markovformer.data import sources
from markovformer.data.synthetic.markov_sources import MarkovChainSource
from markovformer.training.checkpoint import load_checkpoint_file
from markovformer.training.run_checks import resume_point


class CountingSplit:
    """A split that counts each example read into ``reads`` and refuses iteration and slicing."""

    def __init__(self, name: str, examples, reads: Counter):
        self.name, self._examples, self._reads = name, examples, reads

    def __len__(self):
        return len(self._examples)

    def __getitem__(self, index):
        if not isinstance(index, int):
            raise TypeError(f"the {self.name} split was read with {type(index).__name__}, not an int index")
        self._reads[self.name] += 1
        return self._examples[index]

    def __iter__(self):
        raise TypeError(f"the {self.name} split was iterated")


def counting_source(reads: Counter) -> type:
    """The Markov chain source whose splits count their reads into ``reads``."""

    class CountingSource(MarkovChainSource):
        def build(self, seed):
            bundle = super().build(seed)
            for name in ("train", "val", "test"):
                setattr(bundle, name, CountingSplit(name, getattr(bundle, name), reads))
            return bundle

    return CountingSource


# The killed run is a process of its own: this script registers the source there, then runs the command line.
KILLED_CLI = f"""
import sys
from collections import Counter
sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parent.parent)!r}]  # this module, conftest
from test_indexable_splits import counting_source
from markovformer.data import sources
sources.DATA_SOURCES["counting"] = counting_source(Counter())
from markovformer.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def counting_run(tmp_path, monkeypatch, *args) -> Counter:
    """The command line in this process with the counting source registered; the reads of each split."""
    reads = Counter()
    monkeypatch.setitem(sources.DATA_SOURCES, "counting", counting_source(reads))
    done = run_in_process(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    return reads


def killed_counting_run(tmp_path, *args, wait_for: Path) -> None:
    """The command line as a process with the counting source, SIGKILLed as soon as ``wait_for`` exists."""
    script = tmp_path / "counting_cli.py"
    script.write_text(KILLED_CLI)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.time() + 240
    while not wait_for.exists():
        assert process.poll() is None, process.stderr.read()
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()


def test_a_counting_split_trains_and_resumes_exactly_reading_only_its_batches(tmp_path, tiny_run, monkeypatch):
    run = {**tiny_run, "data": {**tiny_run["data"], "source": "counting"}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    steps, batch = run["trainer"]["max_steps"], run["trainer"]["batch_size"]
    train_size, val_size = run["data"]["train_sequences"], run["data"]["val_sequences"]

    whole = tmp_path / "whole"
    reads = counting_run(tmp_path, monkeypatch, "train", "run.yaml", f"output_dir={whole}")
    # each step reads its own batch (Lightning may fetch one batch ahead), never the whole split up front
    assert steps * batch <= reads["train"] <= (steps + 1) * batch < 2 * train_size
    validations = steps // run["trainer"]["eval_every"]
    # + the examples the run report shows its gates on, and the two scored before the run writes anything
    assert reads["val"] <= validations * val_size + 64 + 2

    killed = tmp_path / "killed"
    killed_counting_run(tmp_path, "train", "run.yaml", f"output_dir={killed}",
                        wait_for=killed / "checkpoints" / "step-000020.ckpt")  # fmt: skip
    assert not (killed / "metrics.json").exists()
    # the kill may come between step-000020.ckpt and last.ckpt: the resume starts from the newer of the two
    resumed_from = load_checkpoint_file(resume_point(killed / "checkpoints" / "last.ckpt"))["global_step"]
    reads = counting_run(tmp_path, monkeypatch, "train", "--resume", str(killed))
    assert reads["train"] <= (steps - resumed_from + 1) * batch
    final = [json.loads((d / "metrics.json").read_text())["val"]["loss"] for d in (whole, killed)]
    assert final[0] == pytest.approx(final[1], rel=1e-6)

"""The engine reads splits by index only: a split that counts its reads (and refuses iteration and slicing) trains,
is killed, resumes to the uninterrupted run's numbers, and is never read whole up front."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from markovformer.training.checkpoint import load_checkpoint_file

# A script that registers a source whose splits count each example read into a JSON file at exit, then runs the CLI.
COUNTING_CLI = textwrap.dedent('''
    import atexit, json, os, sys
    from collections import Counter
    from markovformer.data import sources
    from markovformer.data.synthetic.markov_sources import MarkovChainSource

    reads = Counter()

    class CountingSplit:
        def __init__(self, name, examples):
            self.name, self._examples = name, examples

        def __len__(self):
            return len(self._examples)

        def __getitem__(self, index):
            if not isinstance(index, int):
                raise TypeError(f"the {self.name} split was read with {type(index).__name__}, not an int index")
            reads[self.name] += 1
            return self._examples[index]

        def __iter__(self):
            raise TypeError(f"the {self.name} split was iterated")

    class CountingSource(MarkovChainSource):
        def build(self, seed):
            bundle = super().build(seed)
            for name in ("train", "val", "test"):
                setattr(bundle, name, CountingSplit(name, getattr(bundle, name)))
            return bundle

    sources.DATA_SOURCES["counting"] = CountingSource
    sources.SOURCE_TASKS["counting"] = ("causal_lm",)
    atexit.register(lambda: open(os.environ["READS_FILE"], "w").write(json.dumps(reads)))
    from markovformer.cli.main import main
    sys.exit(main(sys.argv[1:]))
''')


def counting_cli(tmp_path, *args, reads, wait_for=None):
    script = tmp_path / "counting_cli.py"
    script.write_text(COUNTING_CLI)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "READS_FILE": str(reads)}
    process = subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    if wait_for is None:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        return json.loads(reads.read_text())
    deadline = time.time() + 240
    while not wait_for.exists():
        assert process.poll() is None, process.stderr.read()
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    return None


def test_a_counting_split_trains_and_resumes_exactly_reading_only_its_batches(tmp_path, tiny_run):
    run = {**tiny_run, "data": {**tiny_run["data"], "source": "counting"}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    steps, batch = run["trainer"]["max_steps"], run["trainer"]["batch_size"]
    train_size, val_size = run["data"]["train_sequences"], run["data"]["val_sequences"]

    whole = tmp_path / "whole"
    reads = counting_cli(tmp_path, "train", "run.yaml", f"output_dir={whole}", reads=tmp_path / "whole.json")
    # each step reads its own batch (Lightning may fetch one batch ahead), never the whole split up front
    assert steps * batch <= reads["train"] <= (steps + 1) * batch < 2 * train_size
    validations = steps // run["trainer"]["eval_every"]
    assert reads["val"] <= validations * val_size + 64  # + the examples the run report shows its gates on

    killed = tmp_path / "killed"
    counting_cli(tmp_path, "train", "run.yaml", f"output_dir={killed}", reads=tmp_path / "killed.json",
                 wait_for=killed / "checkpoints" / "step-000020.ckpt")  # fmt: skip
    assert not (killed / "metrics.json").exists()
    # the kill may come between step-000020.ckpt and last.ckpt: the resume starts from last.ckpt's step
    resumed_from = load_checkpoint_file(killed / "checkpoints" / "last.ckpt")["global_step"]
    reads = counting_cli(tmp_path, "train", "--resume", str(killed), reads=tmp_path / "resumed.json")
    assert reads["train"] <= (steps - resumed_from + 1) * batch
    final = [json.loads((d / "metrics.json").read_text())["val"]["loss"] for d in (whole, killed)]
    assert final[0] == pytest.approx(final[1], rel=1e-6)

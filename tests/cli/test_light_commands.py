"""The commands import what they use: Lightning is the training loop's and torchmetrics scoring's, so `generate` and
`inspect` wait for neither, `eval` for no Lightning, and `train` and `experiment` refuse bad settings before they
import them."""

from __future__ import annotations

import json
import subprocess
import sys

from markovformer.training.environment import usable_cores

TRAINING_ONLY = ("lightning", "torchmetrics")
# main() on each command line in turn, in one fresh interpreter: after each, its exit status and which of
# TRAINING_ONLY had been imported by then
IMPORTED_BY = ("import json, sys\n"
               "from markovformer.cli.main import main\n"
               "for argv in json.loads(sys.argv[1]):\n"
               "    status = main(argv)\n"
               f"    loaded = sorted(name for name in {TRAINING_ONLY!r} if name in sys.modules)\n"
               "    print('imported:', status, loaded)\n")  # fmt: skip


def test_reading_commands_import_neither_lightning_nor_more_than_they_score_with(main_cli, tmp_path, tiny_config):
    """`generate` of a language model spent ~3 s of a quiet 2-core CPU's 5 s of imports on what it never runs:
    Lightning (~1.3 s), through the checkpoint format's module, which also held the Lightning plug-in that writes it,
    and torchmetrics (~1.9 s), through the task kinds' modules, which also held their validation metrics. `eval`
    needs torchmetrics but imported Lightning too, through the runner and its loaders' SIGTERM handling; `inspect`
    imported Lightning to read the run's metrics.csv, through the module of the Lightning logger that writes it."""
    run = tmp_path / "run"
    done = main_cli("train", str(tiny_config), f"output_dir={run}", "trainer.max_steps=10", "trainer.eval_every=10")
    assert done.returncode == 0, done.stderr
    commands = [["generate", str(run / "checkpoints" / "last.ckpt"), "--prompt", "1 2", "--max-new-tokens", "3"],
                ["inspect", str(run), "--out", str(tmp_path / "report")],
                ["eval", str(run), "--split", "test"]]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", IMPORTED_BY, json.dumps(commands)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported = [line for line in done.stdout.splitlines() if line.startswith("imported: ")]
    assert imported == ["imported: 0 []", "imported: 0 []", "imported: 0 ['torchmetrics']"], done.stdout


def test_a_refused_training_config_imports_no_lightning(tmp_path, tiny_config):
    """`train` imported Lightning, and with it torchmetrics, transformers and scipy, before it read its config: a
    missing config file, a mistyped top-level or trainer key or a bad trainer value waited for all of it to be refused
    (8.0 s to the error, 2.6 s without it: medians of 5 on a shared 2-core CPU). The run config is resolved first,
    the training machinery imported after."""
    commands = [["train", str(tmp_path / "nonexistent.yaml")],
                ["train", str(tiny_config), "trainer.max_stesp=3"],
                ["train", "trainer.max_steps=-1"]]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", IMPORTED_BY, json.dumps(commands)], capture_output=True, text=True,
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    imported = [line for line in done.stdout.splitlines() if line.startswith("imported: ")]
    assert imported == ["imported: 2 []"] * 3, done.stdout + done.stderr
    assert not (tmp_path / "runs").exists()  # the demo run refused: no folder started


def refused_in_a_fresh_interpreter(commands: list[list[str]], cwd) -> tuple[list[str], list[str]]:
    """Each command line's ``imported: STATUS [...]`` line (``IMPORTED_BY``) and the error lines, in order, of
    ``commands`` run by ``main`` in one fresh interpreter in ``cwd``."""
    done = subprocess.run([sys.executable, "-c", IMPORTED_BY, json.dumps(commands)], capture_output=True, text=True,
                          cwd=cwd)  # fmt: skip
    assert done.returncode == 0, done.stderr
    imported = [line for line in done.stdout.splitlines() if line.startswith("imported: ")]
    return imported, [line for line in done.stderr.splitlines() if line.startswith("markovformer: error: ")]


def test_a_mistyped_model_or_data_key_is_refused_before_lightning(tmp_path, tiny_config):
    """The model and data sections were checked as the run was built, inside the runner, whose import brings
    Lightning, torchmetrics, transformers and scipy: `train tiny.yaml model.d_modle=3` waited 20 s of a loaded
    2-core CPU for its one line. They are checked as the run config is read, the lines unchanged."""
    commands = [["train", str(tiny_config), "model.d_modle=3"], ["train", str(tiny_config), "data.typo=1"],
                ["train", str(tiny_config), "data.num_symbols=0"]]  # fmt: skip
    imported, errors = refused_in_a_fresh_interpreter(commands, tmp_path)
    assert imported == ["imported: 2 []"] * 3, errors
    assert errors == ["markovformer: error: unknown key model.d_modle (did you mean 'd_model'?)",
                      "markovformer: error: unknown key data.typo; the keys of data: kind, num_symbols, lags, "
                      "strength, order, beta, p, q, chain_seed, seq_len, train_sequences, val_sequences, "
                      "test_sequences",
                      "markovformer: error: data.num_symbols=0 must be >= 1"]  # fmt: skip
    assert not (tmp_path / "runs").exists()


def test_resuming_what_is_no_run_is_refused_before_lightning(tmp_path):
    """`train --resume FOLDER` looked for the run's config.yaml inside the runner, whose import brings Lightning and
    the rest: a mistyped folder waited 20 s of a loaded 2-core CPU for its one line. The folder and the overrides are
    checked before the runner is imported, the lines unchanged."""
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    commands = [["train", "--resume", "runs/demo"], ["train", "--resume", "runs/dmeo", "trainer.max_steps=5"],
                ["train", "--resume", "runs/demo", "trainer.max_steps=5", "trainer.max_steps=6"]]  # fmt: skip
    imported, errors = refused_in_a_fresh_interpreter(commands, tmp_path)
    assert imported == ["imported: 2 []"] * 3, errors
    assert errors == ["markovformer: error: runs/demo: not a run directory (no config.yaml)",
                      "markovformer: error: runs/dmeo: not a run directory (no config.yaml)",
                      "markovformer: error: trainer.max_steps is set twice, to different values: "
                      "'trainer.max_steps=5', then 'trainer.max_steps=6'; give it once"]  # fmt: skip
    assert [path.name for path in (tmp_path / "runs").iterdir()] == ["demo"]
    assert not any((tmp_path / "runs" / "demo").iterdir())


def test_a_mistyped_experiment_setting_is_refused_before_lightning(tmp_path):
    """`experiment NAME` quieted Lightning's loggers, importing it (and torchmetrics, transformers, scipy), before the
    experiment checked its settings: `experiment landscape --set typo=1` waited 20 s of a loaded 2-core CPU for its
    one line. Lightning is quieted once the experiment has opened its folder, its settings checked."""
    commands = [["experiment", "landscape", "--set", "typo=1"], ["experiment", "table1", "--set", "steps=-3"]]
    imported, errors = refused_in_a_fresh_interpreter(commands, tmp_path)
    assert imported == ["imported: 2 []"] * 2, errors
    assert errors == ["markovformer: error: unknown key landscape.typo; the keys of landscape: chains, starts, lr, "
                      "steps", "markovformer: error: table1.steps=-3: must be > 0"]  # fmt: skip
    assert not (tmp_path / "runs").exists()


def test_a_bad_trainer_value_is_refused_before_lightning(tmp_path, tiny_config):
    """A trainer value the run's own checks refuse (a warm-up past max_steps, more loader workers than cores, several
    nodes from one machine) was refused by the runner's train(), whose import brings Lightning and the rest:
    `train tiny.yaml trainer.warmup_steps=100` waited 19 s of a loaded 2-core CPU for its one line. A new run's
    checks are made before the runner is imported, the lines unchanged."""
    commands = [["train", str(tiny_config), "trainer.warmup_steps=100"],
                ["train", str(tiny_config), "trainer.num_workers=100000"],
                ["train", str(tiny_config), "trainer.num_nodes=2"]]  # fmt: skip
    imported, errors = refused_in_a_fresh_interpreter(commands, tmp_path)
    assert imported == ["imported: 2 []"] * 3, errors
    cores = usable_cores()
    assert errors == ["markovformer: error: trainer.warmup_steps=100 is larger than trainer.max_steps=40: the "
                      "learning rate would never reach trainer.lr; set trainer.warmup_steps <= 40 (or leave it out: "
                      "min(100, max_steps))",
                      f"markovformer: error: trainer.num_workers=100000 is more than the {cores} CPU cores this "
                      f"process may use; give trainer.num_workers <= {cores} (0 loads the batches in the main "
                      f"process)",
                      "markovformer: error: trainer.num_nodes=2 needs a multi-node launch, and this process was "
                      "started on one machine alone; run the command on every node (srun under SLURM, torchrun "
                      "--nnodes=2, or with MASTER_ADDR, MASTER_PORT and NODE_RANK set on each), or train on one "
                      "machine with trainer.num_nodes=1"]  # fmt: skip
    assert not (tmp_path / "runs").exists()

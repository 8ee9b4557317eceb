"""A run inside a SLURM job (the variables srun sets for one task) trains what it trains outside one: Lightning's
SLURM auto-requeue machinery, which writes and reads ``hpc_ckpt_N.ckpt`` files in the working folder, stays out."""

from __future__ import annotations

import json
import shutil
import signal

import yaml

SLURM_ONE_TASK = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_PROCID": "0",
                  "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "1", "SLURM_JOB_NAME": "train.sh",
                  "SLURM_NODELIST": "node01", "SLURM_CPUS_PER_TASK": "1"}  # fmt: skip


def _metrics(folder) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def test_a_fresh_run_in_a_slurm_job_ignores_another_runs_hpc_checkpoint_in_the_working_folder(
    main_cli, tmp_path, tiny_run
):
    """Lightning resumed any fit under SLURM from the newest ``hpc_ckpt_N.ckpt`` of its default_root_dir, the
    working folder, where its SIGUSR1 handler had saved one: a fresh 40-step run started at step 20 of another run
    (validation loss 1.1440 where the run itself scores 1.1192), or trained nothing when that step was past its
    max_steps."""
    short = {**tiny_run, "trainer": {**tiny_run["trainer"], "max_steps": 20}}
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(short))
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(tiny_run))
    assert main_cli("train", "full.yaml", "output_dir=outside").returncode == 0
    assert main_cli("train", "short.yaml", "output_dir=other").returncode == 0
    shutil.copy(tmp_path / "other" / "checkpoints" / "step-000020.ckpt", tmp_path / "hpc_ckpt_1.ckpt")
    inside = main_cli("train", "full.yaml", "output_dir=inside", env=SLURM_ONE_TASK)
    assert inside.returncode == 0, inside.stderr
    assert _metrics(tmp_path / "inside")["val"] == _metrics(tmp_path / "outside")["val"]


def test_a_run_in_a_slurm_job_leaves_sigusr1_alone(main_cli, tmp_path, tiny_config, monkeypatch):
    """Lightning's SLURM handler of SIGUSR1 saved an ``hpc_ckpt_N.ckpt`` into the working folder (outside the run,
    read back by the next run started there) and ran ``scontrol requeue``; the run installs no SIGUSR1 handler."""
    from lightning.pytorch.trainer.connectors.signal_connector import _SignalConnector

    seen = []
    register = _SignalConnector.register_signal_handlers

    def noting(connector) -> None:
        register(connector)
        seen.append(signal.getsignal(signal.SIGUSR1))

    monkeypatch.setattr(_SignalConnector, "register_signal_handlers", noting)
    before = signal.getsignal(signal.SIGUSR1)
    assert main_cli("train", str(tiny_config), "output_dir=run", env=SLURM_ONE_TASK).returncode == 0
    assert seen and all(handler is before for handler in seen)


SLURM_NTASKS_ONLY = {**{key: value for key, value in SLURM_ONE_TASK.items() if key != "SLURM_NTASKS_PER_NODE"},
                     "SLURM_NTASKS": "2"}  # fmt: skip  (what sbatch --ntasks=2 sets)


def test_a_single_process_run_in_a_job_of_several_tasks_trains_as_outside_it(main_cli, tmp_path, tiny_config):
    """Lightning's SLURM environment refused it with a RuntimeError traceback (exit status 1) naming --ntasks, though
    a run of one process takes nothing from the job's tasks."""
    assert main_cli("train", str(tiny_config), "output_dir=outside").returncode == 0
    inside = main_cli("train", str(tiny_config), "output_dir=inside", env=SLURM_NTASKS_ONLY)
    assert inside.returncode == 0, inside.stderr
    assert _metrics(tmp_path / "inside")["val"] == _metrics(tmp_path / "outside")["val"]


def test_a_run_of_several_processes_without_per_node_tasks_is_refused_in_one_line(main_cli, tmp_path, tiny_config):
    result = main_cli("train", str(tiny_config), "output_dir=run", "trainer.devices=2", "trainer.strategy=ddp",
                      env=SLURM_NTASKS_ONLY)  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "SLURM_NTASKS=2" in lines[0] and "--ntasks-per-node" in lines[0], result.stderr
    assert not (tmp_path / "run").exists()

"""What a run records about where it ran, so that it can be reproduced."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

CUDA_INDEX = "https://download.pytorch.org/whl/cu126"  # an example CUDA wheel index for the install hint
GPU_ACCELERATORS = ("gpu", "cuda")


def check_accelerator(accelerator: str) -> None:
    """Refuse a GPU accelerator that this torch cannot use, on one line saying how to get one; before any work.

    ``gpu``/``cuda`` needs a CUDA build of torch and a visible device; ``mps`` needs Apple's Metal backend.
    """
    import torch

    name = accelerator.lower()
    if name in GPU_ACCELERATORS and not torch.cuda.is_available():
        if torch.version.cuda is None:
            raise ValueError(
                f"trainer.accelerator={accelerator!r}: this torch {torch.__version__} is a CPU-only build; install a "
                f"CUDA build (in a clone: make setup TORCH_INDEX={CUDA_INDEX}, after make clean; or pip install torch "
                f"--index-url {CUDA_INDEX}), or train with trainer.accelerator=cpu"
            )
        raise ValueError(
            f"trainer.accelerator={accelerator!r}: torch {torch.__version__} is a CUDA build but sees no GPU "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); check the driver with "
            "nvidia-smi, or train with trainer.accelerator=cpu"
        )
    if name == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"trainer.accelerator={accelerator!r}: this machine or torch build has no MPS (Apple GPU) "
                         "backend; train with trainer.accelerator=cpu")  # fmt: skip


def check_precision(precision: str, accelerator: str) -> None:
    """Refuse ``trainer.precision=16-mixed`` on a run that trains on the CPU (``cpu``, or ``auto`` without a GPU),
    before any work: Lightning has no float16 autocast there and trains bf16-mixed instead, saying so in a warning
    only, while the run's config.yaml would record 16-mixed. Checked for new runs (older ones resume as they
    trained)."""
    import torch

    gpu = accelerator in GPU_ACCELERATORS or accelerator == "mps" or (
        accelerator == "auto" and (torch.cuda.is_available() or torch.backends.mps.is_available()))  # fmt: skip
    if precision == "16-mixed" and not gpu:
        raise ValueError(f"trainer.precision='16-mixed' needs a GPU: on the CPU (trainer.accelerator={accelerator!r}) "
                         "there is no float16 autocast; use trainer.precision=bf16-mixed (what Lightning would "
                         "silently train instead) or 32-true")  # fmt: skip


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def launched_on_several_nodes() -> bool:
    """True when the environment shows a multi-node launch: SLURM with more than one node, torchrun with a world
    larger than this node's processes, or Lightning's manual launch (``NODE_RANK`` and ``MASTER_ADDR`` set)."""
    slurm_nodes = _env_int("SLURM_NNODES") or _env_int("SLURM_JOB_NUM_NODES")
    world, local_world = _env_int("WORLD_SIZE"), _env_int("LOCAL_WORLD_SIZE")
    return bool(
        (slurm_nodes is not None and slurm_nodes > 1)
        or (world is not None and local_world is not None and world > local_world)
        or (os.environ.get("NODE_RANK") and os.environ.get("MASTER_ADDR"))
    )


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the system has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_cores(num_workers: int = 0, threads: int | None = None) -> None:
    """Refuse more data loader workers, or torch intra-op threads, than ``usable_cores``, before any work: each
    loader forks all its workers, and far too many exhaust the machine's memory (the command killed, its workers
    left running); threads past the cores only contend for them (the default is capped there for that reason)."""
    cores = usable_cores()
    for name, value in (("num_workers", num_workers), ("threads", threads)):
        if value is not None and value > cores:
            zero = " (0 loads the batches in the main process)" if name == "num_workers" else ""
            raise ValueError(f"trainer.{name}={value} is more than the {cores} CPU cores this process may use; give "
                             f"trainer.{name} <= {cores}{zero}")  # fmt: skip


def check_nodes(num_nodes: int) -> None:
    """Refuse ``trainer.num_nodes`` > 1 unless a multi-node launcher started this process, before any work:
    started on one machine alone, the processes would wait forever for the other nodes to join."""
    if num_nodes > 1 and not launched_on_several_nodes():
        raise ValueError(
            f"trainer.num_nodes={num_nodes} needs a multi-node launch, and this process was started on one machine "
            f"alone; run the command on every node (srun under SLURM, torchrun --nnodes={num_nodes}, or with "
            "MASTER_ADDR, MASTER_PORT and NODE_RANK set on each), or train on one machine with trainer.num_nodes=1"
        )


def cluster_plugins(processes: int) -> list:
    """Lightning's cluster environment for a run of ``processes`` processes inside a SLURM job, without its
    auto-requeue: that handler of SIGUSR1 saved an ``hpc_ckpt_N.ckpt`` outside the run and called ``scontrol
    requeue``. (Lightning also resumes a fit under SLURM from such a file in the Trainer's ``default_root_dir``,
    which is the run's folder, where none is written.) A SLURM job is stopped with SIGTERM, which stops the run
    after its step, as outside SLURM. A single-process run takes nothing from the job's tasks (Lightning refused
    one in a ``--ntasks=N`` job with a traceback); a run of several processes needs srun's per-node tasks."""
    from lightning.fabric.plugins.environments import LightningEnvironment, SLURMEnvironment

    if not SLURMEnvironment.detect():
        return []
    if processes == 1:
        return [LightningEnvironment()]
    try:
        return [SLURMEnvironment(auto_requeue=False)]
    except RuntimeError as error:  # Lightning's check of srun's variables: --ntasks without --ntasks-per-node
        raise ValueError(f"SLURM_NTASKS={os.environ.get('SLURM_NTASKS')} without SLURM_NTASKS_PER_NODE: {error} "
                         "(one task per process of the run)") from None  # fmt: skip


def environment_record() -> dict:
    import lightning
    import numpy
    import torch

    return {
        "command": sys.argv,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "lightning": lightning.__version__,
        "numpy": numpy.__version__,
        **code_version(),
    }


@functools.cache
def git_commit() -> str | None:
    """The commit of markovformer's source checkout, ``+dirty`` when its tracked files differ from it; None when
    the imported package is not a git checkout's tracked files (an installed copy, even one inside a repository's
    virtual environment) or git is missing."""
    import markovformer

    source = Path(markovformer.__file__).resolve().parent
    try:
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "__init__.py"], cwd=source,
                                 capture_output=True, text=True, timeout=5)  # fmt: skip
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True, timeout=5)
        if tracked.returncode != 0 or head.returncode != 0:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "."], cwd=source,
                                capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if status.returncode == 0 and status.stdout.strip() else "")


def code_version() -> dict:
    """Which markovformer produced a result: its version and ``git_commit()``."""
    import markovformer

    return {"markovformer": markovformer.__version__, "git_commit": git_commit()}

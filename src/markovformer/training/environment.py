"""What a run records about where it ran, so that it can be reproduced."""

from __future__ import annotations

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


def environment_record() -> dict:
    import lightning
    import numpy
    import torch

    import markovformer

    record = {
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
        "markovformer": markovformer.__version__,
        "git_commit": None,
    }
    try:
        source = Path(markovformer.__file__).resolve().parent
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True, timeout=5)
        if done.returncode == 0:
            record["git_commit"] = done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return record

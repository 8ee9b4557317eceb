"""What a run records about where it ran, so that it can be reproduced."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path


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

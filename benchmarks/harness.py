"""What the benchmark scripts share: a case in a fresh child process, its peak memory, and the JSON record.

Scripts run as ``python benchmarks/NAME.py``, so this module is imported as ``harness`` from their folder.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from markovformer.atomic import atomic_write_text
from markovformer.bench.measure import PeakMemory

T = TypeVar("T")


def with_peak_mib(run: Callable[[], T]) -> tuple[T, float]:
    """``run()``'s result and its peak resident memory above the start, in MiB (``markovformer.bench``'s reading:
    CPU tensors are not counted by any allocator statistic)."""
    meter = PeakMemory("cpu")
    meter.start()
    result = run()
    return result, meter.peak_mib()


def run_child(script: str, arguments: list[str]) -> dict:
    """Run ``script`` with ``arguments`` in a fresh interpreter; its last stdout line is a JSON row. A failing child
    gives ``{"error": <the end of its stderr>}``."""
    done = subprocess.run([sys.executable, script, *arguments], capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr[-300:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_record(output: str | Path, record: dict, threads: int) -> None:
    """Write ``record`` plus a description of this machine as JSON, atomically."""
    import torch

    machine = {"platform": platform.platform(), "processor": platform.processor(), "python": platform.python_version(),
               "torch": torch.__version__, "threads": threads}  # fmt: skip
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output, json.dumps({"machine": machine, **record}, indent=2) + "\n")
    print(f"wrote {output}")

""".ci/gpu-checks, the script a lent GPU runs once per session: what it prints is all a session sees at once of the
machine's work (its files come back apart), so a failing CUDA test run must show its summary there."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("bash") is None, reason="the script is bash")
def test_a_failing_cuda_test_run_shows_its_summary(tmp_path):
    """`... >cuda-tests.txt 2>&1 && tail cuda-tests.txt` printed the tail only when every test passed: a failed run
    printed nothing of it. Here python3 is a stub whose pytest fails."""
    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir()
    stub.write_text('#!/usr/bin/env bash\nif [[ "$*" == *"-m pytest"* ]]; then\n'
                    '    echo "FAILED tests/models/test_cuda.py::test_x"; echo "1 failed"; exit 1\nfi\n'
                    'echo "torch (a stub)"\n')  # fmt: skip
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{stub.parent}{os.pathsep}{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "GPU_CHECKS_PARTS": "tests"}  # fmt: skip
    done = subprocess.run(["bash", str(ROOT / ".ci" / "gpu-checks")], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert "FAILED tests/models/test_cuda.py::test_x" in done.stdout and "1 failed" in done.stdout, done.stdout
    assert (tmp_path / "out" / "cuda-tests.txt").is_file()

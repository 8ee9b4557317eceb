"""Shared test settings."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    """The suite runs thousands of tiny ops: one intra-op thread avoids thread start-up and, on a busy 2-core
    machine, spin-wait contention that made them up to 100x slower. Restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)

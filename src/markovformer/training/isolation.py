"""A run in its caller's process (a notebook, a sweep script, an experiment): what it must neither take from the
caller nor leave behind. The runner, the readers of a run and ``run_experiment`` share these."""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Iterator

import numpy as np
import torch


def built_on_the_cpu(function):
    """``function`` building its tensors on the CPU, whatever default device its caller set: the Python API's runs
    (train, resume, evaluate, inspect, a run's loading) build their data and models there, as in a fresh process, and
    move them to ``trainer.accelerator``'s device themselves. A caller's ``torch.set_default_device`` (a notebook's
    'cuda') otherwise built them there: under 'meta', a run failed in its first steps and a run's loading failed
    ('Cannot copy out of meta tensor'). Scoped to the call and only where the default is not the CPU: a global
    ``torch.set_default_device("cpu")`` installs a function mode that doubles the cost of every tensor factory
    call, and stays installed."""

    @functools.wraps(function)
    def on_the_cpu(*args, **kwargs):
        cpu = torch.device("cpu") if torch.get_default_device().type != "cpu" else contextlib.nullcontext()
        with cpu:
            return function(*args, **kwargs)

    return on_the_cpu


@contextlib.contextmanager
def random_states_kept() -> Iterator[None]:
    """The global random states of torch (CUDA's too), numpy and Python, put back when the block ends, however it
    ends (an error, a Ctrl-C): what a run seeds for itself is not what its caller draws from next. (Not Lightning's
    isolate_rng, which puts them back only when its block ends normally.)"""
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)

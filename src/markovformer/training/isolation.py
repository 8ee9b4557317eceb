"""A run in its caller's process (a notebook, a sweep script, an experiment): what it must neither take from the
caller nor leave behind. The runner, the readers of a run and ``run_experiment`` share these."""

from __future__ import annotations

import contextlib
import functools
import os
import random
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

import numpy as np
import torch

Params = ParamSpec("Params")
Result = TypeVar("Result")


def built_on_the_cpu(function: Callable[Params, Result]) -> Callable[Params, Result]:
    """``function`` building its tensors on the CPU, whatever default device its caller set: the Python API's runs
    (train, resume, evaluate, inspect, a run's loading, an experiment's cells) build their data and models there, as
    in a fresh process, and move them to ``trainer.accelerator``'s device themselves. A caller's
    ``torch.set_default_device`` (a notebook's 'cuda') otherwise built them there: under 'meta', a run failed in its
    first steps and a run's loading failed ('Cannot copy out of meta tensor'). Scoped to the call and only where the
    default is not the CPU: a global ``torch.set_default_device("cpu")`` installs a function mode that doubles the
    cost of every tensor factory call, and stays installed."""

    @functools.wraps(function)
    def on_the_cpu(*args: Params.args, **kwargs: Params.kwargs) -> Result:
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


# The environment variables Lightning sets for a run: seed_everything's (for the processes a run starts), and cuBLAS's
# workspace, which a deterministic run fixes.
RUN_VARIABLES = ("PL_GLOBAL_SEED", "PL_SEED_WORKERS", "CUBLAS_WORKSPACE_CONFIG")


@contextlib.contextmanager
def process_settings_kept(threads: int) -> Iterator[None]:
    """A block run with ``threads`` intra-op threads and torch's default dtype float32, as in a fresh process (a
    run's precision, ``trainer.precision``, casts from there: under a caller's float64 default a 32-true run trained
    and saved float64 weights, other numbers). When it ends, however it ends (an error, a Ctrl-C), the caller's
    settings are put back: the thread count and default dtype, torch's deterministic-algorithms setting, which
    Lightning sets to ``trainer.deterministic`` for a run (left on after a deterministic run, or off after a default
    one in a session that had turned it on), cuDNN's benchmark flag (a deterministic run turns it off) and the
    variables ``RUN_VARIABLES`` (left set, a caller's own ``seed_everything()`` took the run's seed and its own
    Lightning loaders got Lightning's worker seeding)."""
    previous_threads, default_dtype = torch.get_num_threads(), torch.get_default_dtype()
    deterministic = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    benchmark = torch.backends.cudnn.benchmark
    variables = {name: os.environ.get(name) for name in RUN_VARIABLES}
    torch.set_num_threads(threads)
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_num_threads(previous_threads)
        torch.set_default_dtype(default_dtype)
        if (torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled()) != deterministic:  # fmt: skip
            # only when changed: the call imports torch._inductor, seconds a refused experiment need not wait for
            torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        torch.backends.cudnn.benchmark = benchmark
        for name, value in variables.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

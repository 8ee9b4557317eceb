"""``--set key=value`` for experiments: a module's settings dataclass with the user's changes, checked by the same
coercion as run configs (so a misspelt key gets a suggestion and a wrong type names the key); and ``--seeds`` for
the experiments that run one seed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from markovformer.advice import said_as
from markovformer.models.generation import sampling_options
from markovformer.training.run_config import ConfigError, build_dataclass

SettingsT = TypeVar("SettingsT")


def configure(base: SettingsT, overrides: dict[str, Any] | None, name: str,
              resolve: Callable[[SettingsT], SettingsT] | None = None) -> SettingsT:  # fmt: skip
    """``base`` with ``overrides`` applied, then ``resolve`` (an experiment's presets, which set the steps and a
    warm-up of their own but keep what ``overrides`` names); errors name ``name.key``. A list the defaults fill (a
    grid's kinds, widths, learning rates) may not be emptied, unless the settings class names it in ``MAY_BE_EMPTY``
    (an optional part): ``kinds=[]`` ran nothing and reported it with exit status 0, or failed later on an index.
    Nor may such a list repeat a value: ``rows=[a, a]`` reported one run twice, as a mean of n = 2 with a spread of
    0. A number may not be negative, nor 0 where its default is positive or None unless the class names it in
    ``MAY_BE_ZERO``; a warm-up may not outlast the steps (the resolved settings': a preset's 5,000 steps take a
    warm-up of 3,000); a sampling option may not be set beside temperature=0 (``_check_sampling``)."""
    resolve = resolve or (lambda settings: settings)
    if not overrides:
        return resolve(base)
    grids = {field.name for field in dataclasses.fields(base) if ", ...]" in str(field.type)}  # tuple[X, ...]
    for key, value in overrides.items():
        emptied = isinstance(value, list | tuple) and not value and getattr(base, key, None)
        if emptied and key not in getattr(base, "MAY_BE_EMPTY", ()):
            raise ConfigError(f"{name}.{key}=[]: give at least one value")
        shown = [repr(item) for item in value] if key in grids and isinstance(value, list | tuple) else []
        if len(set(shown)) < len(shown):  # one cell counted twice in a mean and its spread
            raise ConfigError(f"{name}.{key}={list(value)!r} repeats a value; give each once")
    settings = build_dataclass(type(base), {**dataclasses.asdict(base), **overrides}, name)
    for key in overrides:
        _check_sign(settings, base, key, name)
    _check_sampling(settings, overrides, name)
    if "device" in overrides:
        check_device(settings.device, name)
    settings = resolve(settings)
    warmup, steps = getattr(settings, "warmup_steps", None), getattr(settings, "steps", None)
    if isinstance(warmup, int) and isinstance(steps, int) and warmup > steps:  # the rate would never peak
        shorter = said_as("--set warmup_steps=N", "overrides={'warmup_steps': N}")
        raise ConfigError(f"{name}.warmup_steps={warmup} is larger than {name}.steps={steps}: the learning rate would "
                          f"never reach its peak; {shorter} with N <= {steps}")  # fmt: skip
    return settings


def _check_sign(settings, base, key: str, name: str) -> None:
    """A number the user set may not be negative (no setting is), nor 0 where its default is positive or None (a
    count, a size, a step count, a learning rate, an optional number), unless the class names it in ``MAY_BE_ZERO``
    (a warm-up, a tolerance, an option 0 turns off): ``starts=-3`` failed deep inside torch, ``steps=0`` reported
    untrained runs."""
    value, default = getattr(settings, key), getattr(base, key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    positive = default is None or (isinstance(default, int | float) and default > 0)  # None: an optional number
    positive = positive and key not in getattr(base, "MAY_BE_ZERO", ())
    if value < 0 or value == 0 and positive:  # a negative one named the bound ">= 0" where 0 is refused too
        raise ConfigError(f"{name}.{key}={0 if value == 0 else value!r}: must be {'> 0' if positive else '>= 0'}")


def _check_sampling(settings, overrides: dict[str, Any], name: str) -> None:
    """A sampling option the user set (one the class names in ``SAMPLING_OPTIONS``) is refused beside temperature=0,
    naming both: greedy decoding reads none, so ``temperature=0 top_p=0.5`` sampled as temperature=0 alone. The
    class's own value (a default nucleus) is not the user's, and one that changes no draw (top_p=1:
    ``models.generation.sampling_options``) is kept."""
    if getattr(settings, "temperature", None) != 0:
        return
    typed = {key: getattr(settings, key) for key in getattr(settings, "SAMPLING_OPTIONS", ()) if key in overrides}
    ignored = sampling_options(0, typed.get("top_k"), typed.get("top_p"))
    if ignored:
        key, value = next(iter(ignored.items()))
        raise ConfigError(f"{name}.{key}={value!r}: {name}.temperature=0 (greedy decoding) does not sample, so {key} "
                          f"would be ignored; give one of them")  # fmt: skip


def check_device(device: str, name: str) -> None:
    """ConfigError naming ``name.device`` unless torch reads ``device`` as the CPU or a GPU this process has: an
    experiment's ``device`` setting (mixers, mat-order), which failed in its first cell with a traceback."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ConfigError(f"{name}.device={device!r} is no torch device ({error}); use 'cpu' or 'cuda'") from None
    if parsed.type not in ("cpu", "cuda"):
        raise ConfigError(f"{name}.device={device!r}: the cells run on 'cpu' or 'cuda'")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{name}.device={device!r}: this torch sees no GPU (torch {torch.__version__}); use 'cpu'")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ConfigError(f"{name}.device={device!r}: this machine has {torch.cuda.device_count()} GPU(s), "
                          f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")  # fmt: skip


def single_seed(seeds: tuple[int, ...] | None, name: str) -> int:
    """The one seed of an experiment that reports one run (seed 0 by default): several are refused, not cut to the
    first, since its report shows no spread over seeds."""
    if seeds is not None and len(seeds) > 1:
        raise ValueError(f"{name} runs one seed, got {given_seeds(seeds)}: run it once per seed, each with its own "
                         f"{said_as('--out', 'out_dir')}")  # fmt: skip
    return seeds[0] if seeds else 0


def given_seeds(seeds: Sequence[int]) -> str:
    """``seeds`` in their caller's words (``advice.said_as``): ``--seeds 0 1`` on the command line, ``seeds=(0, 1)``
    (run_experiment's argument, as given) from Python."""
    return said_as(f"--seeds {' '.join(map(str, seeds))}", f"seeds={seeds!r}")


def check_chains(chains: tuple[tuple[float, float], ...], name: str) -> None:
    """Refuse a switching chain (p, q) that ``switching_chain`` refuses, naming ``name.chains``, before the experiment
    opens its folder: ``chains=[[0.2, 1.5]]`` failed in its first cell as "q must lie in [0, 1], got 1.5"."""
    from markovformer.markov import switching_chain

    for p, q in chains:
        try:
            switching_chain(p, q)
        except ValueError as error:
            raise ValueError(f"{name}.chains: [{p}, {q}]: {error}") from None

"""The example run configs shipped inside the package (``markovformer/configs/*.yaml``) and how a config argument
finds its file: a path that exists, else a shipped config named bare (``text_char``) or as a clone spells it
(``configs/text_char.yaml``), so README commands work from a wheel as from a clone."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from markovformer.advice import suggest
from markovformer.training.trainer_config import ConfigError

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "configs"


def shipped_configs() -> dict[str, Path]:
    """Name (the file's stem) -> path of every shipped config, sorted by name."""
    return {path.stem: path for path in sorted(SHIPPED_DIR.glob("*.yaml"))}


def config_summary(path: Path) -> str:
    """The first sentence of a config's leading comment (its lines joined up to the first command line, indented
    after the ``#``), without its full stop: what ``markovformer config list`` prints."""
    words = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#") or line.startswith("#  "):
            break
        words.append(line.lstrip("#").strip())
    sentence = re.split(r"\.\s+(?=[A-Z])", " ".join(words), maxsplit=1)[0]  # not at "e.g. x" or "et al. 2023"
    return sentence.rstrip(".:")


def shipped_config(name: str) -> Path:
    """The shipped config ``name`` (``text_char``, ``text_char.yaml`` or ``configs/text_char.yaml``); ConfigError
    naming the known ones otherwise."""
    stem = Path(name).name.removesuffix(".yaml")
    configs = shipped_configs()
    if stem not in configs:
        raise ConfigError(f"no shipped config {name!r}{suggest(stem, configs)}; `markovformer config list` names them")
    return configs[stem]


def locate_config(argument: str | Path) -> Path:
    """The file a config argument names: an existing path as given, or with ``.yaml`` added (``NAME`` finds the
    ``NAME.yaml`` that ``config copy NAME`` wrote here); else, for a bare name or a path inside a folder named
    ``configs``, the shipped config of that name."""
    path = Path(argument)
    for own in (path, path.with_name(f"{path.name}.yaml")) if path.suffix != ".yaml" else (path,):
        if own.is_file():
            return own
    bare = path.parent == Path(".") or path.parent.name == "configs"
    if bare and path.name.removesuffix(".yaml") in shipped_configs():
        return shipped_config(path.name)
    close = suggest(path.name.removesuffix(".yaml"), shipped_configs()) if bare else ""
    hint = f"{close}; shipped configs are named by `markovformer config list`" if bare else ""
    raise ConfigError(f"{path}: no such config file{hint}")


def copy_destination(dest: str | None, name: str) -> Path:
    """Where ``markovformer config copy`` writes the shipped config file ``name`` (``NAME.yaml``) for its DEST
    argument: ``./NAME.yaml`` when DEST is omitted; inside DEST, as ``NAME.yaml``, when DEST is an existing folder or
    ends in a path separator (a folder, as for ``cp``); DEST itself otherwise. ConfigError naming the folder the copy
    would go in when that folder is missing or is not a folder: like ``cp``, nothing is created."""
    if not dest:
        return Path(name)
    path = Path(dest)
    if dest.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)) or path.is_dir():
        folder, target = path, path / name
    else:
        folder, target = path.parent, path
    if not folder.is_dir():
        problem = f"{folder} is not a folder" if folder.exists() else f"no such folder {folder}"
        hint = "" if folder.exists() else f"; create it first (mkdir -p {shlex.quote(str(folder))})"
        raise ConfigError(f"cannot copy {name} to {dest}: {problem}{hint}")
    return target

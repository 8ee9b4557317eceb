"""espeak-ng, the speech synthesiser behind the ``digits`` recipe: the one on PATH, or else Debian's package with
whatever libraries this system lacks (its Depends closure minus what is installed), unpacked in temporary folders
and run through LD_LIBRARY_PATH and ESPEAK_DATA_PATH, so nothing is installed system-wide."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from torch import Tensor

from markovformer.data.readers.audio import read_wav
from markovformer.data.recipes.debian import unpacked_debian_package


def parse_apt_depends(text: str) -> list[list[str]]:
    """The Depends / Pre-Depends of ``apt-cache depends PACKAGE`` output as or-groups of package names (``|``
    joins a group; a virtual ``<name>`` is replaced by its first provider, or dropped when none is listed)."""
    groups: list[list[str]] = []
    open_group = False
    for line in text.splitlines()[1:]:
        match = re.match(r"^\s*(\|)?(?:Pre)?Depends:\s*(\S+)", line)
        if match:
            if not open_group:
                groups.append([])
            groups[-1].append(match.group(2))
            open_group = match.group(1) is not None
        elif re.match(r"^\s{4,}\S+$", line) and groups and groups[-1][-1].startswith("<"):
            groups[-1][-1] = line.strip()  # the first provider of a virtual package
    return [[name for name in group if not name.startswith("<")] for group in groups if group]


def _installed(package: str) -> bool:
    done = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status}", package], capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == "installed"


def packages_to_fetch(package: str) -> list[str]:
    """``package`` and every package of its Depends closure that this system lacks (an or-group is met by any
    installed member, else its first member is fetched)."""
    for tool in ("apt-cache", "dpkg-query"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"resolving the {package} package needs {tool!r} (a Debian or Ubuntu system)")
    fetch, queue = [], [package]
    while queue:
        name = queue.pop(0)
        if name in fetch:
            continue
        fetch.append(name)
        done = subprocess.run(["apt-cache", "depends", name], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"apt-cache depends {name} failed: {(done.stderr or done.stdout).strip()[-200:]}")
        for group in parse_apt_depends(done.stdout):
            if group and not any(member in fetch or _installed(member) for member in group):
                queue.append(group[0])
    return fetch


@contextmanager
def espeak_ng() -> Iterator[tuple[list[str], dict[str, str]]]:
    """``(command, environment)`` that runs espeak-ng: the one on PATH, or else Debian's ``espeak-ng`` with the
    packages this system lacks, unpacked in temporary folders (removed on exit) and found through LD_LIBRARY_PATH
    and ESPEAK_DATA_PATH. Raises RuntimeError when neither works, naming what is missing."""
    if shutil.which("espeak-ng") is not None:
        yield ["espeak-ng"], dict(os.environ)
        return
    if shutil.which("apt-get") is None:
        raise RuntimeError("speech synthesis needs espeak-ng: install it (apt-get install espeak-ng) or run on a "
                           "Debian or Ubuntu system where apt-get can fetch it; neither is on PATH")  # fmt: skip
    with ExitStack() as stack:
        roots = [stack.enter_context(unpacked_debian_package(name)) for name in packages_to_fetch("espeak-ng")]
        binary = next((root / "usr/bin/espeak-ng" for root in roots if (root / "usr/bin/espeak-ng").is_file()), None)
        data = next((path for root in roots for path in root.glob("usr/lib/*/espeak-ng-data")), None)
        if binary is None or data is None:
            raise RuntimeError("the espeak-ng packages lack usr/bin/espeak-ng or espeak-ng-data; their layout changed")
        libraries = sorted({str(path.parent) for root in roots for path in root.glob("**/*.so*")})
        inherited = [os.environ["LD_LIBRARY_PATH"]] if os.environ.get("LD_LIBRARY_PATH") else []
        # no empty entry: the loader reads one as the working folder, searched before the system's libraries
        search_path = os.pathsep.join([*libraries, *inherited])
        environment = dict(os.environ, ESPEAK_DATA_PATH=str(data), LD_LIBRARY_PATH=search_path)
        check = subprocess.run([str(binary), "--version"], capture_output=True, text=True, env=environment)
        if check.returncode != 0:
            raise RuntimeError(f"the unpacked espeak-ng does not run: {check.stderr.strip()[-300:]}")
        yield [str(binary)], environment


def synthesise(
    command: list[str], environment: dict[str, str], text: str, voice: str, speed: int, pitch: int, gap_ms: int
) -> tuple[Tensor, int]:
    """espeak-ng's rendering of ``text``: (samples, sample rate)."""
    with tempfile.TemporaryDirectory(prefix="markovformer-espeak-") as folder:
        wav = Path(folder) / "speech.wav"
        argv = [*command, "-v", voice, "-s", str(speed), "-p", str(pitch), "-g", str(max(0, gap_ms // 10)),
                "-w", str(wav), text]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=60)
        if done.returncode != 0 or not wav.is_file():
            raise RuntimeError(f"espeak-ng failed on {text!r} with voice {voice}: {done.stderr.strip()[-300:]}")
        return read_wav(wav)

"""Public data from Debian packages: ``apt-get download`` into a temporary folder and ``dpkg -x`` there, so nothing
is installed system-wide. The data recipes (``markovformer data prepare``) read their raw files this way."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def unpacked_debian_package(package: str) -> Iterator[Path]:
    """The root of ``package`` unpacked in a temporary folder (removed on exit), e.g. ``root / "usr/share/..."``.

    Raises RuntimeError when apt-get or dpkg is missing, the download fails (no network, or the package lists need
    ``apt-get update``) or the download leaves no ``.deb``.
    """
    for tool in ("apt-get", "dpkg"):
        if shutil.which(tool) is None:
            raise RuntimeError(
                f"fetching the {package} package needs {tool!r} (a Debian or Ubuntu system); it is not on PATH"
            )
    with tempfile.TemporaryDirectory(prefix=f"markovformer-{package}-") as folder:
        folder = Path(folder)
        _run(["apt-get", "download", package], folder, "download", package)
        debs = sorted(folder.glob(f"{package}_*.deb"))
        if not debs:
            raise RuntimeError(f"apt-get download {package} finished but left no .deb file in {folder}")
        _run(["dpkg", "-x", str(debs[0]), str(folder / "unpacked")], folder, "unpack", package)
        yield folder / "unpacked"


def package_file(root: Path, member: str, package: str) -> Path:
    """``root / member``, or RuntimeError naming the package when it lacks that file (its layout changed)."""
    path = root / member
    if not path.is_file():
        raise RuntimeError(f"the {package} package has no {member}; its layout has changed")
    return path


def _run(command: list[str], folder: Path, what: str, package: str) -> None:
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RuntimeError(f"could not {what} {package} ({' '.join(command)}): {error}") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        hint = " (no network, or run 'apt-get update' first?)" if what == "download" else ""
        raise RuntimeError(
            f"could not {what} {package}{hint}: '{' '.join(command)}' exited {done.returncode}: "
            f"{message[-1] if message else 'no message'}"
        )

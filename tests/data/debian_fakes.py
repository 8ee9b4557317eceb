"""apt-get and dpkg stand-ins for the data recipe tests: no network, no real packages.

``fake_debian(folder, packages)`` writes the scripts to ``folder/bin``: ``apt-get download P`` leaves
``P_1.0-1_all.deb`` (or fails like a missing package for names in ``failing``), ``dpkg -x P_... TARGET`` copies the
tree given for P.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def fake_debian(folder: Path, packages: dict[str, dict[str, bytes | str]], failing: tuple[str, ...] = ()) -> str:
    """Make the fake tools for ``packages`` ({package: {member path: content}}); returns a PATH putting them first."""
    bin_folder, trees = folder / "bin", folder / "trees"
    bin_folder.mkdir(parents=True)
    for package, members in packages.items():
        for member, content in members.items():
            path = trees / package / member
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)
    failures = " ".join(failing)
    scripts = {
        "apt-get": '#!/bin/sh\n[ "$1" = download ] || exit 2\n'
        f'for name in {failures}; do [ "$2" = "$name" ] && '
        '{ echo "E: Unable to locate package $2" >&2; exit 100; }; done\ntouch "$2_1.0-1_all.deb"\n',
        "dpkg": '#!/bin/sh\n[ "$1" = -x ] || exit 2\npackage=$(basename "$2" | cut -d_ -f1)\nmkdir -p "$3"\n'
        f'[ -d "{trees}/$package" ] && cp -R "{trees}/$package/." "$3/"\nexit 0\n',
    }
    for name, body in scripts.items():
        (bin_folder / name).write_text(body)
        (bin_folder / name).chmod((bin_folder / name).stat().st_mode | stat.S_IEXEC)
    return f"{bin_folder}{os.pathsep}{os.environ['PATH']}"

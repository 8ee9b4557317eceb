"""The environment espeak-ng runs in when it comes unpacked from Debian's packages (``recipes.espeak.espeak_ng``)."""

from __future__ import annotations

import os
import shutil
import stat

import pytest
from debian_fakes import fake_debian

from markovformer.data.recipes import espeak
from markovformer.data.recipes.espeak import espeak_ng

ESPEAK_TREE = {
    "usr/bin/espeak-ng": "#!/bin/sh\nexit 0\n",  # answers --version
    "usr/lib/x86_64-linux-gnu/libespeak-ng.so.1": "",
    "usr/lib/x86_64-linux-gnu/espeak-ng-data/phontab": "",
}


def _unpacked_espeak(tmp_path, monkeypatch) -> None:
    """espeak-ng not installed; apt-get, dpkg, apt-cache and dpkg-query faked to give ``ESPEAK_TREE``."""
    path = fake_debian(tmp_path / "debian", {"espeak-ng": ESPEAK_TREE})
    binary = tmp_path / "debian" / "trees" / "espeak-ng" / "usr" / "bin" / "espeak-ng"
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    tools = tmp_path / "debian" / "bin"
    for name, body in (("apt-cache", '#!/bin/sh\nprintf "$2\\n"\n'), ("dpkg-query", "#!/bin/sh\nexit 1\n")):
        (tools / name).write_text(body)
        (tools / name).chmod((tools / name).stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", path)
    real_which = shutil.which
    monkeypatch.setattr(espeak.shutil, "which", lambda tool: None if tool == "espeak-ng" else real_which(tool))


@pytest.mark.parametrize("inherited", [None, "/opt/lib"], ids=["unset", "set"])
def test_the_library_path_never_holds_the_working_folder(tmp_path, monkeypatch, inherited):
    """With LD_LIBRARY_PATH unset, the unpacked espeak-ng ran with LD_LIBRARY_PATH='LIBS:', whose empty last entry
    the dynamic loader reads as the working folder, searched before the system's: a libc.so.6 left in the folder
    `markovformer data prepare digits` ran in would have been loaded into espeak-ng (measured: LD_DEBUG=libs shows
    ld.so trying ./libc.so.6 under LD_LIBRARY_PATH='/nonexistent:'). The unpacked libraries come first, then the
    inherited path as it was, and nothing else."""
    _unpacked_espeak(tmp_path, monkeypatch)
    if inherited is None:
        monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    else:
        monkeypatch.setenv("LD_LIBRARY_PATH", inherited)
    with espeak_ng() as (command, environment):
        entries = environment["LD_LIBRARY_PATH"].split(os.pathsep)
        assert command[0].endswith("usr/bin/espeak-ng")
        assert entries[0].endswith("usr/lib/x86_64-linux-gnu") and os.path.isabs(entries[0])
        assert entries[1:] == ([] if inherited is None else [inherited])

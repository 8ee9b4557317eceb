"""The run directory's lock: its refusals name what stops the directory being made."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from markovformer.training.run_lock import run_dir_lock
from markovformer.training.trainer_config import ConfigError


@pytest.mark.parametrize(("given", "reason"), [
    ("afile", "afile is a file"),
    ("afile/sub/run", "afile is a file"),
    ("dangling", "dangling is a link to nowhere/x, which does not exist"),
    ("dangling/run", "dangling is a link to nowhere/x, which does not exist"),
])  # fmt: skip
def test_an_output_dir_that_cannot_be_a_folder_is_refused_naming_the_file_or_link_in_the_way(
    tmp_path, monkeypatch, given, reason
):
    """Each was refused as 'a path under a file: ' the path given (afile/sub/run, dangling), where the path itself
    was the file, or a link to a missing folder, or a file was its parent's parent."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    (tmp_path / "dangling").symlink_to("nowhere/x")
    message = f"cannot write a run in output_dir='{given}' ({reason}); choose a writable directory"
    with pytest.raises(ConfigError, match=re.escape(message)), run_dir_lock(Path(given)):
        pass


def test_a_filesystem_without_file_locks_is_refused_naming_the_lock_file(tmp_path, monkeypatch):
    """A cluster filesystem mounted without locks (Lustre without -o flock) fails flock with ENOSYS: the run ended in
    'markovformer: error: a file: Function not implemented', naming neither the file nor what to do."""
    import errno
    import fcntl

    def no_locks(handle, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    lock = tmp_path / "run" / ".lock"
    expected = f"^cannot lock {re.escape(str(lock))} .*Function not implemented.*output_dir"
    with pytest.raises(ConfigError, match=expected):
        with run_dir_lock(tmp_path / "run"):
            pass

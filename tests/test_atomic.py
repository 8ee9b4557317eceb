import os

import pytest

from markovformer.atomic import atomic_write, atomic_write_text


def test_write_replaces_whole_and_uses_the_usual_file_mode(tmp_path):
    target = tmp_path / "out.txt"
    atomic_write_text(target, "first")
    atomic_write(target, lambda p: (p.write_text("second"), os.chmod(p, 0o600)))  # a writer that makes 0600 files
    mask = os.umask(0)
    os.umask(mask)
    assert target.read_text() == "second"
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~mask
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old")

    def broken(path):
        path.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, broken)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_full_disk_names_the_file_being_written(tmp_path):
    """A write() or close() that fails with ENOSPC raises an OSError without a file name, so a resumed run on a full
    disk said "no space left on the device while writing a file": which file, the user could not tell."""
    import errno

    from markovformer.cli.errors import error_line

    target = tmp_path / "logs" / "metrics.csv"

    def full(path):
        path.write_text("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError) as raised:
        atomic_write(target, full)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(target)
    assert str(target) in error_line(raised.value) and "no space left" in error_line(raised.value)
    assert list((tmp_path / "logs").iterdir()) == []

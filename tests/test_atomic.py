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

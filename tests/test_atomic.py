import fcntl
import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

from markovformer.atomic import atomic_write, atomic_write_text, exclusive_lock


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


@pytest.mark.parametrize("code", ["ENOSPC", "EDQUOT", "EACCES", "EROFS"])
def test_a_failed_write_is_worded_alike_by_the_command_line_the_token_cache_and_the_run_lock(tmp_path, monkeypatch,
                                                                                           code):  # fmt: skip
    """Three helpers said a failed write three ways: the command line "no space left on the device while writing F",
    the token cache "cannot write the token cache in C (No space left on device)", the run lock "output_dir='R'
    cannot hold a run (No space left on device: R)". Each now says what stopped it, where, then its own advice."""
    import errno

    from markovformer.cli.errors import error_line
    from markovformer.data.readers.token_store import Segment, open_or_build
    from markovformer.training.run_lock import run_dir_lock
    from markovformer.training.trainer_config import ConfigError

    number = getattr(errno, code)
    reason = os.strerror(number)
    told = {"ENOSPC": "no space left on the device while writing {}", "EDQUOT": "disk quota exceeded while writing {}",
            "EACCES": f"cannot write {{}} ({reason})", "EROFS": f"cannot write {{}} ({reason})"}[code]  # fmt: skip
    advice = "free some space" if code in ("ENOSPC", "EDQUOT") else "make it writable"
    line = error_line(OSError(number, reason, "/runs/x/last.ckpt"))
    assert line == told.format("/runs/x/last.ckpt") + f"; {advice}, then run the command again"

    corpus, cache = tmp_path / "corpus.txt", tmp_path / "cache"
    corpus.write_text("abc\n" * 100, encoding="utf-8")

    def failed(text):
        raise OSError(number, reason)

    with pytest.raises(ValueError) as raised:
        open_or_build([Segment(str(corpus), 0, 400)], "{}", failed, 10, None, cache)
    assert str(raised.value).startswith(told.format(f"the token cache in {cache}") + "; nothing was cached: free "
                                        "space there, or give a writable folder as data.cache_dir")  # fmt: skip

    run, real_mkdir = tmp_path / "run", Path.mkdir

    def refused(self, *args, **kwargs):
        if self == run:
            raise OSError(number, reason, str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refused)
    where = f"a run in output_dir='{run}'"
    expected = told.format(where) if code in ("ENOSPC", "EDQUOT") else f"cannot write {where} ({reason}: {run})"
    with pytest.raises(ConfigError) as raised, run_dir_lock(run):
        pass
    assert str(raised.value) == expected + "; choose a writable directory"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device every write to fails")
def test_a_failed_write_without_an_errno_is_named_by_its_message(tmp_path):
    """numpy's tofile (the token cache's writer) reports a short write on a full disk as OSError('N requested and 0
    written'), with no errno or strerror: the token cache names that message as what stopped it."""
    import numpy as np

    from markovformer.data.readers.token_store import Segment, open_or_build

    with pytest.raises(OSError) as short, open("/dev/full", "wb") as full:
        np.arange(100_000).tofile(full)
    assert short.value.errno is None and short.value.strerror is None
    corpus, cache = tmp_path / "corpus.txt", tmp_path / "cache"
    corpus.write_text("abc\n" * 100, encoding="utf-8")

    def failed(text):
        raise short.value

    with pytest.raises(ValueError) as raised:
        open_or_build([Segment(str(corpus), 0, 400)], "{}", failed, 10, None, cache)
    assert str(raised.value).startswith(f"cannot write the token cache in {cache} (100000 requested and 0 written); "
                                        f"nothing was cached: free space there")  # fmt: skip


@pytest.mark.parametrize("proc_status", [True, False], ids=["proc", "no-proc"])
def test_reading_the_umask_never_loosens_it_for_the_other_threads(tmp_path, monkeypatch, proc_status):
    """The umask is process-wide: atomic_write read it by setting it to 0 and back, so a file another thread created
    in between got mode 0666 (measured: 1 of 488,673 files a second thread created during 20,000 atomic writes was
    world-writable under umask 022). Every mask set while writing must be at least as strict as the user's, and the
    file still gets the user's mode."""
    import markovformer.atomic as atomic

    if not proc_status:  # a system without /proc/self/status (macOS): the fallback
        monkeypatch.setattr(atomic, "PROCESS_STATUS", tmp_path / "no-such-status", raising=False)
    user_mask = os.umask(0o027)
    set_masks = []
    real_umask = os.umask

    def recording_umask(mask):
        set_masks.append(mask)
        return real_umask(mask)

    monkeypatch.setattr(os, "umask", recording_umask)
    try:
        atomic_write(tmp_path / "out.txt", lambda p: (p.write_text("x"), os.chmod(p, 0o600)))
    finally:
        monkeypatch.setattr(os, "umask", real_umask)
        os.umask(user_mask)
    assert all(mask & 0o027 == 0o027 for mask in set_masks), [oct(mask) for mask in set_masks]
    assert os.stat(tmp_path / "out.txt").st_mode & 0o777 == 0o640


def _count_under_lock(folder: Path, times: int) -> None:
    """``times`` read-increment-write rounds of ``folder/counter``, each under ``folder/.counter.lock``."""
    counter = folder / "counter"
    for _ in range(times):
        with exclusive_lock(folder / ".counter.lock", "no locks here"):
            counter.write_text(str(int(counter.read_text() or 0) + 1))


def test_exclusive_lock_keeps_writers_apart_though_each_holder_deletes_its_file(tmp_path):
    """A holder deletes the lock file as it ends, so a waiter may get the lock of a deleted file while a newcomer
    locks a new file under the name: unless the waiter checks that the name still leads to its file, both hold
    'the' lock at once (without the check, 4 processes of 300 rounds each lost rounds and read a half-written
    counter). Every round must count, and no lock file is left."""
    (tmp_path / "counter").write_text("0")
    workers = [multiprocessing.get_context("fork").Process(target=_count_under_lock, args=(tmp_path, 150))
               for _ in range(3)]  # fmt: skip
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert (tmp_path / "counter").read_text() == "450"
    assert [path.name for path in tmp_path.iterdir()] == ["counter"]


def test_exclusive_lock_waits_on_a_lock_file_it_may_read_but_not_write(tmp_path):
    """Another user's lock file in a shared folder (a token cache in /tmp) reads 0644 to this one: opened for
    writing it raised EACCES, and the block ran unlocked beside its holder, as in a read-only folder. flock needs
    no write access, so the block waits for the holder."""
    lock = tmp_path / ".shared.lock"
    lock.touch(mode=0o444)
    if os.access(lock, os.W_OK):
        pytest.skip("this process may write any file (root): an unwritable lock file cannot be made")
    held, done = threading.Event(), []

    def hold() -> None:
        descriptor = os.open(lock, os.O_RDONLY)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        held.set()
        time.sleep(0.5)
        done.append("holder")
        lock.unlink()  # as a holder does as it ends
        os.close(descriptor)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    with exclusive_lock(lock, "no locks here"):
        done.append("waiter")
    holder.join(10)
    assert done == ["holder", "waiter"]

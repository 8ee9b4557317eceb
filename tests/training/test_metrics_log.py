"""The run's logs (its CSV log, its TensorBoard events) on a full disk."""

import errno
import os
import threading

import pytest
from conftest import one_line_error  # beside this folder
from run_commands import run  # beside this file

from markovformer.training import metrics_log
from markovformer.training.log_rows import read_log_rows
from markovformer.training.metrics_log import AppendingCSVLogger


def test_a_row_that_a_full_disk_cuts_short_names_the_log(tmp_path, monkeypatch):
    """An appended row whose write fails raised an OSError without a file name: "no space left on the device while
    writing a file". It names logs/metrics.csv now, and the rows before it stay."""
    path = tmp_path / "logs" / "metrics.csv"
    log = AppendingCSVLogger(path)
    log.log_metrics({"train/loss": 0.5}, step=0)

    class FullDisk:
        def __init__(self, handle, fieldnames):
            self.handle = handle

        def writerow(self, row):
            self.handle.write("1,")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(metrics_log.csv, "DictWriter", FullDisk)
    with pytest.raises(OSError) as raised:
        log.log_metrics({"train/loss": 0.25}, step=1)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    monkeypatch.undo()
    assert read_log_rows(path) == (["step", "train/loss"], [{"step": "1", "train/loss": "0.5"}])


def test_a_full_disk_under_tensorboard_is_one_line_naming_its_folder(tiny_config, tmp_path, monkeypatch):
    """TensorBoard writes its events in a thread of its own, which raises a failed write at the run's next call
    without a file name: a full disk there printed that thread's traceback ("Exception in thread", 54 lines) and then
    "no space left on the device while writing a file". One line names the events' folder now."""
    from tensorboard.compat.tensorflow_stub.io import gfile

    def full_disk(filesystem, filename, file_content, binary_mode=False):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    printed = []  # what a process prints of a thread's uncaught error (pytest records it instead)
    monkeypatch.setattr(threading, "excepthook", printed.append)
    monkeypatch.setattr(gfile.LocalFileSystem, "write", full_disk)
    done = run("train", str(tiny_config), "output_dir=run", "trainer.max_steps=4", cwd=tmp_path)
    one_line_error(done, "no space left on the device while writing run/tensorboard")
    assert printed == [] and threading.excepthook == printed.append  # the run's own hook is gone after it

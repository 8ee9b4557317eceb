"""The run's CSV log on a full disk."""

import errno
import os

import pytest

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

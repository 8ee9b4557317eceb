"""The command line's error lines' own rules: --debug (before or after the command) shows the traceback with the same
exit status, a long line is cut, out of memory and an unwritable place say what to change, and a reader that leaves
early, Ctrl-C or a stopped `data prepare` end a command quietly or in one line, leaving nothing behind."""

import os

import pytest
from conftest import one_line_error

from markovformer.training.trainer_config import TrainingDiverged


def test_debug_shows_the_traceback_with_the_same_exit_status(main_cli):
    """--debug prints the traceback instead of the one-line message; a script that checks the exit status sees the
    same one either way (it exited 1, the interpreter's, where the one-line error exits 2)."""
    plain = main_cli("train", "trainer.max_steps=abc")
    debug = main_cli("--debug", "train", "trainer.max_steps=abc")
    assert plain.returncode == debug.returncode == 2
    assert debug.stderr.startswith("Traceback (most recent call last):") and "trainer.max_steps" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1].endswith("trainer.max_steps='abc' has the wrong type: expected int")


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    """`markovformer config list | head -1` printed "error: a file: Broken pipe" with status 2 (or a traceback): a
    closed stdout ends the command without a word, with the status of a process SIGPIPE ended, as other tools do."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "markovformer", "config", "list"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    process.stdout.close()  # before the command prints: its output goes to a pipe with no reader
    err = process.stderr.read()
    assert process.wait(timeout=60) == 141 and err == ""


@pytest.mark.parametrize("code", ["EROFS", "EACCES", "EPERM"])
def test_an_unwritable_place_is_named_with_what_to_change(code, main_cli, monkeypatch):
    """A read-only file system is the same problem as a missing permission: the path, and to make it writable. Every
    command but a run's was told to "choose a writable output_dir", an option it does not have (measured: `config
    copy NAME DEST` to a read-only place); a run's own lock names its output_dir, and a run with a config.yaml
    names itself to resume."""
    import errno
    import os

    from markovformer import atomic
    from markovformer.cli.errors import error_line

    line = error_line(OSError(getattr(errno, code), "denied", "/runs/x/config.yaml"))
    assert line == "cannot write /runs/x/config.yaml (denied); make it writable, then run the command again"

    def unwritable(path, text):
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)), str(path))

    monkeypatch.setattr(atomic, "atomic_write_text", unwritable)
    line = one_line_error(main_cli("config", "copy", "causal_lm_chain", "mine.yaml"), "cannot write mine.yaml (")
    assert "output_dir" not in line and line.endswith("make it writable, then run the command again")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads every file: no read is denied")
def test_a_denied_read_is_said_as_one_not_as_a_failed_write(tmp_path, main_cli):
    """A config, a run's file or a file in a folder the user may not read (mode 000) was said as a write: `train
    cfg.yaml` ended in "cannot write cfg.yaml (Permission denied); make it writable", as did `eval RUN` of a run
    folder the user may not open (for RUN/config.yaml). A read's denial now names the file as unreadable; a denied
    write is still one."""
    from markovformer.atomic import atomic_write_text
    from markovformer.cli.errors import error_line

    (tmp_path / "cfg.yaml").write_text("task: causal_lm\n")
    (tmp_path / "cfg.yaml").chmod(0o000)
    one_line_error(main_cli("train", "cfg.yaml"), "error: cannot read cfg.yaml: permission denied")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("task: causal_lm\n")
    run.chmod(0o000)  # the line is worded while the folder is still closed, as the command's would be
    try:
        with pytest.raises(PermissionError) as raised:
            (run / "config.yaml").read_text()
        assert error_line(raised.value) == f"cannot read {run / 'config.yaml'}: permission denied"
        run.chmod(0o555)  # readable, not writable: a write into it is refused as one
        with pytest.raises(PermissionError) as raised:
            atomic_write_text(run / "new.yaml", "x")
        assert error_line(raised.value) == (f"cannot write {run / 'new.yaml'} (Permission denied); make it writable, "
                                            f"then run the command again")  # fmt: skip
    finally:
        run.chmod(0o755)


@pytest.mark.parametrize("message", ["CUDA out of memory. Tried to allocate 2.00 GiB",
                                     "[enforce fail at alloc_cpu.cpp] DefaultCPUAllocator: can't allocate memory"])
def test_a_runtime_out_of_memory_error_is_one_line_and_exit_status_2(monkeypatch, main_cli, message):
    """torch's out-of-memory RuntimeErrors are the user's sizes, not a bug: one line saying what to lower, exit 2;
    any other RuntimeError is raised."""
    from markovformer.cli import main as cli_main

    def run_out(args):
        raise RuntimeError(message)

    monkeypatch.setitem(cli_main.COMMANDS, "config", run_out)
    one_line_error(main_cli("config", "list"), "error: out of memory", "batch_size")

    def other(args):
        raise RuntimeError("a bug")

    monkeypatch.setitem(cli_main.COMMANDS, "config", other)
    with pytest.raises(RuntimeError, match="a bug"):
        main_cli("config", "list")


def test_an_error_line_is_cut_exactly_past_max_error_line_characters():
    """The first MAX_ERROR_LINE characters are printed whole; a longer line is cut there and marked " ..."."""
    from markovformer.cli.errors import MAX_ERROR_LINE, error_line

    for n in (MAX_ERROR_LINE - 1, MAX_ERROR_LINE):
        assert error_line(ValueError("x" * n)) == "x" * n
    for n in (MAX_ERROR_LINE + 1, 3 * MAX_ERROR_LINE, 12 * MAX_ERROR_LINE):
        assert error_line(ValueError("x" * n + "\nsecond line")) == "x" * MAX_ERROR_LINE + " ..."


@pytest.mark.parametrize(("stop", "status"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_stopped_data_prepare_leaves_nothing_behind_and_says_so(tmp_path, stop, status):
    """SIGTERM's default action ended `data prepare` at once: the Debian packages it had unpacked into temporary
    folders (26 MB for digits) stayed in /tmp. Now the folders go, and one line says nothing was written."""
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import sys, tempfile, time\n"
        "from markovformer.cli.main import main\n"
        "from markovformer.data.recipes.registry import DATA_RECIPES, DataRecipe\n"
        "def prepare(out):\n"
        "    with tempfile.TemporaryDirectory(dir=sys.argv[1]) as folder:\n"
        "        print(folder, flush=True)\n"
        "        time.sleep(120)\n"
        "DATA_RECIPES['slow'] = DataRecipe('a slow one', 'slow.txt', prepare, '')\n"
        "sys.exit(main(['data', 'prepare', 'slow', '--dir', sys.argv[1]]))\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    folder = process.stdout.readline().strip()
    assert folder and (tmp_path / folder).is_dir()
    time.sleep(0.2)
    process.send_signal(getattr(signal, stop))
    _, err = process.communicate(timeout=60)
    assert process.returncode == status, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"data prepare slow was stopped before it wrote {tmp_path / 'slow.txt'}" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_outside_a_training_run_is_one_line_and_status_130(tmp_path):
    """Ctrl-C during `eval`, `generate`, `inspect` or `bench` printed the interpreter's traceback and exit status 1,
    as a bug would; it is one line naming the command, and 130 as a shell reports a process SIGINT ended."""
    import signal
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from markovformer.cli import main as cli\n"
        "def slow(args):\n"
        "    print('started', flush=True)\n"
        "    time.sleep(120)\n"
        "cli.COMMANDS['config'] = slow\n"
        "sys.exit(cli.main(['config', 'list']))\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    assert process.stdout.readline().strip() == "started"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert err.strip().splitlines() == ["markovformer: config was interrupted (Ctrl-C)"]


def test_debug_may_follow_the_command(main_cli):
    """`markovformer data show nothing --debug` (or `data --debug show nothing`) does what `markovformer --debug data
    show nothing` does."""
    before = main_cli("--debug", "data", "show", "nothing")
    assert before.returncode == 2
    for after in (main_cli("data", "show", "nothing", "--debug"), main_cli("data", "--debug", "show", "nothing")):
        assert after.returncode == 2
        assert "Traceback" in after.stderr and after.stderr.splitlines()[-1] == before.stderr.splitlines()[-1]


@pytest.mark.parametrize(("error", "status", "fragment"), [
    (TrainingDiverged("the training loss is nan at step 3"), 1, "the training loss is nan at step 3"),
    (MemoryError(), 2, "out of memory (MemoryError); lower trainer.batch_size"),
    (ModuleNotFoundError("No module named 'pyfaidx.core'", name="pyfaidx.core"), 2,
     "needs the package 'pyfaidx': pip install \"markovformer[data]\""),
])  # fmt: skip
def test_each_kind_of_users_error_is_one_line_with_its_documented_exit_status(monkeypatch, main_cli, error, status,
                                                                             fragment):  # fmt: skip
    """A diverged run exits 1 (the module docstring's promise), a MemoryError and a missing package 2, each in one
    line that says what to do, not a bug's traceback; a package is named without its submodule, so that the extra
    that installs it is found."""
    from markovformer.cli import main as cli_main

    def fail(args):
        raise error

    monkeypatch.setitem(cli_main.COMMANDS, "config", fail)
    done = main_cli("config", "list")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == status and len(lines) == 1, done.stderr
    assert lines[0].startswith("markovformer: error: ") and fragment in lines[0], lines[0]


def test_a_full_quota_says_to_free_space_as_a_full_disk_does():
    """A full quota (EDQUOT) is a write error the run resumes from (atomic.WRITE_ERRORS) but its line was the bare
    'FILE: Disk quota exceeded', without the advice a full disk's line gives."""
    import errno
    import os

    from markovformer.cli.errors import error_line

    quota = error_line(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "/runs/x/last.ckpt"))
    assert quota == "disk quota exceeded while writing /runs/x/last.ckpt; free some space, then run the command again"
    full = error_line(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/runs/x/last.ckpt"))
    assert full == "no space left on the device while writing /runs/x/last.ckpt; free some space, then run the " \
                   "command again"


def test_a_stopped_runs_other_processes_exit_with_its_status_and_print_nothing(monkeypatch, main_cli):
    """A multi-process run stopped by SIGTERM: each process ends with 143, and only the run's writer prints the line
    (``shown`` False in the others), not one copy per process."""
    import signal

    from markovformer.cli import main as cli_main
    from markovformer.training.trainer_config import RunTerminated

    def stopped(args):
        raise RunTerminated("the run was stopped (SIGTERM) at step 7", signal.SIGTERM, shown=False)

    monkeypatch.setitem(cli_main.COMMANDS, "config", stopped)
    done = main_cli("config", "list")
    assert done.returncode == 143 and done.stderr == ""


def test_a_denied_write_that_says_how_to_go_on_is_said_as_a_write_under_a_closed_folder(monkeypatch):
    """`inspect RUN --out /home/other/report` under another user's home (mode 700): the write is denied, and so is a
    stat of its path, which _read_denied took for a read: the line said "cannot read ...: permission denied" and
    dropped inspect's advice (write the report elsewhere). An error whose message says after "; " how to go on is a
    write's (only writes say so); the line names it as one, with that advice."""
    import errno

    from markovformer.cli import errors

    def closed(path, *args, **kwargs):  # what stat says under a folder this user may not search
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(errors.os, "stat", closed)
    advice = "run inspect again, or write the report elsewhere with --out FOLDER"
    denied = OSError(errno.EACCES, f"Permission denied; {advice}", "/home/other/report")
    assert errors.error_line(denied) == f"cannot write /home/other/report (Permission denied); make it writable, " \
                                        f"then {advice}"
    plain = OSError(errno.EACCES, "Permission denied", "/home/other/run/config.yaml")  # a read: says no way on
    assert errors.error_line(plain) == "cannot read /home/other/run/config.yaml: permission denied"


def test_a_denial_on_an_unreadable_file_is_a_read_unless_the_file_system_is_read_only(tmp_path, monkeypatch):
    """What the mode-000 test above checks as a user other than root, with os.access standing in for the file's mode
    (root reads every file): a denial on a file that is there and this user may not read is a read's; on one it may
    read, a write's; and a read-only file system refuses only writes (EROFS), whatever the file's mode."""
    import errno

    from markovformer.cli import errors

    unreadable, readable = tmp_path / "secret.yaml", tmp_path / "kept.yaml"
    for path in (unreadable, readable):
        path.write_text("task: causal_lm\n")
    real_access = os.access
    monkeypatch.setattr(errors.os, "access", lambda path, mode: real_access(path, mode) and
                        not (str(path) == str(unreadable) and mode & os.R_OK))  # fmt: skip
    denied = OSError(errno.EACCES, "Permission denied", str(unreadable))
    assert errors.error_line(denied) == f"cannot read {unreadable}: permission denied"
    denied = OSError(errno.EACCES, "Permission denied", str(readable))
    assert errors.error_line(denied) == f"cannot write {readable} (Permission denied); make it writable, then run " \
                                        f"the command again"
    read_only = OSError(errno.EROFS, "Read-only file system", str(unreadable))
    assert errors.error_line(read_only) == f"cannot write {unreadable} (Read-only file system); make it writable, " \
                                           f"then run the command again"

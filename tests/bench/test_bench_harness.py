"""The child-process harness: rows come back in order, and a child that fails or hangs gives clear rows; the scan
and translation-decode parts' own computations."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
import torch

from markovformer.bench.harness import ROW_PREFIX, run_in_child
from markovformer.bench.scan import scan_step, seed_style_loss, unbind_loop
from markovformer.bench.translation_decode import crossovers, translation_decode_case
from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM
from markovformer.ops.scan import linear_scan


@pytest.fixture
def child_module(tmp_path, monkeypatch):
    """Write a module the child can run with ``-m``; returns a function (name, source) -> module name."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    return write


def test_rows_before_a_time_out_survive_and_the_rest_say_why(child_module):
    module = child_module("hangs", f"""
        import json, time
        print("some library chatter")
        print({ROW_PREFIX!r} + json.dumps({{"kind": "a", "seconds": 1.5}}), flush=True)
        time.sleep(60)
        """)  # fmt: skip
    cases = [{"kind": "a"}, {"kind": "b"}, {"kind": "c"}]
    first, second, third = run_in_child(module, {}, cases, timeout=5.0)
    assert first == {"kind": "a", "seconds": 1.5}
    assert second == {"kind": "b", "error": "timed out after 5 s"}
    assert third == {"kind": "c", "skipped": "the child stopped: timed out after 5 s"}


def test_a_crashing_child_gives_its_last_error_line(child_module):
    module = child_module("crashes", """
        raise SystemExit("bad value 42 in the job")
        """)  # fmt: skip
    (row,) = run_in_child(module, {}, [{"kind": "a"}], timeout=60.0)
    assert row == {"kind": "a", "error": "bad value 42 in the job"}
    module = child_module("raises", """
        raise ValueError("bad value 43 in the job")
        """)  # fmt: skip
    (row,) = run_in_child(module, {}, [{"kind": "a"}], timeout=60.0)  # a traceback: its last line, not "Traceback"
    assert row == {"kind": "a", "error": "ValueError: bad value 43 in the job"}


def test_a_child_the_kernel_killed_is_said_to_have_run_out_of_memory_perhaps(child_module):
    """The out-of-memory killer's SIGKILL leaves no stderr; Python reports the status as -9."""
    module = child_module("killed", """
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
        """)  # fmt: skip
    (row,) = run_in_child(module, {}, [{"kind": "a"}], timeout=60.0)
    assert row == {"kind": "a", "error": "killed (out of memory?): exit status -9"}


def test_child_main_runs_the_job_with_the_threads_asked_for(child_module):
    module = child_module("reports_threads", """
        import os, sys
        import torch
        from markovformer.bench.harness import child_main

        def measure(job):
            for case in job["cases"]:
                yield {**case, "torch_threads": torch.get_num_threads(), "omp": os.environ["OMP_NUM_THREADS"]}

        child_main(sys.argv[1:], measure)
        """)  # fmt: skip
    cases = [{"kind": "a"}, {"kind": "b"}]
    rows = run_in_child(module, {"cases": cases}, cases, timeout=120.0, threads=1)
    assert rows == [{"kind": kind, "torch_threads": 1, "omp": "1"} for kind in ("a", "b")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_measuring_child_dies_with_its_parent_even_by_sigkill():
    """SIGKILL of the bench (which no handler sees) left its measuring child running on alone, holding up to a
    quarter of the memory for minutes; the child now gets SIGKILL from the kernel when the bench dies."""
    import signal
    import subprocess
    import time

    parent = ("import os, subprocess, sys, time\n"
              "from markovformer.bench.harness import child_environment\n"
              "code = 'from markovformer.bench.harness import die_with_parent; die_with_parent(); "
              "import time; time.sleep(120)'\n"
              "child = subprocess.Popen([sys.executable, '-c', code], env=child_environment(dict(os.environ)))\n"
              "time.sleep(3)\n"  # the child's die_with_parent has run
              "print(child.pid, flush=True)\n"
              "time.sleep(120)\n")  # fmt: skip
    process = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    child = int(process.stdout.readline())
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)

    def running(pid: int) -> bool:  # a zombie nobody reaped yet is not running
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = running(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive


def test_scan_part_unbind_loop_is_the_recurrence():
    generator = torch.Generator().manual_seed(0)
    a, b = torch.rand(2, 9, 3, generator=generator), torch.randn(2, 9, 3, generator=generator)
    h0 = torch.randn(2, 3, generator=generator)
    states, last = unbind_loop(a, b, h0)
    expected, expected_last = linear_scan(a, b, h0, backend="naive")
    torch.testing.assert_close(states, expected)
    torch.testing.assert_close(last, expected_last)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_the_seed_style_step_scores_the_model_the_library_step_trains(n):
    """The throughput comparison is of one model in two forms: the source's step on n-gram samples gives the loss
    the library's model gives its last position, reading the same n characters (weights scaled away from a near
    uniform prediction, so that a wrong recurrence cannot agree by chance)."""
    torch.manual_seed(0)
    model = ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=12, d_model=16, context_mode="markov", order=5,
                                                   max_positions=5)).eval()  # fmt: skip
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_()
    samples = torch.randint(1, 12, (6, n + 1), generator=torch.Generator().manual_seed(n))
    logits = model(samples[:, :n], order=n).logits[:, -1]
    expected = torch.nn.functional.cross_entropy(logits, samples[:, n], label_smoothing=0.1)
    loss = seed_style_loss(model, samples[:, :n], samples[:, n])
    assert abs(float(expected) - float(torch.tensor(12.0).log())) > 0.5
    torch.testing.assert_close(loss, expected)


def test_an_unknown_scan_kind_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match=r"^unknown scan kind 'fast'; expected one of \('naive', "):
        scan_step("fast", 16)


def test_translation_decode_state_sizes_and_crossover():
    mat, at = (translation_decode_case(kind, 8, 1) for kind in ("mat", "at"))
    assert mat["state_floats_per_row"] == 5 * 256  # the last 5 decoder inputs, D each
    assert at["state_floats_per_row"] == 2 * 3 * 256 * 8  # keys and values of 3 layers for every generated token
    assert at["tokens_per_second"] == pytest.approx(8 / at["seconds"])
    speeds = (("mat", 64, 1.0), ("at", 64, 2.0), ("mat", 256, 3.0), ("at", 256, 2.0))
    rows = [{"kind": kind, "batch": 1, "T": length, "tokens_per_second": speed} for kind, length, speed in speeds]
    assert crossovers(rows) == {"B=1": 256}
    assert crossovers(rows[:2]) == {"B=1": None}

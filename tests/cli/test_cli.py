import subprocess
import sys


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "markovformer", *args], capture_output=True, text=True, timeout=120)


def test_bad_value_is_one_line_and_exit_status_2():
    done = run_cli("train", "--steps", "0")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "steps" in lines[0] and "Traceback" not in done.stderr


def test_bad_model_option_names_the_config_field():
    done = run_cli("train", "--attention", "quantum")
    assert done.returncode == 2
    assert "attention" in done.stderr and "quantum" in done.stderr and "Traceback" not in done.stderr

"""The commands that only read a trained run import what they use: Lightning is the training loop's and torchmetrics
scoring's, so `generate` waits for neither."""

from __future__ import annotations

import subprocess
import sys

TRAINING_ONLY = ("lightning", "torchmetrics")
# main() in a fresh interpreter, then its exit status and which of TRAINING_ONLY it had imported
IMPORTED_BY = ("import sys\n"
               "from markovformer.cli.main import main\n"
               "status = main(sys.argv[1:])\n"
               f"print(status, sorted(name for name in {TRAINING_ONLY!r} if name in sys.modules))\n")  # fmt: skip


def test_generate_imports_neither_lightning_nor_torchmetrics(main_cli, tmp_path, tiny_config):
    """`generate` of a language model spent ~3 s of a quiet 2-core CPU's 5 s of imports on what it never runs:
    Lightning (~1.3 s), through the checkpoint format's module, which also held the Lightning plug-in that writes it,
    and torchmetrics (~1.9 s), through the task kinds' modules, which also held their validation metrics."""
    run = tmp_path / "run"
    done = main_cli("train", str(tiny_config), f"output_dir={run}", "trainer.max_steps=10", "trainer.eval_every=10")
    assert done.returncode == 0, done.stderr
    argv = ["generate", str(run / "checkpoints" / "last.ckpt"), "--prompt", "1 2", "--max-new-tokens", "3"]
    done = subprocess.run([sys.executable, "-c", IMPORTED_BY, *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout

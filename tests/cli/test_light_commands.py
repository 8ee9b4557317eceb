"""The commands that only read a trained run import what they use: Lightning is the training loop's, so `generate`
never waits for it."""

from __future__ import annotations

import subprocess
import sys

# main() in a fresh interpreter, then which of the training-only packages it had imported
IMPORTED_BY = ("import sys\n"
               "from markovformer.cli.main import main\n"
               "status = main(sys.argv[1:])\n"
               "print(status, sorted(name for name in ('lightning',) if name in sys.modules))\n")  # fmt: skip


def test_generate_imports_no_lightning(main_cli, tmp_path, tiny_config):
    """`generate` of a language model imported Lightning (~1.3 s of a quiet 2-core CPU's 5 s of imports) through the
    checkpoint format's module, which also held the Lightning plug-in that writes it."""
    run = tmp_path / "run"
    done = main_cli("train", str(tiny_config), f"output_dir={run}", "trainer.max_steps=10", "trainer.eval_every=10")
    assert done.returncode == 0, done.stderr
    argv = ["generate", str(run / "checkpoints" / "last.ckpt"), "--prompt", "1 2", "--max-new-tokens", "3"]
    done = subprocess.run([sys.executable, "-c", IMPORTED_BY, *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout

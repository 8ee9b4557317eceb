"""The tiny trained run that the `markovformer inspect` tests (test_inspection_*.py) read: each of those files trains
it once, in its module-scoped fixture ``trained``."""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import TINY_RUN

from markovformer.cli.main import main


def train_inspected_run(folder: Path) -> Path:
    """A tiny causal LM (1 layer, 2 heads, window 2) trained for 2 steps on sequences of 24 tokens: folder/run."""
    trainer = {**TINY_RUN["trainer"], "max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
               "log_every": 1}
    config = folder / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer, "output_dir": str(folder / "run")}))
    assert main(["train", str(config)]) == 0
    return folder / "run"

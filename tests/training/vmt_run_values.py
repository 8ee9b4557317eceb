"""The tiny vmt run the engine's vmt task tests (test_vmt_task_*.py) train: its values, with changes by section."""

from __future__ import annotations

import json

TINY_VMT = {
    "task": "vmt",
    "model_type": "vmt",
    "model": {"latent_dim": 4, "d_model": 16, "n_layers": 1, "n_heads": 2, "hidden_dim": 16, "window": 4,
              "skip_length": 3},
    "data": {"source": "sticky_hmm", "num_states": 3, "num_symbols": 6, "doc_len": 18, "train_documents": 12,
             "val_documents": 3, "test_documents": 3},
    "trainer": {"max_steps": 9, "batch_size": 3, "warmup_steps": 2, "eval_every": 9, "checkpoint_every": 9,
                "log_every": 3, "eval_batch_size": 2, "seed": 5},
    "task_options": {"kl_warmup_steps": 4},
}  # fmt: skip


def tiny_vmt(**changes) -> dict:
    values = json.loads(json.dumps(TINY_VMT))
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        values[section][key] = value
    return values

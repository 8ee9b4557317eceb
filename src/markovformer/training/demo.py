"""The embedded default run (what `markovformer train` with no config, and so `make demo`, trains).

configs/causal_lm_chain.yaml is the same run, commented, for users to copy; a test keeps the two equal.
"""

DEMO_CONFIG = {
    "task": "causal_lm",
    "output_dir": "runs/demo",
    "model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "max_order": 4, "attention": "markov", "scope": "local"},
    "data": {
        "source": "markov_chain",
        "kind": "lagged",
        "num_symbols": 16,
        "lags": [1, 2, 3],
        "strength": 1.0,
        "seq_len": 128,
        "train_sequences": 40000,
    },  # fmt: skip
    "trainer": {
        "max_steps": 1200,
        "batch_size": 32,
        "lr": 3e-3,
        "warmup_steps": 100,
        "eval_every": 200,
        "checkpoint_every": 400,
        "log_every": 100,
        "seed": 0,
    },  # fmt: skip
}

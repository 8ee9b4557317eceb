"""init_from and generate name the weights they took."""

import torch
import yaml
from conftest import TINY_RUN, run_in_process


def test_init_from_a_run_names_which_weights_it_took(tmp_path):
    """init_from=RUN takes the final model/ of a finished run, else its newest checkpoint (a run still training or
    killed), and printed only "initialised from RUN: 15 of 15 tensors" either way: a fine-tuning could not tell the
    final weights from a checkpoint's. The line now names them and their step, and they are the ones loaded."""
    from markovformer.training.init_from import initialise_from
    from markovformer.training.run_dir import load_run, mark_unfinished
    from markovformer.training.runner import build_model

    trainer = {**TINY_RUN["trainer"], "max_steps": 4, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 3}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer}))
    assert run_in_process("train", "tiny.yaml", "output_dir=run", cwd=tmp_path).returncode == 0
    run = tmp_path / "run"
    config, final, _ = load_run(run)
    fresh = build_model(config, {"vocab_size": final.config.vocab_size})
    line = initialise_from(fresh, run, [])
    assert "(final model, step 4)" in line, line
    finished = run_in_process("generate", "run", "--prompt", "", "--max-new-tokens", "3", cwd=tmp_path)
    assert finished.returncode == 0 and "generating with" not in finished.stderr, finished.stderr
    mark_unfinished(run)  # a resume under way, or killed: model/ no longer stands, checkpoints/ does
    _, newest, _ = load_run(run / "checkpoints" / "step-000003.ckpt")
    line = initialise_from(fresh, run, [])
    assert "(checkpoints/last.ckpt at step 3: the run is unfinished)" in line, line
    sampled = run_in_process("generate", "run", "--prompt", "", "--max-new-tokens", "3", cwd=tmp_path)  # it was silent
    assert "generating with checkpoints/last.ckpt at step 3: the run is unfinished" in sampled.stderr, sampled.stderr
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in newest.state_dict().items())

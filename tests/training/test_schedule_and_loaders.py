"""One builder for every scoring pass (validation while training and ``eval`` after, both honouring
``trainer.num_workers``), a warm-up that never outlasts a new run, and what a resume may change: its length (the
schedule its steps followed kept) and its learning rate, never its data, model or seed."""

from __future__ import annotations

import copy
import itertools

import pytest
from conftest import TINY_RUN

import markovformer.training.evaluation as evaluation
from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.training.kind_switches import apply_switching_overrides
from markovformer.training.module import TrainingModule
from markovformer.training.optim import lr_multiplier
from markovformer.training.run_checks import resumed_config
from markovformer.training.run_config import resolve_run_config
from markovformer.training.runner import evaluate, train
from markovformer.training.tasks import build_task
from markovformer.training.trainer_config import ConfigError, TrainerConfig, check_warmup


def test_validation_and_eval_load_batches_with_the_runs_workers(tmp_path, monkeypatch):
    built = []

    class Recording(evaluation.DataLoader):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self.num_workers)

    monkeypatch.setattr(evaluation, "DataLoader", Recording)
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=2, warmup_steps=1, eval_every=2, checkpoint_every=2, num_workers=1)
    values["output_dir"] = str(tmp_path / "run")
    results = train(resolve_run_config(values))
    assert built == [1]  # the training's validation loader, built by the same function as eval's
    scored = evaluate(tmp_path / "run")
    assert built == [1, 1]
    assert scored["metrics"]["loss"] == pytest.approx(results["val"]["loss"], rel=1e-6)


def test_the_default_warm_up_fits_a_short_run_and_a_longer_one_is_refused_naming_both(tmp_path):
    assert TrainerConfig(max_steps=10).warmup_steps == 10 and TrainerConfig(max_steps=5000).warmup_steps == 100
    assert TrainerConfig(max_steps=10, warmup_steps=3).warmup_steps == 3
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=10, warmup_steps=50)
    values["output_dir"] = str(tmp_path / "run")
    config = resolve_run_config(values)  # a run trained before the check still loads
    with pytest.raises(ConfigError, match=r"trainer\.warmup_steps=50 is larger than trainer\.max_steps=10"):
        train(config)
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_a_typed_max_steps_below_the_files_warm_up_warms_up_over_the_whole_run():
    file = {"task": "causal_lm", "trainer": {"max_steps": 1000, "warmup_steps": 100}}
    values, notes = apply_switching_overrides(copy.deepcopy(file), ["trainer.max_steps=10"])
    assert values["trainer"]["warmup_steps"] == 10
    assert notes == ["trainer.max_steps=10 is below the config's trainer.warmup_steps=100: warming up over all 10 "
                     "steps (set trainer.warmup_steps to choose)"]  # fmt: skip
    typed, notes = apply_switching_overrides(copy.deepcopy(file), ["trainer.max_steps=10", "trainer.warmup_steps=50"])
    assert typed["trainer"]["warmup_steps"] == 50 and notes == []  # the user's own choice: train() names it
    for steps in (100, 500):  # not below the warm-up: nothing to cut
        longer, notes = apply_switching_overrides(copy.deepcopy(file), [f"trainer.max_steps={steps}"])
        assert longer["trainer"]["warmup_steps"] == 100 and notes == []


def test_switching_a_local_model_to_global_scope_drops_the_files_window_unless_typed():
    """text_bpe.yaml's model.scope=global was refused "window=32: is only meaningful with scope='local'": the file's
    window, which the user had not typed, is dropped with a note, as a switch of attention kind drops what it does
    not read; a window typed with it is kept (and refused by the config, naming it)."""
    file = {"task": "causal_lm", "model": {"attention": "softmax", "scope": "local", "window": 32, "d_model": 8}}
    values, notes = apply_switching_overrides(copy.deepcopy(file), ["model.scope=global"])
    assert values["model"] == {"attention": "softmax", "scope": "global", "d_model": 8}
    assert notes == ["model.scope changed to 'global': dropped model.window, which only scope='local' reads"]
    typed, notes = apply_switching_overrides(copy.deepcopy(file), ["model.scope=global", "model.window=16"])
    assert typed["model"]["window"] == 16 and notes == []
    same, notes = apply_switching_overrides(copy.deepcopy(file), ["model.scope=local"])
    assert same["model"]["window"] == 32 and notes == []


def test_an_option_typed_inside_a_section_override_is_never_dropped_by_a_switch():
    """``data={...}`` types every key it holds: a later ``data.source=`` switch keeps them (the new source's own
    check names an option it does not take)."""
    file = {"task": "causal_lm", "data": {"source": "markov_chain", "kind": "lagged", "num_symbols": 4}}
    values, notes = apply_switching_overrides(copy.deepcopy(file), ["data={kind: lagged}", "data.source=text"])
    assert values["data"] == {"source": "text", "kind": "lagged"} and notes == []


def test_shortening_a_run_on_resume_keeps_the_schedule_its_steps_followed():
    """A 40-step run resumed at step 20 with max_steps=30 decayed over 30 from then on: the rate jumped at the resume
    (2.07e-3 -> 1.40e-3 in the reviewer's run) and config.yaml no longer described the steps already trained."""
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=40, warmup_steps=5)
    before = resolve_run_config(values).trainer
    shorter = resumed_config(resolve_run_config(values), ["trainer.max_steps=30"], done_steps=20).trainer
    assert shorter.max_steps == 30 and shorter.decay_steps == 40

    def rate(trainer, step):
        return lr_multiplier(step, trainer.warmup_steps, trainer.decay_steps or trainer.max_steps, trainer.decay,
                             trainer.lr_floor)  # fmt: skip

    assert [rate(shorter, step) for step in range(30)] == [rate(before, step) for step in range(30)]


def test_a_resume_that_raises_lr_until_the_weight_decay_flips_the_weights_is_refused():
    """trainer.lr is resumable, weight_decay not: lr=20 at weight_decay 0.1 makes AdamW multiply each decayed weight
    by 1 - 20 * 0.1 = -1 every step; a lower lr is taken."""
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(weight_decay=0.1)
    config = resolve_run_config(values)
    assert resumed_config(config, ["trainer.lr=5"], done_steps=0).trainer.lr == 5
    with pytest.raises(ConfigError, match=r"^trainer\.weight_decay=0\.1 with trainer\.lr=20: .* = -1 every step"):
        resumed_config(config, ["trainer.lr=20"], done_steps=0)


def test_extending_a_run_that_ended_in_its_warm_up_decays_over_the_new_length():
    """A 6-step run warms up over all 6 steps (the default warm-up); extended to 12, its decay kept the old end,
    decay_steps = 6 = the warm-up: the rate held its peak one more step, then fell to the floor (10x) at once."""
    short = copy.deepcopy(TINY_RUN)
    short["trainer"].update(max_steps=6)
    short["trainer"].pop("warmup_steps", None)
    extended = resumed_config(resolve_run_config(short), ["trainer.max_steps=12"], done_steps=6).trainer
    total = extended.decay_steps or extended.max_steps
    rates = [lr_multiplier(step, extended.warmup_steps, total, extended.decay, extended.lr_floor) for step in range(12)]
    assert max(before / after for before, after in itertools.pairwise(rates[5:])) < 2.5  # it was 10 at step 7
    assert rates[-1] < 0.2  # and it still decays towards the floor
    decaying = copy.deepcopy(TINY_RUN)
    decaying["trainer"].update(max_steps=20, warmup_steps=10)
    kept = resumed_config(resolve_run_config(decaying), ["trainer.max_steps=30"], done_steps=20).trainer
    assert kept.decay_steps == 20  # a run past its warm-up keeps its decay: the rate stays at the floor
    with pytest.raises(ConfigError, match=r"trainer\.decay_steps=10 is not past trainer\.warmup_steps=10"):
        check_warmup(TrainerConfig(max_steps=30, warmup_steps=10, decay_steps=10))
    with pytest.raises(ConfigError, match=r"trainer\.decay_steps=8 is not past trainer\.warmup_steps=10"):
        resumed_config(resolve_run_config(decaying), ["trainer.max_steps=30", "trainer.decay_steps=8"], done_steps=20)


def test_resuming_with_max_steps_equal_to_the_steps_done_is_allowed_and_fewer_are_refused():
    """A run killed while writing its final files resumes with max_steps = the steps it has done."""
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=40, warmup_steps=5)
    config = resolve_run_config(values)
    assert resumed_config(config, ["trainer.max_steps=20"], done_steps=20).trainer.max_steps == 20
    with pytest.raises(ConfigError, match=r"trainer\.max_steps=19 is below the 20 steps"):
        resumed_config(config, ["trainer.max_steps=19"], done_steps=20)


@pytest.mark.parametrize("override", ["data.seq_len=30", "model.d_model=32", "trainer.seed=4"])
def test_resume_refuses_a_change_to_the_data_the_model_or_the_seed_naming_it(override):
    """Each fixes what the checkpoints hold."""
    name = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{name} cannot change when resuming"):
        resumed_config(resolve_run_config(copy.deepcopy(TINY_RUN)), [override], done_steps=20)


def test_a_resume_with_a_lower_lr_rescales_the_restored_optimiser_and_schedule():
    """trainer.lr=0.001 on resume of a run at lr 0.01 (mid-schedule, at 0.004): the first resumed step already uses a
    tenth of the restored rate, and the schedule carries on from the new peak."""
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=5, d_model=8, n_heads=2,
                                                                        n_layers=1, max_order=2))  # fmt: skip
    module = TrainingModule(model, build_task("causal_lm", TrainerConfig(lr=0.001)))
    groups = [{"lr": 0.004, "initial_lr": 0.01} for _ in range(2)]
    schedule = {"base_lrs": [0.01, 0.01], "_last_lr": [0.004, 0.004]}
    module.rescale_learning_rate({"lr_schedulers": [schedule], "optimizer_states": [{"param_groups": groups}]})
    assert schedule["base_lrs"] == pytest.approx([0.001, 0.001])
    assert schedule["_last_lr"] == pytest.approx([0.0004, 0.0004])
    for group in groups:
        assert group["lr"] == pytest.approx(0.0004) and group["initial_lr"] == pytest.approx(0.001)


def test_a_bad_value_beside_a_short_run_is_the_one_line_printed(main_cli):
    """The warm-up notice of a short run came first, then the error: two lines for one bad input."""
    done = main_cli("train", "trainer.max_steps=5", "trainer.lr=-1")
    assert done.returncode == 2 and "trainer.lr" in done.stderr
    assert "warming up" not in done.stdout + done.stderr

"""Training on a mixture of markov orders n (task_options.orders) with label smoothing, and validation on
the exact n-gram mixture, for the scan Markov model through the engine: the draws are a function of (seed, step),
smoothing never reaches validation, every validation position is scored with its full n, and eval / generate work
on the run."""

from __future__ import annotations

import html
import json
import random
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from conftest import run_in_process  # beside this folder

from markovformer.data.collate import collate
from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM
from markovformer.training.batches import EpochBatches
from markovformer.training.module import TrainingModule
from markovformer.training.run_config import ConfigError, TrainerConfig, resolve_run_config
from markovformer.training.runner import build_data, build_model, evaluate, load_run, train
from markovformer.training.tasks import CausalLMOptions, build_task

LENGTHS = (2, 3, 5)


def _examples(count: int) -> list[dict]:
    return [{"input_ids": torch.tensor([i, i + 1]), "labels": torch.tensor([i, i + 1])} for i in range(count)]


def _stream(start: int, **options) -> list[dict]:
    batches = EpochBatches(_examples(40), 4, seed=7, collate=collate, start=lambda: start, **options)
    iterator = iter(batches)
    return [next(iterator) for _ in range(25)]  # 2.5 epochs of 10 batches


def test_orders_are_drawn_per_batch_as_a_function_of_seed_and_step():
    whole = _stream(0, orders=LENGTHS)
    resumed = _stream(13, orders=LENGTHS)
    for later, batch in zip(resumed, whole[13:], strict=False):  # a resumed stream continues the same sequence
        assert later["order"] == batch["order"]
        assert torch.equal(later["input_ids"], batch["input_ids"])
    plain = _stream(0)
    for batch, unmixed in zip(whole, plain, strict=True):  # the draw leaves the epoch permutation alone
        assert torch.equal(batch["input_ids"], unmixed["input_ids"]) and "order" not in unmixed
    draws = [batch["order"] for batch in _stream(0, orders=LENGTHS)]
    assert set(draws) <= set(LENGTHS)
    many = EpochBatches(_examples(4000), 4, seed=1, collate=collate, orders=LENGTHS)
    counts = Counter(batch["order"] for batch, _ in zip(many, range(3000), strict=False))
    assert set(counts) == set(LENGTHS) and all(900 < count < 1100 for count in counts.values())  # uniform: 1000 ± 3σ


def _model(**overrides) -> ScanMarkovForCausalLM:
    values = dict(vocab_size=9, d_model=8, ffn_mult=2, max_positions=5, order=5)
    torch.manual_seed(0)
    return ScanMarkovForCausalLM(ScanMarkovConfig(**{**values, **overrides}))


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")  # the step is called without a Trainer
def test_label_smoothing_and_the_drawn_context_reach_training_only():
    model = _model()
    trainer = TrainerConfig(label_smoothing=0.2)
    task = TrainingModule(model, build_task("causal_lm", trainer, {"vocab_size": 9}, options=CausalLMOptions(LENGTHS)))
    ids = torch.randint(1, 9, (3, 12), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "labels": ids, "order": 3}
    with torch.no_grad():
        logits = model(ids, order=3).logits[:, :-1].flatten(0, 1)
        expected = F.cross_entropy(logits, ids[:, 1:].flatten(), label_smoothing=0.2)
        torch.testing.assert_close(task.training_step(batch, 0), expected)
        task.on_validation_epoch_start()
        task.validation_step({"input_ids": ids, "labels": ids}, 0)
        results = task.val_metrics.compute()
    for n in LENGTHS:
        with torch.no_grad():
            plain = F.cross_entropy(model(ids, order=n).logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        assert results[f"loss_n{n}"] == pytest.approx(plain.item(), rel=1e-6)
    assert results["loss"] == pytest.approx(sum(results[f"loss_n{n}"] for n in LENGTHS) / 3, rel=1e-9)


def test_models_that_cannot_take_the_options_are_refused_up_front():
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM

    transformer = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=9, d_model=8, n_layers=1,
                                                                             n_heads=2))  # fmt: skip
    ordered = CausalLMOptions(orders=(2,))
    for task, key in ((build_task("causal_lm", options=ordered), "task_options.orders"),
                      (build_task("causal_lm", TrainerConfig(label_smoothing=0.1)), "trainer.label_smoothing")):
        with pytest.raises(ConfigError, match=f"{key} is set but MarkovianTransformerForCausalLM"):
            TrainingModule(transformer, task)
    with pytest.raises(ConfigError, match="only meaningful with context_mode='markov'"):
        TrainingModule(_model(context_mode="recurrent", order=None), build_task("causal_lm", options=ordered))
    with pytest.raises(ConfigError, match="order=6"):
        TrainingModule(_model(), build_task("causal_lm", options=CausalLMOptions(orders=(2, 6))))
    for orders, message in (((2, 2), "task_options.orders=.*repeats"), ((0,), "task_options.orders=.*positive")):
        with pytest.raises(ConfigError, match=message):
            CausalLMOptions(orders=orders)
    with pytest.raises(ConfigError, match="label_smoothing"):
        TrainerConfig(label_smoothing=1.0)


def test_validation_windows_must_carry_the_model_own_order_without_orders(tmp_path):
    """Without task_options.orders the model's own n scores validation: with data.overlap < n the first targets of
    every window saw fewer than n tokens and the run trained and reported that loss without a word."""
    values = _text_run(tmp_path, orders=())
    values["data"]["overlap"] = 2
    with pytest.raises(ConfigError, match=r"model.order=4 but data.overlap=2"):
        train(resolve_run_config(values))
    values["data"]["overlap"] = 4
    values["output_dir"] = str(tmp_path / "run4")
    values["trainer"].update(max_steps=1, eval_every=1, checkpoint_every=1, log_every=1)
    train(resolve_run_config(values))  # an overlap of n is enough


def _text_run(tmp_path, orders=(2, 4), **trainer) -> dict:
    rng = random.Random(0)
    words = ["to", "be", "or", "not", "that", "is", "the", "question"]
    text = "".join(rng.choice(words) + rng.choice(" \n") for _ in range(700))
    (tmp_path / "corpus.txt").write_text(text, encoding="utf-8")
    return {
        "task": "causal_lm",
        "model_type": "scan_markov",
        "output_dir": str(tmp_path / "run"),
        "model": {"d_model": 16, "ffn_mult": 2, "max_positions": 5, "order": 4},
        "data": {"source": "text", "path": str(tmp_path / "corpus.txt"), "seq_len": 32, "fractions": [0.9, 0.1, 0.0],
                 "overlap": 4},
        "trainer": {"max_steps": 6, "batch_size": 8, "warmup_steps": 1, "eval_every": 6, "checkpoint_every": 6,
                    "log_every": 3, "eval_batch_size": 5, "label_smoothing": 0.1, **trainer},
        "task_options": {"orders": orders},
    }  # fmt: skip


def _explicit_ngram_loss(model: ScanMarkovForCausalLM, tokens: list[int], n: int, first_target: int) -> float:
    """Mean -log p(x_j | x_{j-n..j-1}) over j >= first_target, each window of n tokens fed on its own."""
    windows = torch.tensor([tokens[j - n : j] for j in range(first_target, len(tokens))])
    targets = torch.tensor(tokens[first_target:])
    with torch.no_grad():
        return float(F.cross_entropy(model(windows).logits[:, -1], targets))


def _cli(tmp_path, *args: str) -> str:
    """The command line in this process (``run_in_process``: a subprocess would spend seconds importing): its stdout."""
    done = run_in_process(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_validation_is_the_exact_ngram_mixture_and_eval_generate_and_inspect_work_on_the_run(tmp_path):
    values = _text_run(tmp_path)
    results = train(resolve_run_config(values))
    run_dir = tmp_path / "run"
    config, model, _ = load_run(run_dir)
    bundle = build_data(config)
    start, stop = bundle.splits["val"]
    text = (tmp_path / "corpus.txt").read_text(encoding="utf-8")
    tokens = bundle.tokenizer.encode(text[start:stop])
    for n in (2, 4):  # every validation character from offset 4 on, predicted from exactly its n characters before
        assert results["val"][f"loss_n{n}"] == pytest.approx(_explicit_ngram_loss(model, tokens, n, 4), rel=1e-5)
    assert results["val"]["loss"] == pytest.approx((results["val"]["loss_n2"] + results["val"]["loss_n4"]) / 2)
    assert json.loads((run_dir / "metrics.json").read_text())["val"] == results["val"]
    assert evaluate(run_dir)["metrics"] == pytest.approx(results["val"], rel=1e-6)
    shown = json.loads(_cli(tmp_path, "eval", str(run_dir), "--json"))["metrics"]
    assert shown == pytest.approx(results["val"], rel=1e-6)

    greedy = _cli(tmp_path, "generate", str(run_dir), "--prompt", "to be", "--max-new-tokens", "12",
                  "--temperature", "0")  # fmt: skip
    prompt = torch.tensor([bundle.tokenizer.encode("to be")])
    expected = model.generate(prompt, max_new_tokens=12)[0, prompt.shape[1] :].tolist()  # the model's own decoding
    assert greedy[:-1] == "to be" + bundle.tokenizer.decode(expected)
    # Sampling draws from the same generator as the model's own sampler; the padding id (no character) is banned.
    generator = torch.Generator().manual_seed(3)
    expected = model.generate(prompt, max_new_tokens=30, do_sample=True, temperature=0.8, top_p=0.9,
                              generator=generator, suppress_tokens=[0])  # fmt: skip
    expected = expected[0, prompt.shape[1] :]
    sampled = _cli(tmp_path, "generate", str(run_dir), "--prompt", "to be", "--max-new-tokens", "30", "--temperature",
                   "0.8", "--top-p", "0.9", "--seed", "3")  # fmt: skip
    assert sampled[:-1] == "to be" + bundle.tokenizer.decode(expected.tolist())

    from markovformer.training.inspection import write_inspection_report

    index = write_inspection_report(run_dir)  # curves only: the model has no gates or attention maps
    assert (index.parent / "curves.png").is_file() and not (index.parent / "attention.png").exists()
    unconditional = _cli(tmp_path, "generate", str(run_dir), "--prompt", "", "--max-new-tokens", "200")
    page = index.read_text()  # a text run's report shows the sample that generate prints for an empty prompt
    assert "<h2>Generated sample (200 tokens from an empty prompt" in page
    assert f"<pre>{html.escape(unconditional[:-1])}</pre>" in page
    with pytest.raises(ValueError, match="ScanMarkovForCausalLM has no attention layers"):
        write_inspection_report(run_dir, layers=[0])


def test_validation_windows_must_carry_the_longest_context_and_unsupported_options_are_named(tmp_path):
    values = _text_run(tmp_path, orders=[2, 5])
    values["model"]["max_positions"] = 5
    with pytest.raises(ConfigError, match=r"n=5 but data.overlap=4"):
        train(resolve_run_config(values))
    config = resolve_run_config(_text_run(tmp_path))
    assert isinstance(build_model(config, build_data(config).info), ScanMarkovForCausalLM)
    checkpointed = resolve_run_config(_text_run(tmp_path, activation_checkpointing=True))
    with pytest.raises(ConfigError, match="activation_checkpointing: model_type='scan_markov' does not support it"):
        build_model(checkpointed, {"vocab_size": 9})

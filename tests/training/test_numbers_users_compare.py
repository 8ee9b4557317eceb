"""Numbers a user compares: bits per character for every text run (character and BPE runs comparable), and
logs/metrics.csv counting steps as the console does, and the console's training time counting every process."""

from __future__ import annotations

import copy
import math
import random
import re
import sys

import pytest
import torch
from conftest import TINY_RUN

import markovformer.training.progress as progress
from markovformer.data.collate import collate
from markovformer.plots.curves import read_metric_series
from markovformer.training.build import build_data, build_run_task
from markovformer.training.run_config import resolve_run_config
from markovformer.training.runner import train


def _text(tmp_path) -> str:
    """Mostly short words for 2400 words (the train part and the start of val), then mostly long ones: the parts'
    characters per token differ (BPE), so a measure of the wrong split shows."""
    rng = random.Random(0)
    short, long = ["to", "be", "or", "not", "is", "the"], ["question", "whether", "nobler", "suffer", "fortune"]

    def words(count: int, often: list[str], rarely: list[str]) -> str:
        return "".join(rng.choice(often if rng.random() < 0.8 else rarely) + rng.choice(" \n,") for _ in range(count))

    text = words(2400, short, long) + words(300, long, short)
    (tmp_path / "corpus.txt").write_text(text, encoding="utf-8")
    return text


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_text_runs_report_bits_per_character_through_the_splits_characters_per_token(tmp_path, tokenizer):
    text = _text(tmp_path)
    data = {"source": "text", "path": str(tmp_path / "corpus.txt"), "seq_len": 32, "fractions": [0.8, 0.2, 0.0],
            "tokenizer": tokenizer, **({"vocab_size": 300} if tokenizer == "bpe" else {})}  # fmt: skip
    config = resolve_run_config({"task": "causal_lm", "data": data, "model": {}})
    bundle = build_data(config)
    task = build_run_task(config, bundle)
    start, stop = bundle.splits["val"]
    val_text, train_text = text[start:stop], text[slice(*bundle.splits["train"])]
    per_token = len(val_text) / len(bundle.tokenizer.encode(val_text))  # the val part encoded on its own
    if tokenizer == "char":
        assert per_token == 1.0
    else:
        assert per_token > 1.5  # merges: a BPE token spans several characters
        train_per_token = len(train_text) / len(bundle.tokenizer.encode(train_text))
        assert abs(per_token / train_per_token - 1) > 0.05  # (3.23 and 2.42) the train part's would not do
    metrics = task.new_metrics()
    batch = collate([bundle.val[0], bundle.val[1]])
    metrics.update(type("Output", (), {"loss": torch.tensor(2.0)})(), batch)
    results = metrics.compute()
    assert results["bits_per_token"] == pytest.approx(2.0 / math.log(2))
    assert results["bits_per_character"] == pytest.approx(2.0 / math.log(2) / per_token, rel=1e-9)


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_characters_per_token_counts_no_character_for_an_end_of_document(tokenizer):
    """Documents are separated by <eod>, a scored token but no character: BPE decodes it as the text "<eod>", which
    must not count as five characters (bits per character would read 1-5 % low on documents of paragraphs)."""
    from types import SimpleNamespace

    from markovformer.data.readers.tokenizer import END_OF_DOCUMENT, PAD_TOKEN, BPETokenizer, CharTokenizer
    from markovformer.training.tasks.causal_lm import characters_per_token

    documents = ["to be or not to be", "that is the question", "whether tis nobler"]
    if tokenizer == "bpe":
        tokens = BPETokenizer.train(" ".join(documents) * 20, 300, special_tokens=(PAD_TOKEN, END_OF_DOCUMENT))
    else:
        tokens = CharTokenizer("".join(sorted(set("".join(documents)))), end_of_document=True)
    end = tokens.end_of_document_id
    ids = [i for document in documents for i in [*tokens.encode(document), end]]
    split = SimpleNamespace(store=SimpleNamespace(tokens=ids), start=0, stop=len(ids))
    assert characters_per_token(split, tokens) == pytest.approx(sum(map(len, documents)) / len(ids))


@pytest.mark.parametrize("max_steps, logged, validated", [(6, [2, 4, 6], [3, 6]), (7, [2, 4, 6, 7], [3, 6, 7])])
def test_metrics_csv_counts_steps_as_the_console_does(tmp_path, capsys, max_steps, logged, validated):
    """(7 steps: the last validation runs after fit, printed as the final one, and is logged at step 7, not 8)"""
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=max_steps, warmup_steps=1, log_every=2, eval_every=3, checkpoint_every=3)
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    printed = capsys.readouterr().out
    train_steps = [int(n) for n in re.findall(rf"^step +(\d+)/{max_steps}  train loss", printed, re.M)]
    val_steps = [int(n) for n in re.findall(rf"^step +(\d+)/{max_steps}  validation", printed, re.M)]
    assert train_steps == logged and val_steps == [3, 6]
    series = read_metric_series(tmp_path / "run" / "logs" / "metrics.csv")
    assert series["val/loss"][0] == validated
    assert {2, 4, 6} <= set(series["train/loss"][0]) <= set(range(1, max_steps + 1))
    assert "step/s" not in printed and "\r" not in printed  # not a terminal: lines only, no progress bar


def test_metrics_csv_claims_no_epoch_count_that_stays_0_over_passes_over_the_data(tmp_path):
    """16 training sequences in batches of 8 for 6 steps are 3 passes over the data; Lightning's epoch column read
    0.0 in every row (the training stream is one endless Lightning epoch), so the log carries none."""
    values = copy.deepcopy(TINY_RUN)
    values["data"]["train_sequences"] = 16
    values["trainer"].update(max_steps=6, warmup_steps=1, log_every=1, eval_every=3, checkpoint_every=3, logger="csv")
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    columns = (tmp_path / "run" / "logs" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "step" in columns and "train/loss" in columns and "epoch" not in columns


def test_on_a_terminal_a_step_bar_with_its_rate_and_time_left_runs_between_whole_log_lines(tmp_path, capsys,
                                                                                         monkeypatch):  # fmt: skip
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=6, warmup_steps=1, log_every=2, eval_every=3, checkpoint_every=3)
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    printed = capsys.readouterr().out
    assert re.search(r"\| *\d/6 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+(step/s|s/step)\]", printed)  # rate and time left
    pieces = re.split(r"[\r\n]", printed)
    assert [int(n) for p in pieces for n in re.findall(r"^step +(\d+)/6  train loss", p)] == [2, 4, 6]


def test_the_console_clock_carries_the_seconds_of_earlier_processes_across_a_resume(fake_clock):
    """A run that trained 30 s before its checkpoint and 4 s since the resume has run 34 s."""
    fake_clock.patch(progress)
    fake_clock.now = 100.0
    first = progress.PrintProgress(every=1, total=10)
    fake_clock.now = 130.0
    saved = first.state_dict()
    fake_clock.now = 500.0  # another process, much later
    resumed = progress.PrintProgress(every=1, total=10)
    resumed.load_state_dict(saved)
    fake_clock.now = 504.0
    assert resumed.seconds == 34.0


def test_tokens_count_real_positions_a_checkpoint_holds_its_steps_and_a_line_rates_its_own_steps(fake_clock, capsys):
    """A step's tokens are the ones of its masks (padding left out; a translation pair's source and target both
    count). The count a checkpoint saves (``checkpoint_every`` 3, lines every 4) holds every step before it, and a
    line's tokens per second are those of its own steps over their time, validation's left out."""
    from types import SimpleNamespace

    from markovformer.data.translation import collate_translation
    from markovformer.training.tasks import build_task
    from markovformer.training.tasks.base import real_positions

    fake_clock.patch(progress)
    fake_clock.now = 0.0
    line = progress.PrintProgress(every=4, total=8, checkpoint_every=3, stream=sys.stdout)
    trainer = SimpleNamespace(global_step=0, world_size=1, is_global_zero=True, callback_metrics={},
                              sanity_checking=False, state=SimpleNamespace(fn="fit"))  # fmt: skip
    line.on_train_start(trainer, None)
    pairs = collate_translation([{"src_ids": torch.arange(4, 9), "tgt_ids": torch.arange(4, 6)},
                                 {"src_ids": torch.arange(4, 6), "tgt_ids": torch.arange(4, 7)}])  # fmt: skip
    assert real_positions(pairs) == int(pairs["src_mask"].sum() + pairs["tgt_mask"].sum()) == 7 + 5 + 2
    assert real_positions({"input_ids": torch.zeros(3, 5, dtype=torch.long)}) == 15  # no mask: all real
    windows = collate([{"input_ids": torch.arange(9), "labels": torch.arange(9)} for _ in range(3)])
    assert build_task("causal_lm").batch_tokens(windows) == 3 * 8  # a language model counts the tokens it predicts
    counted = []
    for step in range(1, 5):
        fake_clock.now += 2.5
        mask = (torch.arange(6) < step).expand(2, 6).long()  # 2 rows of `step` real tokens, then padding
        trainer.global_step = step
        line.on_train_batch_end(trainer, None, None, {"input_ids": torch.zeros(2, 6), "attention_mask": mask}, 0)
        counted.append(line.state_dict()["tokens"])
        if step == 2:  # a validation of 10 s between steps 2 and 3
            line.on_validation_start(trainer, None)
            fake_clock.now += 10.0
            line.on_validation_end(trainer, None)
    assert counted == [0, 0, 2 * (1 + 2 + 3), 2 * (1 + 2 + 3 + 4)]  # counted at step 3 (a checkpoint) and 4 (a line)
    printed = capsys.readouterr().out
    assert re.search(r"step +4/8  train loss nan  lr nan +(\d+) tok/s", printed).group(1) == "2"  # 20 in 4 x 2.5 s
    resumed = progress.PrintProgress(every=4, total=8)
    resumed.load_state_dict(line.state_dict())
    assert resumed.tokens == 20
    resumed.load_state_dict({"train_seconds": 5.0})  # a checkpoint of a run from before the count: none is claimed
    assert resumed.tokens is None


def test_all_splits_read_as_one_have_the_characters_per_token_of_their_tokens_together(tmp_path):
    """``eval --split all`` scores the three splits as one: bits per character = all bits over all characters, so
    its characters per token are each split's, weighted by the split's tokens (it had none: no bits per character)."""
    from markovformer.data.bundle import JoinedSplits
    from markovformer.training.tasks.causal_lm import characters_per_token

    text = _text(tmp_path)
    data = {"source": "text", "path": str(tmp_path / "corpus.txt"), "seq_len": 32, "fractions": [0.6, 0.2, 0.2],
            "tokenizer": "bpe", "vocab_size": 300}  # fmt: skip
    bundle = build_data(resolve_run_config({"task": "causal_lm", "data": data, "model": {}}))
    parts = [text[slice(*bundle.splits[name])] for name in ("train", "val", "test")]  # each encoded on its own
    tokens = [len(bundle.tokenizer.encode(part)) for part in parts]
    assert len({round(len(part) / count, 2) for part, count in zip(parts, tokens, strict=True)}) == 3  # they differ
    joined = JoinedSplits(bundle.train, bundle.val, bundle.test)
    assert characters_per_token(joined, bundle.tokenizer) == pytest.approx(sum(map(len, parts)) / sum(tokens))


def test_the_steps_own_seconds_leave_validation_and_start_up_out_and_carry_across_a_resume(fake_clock):
    """metrics.json's train_seconds holds the start-up before the first step (a DDP spawn took 20 s of 23) and every
    validation, so tokens / train_seconds is no training rate (a run's report read 3,884 tokens a second where its
    lines read 7,500). ``step_seconds`` is the steps' own time, the lines' clock: here 4 steps of 2.5 s, after 7 s
    of start-up and with a validation of 10 s among them, then 2 more after a resume."""
    from types import SimpleNamespace

    fake_clock.patch(progress)
    fake_clock.now = 0.0
    first = progress.PrintProgress(every=2, total=6, checkpoint_every=2, stream=sys.stdout)
    trainer = SimpleNamespace(global_step=0, world_size=1, is_global_zero=True, callback_metrics={},
                              sanity_checking=False, state=SimpleNamespace(fn="fit"))  # fmt: skip
    fake_clock.now = 7.0  # start-up: the trainer, the loaders, the first batch's checks
    first.on_train_start(trainer, None)

    def steps(line, count):
        for _ in range(count):
            fake_clock.now += 2.5
            trainer.global_step += 1
            line.on_train_batch_end(trainer, None, None, {"input_ids": torch.zeros(2, 5, dtype=torch.long)}, 0)
            if trainer.global_step == 2:
                line.on_validation_start(trainer, None)
                fake_clock.now += 10.0
                line.on_validation_end(trainer, None)

    steps(first, 4)
    assert first.seconds == 27.0 and first.step_seconds == 10.0 and first.tokens == 40
    saved = first.state_dict()
    fake_clock.now = 100.0  # another process
    resumed = progress.PrintProgress(every=2, total=6, stream=sys.stdout)
    resumed.load_state_dict(saved)
    fake_clock.now = 103.0  # its own start-up
    resumed.on_train_start(trainer, None)
    steps(resumed, 2)
    assert resumed.step_seconds == 15.0 and resumed.tokens == 60
    resumed.load_state_dict({"train_seconds": 5.0, "tokens": 10})  # a checkpoint that kept no step seconds
    assert resumed.step_seconds is None


def test_the_reports_tokens_a_second_are_over_the_training_steps_seconds():
    from markovformer.training.inspection import token_rate

    results = {"steps": 10, "train_seconds": 100.0, "train_step_seconds": 10.0, "train_tokens": 20_000}
    assert token_rate(results) == ", 20,000 tokens (2,000 a second over its 10 s of training steps)"
    assert token_rate({**results, "train_step_seconds": None}) == ", 20,000 tokens"  # no rate it cannot vouch for
    assert token_rate({"steps": 10, "train_seconds": 100.0}) == ""


def test_metrics_json_the_log_and_eval_hold_the_same_validation_numbers(tmp_path):
    """metrics.json and logs/metrics.csv held the validation metrics as Lightning logs them, in float32, and eval
    its float64 ones: bits_per_token 3.964341163635254 in metrics.json, 3.9643411281614465 from eval --json, for
    the same weights on the same split. A table built from both now matches to the last digit."""
    from markovformer.training.metrics_log import read_log_rows
    from markovformer.training.runner import evaluate

    config = copy.deepcopy(TINY_RUN) | {"output_dir": str(tmp_path / "run")}
    config["trainer"] = config["trainer"] | {"max_steps": 4, "warmup_steps": 2, "eval_every": 4, "checkpoint_every": 4}
    results = train(resolve_run_config(config))
    scored = evaluate(tmp_path / "run", "val")["metrics"]
    assert scored["bits_per_token"] == scored["loss"] / math.log(2)  # the float64 value, not a float32 copy of it
    assert results["val"] == scored
    _, rows = read_log_rows(tmp_path / "run" / "logs" / "metrics.csv")
    logged = [row for row in rows if row.get("val/loss")][-1]
    assert {name: float(logged[f"val/{name}"]) for name in scored} == scored


def test_the_loggers_get_the_runs_config(tmp_path):
    """TensorBoard's hparams.yaml (which the README lists in a run directory) was {}, and a W&B or MLflow run got no
    config: a sweep's runs compared there showed their numbers without the settings that made them."""
    from markovformer.training.run_config import load_yaml

    config = copy.deepcopy(TINY_RUN) | {"output_dir": str(tmp_path / "run")}
    config["trainer"] = config["trainer"] | {"max_steps": 2, "warmup_steps": 1, "eval_every": 2, "seed": 10}
    train(resolve_run_config(config))
    saved = load_yaml(tmp_path / "run" / "tensorboard" / "hparams.yaml")
    assert saved == load_yaml(tmp_path / "run" / "config.yaml") and saved["trainer"]["seed"] == 10

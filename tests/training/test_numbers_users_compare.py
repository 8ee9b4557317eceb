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


def _multilingual(tmp_path) -> str:
    """Words of one to four UTF-8 bytes a character, so that byte-level BPE splits some characters across tokens."""
    rng = random.Random(1)
    words = ["to", "be", "Straße", "über", "naïve", "€uro", "日本語", "ok", "𝄞clef", "the", "Grüße"]
    text = "".join(rng.choice(words) + rng.choice(" \n,") for _ in range(2000))
    (tmp_path / "corpus.txt").write_text(text, encoding="utf-8")
    return text


def _characters_between(tokenizer, ids: list[int], start: int, stop: int) -> int:
    """Characters of ids[start:stop] as decoding tells them: a character cut by ``start`` belongs to the tokens
    before (decoding a prefix that ends inside one gives one replacement character for it)."""
    return len(tokenizer.decode(ids[:stop])) - len(tokenizer.decode(ids[:start]))


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_bits_per_character_is_the_bits_of_the_tokens_scored_over_their_characters(tmp_path, tokenizer):
    """Validation windows overlap, the first tokens are context only, and batches have their own mean losses: bits
    per character is every scored token's bits over those tokens' characters. It was bits per token over the
    characters per token of the whole split (its first 2^20 tokens), 0.55 % off on a BPE split of 1,050 tokens."""
    _multilingual(tmp_path)
    data = {"source": "text", "path": str(tmp_path / "corpus.txt"), "seq_len": 24, "overlap": 5,
            "fractions": [0.7, 0.3, 0.0], "tokenizer": tokenizer, **({"vocab_size": 300} if tokenizer == "bpe" else {})}
    config = resolve_run_config({"task": "causal_lm", "data": data, "model": {}})
    bundle = build_data(config)
    task = build_run_task(config, bundle)
    task.describe_split(bundle.val, bundle.tokenizer)
    metrics = task.new_metrics()
    bits = tokens = 0.0
    scored = []
    for index in range(0, len(bundle.val), 3):
        batch = collate([bundle.val[i] for i in range(index, min(index + 3, len(bundle.val)))])
        loss = 1.0 + 0.37 * (index % 5)  # unequal batch means
        metrics.update(type("Output", (), {"loss": torch.tensor(loss)})(), batch)
        targets = batch["labels"][:, 1:]
        count = int((targets != -100).sum())
        bits, tokens = bits + loss * count / math.log(2), tokens + count
        scored += targets[targets != -100].tolist()
    ids = [int(i) for i in bundle.val.store.tokens[bundle.val.start:bundle.val.stop]]
    first = 5  # the first overlap (5) tokens are context only: no position is scored with less context
    assert scored == ids[first:first + len(scored)]  # each token once, in order
    characters = _characters_between(bundle.tokenizer, ids, first, first + len(scored))
    if tokenizer == "bpe":
        assert len(scored) < 0.8 * characters  # merges: a BPE token spans several characters
        assert any(len(char.encode()) > 1 for char in bundle.tokenizer.decode(scored))
    results = metrics.compute()
    assert results["bits_per_token"] == pytest.approx(bits / tokens, rel=1e-6)
    assert results["bits_per_character"] == pytest.approx(bits / characters, rel=1e-6)


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_characters_of_ids_count_a_character_once_and_no_character_for_an_end_of_document(tmp_path, tokenizer):
    """Every prefix of a text's ids holds the characters decoding says (a character cut across tokens counts once,
    in the token with its first byte); <eod> is scored but no character (BPE decodes it as five: "<eod>")."""
    from markovformer.data.readers.tokenizer import END_OF_DOCUMENT, PAD_TOKEN, BPETokenizer, CharTokenizer

    documents = _multilingual(tmp_path).split("\n")[:40]
    if tokenizer == "bpe":
        tokens = BPETokenizer.train("\n".join(documents), 280, special_tokens=(PAD_TOKEN, END_OF_DOCUMENT))
    else:
        tokens = CharTokenizer("".join(sorted(set("".join(documents)))), end_of_document=True)
    counts = tokens.characters_of_ids()
    end = tokens.end_of_document_id
    ids = [i for document in documents for i in [*tokens.encode(document), end]]
    assert counts[0] == counts[end] == 0
    assert counts[ids].sum() == sum(map(len, documents))
    pieces = [i for document in documents for i in tokens.encode(document)]
    cut = [n for n in range(1, len(pieces)) if "\ufffd" in tokens.decode(pieces[:n])]
    assert (tokenizer == "bpe") == bool(cut)  # some prefixes end inside a character
    for n in range(0, len(pieces), 7 if tokenizer == "char" else 1):
        assert counts[pieces[:n]].sum() == len(tokens.decode(pieces[:n])), n


def test_a_foreign_vocabulary_has_no_characters_per_id(tmp_path):
    """A BPE tokenizer.json that is not byte-level (a user's own) cannot say its characters: no bits per character
    rather than a wrong one. Its entries may all be ASCII, which byte-level entries are too: one without the
    ByteLevel decoder joins its tokens with spaces (a Whitespace-split BPE on Shakespeare: 4,085 characters counted
    for 5,947 decoded, bits per character 46 % high)."""
    import tokenizers

    from markovformer.data.readers.tokenizer import PAD_TOKEN, BPETokenizer

    hf = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={PAD_TOKEN: 0, "a": 1, "b": 2, "ab": 3}, merges=[("a", "b")]))
    hf.add_special_tokens([PAD_TOKEN])
    ids = [hf.token_to_id(token) for token in ("ab", "a", "b")]
    assert len(BPETokenizer(hf).decode(ids)) == 6  # "ab a b": not the 4 characters of its entries
    assert BPETokenizer(hf).characters_of_ids() is None
    hf.decoder = tokenizers.decoders.ByteLevel()
    tokens = BPETokenizer(hf)
    assert tokens.characters_of_ids()[ids].sum() == len(tokens.decode(ids)) == 4  # ASCII entries are byte-level
    hf = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={PAD_TOKEN: 0, "a": 1, " ": 2}, merges=[]))
    hf.add_special_tokens([PAD_TOKEN])
    hf.decoder = tokenizers.decoders.ByteLevel()
    assert BPETokenizer(hf).characters_of_ids() is None  # a plain space is no byte-level entry ("Ġ" is)


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


def test_with_accumulation_each_step_gets_one_line_rating_its_own_steps_and_the_end_counts_the_last_steps(
        fake_clock, capsys):  # fmt: skip
    """Two micro-batches a step, a line every 2 steps: one line per step even though the step's first micro-batch
    ends on the step before (Lightning counts the step after the last one), the learning rate its first micro-batch
    read, the tokens per second of the line's own steps (not all the run's), and a run ending at step 5 (early
    stopping) between lines still counts step 5's tokens."""
    from types import SimpleNamespace

    fake_clock.patch(progress)
    fake_clock.now = 0.0
    line = progress.PrintProgress(every=2, total=6, stream=sys.stdout)
    group = {"lr": 0.0}
    optimizer = SimpleNamespace(param_groups=[group])
    trainer = SimpleNamespace(global_step=0, world_size=1, is_global_zero=True, callback_metrics={},
                              accumulate_grad_batches=2, optimizers=[optimizer])  # fmt: skip
    line.on_train_start(trainer, None)
    for step in range(1, 6):
        batch = {"input_ids": torch.zeros(1, step)}  # no mask: `step` real tokens
        for micro in range(2):
            group["lr"] = step / 1000 if micro == 0 else 1.0  # (what a later micro-batch sees must not show)
            line.on_train_batch_start(trainer, None, batch, 2 * (step - 1) + micro)
            fake_clock.now += 0.5
            trainer.global_step = step - 1 + micro
            line.on_train_batch_end(trainer, None, None, batch, 2 * (step - 1) + micro)
    line.on_train_end(trainer, None)
    lines = capsys.readouterr().out.splitlines()
    shape = r"step +(\d+)/6  train loss nan  lr (\S+) +(\d+) tok/s +\S+s"
    rates = [re.fullmatch(shape, text).groups() for text in lines]
    assert rates == [("2", "2.00e-03", "3"), ("4", "4.00e-03", "7")]  # 2 x (1 + 2) and 2 x (3 + 4) tokens in 2 s
    assert line.tokens == 2 * (1 + 2 + 3 + 4 + 5)


def test_all_splits_read_as_one_have_bits_per_character_over_all_their_characters(tmp_path):
    """``eval --split all`` scores the three splits as one: bits per character = all bits over all characters (it
    had no bits per character at first; then each split's characters per token, weighted by its tokens)."""
    from markovformer.data.bundle import JoinedSplits

    _multilingual(tmp_path)
    data = {"source": "text", "path": str(tmp_path / "corpus.txt"), "seq_len": 32, "fractions": [0.6, 0.2, 0.2],
            "tokenizer": "bpe", "vocab_size": 300}  # fmt: skip
    config = resolve_run_config({"task": "causal_lm", "data": data, "model": {}})
    bundle = build_data(config)
    task = build_run_task(config, bundle)
    joined = JoinedSplits(bundle.train, bundle.val, bundle.test)
    task.describe_split(joined, bundle.tokenizer)
    metrics = task.new_metrics()
    characters = 0
    for index in range(len(joined)):  # train's windows do not overlap: each one's first token is context only
        batch = collate([joined[index]])
        metrics.update(type("Output", (), {"loss": torch.tensor(2.0)})(), batch)
        window, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
        scored = [j for j in range(1, len(labels)) if labels[j] != -100]
        assert scored == list(range(scored[0], scored[-1] + 1))  # one run of positions, labelled with their tokens
        assert [labels[j] for j in scored] == [window[j] for j in scored]
        characters += _characters_between(bundle.tokenizer, window, scored[0], scored[-1] + 1)
    assert metrics.compute()["bits_per_character"] == pytest.approx(
        2.0 / math.log(2) * int(metrics.loss.weight) / characters, rel=1e-6)


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
    from markovformer.training.log_rows import read_log_rows
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

"""The training and validation batches a run reads are those of naive references (each example read alone, padded
one at a time with ``pad_sequence``, as the loaders first did), bit for bit: the loaders' faster paths change no
batch a seed draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pad_sequence

from markovformer.data.collate import IGNORE_INDEX, pad_right
from markovformer.data.readers.csv_series import load_csv_series
from markovformer.data.readers.text import load_text_lm
from markovformer.data.translation import SyntheticTranslationSource, collate_translation
from markovformer.data.translation.special_tokens import BOS_TOKEN_ID, EOS_TOKEN_ID, PAD_TOKEN_ID
from markovformer.training.batches import EpochBatches
from markovformer.training.tasks import build_task
from markovformer.training.trainer_config import TrainerConfig


def naive_collate(examples: list[dict]) -> dict:
    key = "input_ids" if "input_ids" in examples[0] else "input_features"
    sequences = [example[key] for example in examples]
    batch = {key: pad_sequence(sequences, batch_first=True, padding_value=0)}
    if key == "input_ids":
        batch[key] = batch[key].long()
    lengths = torch.tensor([len(sequence) for sequence in sequences])
    batch["attention_mask"] = (torch.arange(int(lengths.max()))[None, :] < lengths[:, None]).long()
    if "position_ids" in examples[0]:
        positions = [example["position_ids"] for example in examples]
        batch["position_ids"] = pad_sequence(positions, batch_first=True, padding_value=0).long()
    labels = [example["labels"] for example in examples]
    if labels[0].dim() == 0:
        batch["labels"] = torch.stack(labels).long()
    else:
        batch["labels"] = pad_sequence(labels, batch_first=True, padding_value=IGNORE_INDEX).long()
    return batch


def naive_collate_translation(examples: list[dict]) -> dict:
    sources = [example["src_ids"].long() for example in examples]
    inputs = [torch.cat([torch.tensor([BOS_TOKEN_ID]), example["tgt_ids"].long()]) for example in examples]
    labels = [torch.cat([example["tgt_ids"].long(), torch.tensor([EOS_TOKEN_ID])]) for example in examples]

    def mask(sequences):
        lengths = torch.tensor([len(sequence) for sequence in sequences])
        return (torch.arange(int(lengths.max()))[None, :] < lengths[:, None]).long()

    return {"src_ids": pad_sequence(sources, batch_first=True, padding_value=PAD_TOKEN_ID), "src_mask": mask(sources),
            "tgt_ids": pad_sequence(inputs, batch_first=True, padding_value=PAD_TOKEN_ID), "tgt_mask": mask(inputs),
            "labels": pad_sequence(labels, batch_first=True, padding_value=IGNORE_INDEX)}  # fmt: skip


class NaiveWindows:
    """A ``StoreWindows`` split read token by token through the store's map: the positions of each token counted
    from the last document start at or before it (the window's start at least), the first token of each document
    after the window's first unscored."""

    def __init__(self, windows) -> None:
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> dict:
        begin, end = self.windows.window(index)
        tokens = torch.from_numpy(np.array(self.windows.store.tokens[begin:end], dtype=np.int64))
        labels = tokens.clone()
        labels[: self.windows.overlap] = IGNORE_INDEX
        example = {"input_ids": tokens, "labels": labels}
        if self.windows.position_ids:
            starts = set(self.windows.store.document_starts.tolist())
            positions, first = [], begin
            for offset in range(begin, end):
                first = offset if offset in starts else first
                positions.append(offset - first)
                if offset in starts and offset > begin:
                    labels[offset - begin] = IGNORE_INDEX
            example["position_ids"] = torch.tensor(positions)
        return example


def assert_same_batches(batches, expected_batches) -> None:
    for batch, expected in zip(batches, expected_batches, strict=True):
        assert sorted(batch) == sorted(expected)
        for key, value in expected.items():
            assert batch[key].dtype == value.dtype, key
            assert torch.equal(batch[key], value), key


def first_batches(stream, count: int) -> list[dict]:
    iterator = iter(stream)
    return [next(iterator) for _ in range(count)]


def scoring_batches(split, collate_batch, size: int) -> list[dict]:
    return [collate_batch([split[i] for i in range(start, min(start + size, len(split)))])
            for start in range(0, len(split), size)]  # fmt: skip


@pytest.mark.parametrize("lengths", [[5, 5, 5], [5, 2, 7], [1], [3, 0, 3]])
@pytest.mark.parametrize("trailing", [(), (3,)])
def test_pad_right_is_pad_sequence(lengths, trailing):
    sequences = [torch.randn(length, *trailing) for length in lengths]
    for value in (0.0, -100.0):
        assert torch.equal(pad_right(sequences, value), pad_sequence(sequences, batch_first=True, padding_value=value))


def test_pad_right_of_mixed_dtypes_keeps_the_first_ones_as_pad_sequence_does():
    sequences = [torch.tensor([1.5, 2.5], dtype=torch.float64), torch.tensor([1.25, 3.0], dtype=torch.float32)]
    padded = pad_right(sequences, 0.0)
    assert padded.dtype == torch.float64 and torch.equal(padded, pad_sequence(sequences, batch_first=True))


@pytest.mark.parametrize(("packing", "overlap"), [(False, 0), (True, 0), (True, 3)])
def test_text_windows_batches_are_the_naive_ones(tmp_path, packing, overlap):
    folder = tmp_path / "documents"
    folder.mkdir()
    for index in range(12):  # documents of 3..80 characters: several start inside most windows
        (folder / f"{index:02d}.txt").write_text("".join("abcdefg\n"[(index * j) % 8] for j in range(3 + 7 * index)))
    bundle = load_text_lm(folder, seq_len=16, fractions=(0.8, 0.1, 0.1), packing=packing, overlap=overlap,
                          cache_dir=tmp_path / "cache")  # fmt: skip
    trainer = TrainerConfig(batch_size=4, seed=5)
    stream = build_task("causal_lm", trainer, bundle.info, bundle.tokenizer).train_batches(bundle, None, lambda: 0)
    naive = EpochBatches(NaiveWindows(bundle.train), 4, seed=5, collate=naive_collate)
    assert_same_batches(first_batches(stream, 40), first_batches(naive, 40))
    assert_same_batches(scoring_batches(bundle.val, bundle.collate, 3),
                        scoring_batches(NaiveWindows(bundle.val), naive_collate, 3))  # fmt: skip


@pytest.mark.parametrize("task", ["sequence_classification", "token_classification"])
def test_time_series_batches_are_the_naive_ones(tmp_path, task):
    path = tmp_path / "series.csv"
    rows = [f"{np.sin(i):.4f},{np.cos(i / 3):.4f},{i % 3}" for i in range(400)]
    path.write_text("a,b,label\n" + "\n".join(rows) + "\n")
    bundle = load_csv_series(path, label_column="label", window=12, stride=3, fractions=(0.7, 0.15, 0.15), task=task)
    trainer = TrainerConfig(batch_size=8, seed=1)
    stream = build_task(task, trainer, bundle.info).train_batches(bundle, None, lambda: 0)
    naive = EpochBatches(bundle.train, 8, seed=1, collate=naive_collate)
    assert_same_batches(first_batches(stream, 30), first_batches(naive, 30))
    assert_same_batches(scoring_batches(bundle.val, bundle.collate, 5),
                        scoring_batches(bundle.val, naive_collate, 5))  # fmt: skip


def test_translation_batches_are_the_naive_ones():
    bundle = SyntheticTranslationSource(train_examples=300, val_examples=20, test_examples=4).build(0)
    trainer = TrainerConfig(batch_size=8, seed=2)
    stream = build_task("translation", trainer, bundle.info, bundle.tokenizer).train_batches(bundle, None, lambda: 0)
    naive = EpochBatches(bundle.train, 8, seed=2, collate=naive_collate_translation,
                         lengths=bundle.lengths(bundle.train))  # fmt: skip
    assert_same_batches(first_batches(stream, 60), first_batches(naive, 60))
    assert_same_batches(scoring_batches(bundle.val, collate_translation, 6),
                        scoring_batches(bundle.val, naive_collate_translation, 6))  # fmt: skip


def test_translation_collate_of_empty_and_narrow_targets_is_the_naive_one():
    generator = torch.Generator().manual_seed(0)

    def ids(length: int) -> torch.Tensor:
        return torch.randint(4, 50, (length,), generator=generator, dtype=torch.int32)

    pairs = [{"src_ids": ids(1 + n % 4), "tgt_ids": ids(n)} for n in range(6)]  # targets of 0..5 tokens
    assert_same_batches([collate_translation(pairs), collate_translation(pairs[:1])],
                        [naive_collate_translation(pairs), naive_collate_translation(pairs[:1])])  # fmt: skip

"""A few SGD steps of transformers' Trainer on a small Markovian Transformer, whose labels score unequal numbers of
tokens per row: imported by test_hf_trainer.py for the one-process run, and run as a script under torchrun for the
two-process one (``python hf_trainer_run.py TASKS BATCH ACCUMULATION OUT``: for each of the comma-separated TASKS
in turn, in the one process group, the trained parameters and logged losses saved to OUT/TASK.pt by process 0)."""

from __future__ import annotations

import os
import sys

import torch
import transformers

from markovformer.hf import HF_CLASSES, HF_CONFIGS

VOCAB = 9


def rows(task: str) -> list[dict]:
    """24 rows of 3 to 12 tokens: a causal LM's labels are its inputs, every third row's tail ignored (-100); a
    token classifier's are one of 3 classes per token but the first (-100)."""
    generator = torch.Generator().manual_seed(5)
    data = []
    for index in range(24):
        ids = torch.randint(1, VOCAB, (int(torch.randint(3, 13, (1,), generator=generator)),), generator=generator)
        labels = ids.clone() if task == "causal_lm" else ids % 3
        if task == "causal_lm" and index % 3 == 0:
            labels[2:] = -100
        elif task != "causal_lm":
            labels[0] = -100
        data.append({"input_ids": ids, "labels": labels})
    return data


def collate(batch: list[dict]) -> dict:
    """Right-padded with 0, labels with -100, and the attention mask."""
    length = max(len(row["input_ids"]) for row in batch)
    ids = torch.zeros(len(batch), length, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    for index, row in enumerate(batch):
        ids[index, : len(row["input_ids"])] = row["input_ids"]
        labels[index, : len(row["labels"])] = row["labels"]
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": labels}


def small_model(task: str, **options):
    """The Markovian Transformer of ``task`` (a Markov layer with order gates and lag strengths), seeded."""
    torch.manual_seed(0)
    config = HF_CONFIGS["markovian_transformer"](vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=2, max_order=3,
                                                 dropout=0.0, num_labels=3, **options)  # fmt: skip
    return HF_CLASSES["markovian_transformer", task][1](config)


def train(task: str, batch: int, accumulation: int, output_dir: str, steps: int = 3, data: list | None = None,
          training: dict | None = None, **options) -> tuple[dict, list[float]]:  # fmt: skip
    """The parameters after ``steps`` SGD steps (learning rate 0.5) of ``batch`` rows per process times
    ``accumulation``, and the logged losses; ``training``: more TrainingArguments, ``options``: the model's."""
    model = small_model(task, **options)
    distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    arguments = transformers.TrainingArguments(
        output_dir=output_dir, max_steps=steps, per_device_train_batch_size=batch,
        gradient_accumulation_steps=accumulation, learning_rate=0.5, optim="sgd", lr_scheduler_type="constant",
        max_grad_norm=0.0, weight_decay=0.0, logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
        disable_tqdm=True, seed=0, ddp_backend="gloo" if distributed else None, **(training or {}))  # fmt: skip
    trainer = transformers.Trainer(model=model, args=arguments, train_dataset=data or rows(task),
                                   data_collator=collate)  # fmt: skip
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {name: tensor.detach().clone() for name, tensor in model.named_parameters()}, losses


if __name__ == "__main__":
    tasks, batch, accumulation, out = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    for task in tasks:
        trained = train(task, batch, accumulation, os.path.join(out, task + ".trainer"))
        if int(os.environ["RANK"]) == 0:
            torch.save(trained, os.path.join(out, task + ".pt"))
        torch.distributed.barrier()
    torch.distributed.destroy_process_group()

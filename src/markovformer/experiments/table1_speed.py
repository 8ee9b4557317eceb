"""Table I's cost columns: peak training memory at a long context and training throughput at a shorter one, of one
model, measured in a child process of its own (``markovformer.bench.harness``:
``python -m markovformer.experiments.table1_speed JOB``).

One training step is forward, backward and an AdamW update on one random sequence of T steps (batch 1), inputs and
labels drawn for the model's task. Peak memory: the step's high-water mark above the memory in use before it, plus
parameters and optimizer state (``markovformer.bench.measure.PeakMemory``; on CPU the process's resident peak),
read after one short step (code paged in, optimizer state made) and before anything longer runs in the process.
Throughput: T / the median time of the timed steps after one warm-up step.
"""

from __future__ import annotations

import sys

import torch

from markovformer.bench.harness import child_main, run_in_child
from markovformer.bench.measure import PeakMemory, time_steps
from markovformer.models.registry import MODEL_FAMILIES, head_class

# A training step's random labels (batch 1) by task: one class per sequence, or for CTC a transcript a quarter of the
# frames long (CTC needs at most T labels; 0 is the blank).
RANDOM_LABELS = {
    "sequence_classification": lambda classes, seq_len, rng: torch.randint(0, classes, (1,), generator=rng),
    "ctc": lambda classes, seq_len, rng: torch.randint(1, classes, (1, max(1, seq_len // 4)), generator=rng),
}


def build(model_type: str, task: str, section: dict) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The head model of ``section`` (complete: input and label sizes filled) and its AdamW optimizer."""
    model = head_class(model_type, task)(MODEL_FAMILIES[model_type].config_class.from_dict(section))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, task: str, seq_len: int, seed: int = 0):
    """``step()``: one training step of ``model`` on a random input of ``seq_len`` steps (batch 1)."""
    config = model.config
    generator = torch.Generator().manual_seed(seed)
    if config.vocab_size is not None:
        inputs = {"input_ids": torch.randint(1, config.vocab_size, (1, seq_len), generator=generator)}
    else:
        inputs = {"input_features": torch.randn(1, seq_len, config.input_dim, generator=generator)}
    inputs["attention_mask"] = torch.ones(1, seq_len, dtype=torch.long)
    labels = RANDOM_LABELS[task](config.num_labels, seq_len, generator)

    def step() -> None:
        model(**inputs, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def state_mib(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """Parameters and optimizer state, MiB."""
    tensors = list(model.parameters())
    tensors += [value for state in optimizer.state.values() for value in state.values() if torch.is_tensor(value)]
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors) / 2**20


def measure(job: dict) -> dict:
    """``job``: model_type, task, section (complete: input and label sizes filled), memory_length, speed_length,
    repeats. Returns peak_mib (at memory_length), tokens_per_second and step_seconds (at speed_length)."""
    result: dict = {}
    model, optimizer = build(job["model_type"], job["task"], job["section"])
    training_step(model, optimizer, job["task"], min(64, job["memory_length"]))()  # code paged in, optimizer state made
    step = training_step(model, optimizer, job["task"], job["memory_length"])
    memory = PeakMemory("cpu")
    memory.start()
    step()
    result["peak_mib"] = memory.peak_mib() + state_mib(model, optimizer)
    if not memory.isolated:
        result["peak_note"] = "resident peak since the process began (reset refused)"
    step = training_step(model, optimizer, job["task"], job["speed_length"])
    step()  # warm-up
    timed = time_steps(step, job["repeats"], time_cap=float("inf"), sync=lambda: None)
    result.update(step_seconds=timed["seconds"], tokens_per_second=job["speed_length"] / timed["seconds"],
                  timed_steps=timed["runs"], threads=torch.get_num_threads())  # fmt: skip
    return result


def measure_in_child(job: dict, timeout: float = 1800.0) -> dict:
    """``measure(job)`` in a fresh Python process (its own memory high-water mark); a failure (out of memory, a
    time-out, an error) comes back as ``{"skipped": reason}``."""
    (row,) = run_in_child("markovformer.experiments.table1_speed", job, [{}], timeout)
    if "error" in row:
        return {"skipped": f"the measuring process failed: {row['error']}"}
    return row


if __name__ == "__main__":
    child_main(sys.argv[1:], lambda job: [measure(job)])

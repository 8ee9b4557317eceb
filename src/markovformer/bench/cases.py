"""Benchmark cases, run inside a child process (``bench.harness``): ``python -m markovformer.bench.cases '<json>'``.

The JSON holds ``cases`` (run in order), ``device``, ``threads``, ``memory_cap_mib`` and ``time_cap`` (seconds per
step). Each finished case prints its row at once, so a parent that loses the child (killed, timed out) keeps
the rows before it. On CPU the child limits its own address space to the memory cap above where it started, so a
case that would exceed the cap fails with an allocation error (reported as out of memory) instead of pushing the
machine into swap or the OOM killer.

An op case times forward + backward of one attention op (or layer) against a dense upstream gradient; a model case
times one full training step (forward, loss, backward, AdamW update).
"""

from __future__ import annotations

import gc
import resource
import statistics
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from markovformer.allocator import keep_freed_memory
from markovformer.bench.decode import decode_case
from markovformer.bench.harness import child_main
from markovformer.bench.measure import PeakMemory, SizeSeries, status_mib, time_steps
from markovformer.bench.models import build_model, loss_of, parameter_count
from markovformer.bench.scan import scan_step, training_throughput
from markovformer.bench.translation_decode import translation_decode_case
from markovformer.bench.windows import NOT_INSTALLED, local_attention_available, window_step
from markovformer.layers import MarkovAttention
from markovformer.layers.attention import CoreOutput
from markovformer.layers.hybrid_attention import markov_head_count
from markovformer.layers.registry import build_attention
from markovformer.ops.lag_bias_attention import lag_bias_attention
from markovformer.ops.lag_bias_attention.flex import block_mask_for, compiled_flex_attention
from markovformer.ops.linear_attention import draw_projection, feature_map, linear_attention

# markov_layer: a MarkovAttention layer (projections, gates, attention) timed in turns with the same layer whose
# attention core is removed ("projections_only"), so their ratio is taken under the same machine load.
# <kind>_layer: the attention layer of registered kind <kind> (projections included, no rotary), for the positional
# kinds of issue 31 beside the softmax layer; "fox_pro_layer" is "forgetting" with the four parts of FoX Pro.
POSITION_LAYER_OPTIONS = {
    "softmax_layer": ("softmax", {}), "alibi_layer": ("alibi", {}), "forgetting_layer": ("forgetting", {}),
    "fox_pro_layer": ("forgetting", {"output_gate": True, "output_norm": True, "qk_norm": True, "kv_shift": True}),
    "t5_bias_layer": ("t5_bias", {}), "dynamic_bias_layer": ("dynamic_bias", {}),
    "stick_breaking_layer": ("stick_breaking", {}), "cope_layer": ("cope", {}), "selective_layer": ("selective", {}),
}  # fmt: skip
OP_KINDS = ("markov_local", "markov_global", "softmax_sdpa", "random_feature", "hybrid", "markov_layer",
            *POSITION_LAYER_OPTIONS)  # fmt: skip
CUDA_OP_KINDS = ("sliding_window_flex",)  # FlexAttention's plain sliding window: what the Markov bias adds to
OP_SHAPE = dict(batch=1, heads=8, head_dim=32, order=4)  # d_model = 256, the paper's configuration; K = W = 4
HYBRID_MARKOV_HEAD_RATIO = 0.5  # the "hybrid" op kind: half the heads Markov, as the paper's models


class _ProjectionsOnly(nn.Module):
    """An attention core that returns its values: the layer with the attention itself removed."""

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None):
        return CoreOutput(v, {}, None)


def _op_step(kind: str, seq_len: int, device: str, backend: str):
    """Inputs for one op case and the step that runs it (forward + backward, gradients cleared)."""
    batch, heads, head_dim, order = (OP_SHAPE[key] for key in ("batch", "heads", "head_dim", "order"))
    generator = torch.Generator().manual_seed(0)
    if kind in ("markov_layer", "projections_only") or kind in POSITION_LAYER_OPTIONS:
        if kind in POSITION_LAYER_OPTIONS:
            registered, options = POSITION_LAYER_OPTIONS[kind]
            layer = build_attention(registered, d_model=heads * head_dim, n_heads=heads, causal=True, rotary=False,
                                    **options)  # fmt: skip
        else:
            layer = MarkovAttention(d_model=heads * head_dim, n_heads=heads, max_order=order, window=order,
                                    backend=backend)  # fmt: skip
        if kind == "projections_only":
            layer.cores[0] = _ProjectionsOnly()
        layer = layer.to(device)
        x = torch.randn(batch, seq_len, heads * head_dim, generator=generator).to(device).requires_grad_()
        upstream = torch.randn(batch, seq_len, heads * head_dim, generator=generator).to(device)
        leaves = [x, *layer.parameters()]

        def forward():
            return layer(x)

    else:
        shape = (batch, heads, seq_len, head_dim)
        q, k, v = (torch.randn(shape, generator=generator).to(device).requires_grad_() for _ in range(3))
        bias = torch.randn(batch, heads, seq_len, order, generator=generator).to(device).requires_grad_()
        projection = draw_projection(64, head_dim, generator=generator).to(device)
        # A dense upstream gradient, as a following layer sends (out.sum() would send a stride-0 one).
        upstream = torch.randn(shape, generator=generator).to(device)
        leaves = [q, k, v, bias]
        n_markov = markov_head_count(heads, HYBRID_MARKOV_HEAD_RATIO)

        def local(q, k, v, bias):
            return lag_bias_attention(q, k, v, bias, window=order, causal=True, backend=backend)

        def features(q, k, v):
            q_features = feature_map(q, projection, "positive", is_query=True)
            return linear_attention(q_features, feature_map(k, projection, "positive"), v, causal=True)

        def forward():
            if kind == "markov_local":
                return local(q, k, v, bias)
            if kind == "markov_global":
                return lag_bias_attention(q, k, v, bias, window=None, causal=True, backend=backend)
            if kind == "softmax_sdpa":
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if kind == "random_feature":
                return features(q, k, v)
            if kind == "hybrid":  # the first heads local Markov, the rest random features, as hybrid_split splits
                markov = local(q[:, :n_markov], k[:, :n_markov], v[:, :n_markov], bias[:, :n_markov])
                return torch.cat([markov, features(q[:, n_markov:], k[:, n_markov:], v[:, n_markov:])], dim=1)
            if kind == "sliding_window_flex":
                return _sliding_window_flex(q, k, v, order)
            raise ValueError(f"expected one of {OP_KINDS + CUDA_OP_KINDS}; got the unknown op kind {kind!r}")

    def step():
        forward().backward(upstream)
        for leaf in leaves:
            leaf.grad = None

    return step


def _sliding_window_flex(q, k, v, window: int):
    return compiled_flex_attention()(q, k, v, block_mask=block_mask_for(q.shape[-2], window, True, None, q.device))


def _model_step(name: str, seq_len: int, batch: int, device: str):
    model = build_model(name).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 256, (batch, seq_len), generator=torch.Generator().manual_seed(0)).to(device)

    def step():
        loss_of(model, ids).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, model, optimizer


def _is_out_of_memory(error: BaseException) -> bool:
    text = str(error).lower()
    return isinstance(error, MemoryError) or "out of memory" in text or "can't allocate memory" in text


def _state_mib(model: nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """Parameters and optimizer state (what a training run holds between steps), in MiB."""
    tensors = list(model.parameters())
    tensors += [value for state in optimizer.state.values() for value in state.values() if torch.is_tensor(value)]
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors) / 2**20


def _paired_times(step, reference, repeats: int, time_cap: float, sync) -> dict:
    """``step`` and ``reference`` timed in turns (at least one turn, whatever the cap): their medians and the median
    of the per-turn ratios."""
    pairs: list[tuple[float, float]] = []
    while not pairs or (len(pairs) < repeats and sum(a + b for a, b in pairs) <= time_cap):
        one = time_steps(step, 1, time_cap, sync)["seconds"]
        other = time_steps(reference, 1, time_cap, sync)["seconds"]
        pairs.append((one, other))
    return {"seconds": statistics.median(a for a, _ in pairs), "runs": len(pairs),
            "projections_seconds": statistics.median(b for _, b in pairs),
            "over_projections": statistics.median(a / b for a, b in pairs)}  # fmt: skip


def run_case(case: dict, device: str, time_cap: float) -> dict:
    """One measurement: ``case`` has ``part`` ("ops", "windows", "scan" or "models"), ``kind``, ``T``, ``repeats``
    and, for models, ``batch`` (the generation parts and "scan_training" run their own loops). Returns the row:
    the case plus ``seconds`` (median of the timed runs after a warm-up run) and ``peak_mib``; models add
    ``tokens_per_second``.

    Peak memory is read over the timed runs above the memory in use after the warm-up, so one-time costs of a fresh
    process (libraries paged in, lazy initialisation) are left out; a model adds its parameters and optimizer
    state back (``state_mib``). On CPU, reading it hands the warm-up's freed memory back to the OS, so the next step
    faults all of it in again: that step is run untimed (a cold step among two timed runs read 23 % slow). With
    ``repeats=0`` the single run is both warm-up and measurement, and its peak includes those one-time costs (an
    upper bound, enough for the longest-context search); so does a case whose warm-up alone exceeded the time cap
    (noted in ``peak_note``)."""
    if case["part"] == "decode":  # generation: its own loop and timing (markovformer.bench.decode)
        return {**case, **decode_case(case["kind"], case["T"], case["batch"], device)}
    if case["part"] == "translation_decode":  # the same for the translator (markovformer.bench.translation_decode)
        return {**case, **translation_decode_case(case["kind"], case["T"], case["batch"])}
    if case["part"] == "scan_training":  # whole training steps of two recipes (markovformer.bench.scan)
        return {**case, **training_throughput(case["kind"], case["steps"])}
    memory = PeakMemory(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    row, state_mib = dict(case), 0.0
    memory.start()  # the warm-up's peak, for a case that times nothing after it
    reference = None
    if case["part"] == "windows":
        step = window_step(case["kind"], case["T"], device)
    elif case["part"] == "scan":
        step = scan_step(case["kind"], case["T"], device)
    elif case["part"] == "ops":
        step = _op_step(case["kind"], case["T"], device, case.get("backend", "auto"))
        if case["kind"] == "markov_layer":
            reference = _op_step("projections_only", case["T"], device, case.get("backend", "auto"))
    else:
        step, model, optimizer = _model_step(case["kind"], case["T"], case["batch"], device)
        row["parameters"] = parameter_count(model)
    if case["repeats"] == 0:
        row.update(time_steps(step, 0, time_cap, sync))
        row["warmup_seconds"] = row["seconds"]
    else:
        row.update(time_steps(step, 1, time_cap, sync))
        if device == "cuda":  # the first step compiled kernels (FlexAttention, Triton's autotuning): once more
            row["compile_seconds"] = row["seconds"]
            row.update(time_steps(step, 1, time_cap, sync))
        row["warmup_seconds"] = row.pop("seconds")
        if reference is not None:
            reference()
        if row["warmup_seconds"] <= time_cap:
            if case["part"] == "models":
                state_mib = row["state_mib"] = _state_mib(model, optimizer)
            memory.start()
            left = time_cap - row["warmup_seconds"]
            if device != "cuda":  # the memory the warm-up freed was handed back: fault it in again, untimed
                left -= time_steps(step, 1, time_cap, sync)["seconds"]
            if reference is not None:
                row.update(_paired_times(step, reference, case["repeats"], left, sync))
            else:
                row.update(time_steps(step, case["repeats"], left, sync))
        else:
            row.update(seconds=row["warmup_seconds"], runs=0)
            row["peak_note"] = "the warm-up step's, with one-time costs: the warm-up alone exceeded the time cap"
    row["peak_mib"] = memory.peak_mib() + state_mib
    if not memory.isolated:
        notes = [row.get("peak_note"), "high-water mark since the process began (reset refused)"]
        row["peak_note"] = "; ".join(note for note in notes if note)
    if case["part"] == "models":
        row["tokens_per_second"] = case["batch"] * case["T"] / row["seconds"]
    return row


def _limit_address_space(memory_cap_mib: float) -> None:
    """Fail allocations (MemoryError / allocation errors) beyond ``memory_cap_mib`` above the current size."""
    current = status_mib("VmSize")
    if current is None:
        return
    # slack: address space that is reserved, not used: 512 MiB, and per intra-op thread glibc's 64 MiB malloc arena
    # and an 8 MiB stack (one step's address space grew by 164 MiB with one thread and 670 MiB with eight, its
    # resident size by the same ~185 MiB: without it a cap read as "out of memory" on many cores)
    limit = int((current + memory_cap_mib + 512 + 72 * torch.get_num_threads()) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def measure_cases(job: dict) -> Iterator[dict]:
    """The child's work (``harness.child_main``): ``job`` holds ``cases``, ``device``, ``memory_cap_mib``,
    ``time_cap``, ``keep_freed_memory`` and ``default_growth`` (``SizeSeries``'); yields a row per case, in order."""
    device, time_cap, memory_cap = job["device"], job["time_cap"], job["memory_cap_mib"]
    if job.get("keep_freed_memory", True):
        keep_freed_memory()
    if device == "cpu":
        _limit_address_space(memory_cap)
    series: dict[str, SizeSeries] = {}
    for case in job["cases"]:
        sizes = series.setdefault(case["kind"], SizeSeries(memory_cap, time_cap, job.get("default_growth", 2.0)))
        reason = sizes.skip_reason(case["T"])
        if case["part"] == "windows" and case["kind"].startswith("local_attention"):
            reason = reason or (None if local_attention_available() else NOT_INSTALLED)
        if reason:
            row = {**case, "skipped": reason}
        else:
            try:
                row = run_case(case, device, time_cap)
            except (RuntimeError, MemoryError) as error:
                if not _is_out_of_memory(error):
                    raise
                row = {**case, "skipped": f"out of memory (cap {memory_cap:.0f} MiB): {str(error).splitlines()[0]}"}
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()
        sizes.add(row)
        yield row


if __name__ == "__main__":
    child_main(sys.argv[1:], measure_cases)

"""The CUDA paths (skipped without a GPU; CI has none): every causal kind computes on a GPU what it computes on the
CPU (logits and gradients, left padding included), decodes there through its own state as its full forward does,
a compiled decoding step generates the eager tokens, and a training run on ``trainer.accelerator=gpu`` follows the
CPU run's losses."""

from __future__ import annotations

import importlib
import json

import pytest
import torch
import yaml
from test_generate import INCREMENTAL, _left_padded, _markovian

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")



@pytest.fixture(autouse=True)
def _full_precision_matmuls():
    """TF32 would round products to 10 mantissa bits: compare float32 with float32."""
    previous = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous


@pytest.mark.parametrize("name", list(INCREMENTAL))
def test_every_kind_computes_on_cuda_what_it_computes_on_the_cpu(name):
    cpu = _markovian(INCREMENTAL[name]).train(False)
    gpu = _markovian(INCREMENTAL[name]).train(False).cuda()
    ids, mask = _left_padded(length=17)
    labels = ids.masked_fill(mask == 0, -100)
    cpu_out = cpu(ids, attention_mask=mask, labels=labels)
    gpu_out = gpu(ids.cuda(), attention_mask=mask.cuda(), labels=labels.cuda())
    real = mask.bool()[..., None]
    torch.testing.assert_close(gpu_out.logits.cpu() * real, cpu_out.logits * real, rtol=1e-4, atol=1e-4)
    cpu_out.loss.backward()
    gpu_out.loss.backward()
    for (parameter_name, a), b in zip(cpu.named_parameters(), gpu.parameters(), strict=True):
        if a.grad is None:
            assert b.grad is None or not b.grad.any(), parameter_name
            continue
        torch.testing.assert_close(
            b.grad.cpu(), a.grad, rtol=1e-3, atol=1e-4, msg=lambda m, n=parameter_name: f"{n}: {m}"
        )


def test_from_pretrained_loads_onto_the_device_it_is_given(tmp_path):
    """map_location names where the model lives, not only where the file is read to: the weights were copied into
    a model built on the CPU, which stayed there."""
    model = _markovian(INCREMENTAL["markov_local"]).train(False)
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path, map_location="cuda")
    assert {tensor.device.type for tensor in [*loaded.parameters(), *loaded.buffers()]} == {"cuda"}
    ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(loaded(ids.cuda()).logits.cpu(), model(ids).logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scope", ["local", "global"])
def test_a_markov_model_on_flex_computes_what_it_computes_on_the_cpu(scope, monkeypatch):
    """Head dimension 16: the GPU runs FlexAttention's compiled kernel (its bias gradients through ``score_mod``),
    the CPU the band or the chunked path."""
    dispatcher = importlib.import_module("markovformer.ops.lag_bias_attention")
    flex_calls = []

    def counted_flex(*args, **options):
        flex_calls.append(args[0].device)
        return flex(*args, **options)

    flex = dispatcher.lag_bias_attention_flex
    monkeypatch.setattr(dispatcher, "lag_bias_attention_flex", counted_flex)
    options = dict(
        attention="markov", max_order=3, scope=scope, d_model=32, **({"window": 5} if scope == "local" else {})
    )
    cpu = _markovian(options).float()
    gpu = _markovian(options).cuda()
    ids, mask = _left_padded(length=130)  # flex from FLEX_MIN_LENGTH = 128 positions
    labels = ids.masked_fill(mask == 0, -100)
    outputs = [model(i, attention_mask=m, labels=y) for model, i, m, y in
               ((cpu, ids, mask, labels), (gpu, ids.cuda(), mask.cuda(), labels.cuda()))]  # fmt: skip
    assert len(flex_calls) == 2 and all(device.type == "cuda" for device in flex_calls)  # each GPU layer, no CPU one
    real = mask.bool()[..., None]
    torch.testing.assert_close(outputs[1].logits.cpu() * real, outputs[0].logits * real, rtol=1e-4, atol=1e-4)
    for output in outputs:
        output.loss.backward()
    for (name, a), b in zip(cpu.named_parameters(), gpu.parameters(), strict=True):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-3, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("name", list(INCREMENTAL))
def test_prefill_then_steps_equal_the_full_forward_on_cuda(name):
    model = _markovian(INCREMENTAL[name]).cuda()
    ids, mask = (t.cuda() for t in _left_padded(length=17))
    prompt = 3
    with torch.no_grad():
        full = model(ids, attention_mask=mask).logits
        state: dict = {}
        steps = [model(ids[:, :prompt], attention_mask=mask[:, :prompt], state=state).logits]
        for t in range(prompt, ids.shape[1]):
            steps.append(model(ids[:, t : t + 1], attention_mask=mask[:, t : t + 1], state=state).logits)
    real = mask.bool()[..., None]
    torch.testing.assert_close(torch.cat(steps, dim=1) * real, full * real, rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", ["markov_local", "softmax_global_learned", "retnet", "gru_injection", "hyena"])
def test_greedy_generation_on_cuda_is_the_teacher_forced_argmax(name):
    model = _markovian(INCREMENTAL[name]).cuda()
    prompt, mask = (t.cuda() for t in _left_padded())
    generated = model.generate(prompt, mask, max_new_tokens=9)
    full_mask = torch.cat([mask, torch.ones_like(generated[:, prompt.shape[1] :])], dim=1)
    with torch.no_grad():
        logits = model(generated, attention_mask=full_mask).logits
    assert torch.equal(logits[:, prompt.shape[1] - 1 : -1].argmax(-1), generated[:, prompt.shape[1] :])


def test_a_compiled_decoding_step_on_cuda_generates_what_the_eager_one_does():
    model = _markovian(INCREMENTAL["markov_local"]).cuda()
    prompt, mask = (t.cuda() for t in _left_padded())
    eager = model.generate(prompt, attention_mask=mask, max_new_tokens=12)
    compiled = model.generate(prompt, attention_mask=mask, max_new_tokens=12, compile_step=True)
    assert torch.equal(compiled, eager)


@pytest.mark.parametrize(("order", "transparent"), [(None, False), (3, True), (3, False)])
@pytest.mark.parametrize("beam_size", [1, 4])
def test_the_translator_translates_on_cuda_what_it_translates_on_the_cpu(order, transparent, beam_size):
    """MAT's generation (greedy and beam, padded sources) on CUDA: the CPU's sequences and scores, for the AT, MAT
    and the n-gram mask; mat-order's de-en cells decode their BLEU this way on a GPU."""
    from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration
    from markovformer.models.markov_translator.generation import generate

    torch.manual_seed(0)
    config = MarkovTranslatorConfig(vocab_size=40, d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
                                    order=order, transparent=transparent, max_positions=40)  # fmt: skip
    cpu = MarkovTranslatorForConditionalGeneration(config).eval()
    gpu = MarkovTranslatorForConditionalGeneration(config).eval().cuda()
    gpu.load_state_dict(cpu.state_dict())
    src_ids = torch.randint(4, 40, (5, 9))
    src_mask = torch.ones_like(src_ids)
    src_mask[1, 6:] = src_mask[3, 2:] = 0  # padded on the right, as collate_translation pads
    src_ids = src_ids.masked_fill(src_mask == 0, config.pad_token_id)
    on_cpu = generate(cpu, src_ids, src_mask, beam_size=beam_size, max_length=12)
    on_gpu = generate(gpu, src_ids.cuda(), src_mask.cuda(), beam_size=beam_size, max_length=12)
    assert torch.equal(on_gpu.sequences.cpu(), on_cpu.sequences)
    torch.testing.assert_close(on_gpu.scores.cpu(), on_cpu.scores, rtol=1e-4, atol=1e-4)


# (GPU-only trainer settings, tolerance): float32 reduction order; 16-mixed's half-precision products, with the
# accumulated step's gradient rescaling (module.on_before_optimizer_step) after the GradScaler unscales
GPU_RUNS = {"32-true": ({}, 1e-3), "16-mixed-accumulated": ({"precision": "16-mixed"}, 1e-2)}


@pytest.mark.parametrize("gpu_run", list(GPU_RUNS))
def test_a_gpu_training_run_follows_the_cpu_run(tiny_run, tmp_path, cli, gpu_run):
    """The same run (no dropout: the GPU draws other masks) on both accelerators: the same validation loss to the
    precision's rounding, so the engine moves every batch, state and metric to the device; the accumulated run
    (two micro-batches a step) under 16-mixed also weighs every token alike there, as on the CPU."""
    gpu_only, tolerance = GPU_RUNS[gpu_run]
    accumulate = {"accumulate_grad_batches": 2} if gpu_only else {}
    run = {**tiny_run, "model": {**tiny_run["model"], "dropout": 0.0}}
    losses = {}
    for accelerator, extra in (("cpu", {}), ("gpu", gpu_only)):
        trainer = {**run["trainer"], **accumulate, **extra, "accelerator": accelerator}
        config = tmp_path / f"{accelerator}.yaml"
        config.write_text(yaml.safe_dump({**run, "trainer": trainer}))
        done = cli("train", str(config), f"output_dir={tmp_path / accelerator}")
        assert done.returncode == 0, done.stderr[-3000:]
        losses[accelerator] = json.loads((tmp_path / accelerator / "metrics.json").read_text())["val"]["loss"]
    assert losses["gpu"] == pytest.approx(losses["cpu"], rel=tolerance)

"""The baseline zoo (layers.baselines) against references: each form of a mixer against its other forms or a closed
form, padding for every kind (what a causal one may read is tested for every kind in test_attention_kinds.py), and
the kinds inside a MarkovianTransformer built from a config. Their kernels (long convolution, S4D kernel, retention,
WKV) are pinned to their naive twins in tests/ops; RetNet, RWKV and Hyena to their formulas by hand in
test_baselines_by_hand.py."""

from __future__ import annotations

import pytest
import torch

from markovformer.layers import SoftmaxAttention, build_attention
from markovformer.layers.baselines import H3Mixer, HyenaMixer, LinformerAttention, RetNetAttention, S4DMixer
from markovformer.layers.baselines import h3 as h3_module
from markovformer.layers.baselines.linformer import CAUSAL_MESSAGE
from markovformer.layers.baselines.s4d import DiagonalSSM
from markovformer.layers.registry import attention_option_names
from markovformer.models.markovian_transformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForSequenceClassification,
)

D_MODEL, HEADS, LENGTH = 16, 4, 11
CAUSAL_KINDS = ("retnet", "s4d", "h3", "hyena", "rwkv", "gru", "scan")
ALL_KINDS = CAUSAL_KINDS + ("linformer",)


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _mixer(kind: str, causal: bool, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    options = {"max_positions": 32, "linformer_k": 5, "chunk_size": 4, "ssm_state_size": 8, "shift_taps": 3,
               "head_dim": 2}  # fmt: skip
    options = {name: value for name, value in options.items() if name in attention_option_names(kind)}
    layer = build_attention(kind, d_model=D_MODEL, n_heads=HEADS, causal=causal, rotary=True, **options)
    return layer.double().eval()


def _grads(output: torch.Tensor, inputs: list[torch.Tensor], seed: int = 9) -> list[torch.Tensor]:
    weights = _randn(*output.shape, seed=seed)
    return list(torch.autograd.grad((output * weights).sum(), inputs))


def _assert_same_gradients(got: torch.Tensor, want: torch.Tensor, inputs: list[torch.Tensor], **tolerance) -> None:
    """Two forms of one computation have the same gradients (of the same random projection) in every input."""
    for got_grad, want_grad in zip(_grads(got, inputs), _grads(want, inputs), strict=True):
        torch.testing.assert_close(got_grad, want_grad, **tolerance)


# --- Hyena ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_hyena_fft_layer_equals_direct_convolution_layer(causal):
    torch.manual_seed(0)
    layer = HyenaMixer(d_model=D_MODEL, causal=causal).double()
    x = _randn(2, LENGTH, D_MODEL, seed=1).requires_grad_()
    params = [x, *layer.parameters()]
    fft = layer(x)
    layer.convolution = "direct"
    direct = layer(x)
    torch.testing.assert_close(fft, direct, rtol=1e-9, atol=1e-10)
    _assert_same_gradients(fft, direct, params, rtol=1e-8, atol=1e-10)


def test_hyena_filter_decays_with_lag():
    torch.manual_seed(0)
    layer = HyenaMixer(d_model=D_MODEL, causal=True).double()
    window = torch.exp(-torch.arange(600.0, dtype=torch.float64)[:, None] * layer.filter.decay.double())
    filters = layer.filter(600)
    assert filters.shape == (600, 2 * D_MODEL)
    # |h_l| <= window_l · max|MLP|: channel 0 (1% at lag 8) is negligible far out, the slowest is not
    assert filters[500:, 0].abs().max() < 1e-6 * filters[:, 0].abs().max()
    assert (window[:, -1] > 0.2).all()


# --- S4D -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_s4d_fft_convolution_equals_step_by_step_recurrence(causal):
    torch.manual_seed(0)
    layer = S4DMixer(d_model=D_MODEL, causal=causal, ssm_state_size=8).double()
    with torch.no_grad():  # larger steps than the init, so the kernel is far from zero over the whole length
        layer.log_dt.uniform_(-2.0, 0.0)
    x = _randn(2, LENGTH, D_MODEL, seed=1).requires_grad_()
    params = [x, *layer.parameters()]
    convolution = layer(x)
    layer.mode = "recurrent"
    recurrence = layer(x)
    torch.testing.assert_close(convolution, recurrence, rtol=1e-9, atol=1e-10)
    _assert_same_gradients(convolution, recurrence, params, rtol=1e-8, atol=1e-10)


def test_s4d_kernel_closed_form_and_lin_init():
    layer = S4DMixer(d_model=2, causal=True, ssm_state_size=4).double()
    dt_a, a_bar, c_b = layer.discretised()
    dt = torch.exp(layer.log_dt)[:, None]
    a = torch.complex(torch.full((2, 2), -0.5, dtype=torch.float64), torch.pi * torch.tensor([0.0, 1.0]).double())
    torch.testing.assert_close(dt_a, a * dt)  # S4D-Lin: A_n = -1/2 + iπn
    kernel = layer.kernel(11)  # lags across the kernel's √T blocks
    c = torch.view_as_complex(layer.c)
    for lag in range(11):  # K_l = 2 Re Σ_n C_n (exp(ΔA_n) - 1)/A_n exp(ΔA_n)^l
        expected = 2 * (c * (torch.exp(a * dt) - 1) / a * torch.exp(a * dt) ** lag).sum(-1).real
        torch.testing.assert_close(kernel[lag], expected.detach())
    for length in (1, 2, 4, 5):
        torch.testing.assert_close(layer.kernel(length), kernel[:length])


@pytest.mark.parametrize("kind", ["s4d", "h3"])
def test_a_decoding_discretises_the_ssm_once_and_a_training_call_every_time(kind, monkeypatch):
    """A decoding (no gradients) reuses its SSM's discretisation from its state, so a step skips the exponentials;
    with gradients on, each call recomputes it (an optimiser step between calls would make a kept one stale)."""
    calls = []
    original = DiagonalSSM.discretised  # S4D is one, H3 holds one
    monkeypatch.setattr(DiagonalSSM, "discretised", lambda self: calls.append(1) or original(self))
    layer = _mixer(kind, causal=True)
    x = _randn(2, 6, D_MODEL)
    with torch.no_grad():
        state: dict = {}
        steps = [layer(x[:, :3], state=state)] + [layer(x[:, t : t + 1], state=state) for t in range(3, 6)]
        assert len(calls) == 1
        torch.testing.assert_close(torch.cat(steps, dim=1), layer(x), rtol=1e-5, atol=1e-6)
    calls.clear()
    state = {}
    for t in range(3):
        layer(x[:, t : t + 1], state=state)
    assert len(calls) == 3


# --- H3 ------------------------------------------------------------------------------------------------------------


def _h3_by_hand(layer: H3Mixer, x: torch.Tensor) -> torch.Tensor:
    """H3's definition one position and one head at a time: k̄_t = Σ_l f_l k_{t-l} (+ future taps) + D_k k_t,
    S_t = Σ_s K_{t-s} k̄_sᵀ v_s + D_h k̄_tᵀ v_t per head (K the diagonal SSM's kernel, forward then backward),
    y_t = q_t S_t, then the output projection."""
    batch, length, d = x.shape
    size, heads, taps = layer.head_dim, layer.heads, layer.shift_taps
    q, k, v = layer.in_proj(x).split(d, dim=-1)
    shifted = torch.zeros_like(k)
    for t in range(length):
        shifted[:, t] = layer.shift_skip * k[:, t]
        for lag in range(taps):
            if t - lag >= 0:
                shifted[:, t] += layer.shift_past[lag] * k[:, t - lag]
            if layer.shift_future is not None and t + lag + 1 < length:
                shifted[:, t] += layer.shift_future[lag] * k[:, t + lag + 1]
    kernel = layer.kv_ssm.kernel(length)  # (T, H) forward channels, then (T, H) backward ones
    y = torch.zeros_like(x)
    for t in range(length):
        for h in range(heads):
            part = slice(h * size, (h + 1) * size)
            outer = shifted[:, :, part, None] * v[:, :, None, part]  # (B, T, size, size): the head's k̄_sᵀ v_s
            state = layer.kv_skip[h] * outer[:, t]
            for s in range(length):
                if s <= t:
                    state = state + kernel[t - s, h] * outer[:, s]
                elif not layer.causal:  # strictly future lag s - t >= 1 reads the backward SSM at lag s - t - 1
                    state = state + kernel[s - t - 1, heads + h] * outer[:, s]
            y[:, t, part] = (q[:, t, part, None] * state).sum(1)
    return layer.out_proj(y)


@pytest.mark.parametrize("head_dim", [1, 2, 4])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_h3_layer_is_its_definition_by_hand(causal, head_dim):
    torch.manual_seed(0)
    layer = H3Mixer(d_model=8, causal=causal, head_dim=head_dim, ssm_state_size=4, shift_taps=3).double()
    with torch.no_grad():  # larger steps than the init, so the SSM's kernel is far from zero over the whole length
        layer.kv_ssm.log_dt.uniform_(-2.0, 0.0)
    x = _randn(2, 7, 8, seed=1).requires_grad_()
    params = [x, *layer.parameters()]
    got, want = layer(x), _h3_by_hand(layer, x)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    _assert_same_gradients(got, want, params, rtol=1e-8, atol=1e-10)
    layer.kv_ssm.mode = "recurrent"  # the diagonal SSM step by step: the same layer
    torch.testing.assert_close(layer(x), want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("shift_by", ["windows", "fft"])
def test_h3_decodes_as_its_full_forward_with_either_way_of_the_shift_filter(shift_by, monkeypatch):
    """A decoding's short chunks run the shift filter as a sum over their windows, longer ones by FFT over the
    carried keys (here every chunk, with the limit at 0): both continue the full forward."""
    if shift_by == "fft":
        monkeypatch.setattr(h3_module, "DIRECT_SHIFT_MAX_LENGTH", 0)
    layer = _mixer("h3", causal=True)  # 3 taps: chunks of 1 and 4 tokens read keys carried from earlier calls
    x = _randn(2, 10, D_MODEL, seed=3)
    with torch.no_grad():
        state: dict = {}
        pieces = [layer(x[:, a:b], state=state) for a, b in [(0, 4), (4, 5), (5, 9), (9, 10)]]
        torch.testing.assert_close(torch.cat(pieces, dim=1), layer(x), rtol=1e-10, atol=1e-12)


def test_h3_starts_as_the_authors_inside_a_model():
    """The shift filter's taps start as nn.Conv1d's weights (uniform in ±1/√taps, the authors' init), the D terms
    standard normal, the diagonal SSM as S4D-Lin; the model's own init (normal 0.02 for linear layers) keeps them."""
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(_config("h3", d_model=64))  # 64 taps: the default
    layer = model.model.blocks[0].attention
    taps = layer.shift_past.detach()
    assert taps.abs().max() <= 1 / 8 and abs(taps.std().item() - 1 / 8 / 3**0.5) < 0.005
    assert abs(layer.shift_skip.std().item() - 1) < 0.25 and abs(layer.kv_skip.std().item() - 1) < 0.25
    torch.testing.assert_close(layer.kv_ssm.log_a_real.detach(), torch.full_like(layer.kv_ssm.log_a_real, -0.6931),
                               rtol=0, atol=1e-4)  # fmt: skip


def test_h3_refuses_a_head_size_that_does_not_divide_the_width_and_bad_options_by_layer():
    with pytest.raises(ValueError, match="head_dim=3: must divide d_model=8"):
        H3Mixer(d_model=8, head_dim=3)
    with pytest.raises(ValueError, match=r"attention\[1\]\.shift_taps=0"):
        MarkovianTransformerConfig(vocab_size=7, n_layers=2, attention=["h3", {"kind": "h3", "shift_taps": 0}])


# --- RetNet --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_retnet_layer_forms_agree(causal):
    torch.manual_seed(0)
    layer = RetNetAttention(d_model=D_MODEL, n_heads=HEADS, causal=causal, chunk_size=4).double()
    x = _randn(2, LENGTH, D_MODEL, seed=1)
    outputs = {}
    for form in ("parallel", "recurrent", "chunkwise"):
        layer.form = form
        outputs[form] = layer(x)
    torch.testing.assert_close(outputs["recurrent"], outputs["parallel"], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(outputs["chunkwise"], outputs["parallel"], rtol=1e-10, atol=1e-12)
    with_weights = layer(x, return_weights=True)
    torch.testing.assert_close(with_weights.output, outputs["parallel"], rtol=1e-10, atol=1e-12)
    assert with_weights.weights.shape == (2, HEADS, LENGTH, LENGTH)
    if causal:
        assert (with_weights.weights.triu(1) == 0).all()
    with pytest.raises(ValueError, match="form"):
        layer.form = "fast"


# --- Linformer -----------------------------------------------------------------------------------------------------


def test_linformer_with_identity_projections_is_softmax_attention():
    torch.manual_seed(0)
    linformer = LinformerAttention(d_model=D_MODEL, n_heads=HEADS, max_position=LENGTH, linformer_k=LENGTH)
    softmax = SoftmaxAttention(d_model=D_MODEL, n_heads=HEADS, causal=False)
    softmax.load_state_dict({k: v for k, v in linformer.state_dict().items() if "projection" not in k})
    linformer, softmax = linformer.double(), softmax.double()
    with torch.no_grad():
        linformer.cores[0].key_projection.copy_(torch.eye(LENGTH))
        linformer.cores[0].value_projection.copy_(torch.eye(LENGTH))
    x = _randn(2, LENGTH, D_MODEL, seed=1)
    torch.testing.assert_close(linformer(x), softmax(x), rtol=1e-12, atol=1e-12)
    # the effective token mixing is then the softmax attention matrix itself
    torch.testing.assert_close(
        linformer(x, return_weights=True).weights, softmax(x, return_weights=True).weights, rtol=1e-12, atol=1e-12
    )
    with torch.no_grad():  # and a non-identity projection changes the result
        linformer.cores[0].key_projection.copy_(torch.eye(LENGTH).flip(0)[:, torch.randperm(LENGTH)])
    assert not torch.allclose(linformer(x), softmax(x))


def test_linformer_is_refused_for_causal_models():
    with pytest.raises(ValueError, match="non-causal") as error:
        build_attention("linformer", d_model=D_MODEL, n_heads=HEADS, causal=True, rotary=True, max_positions=8)
    assert str(error.value) == CAUSAL_MESSAGE
    with pytest.raises(ValueError, match="Linformer is non-causal"):
        MarkovianTransformerConfig(vocab_size=5, attention="linformer", max_positions=8)
    with pytest.raises(ValueError, match="max_positions"):
        MarkovianTransformerConfig(vocab_size=5, attention="linformer", causal=False)
    layer = _mixer("linformer", causal=False)
    with pytest.raises(ValueError, match="exceeds"):
        layer(_randn(1, 33, D_MODEL))


# --- RWKV ----------------------------------------------------------------------------------------------------------

# RWKV's time mixing, like RetNet and Hyena, is written out by hand from its formulas in test_baselines_by_hand.py.


# --- recurrent mixers -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_scan_mixer_is_the_gated_recurrence_by_hand(causal):
    layer = _mixer("scan", causal=causal)
    x = _randn(2, LENGTH, D_MODEL, seed=1)
    keep, write = torch.sigmoid(layer.gate_proj(x)).chunk(2, dim=-1)
    forward, backward = [], []
    state = torch.zeros_like(x[:, 0])
    for t in range(LENGTH):  # h_t = A_t h_{t-1} + B_t x_t
        state = keep[:, t] * state + write[:, t] * x[:, t]
        forward.append(state)
    state = torch.zeros_like(x[:, 0])
    for t in reversed(range(LENGTH)):  # the same gates from the other end, x_t counted once
        state = keep[:, t] * state + write[:, t] * x[:, t]
        backward.insert(0, state - write[:, t] * x[:, t])
    states = torch.stack(forward, 1) + (0 if causal else torch.stack(backward, 1))
    torch.testing.assert_close(layer(x), layer.out_proj(states), rtol=1e-12, atol=1e-12)


# --- every kind: padding ------------------------------------------------------------------------------------------


def _padded(x: torch.Tensor, lengths: list[int], left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of x cut to ``lengths`` and padded (with noise, which must not matter) to x's length."""
    padded = _randn(*x.shape, seed=99) * 5
    mask = torch.zeros(x.shape[:2], dtype=torch.long)
    for row, n in enumerate(lengths):
        place = slice(x.shape[1] - n, None) if left else slice(0, n)
        padded[row, place] = x[row, :n]
        mask[row, place] = 1
    return padded, mask


@pytest.mark.parametrize("left", [False, True], ids=["right_padding", "left_padding"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_padding_changes_nothing_for_real_tokens(kind, causal, left):
    if kind == "linformer" and causal:
        pytest.skip("Linformer is non-causal")
    layer = _mixer(kind, causal=causal)
    x = _randn(4, LENGTH, D_MODEL, seed=1)
    lengths = [LENGTH, 7, 1, 0]
    padded, mask = _padded(x, lengths, left)
    out = layer(padded, mask)
    assert torch.isfinite(out).all()
    for row, n in enumerate(lengths):
        real = mask[row].bool()
        assert (out[row, ~real] == 0).all()  # padded positions (and the fully padded row) give zeros
        if n:
            alone = layer(x[row : row + 1, :n])[0]
            torch.testing.assert_close(out[row, real], alone, rtol=1e-10, atol=1e-12)


def test_linformer_projection_columns_follow_token_rank():
    layer = _mixer("linformer", causal=False)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0]])
    key_projection, _ = layer.cores[0].projections(5, mask)
    full = layer.cores[0].key_projection
    torch.testing.assert_close(key_projection[0, :, 2:], full[:, :3])
    torch.testing.assert_close(key_projection[1, :, :3], full[:, :3])
    assert (key_projection[0, :, :2] == 0).all() and (key_projection[1, :, 3:] == 0).all()


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_bfloat16_mixers_stay_close_to_float32(kind):
    layer = _mixer(kind, causal=kind != "linformer").float()
    x = _randn(2, LENGTH, D_MODEL, seed=1).float()
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[1, 8:] = 0
    reference = layer(x, mask)
    half = layer.to(torch.bfloat16)(x.bfloat16(), mask)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), reference, rtol=0.05, atol=0.05 * reference.abs().max().item())


# --- inside the model ------------------------------------------------------------------------------------------------


def _config(kind: str, causal: bool = True, **overrides) -> MarkovianTransformerConfig:
    values = dict(vocab_size=7, d_model=D_MODEL, n_layers=2, n_heads=HEADS, attention=kind, causal=causal,
                  max_positions=32)  # fmt: skip
    options = dict(chunk_size=4, ssm_state_size=8, linformer_k=8)  # each kind gets the ones it reads
    read = set().union(*(attention_option_names(k) for k in ([kind] if isinstance(kind, str) else kind)))
    values.update({name: value for name, value in options.items() if name in read})
    return MarkovianTransformerConfig(**{**values, **overrides})


@pytest.mark.parametrize("kind", CAUSAL_KINDS)
def test_causal_lm_per_kind_trains_and_every_parameter_learns(kind):
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(_config(kind))
    ids = torch.tensor([[1, 2, 3, 4, 5] * 4] * 2)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(12):
        loss = model(ids, labels=ids).loss
        optimiser.zero_grad()
        loss.backward()
        if step == 0:
            dead = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
            assert not dead, f"parameters without gradient: {dead}"
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_per_layer_kinds_and_sequence_classification_with_linformer():
    config = _config(["linformer", "s4d"], causal=False)
    assert config.to_dict()["linformer_k"] == 8
    assert MarkovianTransformerConfig.from_dict(config.to_dict()) == config
    torch.manual_seed(0)
    model = MarkovianTransformerForSequenceClassification(config).eval()
    kinds = [type(block.attention).__name__ for block in model.model.blocks]
    assert kinds == ["LinformerAttention", "S4DMixer"]
    ids = torch.randint(0, 7, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    output = model(ids, attention_mask=mask, return_weights=True)
    torch.testing.assert_close(output.logits[1], model(ids[1:2, :6]).logits[0], rtol=1e-5, atol=1e-6)
    assert output.attentions[0].shape == (3, HEADS, 9, 9) and output.attentions[1] is None  # S4D has no weights
    with pytest.raises(ValueError, match="even"):
        _config("s4d", ssm_state_size=7)


def test_a_sequence_past_the_linformer_projections_names_the_config_field_and_the_cls_position():
    """It named a max_position field no config has, and a [CLS] classifier at exactly max_positions tokens could
    not tell why 21 positions were read."""
    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForSequenceClassification

    config = MarkovianTransformerConfig(vocab_size=5, d_model=8, n_layers=1, n_heads=2, attention="linformer",
                                        causal=False, max_positions=20, pooling="cls", num_labels=2)  # fmt: skip
    with pytest.raises(ValueError, match=r"sequence length 21 .* max_positions=20 \(pooling='cls' adds a position"):
        MarkovianTransformerForSequenceClassification(config)(torch.zeros(1, 20, dtype=torch.long))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: h3_module.H3Options(ssm_state_size=3), "ssm_state_size=3: must be even"),
        (lambda: H3Mixer(d_model=8, shift_taps=0), "shift_taps=0: must be >= 1"),
        (lambda: HyenaMixer(d_model=8, convolution="direct_fft"), "convolution='direct_fft': expected one of"),
        (lambda: DiagonalSSM(channels=4, ssm_state_size=3), "ssm_state_size=3: must be an even integer >= 2"),
        (lambda: DiagonalSSM(channels=4, ssm_state_size=0), "ssm_state_size=0: must be an even integer >= 2"),
        (lambda: DiagonalSSM(channels=4, mode="scan"), "mode='scan': expected one of"),
    ],
)
def test_a_mixer_built_directly_names_its_bad_argument(build, message):
    """The layers' own checks, for direct use (the model config refuses these values before building)."""
    with pytest.raises(ValueError, match=message):
        build()

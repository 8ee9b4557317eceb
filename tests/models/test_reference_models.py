"""markovformer's softmax baselines against transformers' own implementations, weight for weight: random weights
converted here (names, GPT-2's transposed Conv1D weights and fused c_attn, Llama's rotary layout) must give the same
logits in float64, the same loss and gradients, and the same greedy continuations.

- ``gpt2_style_config`` (GPT-2: every bias, its attention projections' included, and its init; with ``bias=False``
  nanoGPT's block) against ``GPT2LMHeadModel``.
- The softmax model with rotary positions, SwiGLU, ``norm="rmsnorm"`` and ``bias=False`` against
  ``LlamaForCausalLM`` as transformers builds it (``rms_norm_eps`` 1e-5, our ``NORM_EPS``); and with the default
  ``norm="layernorm"`` against the same Llama, its RMSNorms replaced by bias-free LayerNorms (the rest: rotary,
  SwiGLU, the pre-norm wiring, the bias-free projections, is Llama's either way).

The conventions in which the two differ, each bridged by the conversion, the reference's config or a tolerance:
- GELU: exact (erf), as nanoGPT's ``nn.GELU()``; GPT-2 proper uses the tanh approximation (``gelu_new``), so the
  reference is built with ``activation_function="gelu"``.
- Biases: ``attention_bias`` switches the attention projections' (c_attn, c_proj), ``bias`` the LayerNorms' and the
  GELU MLP's; GPT-2 has all of them, loaded as ours' (random, nonzero). With ``bias=False`` (nanoGPT's, which
  ``gpt2_style_config`` makes drop the attention biases too) the reference's biases are zeros.
- Rotary: pairs (2i, 2i+1) rotate together; Llama's ``rotate_half`` pairs (i, i + Dh/2). The query and key rows of
  each head are permuted (as transformers' Meta-to-HF converter does), which leaves every score unchanged.
  transformers computes the angles in float32 even in a float64 model; ours in the model's dtype (``LOGITS_ATOL``).
- RMSNorm: ``LlamaRMSNorm`` normalises in float32 whatever the model's dtype; ours in the model's (``LOGITS_ATOL``).
- Loss: transformers upcasts logits to float32 first (``ForCausalLMLoss``); ours keeps float64, so ours is checked
  against a float64 cross-entropy of the reference logits, and transformers' loss at float32's precision.
- Llama's embedding takes ``pad_token_id`` as ``padding_idx``: that row never learns. Ours has none (padding is
  the attention mask's business), so the reference is built without one.
- ``generate``: transformers infers the attention mask from ``pad_token_id`` when none is given (a prompt token equal
  to it is taken for padding), so the mask is always passed.
The norms' eps (1e-5), the attention scale (1/sqrt(Dh)), learned positions from 0, the final norm, tied
embeddings, the rotary frequencies (base 10000) and left-padded rows' positions (from each row's first real token)
are the same on both sides.
Skipped when transformers is absent."""

from __future__ import annotations

from copy import deepcopy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

transformers = pytest.importorskip("transformers", reason="transformers is absent: pip install 'markovformer[hf]'")

from markovformer.layers.norm import NORM_EPS  # noqa: E402
from markovformer.models.markovian_transformer import (  # noqa: E402
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    gpt2_style_config,
)

VOCAB, D_MODEL, N_LAYERS, N_HEADS, MAX_POSITIONS = 23, 32, 2, 4, 24
HEAD_DIM = D_MODEL // N_HEADS


def _perturbed(model: nn.Module) -> nn.Module:
    """model in float64 and eval mode, every parameter moved off its initial value (LayerNorm scales off 1, biases
    off 0), so that a weight converted to the wrong place shows."""
    torch.manual_seed(0)
    model = model.double().eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    return model


def _ours_gpt2(bias: bool) -> MarkovianTransformerForCausalLM:
    config = gpt2_style_config(VOCAB, D_MODEL, N_LAYERS, N_HEADS, MAX_POSITIONS, bias=bias)
    return _perturbed(MarkovianTransformerForCausalLM(config))


def _gpt2_weights(ours: MarkovianTransformerForCausalLM) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel's state dict holding ours' weights: Conv1D weights are (in, out), ours' Linear (out, in); the
    fused qkv is c_attn in the same (q, k, v) x heads order; a bias ours lacks is zero."""
    model = ours.model

    def bias_of(module: nn.Module) -> torch.Tensor:
        if module.bias is not None:
            return module.bias
        return torch.zeros(module.weight.shape[0], dtype=module.weight.dtype)

    weights = {"transformer.wte.weight": model.embed.weight, "transformer.wpe.weight": model.position_embedding.weight,
               "transformer.ln_f.weight": model.final_norm.weight,
               "transformer.ln_f.bias": bias_of(model.final_norm), "lm_head.weight": ours.lm_head.weight}
    for index, block in enumerate(model.blocks):
        parts = {"ln_1": (block.attention_norm, False), "attn.c_attn": (block.attention.qkv, True),
                 "attn.c_proj": (block.attention.out_proj, True), "ln_2": (block.ffn_norm, False),
                 "mlp.c_fc": (block.ffn.up, True), "mlp.c_proj": (block.ffn.down, True)}  # Conv1D: transposed
        for name, (module, conv1d) in parts.items():
            prefix = f"transformer.h.{index}.{name}."
            weights[prefix + "weight"] = module.weight.T if conv1d else module.weight
            weights[prefix + "bias"] = bias_of(module)
    return weights


def _gpt2(d_model: int = D_MODEL, n_layers: int = N_LAYERS) -> nn.Module:
    """GPT2LMHeadModel with transformers' own initialisation, dropout 0 and exact GELU."""
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=d_model, n_layer=n_layers, n_head=N_HEADS,
                                     n_positions=MAX_POSITIONS, activation_function="gelu", layer_norm_epsilon=1e-5,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
                                     bos_token_id=0, eos_token_id=0, pad_token_id=0)  # fmt: skip
    return transformers.GPT2LMHeadModel(config)


def _reference_gpt2(ours: MarkovianTransformerForCausalLM) -> nn.Module:
    reference = _gpt2().double().eval()
    reference.load_state_dict(_gpt2_weights(ours), strict=True)
    return reference


def _ours_llama(norm: str) -> MarkovianTransformerForCausalLM:
    config = MarkovianTransformerConfig(vocab_size=VOCAB, d_model=D_MODEL, n_layers=N_LAYERS, n_heads=N_HEADS,
                                        attention="softmax", ffn="swiglu", position="rotary", bias=False,
                                        norm=norm)  # fmt: skip
    return _perturbed(MarkovianTransformerForCausalLM(config))


def _rotate_half_rows(weight: torch.Tensor) -> torch.Tensor:
    """A query or key projection (H * Dh, D) whose heads pair rows (2i, 2i+1), reordered so that each head's rows
    (i, i + Dh/2) are those pairs: rotary on Llama's rotate_half layout then rotates the same pairs by the same
    angles, and every query-key product is unchanged (both are permuted alike)."""
    order = torch.cat((torch.arange(0, HEAD_DIM, 2), torch.arange(1, HEAD_DIM, 2)))
    return weight.view(N_HEADS, HEAD_DIM, -1)[:, order].reshape(weight.shape)


def _llama_weights(ours: MarkovianTransformerForCausalLM) -> dict[str, torch.Tensor]:
    model = ours.model
    weights = {"model.embed_tokens.weight": model.embed.weight, "model.norm.weight": model.final_norm.weight,
               "lm_head.weight": ours.lm_head.weight}  # fmt: skip
    for index, block in enumerate(model.blocks):
        prefix = f"model.layers.{index}."
        query, key, value = block.attention.qkv.weight.chunk(3)
        gate, up = block.ffn.gate_up.weight.chunk(2)
        weights.update({
            prefix + "input_layernorm.weight": block.attention_norm.weight,
            prefix + "self_attn.q_proj.weight": _rotate_half_rows(query),
            prefix + "self_attn.k_proj.weight": _rotate_half_rows(key),
            prefix + "self_attn.v_proj.weight": value,
            prefix + "self_attn.o_proj.weight": block.attention.out_proj.weight,
            prefix + "post_attention_layernorm.weight": block.ffn_norm.weight,
            prefix + "mlp.gate_proj.weight": gate,
            prefix + "mlp.up_proj.weight": up,
            prefix + "mlp.down_proj.weight": block.ffn.down.weight,
        })  # fmt: skip
    return weights


def _reference_llama(ours: MarkovianTransformerForCausalLM) -> nn.Module:
    """LlamaForCausalLM of ours' size and weights; with ours' ``norm="layernorm"`` its RMSNorms replaced by bias-free
    LayerNorms. No ``pad_token_id``: Llama would make it its embedding's ``padding_idx``, whose row then gets no
    gradient."""
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=D_MODEL, num_hidden_layers=N_LAYERS,
                                      num_attention_heads=N_HEADS, num_key_value_heads=N_HEADS,
                                      intermediate_size=ours.model.blocks[0].ffn.down.in_features,
                                      max_position_embeddings=MAX_POSITIONS, attention_bias=False, mlp_bias=False,
                                      rms_norm_eps=NORM_EPS, tie_word_embeddings=False, bos_token_id=0,
                                      eos_token_id=0, pad_token_id=None)  # fmt: skip
    reference = transformers.LlamaForCausalLM(config)
    if ours.config.norm == "layernorm":
        for layer in reference.model.layers:
            layer.input_layernorm = nn.LayerNorm(D_MODEL, eps=1e-5, bias=False)
            layer.post_attention_layernorm = nn.LayerNorm(D_MODEL, eps=1e-5, bias=False)
        reference.model.norm = nn.LayerNorm(D_MODEL, eps=1e-5, bias=False)
    reference = reference.double().eval()
    reference.load_state_dict(_llama_weights(ours), strict=True)
    return reference


# family -> (our model, the converter of its weights to the reference's names, the reference holding them)
FAMILIES = {
    "gpt2": (lambda: _ours_gpt2(bias=True), _gpt2_weights, _reference_gpt2),
    "nanogpt_no_bias": (lambda: _ours_gpt2(bias=False), _gpt2_weights, _reference_gpt2),
    "llama": (lambda: _ours_llama("rmsnorm"), _llama_weights, _reference_llama),
    "llama_layernorm": (lambda: _ours_llama("layernorm"), _llama_weights, _reference_llama),
}


def _pair(family: str) -> tuple[MarkovianTransformerForCausalLM, nn.Module]:
    build, _, reference_of = FAMILIES[family]
    ours = build()
    return ours, reference_of(ours)


def _holding_gradients(model: nn.Module) -> nn.Module:
    """A copy of model whose parameters hold model's gradients: a weight converter applied to it converts them."""
    copy = deepcopy(model)
    with torch.no_grad():
        for parameter, source in zip(copy.parameters(), model.parameters(), strict=True):
            parameter.copy_(source.grad)
    return copy


# transformers computes rotary angles in float32 even in a float64 model (LlamaRotaryEmbedding: cos off by up to
# 8e-8, logits by 4e-7 here), and LlamaRMSNorm normalises in float32 (logits off by up to 2.2e-6, gradients by
# 9.2e-7 here); ours in the model's dtype. A misplaced weight, or LayerNorm for RMSNorm, moves logits by O(1).
LOGITS_ATOL = {"llama": 5e-6, "llama_layernorm": 2e-6}


def _ids(batch: int = 3, length: int = MAX_POSITIONS, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_and_loss_equal_transformers_reference(family):
    ours, reference = _pair(family)
    ids = _ids()
    labels = ids.clone()
    labels[0, 5:9] = -100
    with torch.no_grad():
        mine, theirs = ours(ids, labels=labels), reference(input_ids=ids, labels=labels)
    atol = LOGITS_ATOL.get(family, 1e-10)
    torch.testing.assert_close(mine.logits, theirs.logits, rtol=0, atol=atol)
    assert float(theirs.logits.std()) > 0.5  # logits far from uniform: a misplaced weight would not hide
    expected = F.cross_entropy(theirs.logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
    torch.testing.assert_close(mine.loss, expected, rtol=0, atol=atol / 10)
    torch.testing.assert_close(mine.loss, theirs.loss.double(), rtol=1e-6, atol=0)  # transformers' float32 loss
    if family == "gpt2":  # GPT-2 itself: every bias loaded from ours, none zero-filled (its attention's included)
        biases = {name: p for name, p in reference.named_parameters() if name.endswith("bias")}
        assert len(biases) == 6 * N_LAYERS + 1 and all(bool(p.detach().abs().min() > 0) for p in biases.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_gradients_equal_transformers_reference(family):
    """Training mode (dropout 0): our SwiGLU's lean autograd function and the fused projections' gradients, converted
    as the weights are, equal the reference's."""
    ours, reference = _pair(family)
    ours.train(), reference.train()
    ids = _ids()
    ours(ids, labels=ids).loss.backward()
    logits = reference(input_ids=ids).logits  # scored in float64: transformers' float32 loss would round the gradients
    F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).backward()
    converted = FAMILIES[family][1](_holding_gradients(ours))
    compared = [name for name, gradient in converted.items() if gradient.requires_grad]  # not the zero-filled biases
    assert len(compared) >= 6 * N_LAYERS + 4  # at least each block's norms and projections, and the embeddings
    for name in compared:
        torch.testing.assert_close(converted[name], reference.get_parameter(name).grad, rtol=0,
                                   atol=LOGITS_ATOL.get(family, 1e-10), msg=name)  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
def test_right_padded_batch_logits_equal_transformers_reference_at_real_tokens(family):
    ours, reference = _pair(family)
    ids, mask = _ids(length=12), torch.ones(3, 12, dtype=torch.long)
    mask[1, 7:], mask[2, 3:] = 0, 0
    with torch.no_grad():
        mine, theirs = ours(ids, attention_mask=mask).logits, reference(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(mine[real], theirs[real], rtol=0, atol=LOGITS_ATOL.get(family, 1e-10))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
def test_greedy_generate_equals_transformers_generate(family, padded):
    """Greedy decoding through our key/value caches (and rotary or learned positions continued per row) picks the
    tokens transformers' generate picks through its own cache; left-padded rows as if each were alone."""
    ours, reference = _pair(family)
    prompt, mask = _ids(batch=3, length=6, seed=2), torch.ones(3, 6, dtype=torch.long)
    if padded:
        mask[1, :2], mask[2, :4] = 0, 0
    new = 10
    mine = ours.generate(prompt, attention_mask=mask, max_new_tokens=new)
    theirs = reference.generate(prompt, attention_mask=mask, max_new_tokens=new, do_sample=False, eos_token_id=None,
                                pad_token_id=0)  # fmt: skip
    assert mine.shape == theirs.shape == (3, 6 + new)
    assert torch.equal(mine, theirs), (mine, theirs)
    # not one token repeated: the decoded steps exercise the cache and the positions
    assert len(set(mine[:, 6:].flatten().tolist())) > 2


def test_gpt2_init_scheme_draws_each_weight_as_gpt2_does():
    """``gpt2_style_config``'s ``init_scheme="gpt2"`` (nanoGPT's init): each weight's spread is GPT-2's (0.02; the
    residual projections attn.c_proj and mlp.c_proj 0.02 / sqrt(2 n_layers)), LayerNorms and biases (the attention
    projections' included) start as GPT-2's."""
    d_model, n_layers = 64, 4
    torch.manual_seed(0)
    ours = MarkovianTransformerForCausalLM(gpt2_style_config(VOCAB, d_model, n_layers, N_HEADS, MAX_POSITIONS))
    reference = _gpt2(d_model, n_layers)
    for name, mine in _gpt2_weights(ours).items():
        mine, theirs = mine.detach(), reference.get_parameter(name).detach()
        if theirs.std() == 0:  # a LayerNorm's ones, a bias's zeros
            assert torch.equal(mine, theirs), name
        else:  # >= 1,472 draws each: the spread to within 2 %, so 10 % is five standard errors
            assert abs(float(mine.std() / theirs.std()) - 1) < 0.1, (name, float(mine.std()), float(theirs.std()))
            assert abs(float(mine.mean())) < 0.2 * float(theirs.std()), name

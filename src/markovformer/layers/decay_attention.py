"""Softmax attention with a decay on the logits: ALiBi's fixed per-head distance penalty (Press et al., ICLR 2022)
and the Forgetting Transformer's data-dependent forget gate (FoX, Lin et al., ICLR 2025), both on the
``forgetting_attention`` op (O(T) memory, no T×T bias): ALiBi is FoX with a constant gate log f = -m per head.
Local scope (``window`` W) sees keys t-W..t; ``window=None`` is global scope.

FoX's "Pro" block (Lin et al., "Forgetting Transformer: Softmax Attention with a Forget Gate", ICLR 2025,
arXiv:2503.02130, section 3 and appendix; reference: github.com/zhixuan-lin/forgetting-transformer) borrows four parts
of recurrent models, each an option of kind "forgetting" (``ForgettingOptions``), applied in the paper's order:
key/value token shift k_t = α_t k̃_{t-1} + (1 - α_t) k̃_t with α_t = sigmoid(w·x_t) per head (likewise v), then
QK-norm (RMSNorm of each head's q and k with a learned scale per head and channel), the attention, output
normalisation (the same RMSNorm of each head's output) and an output gate sigmoid(W x_t) on it before the output
projection.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Container

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.layers.kv_cache import keep_in_cache, real_mask
from markovformer.layers.options import (
    DROPOUT_HELP,
    SCOPE_HELP,
    SCOPES,
    WINDOW_HELP,
    check_fields,
    interval,
    one_of,
    option,
)
from markovformer.ops.forgetting_attention import forgetting_attention, forgetting_attention_naive
from markovformer.ops.precision import compute_dtype


@dataclasses.dataclass(frozen=True)
class DecayOptions:
    """The options of attention kinds "alibi" and "forgetting": ``scope="local"`` sees keys t-window..t (needs
    ``window``), ``scope="global"`` every allowed key."""

    scope: str = option("global", one_of(SCOPES), help=SCOPE_HELP)
    window: int | None = option(None, interval(1, integer=True, optional=True), help=WINDOW_HELP)
    dropout: float = option(0.0, interval(0.0, 1.0, high_open=True), help=DROPOUT_HELP)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclasses.dataclass(frozen=True)
class ForgettingOptions(DecayOptions):
    """The options of attention kind "forgetting": those of ``DecayOptions`` and the four parts of FoX's "Pro" block
    (each off by default; all four on is FoX Pro): ``output_gate``, ``output_norm``, ``qk_norm``, ``kv_shift``."""

    output_gate: bool = option(False, one_of((True, False)), help="FoX Pro: a sigmoid gate of the layer input on "
                               "each head's output")  # fmt: skip
    output_norm: bool = option(False, one_of((True, False)), help="FoX Pro: RMSNorm of each head's output")
    qk_norm: bool = option(False, one_of((True, False)), help="FoX Pro: RMSNorm of each head's query and key")
    kv_shift: bool = option(False, one_of((True, False)), help="FoX Pro: keys and values mixed with the previous "
                            "token's by a data-dependent share (causal models only)")  # fmt: skip


PRO_PARTS = ("output_gate", "output_norm", "qk_norm", "kv_shift")


def head_rms_norm(heads: Tensor, scale: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm of each head's vector (B, H, T, Dh) with a learned scale (H, Dh)."""
    return heads * torch.rsqrt(heads.pow(2).mean(-1, keepdim=True) + eps) * scale[None, :, None, :]


def token_shift(raw: Tensor, mix: Tensor, previous: Tensor | None, real: Tensor) -> Tensor:
    """FoX Pro's data-dependent token shift: raw (B, H, T, Dh), mix α (B, H, T) in (0, 1), previous (B, H, 1, Dh)
    the raw vector before position 0 (None: zeros), real (B, T) False at padding (a padded position passes on
    zeros). -> α_t raw_{t-1} + (1 - α_t) raw_t."""
    passed = raw * real[:, None, :, None].to(raw.dtype)
    before = passed.new_zeros(passed[:, :, :1].shape) if previous is None else previous
    shifted = torch.cat([before, passed[:, :, :-1]], dim=2)
    return mix[..., None] * shifted + (1 - mix[..., None]) * raw


def geometric_slopes(n_heads: int) -> Tensor:
    """The geometric sequence m_h = 2^(-8h/H), h = 1..H: ALiBi's slopes for a power-of-two H, and what this library
    used for every H before its ALiBi layers stored their slopes (weights saved then keep it). (H,) float32."""
    return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1, dtype=torch.float32) / n_heads)


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's slopes m_h (Press et al., ICLR 2022, section 3, and their reference code, which BLOOM, MPT and
    transformers follow): ``geometric_slopes(H)`` for a power-of-two H; for any other H those of the power of two
    P = 2^floor(log2 H) below it, then every other slope of the sequence for 2P (its 1st, 3rd, ...) until there
    are H (6 heads: 2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3). (H,) float32."""
    below = 1 << (n_heads.bit_length() - 1)
    return torch.cat([geometric_slopes(below), geometric_slopes(2 * below)[0::2][: n_heads - below]])


class ForgetGate(nn.Module):
    """FoX's forget gate logits w·x_t + b, one per head: (B, T, D) -> (B, T, H). Its biases start at 1..5 across
    heads (f from 0.73 to 0.99), so heads begin with short and long memories alike; FoX's own initialisation is not
    fixed by the paper. Parameters, not an nn.Linear, so that the model's init for linear layers (zero biases, which
    would start every head at f = 0.5, a memory of a few tokens) leaves them as set here."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_heads, d_model))
        self.bias = nn.Parameter(torch.empty(n_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.02)
        with torch.no_grad():
            self.bias.copy_(torch.linspace(1.0, 5.0, self.bias.numel()))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


class DecayCore(nn.Module):
    """Attention over ``n_heads`` heads whose score of query t on key j is lowered by sum_{l=j+1..t} -log f_l.

    ``forget_gate`` None: the fixed ALiBi gates log f = -m_h. Otherwise a ``ForgetGate`` read from the layer input
    x_t: f_t = sigmoid(w·x_t + b) (FoX).
    Decodes from a key/value cache (``state["cache"]``) that also holds each key's cumulative log forget gate.
    """

    supports_state = True
    honours_segments = True  # packed documents: masked per query chunk (the op's segment_ids)

    def __init__(self, *, d_model: int, n_heads: int, causal: bool, window: int | None, dropout: float,
                 data_dependent: bool, output_gate: bool = False, output_norm: bool = False, qk_norm: bool = False,
                 kv_shift: bool = False) -> None:  # fmt: skip
        super().__init__()
        head_dim = d_model // n_heads
        self.output_gate = nn.Linear(d_model, n_heads * head_dim, bias=False) if output_gate else None
        self.output_norm = nn.Parameter(torch.ones(n_heads, head_dim)) if output_norm else None
        self.q_norm = nn.Parameter(torch.ones(n_heads, head_dim)) if qk_norm else None
        self.k_norm = nn.Parameter(torch.ones(n_heads, head_dim)) if qk_norm else None
        self.kv_shift = nn.Linear(d_model, 2 * n_heads, bias=False) if kv_shift else None
        if kv_shift:  # the shift would carry a document's last key into the next: packed batches run per document
            self.honours_segments = False
        for linear in (self.output_gate, self.kv_shift):
            if linear is not None:
                nn.init.normal_(linear.weight, std=0.02)
        self.causal, self.window, self.dropout = causal, window, dropout
        # ALiBi's slopes are saved with the weights, so that a model keeps the sequence it was trained with
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=not data_dependent)
        self.forget_gate = ForgetGate(d_model, n_heads) if data_dependent else None

    def log_forget(self, x: Tensor, heads: int) -> Tensor:
        """(B, T, D) layer input -> (B, H, T) log forget gates (<= 0), in at least float32: their prefix sums are
        differenced (c_t - c_j), which half precision cannot hold (bf16 stores -1024 in steps of 8, so the decay
        between neighbours read 0)."""
        dtype = compute_dtype(x)
        if self.forget_gate is None:
            return (-self.slopes.to(dtype))[None, :, None].expand(x.shape[0], heads, x.shape[1])
        return F.logsigmoid(self.forget_gate(x).to(dtype)).transpose(1, 2)

    def _pro_inputs(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, attention_mask: Tensor | None,
                    state: dict | None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
        """The token shift of k and v (its last raw k, v kept in ``state["shift"]``), then QK-norm."""
        if self.kv_shift is not None:
            if not self.causal:
                raise ValueError("kv_shift mixes in the previous token: it needs causal=True")
            real = real_mask(attention_mask, x)
            mix = torch.sigmoid(self.kv_shift(x)).transpose(1, 2)  # (B, 2H, T)
            heads = q.shape[1]
            before = None if state is None else state.get("shift")
            shifted_k = token_shift(k, mix[:, :heads], None if before is None else before[0], real)
            shifted_v = token_shift(v, mix[:, heads:], None if before is None else before[1], real)
            if state is not None:
                keep = real[:, -1, None, None, None].to(k.dtype)
                state["shift"] = (k[:, :, -1:] * keep, v[:, :, -1:] * keep)
            k, v = shifted_k, shifted_v
        if self.q_norm is not None:
            q, k = head_rms_norm(q, self.q_norm), head_rms_norm(k, self.k_norm)
        return q, k, v

    def _pro_output(self, x: Tensor, heads: Tensor) -> Tensor:
        """Output norm, then the output gate, on the heads (B, H, T, Dh)."""
        if self.output_norm is not None:
            heads = head_rms_norm(heads, self.output_norm)
        if self.output_gate is not None:
            gate = torch.sigmoid(self.output_gate(x)).view(*x.shape[:2], *heads.shape[1:2], heads.shape[-1])
            heads = heads * gate.transpose(1, 2)
        return heads

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None,
                segment_ids=None) -> CoreOutput:  # fmt: skip
        log_forget = self.log_forget(x, q.shape[1])
        q, k, v = self._pro_inputs(x, q, k, v, attention_mask, state)
        if state is not None:
            cumulative = log_forget.cumsum(-1)  # G_t from the newest position before x; D_{t,j} = G_t - G_j
            if "cache" in state:
                heads = state["cache"].attend(q, k, v, real_mask(attention_mask, x), log_decay=cumulative)
                return CoreOutput(self._pro_output(x, heads), {}, None)
            keep_in_cache(state, self.window, k, v, attention_mask, cumulative)
        options = dict(window=self.window, causal=self.causal, attention_mask=attention_mask,
                       dropout_p=self.dropout if self.training else 0.0)  # fmt: skip
        if segment_ids is not None:
            options["segment_ids"] = segment_ids
        if return_weights:
            heads, weights = forgetting_attention_naive(q, k, v, log_forget, **options)
            return CoreOutput(self._pro_output(x, heads), {}, weights)
        return CoreOutput(self._pro_output(x, forgetting_attention(q, k, v, log_forget, **options)), {}, None)


def alibi_slopes_of(model: nn.Module, old: bool = False) -> dict[str, Tensor]:
    """The slopes of ``model``'s ALiBi layers by state-dict name: the paper's (``alibi_slopes``), as a model built
    from its config has them, or (``old=True``) those that weights saved before ALiBi's slopes were saved with them
    lack and computed with (``geometric_slopes``). Weights without slopes load with the ones they need given beside
    them (``{**alibi_slopes_of(model), **weights}``): ``load_state_dict`` cannot tell which they need."""
    slopes = geometric_slopes if old else alibi_slopes
    return {f"{name}.slopes": slopes(len(module.slopes)) for name, module in model.named_modules()
            if isinstance(module, DecayCore) and module.forget_gate is None}  # fmt: skip


def block_of(name: str) -> int | None:
    """The block index in a tensor name (``model.blocks.3.attention.cores.0.slopes``: 3), None outside the blocks."""
    found = re.search(r"(?:^|\.)blocks\.(\d+)\.", name)
    return None if found is None else int(found.group(1))


def own_weights_with_slopes(model: nn.Module, weights: dict[str, Tensor], prefix: str = "") -> dict[str, Tensor]:
    """``weights``, ``model``'s own (its run's checkpoint, its saved folder: names under ``prefix``), with the slopes
    its ALiBi layers computed with where they lack them: saved before slopes were, ``alibi_slopes_of(model,
    old=True)``. What every loader that knows the weights are the model's own loads."""
    return {**{prefix + name: slopes for name, slopes in alibi_slopes_of(model, old=True).items()}, **weights}


class AlibiAttention(SelfAttention):
    """Multi-head attention with ALiBi's fixed linear distance penalties, local (``window``) or global scope.
    ALiBi replaces position embeddings: use it with ``position='none'`` (rotary stacks on top otherwise)."""

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, window: int | None = None,
                 dropout: float = 0.0, rotary: bool = False, attention_bias: bool = False) -> None:  # fmt: skip
        core = DecayCore(d_model=d_model, n_heads=n_heads, causal=causal, window=window, dropout=dropout,
                         data_dependent=False)  # fmt: skip
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)

    def unsaved_slopes(self, saved: Container[str], prefix: str = "") -> dict[str, Tensor]:
        """{state-dict name: slopes} for the slopes that weights of this layer saved before ALiBi's slopes were saved
        with them lack (``saved``, the names loaded, holds the layer's projections and not its slopes): their model
        computed with ``geometric_slopes`` for every head count (a power-of-two count gets the paper's numbers).
        Empty where ``saved`` lacks the layer's projections (a partial load: an adapter's, another head's), which
        leaves the slopes as they are. ``prefix``: the layer's, as in its state-dict names."""
        if prefix + "qkv.weight" not in saved:
            return {}
        slopes = {f"{prefix}cores.{index}.slopes": geometric_slopes(len(core.slopes))
                  for index, core in enumerate(self.cores)}  # fmt: skip
        return {name: values for name, values in slopes.items() if name not in saved}

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs: list[str]) -> None:  # fmt: skip
        """Weights of this layer without its slopes: ALiBi weights saved before slopes were (which computed with
        ``geometric_slopes``) or another kind's (which take the paper's, as a model built from the config). Where
        the two differ (a head count not a power of two) nothing here tells which: the load fails naming the slopes
        and how to give them (``alibi_slopes_of``), and the layer keeps its own. Torch loads a module before its
        children, from the dict filled here."""
        unsaved = self.unsaved_slopes(state_dict, prefix)
        heads = len(self.cores[0].slopes)
        if unsaved and not torch.equal(geometric_slopes(heads), alibi_slopes(heads)):
            error_msgs.append(
                f"the weights lack the ALiBi slopes {', '.join(unsaved)}, and with {heads} heads (not a power of two) "
                f"ALiBi weights saved before slopes were computed with 2^(-8h/H) where weights of another kind take "
                f"the paper's slopes: load {{**alibi_slopes_of(model), **weights}} for the paper's, "
                f"{{**alibi_slopes_of(model, old=True), **weights}} for the old ones "
                f"(markovformer.layers.decay_attention.alibi_slopes_of)")  # fmt: skip
            unsaved = {f"{prefix}cores.{index}.slopes": core.slopes for index, core in enumerate(self.cores)}
        state_dict.update(unsaved)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)  # fmt: skip


class ForgettingAttention(SelfAttention):
    """The Forgetting Transformer's attention: a data-dependent forget gate per head and position whose cumulative
    log sums are added to the logits. FoX needs no position embedding (``position='none'``). ``pro`` names the
    parts of the "Pro" block to switch on (``PRO_PARTS``)."""

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, window: int | None = None,
                 dropout: float = 0.0, rotary: bool = False, attention_bias: bool = False,
                 **pro: bool) -> None:  # fmt: skip
        unknown = set(pro) - set(PRO_PARTS)
        if unknown:
            raise ValueError(f"unknown FoX Pro parts {sorted(unknown)}; expected some of {PRO_PARTS}")
        core = DecayCore(d_model=d_model, n_heads=n_heads, causal=causal, window=window, dropout=dropout,
                         data_dependent=True, **pro)  # fmt: skip
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)


__all__ = ["PRO_PARTS", "AlibiAttention", "DecayCore", "DecayOptions", "ForgetGate", "ForgettingAttention",
           "ForgettingOptions", "alibi_slopes", "alibi_slopes_of", "block_of", "geometric_slopes", "head_rms_norm",
           "own_weights_with_slopes",
           "token_shift"]

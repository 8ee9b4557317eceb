"""Per-lag Markov transition strengths and token-wise order gates.

The bias a query at t adds to the key at t-k (past) or t+k (future) is ``alpha[t, k] * T[k]``: a learned transition
strength T per head and lag, scaled by the order gate alpha, a probability vector over the K lags plus an optional
null slot whose mass multiplies nothing (so the gate can switch the bias off). The bias leaves this module as
per-lag tensors (B, H, T, K); the attention ops place them, and nothing here builds a (T, T) matrix.
"""

from __future__ import annotations

import math
from typing import NamedTuple, TypedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

GATES = ("linear", "mlp", "deep_mlp", "none")
GATE_INPUTS = ("token", "query", "static", "sequence")
TRANSITIONS = ("softplus", "signed")
SOFTPLUS_EPS = 1e-4  # keeps softplus strengths strictly positive (Algorithm 1's epsilon)


class TransitionStrengths(TypedDict):
    """A Markov layer's effective per-lag strengths T per direction, (H, K)."""

    past: Tensor
    future: Tensor | None  # None for a causal layer


class MarkovBiasOutput(NamedTuple):
    past_bias: Tensor  # (B, H, T, K)
    future_bias: Tensor | None  # (B, H, T, K) when bidirectional
    gates: dict[str, Tensor]  # direction -> (B, H, T, K [+1 null slot]) probabilities; empty when gate="none"


class HeadwiseLinear(nn.Module):
    """A linear map applied per group with its own weights: (..., G, in) -> (..., G, out)."""

    def __init__(self, groups: int, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(groups, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.zeros(groups, out_features))

    def forward(self, x: Tensor) -> Tensor:
        if self.weight.shape[0] == 1:  # one group: a plain linear map of any (..., in), one GEMM, no einsum planning
            return F.linear(x, self.weight[0].t(), self.bias[0])
        return torch.einsum("...gi,gio->...go", x, self.weight) + self.bias


def _gate_network(gate: str, groups: int, in_features: int, out_features: int) -> nn.Module:
    depth = {"linear": 0, "mlp": 1, "deep_mlp": 2}[gate]
    layers: list[nn.Module] = []
    width = in_features
    for _ in range(depth):
        layers += [HeadwiseLinear(groups, width, in_features), nn.GELU()]
    layers.append(HeadwiseLinear(groups, width, out_features))
    return nn.Sequential(*layers)


class MarkovBias(nn.Module):
    """Transition strengths and order gates for one attention layer.

    Args:
        d_model: width of the layer input (the token gate's input).
        n_heads, max_order (K): bias tensors are (B, n_heads, T, K).
        head_dim: width of each head's query (the query gate's input); default d_model // n_heads.
        bidirectional: also learn future strengths and a future gate (Eq. 24).
        gate: "linear", "mlp", "deep_mlp" or "none" (all alpha = 1). gate_input: "token" (normalised x_t), "query"
            (the head's q_t), "static" (learned logits) or "sequence" (masked mean; bidirectional only).
            gate_null: add the null slot. gate_gumbel_tau: straight-through Gumbel-softmax while training.
            transition: "softplus" (T = softplus(theta) + eps > 0) or "signed" (T = theta). head_specific: one
            theta per head, else one shared over heads.
        init_std: theta ~ N(0, init_std), as in the reference code.
    """

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        max_order: int,
        head_dim: int | None = None,
        bidirectional: bool = False,
        gate: str = "linear",
        gate_input: str = "token",
        gate_null: bool = True,
        gate_gumbel_tau: float | None = None,
        transition: str = "softplus",
        head_specific: bool = True,
        init_std: float = 0.02,
    ) -> None:
        super().__init__()
        # the values were checked where they are declared (MarkovOptions' fields, the model config)
        self.n_heads, self.max_order = n_heads, max_order
        self.unused = False  # a placeholder whose layer has no Markov head (hybrid_split's ratio 0): not reported
        self.directions = ("past", "future") if bidirectional else ("past",)
        self.gate, self.gate_input, self.gate_null = gate, gate_input, gate_null and gate != "none"
        self.gate_gumbel_tau, self.transition = gate_gumbel_tau, transition
        strength_rows = n_heads if head_specific else 1
        self.theta = nn.ParameterDict(
            {d: nn.Parameter(torch.randn(strength_rows, max_order) * init_std) for d in self.directions}
        )
        self.gate_networks = nn.ModuleDict()
        self.static_gate_logits = nn.ParameterDict()
        slots = max_order + int(self.gate_null)
        if gate != "none":
            for direction in self.directions:
                if gate_input == "static":
                    self.static_gate_logits[direction] = nn.Parameter(torch.zeros(n_heads, slots))
                elif gate_input == "query":
                    self.gate_networks[direction] = _gate_network(gate, n_heads, head_dim or d_model // n_heads, slots)
                else:  # token or sequence: one network over d_model with an output per head
                    self.gate_networks[direction] = _gate_network(gate, 1, d_model, n_heads * slots)
        # the last forward's gate logits per direction and its attention mask, for ``last_gate_entropy`` (a plain
        # dict, updated in place: no nn.Module attribute assignment per call)
        self._last_forward: dict = {"gate_logits": [], "attention_mask": None}

    def __getstate__(self) -> dict:
        """The module without its last forward's activations: a copy or a pickle has run no forward. Those logits
        are no graph leaves while training, so ``copy.deepcopy`` (hence ``AveragedModel``, an EMA copy) raised
        after any training step, and ``torch.save(model)`` wrote them into the file."""
        return {**self.__dict__, "_last_forward": {"gate_logits": [], "attention_mask": None}}

    @property
    def last_gate_entropy(self) -> Tensor | None:
        """Mean entropy of the order-gate distributions of the last forward, summed over directions (differentiable;
        None without gates). Computed when read, so a model whose entropy weight is 0 never pays for it."""
        last = self._last_forward
        if not last["gate_logits"]:
            return None
        entropies = [_mean_entropy(torch.softmax(logits, dim=-1), last["attention_mask"])
                     for logits in last["gate_logits"]]  # fmt: skip
        return torch.stack(entropies).sum()

    def transitions(self) -> TransitionStrengths:
        """Effective strengths T per direction, (H, K); ``future`` is None for a causal layer."""
        strengths = {direction: self._strength(theta).expand(self.n_heads, self.max_order)
                     for direction, theta in self.theta.items()}  # fmt: skip
        return {"past": strengths["past"], "future": strengths.get("future")}

    def _strength(self, theta: Tensor) -> Tensor:
        """The strengths T of parameters ``theta`` under the layer's transition (softplus: > 0; signed: theta)."""
        return F.softplus(theta) + SOFTPLUS_EPS if self.transition == "softplus" else theta

    def strengths_for(self, dtype: torch.dtype) -> dict[str, Tensor]:
        """Per direction the strengths T as (1, H or 1, 1, K) in ``dtype`` (broadcasting over the heads): what
        ``transitions`` gives, without its expand and with the fewest operations (a decoding step pays for each)."""
        strengths = {}
        for direction in self.directions:
            value = self._strength(self.theta[direction])
            strengths[direction] = (value if value.dtype == dtype else value.to(dtype)).view(1, -1, 1, self.max_order)
        return strengths

    def _gate_logits(self, direction: str, x: Tensor, q: Tensor, attention_mask: Tensor | None,
                     segment_ids: Tensor | None = None) -> Tensor:  # fmt: skip
        """(B, H, T, slots) logits from the configured gate input (``sequence``: pooled over each token's document
        when ``segment_ids`` (B, T) tell packed documents apart)."""
        batch, seq_len = x.shape[:2]
        if self.gate_input == "static":
            return self.static_gate_logits[direction][None, :, None, :].expand(batch, -1, seq_len, -1)
        network = self.gate_networks[direction]
        if self.gate_input == "query":
            return network(q.transpose(1, 2)).transpose(1, 2)  # heads as groups: (B, T, H, Dh) -> (B, H, T, s)
        if self.gate_input == "sequence":
            weights = torch.ones(batch, seq_len, 1, device=x.device, dtype=x.dtype)
            if attention_mask is not None:
                weights = attention_mask[..., None].to(x.dtype)
            if segment_ids is not None:
                x = _pool_by_segment(x, segment_ids)
            else:
                x = (x * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True).clamp_min(1.0)
                x = x.expand(batch, seq_len, -1)
        logits = network(x)  # (B, T, H·slots): one group, so no group axis is needed
        return logits.view(batch, seq_len, self.n_heads, -1).transpose(1, 2)

    def _gate_probabilities(self, logits: Tensor) -> Tensor:
        if self.training and self.gate_gumbel_tau is not None:
            return F.gumbel_softmax(logits, tau=self.gate_gumbel_tau, hard=True, dim=-1)
        return torch.softmax(logits, dim=-1)

    def forward(self, x: Tensor, q: Tensor, attention_mask: Tensor | None = None, segment_ids: Tensor | None = None,
                strengths: dict[str, Tensor] | None = None) -> MarkovBiasOutput:  # fmt: skip
        """x: the normalised layer input (B, T, D); q: the layer's queries (B, H, T, Dh); ``segment_ids`` (B, T):
        packed documents (only the ``sequence`` gate input reads beyond its own token). ``strengths``: what
        ``strengths_for(x.dtype)`` gave, kept by a decoding (the weights do not change while it runs)."""
        batch, seq_len = x.shape[:2]
        strengths = self.strengths_for(x.dtype) if strengths is None else strengths
        biases: dict[str, Tensor | None] = {"future": None}
        gates: dict[str, Tensor] = {}
        gate_logits = self._last_forward["gate_logits"] = []
        self._last_forward["attention_mask"] = attention_mask
        for direction in self.directions:
            strength = strengths[direction]  # (1, H or 1, 1, K)
            if self.gate == "none":
                biases[direction] = strength.expand(batch, self.n_heads, seq_len, -1)
                continue
            logits = self._gate_logits(direction, x, q, attention_mask, segment_ids)
            alpha = self._gate_probabilities(logits)
            gates[direction] = alpha
            biases[direction] = alpha[..., : self.max_order] * strength
            gate_logits.append(logits)
        return MarkovBiasOutput(biases["past"], biases["future"], gates)


def _pool_by_segment(x: Tensor, segment_ids: Tensor) -> Tensor:
    """(B, T, D): each token's row replaced by the mean of its document's real tokens (zeros at padding, id -1)."""
    batch, seq_len, dim = x.shape
    real = segment_ids >= 0
    slots = segment_ids.clamp_min(0) + seq_len * torch.arange(batch, device=x.device)[:, None]  # unique per row
    flat = slots.reshape(-1)
    weights = real.reshape(-1, 1).to(x.dtype)
    sums = x.new_zeros(batch * seq_len, dim).index_add(0, flat, x.reshape(-1, dim) * weights)
    counts = x.new_zeros(batch * seq_len, 1).index_add(0, flat, weights)
    return ((sums / counts.clamp_min(1.0))[flat] * weights).view(batch, seq_len, dim)


def _mean_entropy(alpha: Tensor, attention_mask: Tensor | None) -> Tensor:
    """Mean over heads and real tokens of H(alpha), in nats."""
    entropy = -(alpha * torch.log(alpha.clamp_min(1e-12))).sum(-1)  # (B, H, T)
    if attention_mask is None:
        return entropy.mean()
    weights = attention_mask[:, None, :].to(entropy.dtype)
    return (entropy * weights).sum() / (weights.sum() * entropy.shape[1]).clamp_min(1.0)

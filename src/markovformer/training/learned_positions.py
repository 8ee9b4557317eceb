"""What the positional attention kinds learned about position, as numbers `markovformer inspect` draws and prints:
the bias each kind adds to the attention logit as a function of the lag (``t5_bias``, ``dynamic_bias``, ``alibi``),
FoX's data-dependent forget gates and the decay they add at each lag (``forgetting``), and CoPE's position
embeddings' term q·e[p] at each contextual position p (``cope``).

The lag-only biases are read by calling the layer's own bias module on the lags (no data). The forget gates and
CoPE's queries depend on the tokens: ``ReadPositions`` hooks the layers' cores during the passes the attention-by-lag
profile already makes over the validation sequences (no pass of its own), and summarises what it saw there.

Lags follow the attention's convention: lag k is the key k tokens before the query (t - k); a bidirectional layer's
key k tokens after it is lag -k. Every bias is in nats: it is added to the logit before the softmax."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from markovformer.layers.cope_attention import CoPECore
from markovformer.layers.decay_attention import DecayCore
from markovformer.layers.position_bias_attention import RelativeBiasCore, T5Bias
from markovformer.ops.cope_attention.naive import cope_positions_naive
from markovformer.ops.lags import lag_matrix, visible
from markovformer.ops.relative_bias_attention.buckets import t5_buckets
from markovformer.ops.segments import same_segment

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)  # the forget gates' box: whiskers 5..95%, box 25..75%, median
BAND = (0.1, 0.5, 0.9)  # the band drawn around a data-dependent curve, and its median
T5_TAIL = 1.25  # T5's lags are drawn to 1.25 x max_distance at least, so the shared last bucket shows flat
DECAY_LAGS = 48  # FoX's cumulative decay is read at about this many lags, log-spaced past lag 16


@dataclass(frozen=True)
class LagBias:
    """One layer's bias added to the logit at each lag (nats), per head: ``bias`` (H, n) at ``lags`` (n,).

    ``kind``: "t5_bias", "dynamic_bias" or "alibi". ``trained_lag``: the longest lag the layer met in training
    (its window, else the training sequences' length - 1; None when unknown). ``window``: the layer's window (None:
    global scope). ``buckets`` (n,): T5's bucket of each lag; ``num_buckets``, ``max_distance``: T5's settings;
    ``slopes`` (H,): ALiBi's fixed slopes m_h (the bias at lag k is -m_h·|k|)."""

    layer: int
    kind: str
    lags: np.ndarray
    bias: np.ndarray
    trained_lag: int | None = None
    window: int | None = None
    buckets: np.ndarray | None = None
    num_buckets: int | None = None
    max_distance: int | None = None
    slopes: np.ndarray | None = None

    def numbers(self) -> dict:
        """The numbers drawn, JSON-able: lags, per-head bias rows (and T5's buckets, ALiBi's slopes)."""
        out = {"layer": self.layer, "kind": self.kind, "unit": "nats added to the attention logit",
               "lags": self.lags.tolist(), "bias_per_head": _rounded(self.bias)}  # fmt: skip
        for name in ("trained_lag", "window", "num_buckets", "max_distance"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.buckets is not None:
            out["bucket_per_lag"] = self.buckets.tolist()
        if self.slopes is not None:
            out["slopes_per_head"] = _rounded(self.slopes)
        return out


@dataclass(frozen=True)
class ForgetGates:
    """One FoX layer's forget gates f = sigmoid(w·x + b) over the tokens read, per head.

    ``gate_quantiles`` (H, 5): the ``QUANTILES`` of f; ``gate_mean`` (H,); ``tokens``: the real tokens read.
    ``lags`` (n,) and ``decay`` (H, n, 3): the 10%, 50% and 90% quantiles over the queries t >= k of the decay
    added to the logit of the key k tokens back, sum_{l=t-k+1..t} log f_l (nats, <= 0)."""

    layer: int
    gate_quantiles: np.ndarray
    gate_mean: np.ndarray
    tokens: int
    lags: np.ndarray
    decay: np.ndarray

    def numbers(self) -> dict:
        return {"layer": self.layer, "kind": "forgetting", "tokens": self.tokens,
                "forget_gate_quantiles": list(QUANTILES), "forget_gate_per_head": _rounded(self.gate_quantiles),
                "forget_gate_mean_per_head": _rounded(self.gate_mean), "unit": "nats added to the attention logit",
                "lags": self.lags.tolist(), "decay_quantiles": list(BAND),
                "decay_per_head": _rounded(self.decay)}  # fmt: skip


@dataclass(frozen=True)
class CopeTerms:
    """One CoPE layer's position term q_t·e[p] (nats, added to the logit; e interpolated linearly between integer p)
    at the integer contextual positions p = 0..npos_max - 1, over the real queries read, per head: ``quantiles``
    (H, npos_max, 3) the 10%, 50% and 90% quantiles, ``mean`` (H, npos_max). ``positions`` (H, 3): per head,
    the ``BAND`` quantiles over the queries of the largest contextual position the query gave a key (that of the
    first key it sees; clamped to npos_max - 1 as the op does): the positions beyond them were seldom reached."""

    layer: int
    quantiles: np.ndarray
    mean: np.ndarray
    queries: int
    positions: np.ndarray

    def numbers(self) -> dict:
        return {"layer": self.layer, "kind": "cope", "queries": self.queries, "unit": "nats added to the attention "
                "logit", "contextual_positions": list(range(self.mean.shape[1])), "quantiles": list(BAND),
                "term_per_head": _rounded(self.quantiles), "mean_per_head": _rounded(self.mean),
                "largest_position_quantiles": _rounded(self.positions)}  # fmt: skip


def _rounded(values: np.ndarray) -> list:
    return np.round(np.asarray(values, dtype=np.float64), 6).tolist()


def position_cores(model) -> dict[int, torch.nn.Module]:
    """{model layer: its positional core} for the layers whose attention is t5_bias, dynamic_bias, alibi,
    forgetting or cope (one core per such layer)."""
    blocks = getattr(getattr(model, "model", model), "blocks", None)
    if blocks is None:
        return {}
    found = {}
    for index, block in enumerate(blocks):
        for module in block.modules():
            if isinstance(module, RelativeBiasCore | DecayCore | CoPECore):
                found[index] = module
                break
    return found


def core_kind(core: torch.nn.Module) -> str:
    if isinstance(core, RelativeBiasCore):
        return "t5_bias" if isinstance(core.lag_bias, T5Bias) else "dynamic_bias"
    if isinstance(core, DecayCore):
        return "alibi" if core.forget_gate is None else "forgetting"
    return "cope"


def t5_lags_drawn(core: RelativeBiasCore, trained_lag: int | None) -> int:
    """The last lag T5's bias is drawn to: the window in local scope (no key lies further), else past max_distance
    (the shared last bucket shows flat) and past the training length."""
    if core.window is not None:
        return core.window
    return max(int(np.ceil(T5_TAIL * core.lag_bias.max_distance)), trained_lag or 0)


def lag_bias(layer: int, core: torch.nn.Module, trained_lag: int | None) -> LagBias:
    """The bias ``core`` (a RelativeBiasCore, or an ALiBi DecayCore) adds to the logit at each lag, from its own
    bias code: T5 to ``t5_lags_drawn``, the MLP and ALiBi to ``trained_lag`` (the window in local scope). A
    bidirectional layer's lags run from the negative end too."""
    kind = core_kind(core)
    last = t5_lags_drawn(core, trained_lag) if kind == "t5_bias" else (core.window or trained_lag or 1)
    device = next(iter([*core.parameters(), *core.buffers()])).device
    lags = torch.arange(-last if not core.causal else 0, last + 1, device=device)
    extra: dict = {}
    with torch.no_grad():
        if kind == "alibi":
            # the layer's own log gates on an input of as many tokens: ALiBi's gates do not read it
            log_forget = core.log_forget(torch.zeros(1, last + 1, 1, device=device), len(core.slopes))[0]
            decay = torch.cat([torch.zeros_like(log_forget[:, :1]), log_forget[:, 1:].cumsum(-1)], dim=1)
            bias = decay[:, lags.abs()]  # the mirror image for keys ahead (ops.forgetting_attention)
            extra["slopes"] = core.slopes.float().cpu().numpy().copy()
        else:
            bias = core.lag_bias(lags)
        if kind == "t5_bias":
            own = core.lag_bias
            buckets = t5_buckets(lags, own.num_buckets, own.max_distance, own.bidirectional)
            extra.update(buckets=buckets.cpu().numpy(), num_buckets=own.num_buckets, max_distance=own.max_distance)
    return LagBias(layer, kind, lags.cpu().numpy(), bias.float().cpu().numpy(), trained_lag=trained_lag,
                   window=core.window, **extra)  # fmt: skip


def decay_lags(last: int) -> np.ndarray:
    """The lags FoX's decay is read at: every lag 0..16, then about ``DECAY_LAGS`` log-spaced ones up to ``last``."""
    dense = np.arange(0, min(16, last) + 1)
    if last <= 16:
        return dense
    spread = np.unique(np.round(np.geomspace(17, last, DECAY_LAGS - 17)).astype(int))
    return np.unique(np.concatenate([dense, spread, [last]]))


@dataclass
class _Seen:
    """What a hooked core saw: FoX's log gates with their real-token masks, CoPE's real queries and positions."""

    # ((B, H, T), (B, T) bool real tokens, (B, T) packed documents' ids or None)
    log_forget: list[tuple[Tensor, Tensor, Tensor | None]] = field(default_factory=list)
    queries: list[Tensor] = field(default_factory=list)  # (N, H, Dh)
    largest: list[Tensor] = field(default_factory=list)  # (N, H): each query's largest contextual position


class ReadPositions:
    """A context manager that hooks the forgetting and CoPE cores of ``model`` for the forward passes made inside
    it (the attention-by-lag profile's) and keeps what they read; ``forget_gates()`` and ``cope_terms()`` then
    summarise it. The hooks compute nothing the core does not: FoX's gates from the core's own ``log_forget``,
    CoPE's terms from its own embeddings, on the queries it was given."""

    def __init__(self, model) -> None:
        self.cores = {layer: core for layer, core in position_cores(model).items()
                      if core_kind(core) in ("forgetting", "cope")}  # fmt: skip
        self.seen = {layer: _Seen() for layer in self.cores}
        self._handles: list = []

    def __enter__(self) -> ReadPositions:
        for layer, core in self.cores.items():
            self._handles.append(core.register_forward_pre_hook(self._reader(layer), with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _reader(self, layer: int):
        core, seen = self.cores[layer], self.seen[layer]

        def read(module, args, kwargs) -> None:
            x, q, k = args[0], args[1], args[2]
            mask = args[4] if len(args) > 4 else kwargs.get("attention_mask")
            real = torch.ones(x.shape[:2], dtype=torch.bool) if mask is None else mask.bool()
            with torch.no_grad():
                if isinstance(core, DecayCore):
                    documents = kwargs.get("segment_ids")
                    seen.log_forget.append((core.log_forget(x, q.shape[1]).float().cpu(), real.cpu(),
                                            None if documents is None else documents.cpu()))  # fmt: skip
                else:
                    seen.queries.append(q.transpose(1, 2)[real].float().cpu())
                    seen.largest.append(_largest_positions(q, k, real, core, kwargs.get("segment_ids")).cpu())

        return read

    def forget_gates(self, last_lags: dict[int, int]) -> dict[int, ForgetGates]:
        """{layer: ForgetGates} of the FoX layers that saw tokens, each decay read to ``last_lags[layer]`` (at most
        the longest sequence read - 1)."""
        out = {}
        for layer, seen in self.seen.items():
            if not seen.log_forget:
                continue
            heads = seen.log_forget[0][0].shape[1]
            gates = torch.cat([lf.transpose(1, 2)[real] for lf, real, _ in seen.log_forget]).exp()  # (N, H)
            longest = max(lf.shape[-1] for lf, _, _ in seen.log_forget) - 1
            lags = decay_lags(max(1, min(last_lags.get(layer, longest), longest)))
            decay = np.zeros((heads, len(lags), len(BAND)))
            for index, lag in enumerate(lags):
                values = torch.cat([_decays_at(lf, real, int(lag), documents)
                                    for lf, real, documents in seen.log_forget], dim=1)  # fmt: skip
                if values.shape[1]:
                    decay[:, index] = torch.quantile(values.double(), torch.tensor(BAND, dtype=torch.float64),
                                                     dim=1).T.numpy()  # fmt: skip
            quantiles = torch.quantile(gates.double(), torch.tensor(QUANTILES, dtype=torch.float64), dim=0).T
            out[layer] = ForgetGates(layer, quantiles.numpy(), gates.double().mean(0).numpy(), len(gates), lags,
                                     decay)  # fmt: skip
        return out

    def cope_terms(self) -> dict[int, CopeTerms]:
        """{layer: CopeTerms} of the CoPE layers that saw queries."""
        out = {}
        for layer, seen in self.seen.items():
            if not seen.queries:
                continue
            table = self.cores[layer].position_embeddings.detach().float().cpu()  # (npos, Dh)
            queries = torch.cat(seen.queries)  # (N, H, Dh)
            terms = torch.einsum("nhd,pd->hpn", queries, table).double().numpy()  # (H, npos, N)
            quantiles = np.moveaxis(np.quantile(terms, BAND, axis=-1), 0, -1)
            largest = torch.cat(seen.largest).double().numpy()
            out[layer] = CopeTerms(layer, quantiles, terms.mean(-1), len(queries),
                                   np.quantile(largest, BAND, axis=0).T)  # fmt: skip
        return out


def _decays_at(log_forget: Tensor, real: Tensor, lag: int, documents: Tensor | None = None) -> Tensor:
    """(H, N): the decay sum_{l=t-lag+1..t} log f_l of every real query t >= lag of the batch (B, H, T) whose key
    t - lag it sees: with packed documents (``documents`` (B, T) ids), one in its own document (a key of the
    document before is masked, and its decay summed gates of both documents)."""
    if lag == 0:
        return torch.zeros(log_forget.shape[1], int(real.sum()))
    length = log_forget.shape[-1]
    if lag >= length:
        return torch.zeros(log_forget.shape[1], 0)
    cumulative = log_forget.double().cumsum(-1)
    differences = cumulative[..., lag:] - cumulative[..., :-lag]  # (B, H, T - lag): queries t = lag..T-1
    queries = real[:, lag:] if documents is None else real[:, lag:] & (documents[:, lag:] == documents[:, :-lag])
    return differences.transpose(1, 2)[queries].T.float()


def _largest_positions(q: Tensor, k: Tensor, real: Tensor, core: CoPECore, documents: Tensor | None = None) -> Tensor:
    """(N, H) for each real query and head: its largest contextual position (that of the first key it may see: in
    its own document, ``documents`` (B, T) ids of packed ones), clamped to npos - 1, by the op's reference
    (``cope_positions_naive`` of the sigmoid gates)."""
    length, npos = q.shape[-2], core.position_embeddings.shape[0]
    steps = torch.arange(length, device=q.device)
    allowed = visible(lag_matrix(steps, steps), core.window, causal=True)[None, None] & real[:, None, None, :]
    if documents is not None:
        allowed = allowed & same_segment(documents)
    logits = q.float() @ k.float().transpose(-1, -2) / q.shape[-1] ** 0.5
    place = cope_positions_naive(torch.sigmoid(logits) * allowed).clamp(max=npos - 1)  # (B, H, T, T)
    return place.amax(dim=3).transpose(1, 2)[real].float()




# --------------------------------------------------------------------------- the report's figures


def trained_lag(config, core: torch.nn.Module, read_length: int) -> tuple[int, str]:
    """(the longest lag ``core``'s layer met in training, what it is): its window in local scope, else the run's
    training sequences' ``data.seq_len`` - 1, else (a source without one) the longest sequence read - 1."""
    if core.window is not None:
        return int(core.window), "the window"
    seq_len = (getattr(config, "data", None) or {}).get("seq_len")
    if isinstance(seq_len, int) and seq_len > 1:
        return seq_len - 1, "data.seq_len \u2212 1"
    return max(read_length - 1, 1), "the longest validation sequence read \u2212 1"


def _layers(layers) -> str:
    layers = list(layers)
    return f"layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}"


def position_figures(config, model, read: ReadPositions, out, sequences: int, read_length: int,
                     cut: int | None = None) -> list[tuple]:  # fmt: skip
    """The learned-position figures of the model's t5_bias, dynamic_bias, alibi, forgetting and cope layers (each
    kind one figure, each of its layers one row), as (caption, path, numbers) for the report: ``read`` the hooks
    that watched the profile's passes over ``sequences`` validation sequences of at most ``read_length`` tokens
    (``cut``: the length they were cut to, when some were longer)."""
    from markovformer.plots.learned_positions import (
        BiasPanel,
        plot_alibi_bias,
        plot_cope_terms,
        plot_dynamic_bias,
        plot_forget_gates,
        plot_t5_bias,
    )

    cores = position_cores(model)
    by_kind: dict[str, dict[int, torch.nn.Module]] = {}
    for layer, core in cores.items():
        by_kind.setdefault(core_kind(core), {})[layer] = core
    figures = []
    reach = {layer: trained_lag(config, core, read_length) for layer, core in cores.items()}
    for kind in ("t5_bias", "dynamic_bias", "alibi"):
        if kind not in by_kind:
            continue
        biases = [lag_bias(layer, core, reach[layer][0]) for layer, core in by_kind[kind].items()]
        panels = []
        for bias in biases:
            marks = {}  # T5 alone is drawn past the lags met in training: the others end there
            if kind == "t5_bias" and bias.window is None:
                marks[f"max_distance {bias.max_distance}"] = bias.max_distance
                marks[f"{reach[bias.layer][1]} ({bias.trained_lag})"] = bias.trained_lag
            panels.append(BiasPanel(bias.layer, bias.lags, bias.bias, marks=marks))
        numbers = {"layers": [bias.numbers() for bias in biases]}
        spans = {bias.layer: f"{bias.lags[0]}..{bias.lags[-1]}".replace("-", "\u2212") for bias in biases}
        last = (next(iter(spans.values())) if len(set(spans.values())) == 1 else
                ", ".join(f"{span} (layer {layer})" for layer, span in spans.items()))  # fmt: skip
        where = _layers(by_kind[kind])
        met = "; ".join(sorted({reach[layer][1] for layer in by_kind[kind]}))
        if kind == "t5_bias":
            marked = ("; dashed: max_distance, dotted: the longest lag met in training"
                      if any(bias.window is None for bias in biases) else "")
            exact = sorted({"num_buckets / 4 on each side (the buckets split by sign)" if bias.lags.min() < 0
                            else "num_buckets / 2" for bias in biases})  # a bidirectional layer's side has half
            caption = (f"t5_bias, {where}: the learned bias added to the logit (nats), one curve per head, at every "
                       f"lag k in tokens {last}: each lag reads its T5 bucket, its own below {' or '.join(exact)}, "
                       f"then log-spaced ones up to max_distance and one shared bucket beyond{marked}")  # fmt: skip
            path = plot_t5_bias(panels, out / "t5_bias.png")
        elif kind == "dynamic_bias":
            caption = (f"dynamic_bias, {where}: the MLP's bias added to the logit (nats), one curve per head, at "
                       f"lags k in tokens {last} (up to the longest lag met in training: "
                       f"{met})")  # fmt: skip
            path = plot_dynamic_bias(panels, out / "dynamic_bias.png")
        else:
            caption = (f"alibi, {where}: the fixed (not learned) slopes m_h per head (nats per token) and the bias "
                       f"\u2212m_h\u00b7|k| added to the logit (nats) at lags k in tokens {last}")  # fmt: skip
            path = plot_alibi_bias({bias.layer: bias.slopes for bias in biases}, panels, out / "alibi.png")
        figures.append((caption, path, numbers))
    longest = {layer: reach[layer][0] for layer in by_kind.get("forgetting", {})}
    gates = read.forget_gates(longest)
    read_what = f"the first {sequences} validation sequences" + (f", each cut to its first {cut} tokens" if cut else "")
    if gates:
        panels = [BiasPanel(layer, g.lags, g.decay[..., 1], band=(g.decay[..., 0], g.decay[..., 2]))
                  for layer, g in gates.items()]  # fmt: skip
        tokens = next(iter(gates.values())).tokens
        caption = (f"forgetting (FoX), {_layers(gates)}: left, the forget gate f of each head over the {tokens:,} "
                   f"real tokens of {read_what} (box: 25..75%, line: median, "
                   f"whiskers: 5..95%); right, the decay \u03a3 log f of the k latest tokens added to the logit "
                   f"(nats) of the key k tokens back, median and 10..90% band over the queries, at lags k in "
                   f"tokens 0..{', '.join(str(g.lags[-1]) for g in gates.values())}")  # fmt: skip
        path = plot_forget_gates({layer: g.gate_quantiles for layer, g in gates.items()}, panels,
                                 out / "forget_gates.png")  # fmt: skip
        figures.append((caption, path, {"layers": [g.numbers() for g in gates.values()]}))
    terms = read.cope_terms()
    if terms:
        panels = [BiasPanel(layer, np.arange(t.mean.shape[1]), t.quantiles[..., 1],
                            band=(t.quantiles[..., 0], t.quantiles[..., 2]),
                            marks={"90% of queries reach no further": float(t.positions[:, 2].max())})
                  for layer, t in terms.items()]  # fmt: skip
        queries = next(iter(terms.values())).queries
        npos = ", ".join(sorted({str(t.mean.shape[1]) for t in terms.values()}))
        caption = (f"cope, {_layers(terms)}: the position embeddings' term q\u00b7e[p] added to the logit (nats) "
                   f"at contextual positions p = 0..npos_max \u2212 1 (npos_max {npos}), one curve per head: median "
                   f"and 10..90% band over the {queries:,} real queries of {read_what}; dashed: the position 90% of "
                   f"the queries give no key beyond (the most of any head)")  # fmt: skip
        figures.append((caption, plot_cope_terms(panels, out / "cope_positions.png"),
                        {"layers": [t.numbers() for t in terms.values()]}))
    return figures


__all__ = ["BAND", "QUANTILES", "CopeTerms", "ForgetGates", "LagBias", "ReadPositions", "core_kind", "decay_lags",
           "lag_bias", "position_cores", "position_figures", "t5_lags_drawn", "trained_lag"]

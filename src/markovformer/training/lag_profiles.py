"""The attention-by-lag profile `markovformer inspect` draws: the mean attention a query gives the key k tokens back
(and ahead, for a bidirectional model), per layer and head, read from bounded prefixes of the validation sequences
(``PROFILE_LENGTH``), so the maps held at once stay the same size however long the run's sequences are."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from markovformer.data.bundle import Split, examples_at
from markovformer.data.collate import collate
from markovformer.plots.markov import lag_rows, weight_scale
from markovformer.training.lag_report import CONVENTION
from markovformer.training.tasks import model_inputs

PROFILE_EXAMPLES = 32  # validation sequences averaged in the attention-by-lag profile
PROFILE_LENGTH = 512  # the first positions of each of them the profile reads: its maps are at most 512 x 512
PROFILE_BATCH = 4  # sequences per forward pass of the profile: with PROFILE_LENGTH, bounds the maps held at once
GLOBAL_PROFILE_REACH = 16  # the lags read of a layer with neither window nor max_order (global softmax, ...)


def example_prefix(example: dict, length: int) -> dict:
    """The first ``length`` positions of an example (a per-sequence label, a 0-dim tensor, kept whole)."""
    return {key: value[:length] if value.dim() else value for key, value in example.items()}


def attention_by_lag(weights: torch.Tensor, max_lag: int, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean attention probability a query gives the key ``k`` positions back, for k = 0..max_lag: (H, max_lag + 1).

    ``weights`` (B, H, T, T), queries down, keys across. Averaged over the examples and over the queries that have
    every lag up to ``max_lag`` inside the sequence (t >= max_lag) and are real tokens (``attention_mask`` (B, T)).
    """
    total, count = _lag_sums(weights, max_lag, attention_mask)
    return total / count.clamp_min(1)


def _lag_sums(weights: torch.Tensor, max_lag: int, mask: torch.Tensor | None, first_query: int | None = None,
              ahead: int = 0, future: bool = False, position_ids: torch.Tensor | None = None,
              ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The sum over the averaged queries behind ``attention_by_lag`` (H, max_lag + 1), and their count. Queries
    start at ``first_query`` (default ``max_lag``; at least it): layers read to different lags then still average
    the same queries; they end ``ahead`` real positions before the sequence's end (a bidirectional layer's queries
    have every future lag too). ``future``: the keys k = 0..max_lag tokens after the query (``ahead`` >= max_lag).
    ``position_ids`` (B, T): packed documents (positions restart at 0 at each): a query counts only where those
    lags lie in its own document, whose keys it may see (the others' keys, attended with 0, pulled the profile of
    short documents down at the far lags and up at lag 0)."""
    batch, heads, length, _ = weights.shape
    first_query = max_lag if first_query is None else first_query
    if first_query < max_lag:
        raise ValueError(f"first_query {first_query}: a query before lag {max_lag} does not have every lag")
    if future and ahead < max_lag:
        raise ValueError(f"ahead {ahead}: a query less than {max_lag} tokens before the end lacks a future lag")
    if length - ahead <= first_query:
        raise ValueError(f"sequences of {length} tokens have no query with all lags 0..{first_query}"
                         + (f" back and 0..{ahead} ahead" if ahead else ""))  # fmt: skip
    queries = torch.arange(first_query, length - ahead)
    lags = torch.arange(max_lag + 1)
    keys = queries[:, None] + lags[None, :] if future else queries[:, None] - lags[None, :]
    picked = weights[:, :, queries[:, None], keys]  # (B, H, Tq, L + 1)
    valid = torch.ones(batch, len(queries)) if mask is None else (mask[:, queries] * mask[:, queries + ahead]).float()
    if position_ids is not None:
        here = position_ids[:, queries]
        valid = valid * ((here >= first_query) & (position_ids[:, queries + ahead] == here + ahead)).float()
    return (picked * valid[:, None, :, None]).sum(dim=(0, 2)), valid.sum()


@dataclass(frozen=True)
class LagProfiles:
    """``profiles``: {layer: (H, L + 1) attention by lag over the keys 0..L tokens before the query, L that layer's
    reach (``profile_reach``, at most length - 1)}, averaged over queries max_lag..last_query of the first
    ``sequences`` validation sequences, ``max_lag`` the largest reach; ``future``: for a bidirectional model, each
    layer's (H, L + 1) profile over the keys 0..L tokens after the query (the same queries: those with every lag on
    both sides), else {}; ``cut``: whether some were longer than ``PROFILE_LENGTH``; ``short``: the layers whose
    reach the ``length`` positions read cut below ``profile_reach``."""

    profiles: dict[int, torch.Tensor]
    max_lag: int
    length: int
    sequences: int
    cut: bool
    future: dict[int, torch.Tensor] = field(default_factory=dict)
    last_query: int = -1
    short: tuple[int, ...] = ()
    packed: bool = False  # packed documents: only the queries whose lags lie in their own document are averaged


def lag_profiles(model, validation: Split, layers: list[int]) -> LagProfiles:
    """The attention-by-lag profile of ``layers`` over the first ``PROFILE_EXAMPLES`` validation sequences, each
    read up to its first ``PROFILE_LENGTH`` positions, ``PROFILE_BATCH`` sequences per forward pass: the attention
    maps held at once stay within PROFILE_BATCH x H x PROFILE_LENGTH² per layer whatever the sequence length. A
    causal model's maps of those queries are exactly those of the whole sequences (a bidirectional one sees only
    the prefix). ``model`` in eval mode. Each layer reads its own lags 0..``profile_reach``, at most length - 1;
    all average the same queries, from the largest of them on. A bidirectional model (``config.causal`` False)
    attends to keys after the query too: its profile reads both sides, over the queries that have every lag on
    both."""
    examples = examples_at(validation, range(min(PROFILE_EXAMPLES, len(validation))))  # a split is not sliceable
    batch = collate([example_prefix(example, PROFILE_LENGTH) for example in examples])
    inputs = {k: v for k, v in model_inputs(batch).items() if k != "labels"}
    mask = batch.get("attention_mask")
    both_sides = not getattr(model.config, "causal", True)
    sums: dict[tuple[int, bool], tuple[torch.Tensor, torch.Tensor]] = {}  # (layer, future): (summed, queries)
    max_lag = length = 0
    short: tuple[int, ...] = ()
    for start in range(0, len(examples), PROFILE_BATCH):
        rows = slice(start, start + PROFILE_BATCH)
        with torch.no_grad():
            output = model(**{k: v[rows] for k, v in inputs.items()}, return_weights=True)
        attentions = output.attentions
        # the mask of the positions the maps cover: pooling='cls' adds its [CLS] vector's
        covered = getattr(output, "attention_mask", None if mask is None else mask[rows])
        packed = inputs["position_ids"][rows] if "position_ids" in inputs else None  # packed documents
        length = next((weights.shape[-1] for weights in attentions if weights is not None), 0)
        # a layer without maps (random features) reads no lag, so it does not move the first query either
        wanted = {layer: profile_reach(model.config, layer) for layer in layers if attentions[layer] is not None}
        # a bidirectional layer's queries need every lag on both sides: half the positions each way at most
        room = (length - 1) // 2 if both_sides else length - 1
        reach = {layer: min(lags, room) for layer, lags in wanted.items()}
        short = tuple(layer for layer in reach if reach[layer] < wanted[layer])
        max_lag = max(reach.values(), default=0)
        if max_lag < 1:
            break
        ahead = max_lag if both_sides else 0
        for layer, last_lag in reach.items():
            for future in (False, True) if both_sides else (False,):
                total, count = _lag_sums(attentions[layer], last_lag, covered, first_query=max_lag, ahead=ahead,
                                         future=future, position_ids=packed)  # fmt: skip
                before = sums.get((layer, future), (0.0, 0.0))
                sums[layer, future] = (before[0] + total, before[1] + count)
    averaged = {key: total / count.clamp_min(1) for key, (total, count) in sums.items()}
    longest = max(len(example["input_ids" if "input_ids" in example else "input_features"]) for example in examples)
    return LagProfiles({layer: value for (layer, future), value in averaged.items() if not future}, max_lag, length,
                       len(examples), cut=longest > PROFILE_LENGTH,
                       future={layer: value for (layer, future), value in averaged.items() if future},
                       last_query=length - 1 - (max_lag if both_sides else 0), short=short,
                       packed="position_ids" in inputs)  # fmt: skip


def profile_reach(model_config, layer: int) -> int:
    """The last lag the profile reads of ``layer``: its own window + 1 (so the window's edge shows), else its
    max_order + 1, else ``GLOBAL_PROFILE_REACH``. A layer's entry may set its own window and max_order
    (``layer_specs``); a family without per-layer specs has only its flat fields."""
    if hasattr(model_config, "layer_specs"):
        options = model_config.layer_specs()[layer].options
        window = options.get("window") or options.get("max_order")
    else:
        window = getattr(model_config, "window", None) or getattr(model_config, "max_order", None)
    return int(window) + 1 if window else GLOBAL_PROFILE_REACH


def profile_caption(profile: LagProfiles, chain_lags: tuple[int, ...] | None) -> str:
    """The caption of the attention-by-lag figure: what it averages (probabilities, or signed weights), over which
    keys (both sides for a bidirectional model), the lags each layer's panel draws (``lag_rows``, the figure's own:
    a reach cut by the tokens read is said, and so are lags read past the last one any head attends, not drawn),
    and over which queries of which sequences."""
    values = [*profile.profiles.values(), *profile.future.values()]
    scale = weight_scale([value.float().numpy() for value in values])
    what = "probability" if scale.probabilities else "weight (signed: not a probability)"
    both = ", and at k < 0 the key \u2212k tokens ahead (the model is bidirectional)" if profile.future else ""
    # the lags the figure draws (``lag_rows``): those past the last any head attends are read but not drawn
    rows = lag_rows({layer: value.float().numpy() for layer, value in profile.profiles.items()},
                    {layer: value.float().numpy() for layer, value in profile.future.items()})  # fmt: skip
    spans = {layer: f"{lags[0]}..{lags[-1]}".replace("-", "\u2212") for layer, (lags, _) in rows.items()}
    if len(set(spans.values())) == 1:
        read = f"lags {next(iter(spans.values()))}"
    else:
        read = "lags " + ", ".join(f"{span} (layer {layer})" for layer, span in spans.items())
    read_to = max(value.shape[1] - 1 for value in profile.profiles.values())
    drawn_to = max(int(lags[-1]) for lags, _ in rows.values())
    if drawn_to < read_to:
        read += f" (read to {read_to}; no head attends past {drawn_to}: not drawn)"
    short = ""
    if profile.short:
        named = ", ".join(map(str, profile.short))
        short = (f"; layer{'s' if len(profile.short) > 1 else ''} {named} read to fewer: the "
                 f"{profile.length} tokens read hold no more{' on both sides' if profile.future else ''}")
    cut = f", each cut to its first {PROFILE_LENGTH} tokens" if profile.cut else ""
    shaded = "; shaded: the chain's lags" if chain_lags else ""
    packed = f", those at least {profile.max_lag} tokens into their packed document" if profile.packed else ""
    return (f"Attention by lag: per layer and head, the mean attention {what} a query gives the key k tokens "
            f"back{both}, for k up to the layer's window + 1 (its max_order + 1 without a window, else "
            f"{GLOBAL_PROFILE_REACH}){short}: {read}, over queries {profile.max_lag}..{profile.last_query} of the "
            f"first {profile.sequences} validation sequences{cut}{packed} ({CONVENTION}{shaded})")

"""The key/value cache an attention core keeps in its decoding state (``state["cache"]``), and the attention of new
queries over it (``ops.cached_attention``).

A local-scope core (window W) keeps a *rolling* cache of W + 1 slots (the keys t-W..t): its memory and per-token
time never grow with the length. A chunk of n > 1 new positions attends over the old slots and its own keys
before they are written, since its first query still sees keys the chunk's last ones will overwrite. A global-scope
core keeps every key, in storage that doubles when full, so an append is amortised O(1) and never a ``torch.cat`` of
the whole cache per token.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from markovformer.ops.cached_attention import cached_attention, newest_query_attention
from markovformer.ops.precision import compute_dtype


class SeenKeys(NamedTuple):
    """What the queries of a chunk appended to a cache attend over (``KeyValueCache.extend``)."""

    keys: Tensor  # (B, H, c, Dh)
    values: Tensor  # (B, H, c, Dh)
    key_positions: Tensor  # (c,)
    key_real: Tensor  # (B, c): False at padding and at empty slots
    key_log_decay: Tensor | None  # (B, H, c), decay kinds: relative to the chunk's last position
    query_positions: Tensor  # (n,)
    query_log_decay: Tensor | None  # (B, H, n), decay kinds


class KeyValueCache:
    """Keys and values (B, H, C, Dh) of the positions seen, padding (B, C) and, for decay kinds, cumulative log
    forget gates (B, H, C) relative to the newest position (kept small by rebasing). The slots' positions follow
    from the length, so none are stored.

    ``window`` W: a rolling cache of W + 1 slots, position p in slot p mod (W + 1), written twice (in storage of
    2 (W + 1) slots, at s and s + W + 1) so that the last W + 1 positions are always one contiguous slice in
    position order (``visible``): a new query's lags are then fixed (W..0), with no per-step index arithmetic and
    no sort. None: position p in slot p.
    """

    # the storage: None until the first write allocates it (log_decay: decay kinds only)
    keys: Tensor | None  # (B, H, slots, Dh)
    values: Tensor | None  # (B, H, slots, Dh)
    real: Tensor | None  # (B, slots)
    log_decay: Tensor | None  # (B, H, slots)

    def __init__(self, window: int | None) -> None:
        self.window = window
        self.length = 0  # positions written so far
        self.real_from = 0  # every position from this one on that was written is real (no padding)
        self.keys = self.values = self.real = self.log_decay = None  # the slots' positions follow from length
        self._views: tuple | None = None  # (keys, values, real, their halves) of a rolling cache, made once
        # what a core derives from its weights once per decoding and shares by every row (a per-lag bias table):
        # the weights do not change while a cache is in use
        self.derived: dict[str, Tensor] = {}

    @property
    def capacity(self) -> int:
        """Slots that can hold a distinct position: W + 1 (rolling), or the storage allocated (global)."""
        if self.keys is None:
            return 0
        return self.window + 1 if self.window is not None else self.keys.shape[2]

    def _allocate(self, keys: Tensor, capacity: int, with_decay: bool) -> None:
        """(Re)allocate ``capacity`` slots of storage, keeping what is stored (a global cache that grows)."""
        batch, heads, _, head_dim = keys.shape
        old = (self.keys, self.values, self.real, self.log_decay)
        self.keys = keys.new_zeros(batch, heads, capacity, head_dim)
        self.values = torch.zeros_like(self.keys)
        self.real = torch.zeros(batch, capacity, dtype=torch.bool, device=keys.device)
        # rebased every step: half precision would drift
        self.log_decay = keys.new_zeros(batch, heads, capacity, dtype=compute_dtype(keys)) if with_decay else None
        if old[0] is not None:
            used = old[0].shape[2]
            self.keys[:, :, :used], self.values[:, :, :used] = old[0], old[1]
            self.real[:, :used] = old[2]
            if with_decay:
                self.log_decay[..., :used] = old[3]

    def _halves(self) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """A rolling cache's storage seen as its two copies: keys, values (B, H, 2, W + 1, Dh), real
        (B, 2, W + 1), log decay (B, H, 2, W + 1)."""
        views = self._views
        if views is not None and views[0] is self.keys and views[1] is self.values and views[2] is self.real:
            return views[3]  # (beam search's reordering replaces the tensors, and with them these views)
        slots = self.window + 1
        keys = self.keys.unflatten(2, (2, slots))
        decay = None if self.log_decay is None else self.log_decay.unflatten(2, (2, slots))
        halves = (keys, self.values.unflatten(2, (2, slots)), self.real.unflatten(1, (2, slots)), decay)
        self._views = (self.keys, self.values, self.real, halves)
        return halves

    def write(self, keys: Tensor, values: Tensor, real: Tensor | None, log_decay: Tensor | None = None) -> None:
        """Append keys, values (B, H, n, Dh) of the next n positions; real (B, n) is False at padding (None: no
        padding); log_decay (B, H, n): their cumulative log forget gates relative to the newest position before
        them."""
        count, start = keys.shape[2], self.length
        self.length += count
        if real is None:  # (a rolling cache whose slots all hold real keys since the last padding: nothing to write)
            settled = self.window is not None and count == 1 and start >= self.real_from + self.window + 1
            real = None if settled else keys.new_ones((), dtype=torch.bool).expand(keys.shape[0], count)
        elif not torch.compiler.is_compiling() and not bool(real.all()):
            self.real_from = self.length  # (conservative: the chunk may end in padding)
        if self.window is not None:
            slots = self.window + 1
            if self.keys is None:
                self._allocate(keys, 2 * slots, log_decay is not None)
            if log_decay is not None:
                self.log_decay -= log_decay[..., -1:]  # rebase the old slots: the newest position has 0
            cached_keys, cached_values, cached_real, cached_decay = self._halves()
            if count == 1:  # one position, both copies of its slot in one copy each
                slot = start % slots
                cached_keys.select(3, slot).copy_(keys)
                cached_values.select(3, slot).copy_(values)
                if real is not None:
                    cached_real.select(2, slot).copy_(real)
                if log_decay is not None:
                    cached_decay[..., slot] = 0.0
                return
            keep = slice(max(0, count - slots), count)  # only the last W + 1 positions can still be seen
            index = torch.arange(start, start + count, device=keys.device)[keep]
            decay = None if log_decay is None else (log_decay - log_decay[..., -1:])[..., keep, None]
            index_slots = index % slots
            cached_keys.index_copy_(3, index_slots, keys[:, :, keep, None].expand(-1, -1, -1, 2, -1).transpose(2, 3))
            cached_values.index_copy_(3, index_slots, values[:, :, keep, None].expand(-1, -1, -1, 2, -1)
                                      .transpose(2, 3))  # fmt: skip
            cached_real.index_copy_(2, index_slots, real[:, None, keep].expand(-1, 2, -1))
            if log_decay is not None:
                cached_decay.index_copy_(3, index_slots, decay.expand(-1, -1, -1, 2).transpose(2, 3))
            return
        if self.length > self.capacity:
            self._allocate(keys, max(2 * self.capacity, self.length, 16), log_decay is not None)
        self.keys[:, :, start : self.length] = keys
        self.values[:, :, start : self.length] = values
        self.real[:, start : self.length] = real
        if log_decay is not None:
            self.log_decay[..., start : self.length] = log_decay
            self.log_decay -= log_decay[..., -1:]  # rebase: the newest position has 0

    def _visible_slots(self) -> slice:
        """The storage slots of the visible positions, in position order (a rolling cache: the oldest of the last
        W + 1 positions in the first copy, the rest after it)."""
        if self.window is None:
            return slice(0, self.length)
        begin = self.length % (self.window + 1)
        return slice(begin, begin + self.window + 1)

    def visible(self) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        """The slots that may hold a key, in position order (empty slots, position -1, first): keys, values
        (B, H, c, Dh), positions (c,), real (B, c), log decay (B, H, c)."""
        used = self._visible_slots()
        first = 0 if self.window is None else self.length - self.window - 1
        decay = None if self.log_decay is None else self.log_decay[..., used]
        slot_positions = torch.arange(first, self.length, device=self.keys.device).clamp_min(-1)  # -1: empty
        return self.keys[:, :, used], self.values[:, :, used], slot_positions, self.real[:, used], decay

    def extend(self, k: Tensor, v: Tensor, real: Tensor, log_decay: Tensor | None = None) -> SeenKeys:
        """Append k, v (B, H, n, Dh) of the next n positions (real (B, n) False at padding; ``log_decay`` (B, H, n)
        their cumulative log forget gates from the newest position before them, decay kinds) and return what their
        queries see: every visible key, the keys' and queries' positions and, for decay kinds, log decays relative
        to the newest position."""
        start, count = self.length, k.shape[2]
        query_positions = torch.arange(start, start + count, device=k.device)
        query_log_decay = None if log_decay is None else log_decay - log_decay[..., -1:]
        if self.window is not None and count > 1 and self.keys is not None:
            # W + 1 rolling slots hold what one new query sees; n new queries see the W keys before the first of
            # them as well, which writing all n first would overwrite: the old slots and the new keys together.
            old_keys, old_values, old_positions, old_real, old_log_decay = self.visible()
            key_log_decay = None
            if log_decay is not None:  # both relative to the newest position before the chunk: rebase to its last
                key_log_decay = torch.cat([old_log_decay, log_decay], dim=-1) - log_decay[..., -1:]
            seen = SeenKeys(torch.cat([old_keys, k], dim=2), torch.cat([old_values, v], dim=2),
                            torch.cat([old_positions, query_positions]), torch.cat([old_real, real], dim=1),
                            key_log_decay, query_positions, query_log_decay)  # fmt: skip
            self.write(k, v, real, log_decay)
            return seen
        self.write(k, v, real, log_decay)
        return SeenKeys(*self.visible(), query_positions, query_log_decay)

    def empty_visible_slots(self) -> int | None:
        """When no padding is visible: how many visible slots hold no position yet (a rolling cache's first W + 1 - t
        before t positions; they come first), so the slots need no padding mask; None when padding may be visible."""
        if self.window is None:
            return 0 if self.real_from == 0 else None
        first_visible = self.length - self.window - 1
        if first_visible >= self.real_from:
            return 0
        return -first_visible if self.real_from == 0 else None

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, real: Tensor | None, past_bias: Tensor | None = None,
        log_decay: Tensor | None = None,
    ) -> Tensor:  # fmt: skip
        """``extend`` with k, v, then the causal attention (B, H, n, Dh) of the new queries q over what they see
        (``real`` None: no padding among them)."""
        if q.shape[2] == 1:  # one new query (a decoding step): the visible keys end at its own, in order
            self.write(k, v, real, log_decay)
            used = self._visible_slots()
            empty = self.empty_visible_slots()
            key_real = None if empty is not None else self.real[:, used]
            key_log_decay = None if self.log_decay is None else self.log_decay[..., used]
            return newest_query_attention(q, self.keys[:, :, used], self.values[:, :, used], key_real,
                                          past_bias=past_bias, key_log_decay=key_log_decay,
                                          empty_slots=empty or 0)  # fmt: skip
        if real is None:
            real = torch.ones(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device)
        seen = self.extend(k, v, real, log_decay)
        return cached_attention(q, seen.keys, seen.values, seen.query_positions, seen.key_positions, seen.key_real,
                                window=self.window, past_bias=past_bias, query_log_decay=seen.query_log_decay,
                                key_log_decay=seen.key_log_decay)  # fmt: skip

    def floats(self) -> int:
        """Floats held (keys and values), for memory reports."""
        return 0 if self.keys is None else self.keys.numel() + self.values.numel()


def real_mask(attention_mask: Tensor | None, x: Tensor, none_if_all: bool = False) -> Tensor | None:
    """(B, n) bool: True at real positions of x (B, n, ...); ``none_if_all``: None without a mask."""
    if attention_mask is None:
        if none_if_all:
            return None
        return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    return attention_mask.bool()


def keep_in_cache(state: dict | None, window: int | None, k: Tensor, v: Tensor, attention_mask: Tensor | None,
                  log_decay: Tensor | None = None) -> None:  # fmt: skip
    """After a core's full forward over a sequence from the start: store its keys and values in ``state``."""
    if state is None:
        return
    cache = KeyValueCache(window)
    cache.write(k, v, None if attention_mask is None else attention_mask.bool(), log_decay)
    state["cache"] = cache


def after_carried_inputs(x: Tensor, state: dict | None, key: str, count: int) -> Tensor:
    """x (B, T, C) after the ``count`` inputs before it: those ``state[key]`` carries from the previous call (zeros
    at the start, or without a state), so (B, count + T, C); leaves the last ``count`` of them there for the next
    call. What a causal filter of count + 1 taps reads (H3's shift filter, Hyena's short convolution)."""
    history = None if state is None else state.get(key)
    if history is None:
        history = x.new_zeros(x.shape[0], count, x.shape[2])
    extended = torch.cat([history.to(x.dtype), x], dim=1)
    if state is not None:
        state[key] = extended[:, extended.shape[1] - count :]
    return extended


__all__ = ["KeyValueCache", "SeenKeys", "after_carried_inputs", "keep_in_cache", "real_mask"]

"""Incremental decoding of causal attention layers: a key/value cache per layer and the one-token step forms of
``SelfAttention`` and ``PreLNBlock``.

A local-scope layer (window W) keeps a *rolling* cache of W + 1 slots (the keys t-W..t), so its memory and
per-token time do not grow with the generated length; a global-scope layer keeps a cache preallocated for the
whole generation, written in place (no ``torch.cat`` per step). Only the kinds registered with
``incremental=True`` (Markov and softmax attention, one core each) decode this way.
"""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.layers.attention import SelfAttention
from markovformer.layers.block import PreLNBlock
from markovformer.layers.markov_attention import MarkovCore
from markovformer.layers.softmax_attention import SoftmaxCore
from markovformer.ops.cached_attention import cached_attention


class KeyValueCache:
    """The keys and values (B, H, C, Dh) one layer has seen, with their positions (C,) and padding (B, C).

    ``rolling``: C = window + 1 slots and position p lives in slot p mod C; otherwise C = the longest sequence
    to decode and position p lives in slot p.
    """

    def __init__(
        self, batch: int, heads: int, head_dim: int, capacity: int, rolling: bool, dtype: torch.dtype,
        device: torch.device,
    ) -> None:  # fmt: skip
        self.rolling, self.capacity = rolling, capacity
        self.keys = torch.zeros(batch, heads, capacity, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.positions = torch.full((capacity,), -1, dtype=torch.long, device=device)
        self.real = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        self.length = 0  # positions written so far

    def write(self, keys: Tensor, values: Tensor, real: Tensor) -> None:
        """Append keys, values (B, H, n, Dh) of the next n positions; real (B, n) is False at padding."""
        count = keys.shape[2]
        positions = torch.arange(self.length, self.length + count, device=keys.device)
        self.length += count
        if self.rolling and count > self.capacity:  # only the last C positions can still be seen
            keys, values, real, positions = (keys[:, :, -self.capacity :], values[:, :, -self.capacity :],
                                             real[:, -self.capacity :], positions[-self.capacity :])  # fmt: skip
        elif not self.rolling and self.length > self.capacity:
            raise ValueError(f"the key/value cache holds {self.capacity} positions; position {self.length - 1} "
                             "does not fit")  # fmt: skip
        slots = positions % self.capacity if self.rolling else positions
        self.keys.index_copy_(2, slots, keys)
        self.values.index_copy_(2, slots, values)
        self.positions.index_copy_(0, slots, positions)
        self.real.index_copy_(1, slots, real)

    def visible(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The slots that may hold a key: keys, values (B, H, c, Dh), positions (c,), real (B, c)."""
        used = self.capacity if self.rolling else self.length
        return self.keys[:, :, :used], self.values[:, :, :used], self.positions[:used], self.real[:, :used]


def single_core(attention: SelfAttention) -> MarkovCore | SoftmaxCore:
    """The one Markov or softmax core of an attention layer that decodes incrementally; ValueError otherwise."""
    cores = list(attention.cores) if isinstance(attention, SelfAttention) else []
    if len(cores) != 1 or not isinstance(cores[0], (MarkovCore, SoftmaxCore)) or not cores[0].causal:
        raise ValueError(f"{type(attention).__name__} has no incremental decoding (it needs one causal Markov or "
                         "softmax core)")  # fmt: skip
    return cores[0]


def new_cache(attention: SelfAttention, batch: int, max_length: int, dtype, device) -> KeyValueCache:
    """A rolling cache of window + 1 slots for a local layer, else one of ``max_length`` slots."""
    window = single_core(attention).window
    rolling = window is not None and window + 1 < max_length
    capacity = window + 1 if rolling else max_length
    return KeyValueCache(batch, attention.n_heads, attention.head_dim, capacity, rolling, dtype, device)


def _projected(attention: SelfAttention, x: Tensor, start: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q (rotated), k (rotated), v and the unrotated q of x (B, T, D) at positions start.., each (B, H, T, Dh)."""
    batch, length, _ = x.shape
    q, k, v = attention.qkv(x).view(batch, length, 3, attention.n_heads, attention.head_dim).permute(2, 0, 3, 1, 4)
    q_raw = q
    if attention.rotary is not None:
        q, k = attention.rotary(q, start), attention.rotary(k, start)
    return q, k, v, q_raw


def attention_step(attention: SelfAttention, x: Tensor, cache: KeyValueCache, real: Tensor) -> Tensor:
    """The layer's output (B, n, D) for the next n inputs x (B, n, D) (n = 1 when decoding), reading and extending
    ``cache``; real (B, n) is False at padding. Equal to its full forward at those positions."""
    core = single_core(attention)
    start = cache.length
    q, k, v, q_raw = _projected(attention, x, start)
    cache.write(k, v, real)
    keys, values, key_positions, key_real = cache.visible()
    past_bias = core.markov_bias(x, q_raw, None).past_bias if isinstance(core, MarkovCore) else None
    query_positions = torch.arange(start, start + x.shape[1], device=x.device)
    heads = cached_attention(q, keys, values, query_positions, key_positions, key_real, window=core.window,
                             past_bias=past_bias)  # fmt: skip
    return attention.out_proj(heads.transpose(1, 2).reshape(x.shape))


def prefill(attention: SelfAttention, x: Tensor, cache: KeyValueCache, real: Tensor) -> Tensor:
    """The layer's full forward over a prompt x (B, T, D) (its own fast path), storing its keys and values."""
    _, k, v, _ = _projected(attention, x, cache.length)
    cache.write(k, v, real)
    return attention(x, None if bool(real.all()) else real)


def block_step(block: PreLNBlock, x: Tensor, cache: KeyValueCache, real: Tensor, prompt: bool = False) -> Tensor:
    """``PreLNBlock.forward`` (in eval mode, without GRU injection) over the next inputs x (B, n, D), with the
    attention read from and written to ``cache``; ``prompt``: run the attention's full forward (prefill)."""
    if block.gru is not None:
        raise ValueError("a block with GRU injection has no incremental decoding")
    attend = prefill if prompt else attention_step
    x = x + attend(block.attention, block.attention_norm(x), cache, real)
    return x + block.ffn(block.ffn_norm(x))


__all__ = ["KeyValueCache", "attention_step", "block_step", "new_cache", "prefill", "single_core"]

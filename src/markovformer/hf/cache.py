"""``MarkovformerCache``: the decoding state of a markovformer causal LM, as ``transformers``' ``generate`` carries
a cache from step to step (the ``cache`` of the model's outputs and inputs).

Each layer keeps its own state (``forward(..., state=)`` of the model: rolling key/value caches for local
attention, growing ones for global attention, running sums or recurrent states for the other kinds), so the cache
holds that one dict and the length it has seen (counted by the wrappers, whatever the model's state records);
``transformers`` needs nothing more of it than its length and, for beam search, ``reorder_cache``.

transformers 5.24 renamed that argument and output field from ``past_key_values`` to ``cache``; ``CACHE_NAME`` is the
name the installed release uses, and the wrappers take and return the cache under it (the hf extra's whole range,
>= 5.0, works so).
"""

from __future__ import annotations

from dataclasses import fields

from torch import Tensor
from transformers.modeling_outputs import CausalLMOutputWithPast

from markovformer.layers.kv_cache import KeyValueCache
from markovformer.models.inputs import check_left_padded

CACHE_NAME = "cache" if "cache" in {field.name for field in fields(CausalLMOutputWithPast)} else "past_key_values"


class MarkovformerCache:
    """The model's decoding state (``state``, given to ``forward(..., state=)``) for a batch of B rows."""

    is_compileable = False

    def __init__(self) -> None:
        self.state: dict = {}
        self.length = 0

    def advance(self, tokens: int) -> None:
        """Count the ``tokens`` columns a forward just read into ``state`` (the wrappers call it)."""
        self.length += tokens

    def get_seq_length(self, layer_index: int = 0) -> int:
        """Positions seen so far (prompt and generated tokens, padding included): ``generate`` feeds only those
        after them."""
        return self.length

    @property
    def is_linear(self) -> list[bool]:
        """``transformers``' flags of cache layers holding linear-attention states only: one False, so that its
        ``generate`` feeds only the positions after ``get_seq_length()``, as with key/value caches."""
        return [False]

    def reorder_cache(self, beam_idx: Tensor) -> None:
        """Keep row ``beam_idx[i]`` of every state tensor as row i (beam search). State tensors are batch-first
        except ``nn.GRU``'s hidden state (layers, B, D), whose batch is its second dimension (a causal GRU has one
        layer, so its first dimension is 1); key/value caches reorder their keys, values, padding and decay and
        keep their positions, which are per slot, not per row; anything else (lengths, orders, tables derived from
        the weights such as S4D's ``DecodingTables``) is shared by every row and stays as it is."""
        self.state = _select_rows(self.state, beam_idx)


class DecodesFromCache:
    """``transformers``' ``generate`` for a markovformer causal LM that keeps its decoding state in a
    ``MarkovformerCache`` (made by its first forward). Listed before ``GenerationMixin``, which transformers
    looks for among a model's own bases."""

    def prepare_inputs_for_generation(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                                      cache: MarkovformerCache | None = None, use_cache: bool | None = None,
                                      **unused):  # fmt: skip
        """The whole prompt first, then only the tokens the cache has not seen (one per step); the whole sequence
        each step when there is no cache (``use_cache=False``). Past a model's ``longest_input`` (learned
        positions' ``max_positions``), its last that many tokens each step, without the cache, as markovformer's
        own ``generate`` re-runs them. ValueError for a prompt ``attention_mask`` whose row is right-padded, all
        padding or padded between real tokens (``check_left_padded``; transformers only warns of right padding,
        then reads the next token at the padding); its row is counted in the batch generate runs (each prompt
        repeated ``num_beams`` times for beam search)."""
        if attention_mask is not None:  # the prompt's (given, or inferred from pad_token_id), then ones appended
            try:
                check_left_padded(attention_mask, "attention_mask")
            except ValueError as error:  # transformers' own mask marks every pad_token_id, real tokens too
                raise ValueError(f"{error}; without an attention_mask, transformers takes every pad_token_id in "
                                 "input_ids for padding: where that id is a real token of the prompt, pass "
                                 "attention_mask=torch.ones_like(input_ids)") from None  # fmt: skip
        cache = cache if cache is not None else unused.get(CACHE_NAME)
        # generate's output_* flags reach the forward (they were dropped: its hidden states and attentions all None)
        shown = {key: unused[key] for key in ("output_hidden_states", "output_attentions") if key in unused}
        longest = getattr(self.markovformer, "longest_input", None)
        if longest is not None and input_ids.shape[1] > longest:
            window = slice(-longest, None)
            return {"input_ids": input_ids[:, window], CACHE_NAME: None, "use_cache": False, **shown,
                    "attention_mask": None if attention_mask is None else attention_mask[:, window]}  # fmt: skip
        if cache is not None:
            input_ids = input_ids[:, cache.get_seq_length() :]
        if shown.get("output_attentions") and use_cache is not False:
            raise ValueError("output_attentions: the layers decoding from their cache keep no attention weights; "
                             "generate(..., use_cache=False) returns them (each step re-reads the whole sequence)")
        return {"input_ids": input_ids, "attention_mask": attention_mask, CACHE_NAME: cache, "use_cache": use_cache,
                **shown}  # fmt: skip

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the model makes its own cache (MarkovformerCache) in its first forward


def _select_rows(value, rows: Tensor):
    if isinstance(value, Tensor):
        if value.dim() == 0:
            return value
        dim = 0 if value.shape[0] == len(rows) or value.dim() == 1 else 1
        return value.index_select(dim, rows.to(value.device))
    if isinstance(value, KeyValueCache):
        for name in ("keys", "values", "real", "log_decay"):
            if getattr(value, name) is not None:
                setattr(value, name, getattr(value, name).index_select(0, rows.to(value.keys.device)))
        return value
    if isinstance(value, dict):
        return {key: _select_rows(item, rows) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_select_rows(item, rows) for item in value)
    return value


__all__ = ["DecodesFromCache", "MarkovformerCache"]

"""What every model family's token inputs must be, checked here before any layer sees them: an int64 (or int32)
tensor of ids inside the vocabulary, with at least one row and one position; where a row must hold a token (the
VMT's documents, the translator's sources, a sequence to classify: ``check_rows_have_tokens``), no row that is all
padding (the attention families' other heads take one: its outputs are finite and its loss is masked). Each check
raises ValueError (TypeError for a non-tensor) naming the argument and the bad value."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from markovformer.ops.losses import check_labels, next_token_targets
from markovformer.ops.padding import check_attention_mask
from markovformer.ops.segments import check_position_ids

ID_DTYPES = (torch.int64, torch.int32)  # what nn.Embedding indexes with


def check_not_empty(x: Tensor, name: str, positions: bool = True) -> None:
    """ValueError naming ``name`` when it has no rows (B = 0) or, with ``positions``, no positions (T = 0)."""
    if x.dim() >= 1 and x.shape[0] == 0:
        raise ValueError(f"{name} has no rows (shape {tuple(x.shape)}): give at least one sequence")
    if positions and x.dim() >= 2 and x.shape[1] == 0:
        raise ValueError(f"{name} has no positions (shape {tuple(x.shape)}): give at least one token")


def check_is_tensor(value: object, name: str = "input_ids", what: str = "token ids") -> None:
    """TypeError naming ``name`` unless ``value`` is a tensor (a list of ids is one, as in transformers, only once a
    tokenizer's ``return_tensors="pt"`` or ``torch.tensor`` made it one)."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a tensor of {what}; got {type(value).__name__}")


def check_id_tensor(ids: Tensor, name: str = "input_ids", dims: int = 2) -> None:
    """The type, dtype and shape of token ids: (B, T) (``dims`` 2) or (B,) (``dims`` 1), not empty."""
    check_is_tensor(ids, name)
    if ids.dtype not in ID_DTYPES or ids.dim() != dims:
        shape = "(B, T)" if dims == 2 else "(B,)"
        raise ValueError(f"{name} must be integer token ids {shape} (int64 or int32); got {ids.dtype} "
                         f"{tuple(ids.shape)}")  # fmt: skip
    check_not_empty(ids, name)


def check_vocabulary(ids: Tensor, vocab_size: int, name: str = "input_ids") -> None:
    """ValueError naming ``name`` and the first id outside [0, vocab_size) (not checked inside ``torch.compile``:
    a data-dependent branch; a model's own ``compile`` checks before the graph, ``check_input_values``, and a
    compiled decoding step reads the model's own tokens)."""
    if torch.compiler.is_compiling():
        return
    outside = (ids < 0) | (ids >= vocab_size)
    if bool(outside.any()):
        raise ValueError(f"{name} holds token id {ids[outside][0].item()}, outside the vocabulary [0, {vocab_size})")


def check_token_ids(ids: Tensor, vocab_size: int, name: str = "input_ids", dims: int = 2) -> None:
    """``check_id_tensor`` and ``check_vocabulary``: what a model checks of the ids it is given."""
    check_id_tensor(ids, name, dims)
    check_vocabulary(ids, vocab_size, name)


def check_rows_have_tokens(mask: Tensor, name: str) -> None:
    """ValueError naming ``name`` and the row when a row of the (B, T) mask (1 = real) holds no real token."""
    empty = ~mask.bool().any(-1)
    if bool(empty.any()):
        raise ValueError(f"{name} row {int(empty.nonzero()[0])} is all padding; every row needs a real token")


def check_left_padded(mask: Tensor, name: str) -> None:
    """ValueError naming ``name``, the row and its mask unless every row of the (B, T) mask (1 = real) is padding
    then real tokens (left padding, or none) with at least one real token: a continuation is read at a row's last
    position (a right-padded row was continued from its padding), and padding between real tokens moves what some
    kinds read (Hyena's convolutions, RWKV, sinusoidal positions) away from the row's run without it."""
    check_rows_have_tokens(mask, name)
    real = mask.bool()
    after_real = (real[:, :-1] & ~real[:, 1:]).any(-1)  # a padding position right after a real token
    if bool(after_real.any()):
        row = int(after_real.nonzero()[0])
        shown = real[row].long().tolist()
        shown = f"{shown}" if len(shown) <= 16 else f"[{', '.join(map(str, shown[:8]))}, ..., {shown[-1]}]"
        where = ("is right-padded (padding after its last real token), and generate reads each row's next token at "
                 "its last position") if not bool(real[row, -1]) else (
            "has padding between real tokens, which some layers do not skip (convolutions, recurrences, sinusoidal "
            "positions)")  # fmt: skip
        raise ValueError(f"{name} row {row} = {shown} {where}: pad prompts on the left only (a tokenizer's "
                         f"padding_side='left')")  # fmt: skip


TOKEN_INPUTS = ("input_ids", "src_ids", "tgt_ids")  # forward's arguments of token ids, in every family


def check_input_values(inputs: Mapping[str, object], vocab_size: int | None, classes: int | None,
                       max_positions: int | None = None, next_token: bool = False) -> None:  # fmt: skip
    """The checks of a forward's ``inputs`` (by argument name) that read their values, with the messages of the same
    functions forward calls: ids of ``TOKEN_INPUTS`` inside the vocabulary, an ``attention_mask`` of 0 and 1,
    ``position_ids`` >= 0 (and below ``max_positions``, a table of learned positions), ``labels`` among the
    ``classes`` (or ignored; with ``next_token``, a causal LM's, only those it scores, ``next_token_targets``: not
    the first label nor a packed document's first, which eager takes whatever they hold). A model's own ``compile``
    runs them before each compiled call: inside the graph they are device-side assertions (a RuntimeError without
    the value) or none (an IndexError, or an Inductor kernel's "index out of bounds", without it)."""
    for name in TOKEN_INPUTS:
        if vocab_size is not None and inputs.get(name) is not None:
            check_token_ids(inputs[name], vocab_size, name)  # type: ignore[arg-type]
    mask, position_ids, labels = (inputs.get(name) for name in ("attention_mask", "position_ids", "labels"))
    if mask is not None:
        check_is_tensor(mask, "attention_mask", "0 (padding) and 1 (real token)")
        check_attention_mask(mask, tuple(mask.shape))  # type: ignore[union-attr]
    if isinstance(position_ids, Tensor):
        check_position_ids(position_ids, max_positions)
    if classes is None or labels is None:
        return
    if next_token and isinstance(labels, Tensor):
        ids = inputs.get("input_ids")
        if not isinstance(ids, Tensor) or labels.shape != ids.shape:
            return  # forward's own message names their shape
        packed = isinstance(position_ids, Tensor) and position_ids.shape == labels.shape
        labels = next_token_targets(labels, position_ids if packed else None)  # type: ignore[arg-type]
    check_labels(labels, classes)


__all__ = ["ID_DTYPES", "TOKEN_INPUTS", "check_id_tensor", "check_input_values", "check_is_tensor",
           "check_left_padded", "check_not_empty", "check_rows_have_tokens", "check_token_ids",
           "check_vocabulary"]  # fmt: skip

"""ScanMarkovConfig: every option of the scan Markov model, validated on construction."""

from __future__ import annotations

import dataclasses
from typing import NoReturn

from markovformer.models.config_base import ModelConfig
from markovformer.ops.scan import BACKENDS

CONTEXT_MODES = ("markov", "recurrent")
WINDOW_POSITIONS = ("start", "end")


@dataclasses.dataclass
class ScanMarkovConfig(ModelConfig):
    """Configuration of ``ScanMarkovForCausalLM``: ``vocab_size`` (required: None is refused; a run fills it in from
    its data), the width ``d_model`` and:

    ``context_mode``: ``"markov"`` (the state at t runs over the last ``order`` tokens only, positions counted
    from the window start: the next token depends on exactly its ``order`` previous ones, the field's meaning in
    every family; formerly ``context_length``) or ``"recurrent"`` (over the whole prefix, absolute positions, so
    sequences may be at most ``max_positions`` long). ``order`` is required in markov mode and must fit in
    ``max_positions``; a forward call may override it. ``ffn_mult``: hidden width of the gate projection and the
    decoder, in units of ``d_model`` (the seed's 512 = 4·128). ``backend``: the ``linear_scan`` backend of the
    recurrent mode; the markov mode's short windows use ``windowed_linear_scan`` (its naive loop when
    ``backend="naive"``). ``dropout`` acts on the embeddings and the decoder's hidden layer;
    ``decoder_dropout``, if set, replaces it in the decoder alone. Dropout on the decoder only keeps the markov
    mode's gates a table over (token, position), computed once a step (embedding dropout makes them per pair).
    ``window_positions``: in markov mode, count a window's positions from its first token (``"start"``, the paper's and
    the seed: the last of n tokens sits at n - 1) or back from its last (``"end"``: the last token sits at 0 for
    every n, so windows of different n share the recent tokens' gates and the n-token state is the (n-1)-token
    state plus a decayed term of the oldest token, the shape of an n-gram model's backoff).
    ``context_dropout``: in training, each token of each context is skipped with this probability (its step of the
    recurrence becomes h_t = h_{t-1}: A = 1, B = 0), independently per window in markov mode. Noising the context
    teaches the model to predict from part of it, as an n-gram model's backoff does; it keeps the gate table. On
    Tiny Shakespeare it hurt (d = 256, weight decay 0.1, p = 0.1: validation mixture 1.807 against 1.767 without,
    at 6,000 steps).
    """

    model_type = "scan_markov"
    renamed_fields = {"scan_backend": "backend", "context_length": "order"}

    vocab_size: int | None = None
    d_model: int = 128
    max_positions: int = 1024
    context_mode: str = "markov"
    order: int | None = None
    ffn_mult: int = 4
    dropout: float = 0.0
    decoder_dropout: float | None = None
    window_positions: str = "start"
    context_dropout: float = 0.0
    initializer_range: float = 0.02
    backend: str = "auto"

    def __post_init__(self) -> None:
        def fail(field: str, message: str) -> NoReturn:
            raise ValueError(f"ScanMarkovConfig.{field}={getattr(self, field)!r}: {message}")

        if self.vocab_size is None:
            fail("vocab_size", "is required (a positive integer)")
        for field in ("vocab_size", "d_model", "max_positions", "ffn_mult"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                fail(field, "must be a positive integer")
        if self.context_mode not in CONTEXT_MODES:
            fail("context_mode", f"must be one of {CONTEXT_MODES}")
        if self.context_mode == "markov":
            if self.order is None:
                fail("order", "is required with context_mode='markov' (the window size n)")
            check_order(self.order, self.max_positions, "ScanMarkovConfig.order")
        elif self.order is not None:
            fail("order", "is only meaningful with context_mode='markov'; leave it None")
        if self.window_positions not in WINDOW_POSITIONS:
            fail("window_positions", f"must be one of {WINDOW_POSITIONS}")
        if self.context_mode == "recurrent" and self.window_positions != "start":
            fail("window_positions", "is only meaningful with context_mode='markov' (recurrent positions are absolute)")
        for field in ("dropout", "decoder_dropout", "context_dropout"):
            value = getattr(self, field)
            if value is not None and not 0.0 <= value < 1.0:
                fail(field, "must lie in [0, 1)")
        if not 0 < self.initializer_range < float("inf"):  # inf draws inf weights: a nan loss at the first step
            fail("initializer_range", "must be a finite positive number")
        if self.backend not in BACKENDS:
            fail("backend", f"must be one of {BACKENDS}")

    @property
    def positions_end(self) -> int | None:
        """The longest sequence the model reads: ``max_positions`` in recurrent mode; None in markov mode, where the
        positions number each window of ``order`` tokens and a sequence may run on."""
        return self.max_positions if self.context_mode == "recurrent" else None


def check_order(value: object, max_positions: int, name: str) -> None:
    """ValueError naming ``name`` unless ``value`` is an integer in [1, max_positions]: a window of n tokens uses
    positions 0..n-1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= max_positions:
        raise ValueError(f"{name}={value!r}: must be an integer in [1, max_positions={max_positions}]")

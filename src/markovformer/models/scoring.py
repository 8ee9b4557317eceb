"""How validation and ``eval`` score a model that predicts tokens (a causal LM, the translator): from the states its
head reads, the head applied to slices of rows (``ops.losses.sliced_cross_entropy``), so that its logits (B, T, V),
a batch's largest tensor at a large vocabulary, never exist whole. The numbers are its forward's loss and logits'
argmax."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import Tensor

from markovformer.ops.losses import check_labels, sliced_next_token_cross_entropy


@dataclass
class Score:
    """What scoring a batch gives: ``loss``, forward's (the mean cross-entropy over the scored tokens);
    ``most_likely`` (B, T), each position's most likely token (a causal LM's next), when asked for (else None)."""

    loss: Tensor
    most_likely: Tensor | None = None


class ScoresOutsideForward:
    """Mixed into a model whose scoring reads the states of ``scoring_states``, a method of its own that forward
    does not call: ``compile`` compiles it too (trainer.compile), and ``states_to_score`` calls it."""

    scoring_states = "final_states"
    _compiled_scoring_states = None  # set by ``compile``: the class's function, called with the model
    _scoring_signature: inspect.Signature  # set by ``compile``: that function's, which binds the values checked

    def compile(self, *args, **kwargs) -> None:
        """``nn.Module.compile`` (forward, which training calls) and ``scoring_states``: the function of the class,
        given the model at each call, not a bound method that a copy of the model would share."""
        super().compile(*args, **kwargs)
        function = getattr(type(self), self.scoring_states)
        self._compiled_scoring_states = torch.compile(function, *args, **kwargs)
        self._scoring_signature = inspect.signature(function)

    def states_to_score(self, *args, **kwargs) -> Tensor:
        """``scoring_states`` of these arguments, without a gradient; compiled when the model is (their values
        checked first, as by a compiled forward: ``PreTrainedModel.compile``)."""
        compiled = self._compiled_scoring_states
        with torch.no_grad():
            if compiled is None:
                return getattr(self, self.scoring_states)(*args, **kwargs)
            self.check_input_values(self._scoring_signature.bind_partial(self, *args, **kwargs).arguments)
            return compiled(self, *args, **kwargs)


class ScoredInSlices(ScoresOutsideForward):
    """Mixed into a causal LM head, which gives ``final_states`` (what its head reads) and ``logits_from_states``
    (its head)."""

    def final_states(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                     position_ids: Tensor | None = None) -> Tensor:  # fmt: skip
        """(B, T, D): the states whose ``logits_from_states`` are forward's logits of the same arguments (a head
        may add keyword options of its own, as Scan Markov's ``order``)."""
        raise NotImplementedError

    def logits_from_states(self, states: Tensor) -> Tensor:
        """The head: states (..., D) -> logits (..., V)."""
        raise NotImplementedError

    def next_token_score(self, input_ids: Tensor, labels: Tensor, attention_mask: Tensor | None = None,
                         position_ids: Tensor | None = None, most_likely: bool = False,
                         **options) -> Score:  # fmt: skip
        """Forward's loss of these arguments (``options``: a head's own, as ``order``), and with ``most_likely``
        its logits' argmax, without a gradient and without its logits: a slice of rows of them at a time."""
        states = self.states_to_score(input_ids, attention_mask, position_ids, **options)
        vocab_size = self.config.vocab_size
        check_labels(labels, vocab_size, shape=states.shape[:-1])  # before they are shifted
        return Score(*sliced_next_token_cross_entropy(states, self.logits_from_states, labels, vocab_size,
                                                               position_ids, most_likely))  # fmt: skip

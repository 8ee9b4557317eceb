"""The Markovian Transformer: an embedding, pre-norm blocks with per-layer attention kinds, a final norm, and the
causal LM head (the heads that classify: classifiers.py)."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from markovformer.layers.block import PreLNBlock
from markovformer.layers.ffn import build_ffn
from markovformer.layers.gru import build_injection
from markovformer.layers.markov_bias import MarkovBias, TransitionStrengths
from markovformer.layers.norm import build_norm
from markovformer.layers.position import sinusoidal_at, sinusoidal_positions
from markovformer.layers.random_feature_attention import recomputation
from markovformer.layers.registry import LayerSpec, build_layer
from markovformer.models.generation import GenerationMixin
from markovformer.models.inputs import check_input_values, check_is_tensor, check_not_empty, check_token_ids
from markovformer.models.markovian_transformer.config import MarkovianTransformerConfig
from markovformer.models.markovian_transformer.decoding import start_decoding
from markovformer.models.pretrained import PreTrainedModel, model_output
from markovformer.models.scoring import ScoredInSlices
from markovformer.ops.losses import next_token_cross_entropy
from markovformer.ops.padding import (
    check_attention_mask,
    is_right_padded,
    real_token_positions,
    right_padded,
)
from markovformer.ops.segments import Segments, check_position_ids


def _recomputed() -> tuple:
    """``checkpoint``'s contexts for a block's forward and for its recomputation in backward (``recomputation``)."""
    return nullcontext(), recomputation()


@model_output
class MarkovianTransformerOutput:
    """What every Markovian Transformer model returns; fields a model or call does not fill are None.
    ``gates`` (``return_gates=True``): per layer, direction -> order gates (B, H, T, K [+1 null slot]), None for a
    layer without gates; ``attentions`` (``return_weights=True``): per layer, the weights (B, H, T, T) each position
    mixes the values with, None for a mixer without them (docs/hugging-face.md says which are probabilities)."""

    logits: Tensor | None = None
    loss: Tensor | None = None
    last_hidden_state: Tensor | None = None  # (B, T, D), after the final norm
    gates: list[dict[str, Tensor] | None] | None = None  # per layer: direction -> (B, H, T, K [+1])
    attentions: list[Tensor | None] | None = None  # per layer: (B, H, T, T) probabilities
    state: dict | None = None  # the decoding state when one was passed: give it to the next call
    # (B, T) the mask the blocks read, which gates, attentions and last_hidden_state cover: with pooling='cls',
    # (B, T + 1) with the [CLS] vector's column (None when no mask was given)
    attention_mask: Tensor | None = None


class MarkovianTransformerPreTrainedModel(PreTrainedModel):
    config_class = MarkovianTransformerConfig
    config: MarkovianTransformerConfig  # the family's own fields, to a type checker (PreTrainedModel declares the base)

    @property
    def longest_input(self) -> int | None:
        """The most tokens one forward reads from position 0: ``max_positions`` with learned positions or a
        Linformer layer (generate re-runs the last that many past it), one fewer when a [CLS] vector takes the first
        position; None for positions without an end."""
        end = self.config.positions_end
        return None if end is None else end - int(getattr(self, "cls", None) is not None)

    def check_input_values(self, inputs: dict) -> None:
        config = self.config
        causal_lm = hasattr(self, "lm_head")  # a language model's labels: its next tokens
        check_input_values(inputs, config.vocab_size, config.vocab_size if causal_lm else config.num_labels,
                           config.max_positions if config.position == "learned" else None, causal_lm)  # fmt: skip

    def markov_biases(self) -> list[MarkovBias]:
        """The Markov biases in use, in layer order (a layer with no Markov head keeps an unused one: left out)."""
        return [module for module in self.modules() if isinstance(module, MarkovBias) and not module.unused]

    def regularization_loss(self) -> Tensor:
        """λ_ent · the gate entropy of the last forward pass + λ_T · Σ θ_T²; zero when both are 0. The entropy is
        each Markov layer's mean over heads and real tokens, summed over its directions and over the layers (not a
        mean over layers: 2 layers weigh twice 1); Σ θ_T² runs over every layer's and direction's θ."""
        config = self.config
        total = next(self.parameters()).new_zeros(())
        for bias in self.markov_biases():
            if config.gate_entropy_weight and bias.last_gate_entropy is not None:
                total = total + config.gate_entropy_weight * bias.last_gate_entropy
            if config.transition_penalty:
                total = total + config.transition_penalty * sum((theta**2).sum() for theta in bias.theta.values())
        return total

    def transition_strengths(self) -> list[TransitionStrengths]:
        """Per Markov layer, the effective strengths ``{"past": (H, K), "future": (H, K) or None}``, detached."""
        return [
            {"past": strengths["past"].detach().clone(),
             "future": None if strengths["future"] is None else strengths["future"].detach().clone()}
            for strengths in (bias.transitions() for bias in self.markov_biases())
        ]  # fmt: skip


class MarkovianTransformerModel(MarkovianTransformerPreTrainedModel):
    """The backbone: inputs -> (B, T, D) hidden states. Set ``gradient_checkpointing = True`` to recompute each
    block's activations in the backward pass instead of storing them (less memory, about one more forward)."""

    embed: nn.Embedding | nn.Linear  # of token ids, or of feature frames (input_dim)

    def __init__(self, config: MarkovianTransformerConfig) -> None:
        super().__init__(config)
        self.gradient_checkpointing = False
        if config.vocab_size is not None:
            self.embed = nn.Embedding(config.vocab_size, config.d_model)
        else:
            self.embed = nn.Linear(config.input_dim, config.d_model)
        self.position_embedding = (
            nn.Embedding(config.max_positions, config.d_model) if config.position == "learned" else None
        )
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(self._block(spec) for spec in config.layer_specs())
        self.final_norm = build_norm(config.norm, config.d_model, config.bias)
        self.init_weights()
        if config.init_scheme == "gpt2":
            self.scale_residual_projections()
        # whether ``forward(..., state=...)`` can continue a sequence: causal, and every block carries a state (its
        # kinds' declared ``supports_state``; Linformer's does not), resolved once
        self.decodes_incrementally = config.causal and all(block.supports_state for block in self.blocks)

    def scale_residual_projections(self) -> None:
        """GPT-2's init (as nanoGPT's): the projections that write into the residual stream (each block's
        ``attention.out_proj`` and ``ffn.down`` weights) redrawn with std initializer_range / sqrt(2 n_layers)."""
        std = self.config.initializer_range / (2 * self.config.n_layers) ** 0.5
        for block in self.blocks:
            for name, parameter in block.named_parameters():
                if name.endswith(("attention.out_proj.weight", "ffn.down.weight")):
                    nn.init.normal_(parameter, std=std)

    def _block(self, spec: LayerSpec) -> PreLNBlock:
        config = self.config
        attention = build_layer(spec, d_model=config.d_model, n_heads=config.n_heads, causal=config.causal,
                                rotary=config.position == "rotary", attention_bias=config.attention_bias)  # fmt: skip
        ffn = build_ffn(config.ffn, config.d_model, config.ffn_mult, config.dropout, config.bias)
        gru = build_injection(config.gru_kind, config.d_model, config.bidirectional) if config.gru else None
        return PreLNBlock(config.d_model, attention, ffn, gru, config.dropout, config.bias, config.norm)

    def embed_inputs(
        self, input_ids: Tensor | None = None, input_features: Tensor | None = None, start: int = 0,
        position_ids: Tensor | None = None, below_end: bool = False,
    ) -> Tensor:  # fmt: skip
        """Token ids (B, T) or feature frames (B, T, input_dim) at positions start.. (or ``position_ids`` (B, T))
        -> (B, T, D), with additive positions if any (``add_positions``)."""
        config = self.config
        if config.vocab_size is not None:
            if input_ids is None or input_features is not None:
                raise ValueError("this model reads token ids: pass input_ids (B, T), not input_features")
            check_token_ids(input_ids, config.vocab_size)
            hidden = self.embed(input_ids)
        else:
            if input_features is None or input_ids is not None:
                raise ValueError("this model reads feature frames: pass input_features (B, T, input_dim)")
            if input_features.dim() != 3 or input_features.shape[-1] != config.input_dim:
                raise ValueError(
                    f"input_features must be (B, T, {config.input_dim}); got shape {tuple(input_features.shape)}"
                )
            check_not_empty(input_features, "input_features")
            if not torch.isfinite(input_features).all():
                raise ValueError("input_features contain NaN or infinite values")
            hidden = self.embed(input_features.to(self.embed.weight.dtype))
        return self.add_positions(hidden, start, position_ids, below_end)

    def add_positions(self, hidden: Tensor, start: int = 0, position_ids: Tensor | None = None,
                      below_end: bool = False) -> Tensor:  # fmt: skip
        """Additive positions (sinusoidal or learned; rotary acts inside attention) of hidden (B, T, D) at
        positions start..start+T-1, or at ``position_ids`` (B, T) (packed documents: restarting at each one; a
        padded batch's, ``below_end`` when they are known to lie below start + T: no need to read them to check
        learned positions' bound, a host-device synchronisation per decoding step)."""
        end = start + hidden.shape[1]
        if position_ids is not None and self.config.position in ("sinusoidal", "learned"):
            if tuple(position_ids.shape) != tuple(hidden.shape[:2]):
                raise ValueError(f"position_ids must be (B, T) = {tuple(hidden.shape[:2])}; "
                                 f"got {tuple(position_ids.shape)}")  # fmt: skip
            if self.config.position == "sinusoidal":
                return hidden + sinusoidal_at(position_ids, self.config.d_model).to(hidden.dtype)
            if below_end and end > self.config.max_positions:  # the model's own positions: bounded by the length
                raise ValueError(f"sequence length {end} exceeds max_positions={self.config.max_positions}")
            if not below_end:
                check_position_ids(position_ids, self.config.max_positions)
            return hidden + self.position_embedding(position_ids)
        if self.config.position == "sinusoidal":
            table = sinusoidal_positions(hidden.shape[1], self.config.d_model, hidden.device, start=start)
            hidden = hidden + table.to(hidden.dtype)
        elif self.position_embedding is not None:
            if end > self.config.max_positions:
                raise ValueError(f"sequence length {end} exceeds max_positions={self.config.max_positions}")
            hidden = hidden + self.position_embedding(torch.arange(start, end, device=hidden.device))
        return hidden

    @staticmethod
    def given_inputs(input_ids: Tensor | None, input_features: Tensor | None, attention_mask: Tensor | None = None,
                     ) -> Tensor | None:  # fmt: skip
        """The inputs given (ids, else features; None when neither is), checked to be a tensor before their shape
        is read, as ``attention_mask`` is (the other checks are ``embed_inputs``' and ``check_attention_mask``'s)."""
        if attention_mask is not None:  # a list (a tokenizer's without return_tensors) failed on its .shape
            check_is_tensor(attention_mask, "attention_mask", "0 (padding) and 1 (real token)")
        if input_ids is not None:
            check_is_tensor(input_ids, "input_ids")
            return input_ids
        if input_features is not None:
            check_is_tensor(input_features, "input_features", "feature frames")
        return input_features

    def positions(self, shape: torch.Size, attention_mask: Tensor | None, state: dict | None = None,
                  ) -> Tensor | None:  # fmt: skip
        """The positions (B, T) of inputs of ``shape`` (B, T) where padding would move them: each token's place
        among its row's real tokens (``real_token_positions``), after those a decoding ``state`` has counted, so a
        row padded on the left is embedded and rotated as it would be alone. None where nothing moves (positions
        then run 0.., or on from the state's length: the tables' fast path): no positions, or no row with padding
        before a real token (with a state: no padding at all, which the next call's tokens would follow) and no
        state that has counted one. The state counts each row's real tokens (``real_tokens`` (B,)) from the first
        such mask on."""
        counting = state is not None and "real_tokens" in state
        if self.config.position == "none" or (attention_mask is None and not counting):
            return None
        if attention_mask is None:  # a counting state's inputs, all real (a decoding step): nothing to read back
            seen = state["real_tokens"]
            state["real_tokens"] = seen + shape[1]
            return seen[:, None] + torch.arange(shape[1], device=seen.device)
        if tuple(attention_mask.shape) != tuple(shape):  # (its values are checked with the blocks' mask)
            raise ValueError(f"attention_mask must be (B, T) = {tuple(shape)}; got {tuple(attention_mask.shape)}")
        if state is None and torch.compiler.is_compiling():  # the choice below, by tensor ops: no read back
            in_order = torch.arange(shape[1], device=attention_mask.device).expand(shape)
            return torch.where(right_padded(attention_mask), in_order, real_token_positions(attention_mask))
        # a state's call padded only at its end (a prompt fed in parts whose padded rows are padding so far) still
        # moves the real tokens of the calls after it
        moves = not bool(attention_mask.bool().all()) if state is not None else not is_right_padded(attention_mask)
        if not counting and not moves:
            return None
        if state is None:
            return real_token_positions(attention_mask)
        seen = state.get("real_tokens", state.get("length", 0))
        state["real_tokens"] = seen + attention_mask.long().sum(-1)
        return real_token_positions(attention_mask, seen)

    def encode(
        self,
        hidden: Tensor,
        attention_mask: Tensor | None = None,
        return_gates: bool = False,
        return_weights: bool = False,
        layer_states: list[dict] | None = None,
        position_ids: Tensor | None = None,
        positions: Tensor | None = None,
    ) -> MarkovianTransformerOutput:
        """Run the blocks over embedded inputs (B, T, D), each with its decoding state when given. ``position_ids``
        (B, T): packed documents, positions restarting at 0 at each; no layer lets a token see another document.
        ``positions`` (B, T): the rotary positions of a padded batch (from ``positions()``)."""
        if attention_mask is not None:
            check_attention_mask(attention_mask, hidden.shape[:2])
        segments = None
        if position_ids is not None:
            if tuple(position_ids.shape) != tuple(hidden.shape[:2]):
                raise ValueError(f"position_ids must be (B, T) = {tuple(hidden.shape[:2])}; "
                                 f"got {tuple(position_ids.shape)}")  # fmt: skip
            segments = Segments.from_positions(position_ids.to(hidden.device), attention_mask)
        packed = {} if segments is None else {"segments": segments}
        if positions is not None:
            packed["position_ids"] = positions
        if self.training and self.dropout.p:
            hidden = self.dropout(hidden)
        gates, attentions = [], []
        for index, block in enumerate(self.blocks):
            if layer_states is not None:
                result = block(hidden, attention_mask, return_gates, return_weights, state=layer_states[index],
                               position_ids=positions)  # fmt: skip
            elif self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                result = checkpoint(block, hidden, attention_mask, return_gates, return_weights, use_reentrant=False,
                                    context_fn=_recomputed, **packed)  # fmt: skip
            else:
                result = block(hidden, attention_mask, return_gates, return_weights, **packed)
            hidden = result.output
            gates.append(result.gates or None)
            attentions.append(result.weights)
        return MarkovianTransformerOutput(
            last_hidden_state=self.final_norm(hidden),
            gates=gates if return_gates else None,
            attentions=attentions if return_weights else None,
            attention_mask=attention_mask,
        )

    def forward(
        self,
        input_ids: Tensor | None = None,
        input_features: Tensor | None = None,
        attention_mask: Tensor | None = None,
        return_gates: bool = False,
        return_weights: bool = False,
        state: dict | None = None,
        position_ids: Tensor | None = None,
    ) -> MarkovianTransformerOutput:
        """Token ids (B, T) or feature frames (B, T, input_dim), ``attention_mask`` (B, T), 1 = real token ->
        ``MarkovianTransformerOutput`` with ``last_hidden_state`` (B, T, D) (and ``gates``, ``attentions`` when
        asked). ``state``: a decoding state ({} to start one), read and updated in place and returned in the output:
        the inputs continue the positions it has seen, and ``attention_mask`` covers the new inputs only.
        ``position_ids`` (B, T): packed documents (the Hugging Face convention: positions restart at 0 at each
        document; a new document wherever a position is not its predecessor's plus one). Every layer keeps each
        document to itself and positions restart, so each document's outputs equal those of it run alone."""
        inputs = self.given_inputs(input_ids, input_features, attention_mask)
        if state is None:
            positions = None
            if position_ids is None and inputs is not None:
                positions = self.positions(inputs.shape[:2], attention_mask)
            hidden = self.embed_inputs(input_ids, input_features, position_ids=position_ids if positions is None
                                       else positions, below_end=positions is not None)  # fmt: skip
            return self.encode(hidden, attention_mask, return_gates, return_weights, position_ids=position_ids,
                               positions=positions)  # fmt: skip
        if position_ids is not None:
            raise ValueError("position_ids (packed documents) cannot be combined with a decoding state")
        if not self.decodes_incrementally:
            raise ValueError(f"this model ({sorted(set(self.config.layer_kinds()))} layers, causal="
                             f"{self.config.causal}) cannot decode incrementally")  # fmt: skip
        start = state.get("length", 0)
        layer_states = state.setdefault("layers", [{} for _ in self.blocks])
        positions = None if inputs is None else self.positions(inputs.shape[:2], attention_mask, state)
        hidden = self.embed_inputs(input_ids, input_features, start=start, position_ids=positions, below_end=True)
        # a cache or running sums hold no weights over the positions they stand for: a continued step's are None
        output = self.encode(hidden, attention_mask, return_gates, return_weights and not start, layer_states,
                             positions=positions)  # fmt: skip
        if return_weights and start:
            output.attentions = [None] * len(self.blocks)
        state["length"] = start + hidden.shape[1]
        output.state = state
        return output


class _WithBackbone(MarkovianTransformerPreTrainedModel):
    def __init__(self, config: MarkovianTransformerConfig) -> None:
        super().__init__(config)
        self.model = MarkovianTransformerModel(config)

    def vocabulary_modules(self) -> tuple[str, ...]:
        embed = ("model.embed",) if self.config.vocab_size is not None else ()  # real vectors: through a Linear
        return (*embed, "lm_head") if hasattr(self, "lm_head") else embed  # a language model's output per token id

    def _encode(self, input_ids, input_features, attention_mask, return_gates, return_weights, state=None,
                position_ids=None):  # fmt: skip
        return self.model(input_ids, input_features, attention_mask, return_gates, return_weights, state=state,
                          position_ids=position_ids)  # fmt: skip


class MarkovianTransformerForCausalLM(ScoredInSlices, GenerationMixin, _WithBackbone):
    """Next-token prediction. ``labels`` are the inputs (shifted inside); label -100 is ignored. ``forward(...,
    state=s)`` continues the sequence held by the decoding state s ({} to start); ``generate`` decodes so, one
    token per step, through every layer's own state (rolling key/value caches of W + 1 entries for local
    attention, growing ones for global attention and Hyena's long convolutions, running sums or recurrent states
    for the others), and re-runs the prefix only when learned positions would run out."""

    def __init__(self, config: MarkovianTransformerConfig) -> None:
        if config.vocab_size is None or not config.causal:
            raise ValueError("MarkovianTransformerForCausalLM needs vocab_size and causal=True")
        super().__init__(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.init_weights(self.lm_head)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed.weight

    def forward(self, input_ids, attention_mask=None, labels=None, return_gates=False, return_weights=False,
                state=None, position_ids=None, logits_to_keep: int = 0):  # fmt: skip
        """``position_ids``: packed documents (see ``MarkovianTransformerModel.forward``); the first token of each
        document is not scored (its prediction would read the previous document). ``logits_to_keep``: the logits
        of the last n positions only (0: all), as in ``transformers``; without labels only those are projected
        (the head is B x V per position, the largest product of a large vocabulary), the loss reads them all."""
        if labels is not None and tuple(labels.shape) != tuple(input_ids.shape):  # the loss's own error names
            # the flattened, shifted sizes ("Expected input batch_size (8) to match target batch_size (6)")
            raise ValueError(f"labels must be (B, T) = {tuple(input_ids.shape)}, got {tuple(labels.shape)}")
        if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or logits_to_keep < 0:
            raise ValueError(f"logits_to_keep={logits_to_keep!r}: must be an integer >= 0 (0: every position)")
        output = self._encode(input_ids, None, attention_mask, return_gates, return_weights, state, position_ids)
        hidden = output.last_hidden_state
        output.logits = self.logits_from_states(hidden if labels is not None else hidden[:, -logits_to_keep:])
        if labels is not None:
            output.loss = next_token_cross_entropy(output.logits, labels, position_ids)
            output.logits = output.logits[:, -logits_to_keep:]
        return output

    def final_states(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                     position_ids: Tensor | None = None) -> Tensor:  # fmt: skip
        """(B, T, D): the backbone's last hidden states, after the final norm."""
        return self._encode(input_ids, None, attention_mask, False, False, position_ids=position_ids).last_hidden_state

    def logits_from_states(self, states: Tensor) -> Tensor:
        return self.lm_head(states)

    def start_decoding(self, input_ids: Tensor, attention_mask: Tensor | None, max_new_tokens: int):
        return start_decoding(self, input_ids, attention_mask, max_new_tokens)

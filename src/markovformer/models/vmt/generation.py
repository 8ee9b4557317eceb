"""How the VMT writes: ``GenerationMixin.generate`` over the latent chain (``VMTGeneration``), mixed into
``VariationalMarkovTransformer``, whose posterior (``_observations``, ``_context``, ``_infer``, ``_check_carry``)
and generative densities (``prior``, ``transition``, ``emission``) it reads."""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.models.generation import GenerationConfig, GenerationMixin, decoding_loop
from markovformer.models.inputs import check_not_empty
from markovformer.models.vmt.densities import standard_normal
from markovformer.ops.padding import check_attention_mask


class VMTGeneration(GenerationMixin):
    """``generate`` for the VMT (``generate_from`` says how it writes); a mixin of ``VariationalMarkovTransformer``."""

    generation_inputs = ("carry",)
    samples_from_empty_prompt = True  # x_1 ~ P(x_1), y_1 ~ P(y | x_1): no start token to invent
    compiles_step = False  # its steps are the latent chain's, outside the one decoding step GenerationMixin compiles

    def check_generation_inputs(self, input_ids: Tensor, attention_mask: Tensor | None) -> None:
        """ValueError for an empty batch or a padded prompt."""
        check_not_empty(input_ids, "input_ids", positions=False)  # a prompt may be empty, a batch may not
        if attention_mask is not None:
            check_attention_mask(attention_mask, input_ids.shape[:2])
            if not bool(attention_mask.bool().all()):
                raise ValueError("the VMT generates from unpadded prompts: give rows of equal length")

    def generate_from(
        self, input_ids: Tensor, attention_mask: Tensor | None, config: GenerationConfig,
        generator: torch.Generator | None, carry: Tensor | None = None,
    ) -> Tensor:  # fmt: skip
        """What ``generate`` runs: read the prompt ``input_ids`` (token ids (B, n) or, for a VMT over real vectors,
        features (B, n, F); n may be 0; unpadded) with the posterior, ``window`` tokens at a time with the latent
        carried between (posterior samples from ``generator`` when sampling, its zero-noise path when greedy;
        ``carry=`` a previous latent), then write: x_{k+1} ~ P(x | x_k), y_{k+1} ~ P(y | x_{k+1}) (x_1 from P(x_1),
        or the transition from ``carry``, when there is no prompt). Greedy follows the transition means and takes
        each emission's argmax (its mean for real vectors); sampling draws both. The written tokens never feed back
        (the latent chain does not read y). Returns (B, n + new) or (B, n + new, F)."""
        if not self.tokens:  # it writes each vector from its emission; no token is chosen, none ends a row
            given = {name: getattr(config, name) for name in ("top_k", "top_p", "eos_token_id", "pad_token_id",
                                                              "suppress_tokens")}  # fmt: skip
            name, value = next(((name, value) for name, value in given.items() if value is not None), (None, None))
            if name is not None:
                raise ValueError(f"{name}={value!r}: this VMT writes real vectors (input_dim="
                                 f"{self.config.input_dim}), drawn whole from its emission; {name} applies to "
                                 "token ids only")  # fmt: skip
        batch = input_ids.shape[0]
        states = [self._read_prompt(input_ids, carry, generator, zero_noise=not config.do_sample)]

        def advance() -> Tensor:
            """The next latent (B, dx): a draw, or the mean, of P(x_1) or P(x | x_k)."""
            if states[0] is None:
                mean, std = (part.expand(batch, -1) for part in self.prior())
            else:
                mean, std = self.transition(states[0], self.transition.prepare())
            states[0] = mean + std * standard_normal(mean.shape, mean, generator) if config.do_sample else mean
            return states[0]

        if not self.tokens:
            pieces = [input_ids]
            for _ in range(config.max_new_tokens):
                temperature = config.temperature if config.do_sample else 0.0
                written = self.emission.sample(advance(), generator, temperature)
                pieces.append(written[:, None].to(input_ids.dtype))
            return torch.cat(pieces, dim=1)
        if config.max_new_tokens == 0:
            return input_ids
        return decoding_loop(input_ids, self.emission.logits(advance()), lambda tokens: self.emission.logits(advance()),
                             config, generator)  # fmt: skip

    @torch.no_grad()
    def _read_prompt(
        self, input_ids: Tensor, carry: Tensor | None, generator: torch.Generator | None, zero_noise: bool
    ) -> Tensor | None:
        """The latent (B, dx) at the prompt's last token (``carry`` when the prompt is empty), read ``window`` tokens
        at a time with the latent carried between: posterior draws from ``generator``, or (``zero_noise``, greedy)
        the posterior's zero-noise path, which depends on neither a seed nor the other rows of the batch."""
        carry = self._check_carry(carry, None, input_ids.shape[0], input_ids.device)[0]
        for start in range(0, input_ids.shape[1], self.config.window):
            y, mask, lengths = self._observations(input_ids[:, start : start + self.config.window], None)
            carried = self._check_carry(carry, None, y.shape[0], y.device)[1]
            paths = self._infer(y, mask, self._context(y, lengths), carry, carried, 1, generator, zero_noise)
            carry = paths.latents[0, :, -1]
        return carry

"""The Variational Markov Transformer: a deep HMM with continuous latents trained by the ELBO over windows,
the last latent carried from window to window (truncated BPTT).

    P(y, x) = P(x_1) P(y_1 | x_1) Π_k P(x_{k+1} | x_k) P(y_{k+1} | x_{k+1})
    Q(x | y) = Q(x_1 | h_1) Π_k Q(x_{k+1} | x_k, h_{k+1}),   h_k = f(y_n, ..., y_k)

h comes from a causal Transformer run over the window read backwards (each row reversed within its own length, so
right padding stays at the end and never reaches a real position), so h_k sees y_{k..n} and nothing before. Latents
are drawn one after the other, x_1 → x_n, with reparameterised noise; the generative densities then score the whole
path in parallel. With a carried latent x_0 from the window before, x_1 comes from the transition prior
P(x_1 | x_0) and the step posterior Q(x_1 | x_0, h_1) instead of P(x_1) and Q(x_1 | h_1) (per row: a batch may mix
rows that continue a document with rows that start one, as the text's Algorithm 1 does).

The posterior networks also read log(n - k + 1), the number of tokens y_k..y_n behind h_k (the text's T). By default
(``residual_posterior``) each posterior step is an offset from that step's prior, so it starts equal to the prior.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from markovformer.layers.block import PreLNBlock
from markovformer.layers.ffn import build_ffn
from markovformer.layers.registry import build_attention
from markovformer.models.inputs import check_id_tensor, check_not_empty, check_rows_have_tokens, check_vocabulary
from markovformer.models.pretrained import PreTrainedModel
from markovformer.models.vmt.config import VMTConfig
from markovformer.models.vmt.densities import (
    CategoricalEmission,
    ConditionalGaussian,
    GaussianEmission,
    LearnedGaussian,
    gaussian_kl,
    gaussian_log_prob,
    standard_normal,
)
from markovformer.models.vmt.generation import VMTGeneration
from markovformer.models.vmt.outputs import SampledPaths, VMTBound, VMTElbo, VMTOutput
from markovformer.models.vmt.posterior import PosteriorSample, build_posterior
from markovformer.ops.padding import check_attention_mask, reverse_within_lengths, right_padded_lengths


def resampling_probabilities(log_weights: Tensor) -> Tensor:
    """(s, B) importance log-weights -> (B, s) probabilities for drawing the carried latent. A sample whose weight is
    not finite (a latent far out in a Gaussian tail can make inf - inf) is never drawn; a row with no finite weight
    draws uniformly, so one bad row never stops an evaluation (its bound still reports the non-finite value)."""
    usable = torch.isfinite(log_weights)
    safe = log_weights.double().masked_fill(~usable, float("-inf"))
    safe[:, ~usable.any(0)] = 0.0
    return safe.T.softmax(-1)


class VariationalMarkovTransformer(VMTGeneration, PreTrainedModel):
    """The VMT: ``elbo``, ``iw_bound``, ``forward`` (the training loss) and ``generate`` (``VMTGeneration``); see the
    module docstring."""

    config_class = VMTConfig
    config: VMTConfig  # the family's own fields, to a type checker (PreTrainedModel declares the base)
    emission: CategoricalEmission | GaussianEmission  # of token ids, or of real vectors (input_dim)

    def __init__(self, config: VMTConfig) -> None:
        super().__init__(config)
        width, latent, hidden = config.d_model, config.latent_dim, config.hidden_dim
        self.tokens = config.vocab_size is not None
        self.embed = nn.Embedding(config.vocab_size, width) if self.tokens else nn.Linear(config.input_dim, width)
        self.blocks = nn.ModuleList(
            PreLNBlock(
                width,
                build_attention(
                    "softmax", d_model=width, n_heads=config.n_heads, causal=True, rotary=True, dropout=config.dropout
                ),
                build_ffn("gelu", width, config.ffn_mult, config.dropout),
                None,
                config.dropout,
            )  # fmt: skip
            for _ in range(config.n_layers)
        )
        self.final_norm = nn.LayerNorm(width)
        context = width + 1  # h_k and log(n - k + 1)
        self.prior = LearnedGaussian(latent)
        self.transition = ConditionalGaussian(latent, 0, latent, hidden)
        if self.tokens:
            self.emission = CategoricalEmission(latent, config.vocab_size, hidden)
        else:
            self.emission = GaussianEmission(latent, config.input_dim, hidden)
        kind, layers, residual = config.posterior, config.flow_layers, config.residual_posterior
        self.posterior_init = build_posterior(kind, 0, context, latent, hidden, layers, residual)
        self.posterior_step = build_posterior(kind, latent, context, latent, hidden, layers, residual)
        # Q_skip(x_{k+t} | x_k, h_{k+1}, t): trained by Loss_skip only (the text's reading acceleration)
        self.posterior_skip = (
            build_posterior(kind, latent, context + 1, latent, hidden, layers) if config.skip_length >= 2 else None
        )

    def vocabulary_modules(self) -> tuple[str, ...]:
        if not self.tokens:  # real vectors come in through a Linear and are emitted by a Gaussian
            return ()
        return ("embed", *(f"emission.{name}" for name in self.emission.vocabulary_modules))

    # ----------------------------------------------------------------------------------------------- inputs

    def _observations(self, y: Tensor, attention_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Check y and the mask; returns (y with padding set to 0, mask (B, T) bool, lengths (B,))."""
        config = self.config
        if self.tokens:
            check_id_tensor(y, "input_ids")
        elif y.dim() != 3 or y.shape[-1] != config.input_dim or not y.is_floating_point():
            raise ValueError(f"input_features must be float (B, T, {config.input_dim}); got {y.dtype} "
                             f"{tuple(y.shape)}")  # fmt: skip
        else:
            check_not_empty(y, "input_features")
        if attention_mask is None:
            mask = torch.ones(y.shape[:2], dtype=torch.bool, device=y.device)
        else:
            check_attention_mask(attention_mask, y.shape[:2])
            right_padded_lengths(attention_mask, "VariationalMarkovTransformer")
            mask = attention_mask.bool()
        check_rows_have_tokens(mask, "attention_mask")
        lengths = mask.long().sum(-1)
        if self.tokens:
            check_vocabulary(y[mask], config.vocab_size, "input_ids")  # padding may hold any id
            return y.masked_fill(~mask, 0), mask, lengths
        if not bool(torch.isfinite(y[mask]).all()):
            raise ValueError("input_features hold NaN or infinite values at real positions")
        return y.masked_fill(~mask[..., None], 0.0).to(self.embed.weight.dtype), mask, lengths

    def _check_carry(
        self, carry: Tensor | None, carry_mask: Tensor | None, batch: int, device: torch.device,
        paths: int | None = None,
    ) -> tuple[Tensor | None, Tensor]:  # fmt: skip
        """(carry detached in the model's dtype, or None when no row has one; carried rows (B,) bool). With
        ``paths``, the carry may also hold one latent per path: (paths, B, latent_dim)."""
        if carry is None:
            if carry_mask is not None:
                raise ValueError("carry_mask needs a carry (B, latent_dim) to say which of its rows are used")
            return None, torch.zeros(batch, dtype=torch.bool, device=device)
        if tuple(carry.shape) != (batch, self.config.latent_dim) and (
                paths is None or tuple(carry.shape) != (paths, batch, self.config.latent_dim)):  # fmt: skip
            per_path = "" if paths is None else f" or (K, B, latent_dim) = {(paths, batch, self.config.latent_dim)}"
            raise ValueError(f"carry must be (B, latent_dim) = {(batch, self.config.latent_dim)}{per_path}; got "
                             f"{tuple(carry.shape)}")  # fmt: skip
        if carry_mask is None:
            carried = torch.ones(batch, dtype=torch.bool, device=device)
        elif tuple(carry_mask.shape) != (batch,):
            raise ValueError(f"carry_mask must be (B,) = ({batch},); got {tuple(carry_mask.shape)}")
        else:
            carried = carry_mask.to(device).bool()
        if not bool(torch.isfinite(carry[..., carried, :]).all()):
            raise ValueError("carry holds NaN or infinite values in a carried row")
        if not bool(carried.any()):
            return None, carried
        carry = torch.where(carried[:, None], carry.detach(), torch.zeros((), dtype=carry.dtype, device=device))
        return carry.to(self.embed.weight.dtype), carried

    # ---------------------------------------------------------------------------------------------- encoder

    def _encode(self, y: Tensor, lengths: Tensor) -> Tensor:
        """h (B, T, D): h[b, k] summarises y[b, k:lengths[b]] (the reversed window, causally)."""
        hidden = reverse_within_lengths(self.embed(y), lengths)
        for block in self.blocks:
            hidden = block(hidden).output
        return reverse_within_lengths(self.final_norm(hidden), lengths)

    def encode(self, y: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """The posterior features h (B, T, d_model) of a window y (token ids (B, T) or features (B, T, F)): h_k
        depends on y_k..y_n of its row only. Positions past a row's length hold unused values."""
        y, _, lengths = self._observations(y, attention_mask)
        return self._encode(y, lengths)

    def _context(self, y: Tensor, lengths: Tensor) -> Tensor:
        """(B, T, D + 1): h_k and log(n - k + 1), the number of tokens h_k has read."""
        h = self._encode(y, lengths)
        remaining = lengths[:, None] - torch.arange(y.shape[1], device=y.device)[None]
        return torch.cat([h, remaining.clamp_min(1).to(h.dtype).log()[..., None]], dim=-1)

    # -------------------------------------------------------------------------------------------- inference

    def _infer(
        self, y: Tensor, mask: Tensor, context: Tensor, carry: Tensor | None, carried: Tensor, num_samples: int,
        generator: torch.Generator | None, zero_noise: bool = False,
    ) -> SampledPaths:  # fmt: skip
        """Draw ``num_samples`` latent paths x_1 → x_T from Q and score them under P and Q. Rows with ``carried``
        start from the carry (Q(x_1 | x_0, h_1), P(x_1 | x_0)): one x_0 (B, dx) for every path, or each path its
        own (num_samples, B, dx); the other rows from Q(x_1 | h_1) and P(x_1).
        ``zero_noise``: the path Q gives each step's zero noise (its means for a Gaussian posterior), no draw."""
        batch, length = mask.shape
        latent = self.config.latent_dim
        all_carried = bool(carried.all())
        step_prepared = self.posterior_step.prepare(context)
        init_prepared = None if all_carried else self.posterior_init.prepare(context[:, 0])
        shape = (num_samples, batch, latent)
        prior = tuple(part.expand(shape) for part in self.prior())
        draws: list[PosteriorSample] = []
        priors = []
        for k in range(length):
            # one draw per step: the noise of position k never depends on the window's length (padding is free)
            noise = context.new_zeros(shape) if zero_noise else standard_normal(shape, context, generator)
            if k > 0 or carry is not None:
                previous = draws[-1].value if k > 0 else carry.expand(shape)
                step_prior = self.transition(previous, self.transition.prepare())  # P(x_k | x_{k-1})
                step_context = [part[:, k] for part in step_prepared]
                draw = self.posterior_step.sample(previous, step_context, noise, step_prior)
            if k == 0 and not all_carried:
                first = self.posterior_init.sample(None, init_prepared, noise, prior)
                if carry is not None:  # a mixed batch: each row takes its own start
                    first = type(first)(*(torch.where(carried[:, None] if new.dim() == 3 else carried, new, old)
                                          for new, old in zip(draw, first, strict=True)))  # fmt: skip
                    step_prior = tuple(torch.where(carried[:, None], new, old)
                                       for new, old in zip(step_prior, prior, strict=True))  # fmt: skip
                else:
                    step_prior = prior
                draw = first
            draws.append(draw)
            priors.append(step_prior)
        latents = torch.stack([draw.value for draw in draws], dim=2)  # (S, B, T, dx)
        log_q = torch.stack([draw.log_prob for draw in draws], dim=2)
        p_mean = torch.stack([mean for mean, _ in priors], dim=2)
        p_std = torch.stack([std for _, std in priors], dim=2)
        log_p_x = gaussian_log_prob(latents, p_mean, p_std)
        if self.config.posterior == "gaussian":
            q_mean = torch.stack([draw.mean for draw in draws], dim=2)
            q_std = torch.stack([draw.std for draw in draws], dim=2)
            kl = gaussian_kl(q_mean, q_std, p_mean, p_std)
        else:
            kl = log_q - log_p_x  # a flow has no closed-form KL: the one-sample estimate
        reconstruction = self.emission.log_prob(y, latents)

        def real(values: Tensor) -> Tensor:
            return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))

        return SampledPaths(latents, real(log_q), real(log_p_x), real(kl), real(reconstruction))

    def _carry_positions(self, lengths: Tensor, carry_index: int | None) -> Tensor:
        """(B,) window positions whose latent is carried: ``carry_index`` (0-based), or each row's last real token."""
        if carry_index is None:
            return lengths - 1
        if isinstance(carry_index, bool) or not isinstance(carry_index, int) or carry_index < 0:
            raise ValueError(f"carry_index={carry_index!r}: must be a non-negative window position")
        return lengths.clamp_max(carry_index + 1) - 1

    def _auxiliary_losses(
        self, paths: SampledPaths, context: Tensor, mask: Tensor, lengths: Tensor, carried: Tensor, skips: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(Loss_init, Loss_prior, Loss_skip), nats. The drawn latents are detached: these terms train their own
        density (and, through h, the encoder) toward the path the ELBO chose, never the path toward them."""
        latents = paths.latents.detach()
        samples, batch, length, latent = latents.shape
        zero = latents.new_zeros(())
        prior_log = torch.where(mask, self.prior.log_prob(latents), zero)
        loss_prior = -prior_log.sum() / (samples * mask.sum())
        loss_init = zero
        if bool(carried.any()):  # per carried row
            init_prepared = self.posterior_init.prepare(context[:, 0])
            anchor = tuple(part.detach() for part in self.prior())  # Loss_init trains Q(x_1 | h_1), not P(x_1)
            log_q = self.posterior_init.log_prob(latents[:, :, 0], None, init_prepared, anchor)
            loss_init = -torch.where(carried, log_q, zero).sum() / (samples * carried.sum())
        loss_skip = zero
        if skips is not None:
            source = torch.arange(length, device=mask.device)[None]
            target = source + skips[:, None]  # (B, T): x_{k+t} for x_k
            valid = target < lengths[:, None]
            if bool(valid.any()):
                following = (source + 1).clamp_max(length - 1).expand(batch, length)  # h_{k+1}
                skip_context = torch.cat([
                    context.gather(1, following[..., None].expand(-1, -1, context.shape[-1])),
                    skips.to(context.dtype).log()[:, None, None].expand(batch, length, 1),
                ], dim=-1)  # fmt: skip
                prepared = self.posterior_skip.prepare(skip_context)
                index = target.clamp_max(length - 1)[None, ..., None].expand(samples, -1, -1, latent)
                log_q = self.posterior_skip.log_prob(latents.gather(2, index), latents, prepared)
                loss_skip = -torch.where(valid, log_q, zero).sum() / (samples * valid.sum())
        return loss_init, loss_prior, loss_skip

    def elbo(
        self,
        y: Tensor,
        attention_mask: Tensor | None = None,
        carry: Tensor | None = None,
        num_samples: int = 1,
        generator: torch.Generator | None = None,
        carry_index: int | None = None,
        carry_mask: Tensor | None = None,
    ) -> VMTElbo:
        """The ELBO of windows y (token ids (B, T) or features (B, T, F)), right-padded by ``attention_mask``.

        ``carry`` (B, latent_dim): the latent before the window (from the window before), or None to start from
        P(x_1). ``num_samples``: posterior paths averaged. ``generator``: the noise (the global generator when None).
        ``carry_index``: the window position whose latent is returned as ``carry`` (default: each row's last real
        token; with half-window overlap, the last position of the first half). ``carry_mask`` (B,): which rows
        use their carry (the text's Algorithm 1 mixes rows that continue a document with rows that start one);
        default all of them.

        Chained over the windows of a document, each window's carry drawn from the one before, the summed ELBOs are
        the ELBO of the whole document under the chained posterior: a lower bound on its log-likelihood.
        """
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples={num_samples!r}: must be a positive integer")
        y, mask, lengths = self._observations(y, attention_mask)
        carry, carried = self._check_carry(carry, carry_mask, y.shape[0], y.device)
        skips = None
        if self.posterior_skip is not None:  # drawn before the path so padding never shifts the noise
            device = generator.device if generator is not None else y.device
            skips = torch.randint(2, self.config.skip_length + 1, (y.shape[0],), generator=generator, device=device)
            skips = skips.to(y.device)
        context = self._context(y, lengths)
        paths = self._infer(y, mask, context, carry, carried, num_samples, generator)
        loss_init, loss_prior, loss_skip = self._auxiliary_losses(paths, context, mask, lengths, carried, skips)
        tokens = int(lengths.sum())
        reconstruction_terms, kl_terms = paths.reconstruction.mean(0), paths.kl.mean(0)
        elbo_terms = reconstruction_terms - kl_terms
        rows = torch.arange(y.shape[0], device=y.device)
        carry_out = paths.latents[0, rows, self._carry_positions(lengths, carry_index)].detach()
        return VMTElbo(
            elbo=elbo_terms.sum() / tokens, reconstruction=reconstruction_terms.sum() / tokens,
            kl=kl_terms.sum() / tokens, loss_init=loss_init, loss_prior=loss_prior, loss_skip=loss_skip,
            carry=carry_out, latents=paths.latents, elbo_terms=elbo_terms,
            reconstruction_terms=reconstruction_terms, kl_terms=kl_terms, num_tokens=tokens,
        )  # fmt: skip

    def iw_bound(
        self,
        y: Tensor,
        num_samples: int,
        attention_mask: Tensor | None = None,
        carry: Tensor | None = None,
        generator: torch.Generator | None = None,
        chunk_size: int = 64,
        carry_index: int | None = None,
        carry_mask: Tensor | None = None,
    ) -> VMTBound:
        """The importance-weighted bound with K = ``num_samples`` posterior paths (drawn ``chunk_size`` at a time):
        log (1/K) Σ_s P(y, x^s | x_0^s) / Q(x^s | y, x_0^s), equal to the ELBO in expectation at K = 1. ``carry``:
        one x_0 (B, dx) for every path, whose bound rises to log P(y | x_0) as K grows, or a latent for each path
        (K, B, dx), as the bound of the window before returns them.

        The returned carry holds K latents (K, B, dx), each path's drawn in proportion to the weights (with
        replacement): chained over a document's windows, each path starting from its own, they are a particle
        filter's, so the product of the per-window estimates is an unbiased estimate of the document's likelihood
        that tends to it as K grows: the summed bounds are a lower bound on its log-likelihood in expectation,
        tightening toward it. (One carried latent for every path left them short of it at any K.)
        """
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples={num_samples!r}: must be a positive integer")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size={chunk_size!r}: must be a positive integer")
        y, mask, lengths = self._observations(y, attention_mask)
        carry, carried = self._check_carry(carry, carry_mask, y.shape[0], y.device, paths=num_samples)
        if carry is not None and carry.dim() == 2:
            carry = carry[None]  # (1, B, dx): every path's
        context = self._context(y, lengths)
        rows = torch.arange(y.shape[0], device=y.device)
        positions = self._carry_positions(lengths, carry_index)
        log_weights, candidates = [], []
        for start in range(0, num_samples, chunk_size):
            count = min(chunk_size, num_samples - start)
            starts = None if carry is None else carry if len(carry) == 1 else carry[start : start + count]
            paths = self._infer(y, mask, context, starts, carried, count, generator)
            log_weights.append((paths.reconstruction + paths.log_p_x - paths.log_q).sum(-1))  # (s, B)
            candidates.append(paths.latents[:, rows, positions])  # (s, B, dx)
        log_weights = torch.cat(log_weights, dim=0)
        per_sequence = torch.logsumexp(log_weights, dim=0) - math.log(num_samples)
        probabilities = resampling_probabilities(log_weights.detach())
        if generator is not None:
            probabilities = probabilities.to(generator.device)
        ancestors = torch.multinomial(probabilities, num_samples, replacement=True, generator=generator)
        carry_out = torch.cat(candidates, dim=0)[ancestors.T.to(y.device), rows].detach()  # (K, B, dx)
        tokens = int(lengths.sum())
        return VMTBound(per_token=per_sequence.sum() / tokens, per_sequence=per_sequence, carry=carry_out,
                        num_tokens=tokens)  # fmt: skip

    def forward(
        self,
        input_ids: Tensor | None = None,
        input_features: Tensor | None = None,
        attention_mask: Tensor | None = None,
        carry: Tensor | None = None,
        kl_weight: float = 1.0,
        num_samples: int = 1,
        generator: torch.Generator | None = None,
        carry_index: int | None = None,
        carry_mask: Tensor | None = None,
    ) -> VMTOutput:
        """The training objective of a batch of windows, per token, to minimise:

            loss = −reconstruction + kl_weight · max(kl, free_bits)
                   + c_init · Loss_init + c_prior · Loss_prior + c_skip · Loss_skip

        ``kl_weight`` is the trainer's KL warm-up (1 gives the negative ELBO when free_bits = 0); ``free_bits`` holds
        the batch's KL per token up to that many nats without pushing it down. Pass ``carry`` = the previous window's
        ``output.carry`` for truncated BPTT (it is detached: no gradient crosses windows)."""
        if self.tokens and (input_ids is None or input_features is not None):
            raise ValueError("this VMT reads token ids: pass input_ids (B, T), not input_features")
        if not self.tokens and (input_features is None or input_ids is not None):
            raise ValueError("this VMT reads real vectors: pass input_features (B, T, input_dim), not input_ids")
        if not (math.isfinite(kl_weight) and kl_weight >= 0):
            raise ValueError(f"kl_weight={kl_weight!r}: must be a finite number >= 0")
        result = self.elbo(input_ids if self.tokens else input_features, attention_mask, carry, num_samples,
                           generator, carry_index, carry_mask)  # fmt: skip
        config = self.config
        kl = result.kl.clamp_min(config.free_bits) if config.free_bits > 0 else result.kl
        extra = (config.loss_init_weight * result.loss_init + config.loss_prior_weight * result.loss_prior
                 + config.loss_skip_weight * result.loss_skip)  # fmt: skip
        loss = -result.reconstruction + kl_weight * kl + extra
        return VMTOutput(loss=loss, elbo=result.elbo, reconstruction=result.reconstruction, kl=result.kl,
                         loss_init=result.loss_init, loss_prior=result.loss_prior, loss_skip=result.loss_skip,
                         carry=result.carry)  # fmt: skip

    # ---------------------------------------------------------------------------------------------- helpers

    @torch.no_grad()
    def init_weights(self, module: nn.Module | None = None) -> None:
        """Initialise ``module`` (default: the whole model) as a fresh build of this config does: the VMT keeps each
        module's own (torch's) initialisation, with no ``initializer_range``. Drawn from the global generator, so
        after the seed of a build the tensors are that build's."""
        fresh = type(self)(self.config)
        if module is None:
            self.load_state_dict(fresh.state_dict())
            return
        name = next((name for name, own in self.named_modules() if own is module), None)
        if name is None:
            raise ValueError(f"init_weights: {type(module).__name__} is not a module of this VMT")
        module.load_state_dict(fresh.get_submodule(name).state_dict())

    def generative_parameters(self) -> list[nn.Parameter]:
        """The parameters of P: prior, transition and emission (freeze them to train the posterior alone)."""
        return [*self.prior.parameters(), *self.transition.parameters(), *self.emission.parameters()]

    @torch.no_grad()
    def set_linear_gaussian(
        self,
        transition: Tensor,
        transition_bias: Tensor,
        transition_std: Tensor,
        emission: Tensor,
        emission_bias: Tensor,
        emission_std: Tensor,
        initial_mean: Tensor,
        initial_std: Tensor,
    ) -> None:
        """Set P to a linear-Gaussian state-space model exactly (x_1 ~ N(initial_mean, diag initial_std²),
        x_{k+1} ~ N(transition x_k + transition_bias, diag transition_std²), y_k ~ N(emission x_k + emission_bias,
        diag emission_std²)); the posterior is untouched. Takes ``LinearGaussianParameters.to_dict()``'s keys. Needs
        real-vector observations with input_dim = emission rows and latent_dim = transition rows."""
        if self.tokens:
            raise ValueError("set_linear_gaussian needs a VMT over real vectors (input_dim), not tokens")
        emission = torch.as_tensor(emission)
        latent, observed = self.config.latent_dim, self.config.input_dim
        if tuple(emission.shape) != (observed, latent):
            raise ValueError(f"emission has shape {tuple(emission.shape)}; this VMT needs (input_dim, latent_dim) = "
                             f"{(observed, latent)}")  # fmt: skip
        self.transition.set_linear(transition, transition_bias, transition_std)
        self.emission.density.set_linear(emission, emission_bias, emission_std)
        self.prior.set(initial_mean, initial_std)


__all__ = ["VMTBound", "VMTElbo", "VMTOutput", "VariationalMarkovTransformer", "reverse_within_lengths"]

"""``transformers`` models wrapping each markovformer family (see ``markovformer.hf``; their configs are in
``hf.configuration``).

Each task's wrapper (on the base in ``hf.wrapper``, which adopts the markovformer model's modules) calls the
markovformer model in ``forward`` and returns ``transformers`` output classes; ``HF_CLASSES`` holds one per family
and task, ``register`` makes them known to the ``Auto*`` classes.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForCTC,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    GenerationConfig,
    GenerationMixin,
    PretrainedConfig,
)
from transformers.modeling_outputs import (
    BaseModelOutput,
    CausalLMOutput,
    CausalLMOutputWithPast,
    Seq2SeqLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.utils import ModelOutput

from markovformer.hf.cache import CACHE_NAME, DecodesFromCache, MarkovformerCache
from markovformer.hf.configuration import HF_CONFIGS
from markovformer.hf.wrapper import ReportingWrapper, Wrapper, as_asked
from markovformer.models.markovian_transformer import MarkovianTransformerModel
from markovformer.models.pretrained import HF_WRAPPER_PREFIX
from markovformer.models.registry import MODEL_FAMILIES
from markovformer.ops.losses import next_token_targets


def summed_over_items(loss: Tensor | None, labels: Tensor | None, num_items_in_batch, position_ids=None,
                      shifted: bool = True):  # fmt: skip
    """A mean loss over its micro-batch's scored tokens as their sum over ``num_items_in_batch`` (the scored tokens
    of the whole accumulated batch, on every process, which transformers' Trainer counts and passes): then the
    accumulated step is the whole batch's mean, where the mean of micro-batch means weighed a token of a
    micro-batch with fewer scored tokens more. ``shifted``: the labels are a causal LM's, each scoring the token
    before it (its first column scores nothing), as the Trainer counts them; else a token classifier's, one per
    position. Without ``num_items_in_batch``, ``loss`` as it is."""
    if loss is None or labels is None or num_items_in_batch is None:
        return loss
    targets = next_token_targets(labels, position_ids) if shifted else labels  # as the model scores them
    scored = targets.ne(-100).sum()
    total = loss * scored if bool(scored) else loss.nan_to_num() * 0  # a micro-batch of no scored token adds 0
    return total / torch.as_tensor(num_items_in_batch, device=loss.device)


def kept_logits(logits: Tensor, logits_to_keep: int | Tensor) -> Tensor:
    """``logits`` (B, T, V) at the positions ``transformers``' ``logits_to_keep`` asks for: the last n (0: all), or
    those a 1-D tensor of indices lists."""
    if isinstance(logits_to_keep, Tensor):
        return logits[:, logits_to_keep.to(logits.device)]
    return logits[:, -logits_to_keep:] if logits_to_keep else logits


class _CausalLMWrapper(ReportingWrapper, DecodesFromCache, GenerationMixin):
    honoured_inputs = ("position_ids",)
    accepts_loss_kwargs = True  # its loss is the whole accumulated batch's mean (summed_over_items)

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None, cache: MarkovformerCache | None = None, use_cache: bool | None = None,
                output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None, position_ids: Tensor | None = None, logits_to_keep: int | Tensor = 0,
                **unused) -> CausalLMOutputWithPast:  # fmt: skip
        """Every position's next-token logits; ``labels`` are the inputs (shifted inside), -100 ignored.

        With ``use_cache`` (the config's default, outside training and without labels) and a model whose layers
        decode incrementally, the output carries a ``MarkovformerCache``: given back as ``cache``, the next call
        reads only the new tokens (``attention_mask`` may cover the whole sequence; its last columns are used), as
        ``transformers``' ``generate`` does.

        ``position_ids`` (B, T) restarting at 0 mark packed documents (as ``DataCollatorWithFlattening`` writes
        them): no position sees another document and no document's first token is scored. A forward with them
        makes no cache, and a cache given with them is refused (a decoding continues one sequence).

        ``logits_to_keep``: as in ``transformers``, the logits of the last n positions only (0: all), of which
        only those are projected without labels (``generate``'s prompt: 1), or of the positions a 1-D tensor lists,
        for which every position's are computed (and the loss reads them all)."""
        inner = self.markovformer
        if position_ids is not None and cache is not None:
            raise ValueError(f"{type(self).__name__}: position_ids (packed documents) cannot continue a cache; call "
                             "without cache (or without position_ids when decoding)")  # fmt: skip
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if (cache is None and use_cache and labels is None and position_ids is None and not self.training
                and inner.model.decodes_incrementally):  # fmt: skip
            cache = MarkovformerCache()
        if attention_mask is not None:
            attention_mask = attention_mask[:, -input_ids.shape[1]:]
            if cache is None and bool(attention_mask.bool().all()):
                attention_mask = None
        packed = {} if position_ids is None else {"position_ids": position_ids}
        last = {} if isinstance(logits_to_keep, Tensor) else {"logits_to_keep": logits_to_keep}  # the head's own
        output, hidden = self._run(output_attentions, output_hidden_states, input_ids=input_ids,
                                   attention_mask=attention_mask, labels=labels,
                                   state=None if cache is None else cache.state, **packed, **last)  # fmt: skip
        if cache is not None:
            cache.advance(input_ids.shape[1])
        loss = summed_over_items(self._regularized(output.loss), labels, unused.get("num_items_in_batch"),
                                 position_ids)  # fmt: skip
        logits = output.logits if last else kept_logits(output.logits, logits_to_keep)
        return self._finish(CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_NAME: cache},
                                                   hidden_states=hidden,
                                                   attentions=_tuple(output.attentions)), return_dict)  # fmt: skip


class _BlocklessCausalLMWrapper(Wrapper, DecodesFromCache, GenerationMixin):
    """A causal LM of a family without a backbone of blocks (``BACKBONE_ATTRIBUTES``), such as Scan Markov:
    ``generate`` decodes from its state (``MarkovformerCache``; Scan Markov's is h after the last token in recurrent
    mode, the last n - 1 tokens in markov mode), one token per step after the prompt; no hidden states or
    attentions are returned. Its prompts are unpadded (a recurrence has no padding steps); a right-padded batch runs
    the whole forward and makes no cache."""

    accepts_loss_kwargs = True  # its loss is the whole accumulated batch's mean (summed_over_items)
    unreported_because = "a recurrence, not layers of blocks"

    def prepare_inputs_for_generation(self, input_ids: Tensor, attention_mask: Tensor | None = None, **options):
        """As ``DecodesFromCache``'s, after refusing a padded prompt: the recurrence has no padding steps, and
        generate reads each row's next token at its last position, so neither left nor right padding decodes (the
        forward's refusal of left padding asked for right padding, which generate refuses in turn)."""
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ValueError(f"{type(self.markovformer).__name__} generates from unpadded prompts only (a "
                             "recurrence has no padding steps): give prompts of equal length, or one at a time (a "
                             "pipeline's batch_size=1)")  # fmt: skip
        self._refuse_reports(options.get("output_attentions"), options.get("output_hidden_states"))
        return super().prepare_inputs_for_generation(input_ids, attention_mask, **options)

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None, cache: MarkovformerCache | None = None, use_cache: bool | None = None,
                return_dict: bool | None = None, logits_to_keep: int | Tensor = 0,
                output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                **unused) -> CausalLMOutputWithPast:  # fmt: skip
        if attention_mask is not None:
            attention_mask = attention_mask[:, -input_ids.shape[1]:]
            if bool(attention_mask.bool().all()):
                attention_mask = None
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if cache is None and use_cache and labels is None and attention_mask is None and not self.training:
            cache = MarkovformerCache()
        output = self.markovformer(input_ids, attention_mask=attention_mask, labels=labels,
                                   state=None if cache is None else cache.state)  # fmt: skip
        if cache is not None:
            cache.advance(input_ids.shape[1])
        loss = summed_over_items(output.loss, labels, unused.get("num_items_in_batch"))
        return as_asked(CausalLMOutputWithPast(loss=loss, logits=kept_logits(output.logits, logits_to_keep),
                                               **{CACHE_NAME: cache}),
                         return_dict, self.config)  # fmt: skip


class _SequenceClassificationWrapper(ReportingWrapper):
    def forward(self, input_ids=None, attention_mask=None, labels=None, input_features=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **unused):  # fmt: skip
        """The loss follows ``config.problem_type`` as ``transformers``' heads do (see ``problem_type``):
        cross-entropy over integer class labels, mean squared error for "regression", binary cross-entropy with
        logits over multi-hot float labels (B, num_labels) for "multi_label_classification"."""
        problem = None if labels is None else problem_type(self.config, labels)
        output, hidden = self._run(output_attentions, output_hidden_states, input_ids=input_ids,
                                   input_features=input_features, attention_mask=attention_mask,
                                   labels=labels if problem == "single_label_classification" else None)  # fmt: skip
        loss = output.loss
        if problem == "regression":
            logits, target = output.logits.float(), labels.to(torch.float32)
            if logits.shape[-1] == 1:
                logits, target = logits.squeeze(-1), target.reshape(logits.shape[0])
            loss = torch.nn.functional.mse_loss(logits, target)
        elif problem == "multi_label_classification":
            loss = torch.nn.functional.binary_cross_entropy_with_logits(output.logits.float(), labels.float())
        return self._finish(SequenceClassifierOutput(loss=self._regularized(loss), logits=output.logits,
                                                     hidden_states=hidden, attentions=_tuple(output.attentions)),
                            return_dict)  # fmt: skip


def problem_type(config: PretrainedConfig, labels: Tensor) -> str:
    """``config.problem_type``, or when unset the one ``transformers`` infers: "regression" for one label,
    "single_label_classification" for integer labels, "multi_label_classification" otherwise."""
    if config.problem_type is not None:
        return config.problem_type
    if config.num_labels == 1:
        return "regression"
    if labels.dtype in (torch.long, torch.int):
        return "single_label_classification"
    return "multi_label_classification"


def _tuple(values: list | None) -> tuple | None:
    return None if values is None else tuple(values)


class _TokenClassificationWrapper(ReportingWrapper):
    output_class = TokenClassifierOutput
    # its loss, the mean over the labelled positions, becomes their sum over the whole accumulated batch's labelled
    # positions (summed_over_items): rows padded with -100 label unequal numbers of positions per micro-batch and
    # per process, and the mean of their means was not the whole batch's step
    accepts_loss_kwargs = True

    def forward(self, input_ids=None, attention_mask=None, labels=None, input_features=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **unused):  # fmt: skip
        output, hidden = self._run(output_attentions, output_hidden_states, input_ids=input_ids,
                                   input_features=input_features, attention_mask=attention_mask,
                                   labels=labels)  # fmt: skip
        loss = self._regularized(output.loss)
        if self.accepts_loss_kwargs:
            loss = summed_over_items(loss, labels, unused.get("num_items_in_batch"), shifted=False)
        return self._finish(self.output_class(loss=loss, logits=output.logits, hidden_states=hidden,
                                              attentions=_tuple(output.attentions)), return_dict)  # fmt: skip


class _CTCWrapper(_TokenClassificationWrapper):
    """As ``transformers``' CTC heads (``CausalLMOutput``): ``labels`` (B, L) padded with -100, index 0 the blank; the
    loss is markovformer's, each utterance's negative log-likelihood over its target length, averaged over the batch
    (``ctc_loss(reduction="mean")``), whose items are the utterances, not the label tokens the Trainer counts: the
    Trainer divides it by the accumulation steps itself."""

    output_class = CausalLMOutput
    accepts_loss_kwargs = False


class _BackboneWrapper(ReportingWrapper):
    def forward(self, input_ids=None, attention_mask=None, input_features=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **unused):  # fmt: skip
        output, hidden = self._run(output_attentions, output_hidden_states, input_ids=input_ids,
                                   input_features=input_features, attention_mask=attention_mask)  # fmt: skip
        return self._finish(BaseModelOutput(last_hidden_state=output.last_hidden_state, hidden_states=hidden,
                                            attentions=_tuple(output.attentions)), return_dict)  # fmt: skip


@dataclasses.dataclass
class VMTOutput(ModelOutput):
    loss: Tensor | None = None  # the training objective per token (negative ELBO plus the extra terms)
    elbo: Tensor | None = None  # per token


class _VMTWrapper(Wrapper):
    def forward(self, input_ids=None, attention_mask=None, input_features=None, return_dict=None,
                **unused) -> VMTOutput:  # fmt: skip
        output = self.markovformer(input_ids=input_ids, input_features=input_features, attention_mask=attention_mask)
        return as_asked(VMTOutput(loss=output.loss, elbo=output.elbo), return_dict, self.config)


class _Seq2SeqWrapper(Wrapper):
    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                labels=None, return_dict=None, **unused) -> Seq2SeqLMOutput:  # fmt: skip
        """As ``transformers``' encoder-decoders: without ``decoder_input_ids``, the decoder reads ``labels`` shifted
        right (``prepare_decoder_input_ids_from_labels``), so a batch of ``DataCollatorForSeq2Seq`` trains as it is."""
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError(f"{type(self).__name__} needs decoder_input_ids (the target shifted right, starting "
                                 f"with bos) or labels (from which they are made)")  # fmt: skip
            decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        output = self.markovformer(input_ids, decoder_input_ids, attention_mask, decoder_attention_mask, labels)
        return as_asked(Seq2SeqLMOutput(loss=output.loss, logits=output.logits,
                                         encoder_last_hidden_state=output.encoder_last_hidden_state),
                         return_dict, self.config)  # fmt: skip

    def prepare_decoder_input_ids_from_labels(self, labels: Tensor) -> Tensor:
        """The decoder's inputs for ``labels`` (B, T): bos, then the labels shifted right by one, -100 read as
        padding (``DataCollatorForSeq2Seq`` asks a model for them)."""
        config = self.markovformer.config
        shifted = labels.new_full(labels.shape, config.pad_token_id)
        shifted[:, 0] = config.bos_token_id
        shifted[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1] == -100, config.pad_token_id)
        return shifted

    # generate's options that markovformer's translator decoding takes, under transformers' names
    GENERATE_OPTIONS = ("max_new_tokens", "do_sample", "temperature", "top_k", "top_p", "eos_token_id", "num_beams",
                        "length_penalty")  # fmt: skip

    @classmethod
    def can_generate(cls) -> bool:
        """True: ``generate`` is markovformer's own decoding (not ``GenerationMixin``'s), and the model carries a
        ``generation_config`` as transformers' generating models do (``Seq2SeqTrainer`` reads it)."""
        return True

    @torch.no_grad()
    def generate(self, input_ids: Tensor, attention_mask: Tensor | None = None, *, generation_config=None,
                 synced_gpus: bool | None = None, labels: Tensor | None = None, **options) -> Tensor:  # fmt: skip
        """Translate ``input_ids`` (B, S) with markovformer's own decoding (its cached greedy, sampling or beam
        search), returned as ``transformers``' encoder-decoder ``generate`` does: each row starts with the decoder
        start token (bos), then the target up to eos, padded with ``pad_token_id``. Options: ``max_new_tokens`` (or
        ``max_length``, which counts the start token), ``do_sample``, ``temperature``, ``top_k``, ``top_p``,
        ``eos_token_id``, ``num_beams``, ``length_penalty``, given here or set in ``generation_config`` (default:
        the model's), else ``transformers``' defaults (``max_length`` 20, ``top_k`` 50 when sampling:
        ``_generation_options``); any other option, or one set in the generation config, raises TypeError rather
        than be ignored, and a sampling option away from its default without sampling a ValueError. ``labels``
        (which ``Seq2SeqTrainer`` passes) are not read; ``synced_gpus=True`` (DeepSpeed ZeRO-3, FSDP) is refused:
        each process decodes on its own."""
        if synced_gpus:
            raise ValueError(f"{type(self).__name__}.generate decodes each process on its own: synced_gpus=True "
                             "(DeepSpeed ZeRO-3 or FSDP generation) is not supported")  # fmt: skip
        config = self.markovformer.config
        settings = _generation_options(generation_config or self.generation_config, self.GENERATE_OPTIONS)
        settings.update({key: value for key, value in options.items() if value is not None})
        for token in ("pad_token_id", "bos_token_id", "decoder_start_token_id"):
            wanted = config.pad_token_id if token == "pad_token_id" else config.bos_token_id
            given = settings.pop(token, wanted)
            if given != wanted:
                raise TypeError(f"this translator's {token} is {wanted} (its config's), not {given!r}")
        settings.pop("use_cache", None)  # the translator's decoding always reads its own state (the same tokens)
        for switch in ("output_attentions", "output_hidden_states", "output_scores", "output_logits",
                       "return_dict_in_generate"):  # off (a model config's generation config says so) is honoured
            if settings.get(switch) is False:
                del settings[switch]
        if not settings.get("do_sample"):  # transformers' defaults of the sampling options (top_k 50) are its own
            defaults = _transformers_defaults()  # a value away from them reaches GenerationConfig, which refuses it
            for name in ("temperature", "top_k", "top_p"):
                if name in settings and settings[name] == defaults.get(name):
                    del settings[name]
        max_new_tokens, max_length = settings.pop("max_new_tokens", None), settings.pop("max_length", None)
        unknown = sorted(set(settings) - set(self.GENERATE_OPTIONS))
        if unknown:
            raise TypeError(f"generate of {type(self).__name__} does not support {unknown}; it takes "
                            f"{list(self.GENERATE_OPTIONS)} and max_length")  # fmt: skip
        if max_new_tokens is None:
            max_new_tokens = max_length - 1 if max_length is not None else config.max_positions
        target = self.markovformer.generate(input_ids, attention_mask, max_new_tokens=max_new_tokens, **settings)
        start = target.new_full((target.shape[0], 1), config.bos_token_id)
        return torch.cat([start, target], dim=1)


def _transformers_defaults() -> dict:
    """transformers' default generation options (``max_length`` 20, ``top_k`` 50, ...), by name."""
    return getattr(GenerationConfig, "_get_default_generation_params", dict)()


def _generation_options(generation_config, supported: tuple[str, ...]) -> dict:
    """What ``generate`` decodes with from a ``GenerationConfig``, without its bookkeeping: every option it takes
    (``supported``, ``max_length`` and the token ids) as the config sets it, else ``transformers``' default, as
    ``transformers``' own models fill it (``max_length`` 20, ``top_k`` 50 when sampling; ``Seq2SeqTrainer`` writes
    them into the model's config after its first batch, so reading only what is set changed the limit between
    batches); any other option only where it is away from those defaults, so that ``generate`` refuses what it
    would ignore."""
    defaults = _transformers_defaults()
    taken = {*supported, "max_length", "pad_token_id", "bos_token_id", "decoder_start_token_id"}
    given = {} if generation_config is None else generation_config.to_diff_dict()
    options = {key: value for key, value in defaults.items() if key in taken and value is not None}
    options.update({key: value for key, value in given.items()
                    if not key.startswith("_") and key != "transformers_version" and value is not None
                    and (key in taken or key not in defaults or value != defaults[key])})  # fmt: skip
    return options


# the attribute holding a family's backbone in its heads (the Markovian Transformer's ``model``, built of blocks whose
# hidden states and attentions its wrappers report); a family without a separate backbone model names no attribute,
# so nothing is stripped or added when it loads, and its causal LM has the blockless wrapper
BACKBONE_ATTRIBUTES = {"markovian_transformer": "model"}


def _wrapper(family: str, task: str, base: type[Wrapper], markovformer_class: type) -> type[Wrapper]:
    return type(f"{HF_WRAPPER_PREFIX}{markovformer_class.__name__}", (base,), {
        "config_class": HF_CONFIGS[family], "markovformer_class": markovformer_class, "__module__": __name__,
        "base_model_prefix": BACKBONE_ATTRIBUTES.get(family, Wrapper.base_model_prefix),
    })  # fmt: skip


def _build_classes() -> dict[tuple[str, str], tuple[type, type[Wrapper]]]:
    """(family, task) -> (the Auto class it registers with, the wrapper class)."""
    bases = {"causal_lm": (AutoModelForCausalLM, _CausalLMWrapper),
             "sequence_classification": (AutoModelForSequenceClassification, _SequenceClassificationWrapper),
             "token_classification": (AutoModelForTokenClassification, _TokenClassificationWrapper),
             "ctc": (AutoModelForCTC, _CTCWrapper),
             "translation": (AutoModelForSeq2SeqLM, _Seq2SeqWrapper), "vmt": (AutoModel, _VMTWrapper)}  # fmt: skip
    classes = {}
    for family, entry in MODEL_FAMILIES.items():
        for task, head in entry.heads.items():
            if task in bases:
                auto, base = bases[task]
                if base is _CausalLMWrapper and family not in BACKBONE_ATTRIBUTES:  # no blocks to report on
                    base = _BlocklessCausalLMWrapper
                classes[family, task] = (auto, _wrapper(family, task, base, head))
    classes["markovian_transformer", "backbone"] = (
        AutoModel, _wrapper("markovian_transformer", "backbone", _BackboneWrapper, MarkovianTransformerModel)
    )
    return classes


HF_CLASSES = _build_classes()


def register() -> None:
    """Register every config with AutoConfig and every wrapper with its Auto class (idempotent); and name each
    causal LM among transformers' causal LMs (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``, whose classes the Auto
    mapping only imports for transformers' own config types): transformers' Trainer reads that list, not the
    registered models, to know that a model's labels are its inputs, and with ``label_smoothing_factor`` its label
    smoother scored each position's logits against the position's own token instead of the next one (a copying
    task, silently)."""
    for config_class in HF_CONFIGS.values():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    for auto, wrapper in HF_CLASSES.values():
        auto.register(wrapper.config_class, wrapper, exist_ok=True)
        if auto is AutoModelForCausalLM:
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault(wrapper.config_class.model_type, wrapper.__name__)


__all__ = ["HF_CLASSES", "HF_CONFIGS", "register"]

"""What a run prints: the data, the model, the final metrics against the data's references (entropy rate, true
chain, Bayes predictor, exact log-likelihood) and the Markov layers' transition strengths and mean gates per lag."""

from __future__ import annotations

import torch

from markovformer.data.bundle import DataBundle, examples_at
from markovformer.layers.markov_bias import MarkovBias
from markovformer.training.lag_report import CONVENTION, biased_lags, describe_chain, lag_header
from markovformer.training.run_config import RunConfig
from markovformer.training.tasks import model_inputs

SPLIT_NAMES = {"train": "training", "val": "validation", "test": "test"}


def unscored_tail(tokens: int, split: str) -> str:
    """The line that says the last ``tokens`` of a split (of each part for ``all``) fill no window: scored nowhere."""
    where = "at the ends of the three parts" if split == "all" else f"at the end of the {SPLIT_NAMES[split]} part"
    return (f"{tokens:,} tokens {where} fill no window of seq_len + 1 and are not scored (data.overlap > 0 keeps a "
            f"last shorter window)")


def describe_run(config: RunConfig, bundle: DataBundle, model: torch.nn.Module) -> None:
    sizes = ", ".join(f"{s} {len(getattr(bundle, s)):,}" for s in ("train", "val", "test"))
    print(f"data: {config.data['source']} ({sizes} examples)", flush=True)
    if getattr(bundle.val, "tail_tokens", 0):
        print(f"  {unscored_tail(bundle.val.tail_tokens, 'val')}", flush=True)
    repeats = bundle.info.get("repeats_training", {})
    if repeats:
        which = " and ".join(f"{count:,} of {len(getattr(bundle, split)):,} {SPLIT_NAMES[split]}"
                             for split, count in repeats.items())  # fmt: skip
        print(f"  warning: {which} records repeat the bases of a training record (or its reverse complement) under "
              f"another id: they are not held out, and score as memorised; deduplicate the data to measure "
              f"generalisation", flush=True)  # fmt: skip
    cut = bundle.info.get("cut_by_max_length")
    if cut:  # fasta, bed
        (records, all_records), (bases, all_bases) = cut["records"], cut["bases"]
        limit = bundle.splits["max_length"]
        print(f"  data.max_length={limit} cut {records:,} of {all_records:,} records to their first {limit} bases "
              f"({bases:,} of {all_bases:,} bases left out)", flush=True)  # fmt: skip
    shared = bundle.info.get("sources_in_training", {})
    if shared:  # translation
        which = " and ".join(f"{count:,} of {len(getattr(bundle, split)):,} {SPLIT_NAMES[split]}"
                             for split, count in shared.items())  # fmt: skip
        print(f"  warning: {which} pairs have a source sentence that is also a training pair's source: they are not "
              f"held out, and score as memorised; deduplicate the data to measure generalisation", flush=True)
    dropped = (getattr(bundle, "splits", None) or {}).get("dropped_long_train")  # translation_file
    if dropped:
        kept = len(bundle.train)
        print(f"  {dropped:,} of {dropped + kept:,} training pairs are longer than data.max_length="
              f"{bundle.splits['max_length']} tokens on a side and are left out (validation and test are kept "
              f"whole)", flush=True)  # fmt: skip
    reference = bundle.info.get("reference", {})
    if "unigram_entropy" in reference:
        if bundle.info.get("true_lags"):
            print(f"  chain: {describe_chain(bundle.info['true_lags'])}\n  ({CONVENTION})")
        print(f"  entropy rate {reference['entropy_rate']:.4f} nats/token, unigram entropy "
              f"{reference['unigram_entropy']:.4f}")  # fmt: skip
    print(f"model: {type(model).__name__}, {parameter_summary(model, ' parameters')}{attention_summary(model)}",
          flush=True)  # fmt: skip


def parameter_summary(model: torch.nn.Module, unit: str = "") -> str:
    """Every parameter, counted once (tied weights once), and the trainable ones where some are frozen (a VMT's
    true generative part, an unused hybrid core): the same count for a run at training and in its report, whose
    freshly loaded model has no frozen parameters."""
    total, trainable = model.num_parameters(trainable_only=False), model.num_parameters()
    return f"{total:,}{unit}" + (f" ({trainable:,} trainable)" if trainable != total else "")


def attention_summary(model: torch.nn.Module) -> str:
    """The model line's attention: one kind for every layer, or the kinds layer by layer."""
    kinds = model.config.layer_kinds()
    if not kinds:
        return ""
    if len(set(kinds)) == 1:
        return f", attention {kinds[0]} in every layer"
    return f", attention by layer [{', '.join(kinds)}]"


def report_results(results: dict, model: torch.nn.Module, bundle: DataBundle, labels: dict | None = None) -> None:
    """Print the final metrics (named by ``labels``, the task's ``metric_labels``), the data's reference values
    and, for Markov layers, strengths and mean gates."""
    shown = "  ".join(f"{(labels or {}).get(k, k)} {v:.4f}" for k, v in results["val"].items())
    print(f"\nfinal validation: {shown}")
    reference = results["reference"]
    if "oracle_val_loss" in reference and "loss" in results["val"]:
        print(f"  vs entropy rate {reference['entropy_rate']:.4f}: "
              f"{entropy_rate_gap(results['val']['loss'], reference['entropy_rate'])}; the true chain scores "
              f"{reference['oracle_val_loss']:.4f} on the same validation sequences")  # fmt: skip
    if "bayes_val_loss" in reference and "loss" in results["val"]:
        print(f"  {bayes_gap(results['val']['loss'], reference['bayes_val_loss'])} on the same validation sequences")
    if "chance_accuracy" in reference and "accuracy" in results["val"]:
        print(f"  {chance_gap(results['val']['accuracy'], reference['chance_accuracy'])}")
    exact = document_log_likelihood(reference, "val")
    if exact is not None and "elbo" in results["val"]:
        print(f"  {exact_likelihood_gap(results['val'], exact, 'validation', results.get('iw_samples'))}")
    if not model.transition_strengths():
        return
    batch = bundle.collate(examples_at(bundle.val, range(min(len(bundle.val), 64))))
    model.eval()
    with torch.no_grad():
        output = model(**{k: v for k, v in model_inputs(batch).items() if k != "labels"}, return_gates=True)
    gates = output.gates
    marked = biased_lags(bundle.info.get("true_lags", ()))
    for layer, strengths in zip(markov_layers(model), model.transition_strengths(), strict=True):
        for direction, values in strengths.items():
            if values is None:
                continue
            gate = gates[layer].get(direction) if gates[layer] is not None else None
            # the mask the blocks read: pooling='cls' adds a column, the [CLS] vector's
            mean_gate = None if gate is None else real_token_mean(gate, output.attention_mask)
            null = mean_gate is not None and mean_gate.shape[1] > values.shape[1]  # gate_null: false has none
            gated = (f", then | the mean gate α per lag{' and the null slot' if null else ''}"
                     if mean_gate is not None else "")  # fmt: skip
            star = " (* = a lag the chain depends on)" if marked else ""
            print(f"layer {layer} {direction}: transition strength T per head and lag{gated}{star}")
            sign = "" if direction == "past" else "−"
            header = " ".join(f"{label:>6}" for label in lag_header(values.shape[1], marked, sign))
            if mean_gate is not None:
                slots = lag_header(values.shape[1], marked, sign) + ["null"] * (mean_gate.shape[1] - values.shape[1])
                header += "   | " + " ".join(f"{label:>5}" for label in slots)
            print(f"  {'lag':7} {header}")
            for head in range(values.shape[0]):
                row = " ".join(f"{v:6.3f}" for v in values[head].tolist())
                extra = "" if mean_gate is None else "   | " + " ".join(f"{v:5.3f}" for v in mean_gate[head].tolist())
                print(f"  head {head}: {row}{extra}")


def real_token_mean(gate: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The mean gate (H, slots) over the batch's real tokens: gates (B, H, T, slots) are computed at padding too,
    and averaging them in reported what the padding token's gate does (0.23 for a lag that every real token gates
    fully, with 45 real tokens of 192)."""
    if attention_mask is None:
        return gate.float().mean(dim=(0, 2))
    weight = attention_mask.to(gate.device, torch.float32)[:, None, :, None]
    return (gate.float() * weight).sum(dim=(0, 2)) / weight.sum(dim=(0, 2))


def markov_layers(model: torch.nn.Module) -> list[int]:
    """The model layer (block index) of each of ``model.markov_biases()``, in their order."""
    blocks = getattr(model, "model", model).blocks
    return [index for index, block in enumerate(blocks) for module in block.modules()
            if isinstance(module, MarkovBias) and not module.unused]  # fmt: skip


def continuous_source(reference: dict) -> bool:
    """Whether the data's reference values are a continuous source's (a state-space source's, per step: its
    entropy rate is differential, of any sign and scale) rather than a discrete one's (entropies of symbols)."""
    return any(key.endswith("_per_step") for key in reference)


def chance_gap(accuracy: float, chance: float) -> str:
    """The accuracy against guessing (the task's chance accuracy), in points."""
    return f"vs chance accuracy {chance:.4f}: {100 * (accuracy - chance):+.2f} points"


def bayes_gap(loss: float, bayes_loss: float) -> str:
    """The line that sets ``loss`` beside the Bayes predictor's of an in-context chain source (``icl_markov``): the
    add-β estimator, the posterior predictive under the chains' Dirichlet(β) prior, whose loss no model beats on
    average over the random chains."""
    return f"vs the Bayes predictor (add-β) {bayes_loss:.4f}: {loss - bayes_loss:+.4f} nats"


def entropy_rate_gap(loss: float, entropy_rate: float, continuous: bool = False) -> str:
    """How far ``loss`` lies above the entropy rate, in nats and, for a discrete source, as a percentage of it: a
    continuous source's differential rate depends on the observations' units and may be 0 or negative, where a
    ratio says nothing or flips its sign (a loss 1.93 nats above -0.99 read -194.69 %)."""
    gap = loss - entropy_rate
    percent = not continuous and entropy_rate > 0
    return f"{gap:+.4f} nats" + (f" ({100 * gap / entropy_rate:+.2f}%)" if percent else "")


def exact_likelihood_gap(metrics: dict, exact: float, split: str, iw_samples: int | None = None) -> str:
    """The line that sets a VMT's bounds (``metrics``: ``elbo`` and maybe ``iw_bound`` with K = ``iw_samples``,
    nats per token) beside the exact log-likelihood per token of the ``split``'s documents (a state-space source's),
    each bound minus it."""
    bounds = [f"ELBO {metrics['elbo'] - exact:+.4f}"]
    if "iw_bound" in metrics:
        bounds.append(f"importance-weighted bound (K = {iw_samples}) {metrics['iw_bound'] - exact:+.4f}")
    return (f"vs the exact log-likelihood of the {split} documents {exact:.4f} nats/token, each bound minus it: "
            f"{', '.join(bounds)}")  # fmt: skip


def document_log_likelihood(reference: dict, split: str) -> float | None:
    """The exact log-likelihood per token of a split's documents, when the data gives it (state-space sources)."""
    for unit in ("token", "step"):
        if f"{split}_log_likelihood_per_{unit}" in reference:
            return reference[f"{split}_log_likelihood_per_{unit}"]
    return None

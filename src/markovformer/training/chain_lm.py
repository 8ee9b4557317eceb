"""The first main job: train a Markovian Transformer LM on a synthetic Markov chain and compare it with the
chain's entropy rate (the best loss any model can reach)."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from markovformer.data import ChainStream, chain_eval_batches
from markovformer.markov import MarkovChain, lagged_chain
from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.training.lightning_module import CausalLMTask


@dataclasses.dataclass
class ChainLMJob:
    """Everything the job needs; the defaults are ``make demo``."""

    # the source: an order-3 log-linear chain over 16 symbols whose next symbol depends on lags 1, 2 and 3
    num_symbols: int = 16
    lags: tuple[int, ...] = (1, 2, 3)
    strength: float = 1.0
    chain_seed: int = 0
    # the model
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_order: int = 4
    attention: str = "markov"
    # training
    steps: int = 1200
    batch_size: int = 32
    seq_len: int = 128
    lr: float = 3e-3
    warmup_steps: int = 100
    weight_decay: float = 0.1
    seed: int = 0
    val_sequences: int = 256
    eval_every: int = 200
    log_every: int = 50
    output_dir: str = "runs/demo"

    def __post_init__(self) -> None:
        for name in ("num_symbols", "steps", "batch_size", "seq_len", "val_sequences", "eval_every", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= 1")
        if not self.lags or min(self.lags) < 1:
            raise ValueError(f"lags={self.lags!r} must be positive integers")
        if self.seq_len <= max(self.lags):
            raise ValueError(f"seq_len={self.seq_len} must exceed the chain order {max(self.lags)}")
        if self.lr <= 0:
            raise ValueError(f"lr={self.lr!r} must be positive")

    def chain(self) -> MarkovChain:
        generator = torch.Generator().manual_seed(self.chain_seed)
        return lagged_chain(self.num_symbols, tuple(self.lags), strength=self.strength, generator=generator)

    def model_config(self) -> MarkovianTransformerConfig:
        return MarkovianTransformerConfig(
            vocab_size=self.num_symbols,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            max_order=self.max_order,
            attention=self.attention,
        )


class PrintProgress(L.Callback):
    """One line every ``every`` steps and after each validation: readable in logs and pipes, unlike a bar."""

    def __init__(self, every: int, total: int) -> None:
        self.every, self.total, self.start = every, total, time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % self.every == 0 or step == self.total:
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
            elapsed = time.perf_counter() - self.start
            print(f"step {step:>5}/{self.total}  train loss {loss:.4f}  lr {lr:.2e}  {elapsed:6.1f}s", flush=True)

    def on_validation_end(self, trainer, module) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        loss = float(trainer.callback_metrics["val/loss"])
        print(f"step {trainer.global_step:>5}/{self.total}  val loss {loss:.4f} nats/token", flush=True)


def mean_gates(model: MarkovianTransformerForCausalLM, input_ids: torch.Tensor) -> list[torch.Tensor | None]:
    """Per layer, the past-gate probabilities averaged over batch and positions: (H, K [+ null])."""
    model.eval()
    with torch.no_grad():
        gates = model(input_ids, return_gates=True).gates
    return [None if g is None else g["past"].mean(dim=(0, 2)) for g in gates]


def run_chain_lm(job: ChainLMJob) -> dict:
    """Train, evaluate, save the model and a ``results.json`` under ``job.output_dir``; return the results."""
    L.seed_everything(job.seed, workers=True, verbose=False)
    chain = job.chain()
    entropy_rate = chain.entropy_rate()
    model = MarkovianTransformerForCausalLM(job.model_config())
    print(
        f"source: order-{chain.order} chain over {chain.num_symbols} symbols, true lags {chain.true_lags}, "
        f"entropy rate {entropy_rate:.4f} nats/token, unigram entropy {chain.marginal_entropy():.4f}"
    )
    print(f"model: {model.num_parameters():,} parameters, attention={job.attention}, max_order={job.max_order}")
    task = CausalLMTask(model, job.lr, job.weight_decay, job.warmup_steps, job.steps)
    train = DataLoader(ChainStream(chain, job.batch_size, job.seq_len, job.seed), batch_size=None)
    val_batches = chain_eval_batches(chain, job.val_sequences, job.seq_len, seed=job.seed + 10_000)
    val = DataLoader(val_batches, batch_size=None)
    # The true kernel's loss on these very sequences: the floor this finite validation set can show.
    oracle_loss = oracle_loss_of(chain, val_batches)
    output_dir = Path(job.output_dir)
    trainer = L.Trainer(
        max_steps=job.steps,
        val_check_interval=job.eval_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        gradient_clip_val=1.0,
        accelerator="cpu",
        devices=1,
        logger=CSVLogger(output_dir, name="logs", version=""),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[PrintProgress(job.log_every, job.steps)],
    )
    start = time.perf_counter()
    trainer.fit(task, train, val)
    train_seconds = time.perf_counter() - start
    val_loss = float(trainer.validate(task, val, verbose=False)[0]["val/loss"])

    model.save_pretrained(output_dir / "model")
    strengths = model.transition_strengths()
    gates = mean_gates(model, next(iter(val))["input_ids"])
    results = {
        "val_loss": val_loss,
        "entropy_rate": entropy_rate,
        "oracle_val_loss": oracle_loss,
        "excess_percent": 100 * (val_loss / entropy_rate - 1),
        "bits_per_token": val_loss / math.log(2),
        "train_seconds": train_seconds,
        "transition_strengths": [s["past"].tolist() for s in strengths],
        "mean_gates": [None if g is None else g.tolist() for g in gates],
        "job": dataclasses.asdict(job),
    }
    (output_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print_summary(results, job.max_order)
    print(f"saved: {output_dir / 'model'} (from_pretrained), {output_dir / 'results.json'}, logs in {output_dir}/logs")
    return results


def oracle_loss_of(chain: MarkovChain, batches: list[dict[str, torch.Tensor]]) -> float:
    """Token-weighted mean loss of the true kernel over evaluation batches (targets at t >= order)."""
    total = sum(chain.oracle_loss(b["input_ids"]) * b["input_ids"][:, chain.order :].numel() for b in batches)
    return total / sum(b["input_ids"][:, chain.order :].numel() for b in batches)


def print_summary(results: dict, max_order: int) -> None:
    lags = "  ".join(f"lag{k:<3}" for k in range(1, max_order + 1))
    print(f"\nfinal validation loss {results['val_loss']:.4f} nats/token vs entropy rate {results['entropy_rate']:.4f}"
          f" ({results['excess_percent']:+.2f}%); the true chain scores {results['oracle_val_loss']:.4f} on the same"
          f" validation sequences; {results['train_seconds']:.0f}s of training")  # fmt: skip
    for layer, (strength, gate) in enumerate(zip(results["transition_strengths"], results["mean_gates"], strict=True)):
        print(f"layer {layer}: transition strengths T_past (rows = heads)      {lags}")
        for head, row in enumerate(strength):
            print(f"  head {head}{'':40}" + "  ".join(f"{v:6.3f}" for v in row))
        if gate is not None:
            print("  mean order gate (rows = heads; last column = the null slot)")
            for head, row in enumerate(gate):
                print(f"  head {head}{'':40}" + "  ".join(f"{v:6.3f}" for v in row))

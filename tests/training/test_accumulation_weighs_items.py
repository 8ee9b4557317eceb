"""An optimiser step that accumulates micro-batches (or runs on several processes) minimises the mean over every item
its loss scores (a translation's target tokens, a language model's labelled next tokens, a CTC run's utterances) of
all its micro-batches: the gradient the optimiser receives is the naive one, every item's loss of the step summed,
over the step's count, backward."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_RUN  # beside this folder

from markovformer.data.collate import collate
from markovformer.data.translation import collate_translation
from markovformer.models.vmt import VariationalMarkovTransformer, VMTConfig
from markovformer.ops.segments import document_starts
from markovformer.training.build import build_data, build_model, build_run_task
from markovformer.training.divergence import DivergenceGuard, TrainingDiverged
from markovformer.training.module import TrainingModule
from markovformer.training.run_config import resolve_run_config
from markovformer.training.tasks import build_task
from markovformer.training.tasks.base import model_inputs

pytestmark = pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")

TRANSLATION_RUN = {
    "task": "translation", "model_type": "markov_translator", "output_dir": "unused",
    "model": {"d_model": 16, "n_heads": 2, "n_encoder_layers": 1, "n_decoder_layers": 1, "order": 2, "dropout": 0.0,
              "max_positions": 40},
    "data": {"source": "synthetic_translation", "train_examples": 64, "val_examples": 16, "test_examples": 8,
             "max_length": 8},
    "trainer": {"max_steps": 1, "batch_size": 4, "warmup_steps": 0, "seed": 3},
}  # fmt: skip


def translation_setup(dtype: torch.dtype = torch.float64) -> tuple:
    """A tiny translator (float64 by default) and two batches of pairs, one of short targets and one of long ones."""
    config = resolve_run_config(copy.deepcopy(TRANSLATION_RUN))
    bundle = build_data(config)
    torch.manual_seed(0)
    task, model = build_run_task(config, bundle), build_model(config, bundle.info).to(dtype)
    pairs = sorted((bundle.train[index] for index in range(len(bundle.train))), key=lambda pair: len(pair["tgt_ids"]))
    batches = [collate_translation(pairs[:2]), collate_translation(pairs[-4:])]
    return task, model, batches


def translation_token_losses(model, batch: dict) -> torch.Tensor:
    """Every scored target token's cross-entropy (nats), flat."""
    logits = model(**model_inputs(batch)).logits
    losses = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), reduction="none")
    return losses[batch["labels"].flatten() != -100]


def language_model_setup(packed: bool = False) -> tuple:
    """A tiny causal language model in float64 and two batches of windows, the first with most labels -100;
    ``packed``: each row holds two documents (``position_ids``), whose first tokens are not scored."""
    values = copy.deepcopy(TINY_RUN)
    values["model"]["dropout"] = 0.0
    config = resolve_run_config({**values, "output_dir": "unused"})
    bundle = build_data(config)
    torch.manual_seed(0)
    task, model = build_run_task(config, bundle), build_model(config, bundle.info).double()
    batches = [bundle.collate([bundle.train[index] for index in range(start, start + 4)]) for start in (0, 4)]
    batches[0]["labels"][:, 6:] = -100
    batches[0]["labels"][0, :] = -100
    for batch in batches if packed else ():
        rows, length = batch["input_ids"].shape
        batch["position_ids"] = torch.cat([torch.arange(9), torch.arange(length - 9)]).repeat(rows, 1)
    return task, model, batches


def language_model_token_losses(model, batch: dict) -> torch.Tensor:
    logits = model(**model_inputs(batch)).logits[:, :-1]
    targets = batch["labels"][:, 1:]
    if "position_ids" in batch:
        targets = targets.masked_fill(document_starts(batch["position_ids"])[:, 1:], -100)
    targets = targets.flatten()
    losses = F.cross_entropy(logits.flatten(0, 1), targets, ignore_index=-100, reduction="none")
    return losses[targets != -100]


CTC_RUN = {
    "task": "ctc", "output_dir": "unused",
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2, "causal": False, "dropout": 0.0},
    "data": {"source": "synthetic_ctc", "num_symbols": 4, "input_dim": 8, "train_examples": 16, "val_examples": 4,
             "test_examples": 4},
    "trainer": {"max_steps": 1, "batch_size": 4, "warmup_steps": 0, "seed": 3},
}  # fmt: skip


def ctc_setup() -> tuple:
    """A tiny CTC model in float64 and two batches, of 2 utterances and of 5."""
    config = resolve_run_config(copy.deepcopy(CTC_RUN))
    bundle = build_data(config)
    torch.manual_seed(0)
    task, model = build_run_task(config, bundle), build_model(config, bundle.info).double()
    batches = [bundle.collate([bundle.train[index] for index in indices]) for indices in (range(2), range(2, 7))]
    for batch in batches:
        batch["input_features"] = batch["input_features"].double()
    return task, model, batches


def ctc_utterance_losses(model, batch: dict) -> torch.Tensor:
    """Each utterance's CTC loss per target symbol, the utterance scored alone (its own forward, no padding)."""
    losses = []
    for row, frames in enumerate(batch["attention_mask"].sum(-1).tolist()):
        labels = batch["labels"][row : row + 1]
        alone = {"input_features": batch["input_features"][row : row + 1, :frames],
                 "labels": labels[:, : int((labels != -100).sum())]}  # fmt: skip
        losses.append(model(**alone).loss)
    return torch.stack(losses)


SETUPS = {"translation": (translation_setup, translation_token_losses),
          "causal_lm": (language_model_setup, language_model_token_losses),
          "packed_causal_lm": (lambda: language_model_setup(packed=True), language_model_token_losses),
          "ctc": (ctc_setup, ctc_utterance_losses)}  # fmt: skip


def naive_gradient(model, batches: list[dict], token_losses) -> dict[str, torch.Tensor]:
    """The gradient of the mean over every scored token of ``batches``."""
    model.zero_grad()
    losses = torch.cat([token_losses(model, batch) for batch in batches])
    (losses.sum() / len(losses)).backward()
    gradient = {name: parameter.grad.clone() for name, parameter in model.named_parameters()}
    model.zero_grad()
    return gradient


def step_gradient(task, model, batches: list[dict], accumulate: int, clip: float | None = None,
                  item_scale: float | None = None) -> tuple[dict, float]:  # fmt: skip
    """The gradient the optimiser receives (after clipping) in the first optimiser step of the engine's module
    trained by Lightning on ``batches`` with ``accumulate`` micro-batches per step, and the train/loss it logs.
    ``item_scale``: the module's, instead of the one its first micro-batch sets."""
    task.trainer.accumulate_grad_batches = accumulate
    module, received = TrainingModule(model, task), {}
    module.item_scale = item_scale
    clip_gradients = module.configure_gradient_clipping

    def clip_and_keep(optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
        if not received:
            received.update({name: parameter.grad.clone() for name, parameter in model.named_parameters()})

    module.configure_gradient_clipping = clip_and_keep
    precision = "64-true" if model.dtype == torch.float64 else "32-true"
    trainer = L.Trainer(max_steps=1, accumulate_grad_batches=accumulate, precision=precision, accelerator="cpu",
                        devices=1, gradient_clip_val=clip, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0)  # fmt: skip
    before = copy.deepcopy(model.state_dict())
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches[:accumulate], batch_size=None))
    model.load_state_dict(before)
    return received, float(trainer.callback_metrics["train/loss"])


class SGDModule(TrainingModule):
    """The engine's module stepping plain SGD with rate 1: its weights move by minus the step's gradient."""

    def configure_optimizers(self):
        return torch.optim.SGD(self.model.parameters(), lr=1.0)


def relative_difference(a: dict, b: dict) -> float:
    difference = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(a[k] - b[k]) for k in a]))
    return float(difference / torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(b[k]) for k in b])))


@pytest.mark.parametrize("kind", SETUPS)
def test_a_step_of_two_micro_batches_descends_the_mean_over_all_their_scored_tokens(kind):
    """Two micro-batches of unequal scored items (2 short and 4 long translation pairs; windows of which most
    labels are -100, also packed; 2 utterances and 5): the step's gradient is that of the mean over all their
    scored items, and its logged loss that mean; the mean of the two micro-batches' means weighed an item of the
    smaller one more (its gradient 17% off for the translation pairs, 38% for the windows, 20% for the
    utterances)."""
    setup, token_losses = SETUPS[kind]
    task, model, batches = setup()
    counts = [len(token_losses(model, batch)) for batch in batches]
    assert counts[0] < counts[1] / 2
    expected = naive_gradient(model, batches, token_losses)
    received, logged = step_gradient(task, model, batches, accumulate=2)
    assert relative_difference(received, expected) < 1e-12
    with torch.no_grad():
        assert logged == pytest.approx(float(torch.cat([token_losses(model, batch) for batch in batches]).mean()),
                                       rel=1e-12)  # fmt: skip


def test_gradient_clipping_acts_on_the_gradient_of_the_steps_token_mean():
    """Clipped to a norm below its own, the step's gradient is the token mean's scaled to that norm: clipping runs
    after the step's summed gradient is divided by its tokens."""
    task, model, batches = translation_setup()
    expected = naive_gradient(model, batches, translation_token_losses)
    norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in expected.values()])))
    received, _ = step_gradient(task, model, batches, accumulate=2, clip=norm / 4)
    assert relative_difference(received, {name: g / 4 for name, g in expected.items()}) < 1e-6  # clipping's eps


def test_the_scale_of_the_summed_losses_changes_no_bit_of_the_step():
    """Each micro-batch's summed loss is divided by a power of two near its count, set by a process's first
    micro-batch: a resumed process, whose first micro-batch is another, scales by another power of two and must
    step the same bits (float32)."""
    task, model, batches = translation_setup(torch.float32)
    steps = [step_gradient(task, model, batches, accumulate=2, item_scale=scale)[0] for scale in (None, 1.0, 256.0)]
    assert all(torch.equal(step[name], steps[0][name]) for step in steps[1:] for name in steps[0])


def test_a_step_of_one_batch_is_the_gradient_of_its_mean_loss_bit_for_bit():
    """Without accumulation, on one process, the step is the batch's own mean loss as the model computes it, with
    every bit of its gradient and its logged value (no reweighing rounds them)."""
    task, model, batches = translation_setup()
    model.zero_grad()
    loss = model(**model_inputs(batches[1])).loss
    loss.backward()
    expected = {name: parameter.grad.clone() for name, parameter in model.named_parameters()}
    model.zero_grad()
    received, logged = step_gradient(task, model, batches[1:], accumulate=1)
    assert all(torch.equal(received[name], expected[name]) for name in expected)
    assert logged == float(loss.detach())


def test_a_diverged_step_of_two_micro_batches_names_the_loss_its_model_computed(tmp_path):
    """A step of two micro-batches whose gradient turns non-finite stops the run naming the training loss of its
    last micro-batch, the mean over its tokens as the model computes it: Lightning's loss is the module's rescaled
    sum, that mean times the batch's tokens over a power of two and over accumulate_grad_batches (1.125 times it
    here: 36 tokens, over 16 and 2)."""
    task, model, batches = translation_setup()
    task.trainer.accumulate_grad_batches = 2
    with torch.no_grad():
        loss = float(model(**model_inputs(batches[1])).loss)
    next(model.parameters()).register_hook(lambda gradient: gradient * float("inf"))
    trainer = L.Trainer(max_steps=1, accumulate_grad_batches=2, precision="64-true", accelerator="cpu", devices=1,
                        callbacks=[DivergenceGuard(tmp_path, lr=1.0)], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0)  # fmt: skip
    with pytest.raises(TrainingDiverged, match="gradient norm is nan") as raised:
        trainer.fit(SGDModule(model, task), train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    assert f"(loss {loss:.6g})" in str(raised.value)


@pytest.mark.slow  # 27 s on 2 cores: each process imports torch and Lightning
def test_two_processes_step_down_the_mean_over_both_processes_tokens(tmp_path):
    """DDP on 2 processes (gloo), each with one batch of pairs, 2 short and 4 long: one SGD step of rate 1 moves
    the weights by minus the gradient of the mean over both batches' tokens (DDP averaged the two processes' mean
    losses: 17% off)."""
    task, model, batches = translation_setup()
    expected = naive_gradient(model, batches, translation_token_losses)
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    trainer = L.Trainer(max_steps=1, precision="64-true", accelerator="cpu", devices=2, strategy="ddp_spawn",
                        gradient_clip_val=None, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                        default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(SGDModule(model, task), train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    moved = {name: before[name] - parameter.detach() for name, parameter in model.named_parameters()}
    assert relative_difference(moved, expected) < 1e-12


def test_a_vmt_window_counts_the_tokens_its_objective_is_per():
    """The VMT's objective is per real token of its windows (a document's last window may be short): the count a
    step weighs it by is the model's own."""
    config = VMTConfig(vocab_size=6, latent_dim=4, d_model=16, n_layers=1, n_heads=2, hidden_dim=16, window=4)
    torch.manual_seed(0)
    model = VariationalMarkovTransformer(config)
    batch = collate([{"input_ids": torch.tensor([1, 2, 3, 4])}, {"input_ids": torch.tensor([5, 1])}])
    items = build_task("vmt").loss_items({**batch, "carry_mask": torch.tensor([False, False])})
    assert items == model.elbo(batch["input_ids"], batch["attention_mask"]).num_tokens == 6

"""The small Markovian Transformer wrappers and inputs that the Hugging Face tests share (imported after their
``importorskip`` of transformers)."""

from __future__ import annotations

import torch

from markovformer.hf import HF_CLASSES, HF_CONFIGS

SMALL = dict(vocab_size=11, d_model=16, n_layers=2, n_heads=2, max_order=2)


def small_hf(task: str, **options):
    torch.manual_seed(0)
    return HF_CLASSES["markovian_transformer", task][1](HF_CONFIGS["markovian_transformer"](**{**SMALL, **options}))


def random_ids(batch: int = 3, length: int = 7, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 11, (batch, length), generator=torch.Generator().manual_seed(seed))


def perturbed(model):
    with torch.no_grad():  # away from the init, so that a tensor left unloaded would show
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    return model.eval()

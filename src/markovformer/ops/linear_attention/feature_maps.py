"""Random feature maps for linear attention, in one place: projections and the two feature kinds.

Both kinds scale inputs as ``x' = x * Dh**-0.25`` so that ``q'·k' = q·k / sqrt(Dh)``, the softmax temperature.

- ``"positive"`` (FAVOR+): phi(x) = exp(W x' - |x'|^2 / 2 - c) / sqrt(M). For rows w ~ N(0, I),
  E[phi(q)·phi(k)] = exp(q·k / sqrt(Dh)) * exp(-c_q): an unbiased, positive softmax-kernel estimate (c_q: one
  constant per query, which the normaliser cancels; keys carry none).
- ``"trig"`` (the paper's form): phi(x) = [cos(W x'), sin(W x')] / sqrt(M), an estimate of the Gaussian kernel
  exp(-|q' - k'|^2 / 2) that can be negative; use it with the ``"signed"`` normaliser.
"""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.ops.precision import autocast_off, compute_dtype

FEATURE_MAPS = ("positive", "trig")


def draw_projection(
    num_features: int,
    head_dim: int,
    *,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Random projection W of shape (num_features, head_dim) whose rows are marginally N(0, I).

    ``orthogonal=True``: rows come in blocks of ``head_dim`` mutually orthogonal directions (QR of a Gaussian
    block, sign-corrected so directions are Haar-uniform), each rescaled by the norm of a fresh Gaussian
    vector (chi-distributed), as in FAVOR+; the last block is truncated. ``orthogonal=False``: iid N(0, I)
    rows. Drawn in float64 on the generator's device, then cast to ``dtype`` / ``device``.
    """
    if num_features < 1 or head_dim < 1:
        raise ValueError(f"num_features and head_dim must be >= 1, got {num_features} and {head_dim}")
    draw_device = generator.device if generator is not None else torch.device(device or "cpu")
    draw = {"generator": generator, "dtype": torch.float64, "device": draw_device}
    if not orthogonal:
        return torch.randn(num_features, head_dim, **draw).to(dtype=dtype, device=device)
    num_blocks = -(-num_features // head_dim)
    gaussian = torch.randn(num_blocks, head_dim, head_dim, **draw)
    q, r = torch.linalg.qr(gaussian)
    # Fixing the sign of diag(R) makes Q Haar-distributed rather than biased by the QR convention.
    signs = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
    q = q * torch.where(signs == 0, torch.ones_like(signs), signs).unsqueeze(-2)
    directions = q.transpose(-2, -1).reshape(num_blocks * head_dim, head_dim)[:num_features]
    norms = torch.randn(num_features, head_dim, **draw).norm(dim=-1, keepdim=True)
    return (directions * norms).to(dtype=dtype, device=device)


@autocast_off  # under mixed precision too: a bfloat16 W x' moves exp(W x') by percents
def _project(x: Tensor, projection: Tensor) -> tuple[Tensor, Tensor]:
    """Scaled inputs x' (..., Dh) and projections W x' (..., M), in at least float32."""
    if x.shape[-1] != projection.shape[-1]:
        raise ValueError(f"x has head dim {x.shape[-1]} but projection has shape {tuple(projection.shape)} (M, Dh)")
    compute = compute_dtype(x)
    scaled = x.to(compute) * x.shape[-1] ** -0.25
    return scaled, scaled @ projection.to(compute).transpose(-2, -1)


# Key exponents above this saturate: e^60 per feature leaves float32 room for sums over ~e^28 values x keys. A key
# only gets there by aligning with a projection row at its norm (|x'| = |w| ~ sqrt(Dh)), far outside trained models.
KEY_EXPONENT_CAP = 60.0


def positive_features(x: Tensor, projection: Tensor, *, is_query: bool = False) -> Tensor:
    """FAVOR+ positive softmax-kernel features: x (..., Dh), projection (M, Dh) -> (..., M), all > 0.

    Keys: exp(min(w·x' - |x'|^2/2, KEY_EXPONENT_CAP)) / sqrt(M), the unbiased estimate itself (SPEC 2.5) with no
    data-dependent constant, so no position (a future or padded key) can change the scale of another and decoding
    sums the same features as the full forward; the cap only keeps float32 from overflowing. Queries
    (``is_query=True``): a detached max per row is subtracted from the exponent, which scales each query's weights by
    its own constant and so cancels in the linear-attention normaliser; never use it for keys. (Subtracting the
    data-free bound max_i |w_i|^2 / 2 from the keys instead puts them near e^-(Dh/2): every row's sum underflows the
    normaliser's "no mass" test at head dim 64.)
    """
    scaled, projected = _project(x, projection)
    log_features = projected - scaled.square().sum(dim=-1, keepdim=True) / 2
    if is_query:
        log_features = log_features - log_features.amax(dim=-1, keepdim=True).detach()
    else:
        log_features = log_features.clamp(max=KEY_EXPONENT_CAP)
    # Kept in at least float32 (keys may reach e^60); linear attention accumulates in it.
    return torch.exp(log_features) * projection.shape[0] ** -0.5


def trig_features(x: Tensor, projection: Tensor) -> Tensor:
    """Trigonometric features [cos(Wx'), sin(Wx')] / sqrt(M), may be negative: x (..., Dh), projection (M, Dh) ->
    (..., 2M). The reference's form, but on x' = x·Dh^{-1/4} (softmax's temperature) as the positive map, so they
    estimate the Gaussian kernel exp(-|q' - k'|^2 / 2); the reference code reads x itself (SPEC 2.5: the kernel's
    exponent Dh^{1/2} times larger, a narrower kernel)."""
    _, projected = _project(x, projection)
    features = torch.cat([torch.cos(projected), torch.sin(projected)], dim=-1) * projection.shape[0] ** -0.5
    return features.to(x.dtype)


def feature_map(x: Tensor, projection: Tensor, kind: str, *, is_query: bool = False) -> Tensor:
    """Dispatch to ``positive_features`` (``is_query`` passed on) or ``trig_features`` by ``kind``."""
    if kind == "positive":
        return positive_features(x, projection, is_query=is_query)
    if kind == "trig":
        return trig_features(x, projection)
    raise ValueError(f"unknown feature map kind {kind!r}; expected one of {FEATURE_MAPS}")

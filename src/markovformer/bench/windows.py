"""The ``windows`` part: local attention at the windows people use (W = 16..1024), side by side in one run.

Kinds, each timed forward + backward on the same (B=1, H=8, T, Dh=32) inputs, causal:
- ``banded_w{W}``: this library's banded op (``lag_bias_attention``, backend ``banded``) with a per-lag bias (K = 4);
- ``local_attention_w{W}``: lucidrains' ``local-attention`` (the ``bench`` extra) at the same window: exact window
  (``exact_windowsize``), one block back, so each query sees keys t-W..t like ``banded``; no positions, no bias;
- ``softmax_sdpa``: causal ``scaled_dot_product_attention`` over the whole sequence (no window), for scale.

``banded`` should cost time proportional to T·W and never more than ``local-attention``: ``report`` reads the
ratio per (W, T) as a target.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from markovformer.ops.lag_bias_attention import lag_bias_attention

WINDOW_SHAPE = dict(batch=1, heads=8, head_dim=32, order=4)
WINDOWS = (16, 64, 256, 1024)
WINDOW_LENGTHS = (4096, 16384)
NOT_INSTALLED = "local-attention is not installed (pip install 'markovformer[bench]')"


def window_kinds(windows: tuple[int, ...]) -> tuple[str, ...]:
    """Every kind of the part, in the order they run."""
    kinds = [name for window in windows for name in (f"banded_w{window}", f"local_attention_w{window}")]
    return (*kinds, "softmax_sdpa")


def parse_kind(kind: str) -> tuple[str, int | None]:
    """``"banded_w64"`` -> ("banded", 64); ``"softmax_sdpa"`` -> ("softmax_sdpa", None)."""
    if kind == "softmax_sdpa":
        return kind, None
    name, _, window = kind.rpartition("_w")
    if name not in ("banded", "local_attention") or not window.isdigit():
        raise ValueError(f"unknown windows kind {kind!r}: expected banded_w<W>, local_attention_w<W> or softmax_sdpa")
    return name, int(window)


def expected_growth(kind: str) -> float:
    """How time and memory grow with T: linearly for a fixed window, quadratically for ``softmax_sdpa``. The suite
    predicts the next size from this while it has measured only one (from one 4k point, the quadratic guess put
    local-attention at W=256, T=16k at 10.6 GiB; it used 2.2 GiB)."""
    return 2.0 if parse_kind(kind)[1] is None else 1.0


def local_attention_available() -> bool:
    try:
        import local_attention  # noqa: F401
    except ImportError:
        return False
    return True


def window_forward(kind: str, q, k, v, bias):
    """The attention output (B, H, T, Dh) of ``kind`` on these inputs (bias (B, H, T, K) is used by banded only)."""
    name, window = parse_kind(kind)
    if name == "banded":
        return lag_bias_attention(q, k, v, bias, window=window, causal=True, backend="banded")
    if name == "local_attention":
        from local_attention import LocalAttention

        attention = LocalAttention(window_size=window, causal=True, look_backward=1, look_forward=0,
                                   exact_windowsize=True, autopad=True, use_rotary_pos_emb=False)  # fmt: skip
        return attention.to(q.device)(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def window_step(kind: str, seq_len: int, device: str):
    """One forward + backward of ``kind`` at length ``seq_len`` against a dense upstream gradient."""
    batch, heads, head_dim, order = (WINDOW_SHAPE[key] for key in ("batch", "heads", "head_dim", "order"))
    generator = torch.Generator().manual_seed(0)
    shape = (batch, heads, seq_len, head_dim)
    q, k, v = (torch.randn(shape, generator=generator).to(device).requires_grad_() for _ in range(3))
    bias = torch.randn(batch, heads, seq_len, order, generator=generator).to(device).requires_grad_()
    upstream = torch.randn(shape, generator=generator).to(device)
    leaves = [q, k, v, bias] if kind.startswith("banded") else [q, k, v]

    def step():
        window_forward(kind, q, k, v, bias).backward(upstream)
        for leaf in leaves:
            leaf.grad = None

    return step

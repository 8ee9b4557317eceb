"""The recurrence as a custom autograd Function: a no-grad two-level loop forward, the same loop on the adjoint
backward.

Forward: h_t = a_t ⊙ h_{t-1} + b_t. Time is cut into n blocks of C ≈ √(T/2) steps, viewed as (B, n, C, D), and
every loop step works on all n blocks at once with in-place ops on (B, n, D) slices:
1. a loop over the C offsets scans each block from a zero state;
2. a loop over the n blocks carries the state entering each block (from each block's product of a);
3. a loop over the C offsets adds the entering state, decayed to each offset.
That is C - 1 + n - 1 + C steps, about 4√(T/2) = 2√(2T) (n ≈ 2C), Python steps instead of T (T = 2048: 126 instead
of 2048), in the caller's layout, with no temporary as large as the input.
Backward: with g_t = dL/dh_t (total), g_t = dL/dh_t (direct) + a_{t+1} ⊙ g_{t+1}: the same three loops in reverse
time; then grad_b = g, grad_a = g ⊙ h_{t-1} (h_{-1} = h0 or 0) and grad_h0 = a_0 ⊙ g_0.
Memory: a and h are kept (O(T·B·D)), never a graph of T nodes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.first_order import first_order_only


def _blocks(x: Tensor, block: int, fill: float, copy: bool) -> Tensor:
    """(B, T, D) -> (B, n, C, D), the tail padded with ``fill`` up to n·C steps; a view when no padding or copy is
    needed."""
    batch, length, width = x.shape
    blocks = -(-length // block)
    padding = blocks * block - length
    if padding:
        x = F.pad(x, (0, 0, 0, padding), value=fill)
    elif copy or not x.is_contiguous():
        x = x.clone(memory_format=torch.contiguous_format)
    return x.view(batch, blocks, block, width)


def _block_size(length: int) -> int:
    """C near √(T/2) (the fewest loop steps), preferring one that divides T (no padded copies of a and b)."""
    best = max(1, math.isqrt(length // 2))
    divisors = [size for size in range(best // 2 + 1, 2 * best + 1) if length % size == 0]
    return min(divisors, key=lambda size: abs(size - best), default=best)


def _scan(a: Tensor, b: Tensor, h0: Tensor | None) -> Tensor:
    """States (B, T, D) of h_t = a_t ⊙ h_{t-1} + b_t from h_{-1} = h0 (zeros when None), without autograd."""
    length = a.shape[1]
    block = _block_size(length)
    gates = _blocks(a, block, 1.0, copy=False)  # padded steps are the identity: a = 1, b = 0
    states = _blocks(b, block, 0.0, copy=True)  # scanned in place
    for offset in range(1, block):
        states[:, :, offset].addcmul_(gates[:, :, offset], states[:, :, offset - 1])
    through = gates.prod(dim=2)  # (B, n, D): a block's effect on the state entering it
    carry = torch.zeros_like(through)
    if h0 is not None:
        carry[:, 0] = h0
    for index in range(1, carry.shape[1]):
        torch.addcmul(states[:, index - 1, -1], through[:, index - 1], carry[:, index - 1], out=carry[:, index])
    for offset in range(block):
        carry.mul_(gates[:, :, offset])
        states[:, :, offset].add_(carry)
    return states.flatten(1, 2)[:, :length]


def _adjoint_scan(a: Tensor, grad_states: Tensor, grad_last: Tensor) -> Tensor:
    """g (B, T, D) of g_t = grad_t + a_{t+1} ⊙ g_{t+1}, where grad is ``grad_states`` plus ``grad_last`` at the last
    step: ``_scan``'s loops in reverse time."""
    length = a.shape[1]
    block = _block_size(length)
    gates = _blocks(a, block, 1.0, copy=False)
    total = _blocks(grad_states, block, 0.0, copy=True)  # padded steps carry nothing back: their grad is 0
    total.flatten(1, 2)[:, length - 1].add_(grad_last)
    for offset in range(block - 2, -1, -1):
        total[:, :, offset].addcmul_(gates[:, :, offset + 1], total[:, :, offset + 1])
    # carry[:, j] = a at block j+1's first step ⊙ g there: what block j's last step receives from the next block.
    through = gates[:, :, 1:].prod(dim=2)  # (B, n, D): block j+1's steps after its first, seen from that first
    carry = torch.zeros_like(through)
    for index in range(carry.shape[1] - 2, -1, -1):
        entering = torch.addcmul(total[:, index + 1, 0], through[:, index + 1], carry[:, index + 1])
        torch.mul(gates[:, index + 1, 0], entering, out=carry[:, index])
    for offset in range(block - 1, -1, -1):
        total[:, :, offset].add_(carry)
        carry.mul_(gates[:, :, offset])
    return total.flatten(1, 2)[:, :length]


class _SequentialScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, h0: Tensor | None) -> tuple[Tensor, Tensor]:
        states = _scan(a, b, h0)
        ctx.save_for_backward(a, states, h0)
        return states, states[:, -1].clone()

    @staticmethod
    @first_order_only("the sequential linear scan", "linear_scan's backends 'naive' and 'chunked' have one")
    def backward(ctx, grad_states: Tensor, grad_last: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        a, states, h0 = ctx.saved_tensors
        grad = _adjoint_scan(a, grad_states, grad_last)
        grad_a = grad_h0 = None
        if ctx.needs_input_grad[0]:
            grad_a = torch.empty_like(grad)
            torch.mul(grad[:, 1:], states[:, :-1], out=grad_a[:, 1:])
            if h0 is None:
                grad_a[:, 0].zero_()
            else:
                torch.mul(grad[:, 0], h0, out=grad_a[:, 0])
        if h0 is not None and ctx.needs_input_grad[2]:
            grad_h0 = a[:, 0] * grad[:, 0]
        return grad_a, (grad if ctx.needs_input_grad[1] else None), grad_h0


def linear_scan_sequential(a: Tensor, b: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """h_t = a_t ⊙ h_{t-1} + b_t by a blocked step loop with a hand-written backward; same result as the naive
    loop up to rounding.

    a, b (B, T, D); h0 (B, D) or None (zeros). Returns h (B, T, D) and the final state (B, D).
    Not twice differentiable.
    """
    return _SequentialScan.apply(a, b, h0)

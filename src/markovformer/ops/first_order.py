"""``first_order_only``: the guard on the backward of every hand-written autograd Function.

Those backwards write into buffers (``out=`` products, in-place updates) and so have no derivative of their own.
PyTorch's ``once_differentiable`` defers its error to the second backward and attaches it to detached copies of
the gradients, so ``torch.autograd.grad(penalty, inputs)`` (the usual gradient penalty) skipped such a function's
share of the second derivative without a word: a wrong penalty gradient, not an error. This guard refuses the first
backward that builds a graph (``create_graph=True``) instead, naming the function and the path that has a second
derivative.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable)


def first_order_only(name: str, alternative: str) -> Callable[[F], F]:
    """Decorate an autograd Function's ``backward`` (under ``@staticmethod``): it runs without building a graph, and
    raises RuntimeError naming ``name`` and ``alternative`` when called under ``create_graph=True``."""

    def decorate(backward: F) -> F:
        @functools.wraps(backward)
        def guarded(ctx, *grads):
            if torch.is_grad_enabled() and not torch.compiler.is_compiling():
                raise RuntimeError(f"{name} has no second derivative (its backward was asked to build a graph, "
                                   f"create_graph=True, as a gradient penalty does): {alternative}")  # fmt: skip
            with torch.no_grad():
                return backward(ctx, *grads)

        return guarded  # type: ignore[return-value]

    return decorate


__all__ = ["first_order_only"]

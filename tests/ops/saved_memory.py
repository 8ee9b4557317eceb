"""What autograd keeps for the backward pass, and the large tensors an op allocates, for the memory tests of the
chunked ops and the losses (imported as ``saved_memory``: pytest puts this folder on the path)."""

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def bytes_saved_for_backward(run: Callable[[], object]) -> int:
    """The bytes of the distinct storages autograd saves for the backward pass while ``run()`` builds its graph: a
    view counts its whole storage, and a storage saved many times (slices of one input) counts once."""
    storages = {}

    def pack(saved: torch.Tensor) -> torch.Tensor:
        storages[saved.untyped_storage().data_ptr()] = saved.untyped_storage().nbytes()
        return saved

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved):
        result = run()  # held until counted: a freed storage's address could be reused and counted as one
    del result
    return sum(storages.values())


class _LargeAllocations(TorchDispatchMode):
    def __init__(self, at_least: int) -> None:
        super().__init__()
        self.at_least, self.found = at_least, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        given = {leaf.untyped_storage().data_ptr() for leaf in tree_leaves((args, kwargs))
                 if isinstance(leaf, torch.Tensor)}  # fmt: skip
        for leaf in tree_leaves(result):  # a view or an in-place op's result holds a storage given to it
            if (isinstance(leaf, torch.Tensor) and leaf.numel() >= self.at_least
                    and leaf.untyped_storage().data_ptr() not in given):  # fmt: skip
                self.found.append(f"{func.__name__} {tuple(leaf.shape)}")
        return result


def large_allocations(run: Callable[[], object], at_least: int) -> list[str]:
    """The tensors of at least ``at_least`` elements that the ops of ``run()`` (forward and backward, if it runs
    one) allocate, each as "op (shape)": a view and an op writing in place allocate nothing."""
    with _LargeAllocations(at_least) as mode:
        run()
    return mode.found

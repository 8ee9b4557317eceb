"""What autograd keeps for the backward pass, for the memory tests of the chunked ops (imported as ``saved_memory``:
pytest puts this folder on the path)."""

from collections.abc import Callable

import torch


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

"""What a data loader worker started by pickling (the spawn or forkserver start method) receives of its data.

PyTorch shares every CPU tensor it pickles for a worker through a file descriptor of its own, and forkserver passes
at most 256 to a new process: a run whose examples held more tensors (a translation bundle's 400 examples, 800
tensors) failed before its first step with ``ValueError: too many fds``. ``Packed`` gathers the storages of a value's
tensors into one shared byte buffer, one descriptor, and the worker's tensors are views of it, bit for bit the
originals (views of one storage stay views of one storage). A forked worker copies the process instead: nothing is
pickled or packed.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import torch
from torch import Tensor

# A storage's place in the buffer is aligned for every element size, so that the tensors' views of it are too.
ALIGNMENT = 64

PackedTensor = tuple[torch.dtype, int, tuple[int, ...], tuple[int, ...], bool, bool]


def _packable(value: Any) -> bool:
    """A CPU tensor whose storage and view describe it whole (plain or a parameter, a leaf, no lazy conjugate)."""
    return (type(value) in (Tensor, torch.nn.Parameter) and value.device.type == "cpu" and value.layout == torch.strided
            and value.grad_fn is None and not value.is_quantized and not value.is_conj() and not value.is_neg())


class Packed:
    """``value`` with the storages of its CPU tensors gathered into one shared byte buffer; unpickles as a copy of
    ``value`` itself, whose tensors are views of the received buffer. Packed when made, once however often it is
    pickled; the buffer (a second copy of the tensors' bytes, in shared memory) lives as long as this object, as it
    must until the worker has started (its descriptor is passed then)."""

    def __init__(self, value: Any) -> None:
        storages: dict[tuple[int, int], tuple[torch.UntypedStorage, int]] = {}  # (address, bytes) -> (storage, start)
        tensors: list[PackedTensor] = []
        seen: dict[int, tuple[Tensor, int]] = {}  # a tensor met twice is one tensor in the copy too (tied weights)
        end = 0

        def persistent_id(item: Any) -> int | None:
            nonlocal end
            if not _packable(item):
                return None
            if id(item) in seen:
                return seen[id(item)][1]
            seen[id(item)] = item, len(tensors)
            storage = item.untyped_storage()
            key = (storage.data_ptr(), storage.nbytes())
            if key not in storages:
                storages[key] = storage, end
                end = -(-(end + storage.nbytes()) // ALIGNMENT) * ALIGNMENT
            start = storages[key][1]
            tensors.append((item.dtype, start // item.element_size() + item.storage_offset(), tuple(item.shape),
                            item.stride(), item.requires_grad, isinstance(item, torch.nn.Parameter)))  # fmt: skip
            return len(tensors) - 1

        pickled = io.BytesIO()
        pickler = pickle.Pickler(pickled, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.persistent_id = persistent_id
        pickler.dump(value)
        self.buffer = torch.empty(end, dtype=torch.uint8).share_memory_()
        for storage, start in storages.values():
            self.buffer[start : start + storage.nbytes()] = torch.empty(0, dtype=torch.uint8).set_(storage)
        self.pickled, self.tensors = pickled.getvalue(), tensors

    def __reduce__(self):
        return unpacked, (self.pickled, self.buffer, self.tensors)


def unpacked(pickled: bytes, buffer: Tensor, tensors: list[PackedTensor]) -> Any:
    """The value a ``Packed`` was made of, its tensors views of ``buffer``."""

    built: dict[int, Tensor] = {}

    def persistent_load(index: int) -> Tensor:
        if index not in built:
            dtype, offset, shape, stride, requires_grad, parameter = tensors[index]
            tensor = torch.empty(0, dtype=dtype).set_(buffer.untyped_storage(), offset, shape, stride)
            built[index] = (torch.nn.Parameter(tensor, requires_grad) if parameter
                            else tensor.requires_grad_(requires_grad))  # fmt: skip
        return built[index]

    unpickler = pickle.Unpickler(io.BytesIO(pickled))
    unpickler.persistent_load = persistent_load
    return unpickler.load()


class PackedSplit:
    """A split (``len`` and ``split[i]``) whose pickled copy holds its tensors in one buffer (``Packed``): the
    examples a scoring pass's workers receive. Packed at its first pickling, and kept for every worker and pass."""

    def __init__(self, split) -> None:
        self.split, self.packed = split, None

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        return self.split[index]

    def __reduce__(self):
        if self.packed is None:
            self.packed = Packed(self.split)
        return PackedSplit, (self.packed,)

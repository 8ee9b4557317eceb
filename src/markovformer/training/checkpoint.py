"""The training-checkpoint format, in one place: one safetensors file, no pickle, written atomically.

A Lightning checkpoint is a nested structure (epoch, step, model and optimiser state, loop and callback state, ...).
``save_checkpoint_file`` splits it into its tensors and a JSON *skeleton* of everything else:

- every tensor is stored in the safetensors file under its key path, e.g. ``checkpoint['state_dict']['lm.weight']``;
- the skeleton is stored in the safetensors header metadata under ``"markovformer_checkpoint"`` as
  ``{"version": 1, "root": node}``, where a node is a JSON ``null``/``true``/``false``/int/float/string/array
  (``None``/bool/int/float/str/list) or a one-key tagged object: ``{"$dict": [[key, node], ...]}`` (keys stay
  ``str`` or ``int``), ``{"$odict": ...}`` (an ``OrderedDict``), ``{"$tuple": [node, ...]}``,
  ``{"$float": "nan" | "inf" | "-inf"}``, ``{"$tensor": name}``, ``{"$dtype": "bfloat16"}``,
  ``{"$device": "cuda:0"}``, ``{"$size": [2, 3]}``.

Loading reads the header as JSON and the tensors with ``safe_open``: nothing is unpickled, so a checkpoint from an
untrusted source cannot run code. ``SafetensorsCheckpointIO`` (``training.checkpoint_io``) plugs the format into a
Lightning ``Trainer``; this module imports no Lightning, so that reading a run (``eval``, ``generate``) does not wait
for it. A run's step checkpoints are named ``step-NNNNNN.ckpt`` (``step_checkpoints`` lists them).
"""

from __future__ import annotations

import json
import math
import os
import re
import types
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from markovformer.atomic import atomic_write

FORMAT_KEY = "markovformer_checkpoint"
STEP_CHECKPOINT = re.compile(r"step-(\d+)\.ckpt")
FORMAT_VERSION = 1
ROOT = "checkpoint"
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
# The dtypes safetensors can hold; looked up by name because the newer ones are missing from older torch builds.
_STORABLE_DTYPES = {
    getattr(torch, name)
    for name in (
        "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
        "complex64", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    )
    if hasattr(torch, name)
}  # fmt: skip


def save_checkpoint_file(checkpoint: dict, path: str | Path) -> None:
    """Write ``checkpoint`` (a nested dict of plain values and tensors) to ``path`` as one safetensors file.

    Supported values: ``dict``/``OrderedDict`` with ``str`` or ``int`` keys, ``list``, ``tuple``, ``None``, ``bool``,
    ``int``, ``float`` (``nan``/``inf`` included), ``str``, ``torch.Tensor`` (stored contiguous, detached, and
    loaded onto one device), ``torch.dtype``, ``torch.device``, ``torch.Size``; numpy scalars are stored as Python
    numbers. Anything else raises ``TypeError`` naming its key path. The write is atomic: a crash leaves the
    previous file at ``path`` untouched.
    """
    if type(checkpoint) not in (dict, OrderedDict):
        raise TypeError(f"{ROOT}: expected a dict, got {_describe(checkpoint)}")
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _encode(checkpoint, ROOT, tensors, seen_storages=set(), ancestors=set())
    header = json.dumps({"version": FORMAT_VERSION, "root": skeleton}, allow_nan=False, separators=(",", ":"))
    metadata = {FORMAT_KEY: header, "format": "pt"}
    try:
        atomic_write(path, lambda temporary: save_file(tensors, str(temporary), metadata=metadata))
    except SafetensorError as error:
        raise os_error_of_safetensors(error, path) from error


def step_checkpoints(folder: Path) -> list[Path]:
    """The step checkpoints in ``folder``, oldest first."""
    found = [(int(m.group(1)), p) for p in folder.glob("step-*.ckpt") if (m := STEP_CHECKPOINT.fullmatch(p.name))]
    return [path for _, path in sorted(found)]


def os_error_of_safetensors(error: Exception, path: str | Path) -> Exception:
    """safetensors reports a failed write (disk full, ...) as its own error type, naming the OS error in its message:
    the OSError it stands for (naming ``path``), or ``error`` itself when it names none."""
    code = re.search(r"os error (\d+)", str(error))
    if code is None:
        return error
    number = int(code.group(1))
    return OSError(number, os.strerror(number), str(path))


def _opened(path: Path, device: str):
    """safetensors' reader of the checkpoint ``path``, after the checks it words wrongly: no file is a
    FileNotFoundError naming it, a file this user may not read (mode 000) the OS's own PermissionError, which
    safe_open reports as "No such file or directory"."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no checkpoint file here")
    with open(path, "rb"):  # a denied read raises here, as what it is
        pass
    return safe_open(str(path), framework="pt", device=device)


def load_checkpoint_file(path: str | Path, map_location: str | torch.device | int | None = "cpu") -> dict:
    """Read a file written by ``save_checkpoint_file``; every tensor is placed on ``map_location`` (None: CPU).

    Raises ``FileNotFoundError`` if there is no file, ``PermissionError`` if this user may not read it, ``ValueError``
    naming ``path`` if it is not one of ours.
    """
    path = Path(path)
    device = _device_name(map_location)
    try:
        with _opened(path, device) as handle:
            header = (handle.metadata() or {}).get(FORMAT_KEY)
            if header is None:
                raise ValueError(f"{path} is not a markovformer checkpoint (a safetensors file without '{FORMAT_KEY}')")
            names = set(handle.keys())
            return _decode_header(header, path, lambda name: _read_tensor(handle, names, name, path))
    except SafetensorError as error:
        raise ValueError(f"{path} is not a markovformer checkpoint (not a safetensors file: {error})") from error


class TensorInfo(NamedTuple):
    """A stored tensor's dtype and shape, read from the file's header without reading the tensor."""

    dtype: torch.dtype | None  # None: a dtype this torch build does not know
    shape: tuple[int, ...]


_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                       "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
                       "U16": "uint16", "U32": "uint32", "U64": "uint64", "C64": "complex64",
                       "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}  # fmt: skip


def read_checkpoint_skeleton(path: str | Path) -> dict:
    """The checkpoint of ``path`` with every tensor replaced by its ``TensorInfo``: reads only the file's header, so
    it is cheap for any checkpoint size. Raises as ``load_checkpoint_file`` does."""
    path = Path(path)
    try:
        with _opened(path, "cpu") as handle:
            header = (handle.metadata() or {}).get(FORMAT_KEY)
            if header is None:
                raise ValueError(f"{path} is not a markovformer checkpoint (a safetensors file without '{FORMAT_KEY}')")
            names = set(handle.keys())

            def describe(name: Any) -> TensorInfo:
                if not isinstance(name, str) or name not in names:
                    raise ValueError(f"{path}: malformed checkpoint header: no tensor {name!r} in the file")
                piece = handle.get_slice(name)
                dtype = getattr(torch, _SAFETENSORS_DTYPES.get(piece.get_dtype(), ""), None)
                return TensorInfo(dtype if isinstance(dtype, torch.dtype) else None, tuple(piece.get_shape()))

            return _decode_header(header, path, describe)
    except SafetensorError as error:
        raise ValueError(f"{path} is not a markovformer checkpoint (not a safetensors file: {error})") from error


def _encode(value: Any, where: str, tensors: dict[str, torch.Tensor], seen_storages: set, ancestors: set) -> Any:
    """The JSON node for ``value`` (found at key path ``where``); tensors are moved into ``tensors``."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        return _encode(value.item(), where, tensors, seen_storages, ancestors)
    if isinstance(value, torch.Tensor):
        tensors[where] = _storable_tensor(value, where, seen_storages)
        return {"$tensor": where}
    if kind is torch.dtype:
        return {"$dtype": str(value).removeprefix("torch.")}
    if kind is torch.device:
        return {"$device": str(value)}
    if kind is torch.Size:
        return {"$size": list(value)}
    if kind not in (dict, OrderedDict, list, tuple):
        raise TypeError(f"{where}: cannot store {_describe(value)}")
    if id(value) in ancestors:
        raise TypeError(f"{where}: the {kind.__name__} contains itself")
    ancestors = ancestors | {id(value)}
    if kind in (list, tuple):
        items = [
            _encode(item, f"{where}[{index}]", tensors, seen_storages, ancestors) for index, item in enumerate(value)
        ]
        return items if kind is list else {"$tuple": items}
    pairs = []
    for key, item in value.items():
        if type(key) not in (str, int):
            raise TypeError(f"{where}: cannot store the key {key!r} ({_describe(key)}); keys must be str or int")
        pairs.append([key, _encode(item, f"{where}[{key!r}]", tensors, seen_storages, ancestors)])
    return {"$odict" if kind is OrderedDict else "$dict": pairs}


def _storable_tensor(tensor: torch.Tensor, where: str, seen_storages: set) -> torch.Tensor:
    if tensor.layout != torch.strided or tensor.device.type == "meta" or tensor.dtype not in _STORABLE_DTYPES:
        raise TypeError(
            f"{where}: cannot store a {tensor.layout} {tensor.dtype} tensor on {tensor.device} "
            "(dense tensors of safetensors dtypes only)"
        )
    tensor = tensor.detach().resolve_conj().resolve_neg().contiguous()
    storage = (tensor.device, tensor.untyped_storage().data_ptr())
    if storage[1] != 0:
        # safetensors refuses tensors that share memory; a copy keeps each one whole and independent on load.
        if storage in seen_storages:
            tensor = tensor.clone()
            storage = (tensor.device, tensor.untyped_storage().data_ptr())
        seen_storages.add(storage)
    return tensor


def _describe(value: Any) -> str:
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.LambdaType)):
        return "a function"
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    advice = " (convert it with torch.from_numpy)" if isinstance(value, np.ndarray) else ""
    return f"a value of type {name}{advice}"


def _device_name(map_location: Any) -> str | int:
    if map_location is None:
        return "cpu"
    if isinstance(map_location, torch.device):
        return str(map_location)
    if isinstance(map_location, (str, int)) and not isinstance(map_location, bool):
        return map_location
    raise TypeError(f"map_location must be a device (str, int or torch.device), got {map_location!r}")


def _read_tensor(handle: Any, names: set[str], name: Any, path: Path) -> torch.Tensor:
    if not isinstance(name, str) or name not in names:
        raise ValueError(f"{path}: malformed checkpoint header: no tensor {name!r} in the file")
    return handle.get_tensor(name)


def _decode_header(header: str, path: Path, read_tensor: Any) -> dict:
    try:
        document = json.loads(header, parse_constant=_reject_constant)
    except ValueError as error:
        raise ValueError(f"{path}: malformed checkpoint header: not valid JSON ({error})") from error
    except RecursionError:
        raise ValueError(f"{path}: malformed checkpoint header: nested too deeply") from None
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION or "root" not in document:
        version = document.get("version") if isinstance(document, dict) else None
        raise ValueError(
            f"{path}: unsupported checkpoint header (version {version!r}; this code reads {FORMAT_VERSION})"
        )
    try:
        checkpoint = _decode(document["root"], path, read_tensor)
    except RecursionError:
        raise ValueError(f"{path}: malformed checkpoint header: nested too deeply") from None
    if type(checkpoint) not in (dict, OrderedDict):
        raise ValueError(f"{path}: malformed checkpoint header: the root is not a dict")
    return checkpoint


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-standard JSON constant {name}")


def _decode(node: Any, path: Path, read_tensor: Any) -> Any:
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_decode(item, path, read_tensor) for item in node]
    if not (isinstance(node, dict) and len(node) == 1):
        raise ValueError(f"{path}: malformed checkpoint header: unexpected node {node!r:.200}")
    ((tag, body),) = node.items()
    if tag in ("$dict", "$odict") and isinstance(body, list):
        mapping = {} if tag == "$dict" else OrderedDict()
        for pair in body:
            if not (isinstance(pair, list) and len(pair) == 2 and type(pair[0]) in (str, int)):
                raise ValueError(f"{path}: malformed checkpoint header: bad dict entry {pair!r:.200}")
            mapping[pair[0]] = _decode(pair[1], path, read_tensor)
        return mapping
    if tag == "$tuple" and isinstance(body, list):
        return tuple(_decode(item, path, read_tensor) for item in body)
    if tag == "$float" and body in _NON_FINITE:
        return _NON_FINITE[body]
    if tag == "$tensor":
        return read_tensor(body)
    if tag == "$dtype" and isinstance(body, str) and isinstance(getattr(torch, body, None), torch.dtype):
        return getattr(torch, body)
    if tag == "$device" and isinstance(body, str):
        try:
            return torch.device(body)
        except RuntimeError as error:
            raise ValueError(f"{path}: malformed checkpoint header: bad device {body!r}") from error
    if tag == "$size" and isinstance(body, list) and all(type(n) is int for n in body):
        return torch.Size(body)
    raise ValueError(f"{path}: malformed checkpoint header: unexpected node {node!r:.200}")


__all__ = ["FORMAT_KEY", "STEP_CHECKPOINT", "TensorInfo", "load_checkpoint_file", "os_error_of_safetensors",
           "read_checkpoint_skeleton", "save_checkpoint_file", "step_checkpoints"]  # fmt: skip

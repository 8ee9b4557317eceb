"""The weights of a saved model folder, in one place: ``model.safetensors``, or transformers' shards of it
(``save_pretrained`` with a ``max_shard_size`` below the weights' size writes ``WEIGHTS_INDEX_NAME``, a
``{"weight_map": {tensor name: shard file name}}``, beside ``model-0000k-of-0000n.safetensors`` files). Safetensors
only: no pickle is read, not even one an index names."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import torch

from markovformer.strict_json import read_json_object

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"


def weights_file(directory: Path) -> Path | None:
    """The file that says which weights ``directory`` holds: its ``model.safetensors``, else its shards' index (as
    transformers, the whole file first); None when it has neither."""
    for name in (WEIGHTS_NAME, WEIGHTS_INDEX_NAME):
        if (directory / name).is_file():
            return directory / name
    return None


def read_weights_folder(directory: Path) -> dict[str, torch.Tensor]:
    """The tensors saved in ``directory`` (``weights_file``), on the CPU as stored. ValueError naming the file when
    there is none, a file is no whole safetensors file, or the index holds no weight_map of tensor names to shard
    files, names a shard that is no safetensors file in ``directory`` (a pickle, a path elsewhere) or lists other
    tensors than its shards hold (the shards of another save, a copy that missed some)."""
    weights = weights_file(directory)
    if weights is None:
        raise ValueError(f"{directory}: no {WEIGHTS_NAME} here (nor {WEIGHTS_INDEX_NAME} and its shards)")
    if weights.name == WEIGHTS_NAME:
        return _read_safetensors(weights)
    weight_map = read_json_object(weights, "a sharded model's index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(name, str) and isinstance(shard, str) for name, shard in weight_map.items()):  # fmt: skip
        raise ValueError(f"{weights} holds no weight_map of tensor names to shard file names")
    stored, unlisted = {}, set()
    for shard in sorted(set(weight_map.values())):
        if Path(shard).name != shard or not shard.endswith(".safetensors") or not (directory / shard).is_file():
            raise ValueError(f"{weights} names the shard {shard!r}, which is no safetensors file in that folder (only "
                             f"those are read)")  # fmt: skip
        for name, tensor in _read_safetensors(directory / shard).items():
            if weight_map.get(name) == shard:
                stored[name] = tensor
            else:
                unlisted.add(name)
    differ = sorted(unlisted | (weight_map.keys() - stored.keys()))
    if differ:
        listed = ", ".join(differ[:3]) + (f", ... ({len(differ)} in all)" if len(differ) > 3 else "")
        raise ValueError(f"{weights} lists other tensors than its shards hold, each in the shard it names: {listed}")
    return stored


def tied_names(model: torch.nn.Module) -> dict[str, str]:
    """{each state-dict name of a tensor that ``model`` holds under several names (tied weights): the first of them in
    name order}. A save keeps one of them: markovformer's (safetensors' ``save_model``) that first one,
    ``transformers``' another (a language model's ``model.embed.weight`` where ours keeps ``lm_head.weight``). The
    one place ties are worked out: loading a save (its other names read the kept one), init_from and the digests."""
    names: dict[tuple, list[str]] = {}
    for name, tensor in model.state_dict().items():
        if tensor.is_meta:  # every meta tensor's pointer is 0: all tensors of one shape would read as tied
            raise ValueError(f"tied_names: {name} is on the meta device, where tensors have no storage to share; "
                             "build the model on a real device")
        if tensor.numel():  # (empty tensors share no storage, whatever their pointers)
            names.setdefault((tensor.data_ptr(), tensor.dtype, tuple(tensor.shape)), []).append(name)
    return {name: min(group) for group in names.values() if len(group) > 1 for name in group}


def tensors_sha256(tensors: dict[str, torch.Tensor], tied: Mapping[str, str] | None = None) -> str:
    """The SHA-256 (hex) of ``tensors``: for each, in name order, its ``[name, dtype, shape]`` as JSON, then its bytes.
    It names the weights themselves, whichever files held them (one or shards, a final model or a checkpoint): what
    init_from records it took, and what a run's model/fingerprint.json holds beside its files' digests. ``tied``
    (``tied_names`` of the model they are weights of): a tied tensor counts under the first of its names, whichever
    one it was stored under (unless that one is stored too)."""
    tied = tied or {}
    named = {name if tied.get(name, name) in tensors else tied[name]: tensor for name, tensor in tensors.items()}
    digest = hashlib.sha256()
    for name in sorted(named):
        tensor = named[name].detach().cpu().contiguous()
        digest.update(json.dumps([name, str(tensor.dtype), list(tensor.shape)]).encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``path``; ValueError naming it when it cannot be read."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except SafetensorError as error:  # cut short by a copy or a killed save
        raise ValueError(f"{path} is not a readable safetensors file: {error}") from error


__all__ = ["WEIGHTS_INDEX_NAME", "WEIGHTS_NAME", "read_weights_folder", "tensors_sha256", "tied_names",
           "weights_file"]

import json
import math
import pickle
import struct
from collections import OrderedDict

import lightning as L
import numpy as np
import pytest
import safetensors.torch
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from safetensors import safe_open
from torch.utils.data import DataLoader, TensorDataset

from markovformer.training import checkpoint as checkpoint_module
from markovformer.training.checkpoint import (
    FORMAT_KEY,
    load_checkpoint_file,
    read_checkpoint_skeleton,
    save_checkpoint_file,
)
from markovformer.training.checkpoint_io import SafetensorsCheckpointIO


def assert_identical(expected, actual, where="checkpoint"):
    """Equal values of exactly the same types, dict keys (and their types and order) included; nan == nan."""
    assert type(actual) is type(expected), f"{where}: {type(actual)} != {type(expected)}"
    if isinstance(expected, dict):
        assert [(type(k), k) for k in actual] == [(type(k), k) for k in expected], where
        for key in expected:
            assert_identical(expected[key], actual[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for index, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_identical(e, a, f"{where}[{index}]")
    elif isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, where
        assert actual.device.type == "cpu" and not actual.requires_grad, where
        assert torch.equal(actual.isnan(), expected.isnan()) if expected.is_floating_point() else True, where
        finite = ~expected.isnan() if expected.is_floating_point() else torch.ones_like(expected, dtype=torch.bool)
        assert torch.equal(actual[finite], expected.detach()[finite]), where
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual), where
    elif isinstance(expected, float):
        assert actual == expected and math.copysign(1, actual) == math.copysign(1, expected), where
    else:
        assert actual == expected, where


def every_supported_type() -> dict:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {
        "epoch": 3,
        "huge": 2**70,
        "flag": True,
        "none": None,
        "text": 'ünïcode "quoted" {$tensor}',
        "floats": [0.1, -0.0, 1e300, math.nan, math.inf, -math.inf],
        "empty": {"list": [], "tuple": (), "dict": {}},
        "int_keys": {0: "zero", 1: {"1": "string one", 1: "int one"}, -5: [(1, 2.5), ("a", None)]},
        "nested_tuple": ((1, (2, (3,))), [True, False]),
        "ordered": OrderedDict([("b", 1), ("a", torch.ones(2))]),
        "torch_values": [torch.bfloat16, torch.int64, torch.device("cpu"), torch.device("cuda", 1), torch.Size([2, 3])],
        "tensors": {
            "bf16": torch.tensor([1.5, -2.25, 3e38], dtype=torch.bfloat16),
            "bool": torch.tensor([[True, False], [False, True]]),
            "uint8": torch.tensor([0, 255, 7], dtype=torch.uint8),
            "int64": torch.tensor([-(2**62), 0, 2**62]),
            "scalar": torch.tensor(2.5, dtype=torch.float64),
            "nan_inf": torch.tensor([math.nan, math.inf, -math.inf, 0.0]),
            "empty": torch.zeros(0, 3),
            "transposed": base.t(),
            "slice": base[1],
            "whole": base,
            "grad": torch.ones(2, requires_grad=True) * 3,
        },
    }


def test_round_trip_of_every_supported_type_is_exact(tmp_path):
    original = every_supported_type()
    save_checkpoint_file(original, tmp_path / "c.ckpt")
    loaded = load_checkpoint_file(tmp_path / "c.ckpt")
    assert_identical(original, loaded)
    # tensors that shared storage come back independent
    loaded["tensors"]["whole"][1] = -1
    assert torch.equal(loaded["tensors"]["slice"], torch.tensor([4.0, 5, 6, 7]))


def test_numpy_scalars_become_python_numbers(tmp_path):
    save_checkpoint_file({"a": np.float32(1.5), "b": np.int64(-3), "c": np.bool_(True)}, tmp_path / "c.ckpt")
    assert_identical({"a": 1.5, "b": -3, "c": True}, load_checkpoint_file(tmp_path / "c.ckpt"))


def test_on_disk_layout_tensors_by_key_path_and_json_skeleton_in_metadata(tmp_path):
    save_checkpoint_file({"state": {0: {"exp_avg": torch.ones(2)}}, "lr": math.inf, "betas": (0.9,)}, tmp_path / "c")
    with safe_open(str(tmp_path / "c"), framework="pt") as handle:
        assert set(handle.keys()) == {"checkpoint['state'][0]['exp_avg']"}
        skeleton = json.loads(handle.metadata()[FORMAT_KEY])
    assert skeleton == {
        "version": 1,
        "root": {"$dict": [
            ["state", {"$dict": [[0, {"$dict": [["exp_avg", {"$tensor": "checkpoint['state'][0]['exp_avg']"}]]}]]}],
            ["lr", {"$float": "inf"}],
            ["betas", {"$tuple": [0.9]}],
        ]},
    }  # fmt: skip


def test_map_location(tmp_path):
    save_checkpoint_file({"w": torch.ones(2)}, tmp_path / "c.ckpt")
    assert load_checkpoint_file(tmp_path / "c.ckpt", map_location=torch.device("cpu"))["w"].device.type == "cpu"
    assert load_checkpoint_file(tmp_path / "c.ckpt", map_location=None)["w"].device.type == "cpu"
    with pytest.raises(TypeError, match="map_location"):
        load_checkpoint_file(tmp_path / "c.ckpt", map_location=lambda storage, location: storage)


def test_adamw_and_lambdalr_state_round_trip_gives_identical_next_steps(tmp_path):
    torch.manual_seed(0)
    target = torch.randn(5, 3)

    def make(values):
        weight = torch.nn.Parameter(values.clone())
        optimizer = torch.optim.AdamW([weight], lr=0.05, weight_decay=0.1)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
        return weight, optimizer, scheduler

    def step(weight, optimizer, scheduler):
        optimizer.zero_grad()
        ((weight - target) ** 3).sum().backward()
        optimizer.step()
        scheduler.step()

    weight, optimizer, scheduler = make(torch.randn(5, 3))
    for _ in range(3):
        step(weight, optimizer, scheduler)
    saved = {"weight": weight, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
    save_checkpoint_file(saved, tmp_path / "c.ckpt")
    loaded = load_checkpoint_file(tmp_path / "c.ckpt")
    assert_identical(optimizer.state_dict(), loaded["optimizer"])
    assert_identical(scheduler.state_dict(), loaded["scheduler"])

    restored = make(loaded["weight"])
    restored[1].load_state_dict(loaded["optimizer"])
    restored[2].load_state_dict(loaded["scheduler"])
    fresh = make(weight.detach())  # same weights, no optimiser state: must diverge, or the test proves nothing
    for _ in range(2):
        step(weight, optimizer, scheduler)
        step(*restored)
        step(*fresh)
    assert torch.equal(restored[0], weight)
    assert restored[1].param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    assert not torch.equal(fresh[0], weight)


@pytest.mark.parametrize(
    ("checkpoint", "message"),
    [
        ({"callbacks": {"X": {"fn": lambda: 0}}}, r"checkpoint\['callbacks'\]\['X'\]\['fn'\]: cannot store a function"),
        ({"state": {0: [1, object()]}}, r"checkpoint\['state'\]\[0\]\[1\]: cannot store a value of type object"),
        ({"a": np.zeros(2)}, r"checkpoint\['a'\]: cannot store a value of type numpy.ndarray .*torch.from_numpy"),
        ({"a": {1, 2}}, r"checkpoint\['a'\]: cannot store a value of type set"),
        ({"a": {(1, 2): 3}}, r"checkpoint\['a'\]: cannot store the key \(1, 2\)"),
        ({"a": [torch.zeros(2, dtype=torch.complex128)]}, r"checkpoint\['a'\]\[0\]: cannot store .*complex128"),
        ({"a": torch.eye(2).to_sparse()}, r"checkpoint\['a'\]: cannot store a torch.sparse_coo"),
    ],
)
def test_unsupported_values_raise_type_error_naming_the_key_path(tmp_path, checkpoint, message):
    with pytest.raises(TypeError, match=message):
        save_checkpoint_file(checkpoint, tmp_path / "c.ckpt")
    assert list(tmp_path.iterdir()) == []


def test_a_structure_containing_itself_raises(tmp_path):
    loop = [1]
    loop.append(loop)
    with pytest.raises(TypeError, match=r"checkpoint\['a'\]\[1\]: the list contains itself"):
        save_checkpoint_file({"a": loop}, tmp_path / "c.ckpt")


def test_files_that_are_not_our_checkpoints_raise_value_error_naming_the_path(tmp_path):
    safetensors.torch.save_file({"w": torch.ones(2)}, tmp_path / "plain.safetensors")
    (tmp_path / "garbage.ckpt").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all, no")
    (tmp_path / "tiny.ckpt").write_bytes(b"abc")
    torch.save({"w": torch.ones(2)}, tmp_path / "pickled.ckpt")
    for name in ("plain.safetensors", "garbage.ckpt", "tiny.ckpt", "pickled.ckpt"):
        with pytest.raises(ValueError, match=f"{tmp_path / name} is not a markovformer checkpoint"):
            load_checkpoint_file(tmp_path / name)
    with pytest.raises(FileNotFoundError, match="missing.ckpt"):
        load_checkpoint_file(tmp_path / "missing.ckpt")


def test_malformed_header_raises_value_error(tmp_path):
    for header in ("{", '{"version": 2, "root": {"$dict": []}}', '{"version": 1, "root": {"$nope": 1}}',
                   '{"version": 1, "root": {"$dict": [["a", {"$tensor": "absent"}]]}}'):  # fmt: skip
        safetensors.torch.save_file({"w": torch.ones(1)}, tmp_path / "c.ckpt", metadata={FORMAT_KEY: header})
        with pytest.raises(ValueError, match=str(tmp_path / "c.ckpt")):
            load_checkpoint_file(tmp_path / "c.ckpt")


def _root(entries: str) -> str:
    return '{"version": 1, "root": ' + entries + "}"


@pytest.mark.parametrize("header, said", [
    (_root("[" * 5000 + "]" * 5000), "nested too deeply"),  # too deep for the JSON parser
    (_root('{"$dict": [["a", ' + "[" * 700 + "]" * 700 + "]]}"), "nested too deeply"),  # parsed; too deep to decode
    (_root("[]"), "the root is not a dict"),
    (_root('{"$dict": [["a"]]}'), "bad dict entry ['a']"),
    (_root('{"$dict": [[1.5, 0]]}'), "bad dict entry [1.5, 0]"),
    (_root('{"$dict": [], "x": 1}'), "unexpected node {'$dict': [], 'x': 1}"),
    (_root('{"$dict": [["d", {"$device": "warp:9"}]]}'), "bad device 'warp:9'"),
    (_root('{"$dict": [["n", NaN]]}'), "not valid JSON (non-standard JSON constant NaN)"),
])  # fmt: skip
def test_each_malformed_header_is_one_value_error_saying_what_is_wrong(tmp_path, header, said):
    """Read whole or as a skeleton (header only), a header no save writes is a ValueError naming the file and the
    fault, never a RecursionError, TypeError or a tensor made of a bad value."""
    path = tmp_path / "c.ckpt"
    safetensors.torch.save_file({"w": torch.ones(1)}, path, metadata={FORMAT_KEY: header})
    for read in (load_checkpoint_file, read_checkpoint_skeleton):
        with pytest.raises(ValueError) as raised:
            read(path)
        assert str(raised.value).startswith(f"{path}: malformed checkpoint header: {said}")


def test_a_skeleton_of_a_file_that_is_no_checkpoint_or_names_an_absent_tensor_is_refused(tmp_path):
    safetensors.torch.save_file({"w": torch.ones(2)}, tmp_path / "plain.safetensors")
    with pytest.raises(ValueError, match=f"^{tmp_path / 'plain.safetensors'} is not a markovformer checkpoint "):
        read_checkpoint_skeleton(tmp_path / "plain.safetensors")
    with pytest.raises(FileNotFoundError, match=f"^{tmp_path / 'missing.ckpt'}: no checkpoint file here$"):
        read_checkpoint_skeleton(tmp_path / "missing.ckpt")
    header = _root('{"$dict": [["a", {"$tensor": "absent"}]]}')
    safetensors.torch.save_file({"w": torch.ones(1)}, tmp_path / "c.ckpt", metadata={FORMAT_KEY: header})
    with pytest.raises(ValueError, match=r"malformed checkpoint header: no tensor 'absent' in the file$"):
        read_checkpoint_skeleton(tmp_path / "c.ckpt")


def test_a_checkpoint_that_is_not_a_dict_is_refused_before_anything_is_written(tmp_path):
    for root in ([1, 2], OrderedDict, "text"):
        with pytest.raises(TypeError, match="^checkpoint: expected a dict, got "):
            save_checkpoint_file(root, tmp_path / "c.ckpt")
    assert list(tmp_path.iterdir()) == []


def test_a_crash_during_the_write_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    previous = {"step": 1, "w": torch.arange(4.0)}
    save_checkpoint_file(previous, path)

    def crash_half_way(tensors, filename, metadata=None):
        with open(filename, "wb") as handle:
            handle.write(b"\x00" * 100)
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module, "save_file", crash_half_way)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint_file({"step": 2, "w": torch.zeros(4)}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left behind
    assert_identical(previous, load_checkpoint_file(path))


def test_no_pickle_anywhere(tmp_path, monkeypatch):
    path = tmp_path / "c.ckpt"
    save_checkpoint_file(every_supported_type(), path)
    data = path.read_bytes()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_length])  # the whole header is JSON, no pickle opcodes
    assert not data.startswith((b"\x80", b"PK"))  # neither a raw pickle nor torch's zip-of-pickles
    assert json.loads(header["__metadata__"][FORMAT_KEY])["version"] == 1
    with safe_open(str(path), framework="pt") as handle:
        assert len(list(handle.keys())) == 12

    def forbidden(*args, **kwargs):
        raise AssertionError("unpickling during load")

    for module, name in ((torch, "load"), (torch.serialization, "load"), (pickle, "load"), (pickle, "loads")):
        monkeypatch.setattr(module, name, forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    assert_identical(every_supported_type(), load_checkpoint_file(path))


class TinyRegression(L.LightningModule):
    """Two parameters, AdamW and a step-wise LambdaLR: resuming must restore both optimiser and schedule."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([0.5, -0.3]))

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        return ((inputs @ self.weight - targets) ** 2).mean()

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.1, weight_decay=0.05)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def fit(max_steps, checkpoint_dir=None, ckpt_path=None) -> TinyRegression:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(6, 2, generator=generator)
    targets = inputs @ torch.tensor([1.0, 2.0]) + 0.1 * torch.randn(6, generator=generator)
    callbacks = (
        [ModelCheckpoint(dirpath=checkpoint_dir, every_n_train_steps=3, save_last=True)] if checkpoint_dir else []
    )
    trainer = L.Trainer(
        max_steps=max_steps,
        plugins=[SafetensorsCheckpointIO()],
        callbacks=callbacks,
        enable_checkpointing=bool(checkpoint_dir),
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        accelerator="cpu",
    )
    module = TinyRegression()
    trainer.fit(module, DataLoader(TensorDataset(inputs, targets), batch_size=2), ckpt_path=ckpt_path)
    return module


def test_lightning_writes_our_format_and_resumes_exactly(tmp_path):
    interrupted = fit(max_steps=6, checkpoint_dir=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["epoch=1-step=6.ckpt", "last.ckpt"]  # step 3's file was replaced: remove_checkpoint works
    for name in names:
        saved = load_checkpoint_file(tmp_path / name)
        assert saved["global_step"] == 6 and type(saved["optimizer_states"][0]["state"]) is dict
        assert torch.equal(saved["state_dict"]["weight"], interrupted.weight.detach())

    resumed = fit(max_steps=10, ckpt_path=tmp_path / "epoch=1-step=6.ckpt")
    uninterrupted = fit(max_steps=10)
    assert torch.equal(resumed.weight, uninterrupted.weight)
    assert not torch.equal(resumed.weight, interrupted.weight)

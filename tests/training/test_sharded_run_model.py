"""A run whose model/ holds its weights as transformers shards them (model.safetensors.index.json and its shards, no
model.safetensors): eval and generate read it as the whole file, and its fingerprint covers the shards' tensors."""

import json
import shutil

import pytest
import torch
import yaml
from conftest import TINY_RUN, one_line_error, run_in_process, shard_weights

from markovformer.training.runner import evaluate


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny finished run."""
    folder = tmp_path_factory.mktemp("sharded_run")
    (folder / "tiny.yaml").write_text(yaml.safe_dump(TINY_RUN))
    done = run_in_process("train", "tiny.yaml", "output_dir=run", "trainer.max_steps=10", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder / "run"


@pytest.fixture
def sharded(trained, tmp_path):
    """A copy of the run, its model/ weights in 3 shards."""
    shutil.copytree(trained, tmp_path / "sharded")
    shard_weights(tmp_path / "sharded" / "model", parts=3)
    return tmp_path / "sharded"


def test_eval_and_generate_of_a_run_whose_model_is_sharded_give_what_the_whole_file_gives(trained, sharded, tmp_path):
    """They refused it: "model: no model.safetensors here"."""
    assert evaluate(sharded)["metrics"]["loss"] == evaluate(trained)["metrics"]["loss"]
    greedy = ["--prompt", "1 2", "--temperature", "0", "--max-new-tokens", "30"]
    outputs = [run_in_process("generate", str(run), *greedy, cwd=tmp_path) for run in (trained, sharded)]
    assert [done.returncode for done in outputs] == [0, 0], outputs[1].stderr
    assert outputs[1].stdout == outputs[0].stdout and len(outputs[0].stdout.split()) >= 30


def test_shards_holding_other_tensors_than_the_run_saved_are_refused(sharded, tmp_path):
    """The fingerprint's digest of model.safetensors cannot cover shards: its tensors' digest does. A tensor edited in
    a shard (a copy from another save, a hand edit) is refused, as an edited model.safetensors is."""
    from safetensors.torch import load_file, save_file

    shard = sharded / "model" / "model-00002-of-00003.safetensors"
    tensors = load_file(shard)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1
    save_file(tensors, shard, metadata={"format": "pt"})
    one_line_error(run_in_process("eval", str(sharded), cwd=tmp_path), "model.safetensors.index.json",
                   "does not match the run's model")  # fmt: skip


def test_shards_under_a_fingerprint_without_the_tensors_digest_are_refused_naming_what_to_restore(sharded, tmp_path):
    """A record written before the tensors' digest names only model.safetensors' bytes, which shards cannot show."""
    path = sharded / "model" / "fingerprint.json"
    record = json.loads(path.read_text())
    record.pop("tensors_sha256")
    path.write_text(json.dumps(record))
    one_line_error(run_in_process("eval", str(sharded), cwd=tmp_path), "model.safetensors.index.json",
                   "restore model.safetensors")  # fmt: skip


def test_the_fingerprints_tensor_digest_is_the_saved_tensors(trained):
    """tensors_sha256 in fingerprint.json is the digest init_from records of the same weights (saved_weights)."""
    from markovformer.models.saved_weights import read_weights_folder, tensors_sha256

    record = json.loads((trained / "model" / "fingerprint.json").read_text())
    tensors = read_weights_folder(trained / "model")
    assert record["tensors_sha256"] == tensors_sha256(tensors)
    tensors[sorted(tensors)[0]] = torch.zeros_like(tensors[sorted(tensors)[0]])
    assert record["tensors_sha256"] != tensors_sha256(tensors)


def test_a_tied_weight_stored_under_its_other_name_is_the_run_s_weight(tmp_path):
    """A run of tied embeddings saves the weight as lm_head.weight (safetensors keeps the first name), transformers'
    save_pretrained as model.embed.weight: the run's model/ sharded by transformers was refused as other tensors
    ("does not match the run's model"), the digest naming the weight by the name it was stored under. The same
    weight changed is still refused."""
    pytest.importorskip("transformers")
    pytest.importorskip("markovformer.hf", exc_type=ImportError)
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY_RUN))
    done = run_in_process("train", "tiny.yaml", "output_dir=run", "trainer.max_steps=2", "trainer.eval_every=2",
                          "trainer.checkpoint_every=2", "model.tie_word_embeddings=true", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    model = tmp_path / "run" / "model"
    assert "lm_head.weight" in load_file(model / "model.safetensors")
    loss, config = evaluate(tmp_path / "run")["metrics"]["loss"], (model / "config.json").read_bytes()
    wrapper = AutoModelForCausalLM.from_pretrained(model)
    (model / "model.safetensors").unlink()
    wrapper.save_pretrained(model, max_shard_size="4KB")
    (model / "config.json").write_bytes(config)  # transformers writes its own; the run's is the one fingerprinted
    weight_map = json.loads((model / "model.safetensors.index.json").read_text())["weight_map"]
    assert "lm_head.weight" not in weight_map
    assert evaluate(tmp_path / "run")["metrics"]["loss"] == loss
    shard = model / weight_map["model.embed.weight"]
    tensors = load_file(shard)
    tensors["model.embed.weight"] = tensors["model.embed.weight"] + 1
    save_file(tensors, shard, metadata={"format": "pt"})
    one_line_error(run_in_process("eval", str(tmp_path / "run"), cwd=tmp_path), "model.safetensors.index.json",
                   "does not match the run's model")  # fmt: skip


def test_loading_a_run_reads_its_weights_once(trained, sharded, monkeypatch):
    """Each safetensors file of model/ is read once (whole, beside the digest of its bytes): the shards were read
    three times (their fingerprint, the tensors' check, the load), model.safetensors twice."""
    from markovformer.models import saved_weights
    from markovformer.training.run_dir import load_trained_run

    read, reads = saved_weights._read_safetensors, []
    monkeypatch.setattr(saved_weights, "_read_safetensors", lambda path: reads.append(path.name) or read(path))
    for run, files in ((trained, ["model.safetensors"]), (sharded, [f"model-0000{k}-of-00003.safetensors"
                                                                     for k in (1, 2, 3)])):  # fmt: skip
        reads.clear()
        load_trained_run(run)
        assert sorted(reads) == files


def test_the_ties_of_a_model_are_its_shared_tensors_and_a_meta_model_is_refused():
    """tied_names by storage: a tied language model's two names of one tensor, nothing for an untied one; on the meta
    device every pointer is 0, so every pair of same-shape tensors would read as tied: refused, naming a tensor."""
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
    from markovformer.models.saved_weights import tied_names

    def model(tie: bool) -> MarkovianTransformerForCausalLM:
        return MarkovianTransformerForCausalLM(MarkovianTransformerConfig(
            vocab_size=11, d_model=8, n_heads=2, n_layers=2, tie_word_embeddings=tie))

    assert tied_names(model(True)) == {"lm_head.weight": "lm_head.weight", "model.embed.weight": "lm_head.weight"}
    assert tied_names(model(False)) == {}
    with torch.device("meta"), pytest.raises(ValueError, match=r"tied_names: \S+ is on the meta device"):
        tied_names(model(True))

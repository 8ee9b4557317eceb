"""Models saved before the renames of issue 18 (class names, ``max_position``, ``scan_backend``, scan Markov's
``context_length`` now ``order``; softmax layers that ignored ``scope``) load under the new names and give the
outputs they gave then; saved again, they round-trip."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovTranslatorForConditionalGeneration,
    ScanMarkovConfig,
    ScanMarkovForCausalLM,
    VariationalMarkovTransformer,
)

FIXTURES = Path(__file__).parent / "fixtures"
LEGACY = FIXTURES / "legacy"
sys.path.insert(0, str(FIXTURES))
from legacy_weights import legacy_weights  # noqa: E402  (shared with the writer, which runs on the old sources)

FAMILIES = {
    "markovian_learned": MarkovianTransformerForCausalLM,
    "markovian_softmax": MarkovianTransformerForCausalLM,
    "scan_markov": ScanMarkovForCausalLM,
    "markov_translator": MarkovTranslatorForConditionalGeneration,
    "vmt": VariationalMarkovTransformer,
}


def _saved_by_the_old_code(name: str, directory: Path) -> Path:
    """The directory the old code's save_pretrained wrote: its config.json and its weights (made from tensors.json)."""
    shutil.copy(LEGACY / name / "config.json", directory / "config.json")
    tensors = json.loads((LEGACY / name / "tensors.json").read_text())
    save_file(legacy_weights(tensors), str(directory / "model.safetensors"))
    return directory


def _expected(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    expected = json.loads((LEGACY / name / "expected.json").read_text())
    return torch.tensor(expected["input_ids"]), torch.tensor(expected["output"])


def _output(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        if isinstance(model, MarkovTranslatorForConditionalGeneration):
            return model(ids, ids[:, :5]).logits
        if isinstance(model, VariationalMarkovTransformer):
            return model.encode(ids)
        return model(ids).logits


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_checkpoint_of_the_old_code_loads_with_its_outputs(name, tmp_path):
    (tmp_path / "old").mkdir()
    model = FAMILIES[name].from_pretrained(_saved_by_the_old_code(name, tmp_path / "old")).eval()
    input_ids, output = _expected(name)
    torch.testing.assert_close(_output(model, input_ids), output, rtol=0, atol=1e-6)
    model.save_pretrained(tmp_path / "new")  # the new format: new names, and it loads back to the same outputs
    again = FAMILIES[name].from_pretrained(tmp_path / "new").eval()
    assert again.config == model.config
    assert torch.equal(_output(again, input_ids), _output(model, input_ids))


def test_old_names_in_the_files_are_what_the_rename_maps_translate(tmp_path):
    old = {name: _saved_by_the_old_code(name, Path(tmp_path.joinpath(name).mkdir() or tmp_path / name))
           for name in FAMILIES}  # fmt: skip
    written = {name: json.loads((LEGACY / name / "config.json").read_text()) for name in FAMILIES}
    assert written["scan_markov"]["architecture"] == "ScanMarkovLM" and "scan_backend" in written["scan_markov"]
    assert written["markov_translator"]["architecture"] == "MarkovTranslator"
    assert "max_position" in written["markovian_learned"]
    assert written["markovian_softmax"]["scope"] == "local"  # ignored by softmax then, dropped on load now
    assert MarkovianTransformerForCausalLM.from_pretrained(old["markovian_softmax"]).config.scope == "global"
    assert MarkovianTransformerForCausalLM.from_pretrained(old["markovian_learned"]).config.max_positions == 16
    assert ScanMarkovForCausalLM.from_pretrained(old["scan_markov"]).config.backend == "naive"
    assert written["scan_markov"]["context_length"] == 3 and "order" not in written["scan_markov"]
    assert ScanMarkovForCausalLM.from_pretrained(old["scan_markov"]).config.order == 3


def test_rename_maps_refuse_both_spellings_and_apply_to_run_config_sections():
    with pytest.raises(ValueError, match="'max_position' is the old name of 'max_positions'"):
        MarkovianTransformerConfig.from_dict(dict(vocab_size=5, max_position=8, max_positions=8))
    assert ScanMarkovConfig.upgrade_keys({"scan_backend": "naive", "vocab_size": 3}) == {"backend": "naive",
                                                                                          "vocab_size": 3}
    assert ScanMarkovConfig.upgrade_keys({"context_length": 4}) == {"order": 4}
    with pytest.raises(ValueError, match="'context_length' is the old name of 'order'; give only 'order'"):
        ScanMarkovConfig.from_dict(dict(vocab_size=5, max_positions=8, context_length=3, order=3))

"""The Hugging Face behaviours of issue 30, through transformers' public API: problem types, backbone <-> head
loading, hidden states and attentions, embeddings, initialisation, config names, checkpointing, the cache of
``generate``, seq2seq ``generate`` and the tokenizer. Skipped when the ``hf`` extra is absent."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is absent: pip install 'markovformer[hf]'")
import markovformer.hf  # noqa: E402,F401 - registers the Auto classes
from markovformer.hf import HF_CLASSES, HF_CONFIGS  # noqa: E402

SMALL = dict(vocab_size=11, d_model=16, n_layers=2, n_heads=2, max_order=2)


def _hf(task: str, **options):
    torch.manual_seed(0)
    return HF_CLASSES["markovian_transformer", task][1](HF_CONFIGS["markovian_transformer"](**{**SMALL, **options}))


def _ids(batch: int = 3, length: int = 7, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 11, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("num_labels, problem, labels, loss_class", [
    (1, None, torch.tensor([0.5, -1.0, 2.0]), torch.nn.MSELoss),
    (3, "regression", torch.randn(3, 3), torch.nn.MSELoss),
    (3, None, torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 1.0]]), torch.nn.BCEWithLogitsLoss),
    (3, "multi_label_classification", torch.tensor([[1, 0, 1], [0, 0, 0], [0, 1, 1]]), torch.nn.BCEWithLogitsLoss),
    (3, None, torch.tensor([2, 0, 1]), torch.nn.CrossEntropyLoss),
    (3, "single_label_classification", torch.tensor([2, 0, 1]), torch.nn.CrossEntropyLoss),
], ids=["one_label_regression", "regression", "multi_label_inferred", "multi_label", "single_label_inferred",
        "single_label"])  # fmt: skip
def test_sequence_classification_losses_follow_problem_type(num_labels, problem, labels, loss_class):
    model = _hf("sequence_classification", num_labels=num_labels, problem_type=problem).eval()
    output = model(input_ids=_ids(), labels=labels)
    logits = output.logits.squeeze(-1) if num_labels == 1 else output.logits
    target = labels.float() if loss_class is not torch.nn.CrossEntropyLoss else labels
    torch.testing.assert_close(output.loss, loss_class()(logits, target))


def _perturbed(model):
    with torch.no_grad():  # away from the init, so that a tensor left unloaded would show
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    return model.eval()


@pytest.mark.parametrize("source", ["markovformer", "transformers"])
def test_a_backbone_checkpoint_loads_into_a_classifier_with_its_trained_backbone(source, tmp_path):
    backbone = _perturbed(_hf("backbone", num_labels=3))
    if source == "markovformer":
        backbone.markovformer.save_pretrained(tmp_path)
    else:
        backbone.save_pretrained(tmp_path)
    classifier, info = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path,
                                                                                        output_loading_info=True)
    assert info["missing_keys"] == {"classifier.weight", "classifier.bias"} and not info["unexpected_keys"]
    for name, tensor in backbone.state_dict().items():
        assert torch.equal(classifier.state_dict()["model." + name], tensor), name
    assert torch.equal(classifier.classifier.bias, torch.zeros(3))  # the head newly initialised
    assert 0.005 < float(classifier.classifier.weight.detach().std()) < 0.05
    ids = _ids()
    with torch.no_grad():
        assert torch.equal(classifier.eval().model(ids).last_hidden_state,
                           backbone(input_ids=ids).last_hidden_state)  # fmt: skip


def test_a_head_checkpoint_loads_into_the_backbone_and_a_wrong_backbone_still_raises(tmp_path):
    causal = _perturbed(_hf("causal_lm"))
    causal.save_pretrained(tmp_path / "causal")
    backbone, info = transformers.AutoModel.from_pretrained(tmp_path / "causal", output_loading_info=True)
    assert info["unexpected_keys"] == {"lm_head.weight"} and not info["missing_keys"]
    ids = _ids()
    with torch.no_grad():
        assert torch.equal(backbone(input_ids=ids).last_hidden_state, causal.model(ids).last_hidden_state)
    _hf("backbone", n_layers=3).save_pretrained(tmp_path / "three")
    config = tmp_path / "three" / "config.json"
    config.write_text(config.read_text().replace('"n_layers": 3', '"n_layers": 2'))  # weights of one more layer
    with pytest.raises(ValueError, match="checkpoint's blocks\\.2\\.[^ ]+, .* are not in the model"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "three")

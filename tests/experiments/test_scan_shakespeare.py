"""``scan-shakespeare``: its Scan Markov run is configs/scan_shakespeare.yaml, its n-gram score is the engine's
validation mixture, its sampler never draws padding, and (slow) the quick run writes the whole report."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from markdown_tables import markdown_tables  # beside this file

from markovformer.data.collate import PAD_ID, collate
from markovformer.data.readers.text import text_windows
from markovformer.experiments import scan_shakespeare
from markovformer.experiments.scan_shakespeare import ScanShakespeareSettings, ngram_losses, run_config, sample_text
from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM
from markovformer.training.config_files import shipped_config
from markovformer.training.run_config import TrainerConfig, load_yaml
from markovformer.training.tasks import CausalLMOptions, build_task

ROOT = Path(__file__).resolve().parents[2]


def _has_tiny_shakespeare() -> bool:
    try:
        return scan_shakespeare.find_data().is_file()
    except ValueError:
        return False


def test_the_scan_markov_cell_is_the_example_config():
    settings = ScanShakespeareSettings()
    cell = run_config("scan_markov", "data/tiny_shakespeare.txt", "runs/scan_shakespeare", settings)
    config = load_yaml(shipped_config("scan_shakespeare"))
    assert {k: v for k, v in cell.items() if k != "trainer"} == {k: v for k, v in config.items() if k != "trainer"}
    assert cell["trainer"] == config["trainer"]


def test_the_transformers_are_about_the_scan_models_size():
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import build_model

    sizes = {}
    for model in scan_shakespeare.MODELS:
        config = resolve_run_config(run_config(model, "unused.txt", "unused", ScanShakespeareSettings()))
        sizes[model] = build_model(config, {"vocab_size": 66}).num_parameters()
    assert all(abs(size / sizes["scan_markov"] - 1) < 0.1 for size in sizes.values()), sizes


def test_ngram_losses_are_the_engines_validation_mixture():
    torch.manual_seed(0)
    config = ScanMarkovConfig(vocab_size=9, d_model=16, ffn_mult=2, max_positions=5, order=5)
    model = ScanMarkovForCausalLM(config)
    tokens = torch.randint(1, 9, (300,), generator=torch.Generator().manual_seed(1))
    contexts = (2, 3, 5)
    task = build_task("causal_lm", TrainerConfig(), options=CausalLMOptions(contexts))
    metrics = task.new_metrics()
    examples = text_windows(tokens, seq_len=20, overlap=5)
    with torch.no_grad():
        for start in range(0, len(examples), 4):
            batch = collate(examples[start : start + 4])
            task.score(model.eval(), batch, metrics)
    engine = metrics.compute()
    losses = ngram_losses(model, tokens.tolist(), contexts, first_target=5, batch_size=64)
    for n in contexts:
        assert losses[n] == pytest.approx(engine[f"loss_n{n}"], rel=1e-5)
    with pytest.raises(ValueError, match="first_target=3"):
        ngram_losses(model, tokens.tolist(), contexts, first_target=3)


def test_samples_never_draw_padding_and_repeat_with_the_seed():
    class PadLover(torch.nn.Module):
        """Logits favouring the padding id, then token 3; records the widest context it was shown."""

        widest = 0

        def forward(self, ids):
            self.widest = max(self.widest, ids.shape[1])
            logits = torch.zeros(ids.shape[0], ids.shape[1], 5)
            logits[..., PAD_ID], logits[..., 3] = 10.0, 2.0
            return SimpleNamespace(logits=logits)

    tokenizer = SimpleNamespace(encode=lambda text: [1 + "ab".index(c) for c in text],
                                decode=lambda ids: "".join("?abcd"[i] for i in ids))  # fmt: skip
    model = PadLover()
    text = sample_text(model, tokenizer, "abba", context=3, length=40, temperature=1.0, top_p=1.0, seed=2)
    assert text.startswith("abba") and len(text) == 44 and "?" not in text and model.widest == 3
    assert text == sample_text(model, tokenizer, "abba", 3, 40, 1.0, 1.0, seed=2)
    assert sample_text(model, tokenizer, "ab", 3, 5, temperature=0.0, top_p=1.0) == "abccccc"
    # `--set temperature=0` keeps the settings' nucleus (0.9), which greedy decoding does not read
    assert sample_text(model, tokenizer, "ab", 3, 5, temperature=0.0, top_p=0.9) == "abccccc"


def test_a_nucleus_typed_with_greedy_sampling_is_refused_naming_both_and_the_default_one_stands_by():
    """`--set temperature=0 top_p=0.5` sampled greedily, reading no nucleus, without a word: the settings took both.
    A sampling option the user types beside temperature=0 is refused naming both; the default nucleus (0.9) is not
    the user's, nor is a typed top_p=1 (no nucleus), nor a typed one beside a temperature that samples."""
    from markovformer.experiments.settings import configure
    from markovformer.training.run_config import ConfigError

    name = scan_shakespeare.NAME
    for base in (ScanShakespeareSettings(), scan_shakespeare.QUICK):
        with pytest.raises(ConfigError, match=rf"^{name}.top_p=0.5: {name}.temperature=0 \(greedy decoding\) does "
                                              rf"not sample, so top_p would be ignored; give one of them"):  # fmt: skip
            configure(base, {"temperature": 0, "top_p": 0.5}, name)
        assert configure(base, {"temperature": 0}, name).top_p == 0.9
        assert configure(base, {"temperature": 0, "top_p": 1}, name).top_p == 1
        assert configure(base, {"temperature": 0.5, "top_p": 0.5}, name).top_p == 0.5


def test_the_report_says_greedy_samples_are_greedy(monkeypatch, tmp_path, kept_figures):
    """`--set temperature=0` samples greedily, reading no nucleus: the report said "(temperature 0.0, nucleus 0.9;"
    of the settings' nucleus, which stands by; a temperature that samples names its nucleus."""
    from markovformer.plots import experiments as plots

    kept_figures(plots)
    text = tmp_path / "input.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 20, encoding="utf-8")
    monkeypatch.setattr(scan_shakespeare, "find_data", lambda: text)

    def cell(model, out_dir, settings, seed, log, data_digest):
        return {"model": model, "seed": seed, "run_dir": None, "losses": {str(n): 2.0 for n in (2, 3, 4, 5)},
                "mixture": 2.0, "targets": 100, "engine_val": {"loss": 2.0}, "steps": 10, "train_seconds": 1.0,
                "parameters": 10, "curve_steps": [10], "curve_loss": [2.0], "sample": "Follow those", "threads": 1}

    monkeypatch.setattr(scan_shakespeare, "train_cell", cell)
    for overrides, said in (({"temperature": 0}, "(greedy: temperature 0;"),
                            ({"temperature": 0.5}, "(temperature 0.5, nucleus 0.9;")):  # fmt: skip
        report = scan_shakespeare.run(tmp_path / "out", quick=True, seeds=(0,), overrides=overrides,
                                      log=lambda line: None)  # fmt: skip
        samples = next(line for line in report.read_text().splitlines() if line.startswith("Samples from"))
        assert said in samples and ("nucleus" in samples) == (overrides["temperature"] > 0), samples


@pytest.mark.slow
@pytest.mark.skipif(not _has_tiny_shakespeare(), reason="no Tiny Shakespeare here (markovformer data prepare ...)")
def test_quick_run_writes_the_table_samples_and_figure(tmp_path):
    lines = []
    report = scan_shakespeare.run(tmp_path, quick=True, seeds=None, overrides={}, log=lines.append)
    text = report.read_text()
    assert all(len(table) > 1 for table in markdown_tables(text))  # every table well formed, none empty
    for label in [*scan_shakespeare.LABELS.values(), "interpolated Kneser-Ney (reference)", "| 1.7170 |"]:
        assert label in text
    assert text.count("Follow those") >= len(scan_shakespeare.MODELS) + 1 and (tmp_path / "cross_entropy.png").is_file()
    cells = json.loads((tmp_path / "results.json").read_text())["cells"]
    assert {cell["model"] for cell in cells} == set(scan_shakespeare.MODELS)
    for cell in cells:
        assert cell["mixture"] == pytest.approx(sum(cell["losses"].values()) / 4)
        assert (Path(cell["run_dir"]) / "model").is_dir() and Path(cell["run_dir"]).parent == tmp_path / "runs"
    lines.clear()
    scan_shakespeare.run(tmp_path, quick=True, seeds=None, overrides={}, log=lines.append)  # every cell is reused
    assert sum("done earlier" in line for line in lines) == len(scan_shakespeare.MODELS)


def test_a_models_cell_is_read_back_when_another_models_budget_changes(monkeypatch, tmp_path, kept_figures):
    """A cell depends on its own model's steps (and batch), not the other models': a longer Transformer budget
    retrains the two Transformers alone (all four cells were keyed on every budget and trained again)."""
    from markovformer.plots import experiments as plots

    kept_figures(plots)
    text = tmp_path / "input.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 20, encoding="utf-8")
    monkeypatch.setattr(scan_shakespeare, "find_data", lambda: text)
    trained = []

    def cell(model, out_dir, settings, seed, log, data_digest):
        trained.append(model)
        return {"model": model, "seed": seed, "run_dir": None, "losses": {str(n): 2.0 for n in (2, 3, 4, 5)},
                "mixture": 2.0, "targets": 100, "engine_val": {"loss": 2.0}, "steps": 10, "train_seconds": 1.0,
                "parameters": 10, "curve_steps": [10], "curve_loss": [2.0], "sample": "Follow those", "threads": 1}

    monkeypatch.setattr(scan_shakespeare, "train_cell", cell)

    def run(**overrides):
        scan_shakespeare.run(tmp_path / "out", quick=True, seeds=(0,), overrides=overrides, log=lambda line: None)

    run()
    run(transformer_steps=200)
    assert trained[4:] == ["markovian_transformer", "softmax_transformer"]
    run(transformer_steps=200, scan_steps=200)
    assert trained[6:] == ["scan_markov"]
    run(transformer_steps=200, scan_steps=200, eval_chars=3000)  # scored on another span: every cell again
    assert trained[7:] == list(scan_shakespeare.MODELS)


def test_the_example_config_is_the_seeds_setup_and_the_kneser_ney_reference_is_spec_s():
    """SPEC 4: characters of Tiny Shakespeare, first 90 % train / last 10 % validation, contexts n = 2..5 in equal
    proportion (one n drawn uniformly per batch), label smoothing 0.1; interpolated Kneser-Ney scores 2.041 / 1.722 /
    1.566 / 1.539 nats at n = 2..5 and their mean, 1.717, on the mixture."""
    config = load_yaml(shipped_config("scan_shakespeare"))
    assert config["model_type"] == "scan_markov" and config["model"]["context_mode"] == "markov"
    assert config["data"]["tokenizer"] == "char" and config["data"]["fractions"] == [0.9, 0.1, 0.0]
    assert config["task_options"]["orders"] == [2, 3, 4, 5] and config["trainer"]["label_smoothing"] == 0.1
    assert scan_shakespeare.KNESER_NEY == {2: 2.041, 3: 1.722, 4: 1.566, 5: 1.539}
    assert scan_shakespeare.KNESER_NEY_MIXTURE == 1.717
    assert round(sum(scan_shakespeare.KNESER_NEY.values()) / 4, 3) == scan_shakespeare.KNESER_NEY_MIXTURE


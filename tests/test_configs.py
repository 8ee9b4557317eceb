"""The example configs in configs/: each is a valid run (model, data and trainer sections build their classes), the
demo YAML is the embedded demo run, the variants stay in step with what they vary, and the configs whose data needs
no files train for a few steps through the real runner."""

from __future__ import annotations

import copy
import json
import math
import random
import re
import typing
from pathlib import Path

import pytest
import torch
import yaml

from markovformer.data.collate import collate
from markovformer.data.sources import DATA_SOURCES, source_tasks
from markovformer.models.registry import MODEL_FAMILIES
from markovformer.training.demo import DEMO_CONFIG
from markovformer.training.run_config import RunConfig, build_dataclass, coerce, load_yaml, resolve_run_config
from markovformer.training.runner import build_data, build_model, train
from markovformer.training.tasks import model_inputs
from markovformer.training.trainer_config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "src/markovformer/configs"  # shipped as package data; configs/ in the clone links here
SHARED_DATA = ROOT / "../shared/data"  # where this checkout's Tiny Shakespeare lives; configs find it through
# $MARKOVFORMER_DATA as they would find the copy `markovformer data prepare tiny-shakespeare` writes into ./data
CONFIGS = sorted(CONFIG_DIR.glob("*.yaml"))
EXPECTED = {"causal_lm_chain", "hidden_order", "softmax_baseline", "text_char", "text_bpe", "dna_fasta",
            "time_series_csv", "scan_shakespeare", "scan_shakespeare_large", "mat_synthetic", "mat_de_en", "vmt_hmm",
            "dna_splice", "finance_sp500", "speech_digits"}  # fmt: skip
# The model input size each source fills in (the config leaves it out); num_labels likewise for classification.
DATA_INPUT = {"csv_series": "input_dim", "synthetic_ctc": "input_dim"}
NEEDS_NO_FILES = ("markov_chain", "hidden_order")


def plain(value):
    """Tuples to lists, recursively: YAML has only lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def resolved(name: str) -> RunConfig:
    return resolve_run_config(load_yaml(CONFIG_DIR / f"{name}.yaml"))


def model_config(config: RunConfig, **filled):
    """The config's model section as its model config, with the sizes the data would provide."""
    values = dict(config.model)
    input_key = DATA_INPUT.get(config.data["source"], "vocab_size")
    assert input_key not in values, f"model.{input_key} comes from the data; the config should leave it out"
    values[input_key] = 7
    values.update(filled)
    return MODEL_FAMILIES[config.model_type].config_class.from_dict(values)


def test_every_example_config_is_there():
    assert EXPECTED <= {path.stem for path in CONFIGS}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.stem)
def test_config_resolves_and_its_sections_build_their_classes(path):
    config = resolve_run_config(load_yaml(path))
    name = config.data["source"]
    assert name in DATA_SOURCES
    assert config.task in source_tasks(name), f"{name} feeds {source_tasks(name)}, not {config.task}"
    options = {k: v for k, v in config.data.items() if k != "source"}
    source = build_dataclass(DATA_SOURCES[name], options, "data")
    assert plain(source.__dict__) == plain({**DATA_SOURCES[name]().__dict__, **options})  # every option taken
    if "task" in options:  # a source with its own task option (csv_series) must agree with the run
        assert source.task == config.task

    model_config(config)
    hints = typing.get_type_hints(MODEL_FAMILIES[config.model_type].config_class)
    for key, value in config.model.items():  # each value has its field's type (the model config does not check)
        coerce(value, hints[key], f"model.{key}")


def test_no_two_configs_share_a_run_directory():
    output_dirs = [resolve_run_config(load_yaml(path)).output_dir for path in CONFIGS]
    assert len(set(output_dirs)) == len(output_dirs)


def test_the_demo_yaml_is_the_embedded_demo_run():
    assert plain(yaml.safe_load((CONFIG_DIR / "causal_lm_chain.yaml").read_text())) == plain(DEMO_CONFIG)


def test_the_softmax_baseline_is_the_demo_run_with_softmax_attention():
    demo, baseline = resolve_run_config(copy.deepcopy(DEMO_CONFIG)), resolved("softmax_baseline")
    assert baseline.data == demo.data and baseline.trainer == demo.trainer and baseline.task == demo.task
    model = model_config(baseline)
    assert model.layer_kinds() == ["softmax"] * model.n_layers
    same_size = ("d_model", "n_layers", "n_heads")
    assert {k: getattr(model, k) for k in same_size} == {k: DEMO_CONFIG["model"][k] for k in same_size}


def test_a_source_error_names_its_key_once():
    """The prefix goes before a message that does not name its key with it, and not before one that does."""
    with pytest.raises(ConfigError) as named:
        build_dataclass(DATA_SOURCES["markov_chain"], {"lags": [0]}, "data")
    assert str(named.value).startswith("data.lags=") and "data: data." not in str(named.value)
    with pytest.raises(ConfigError) as unnamed:
        build_dataclass(DATA_SOURCES["mqar"], {"seq_len": 63}, "data")
    assert str(unnamed.value).startswith("data: ") and "seq_len=63" in str(unnamed.value)


def test_hidden_order_learns_lags_one_and_four_with_gated_order_four():
    config = resolved("hidden_order")
    source = build_dataclass(DATA_SOURCES["hidden_order"], {k: v for k, v in config.data.items() if k != "source"},
                             "data")  # fmt: skip
    assert tuple(source.chain().true_lags) == (1, 4)
    model = model_config(config)
    assert model.max_order == 4 and model.gate != "none" and set(model.layer_kinds()) == {"markov"}
    assert 0 < model.gate_entropy_weight <= 0.1
    assert config.trainer.max_steps * config.trainer.batch_size <= source.train_sequences  # no sequence seen twice


def test_text_configs_differ_only_in_the_tokenizer():
    char, bpe = resolved("text_char"), resolved("text_bpe")
    assert char.data["path"] == bpe.data["path"] == "data/tiny_shakespeare.txt"
    assert char.data["tokenizer"] == "char" and "vocab_size" not in char.data and char.data["seq_len"] == 128
    assert bpe.data == {**char.data, "tokenizer": "bpe", "vocab_size": 512}
    assert bpe.model == char.model and bpe.trainer == char.trainer
    model = model_config(char)
    assert model.scope == "local" and model.causal
    assert set(model.layer_kinds()) <= {"markov", "hybrid_split", "hybrid_parallel"}
    assert "markov" in model.layer_kinds() or any(kind.startswith("hybrid") for kind in model.layer_kinds())


def test_scan_shakespeare_large_changes_only_width_positions_regularisation_and_budget():
    base, large = (
        load_yaml(CONFIG_DIR / "scan_shakespeare.yaml"),
        load_yaml(CONFIG_DIR / "scan_shakespeare_large.yaml"),
    )
    assert large["data"] == base["data"] and large["task"] == base["task"]
    assert {k: v for k, v in large["model"].items() if k not in ("d_model", "window_positions")} == {
        k: v for k, v in base["model"].items() if k != "d_model"
    }
    changed = {k for k in base["trainer"] if large["trainer"][k] != base["trainer"][k]}
    assert changed == {"label_smoothing", "weight_decay", "max_steps", "batch_size", "lr", "warmup_steps",
                       "eval_every", "checkpoint_every"}  # fmt: skip
    assert (large["model"]["d_model"], large["model"]["window_positions"]) == (256, "end")
    assert (large["trainer"]["label_smoothing"], large["trainer"]["weight_decay"]) == (0.0, 0.5)


@pytest.mark.skipif(not (SHARED_DATA / "tiny_shakespeare.txt").is_file(), reason="no Tiny Shakespeare here")
@pytest.mark.parametrize("name", ["text_char", "text_bpe"])
def test_text_config_builds_its_data_and_model(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("MARKOVFORMER_DATA", str(SHARED_DATA))
    config = resolved(name)
    bundle = build_data(config)
    model = build_model(config, bundle.info).eval()
    batch = collate([bundle.val[i] for i in range(2)])  # splits are indexable, not sliceable
    assert batch["input_ids"].shape == (2, 129)  # seq_len + 1: inputs and their shifted targets
    with torch.no_grad():
        loss = model(**model_inputs(batch)).loss
    assert abs(float(loss) - math.log(bundle.info["vocab_size"])) < 1.0  # untrained: close to uniform


def test_scan_shakespeare_is_the_seed_setup():
    """The Scan Markov setup: 90/10 contiguous split, n = 2..5 in equal proportion, label smoothing 0.1 on training,
    AdamW with cosine decay, the seed's architecture; validation windows carry the longest context."""
    config = resolved("scan_shakespeare")
    assert config.model_type == "scan_markov" and config.task == "causal_lm"
    assert config.data["path"] == "data/tiny_shakespeare.txt" and config.data["tokenizer"] == "char"
    assert config.data["fractions"] == [0.9, 0.1, 0.0] and config.data["overlap"] >= 5
    trainer = config.trainer
    assert config.task_options.orders == (2, 3, 4, 5) and trainer.label_smoothing == 0.1 and trainer.decay == "cosine"
    model = model_config(config, vocab_size=66)
    assert (model.context_mode, model.d_model, model.ffn_mult, model.dropout) == ("markov", 128, 4, 0.0)
    assert max(config.task_options.orders) <= model.max_positions


@pytest.mark.skipif(not (SHARED_DATA / "tiny_shakespeare.txt").is_file(), reason="no Tiny Shakespeare here")
def test_scan_shakespeare_builds_its_data_and_model(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("MARKOVFORMER_DATA", str(SHARED_DATA))
    config = resolved("scan_shakespeare")
    bundle = build_data(config)
    model = build_model(config, bundle.info).eval()
    assert bundle.info["vocab_size"] == 66 and len(bundle.test) == 0
    assert 330_000 < model.num_parameters() < 350_000  # the seed's ~340K
    batch = collate([bundle.val[i] for i in range(2)])  # splits are indexable, not sliceable
    with torch.no_grad():
        loss = model(**model_inputs(batch), order=2).loss
    assert abs(float(loss) - math.log(66)) < 0.5  # untrained: close to uniform


def _write_fasta_files(directory: Path) -> tuple[Path, Path]:
    rng = random.Random(0)
    fasta, labels = directory / "promoters.fa", directory / "promoters.labels.tsv"
    records = [(f"r{i}", "".join(rng.choice("ACGT") for _ in range(rng.randint(20, 40)))) for i in range(30)]
    fasta.write_text("".join(f">{name}\n{sequence}\n" for name, sequence in records))
    labels.write_text("".join(f"{name}\t{'promoter' if i % 3 else 'other'}\n" for i, (name, _) in enumerate(records)))
    return fasta, labels


def _write_series(path: Path, rows: int) -> Path:
    lines = ["a,b,c,label"] + [f"{math.sin(t)},{t % 7},{math.cos(t / 3)},{'up' if t % 5 < 2 else 'down'}"
                               for t in range(rows)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_file_configs_build_their_data_and_model_on_small_files(tmp_path):
    """The placeholder paths replaced by small files: data, model (sizes from the data) and one loss."""
    fasta, labels = _write_fasta_files(tmp_path)
    series = _write_series(tmp_path / "series.csv", 500)
    cases = {
        "dna_fasta": {"path": str(fasta), "labels": str(labels)},
        "time_series_csv": {"path": str(series)},
    }
    for name, paths in cases.items():
        config = resolved(name)
        config.data.update(paths)
        bundle = build_data(config)
        model = build_model(config, bundle.info).eval()
        assert model.config.num_labels == 2
        with torch.no_grad():
            output = model(**model_inputs(collate([bundle.val[i] for i in range(2)])))
        assert output.logits.shape == (2, 2) and torch.isfinite(output.loss)
    fasta_config = model_config(resolved("dna_fasta"))
    assert not fasta_config.causal and fasta_config.bidirectional and resolved("dna_fasta").data["reverse_complement"]
    assert resolved("dna_fasta").data["path"] == "data/promoters.fa"
    assert resolved("dna_fasta").data["labels"] == "data/promoters.labels.tsv"
    csv_config = resolved("time_series_csv")
    assert csv_config.data["path"] == "data/series.csv" and csv_config.data["label_column"] == "label"
    assert build_model(csv_config, bundle.info).config.input_dim == 3  # a, b, c: filled from the data


TINY = {
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
    "data": {"num_symbols": 6, "seq_len": 16, "train_sequences": 48, "val_sequences": 8, "test_sequences": 8},
    "trainer": {"max_steps": 3, "batch_size": 8, "warmup_steps": 1, "eval_every": 3, "checkpoint_every": 3,
                "log_every": 1, "eval_batch_size": 8},
}  # fmt: skip


@pytest.mark.parametrize("name", [p.stem for p in CONFIGS if load_yaml(p)["data"]["source"] in NEEDS_NO_FILES])
def test_configs_without_data_files_train_three_steps(name, tmp_path):
    """The config as written, shrunk (sizes only: attention kind, gates and regularisers are kept), trains through
    the runner and writes a complete run directory."""
    values = load_yaml(CONFIG_DIR / f"{name}.yaml")
    for section, shrunk in TINY.items():
        values[section].update(shrunk)
    values["output_dir"] = str(tmp_path / name)
    if "lags" in values["data"]:
        values["data"]["lags"] = [1, 2]
    results = train(resolve_run_config(values))
    run_dir = tmp_path / name
    assert results["steps"] == 3
    loss = results["val"]["loss"]
    assert math.isfinite(loss) and abs(loss - math.log(6)) < 0.5  # three steps: still near uniform over 6 symbols
    assert json.loads((run_dir / "metrics.json").read_text())["val"] == results["val"]
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and (run_dir / "model").is_dir()
    written = resolve_run_config(yaml.safe_load((run_dir / "config.yaml").read_text()))
    assert written.model == {**load_yaml(CONFIG_DIR / f"{name}.yaml")["model"], **TINY["model"]}
    assert written.trainer.max_steps == 3


def test_mat_configs_pair_the_order_with_the_task_and_read_the_prepared_file():
    synthetic, de_en = resolved("mat_synthetic"), resolved("mat_de_en")
    for config in (synthetic, de_en):
        assert (config.task, config.model_type) == ("translation", "markov_translator")
        assert model_config(config).transparent  # MAT: exactly k-th order
    assert model_config(synthetic).order == synthetic.data["order"] == 2  # the decoder can see what y_i depends on
    assert model_config(de_en).order == 5  # the paper's k
    from markovformer.data.recipes.registry import DATA_RECIPES

    assert de_en.data["path"] == f"data/{DATA_RECIPES['de-en'].file_name}"  # where `data prepare de-en` writes


@pytest.mark.slow
def test_mat_synthetic_as_written_translates_the_validation_set(tmp_path):
    """The config's claim: about a minute on one core to a validation BLEU above 95 (measured: 100.0)."""
    values = load_yaml(CONFIG_DIR / "mat_synthetic.yaml")
    values["output_dir"] = str(tmp_path / "run")
    results = train(resolve_run_config(values))
    assert results["val"]["bleu"] > 95 and results["val"]["exact_match"] > 0.9


def test_vmt_hmm_walks_windows_shorter_than_the_hidden_state_lasts_and_trains(tmp_path):
    """The carry can pay: the window is shorter than a hidden state's mean dwell 1 / (1 - stay), every document is
    a whole number of windows, the KL warms up within the run; shrunk, it trains through the runner and reports
    its bounds beside the exact log-likelihood of the validation documents."""
    config = resolved("vmt_hmm")
    assert (config.task, config.model_type, config.data["source"]) == ("vmt", "vmt", "sticky_hmm")
    model, data, trainer = model_config(config), config.data, config.trainer
    assert model.window < 1 / (1 - data["stay"]) and data["doc_len"] % model.window == 0
    options = config.task_options
    assert options.carry and not options.window_overlap and 0 < options.kl_warmup_steps < trainer.max_steps
    values = load_yaml(CONFIG_DIR / "vmt_hmm.yaml")
    values["model"].update({"d_model": 16, "n_layers": 1, "hidden_dim": 16})
    values["data"].update({"doc_len": 4 * model.window, "train_documents": 8, "val_documents": 2})
    values["trainer"].update({"max_steps": 3, "warmup_steps": 1, "eval_every": 3, "checkpoint_every": 3,
                              "log_every": 1})
    values["task_options"]["kl_warmup_steps"] = 2  # within the shrunk run, as the learning rate's warm-up
    values["output_dir"] = str(tmp_path / "run")
    results = train(resolve_run_config(values))
    assert set(results["val"]) == {"loss", "bits_per_token", "elbo", "reconstruction", "kl", "iw_bound"}
    exact = results["reference"]["val_log_likelihood_per_token"]
    assert results["val"]["elbo"] < exact < 0  # a lower bound on the exact value


TABLE1_CONFIGS = {"dna_splice": ("genomics", "splice"), "finance_sp500": ("finance", "sp500"),
                  "speech_digits": ("speech", "digits")}  # fmt: skip


def _table1_cell(name: str) -> dict:
    """The table1 experiment's Markovian Transformer run (seed 0, default settings) on the recipe's file in data/."""
    from markovformer.experiments.table1 import DomainSetup, Table1Settings, run_config
    from markovformer.experiments.table1_models import MARKOVIAN, data_paths, data_section, markovian_section

    domain, dataset = TABLE1_CONFIGS[name]
    data = data_section(domain, data_paths(domain, "data", dataset))
    setup = DomainSetup(domain, dataset, data, {}, 0, {MARKOVIAN: markovian_section(domain)}, {})
    return run_config(setup, MARKOVIAN, Table1Settings(), seed=0)


@pytest.mark.parametrize("name", sorted(TABLE1_CONFIGS))
def test_table1_configs_are_the_experiments_markovian_transformer_runs(name):
    values = load_yaml(CONFIG_DIR / f"{name}.yaml")
    assert values["output_dir"] == f"runs/{name}"
    assert plain({**values, "output_dir": ""}) == plain(_table1_cell(name))
    model = model_config(resolved(name), **({"vocab_size": None, "input_dim": 80} if name == "speech_digits" else {}))
    assert model.layer_kinds() == ["hybrid_split"] * model.n_layers and model.markov_head_ratio == 0.5
    assert model.gru and model.gate == "mlp" and model.scope == "local"
    assert not model.causal and model.bidirectional  # classification and CTC read the whole input


def test_dna_splice_reads_the_splice_recipes_folder_without_reverse_complements():
    from markovformer.data.recipes.registry import DATA_RECIPES

    data = resolved("dna_splice").data
    folder = f"data/{DATA_RECIPES['splice'].file_name}"
    assert (data["path"], data["labels"]) == (f"{folder}/sequences.fa", f"{folder}/labels.tsv")
    assert data["reverse_complement"] is False  # EI and IE swap under reverse complement: not label-preserving


def test_finance_sp500_reads_the_recipes_features_with_the_fractions_its_thresholds_were_fitted_on():
    from markovformer.data.recipes.finance import DAILY_FEATURES, FRACTIONS
    from markovformer.data.recipes.registry import DATA_RECIPES

    data = resolved("finance_sp500").data
    assert data["path"] == f"data/{DATA_RECIPES['sp500'].file_name}"
    assert data["feature_columns"] == list(DAILY_FEATURES) and tuple(data["fractions"]) == FRACTIONS
    assert data["label_column"] == "label" and "regime" not in data["feature_columns"]


def test_speech_digits_reads_the_digits_file_and_tests_on_unseen_voices():
    from markovformer.data.recipes.registry import DATA_RECIPES

    config = resolved("speech_digits")
    assert config.task == "ctc" and config.data["path"] == f"data/{DATA_RECIPES['digits'].file_name}"
    assert config.data["test_set"] == "synthetic"


def _suggested_settings(name: str, marker: str) -> dict:
    """The `key: value` settings of the comment of configs/NAME.yaml that holds ``marker``, from the opening
    parenthesis before it to the closing one (a comment may run over several lines), as YAML reads each value."""
    lines = (CONFIG_DIR / f"{name}.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if marker in line)
    text = " ".join(line.split("#", 1)[1] for line in lines[max(start - 2, 0):start + 3] if "#" in line)
    opening = text.rindex("(", 0, text.index(marker))
    text = text[opening:text.index(")", opening)]
    return {key: yaml.safe_load(value) for key, value in re.findall(r"(?<![\w.-])(\w+): (\w+)", text)}


def test_the_demo_comments_sliding_window_softmax_builds_over_the_markov_layers_keys():
    """causal_lm_chain.yaml's comment on scope names the edit that makes its model sliding-window softmax: made in
    the file as written, the model builds softmax layers that see the keys its Markov layers see."""
    config = resolved("causal_lm_chain")
    suggested = _suggested_settings("causal_lm_chain", "sliding-window")
    assert suggested["attention"] == "softmax" and suggested["scope"] == "local"
    markov = model_config(config).layer_specs()[0].settings
    softmax = model_config(config, **suggested).layer_specs()[0]
    assert softmax.kind == "softmax" and (softmax.settings.scope, softmax.settings.window) == ("local", markov.window)


def test_mixers_mqar_takes_every_kind_its_comment_offers_by_swapping_attention_in_the_file():
    """The comment offers swapping `attention` for any kind it lists: each, written into the copied file's model
    section as it stands, builds (a `scope: global` there was refused by the kinds without a scope, hyena and s4d),
    and the sliding window it describes is softmax over the window it gives."""
    config = resolved("mixers_mqar")
    header = (CONFIG_DIR / "mixers_mqar.yaml").read_text().split("\ntask:")[0]
    offered = re.search(r"for any kind \(([^;)]*)", header.replace("\n# ", " ")).group(1)
    kinds = [kind.strip() for kind in offered.split(",") if re.fullmatch(r"\w+", kind.strip())]
    assert {"markov", "hyena", "s4d"} <= set(kinds)
    for kind in kinds:
        assert model_config(config, attention=kind).layer_kinds() == [kind] * config.model["n_layers"]
    assert model_config(config).layer_specs()[0].settings.scope == "global"
    window = _suggested_settings("mixers_mqar", "sliding window")
    layer = model_config(config, **window).layer_specs()[0]
    assert (layer.kind, layer.settings.scope, layer.settings.window) == ("softmax", "local", window["window"])


def test_mat_de_en_names_the_debian_package_its_recipe_downloads():
    """`data prepare de-en` fetches a Debian package of several MB (trans-de-en 1.9-6: 6,276,816 bytes); the comment
    said it downloaded ~1 MB. It names the package now, so its size can be looked up (apt-cache show)."""
    from markovformer.data.recipes import de_en

    header = (CONFIG_DIR / "mat_de_en.yaml").read_text().split("\ntask:")[0]
    assert f"{de_en.PACKAGE}, a 6 MB package" in " ".join(line.lstrip("# ") for line in header.splitlines())
    assert "~1 MB" not in header


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.stem)
def test_comments_spell_no_value_as_python_does(path):
    """A value a comment offers is typed into the YAML as written: YAML reads `None` as the string 'None' (refused:
    "model.order='None' has the wrong type"), so the offer is `null`, as mat_synthetic's (null = unbounded) is."""
    comments = [line.split("#", 1)[1] for line in path.read_text().splitlines() if "#" in line]
    assert not [comment for comment in comments if re.search(r"\bNone\b", comment)]
    assert yaml.safe_load("None") == "None"


def test_mat_synthetics_unbounded_order_is_null():
    config = resolved("mat_synthetic")
    offered = re.search(r"\((\w+) = unbounded\)", (CONFIG_DIR / "mat_synthetic.yaml").read_text()).group(1)
    assert model_config(config, order=yaml.safe_load(offered)).order is None


def test_scan_shakespeare_large_says_each_trainer_value_it_changes():
    """Its header said that everything but the width, label smoothing, weight decay and positions was the seed setup
    of scan_shakespeare.yaml, where its batch size, learning rate, warm-up and steps differ too: each changed value is
    named in the header now (the validation and checkpoint intervals aside)."""
    base = load_yaml(CONFIG_DIR / "scan_shakespeare.yaml")["trainer"]
    large = load_yaml(CONFIG_DIR / "scan_shakespeare_large.yaml")["trainer"]
    header = " ".join(line.lstrip("# ") for line in
                      (CONFIG_DIR / "scan_shakespeare_large.yaml").read_text().split("\ntask:")[0].splitlines())
    said = {"label_smoothing": "without label smoothing", "weight_decay": f"weight decay {large['weight_decay']}",
            "batch_size": f"batches of {large['batch_size']} windows",
            "lr": f"lr {large['lr']:.0e}".replace("e-0", "e-"),
            "warmup_steps": f"{large['warmup_steps']} warm-up steps", "max_steps": f"{large['max_steps']:,} steps"}
    changed = {k for k in base if large[k] != base[k]} - {"eval_every", "checkpoint_every"}
    assert changed <= set(said)
    assert [said[k] for k in sorted(changed) if said[k] not in header] == []

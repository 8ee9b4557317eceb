"""What a new user reads first: one lag convention in the demo's console, `data list` as aligned plain text,
`data show` with a description per option and no contradiction, `eval` of a chain run next to its entropy rate,
and no Lightning banners in an experiment's output."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from markovformer.cli.main import main
from markovformer.data.options import option_help
from markovformer.data.sources import DATA_SOURCES
from markovformer.training.lag_report import biased_lags, chain_attention_lags, describe_chain, lag_header


def test_the_lag_convention_maps_the_data_lags_to_attention_lags_once():
    assert chain_attention_lags([3, 1, 2]) == (0, 1, 2) and biased_lags([1, 2, 3]) == (1, 2)
    assert biased_lags([1, 4]) == (3,) and biased_lags([1]) == ()
    text = describe_chain([1, 2, 3])
    assert "x_t, x_(t\u22121), x_(t\u22122)" in text and "attention lags 0, 1, 2" in text and "lags 1, 2 are" in text
    assert lag_header(4, (1, 2)) == ["1*", "2*", "3", "4"]


def test_every_option_of_every_source_is_described():
    for name, source in DATA_SOURCES.items():
        for field in dataclasses.fields(source):
            assert len(option_help(name, field.name)) > 10, (name, field.name)
    with pytest.raises(KeyError, match=r"data.no_such of source 'markov_chain' has no help line: add \('markov_chain', "
                                       r"'no_such'\) to SOURCE_OPTION_HELP, or 'no_such' to OPTION_HELP"):  # fmt: skip
        option_help("markov_chain", "no_such")  # a contributor's new option, undescribed: the error says where


def test_data_list_is_aligned_plain_text_with_whole_sentences(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out
    lines = [line for line in out.splitlines() if line.strip()][:-1]  # the last line is the pointer to `data show`
    assert max(map(len, lines)) <= 100
    starts = {line.index(line.split()[1]) for line in lines if line.split()[0] in DATA_SOURCES}
    assert len(starts) == 1  # every description starts in the same column
    assert {line.index(line.strip()) for line in lines if line.split()[0] not in DATA_SOURCES} == starts
    joined = " ".join(out.split())
    assert "feature columns and a label column, sliding windows" in joined  # not cut at the first colon


def test_data_show_hidden_order_describes_options_and_states_its_chain_once(capsys):
    assert main(["data", "show", "hidden_order"]) == 0
    out = capsys.readouterr().out
    options = out.split("options (data.<option> in a run config):\n")[1].split("default chain:")[0]
    named = re.findall(r"^  (\w+) +(\S.*)$", options, flags=re.M)
    assert [name for name, _ in named] == [f.name for f in dataclasses.fields(DATA_SOURCES["hidden_order"])]
    assert all(not text.startswith("(default") for _, text in named)  # a description before every default
    assert "(kind=random only)" in dict(named)["order"]  # the option order 3 does not contradict the chain's 4
    chain = " ".join(out.split("default chain:")[1].split())
    assert chain.startswith("order 4, 16 symbols") and "attention lags 0, 3; lag 3 is the one" in chain


@pytest.fixture(scope="module")
def chain_run(tmp_path_factory):
    """A tiny trained causal LM on a lagged chain (lags 1, 2), its console output and its run directory."""
    from conftest import TINY_RUN, run_in_process

    folder = tmp_path_factory.mktemp("chain_run")
    config = folder / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY_RUN, "output_dir": str(folder / "run")}))
    done = run_in_process("train", str(config), cwd=folder)
    assert done.returncode == 0, done.stderr
    return done.stdout, folder / "run"


def test_the_training_console_states_one_lag_convention(chain_run):
    out, _ = chain_run
    assert "x_(t+1) depends on x_t, x_(t\u22121): attention lags 0, 1; lag 1 is the one" in out
    assert "true lags (1, 2)" not in out  # the data's convention is never printed beside the attention lags
    header = [line for line in out.splitlines() if line.strip().startswith("lag ")]
    assert header and all(line.split()[1:3] == ["1*", "2"] for line in header)


def test_eval_of_a_chain_run_shows_the_entropy_rate(chain_run, capsys):
    _, run_dir = chain_run
    assert main(["eval", str(run_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"  vs entropy rate \d\.\d{4}: [+-]\d\.\d{4} nats \([+-]\d+\.\d\d%\); the true chain scores "
                        r"\d\.\d{4}", out[1]), out  # fmt: skip


def test_the_gap_to_the_entropy_rate_is_a_percentage_only_of_a_positive_rate():
    """A continuous source's differential entropy rate can be negative (a linear-Gaussian one with little noise):
    a percentage of it flipped the sign (a loss 1.93 nats above it read -194.69 %)."""
    from markovformer.training.run_report import entropy_rate_gap

    assert entropy_rate_gap(1.2, 1.0) == "+0.2000 nats (+20.00%)"
    assert entropy_rate_gap(0.939, -0.9916) == "+1.9306 nats"
    assert entropy_rate_gap(1.05, 0.05, continuous=True) == "+1.0000 nats"  # not +2000 %: the units' choice


def test_lightning_banners_stay_out_of_experiment_output(tmp_path):
    """An experiment that builds a Lightning Trainer (as the engine-based ones do) prints its progress only."""
    import os
    import subprocess
    import sys

    code = f"""
import sys
import markovformer.experiments.weight_tying as weight_tying
from markovformer.cli.main import main
from markovformer.experiments.report import ExperimentReport

def lightning_experiment(out_dir, *, log, **options):
    ExperimentReport(out_dir, "stand-in", log)  # its settings checked, it opens its folder (Lightning quieted there)
    import lightning.pytorch as pl

    pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, max_steps=1)  # logs its banners
    log("cell 1/1 done")
    return out_dir / "report.md"

weight_tying.run = lightning_experiment
sys.exit(main(["experiment", "weight-tying", "--out", "{tmp_path}"]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "cell 1/1 done" in done.stdout
    assert "GPU available" not in done.stdout + done.stderr and "TPU available" not in done.stdout + done.stderr


def test_the_prepared_data_directory_is_git_ignored():
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    for prepared in ("data/tiny_shakespeare.txt", "data/splice/labels.tsv"):
        assert subprocess.run(["git", "check-ignore", "-q", prepared], cwd=root, timeout=30).returncode == 0
    kept = subprocess.run(["git", "check-ignore", "-q", "src/markovformer/data/recipes/registry.py"], cwd=root,
                          timeout=30)  # fmt: skip
    assert kept.returncode == 1  # the package's own data/ folder is not ignored


def test_the_inspection_page_states_config_model_time_units_and_references(chain_run, tmp_path):
    import html

    _, run_dir = chain_run
    assert main(["inspect", str(run_dir), "--out", str(tmp_path / "report")]) == 0
    page = html.unescape((tmp_path / "report" / "index.html").read_text())
    for expected in ("attention kind per layer</td><td>markov", "validation loss (nats/token)",
                     "gap to the entropy rate", "true chain's loss on the validation sequences", "steps in",
                     "x_(t+1) depends on x_t, x_(t\u22121)", "(config.yaml)</summary>", "max_order: 2",
                     'src="attention_by_lag.png"', 'src="curves.png"'):  # fmt: skip
        assert expected in page, expected
    gap = re.search(r"gap to the entropy rate</td><td>([+-]\d\.\d{4}) nats \(", page)
    metrics = __import__("json").loads((run_dir / "metrics.json").read_text())
    assert float(gap.group(1)) == pytest.approx(metrics["val"]["loss"] - metrics["reference"]["entropy_rate"],
                                                abs=1e-4)  # fmt: skip


@pytest.mark.parametrize("name", sorted(DATA_SOURCES))
def test_data_show_prints_each_default_as_yaml_that_reads_back_as_the_default(capsys, monkeypatch, name):
    """A run config is YAML: `(default None)` or `(default (1, 2, 3))` were Python's spelling, and hf_dataset's
    data_files (a default factory) showed None where its default is an empty list."""
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option
    assert main(["data", "show", name]) == 0
    options = capsys.readouterr().out.split("options (data.<option> in a run config):\n")[1].split("default chain:")[0]
    shown = dict(re.findall(r"^  (\w+) +.*\(default (.*)\)$", options, flags=re.M))
    source = DATA_SOURCES[name]
    instance = source()
    for field in dataclasses.fields(source):
        value = instance.__dict__[field.name]
        assert yaml.safe_load(shown[field.name]) == (list(value) if isinstance(value, tuple) else value), field.name


@pytest.mark.parametrize("source", ["markov_chain", "hidden_order"])
def test_data_show_names_the_chain_kinds_each_option_changes(source):
    """An option a chain kind ignores (a switching chain is binary whatever ``num_symbols`` says) is marked
    ``(kind=... only)`` with exactly the kinds whose chain it changes; an option every kind reads has no mark."""
    import torch

    from markovformer.data.synthetic.markov_sources import CHAIN_KINDS

    changed = {"num_symbols": 3, "lags": (1, 2), "strength": 2.0, "order": 2, "beta": 0.5, "p": 0.4, "q": 0.5}

    def table(**options):
        chain = DATA_SOURCES[source](**options).chain()
        return chain.transition, chain.true_lags

    for option, value in changed.items():
        readers = set()
        for kind in CHAIN_KINDS:
            (before, lags_before), (after, lags_after) = table(kind=kind), table(kind=kind, **{option: value})
            if before.shape != after.shape or not torch.equal(before, after) or lags_before != lags_after:
                readers.add(kind)
        marked = re.search(r"\(kind=([a-z ]+?) only\)", option_help(source, option))
        assert (set(marked.group(1).split(" or ")) if marked else set(CHAIN_KINDS)) == readers, (option, readers)


def _seed_files(tmp_path) -> dict[str, dict]:
    """Small data files for the file sources whose split trainer.seed might draw, as their options."""
    records = [(f"r{i}", "ACGT"[i % 4] * 6 + "ACGT"[(i + 1) % 4] * 6, "ab"[i % 2]) for i in range(20)]
    (tmp_path / "dna.fa").write_text("".join(f">{name}\n{bases}\n" for name, bases, _ in records))
    (tmp_path / "labels.tsv").write_text("".join(f"{name}\t{label}\n" for name, _, label in records))
    (tmp_path / "pairs.tsv").write_text("".join(f"w{i} x{i}\ty{i} z{i}\n" for i in range(20)))
    (tmp_path / "rows.csv").write_text("f,label\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(40)))
    (tmp_path / "text.txt").write_text("".join(f"line {i} of the text\n" for i in range(40)))
    return {"fasta": {"path": str(tmp_path / "dna.fa"), "labels": str(tmp_path / "labels.tsv")},
            "translation_file": {"path": str(tmp_path / "pairs.tsv"), "vocab_size": 300},
            "csv_series": {"path": str(tmp_path / "rows.csv"), "window": 4},
            "text": {"path": str(tmp_path / "text.txt"), "seq_len": 8, "cache_dir": str(tmp_path / "cache")}}


def test_the_help_of_a_split_option_names_trainer_seed_exactly_where_the_seed_draws_that_split(tmp_path):
    """trainer.seed is also the data's seed: it draws generated examples and random splits of records. A researcher
    comparing model seeds must be told, by the options that size or split the data, that another seed means other
    validation data (the help said nothing of it)."""
    import torch

    def rows(split) -> list:
        return [tuple(value.tolist() for value in example.values() if torch.is_tensor(value)) for example in split]

    files = _seed_files(tmp_path)
    checked = 0
    for name, source in DATA_SOURCES.items():
        fields = {field.name for field in dataclasses.fields(source)}
        sized = (field for field in fields if re.fullmatch(r"(train|val|test)_(sequences|examples|documents)", field))
        options = dict.fromkeys(sized, 3)
        if not options and name not in files:
            continue  # a file source without a file here
        built = [source(**options, **files.get(name, {})).build(seed=seed) for seed in (0, 1)]
        drawn = rows(built[0].val) != rows(built[1].val) or rows(built[0].train) != rows(built[1].train)
        for option in sorted(set(options) | ({"fractions"} & fields)):
            assert ("trainer.seed" in option_help(name, option)) == drawn, (name, option, drawn)
            checked += 1
    assert checked >= 34  # ten generated sources and four file sources


def test_data_show_says_that_trainer_seed_draws_the_synthetic_ctc_task_itself(capsys):
    """The symbols' frame prototypes, the task a CTC model learns, come from trainer.seed: runs of several seeds are
    runs on several tasks, which data show did not say (markov_chain keeps its chain in chain_seed)."""
    import torch

    from markovformer.data.synthetic.ctc import SyntheticCTCSource

    source = SyntheticCTCSource(num_symbols=1, noise=0.0, train_examples=1, val_examples=1, test_examples=1)

    def prototype(seed: int):  # one symbol, no noise: every frame that is not silent is its prototype
        frames = source.build(seed).val[0]["input_features"]
        return frames[frames.abs().sum(-1) > 0][0]

    assert not torch.equal(prototype(0), prototype(1))
    assert main(["data", "show", "synthetic_ctc"]) == 0
    assert "prototypes are drawn from trainer.seed, as the examples are: another seed is another task" in " ".join(
        capsys.readouterr().out.split())


@pytest.mark.parametrize("command", [("data", "list"), ("data", "show", "text"), ("config", "list")])
def test_the_catalogues_fit_a_40_column_terminal_word_for_word(capsys, monkeypatch, command):
    """At COLUMNS=40 they were wrapped to 60 columns (a floor), which such a terminal breaks again mid-word: `data
    list` printed 60-character lines. The text moves below the name where the name's column leaves too little."""
    monkeypatch.setenv("COLUMNS", "1000")
    assert main(list(command)) == 0
    wide = capsys.readouterr().out
    monkeypatch.setenv("COLUMNS", "40")
    assert main(list(command)) == 0
    narrow = capsys.readouterr().out
    assert [line for line in narrow.splitlines() if len(line) > 40 and len(line.split()) > 1] == []  # a word: whole
    assert narrow.split() == wide.split()

"""The README as a reader uses it: its Python blocks run in order in one namespace (as pasted into one session),
with the claims their comments make asserted; its YAML block builds the layers its text describes; its lists and
tables (the kinds that decode incrementally, the model families, GenerationConfig's fields, the layout tree, a run
directory, the experiments, the data sources and recipes) name what the code has; and every ``markovformer``
command in it and in docs/ is read by the command's own parser: each flag exists for its subcommand, and a command
with no placeholder parses whole, its ``--set`` keys are the experiment's (or the bench's) settings and its
training overrides resolve into a run config."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest
import torch
import yaml

from markovformer.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def fenced_blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall((ROOT / "README.md").read_text()) if lang == language]


def readme_block(language: str, marker: str) -> str:
    """The README's one ``language`` block that contains ``marker``."""
    found = [body for body in fenced_blocks(language) if marker in body]
    assert len(found) == 1, f"README: {len(found)} {language} blocks contain {marker!r}"
    return found[0]


# --- the Python blocks -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quickstart():
    """The namespace after the quickstart, the MAT block and the decoding-state block, run as written."""
    torch.manual_seed(0)  # the blocks leave the weights to torch's stream
    namespace: dict = {}
    for marker in ("lagged_chain(", "MarkovTranslatorConfig(", "state: dict[str, object] = {}"):
        exec(compile(readme_block("python", marker), f"README ({marker})", "exec"), namespace)
    return namespace


def test_quickstart_shapes_and_greedy_generation_are_as_its_comments_say(quickstart):
    model, config, x, ids = quickstart["model"], quickstart["config"], quickstart["x"], quickstart["ids"]
    assert model.transition_strengths()[0]["past"].shape == (config.n_heads, config.max_order)  # "(heads, lags)"
    assert ids.shape == (x.shape[0], 16 + 64)
    torch.testing.assert_close(ids[:, :16], x[:, :16])
    with torch.no_grad():
        teacher_forced = model(ids).logits[:, 15:-1].argmax(-1)  # "greedy": each new id is the argmax given the rest
    torch.testing.assert_close(ids[:, 16:], teacher_forced)


def test_mat_block_returns_eos_then_padding_only(quickstart):
    targets, sources = quickstart["targets"], quickstart["sources"]
    assert targets.shape[0] == sources.shape[0] and targets.shape[1] <= 50  # "(B, L)", L <= max_new_tokens
    for row in targets.tolist():
        if 2 in row:  # "eos kept, then padding"
            assert set(row[row.index(2) + 1:]) <= {0}, row
        else:
            assert 0 not in row, row  # a row without eos ran to max_new_tokens: no padding inside it


def test_the_mat_block_runs_pasted_alone():
    """It names nothing of the quickstart before it, so a reader copies it into a script of its own: it used torch
    without importing it (NameError)."""
    namespace: dict = {}
    exec(compile(readme_block("python", "MarkovTranslatorConfig("), "README (MAT block)", "exec"), namespace)
    assert namespace["targets"].shape[0] == namespace["sources"].shape[0]


def test_state_block_gives_the_full_forwards_logits(quickstart):
    model, x, logits = quickstart["model"], quickstart["x"], quickstart["logits"]
    with torch.no_grad():
        prompt_next = model(x[:, :16]).logits[:, -1].argmax(-1, keepdim=True)  # the token the block fed
        full = model(torch.cat([x[:, :16], prompt_next], dim=1)).logits[:, -1:]
    torch.testing.assert_close(logits, full, rtol=1e-4, atol=1e-5)


def test_transformers_block_generates_as_markovformer(quickstart, tmp_path):
    pytest.importorskip("transformers", reason="the README's transformers block needs the hf extra")
    model = quickstart["model"]
    model.save_pretrained(tmp_path / "model")
    block = readme_block("python", "AutoModelForCausalLM").replace("runs/NAME/model", str(tmp_path / "model"))
    namespace: dict = {}
    exec(compile(block, "README (transformers)", "exec"), namespace)
    expected = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=50)  # "= markovformer's generate"
    torch.testing.assert_close(namespace["ids"], expected)


def test_yaml_block_builds_the_layers_its_text_describes():
    from markovformer import MarkovianTransformerConfig

    model = yaml.safe_load(readme_block("yaml", "attention:"))["model"]
    config = MarkovianTransformerConfig(vocab_size=16, d_model=32, n_layers=len(model["attention"]), n_heads=4,
                                        **model)  # fmt: skip
    specs = config.layer_specs()
    assert [spec.kind for spec in specs] == ["markov", "markov", "softmax"]
    first, second, third = (spec.options for spec in specs)
    assert (first["scope"], first["window"], first["max_order"]) == ("local", 8, 4)  # flat max_order fills the gap
    assert (second["scope"], second["window"], second["max_order"]) == ("local", 256, 16)  # its own wins
    assert third["scope"] == "global"


def test_the_configs_model_type_list_names_every_family():
    from markovformer.models.registry import MODEL_FAMILIES

    text = " ".join((ROOT / "README.md").read_text().split())
    listed = re.search(r"`model_type` \(`markovian_transformer` by default, ([^)]*)\)", text)
    assert listed, "README's Configs paragraph lost its model_type list"
    named = {"markovian_transformer", *re.findall(r"`(\w+)`", listed.group(1))}
    missing = sorted(set(MODEL_FAMILIES) - named)
    assert named == set(MODEL_FAMILIES), f"add {missing} to README's `model_type (...)` list under Configs ({named})"


def test_family_table_names_every_exported_model_with_its_config():
    import markovformer

    lines = (ROOT / "README.md").read_text().splitlines()
    rows = [line for line in lines if re.match(r"\| .* \| `\w+Config` \|", line)]
    named = {}
    for row in rows:
        _, config_cell, models_cell = row.strip("|").split("|")
        config = re.search(r"`(\w+)`", config_cell).group(1)
        prefix = config.removesuffix("Config")
        for name in re.findall(r"`([\w.]+)`", models_cell):
            named[name.replace("...", prefix)] = config
    exported = {name for name in markovformer.__all__ if name != "PreTrainedModel"
                and isinstance(getattr(markovformer, name), type)
                and issubclass(getattr(markovformer, name), markovformer.PreTrainedModel)}  # fmt: skip
    assert set(named) == exported, (f"README's family table (under Python API) lacks {sorted(exported - set(named))}: "
                                    "a row | family | `XConfig` | `XFor...` | per exported model class")  # fmt: skip
    for name, config in named.items():
        assert getattr(markovformer, name).config_class is getattr(markovformer, config), name


def test_decoding_table_names_every_kind_as_the_models_declare_it():
    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
    from markovformer.layers.registry import ATTENTION_KINDS

    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| every causal"))
    incremental_cell, prefix_cell = row.strip("|").split("|")
    listed = set(re.findall(r"`(\w+)`", incremental_cell))
    incremental = set()
    for kind in ATTENTION_KINDS:
        try:
            config = MarkovianTransformerConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=4, attention=kind)
        except ValueError as error:  # a kind a causal model refuses (linformer), or a config that fails otherwise
            assert f"`{kind}` (non-causal)" in prefix_cell, (f"the decoding table lacks `{kind}` (non-causal), or a "
                                                             f"causal config of it fails otherwise: {error}")
            continue
        if MarkovianTransformerForCausalLM(config).model.decodes_incrementally:
            incremental.add(kind)
    assert listed == incremental, (f"the README's decoding table (the `| every causal kind` row) should name "
                                   f"{sorted(incremental - listed)} and not {sorted(listed - incremental)}")


def test_generation_config_fields_and_error_are_as_the_readme_gives_them():
    import dataclasses

    from markovformer.models.generation import GenerationConfig

    text = " ".join((ROOT / "README.md").read_text().split())
    listed = re.search(r"\(`markovformer\.models\.generation`: `([^`]+)`\)", text).group(1)
    fields = {f.name: f.default for f in dataclasses.fields(GenerationConfig)}
    entries = [entry.strip().split("=") for entry in listed.split(",")]
    assert [entry[0] for entry in entries] == list(fields)
    for name, *default in entries:
        if default:  # the README gives the defaults that are not None
            assert repr(fields[name]) == default[0], name
        else:
            assert fields[name] is None, name
    error = re.search(r'`ValueError\("([^"]+)"\)`', text).group(1)
    with pytest.raises(ValueError) as raised:
        GenerationConfig(top_p=float(re.match(r"top_p=([\d.]+)", error).group(1)))
    assert str(raised.value) == error


def layout_entries() -> list[tuple[str, Path]]:
    """(name, path) of each file or folder the README's layout tree starts a line with: a name is read in the
    folder of the nearest name above it that starts further left; a name with an inner slash from the package
    root."""
    block = readme_block("", "src/markovformer/\n")
    entries, parents = [], [(-1, ROOT)]
    for line in block.splitlines():
        for word in re.finditer(r"\S+", line):
            name, column = word.group().rstrip(","), word.start()
            if not re.fullmatch(r"[\w./]+(/|\.py)", name):
                break
            while parents[-1][0] >= column:
                parents.pop()
            base = ROOT / "src/markovformer" if "/" in name.rstrip("/") and column > 0 else parents[-1][1]
            entries.append((name, base / name))
            if name.endswith("/"):
                parents.append((column, base / name))
    return entries


def test_layout_tree_names_what_exists():
    entries = layout_entries()
    assert len(entries) >= 40
    missing = [name for name, path in entries if not path.exists()]
    assert not missing, f"the README's layout names {missing}, which do not exist where it puts them"


def test_layout_tree_names_every_package():
    package = ROOT / "src/markovformer"
    block = readme_block("", "src/markovformer/\n")
    folders = sorted(init.parent.relative_to(package) for init in package.rglob("__init__.py"))[1:]  # not "."
    unnamed = [str(folder) for folder in folders if f"{folder.name}/" not in block]
    assert not unnamed, f"the README's layout (its src/markovformer/ tree) does not name {unnamed}: give each a line"


def test_run_directory_holds_what_the_readme_lists(tmp_path, main_cli):
    """A character-level run (it has a tokenizer) and its inspect report: the README's listing, name for name."""
    block = readme_block("", "runs/NAME/\n")
    listed = {match.split("/")[0] + ("/" if "/" in match else "") for match in re.findall(r"^  (\S+)", block, re.M)}
    rng = __import__("random").Random(0)
    (tmp_path / "corpus.txt").write_text("".join(rng.choice("abcd \n") for _ in range(4000)))
    config = {"task": "causal_lm", "output_dir": str(tmp_path / "run"),
              "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "text", "path": str(tmp_path / "corpus.txt"), "seq_len": 32},
              "trainer": {"max_steps": 4, "eval_every": 2, "batch_size": 4, "checkpoint_every": 2}}  # fmt: skip
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    assert main_cli("train", str(tmp_path / "run.yaml")).returncode == 0
    assert main_cli("inspect", str(tmp_path / "run")).returncode == 0
    run = tmp_path / "run"
    written = {path.name + ("/" if path.is_dir() else "") for path in run.iterdir() if not path.name.startswith(".")}
    assert written == listed
    assert {path.name for path in (run / "logs").iterdir()} == {"metrics.csv"}
    checkpoints = {path.name for path in (run / "checkpoints").iterdir()}
    assert "last.ckpt" in checkpoints and all(re.fullmatch(r"step-\d{6}\.ckpt", name)
                                              for name in checkpoints - {"last.ckpt"})  # fmt: skip
    model = {path.name for path in (run / "model").iterdir()}
    named = re.findall(r"[\w_]+\.json|model\.safetensors", block.split("model/", 1)[1].split("metrics.json")[0])
    assert set(named) == model


def readme_paragraph(start: str) -> str:
    """The README's paragraph that begins with ``start``."""
    paragraphs = (ROOT / "README.md").read_text().split("\n\n")
    found = [paragraph for paragraph in paragraphs if paragraph.startswith(start)]
    assert len(found) == 1, f"README: {len(found)} paragraphs begin with {start!r}"
    return found[0]


def test_experiment_table_names_every_experiment_in_order():
    from markovformer.experiments import EXPERIMENTS

    rows = readme_paragraph("| name | what it shows |").splitlines()[2:]
    assert [re.match(r"\| `([\w-]+)` \|", row).group(1) for row in rows] == list(EXPERIMENTS)  # `experiment list`


def test_data_sources_and_recipes_are_all_named():
    from markovformer.data.recipes.registry import DATA_RECIPES
    from markovformer.data.sources import DATA_SOURCES

    sources = set(re.findall(r"`(\w+)`", readme_paragraph("Data sources: ")))
    assert set(DATA_SOURCES) <= sources, f"the README's 'Data sources:' paragraph lacks {set(DATA_SOURCES) - sources}"
    recipes = set(re.findall(r"`([\w-]+)`", readme_paragraph("`markovformer data prepare NAME")))
    assert set(DATA_RECIPES) <= recipes, f"the README's data prepare paragraph lacks {set(DATA_RECIPES) - recipes}"


# --- the commands ------------------------------------------------------------------------------------------------

PLACEHOLDER = re.compile(r"\.\.\.|\||^\[|\b[A-Z][A-Z_]{2,}\b")  # NAME, RUN_DIR, [--flag ...], a | b


def documented_commands() -> list[tuple[str, str]]:
    """(where, text) of every ``markovformer`` command in the README and docs/: each line of a shell block
    (continuations joined) and each inline code span that starts with one."""
    commands = []
    for path in DOCUMENTS:
        text = path.read_text()
        where = path.relative_to(ROOT)
        for language, body in FENCE.findall(text):
            if language in ("", "bash"):
                for line in body.replace("\\\n", " ").splitlines():
                    commands.append((f"{where} block", line.strip()))
        for span in re.findall(r"`([^`\n]+(?:\n[^`\n]+)*)`", FENCE.sub("", text)):
            commands.append((f"{where} inline", " ".join(span.split())))
    return [(where, text) for where, text in commands if command_words(text) is not None]


def command_words(text: str) -> list[str] | None:
    """The words after ``markovformer`` when ``text`` runs it (``markovformer``, ``python -m markovformer``,
    ``torchrun ... -m markovformer``, after environment assignments); None otherwise."""
    words = text.split()
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if not words or words[0] not in ("markovformer", "python", "torchrun", "srun"):
        return None
    for index, word in enumerate(words):
        if word == "markovformer" and (index == 0 or words[index - 1] == "-m"):
            return words[index + 1:]
    return None


def subcommand_parsers(parser: argparse.ArgumentParser, words: list[str]) -> list[tuple[int, argparse.ArgumentParser]]:
    """(position, parser) of the top parser and of each subcommand ``words`` descends into."""
    found = [(0, parser)]
    for index, word in enumerate(words):
        if word.startswith("-"):
            continue
        choices = [a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not choices or word not in choices[0]:
            break
        parser = choices[0][word]
        found.append((index, parser))
    return found


def test_the_documents_show_commands_to_check():
    assert len(documented_commands()) >= 30  # the README's synopsis, its examples and its inline commands


@pytest.mark.parametrize("where,text", documented_commands())
def test_every_documented_flag_exists_for_its_subcommand(where, text):
    words = command_words(text)
    parsers = subcommand_parsers(build_parser(), words)
    for index, word in enumerate(words):
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", word):
            parser = [entry for entry in parsers if entry[0] <= index][-1][1]
            known = {option for action in parser._actions for option in action.option_strings}
            assert flag in known, f"{where}: {text!r}: {flag} is not an option of `{parser.prog}`"


def concrete_argv(text: str) -> list[str] | None:
    """The arguments of a command with no placeholder in it; None for a synopsis line."""
    words = command_words(re.sub(r"\s+#\s.*$", "", text))  # without a shell comment
    return None if any(PLACEHOLDER.search(word) for word in words) else shlex.split(" ".join(words))


def parsed(argv: list[str]) -> tuple[argparse.Namespace | None, str]:
    """The command's arguments as its parser reads them, or None and the parser's error."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return build_parser().parse_args(argv), ""
    except SystemExit:
        return None, errors.getvalue().strip().splitlines()[-1]


def whole_command(where: str, text: str) -> bool:
    """A command to parse whole: no placeholder, and, inline, not a subcommand named in passing without its
    required arguments (`markovformer generate --compile-step` names a flag)."""
    argv = concrete_argv(text)
    return argv is not None and not (where.endswith("inline") and "arguments are required" in parsed(argv)[1])


CONCRETE = [(where, text) for where, text in documented_commands() if whole_command(where, text)]


def test_the_documents_show_concrete_commands_to_check():
    assert len(CONCRETE) >= 8  # the examples, the evidence commands, torchrun and srun


@pytest.mark.parametrize("where,text", CONCRETE)
def test_every_concrete_documented_command_parses_and_its_settings_exist(where, text):
    from markovformer.experiments import EXPERIMENTS
    from markovformer.experiments.settings import configure
    from markovformer.training.run_config import parse_override

    args, error = parsed(concrete_argv(text))
    assert args is not None, f"{where}: {text!r}: {error}"
    if args.command == "experiment" and args.name != "list":
        assert args.name in EXPERIMENTS, f"{where}: {text!r}: no experiment {args.name!r}"
        module = sys.modules[EXPERIMENTS[args.name].run.__module__]
        overrides = dict((parse_override(pair)[0][0], parse_override(pair)[1]) for pair in args.overrides)
        configure(type(module.QUICK)(), overrides, args.name)  # an unknown key or a wrong type raises, naming it
    elif args.command == "bench" and args.settings:
        from markovformer.bench import BenchSettings
        from markovformer.cli.bench import _with_settings

        _with_settings(BenchSettings(), args.settings)
    elif args.command == "train" and args.config and not args.resume:
        from markovformer.training.config_files import locate_config
        from markovformer.training.kind_switches import apply_switching_overrides
        from markovformer.training.run_config import load_yaml, resolve_run_config

        values, _ = apply_switching_overrides(load_yaml(locate_config(args.config)), list(args.overrides))
        resolve_run_config(values)


def test_the_attention_weights_said_to_be_probabilities_are_or_the_exception_is_named():
    """Random features of ``feature_map: trig`` give signed rows that sum to 1 (the README called every random-feature
    layer's weights probabilities): where a model's weights go negative, the sentence that lists them (in
    docs/hugging-face.md) says so."""
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM

    config = MarkovianTransformerConfig(vocab_size=11, d_model=64, n_layers=1, n_heads=2, attention="rff",
                                        feature_map="trig", num_features=8)  # fmt: skip
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(config).eval()
    with torch.no_grad():  # queries and keys of a trained model's size: the features' cosines change sign
        for parameter in model.model.blocks[0].attention.parameters():
            parameter.mul_(20)
        ids = torch.randint(0, 11, (2, 16), generator=torch.Generator().manual_seed(3))
        weights = model(input_ids=ids, return_weights=True).attentions[0]
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 16), rtol=0, atol=1e-5)
    assert weights.min() < 0
    text = " ".join((ROOT / "docs/hugging-face.md").read_text().split())
    sentence = text[text.index("whatever the backend: probabilities for") :].split(";")[0]
    assert "random-feature" in sentence and "trig" in sentence and "signed" in sentence


def test_the_token_store_cache_is_where_the_readme_and_the_text_configs_say(monkeypatch, tmp_path):
    """data.cache_dir, else $MARKOVFORMER_CACHE, else $XDG_CACHE_HOME's markovformer/token_stores (~/.cache's without
    it): the README named ~/.cache where the text configs' comments and the code read $XDG_CACHE_HOME first."""
    from markovformer.data.readers.token_store import cache_root

    monkeypatch.delenv("MARKOVFORMER_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root("") == tmp_path / "markovformer/token_stores"
    text = " ".join((ROOT / "README.md").read_text().split())
    chain = text[text.index("cached under `data.cache_dir`"):][:200]
    assert "`$XDG_CACHE_HOME/markovformer/token_stores`" in chain and chain.index("$MARKOVFORMER_CACHE") < chain.index(
        "$XDG_CACHE_HOME")
    for name in ("text_char", "text_bpe"):
        comment = (ROOT / f"src/markovformer/configs/{name}.yaml").read_text()
        assert "$MARKOVFORMER_CACHE, else $XDG_CACHE_HOME" in comment


def test_the_task_options_sentence_names_every_tasks_own_options():
    """The Configs section lists each task's `task_options` (vmt_hmm.yaml sets all four of the VMT's); it named three,
    leaving out `iw_samples`, the K of the importance-weighted bound validation reports."""
    from dataclasses import fields

    from markovformer.training.tasks import TASKS

    text = " ".join((ROOT / "README.md").read_text().split())
    sentence = text[text.index("a task's own options go in `task_options`"):][:400].split("; each field's help")[0]
    for name, task in TASKS.items():
        for option in fields(task.Options):
            assert f"`{option.name}`" in sentence.split(f"`{name}`: ", 1)[1], (name, option.name)


def test_every_name_the_documents_place_in_a_file_is_defined_there():
    """"`NAME` (`path.py`)" in the README or docs/ (docs/extending.md holds most) sends a contributor to the file that
    defines NAME: `FILE_OPTIONS` (`training/build.py`) stayed after the tuple moved to training/run_config.py, where
    build.py only imports it."""
    places = [(document.relative_to(ROOT), name, path) for document in DOCUMENTS
              for name, path in re.findall(r"`([A-Za-z_]\w*)(?:\([^`]*\))?` \(`((?:\w+/)*\w+\.py)`",
                                           " ".join(document.read_text().split()))]  # fmt: skip
    assert len(places) >= 20
    files = [*(ROOT / "src/markovformer").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    for where, name, path in places:
        found = [file for file in files if file.as_posix().endswith("/" + path)]
        assert len(found) == 1, f"{where}: `{name}` (`{path}`): {len(found)} files end with {path}"
        defined = rf"^\s*(?:def|class)\s+{name}\b|^{name}\s*(?::[^=\n]*)?="
        assert re.search(defined, found[0].read_text(), re.M), f"{where}: `{name}` is not defined in {path}"

"""The second hour of a new user (issue 32): shipped configs from anywhere, overrides that switch a source, an
attention kind or a model type, fine-tuning from a trained run (init_from), and generate's and eval's options."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import one_line_error

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the dev extra's tomli, the same parser
    import tomli as tomllib

from markovformer.training.config_files import SHIPPED_DIR, locate_config, shipped_config, shipped_configs
from markovformer.training.trainer_config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_the_configs_ship_as_package_data_and_the_clone_links_to_them():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "configs/*.yaml" in project["tool"]["setuptools"]["package-data"]["markovformer"]
    assert SHIPPED_DIR == ROOT / "src/markovformer/configs" and "text_char" in shipped_configs()
    assert (ROOT / "configs").resolve() == SHIPPED_DIR  # README commands from a clone read the same files


def test_a_config_argument_finds_a_file_then_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text_char = SHIPPED_DIR / "text_char.yaml"
    for spelling in ("text_char", "text_char.yaml", "configs/text_char.yaml"):
        assert locate_config(spelling) == text_char
    (tmp_path / "configs").mkdir()
    own = tmp_path / "configs" / "text_char.yaml"
    own.write_text("task: causal_lm\n")
    assert locate_config("configs/text_char.yaml") == Path("configs/text_char.yaml")  # the user's own file first
    with pytest.raises(ConfigError, match="no such config file"):
        locate_config("elsewhere/text_char.yaml")  # a path in another folder is never a shipped name
    with pytest.raises(ConfigError, match="text_char"):
        shipped_config("text_chr")


def test_train_reads_a_shipped_config_outside_a_clone(main_cli):
    """From a folder without configs/ (as after `pip install`), configs/NAME.yaml is the shipped config: the run
    gets as far as the mistyped key."""
    one_line_error(main_cli("train", "configs/causal_lm_chain.yaml", "trainer.max_stepz=3"), "trainer.max_stepz")
    one_line_error(main_cli("train", "configs/no_such.yaml"), "no such config file", "config list")
    # a mistyped shipped name: `config show text_chr` named text_char, `train text_chr` did not
    for typed in ("text_chr", "configs/text_chr.yaml"):
        one_line_error(main_cli("train", typed), "no such config file", "(did you mean 'text_char'?)")


def test_config_list_show_and_copy(main_cli, tmp_path):
    listed = main_cli("config", "list")
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line[:1].strip()]
    assert set(shipped_configs()) <= set(names)
    shown = main_cli("config", "show", "text_char")
    assert shown.returncode == 0 and shown.stdout == (SHIPPED_DIR / "text_char.yaml").read_text()
    copied = main_cli("config", "copy", "vmt_hmm")
    assert copied.returncode == 0, copied.stderr
    assert (tmp_path / "vmt_hmm.yaml").read_text() == (SHIPPED_DIR / "vmt_hmm.yaml").read_text()
    one_line_error(main_cli("config", "copy", "vmt_hmm"), "already exists", "--force")
    (tmp_path / "mine").mkdir()
    assert main_cli("config", "copy", "text_bpe", "mine").returncode == 0
    assert yaml.safe_load((tmp_path / "mine" / "text_bpe.yaml").read_text())["data"]["tokenizer"] == "bpe"
    one_line_error(main_cli("config", "show", "text_chr"), "text_char", "config list")


def test_config_list_gives_each_config_its_first_whole_sentence(tmp_path):
    """The listing summarises a config by its comment's first sentence, across lines and past "e.g." or "et al.";
    it printed the first line only, which cut 11 of 17 summaries mid-sentence ("... fetched from Debian with")."""
    from markovformer.training.config_files import config_summary

    path = tmp_path / "x.yaml"
    path.write_text("# MQAR (Arora et al. 2023) on DNA (e.g. promoters) over\n# two lines: the cell of table1. Then\n"
                    "# more.\n#   markovformer train x.yaml\ntask: causal_lm\n")  # fmt: skip
    assert config_summary(path) == "MQAR (Arora et al. 2023) on DNA (e.g. promoters) over two lines: the cell of table1"
    path.write_text("# A run that stops before its command line:\n#   markovformer train x.yaml\n# Later.\n")
    assert config_summary(path) == "A run that stops before its command line"


def test_switching_the_data_source_drops_the_old_sources_options_and_says_so():
    from markovformer.training.demo import DEMO_CONFIG
    from markovformer.training.kind_switches import apply_switching_overrides

    values, notes = apply_switching_overrides(yaml.safe_load(yaml.safe_dump(DEMO_CONFIG)),
                                              ["data.source=text", "data.path=notes.txt"])  # fmt: skip
    assert values["data"] == {"source": "text", "path": "notes.txt", "seq_len": 128}  # seq_len: text takes it
    assert len(notes) == 1 and "data.kind" in notes[0] and "data.num_symbols" in notes[0]
    values, notes = apply_switching_overrides(yaml.safe_load(yaml.safe_dump(DEMO_CONFIG)),
                                              ["data.source=text", "data.kind=lagged"])  # fmt: skip
    assert values["data"]["kind"] == "lagged"  # typed by the user: kept, and the source's own check names it
    values, notes = apply_switching_overrides(yaml.safe_load(yaml.safe_dump(DEMO_CONFIG)), ["data.strength=2.0"])
    assert values["data"]["kind"] == "lagged" and notes == []  # no switch, nothing dropped


def test_switching_the_attention_kind_drops_the_options_it_does_not_read():
    from markovformer.models.markovian_transformer.config import MarkovianTransformerConfig
    from markovformer.training.demo import DEMO_CONFIG
    from markovformer.training.kind_switches import apply_switching_overrides

    values, notes = apply_switching_overrides(yaml.safe_load(yaml.safe_dump(DEMO_CONFIG)), ["model.attention=retnet"])
    assert "scope" not in values["model"] and "max_order" not in values["model"]
    assert {"d_model", "n_layers", "n_heads"} <= set(values["model"]) and "model.scope" in notes[0]
    MarkovianTransformerConfig(vocab_size=16, **values["model"])  # builds: nothing left that retnet refuses
    values, _ = apply_switching_overrides(yaml.safe_load(yaml.safe_dump(DEMO_CONFIG)), ["model.attention=softmax"])
    assert values["model"]["scope"] == "local"  # softmax reads scope (sliding-window softmax): kept


@pytest.mark.parametrize("attention", ["[[markov], softmax]", "[{kind: [markov]}, softmax]"])
def test_a_typed_attention_kind_that_is_a_list_is_refused_naming_it(attention, tmp_path):
    """`markovformer train 'model.attention=[[markov], softmax]'` ended in a traceback (TypeError: unhashable type:
    'list'): the switch's reading of the typed kinds put them in a set before any check saw them."""
    from conftest import run_in_process

    one_line_error(run_in_process("train", f"model.attention={attention}", "output_dir=run", cwd=tmp_path),
                   "attention=", "layer 0: kind ['markov'] must be a string naming a kind")  # fmt: skip
    assert not (tmp_path / "run").exists()


def test_switching_the_model_type_drops_the_options_the_new_family_does_not_take():
    """`markovformer train model_type=scan_markov model.order=3` on the demo failed on 'unknown key model.n_layers',
    a key the user never typed (the demo's Markovian Transformer section)."""
    from markovformer.models.scan_markov import ScanMarkovConfig
    from markovformer.training.demo import DEMO_CONFIG
    from markovformer.training.kind_switches import apply_switching_overrides

    demo = yaml.safe_load(yaml.safe_dump(DEMO_CONFIG))
    values, notes = apply_switching_overrides(demo, ["model_type=scan_markov", "model.order=3"])
    assert values["model"] == {"d_model": demo["model"]["d_model"], "order": 3}  # d_model: Scan Markov takes it
    assert len(notes) == 1 and "model.n_layers" in notes[0] and "model.attention" in notes[0]
    ScanMarkovConfig(vocab_size=16, **values["model"])  # builds: nothing left that it refuses
    values, _ = apply_switching_overrides(yaml.safe_load(yaml.safe_dump(DEMO_CONFIG)),
                                          ["model_type=scan_markov", "model.n_layers=2"])  # fmt: skip
    assert values["model"]["n_layers"] == 2  # typed by the user: kept, and the config's own check names it
    legacy = yaml.safe_load(yaml.safe_dump(DEMO_CONFIG))
    legacy["model"]["max_position"] = 64  # the old name of max_positions, which Scan Markov takes too
    values, notes = apply_switching_overrides(legacy, ["model_type=scan_markov"])
    assert values["model"]["max_positions"] == 64 and "max_position" not in values["model"]


def test_train_with_the_demo_switched_to_text_reaches_the_text_source(main_cli, tmp_path):
    done = main_cli("train", "data.source=text", f"data.path={tmp_path / 'missing.txt'}")
    one_line_error(done, "missing.txt")
    assert "dropped" in done.stdout and "data.kind" in done.stdout


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A tiny LM run trained for a few steps (through the library: the tests below use it as a starting point)."""
    from conftest import TINY_RUN

    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    folder = tmp_path_factory.mktemp("small")
    values = yaml.safe_load(yaml.safe_dump(TINY_RUN))
    values["trainer"].update({"max_steps": 4, "warmup_steps": 2, "eval_every": 4, "checkpoint_every": 4,
                              "log_every": 2})
    values["output_dir"] = str(folder / "run")
    train(resolve_run_config(values))
    (folder / "tiny.yaml").write_text(yaml.safe_dump({**values, "output_dir": str(folder / "other")}))
    return folder


def test_init_from_copies_every_tensor_of_a_run_or_a_saved_model(small_run):
    import torch

    from markovformer.training.init_from import initialise_from, initialised_line
    from markovformer.training.runner import build_model, load_run

    config, trained, run_dir = load_run(small_run / "run")
    for source in (run_dir, run_dir / "model"):  # a run directory, and the save_pretrained folder inside it
        torch.manual_seed(1)
        fresh = build_model(config, {"vocab_size": trained.config.vocab_size})
        assert not torch.equal(fresh.lm_head.weight, trained.lm_head.weight)
        line = initialised_line(initialise_from(fresh, source, []))
        assert all(torch.equal(fresh.state_dict()[k], v) for k, v in trained.state_dict().items()), source
        assert "tensors" in line and "fresh" not in line


def test_init_from_a_checkpoint_file_starts_from_that_checkpoints_weights(tmp_path, main_cli, monkeypatch):
    """A run's checkpoint file (eval, generate and inspect take one) was refused as "no such run or model
    directory", though it exists: init_from now reads it as eval does, checked against its run's fingerprint."""
    import torch
    from conftest import TINY_RUN

    from markovformer.training.init_from import initialise_from
    from markovformer.training.runner import build_model, load_run

    values = yaml.safe_load(yaml.safe_dump(TINY_RUN))
    values["trainer"].update({"max_steps": 4, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2})
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(values))
    assert main_cli("train", "tiny.yaml", "output_dir=run").returncode == 0
    checkpoint = tmp_path / "run" / "checkpoints" / "step-000002.ckpt"
    (_, at_step_2, _), (config, final, _) = load_run(checkpoint), load_run(tmp_path / "run")
    assert not torch.equal(at_step_2.lm_head.weight, final.lm_head.weight)
    fresh = build_model(config, {"vocab_size": final.config.vocab_size})
    initialise_from(fresh, checkpoint, [])
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in at_step_2.state_dict().items())
    done = main_cli("train", "tiny.yaml", f"init_from={checkpoint}", "output_dir=tuned", "trainer.max_steps=2")
    assert done.returncode == 0 and f"initialised from {checkpoint}" in done.stdout, done.stderr[-2000:]
    (tmp_path / "notes.txt").write_text("not weights")
    refused = main_cli("train", "tiny.yaml", "init_from=notes.txt", "output_dir=x")
    one_line_error(refused, "init_from='notes.txt'", "a checkpoint file")
    assert not (tmp_path / "x").exists()
    # named from inside checkpoints/, its run (whose tokenizer a text run's init_from takes) is still two folders up
    from markovformer.training.init_from import checkpoint_run

    monkeypatch.chdir(tmp_path / "run" / "checkpoints")
    assert checkpoint_run(Path(checkpoint.name)).resolve() == (tmp_path / "run").resolve()


def test_init_from_refuses_to_tie_two_different_weights_of_the_source(tmp_path):
    """A source with its embedding and output head apart, into a model that ties them: both were loaded into the
    one weight and the embedding became the source's head, "15 of 15 tensors" and no error."""
    import torch

    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
    from markovformer.training.init_from import initialise_from

    size = dict(vocab_size=11, d_model=16, n_heads=2, n_layers=1)
    MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**size)).save_pretrained(tmp_path / "untied")
    tied = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**size, tie_word_embeddings=True))
    with pytest.raises(ConfigError, match=r"holds lm_head\.weight and model\.embed\.weight apart .* ties them"):
        initialise_from(tied, tmp_path / "untied", [])
    initialise_from(tied, tmp_path / "untied", ["head"])  # the head left out: the embedding is the source's
    source = MarkovianTransformerForCausalLM.from_pretrained(tmp_path / "untied")
    assert torch.equal(tied.model.embed.weight, source.model.embed.weight)
    assert tied.lm_head.weight is tied.model.embed.weight


def test_init_from_refuses_a_source_with_tensors_this_model_lacks_naming_them(tmp_path):
    """A two-layer source into a one-layer model: every tensor of the model is found, so only the source's second
    layer, which would be dropped without a word, tells them apart."""
    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
    from markovformer.training.init_from import initialise_from

    size = dict(vocab_size=11, d_model=16, n_heads=2)
    MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**size, n_layers=2)).save_pretrained(tmp_path / "deep")
    shallow = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**size, n_layers=1))
    unfit = r"does not fit this run's model: \d+ tensors differ \(model\.blocks\.1\.\S* \[[^]]*\] -> not in this model"
    with pytest.raises(ConfigError, match=unfit):
        initialise_from(shallow, tmp_path / "deep", [])


def test_init_from_skip_head_is_refused_for_a_model_without_a_backbone(tmp_path):
    """Scan Markov has no backbone ``model.``: every tensor is "outside" it, so 'head' started all 12 fresh and the
    run printed "initialised from ...: 0 of 12 tensors" as a fine-tuning. It is refused naming its modules; prefixes
    of them do what was meant."""
    import torch

    from markovformer import ScanMarkovConfig, ScanMarkovForCausalLM
    from markovformer.training.init_from import initialise_from, initialised_line

    config = ScanMarkovConfig(vocab_size=11, d_model=16, order=2)
    ScanMarkovForCausalLM(config).save_pretrained(tmp_path / "scan")
    model = ScanMarkovForCausalLM(config)
    with pytest.raises(ConfigError, match=r"'head' .* ScanMarkovForCausalLM has no model\. backbone.* decoder, embed"):
        initialise_from(model, tmp_path / "scan", ["head"])
    line = initialised_line(initialise_from(model, tmp_path / "scan", ["decoder"]))
    source = ScanMarkovForCausalLM.from_pretrained(tmp_path / "scan")
    assert torch.equal(model.embed.weight, source.embed.weight) and "left fresh" in line
    assert not torch.equal(model.decoder[0].weight, source.decoder[0].weight)


def test_init_from_refuses_a_changed_vocabulary_unless_told_to_start_those_tensors_fresh(small_run, main_cli):
    run, config = small_run / "run", small_run / "tiny.yaml"
    refused = main_cli("train", str(config), f"init_from={run}", "data.num_symbols=6")
    one_line_error(refused, "init_from", "model.embed.weight", "init_from_skip: [embeddings]")
    done = main_cli("train", str(config), f"init_from={run}", "data.num_symbols=6",
                    "init_from_skip=[embeddings]", "trainer.max_steps=2", "trainer.eval_every=2")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "initialised from" in done.stdout and "left fresh by init_from_skip" in done.stdout
    one_line_error(main_cli("train", str(config), "init_from_skip=[head]"), "init_from is not")
    typo = main_cli("train", str(config), f"init_from={run}", "init_from_skip=[decoder]", "output_dir=typo")
    one_line_error(typo, "decoder", "head or embeddings")


@pytest.fixture(scope="module")
def char_run(tmp_path_factory):
    """A tiny character-level text run (lines of words) trained for two steps."""
    import random

    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    folder = tmp_path_factory.mktemp("char")
    rng = random.Random(0)
    words = "the cat sat on a mat and ran to see the dog".split()
    text = "\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(400)) + "\n"
    (folder / "notes.txt").write_text(text)
    values = {"task": "causal_lm", "output_dir": str(folder / "run"),
              "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "text", "path": str(folder / "notes.txt"), "tokenizer": "char", "seq_len": 16},
              "trainer": {"max_steps": 2, "batch_size": 8, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                          "log_every": 1, "eval_batch_size": 8}}  # fmt: skip
    train(resolve_run_config(values))
    return folder / "run"


def test_generate_help_shows_the_defaults(main_cli):
    done = main_cli("generate", "--help")
    text = " ".join(done.stdout.split())
    assert done.returncode == 0 and "(default: 1.0)" in text and "(default: 0)" in text and "(default: 200)" in text
    assert "--skip-unknown" in text


def test_generate_samples_unconditionally_from_an_empty_prompt(char_run, main_cli):
    done = main_cli("generate", str(char_run), "--prompt", "", "--max-new-tokens", "20")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "line break" in done.stderr and len(done.stdout.rstrip("\n")) >= 1
    again = main_cli("generate", str(char_run), "--prompt", "", "--max-new-tokens", "20")
    assert again.stdout == done.stdout  # the same seed, the same sample
    # without --prompt: the line says how to ask for this (it spoke of an --input never given)
    one_line_error(main_cli("generate", str(char_run), "--max-new-tokens", "20"), "--prompt TEXT", "--prompt ''")


def test_an_empty_prompt_without_a_line_break_never_starts_from_the_padding_id():
    """A tokenizer reserves id 0 for padding; a run without one (token ids) has no padding id to avoid."""
    from markovformer.training.tasks.base import unconditional_start

    class NoLineBreak:
        def encode(self, text):
            raise ValueError(f"{text!r} is not in the alphabet")

        def decode(self, ids):
            return "".join("xy"[i] for i in ids)

    model = SimpleNamespace(config=SimpleNamespace(vocab_size=2))
    assert {unconditional_start(model, NoLineBreak(), seed)[0][0] for seed in range(20)} == {1}
    assert {unconditional_start(model, None, seed)[0][0] for seed in range(20)} == {0, 1}


def test_a_sample_of_a_run_with_documents_ends_with_its_document(tmp_path, capsys):
    """`generate` on a run with documents sampled on past `<eod>`, and a char tokenizer's decode dropped the end:
    documents ran together without a mark. By default the sample stops at the end of its document (as transformers'
    generate stops at the eos this run exports); --through-eod samples on, each end written `<eod>`; an empty prompt
    starts a document. The stopped sample is the start of the one sampled on (the same seed, the same draws)."""
    import torch

    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
    from markovformer.data.readers.tokenizer import CharTokenizer
    from markovformer.models.generation import GenerationConfig
    from markovformer.training.tasks.base import GenerationRequest, continue_prompt

    CharTokenizer("ab\n", end_of_document=True).save(tmp_path / "tokenizer")  # ids: \n a b = 1 2 3, <eod> 4
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=5, d_model=16, n_layers=1,
                                                                       n_heads=2, max_order=2)).eval()  # fmt: skip
    generation = GenerationConfig(max_new_tokens=100, do_sample=True, temperature=4.0)  # near uniform: ends come

    def sample(prompt, through_eod):
        request = GenerationRequest(prompt, generation=generation, seed=3, through_eod=through_eod)
        (text,) = continue_prompt(model, tmp_path, request)
        return text, capsys.readouterr().err

    for prompt in ("ab", ""):
        whole, _ = sample(prompt, through_eod=True)
        stopped, note = sample(prompt, through_eod=False)
        assert whole.count("<eod>") >= 2 and set(whole.replace("<eod>", "")) <= set(prompt + "ab\n")
        assert stopped == whole.split("<eod>")[0] and whole.startswith(prompt)
        assert f"after {len(stopped) - len(prompt)} tokens" in note
    assert "a document from its start" in sample("", through_eod=False)[1]


def test_generate_refuses_a_prompt_id_equal_to_the_vocabulary_size_naming_the_prompt(small_run, main_cli):
    vocab_size = json.loads((small_run / "run" / "model" / "config.json").read_text())["vocab_size"]
    done = main_cli("generate", str(small_run / "run"), "--prompt", f"0 {vocab_size}")
    one_line_error(done, f"--prompt: token id {vocab_size} is outside the vocabulary")


def test_generate_names_the_beam_size_flag_when_a_language_model_has_no_beam_search(small_run, main_cli):
    """The model refuses num_beams > 1; the line names the flag typed (it read `num_beams=4: ...`)."""
    done = main_cli("generate", str(small_run / "run"), "--prompt", "0 1", "--beam-size", "4")
    one_line_error(done, "--beam-size 4: ", "has no beam search")
    assert "num_beams" not in done.stderr


def test_generate_skips_unknown_prompt_characters_when_asked(char_run, main_cli):
    one_line_error(main_cli("generate", str(char_run), "--prompt", "the CAT"), "'C'", "--skip-unknown")
    done = main_cli("generate", str(char_run), "--prompt", "the CAT sat", "--skip-unknown", "--max-new-tokens", "5")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("the  sat") and "dropped 3 prompt characters" in done.stderr


def test_generate_refuses_a_prompt_that_is_not_utf8_naming_the_byte(char_run, main_cli, tmp_path):
    """A byte that is not UTF-8 on the command line (a Latin-1 terminal) reaches Python as a lone surrogate: a BPE
    run failed with 'TypeError: TextInputSequence must be str' and a traceback, a char run called it the character
    '\\udcff'. Both say the byte, its offset and --prompt on one line."""
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    bpe_run = tmp_path / "bpe"
    values = yaml.safe_load((char_run / "config.yaml").read_text())
    values["data"] = {**values["data"], "tokenizer": "bpe", "vocab_size": 300}
    train(resolve_run_config({**values, "output_dir": str(bpe_run)}))
    prompt = b"the \xffcat".decode("utf-8", "surrogateescape")  # what Python makes of that byte in argv
    for run in (char_run, bpe_run):
        for extra in ((), ("--skip-unknown",)):
            done = main_cli("generate", str(run), "--prompt", prompt, "--max-new-tokens", "2", *extra)
            one_line_error(done, "--prompt: byte 0xff at offset 4 is not UTF-8")


def test_eval_says_which_weights_and_step_it_scored(small_run, main_cli, tmp_path):
    import shutil

    from markovformer.training.run_dir import mark_unfinished

    finished = main_cli("eval", str(small_run / "run"))
    assert finished.returncode == 0 and "(final model, step 4)" in finished.stdout, finished.stderr[-2000:]
    killed = tmp_path / "killed"
    shutil.copytree(small_run / "run", killed)
    mark_unfinished(killed)  # as a run killed after its step-4 checkpoint
    done = main_cli("eval", str(killed), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    assert json.loads(done.stdout)["weights"] == {"source": "checkpoints/last.ckpt", "step": 4, "finished": False,
                                                  "run_finished": False}  # fmt: skip
    assert "last.ckpt at step 4: the run is unfinished" in main_cli("eval", str(killed)).stdout
    named = main_cli("eval", str(small_run / "run" / "checkpoints" / "step-000004.ckpt")).stdout
    assert "(checkpoints/step-000004.ckpt at step 4)" in named  # a finished run's checkpoint, asked for by name


@pytest.mark.parametrize("fold_case", [True, False])
def test_generate_reads_a_soft_masked_prompt_as_the_run_read_its_fasta(tmp_path, main_cli, fold_case):
    """A run of FASTA records with data.fold_case: true read acgt as ACGT; generate refused the prompt 'gaTTac'
    ("character 'g' ... is not in the char alphabet; add --skip-unknown", which would drop its lowercase bases). It
    folds the prompt as the run folded its bases, and only then: a run that kept the soft mask keeps its lowercase
    symbols."""
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    (tmp_path / "reads.fa").write_text("".join(f">r{i}\nACGTacgtNAACCGGTTacgt\ngattacaGATTACA\n" for i in range(40)))
    values = {"task": "causal_lm", "output_dir": str(tmp_path / "run"),
              "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "text", "path": str(tmp_path / "reads.fa"), "tokenizer": "char", "seq_len": 16,
                       "documents": "fasta", "fold_case": fold_case},
              "trainer": {"max_steps": 1, "batch_size": 8, "warmup_steps": 1, "eval_every": 1, "checkpoint_every": 1,
                          "log_every": 1, "eval_batch_size": 8}}  # fmt: skip
    train(resolve_run_config(values))
    sample = ("generate", str(tmp_path / "run"), "--max-new-tokens", "8", "--through-eod", "--prompt")
    lower, upper = main_cli(*sample, "gaTTac"), main_cli(*sample, "GATTAC")
    assert lower.returncode == 0 == upper.returncode, lower.stderr[-2000:]
    if fold_case:
        assert lower.stdout == upper.stdout and lower.stdout.startswith("GATTAC")
        assert "--prompt read as 'GATTAC'" in lower.stderr and "data.fold_case" in lower.stderr
    else:
        assert lower.stdout.startswith("gaTTac") and lower.stdout != upper.stdout and "fold" not in lower.stderr

"""Bad input at the command line: one line naming the problem, exit status 2, no traceback: a config file (malformed,
empty, not UTF-8, unknown keys, wrong types), a data file, a run or checkpoint, a command's option or argument."""

import re
import shutil

import pytest
from conftest import one_line_error


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A tiny trained LM run shared by the tests that need one."""
    import yaml
    from conftest import TINY_RUN, run_in_process

    folder = tmp_path_factory.mktemp("trained")
    config = folder / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_RUN))
    done = run_in_process("train", str(config), f"output_dir={folder / 'run'}", "trainer.max_steps=10", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder / "run"


def test_malformed_yaml(tmp_path, main_cli):
    path = tmp_path / "bad.yaml"
    path.write_text("task: causal_lm\nmodel: [d_model: 4\n")
    one_line_error(main_cli("train", str(path)), "bad.yaml", "malformed YAML")


def test_empty_config_file(tmp_path, main_cli):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    one_line_error(main_cli("train", str(path)), "empty")


def test_a_config_file_that_is_not_utf8_is_named(tmp_path, main_cli):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("task: caus\xe9al_lm\n".encode("latin-1"))  # was the codec's message without the file
    one_line_error(main_cli("train", str(path)), f"{path}: not a UTF-8 text file")


def test_unknown_keys_get_a_suggestion(main_cli):
    one_line_error(main_cli("train", "trainer.max_stepz=3"), "trainer.max_stepz", "max_steps")
    one_line_error(main_cli("train", "model.max_ordr=3"), "max_ordr", "max_order")
    one_line_error(main_cli("train", "data.num_symbol=3"), "data.num_symbol", "num_symbols")
    one_line_error(main_cli("train", "tsk=causal_lm"), "tsk", "task")


def test_wrong_types_and_values(main_cli):
    one_line_error(main_cli("train", "trainer.max_steps=abc"), "trainer.max_steps", "int")
    one_line_error(main_cli("train", "model.attention=quantum"), "attention", "quantum")
    one_line_error(main_cli("train", "model.d_model=30", "model.n_heads=4"), "d_model", "n_heads")
    one_line_error(main_cli("train", "task=ctc"), "markov_chain", "ctc")


def test_fasta_letter_outside_the_vocabulary(tmp_path, main_cli):
    (tmp_path / "seqs.fa").write_text(">a\nACGT\n>b\nACXT\n")
    (tmp_path / "labels.tsv").write_text("a\t0\nb\t1\n")
    done = main_cli("train", "task=sequence_classification", "data={source: fasta}",
                    f"data.path={tmp_path / 'seqs.fa'}", f"data.labels={tmp_path / 'labels.tsv'}")  # fmt: skip
    one_line_error(done, "'b'", "'X'")


def test_csv_with_nan_and_without_the_label_column(tmp_path, main_cli):
    rows = ["x,y,label"] + [f"{i},{i % 3},{i % 2}" for i in range(40)]
    rows[7] = "6,nan,0"
    (tmp_path / "series.csv").write_text("\n".join(rows) + "\n")
    common = [
        "task=sequence_classification",
        "data={source: csv_series, window: 4}",
        f"data.path={tmp_path / 'series.csv'}",
    ]
    one_line_error(main_cli("train", *common), "line 8", "'y'")
    one_line_error(main_cli("train", *common, "data.label_column=target"), "target")


def test_empty_text_file(tmp_path, main_cli):
    (tmp_path / "empty.txt").write_text("")
    one_line_error(main_cli("train", "data={source: text}", f"data.path={tmp_path / 'empty.txt'}"),
                          "empty.txt")


def test_missing_data_file(tmp_path, main_cli):
    one_line_error(main_cli("train", "data={source: text}", f"data.path={tmp_path / 'nope.txt'}"), "nope.txt")


def test_token_id_outside_the_vocabulary(trained_run, main_cli):
    one_line_error(main_cli("generate", str(trained_run), "--prompt", "1 2 99"), "99", "vocabulary")


def test_checkpoint_from_another_model(trained_run, tmp_path, main_cli):
    import yaml
    from conftest import TINY_RUN

    other = {**TINY_RUN, "model": {**TINY_RUN["model"], "d_model": 32}}
    config = tmp_path / "other.yaml"
    config.write_text(yaml.safe_dump(other))
    assert main_cli("train", str(config), f"output_dir={tmp_path / 'other'}", "trainer.max_steps=10").returncode == 0
    foreign = trained_run / "checkpoints" / "foreign.ckpt"
    shutil.copy(tmp_path / "other" / "checkpoints" / "last.ckpt", foreign)
    try:
        one_line_error(main_cli("eval", str(foreign)), "foreign.ckpt", "does not match")
    finally:
        foreign.unlink()


def test_eval_refuses_a_beam_size_for_a_run_whose_scoring_decodes_nothing(trained_run, main_cli):
    """Only a translation run's scoring decodes with beams: a language model's would ignore --beam-size 4 unsaid."""
    one_line_error(main_cli("eval", str(trained_run), "--beam-size", "4"), "--beam-size 4: ",
                   "only a translation run's scoring decodes with beams")


def test_not_a_run_directory(tmp_path, main_cli, trained_run):
    one_line_error(main_cli("eval", str(tmp_path)), "not a run directory")
    # a run's model/ (a Hugging Face model directory) or checkpoints/: the error names the run around it
    for command in (["eval", str(trained_run / "model")], ["generate", str(trained_run / "model"), "--prompt", "a"],
                    ["train", "--resume", str(trained_run / "checkpoints")]):  # fmt: skip
        one_line_error(main_cli(*command), f"it is inside the run {trained_run}: give that")


def test_model_field_of_the_wrong_type(main_cli):
    one_line_error(main_cli("train", 'model.dropout="0.1"'), "model.dropout", "float")


def test_data_task_must_agree_with_the_run_task(tmp_path, main_cli):
    rows = ["x,label"] + [f"{i},{i % 2}" for i in range(40)]
    (tmp_path / "series.csv").write_text("\n".join(rows) + "\n")
    data = f"data={{source: csv_series, window: 4, path: {tmp_path / 'series.csv'}, task: sequence_classification}}"
    one_line_error(main_cli("train", "task=token_classification", data), "data.task", "token_classification")


def test_eval_on_a_file_whose_classes_differ_is_refused_naming_both(tmp_path, main_cli):
    """Classes are ids in sorted-name order: another file's ['flat', 'up', 'zzz'] scored 'flat' as the run's
    'down' (id 0), with exit 0."""
    names = {"run.csv": ("down", "flat", "up"), "other.csv": ("flat", "up", "zzz")}
    for file, labels in names.items():
        rows = ["x,label"] + [f"{i % 7},{labels[(i // 3) % 3]}" for i in range(90)]
        (tmp_path / file).write_text("\n".join(rows) + "\n")
    data = f"data={{source: csv_series, window: 4, path: {tmp_path / 'run.csv'}, task: sequence_classification}}"
    trained = main_cli("train", "task=sequence_classification", data, f"output_dir={tmp_path / 'run'}",
                       "model={d_model: 16, n_layers: 1, n_heads: 2, max_order: 2}", "trainer.max_steps=2",
                       "trainer.eval_every=2", "trainer.batch_size=4", "trainer.warmup_steps=1")  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    refused = main_cli("eval", str(tmp_path / "run"), "--data", f"path={tmp_path / 'other.csv'}")
    one_line_error(refused, "['flat', 'up', 'zzz'] are not the run's ['down', 'flat', 'up']")
    assert main_cli("eval", str(tmp_path / "run"), "--data", f"path={tmp_path / 'run.csv'}").returncode == 0


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--beam-size", "0", "--beam-size 0 must lie in [1, 1024]"),
    ("--beam-size", "-2", "--beam-size -2 must lie in [1, 1024]"),
    ("--beam-size", "1025", "--beam-size 1025 must lie in [1, 1024]"),
    ("--batch-size", "0", "--batch-size 0 must be >= 1"),
    ("--iw-samples", "-1", "--iw-samples -1 must be >= 0"),
])  # fmt: skip
def test_eval_refuses_an_option_out_of_its_range_before_reading_the_run(tmp_path, main_cli, option, value, message):
    """--beam-size lies in [1, MAX_BEAMS], --batch-size >= 1, --iw-samples >= 0: a value outside is refused by name
    (checked before the run is read, so a missing run is not what the error names)."""
    one_line_error(main_cli("eval", str(tmp_path / "no_run"), option, value), message)


def test_an_experiment_setting_with_a_dot_is_refused_not_read_as_its_first_part(tmp_path, main_cli):
    """`--set steps.x=5`: experiment settings are flat; taking its first part would set steps=5 without a word."""
    one_line_error(main_cli("experiment", "weight-tying", "--set", "steps.x=5", "--out", str(tmp_path / "out")),
                   "--set 'steps.x=5': experiment settings are flat")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv,prog,close", [
    (["trian"], "markovformer", "'train'"),  # a mistyped command
    (["data", "lst"], "markovformer data", "'list'"),  # and subcommand
    (["eval", "some_run", "--split", "tset"], "markovformer eval", "'test'"),  # a choice
    (["generate", "some_run", "--tempreature", "3"], "markovformer generate", "'--temperature'"),  # an option
    (["train", "--dbug"], "markovformer train", "'--debug'"),
])  # fmt: skip
def test_a_mistyped_command_choice_or_option_is_one_line_naming_the_closest(main_cli, argv, prog, close):
    done = main_cli(*argv)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr  # no usage block before the error
    assert lines[0].startswith(f"{prog}: error:") and f"(did you mean {close}?)" in lines[0], lines[0]
    assert lines[0].endswith(f"see `{prog} --help`"), lines[0]


@pytest.mark.parametrize("option", ["--prompt", "--input"])
def test_generate_refuses_a_repeated_prompt_or_input_instead_of_dropping_the_first(option, capsys):
    # argparse keeps the last of a repeated option: `--prompt A --prompt B` translated B alone, A dropped unsaid
    from markovformer.cli.main import build_parser

    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["generate", "runs/x", option, "first", option, "second"])
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "'first'" in lines[0] and "'second'" in lines[0]
    assert build_parser().parse_args(["generate", "runs/x", option, "only"]).__dict__[option[2:]] == "only"


@pytest.mark.parametrize("argv", [["eval", "-run"], ["train", "--resume", "-run"]])
def test_a_run_whose_path_starts_with_a_dash_is_refused_saying_how_to_give_it(main_cli, tmp_path, argv):
    """argparse took -run for an option: 'the following arguments are required: target', 'argument --resume:
    expected one argument', neither naming the path nor how to give it."""
    (tmp_path / "-run").mkdir()
    done = main_cli(*argv)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "markovformer: error: -run is a path that starts with '-', which reads as an option: give it as ./-run (or "
        "after --); see `markovformer --help`"]  # fmt: skip


@pytest.mark.parametrize(("flags", "message"), [
    (["--temperature", "0", "--top-k", "3"], "--top-k 3: --temperature 0 (greedy decoding) does not sample"),
    (["--temperature", "0", "--top-p", "0.9"], "--top-p 0.9: --temperature 0 (greedy decoding) does not sample"),
    (["--beam-size", "4", "--temperature", "0.7"], "--temperature 0.7: --beam-size 4 (beam search) does not sample"),
])  # fmt: skip
def test_generate_refuses_a_sampling_flag_its_decoding_would_ignore_naming_both(flags, message):
    """`generate RUN --temperature 0 --top-k 3` decoded greedily and ignored --top-k without a word (the same
    tokens as --top-k 1 and as no --top-k)."""
    from markovformer.cli.generate import generation_config
    from markovformer.cli.main import build_parser

    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        generation_config(build_parser().parse_args(["generate", "run", *flags]))
    greedy = generation_config(build_parser().parse_args(["generate", "run", "--temperature", "0", "--top-p", "1"]))
    assert not greedy.do_sample  # a top_p of 1 cuts nothing: no contradiction

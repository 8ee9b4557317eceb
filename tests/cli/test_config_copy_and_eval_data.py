"""``config copy NAME DEST`` puts the copy where DEST says (a trailing separator means a folder) and refuses a missing
folder rather than creating it; ``eval --data`` re-points the run's data but never changes its data source."""

from __future__ import annotations

import os

from conftest import one_line_error


def shipped(name: str) -> str:
    from markovformer.training.config_files import shipped_config

    return shipped_config(name).read_text()


def test_config_copy_into_an_existing_folder_named_with_a_trailing_slash(tmp_path, main_cli):
    (tmp_path / "cfgdir").mkdir()
    done = main_cli("config", "copy", "hidden_order", "cfgdir/")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "cfgdir" / "hidden_order.yaml").read_text() == shipped("hidden_order")
    assert sorted(path.name for path in (tmp_path / "cfgdir").iterdir()) == ["hidden_order.yaml"]


def test_config_copy_refuses_a_missing_folder_named_with_a_trailing_slash(tmp_path, main_cli):
    """It wrote a file named cfgdir."""
    before = sorted(tmp_path.iterdir())
    line = one_line_error(main_cli("config", "copy", "hidden_order", "cfgdir/"), "cfgdir", "no such folder")
    assert "hidden_order" in line
    assert sorted(tmp_path.iterdir()) == before


def test_config_copy_refuses_a_missing_nested_folder_named_with_a_trailing_slash(tmp_path, main_cli):
    """It created newdir/ and wrote a file named sub in it."""
    before = sorted(tmp_path.iterdir())
    one_line_error(main_cli("config", "copy", "hidden_order", "newdir/sub/"), os.path.join("newdir", "sub"),
                   "no such folder")  # fmt: skip
    assert sorted(tmp_path.iterdir()) == before


def test_config_copy_refuses_a_file_in_a_missing_folder(tmp_path, main_cli):
    """It created the missing folder (at the filesystem root for /nonexistent_dir/x.yaml)."""
    missing = tmp_path / "elsewhere" / "nonexistent_dir"
    one_line_error(main_cli("config", "copy", "hidden_order", str(missing / "x.yaml")), str(missing),
                   "no such folder")  # fmt: skip
    assert not (tmp_path / "elsewhere").exists()
    before = sorted(tmp_path.iterdir())
    one_line_error(main_cli("config", "copy", "hidden_order", "newdir/x.yaml"), "newdir", "no such folder")
    assert sorted(tmp_path.iterdir()) == before


def test_config_copy_refuses_a_file_named_as_a_folder(tmp_path, main_cli):
    (tmp_path / "plain").write_text("mine\n")
    one_line_error(main_cli("config", "copy", "hidden_order", "plain/"), "plain", "not a folder")
    one_line_error(main_cli("config", "copy", "hidden_order", "plain/x.yaml"), "plain", "not a folder")
    assert (tmp_path / "plain").read_text() == "mine\n"


def test_config_copy_to_a_file_in_an_existing_folder(tmp_path, main_cli):
    (tmp_path / "made").mkdir()
    done = main_cli("config", "copy", "hidden_order", "made/mine.yaml")  # --force: test_cli_commands' overwrite test
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "made" / "mine.yaml").read_text() == shipped("hidden_order")


def test_eval_refuses_another_data_source_and_accepts_the_runs_own(tmp_path, tiny_config, main_cli):
    """``--data source=X`` re-pointed the run at another source, which failed on the run's own options
    (``unknown key data.path`` for a text run given source=markov_chain): the model is the source's."""
    run = tmp_path / "run"
    trained = main_cli("train", str(tiny_config), f"output_dir={run}")
    assert trained.returncode == 0, trained.stderr[-2000:]
    line = one_line_error(main_cli("eval", str(run), "--data", "source=text"), "source", "'text'", "'markov_chain'")
    assert "its own data source" in line
    done = main_cli("eval", str(run), "--data", "source=markov_chain")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "loss" in done.stdout


def test_eval_refuses_tokenizer_options_other_than_those_of_the_saved_tokenizer(tmp_path, tiny_run, main_cli):
    """``--data tokenizer=bpe vocab_size=300`` on a char run scored with the run's saved char tokenizer all the same
    (the ids its model knows) and printed the char score as the answer: the options were ignored without a word.
    Options equal to the run's, given or defaulted, still score; another file still scores."""
    import yaml

    text = "the chain keeps its order; the state moves on.\n" * 60
    (tmp_path / "corpus.txt").write_text(text, encoding="utf-8")
    (tmp_path / "other.txt").write_text(text[::-1], encoding="utf-8")
    values = {**tiny_run, "data": {"source": "text", "path": str(tmp_path / "corpus.txt"), "seq_len": 16},
              "trainer": {**tiny_run["trainer"], "max_steps": 2, "warmup_steps": 1, "eval_every": 2}}  # fmt: skip
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(values))
    trained = main_cli("train", "text.yaml", "output_dir=run")
    assert trained.returncode == 0, trained.stderr[-2000:]
    for options in (["tokenizer=bpe", "vocab_size=300"], ["vocab_size=300"], ["fit_bytes=4096"]):
        key = options[0].split("=")[0]  # the first option that differs is named
        line = one_line_error(main_cli("eval", "run", "--data", *options), f"--data {key}=", "saved")
        assert "run/tokenizer" in line
    for options in (["tokenizer=char"], [f"path={tmp_path / 'other.txt'}"]):
        done = main_cli("eval", "run", "--data", *options)
        assert done.returncode == 0 and "loss" in done.stdout, done.stderr[-2000:]

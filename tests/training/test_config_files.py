"""Which file a config argument names (``training.config_files.locate_config``)."""

from __future__ import annotations

from pathlib import Path

from markovformer.training.config_files import SHIPPED_DIR, locate_config


def test_a_bare_name_finds_the_copy_config_copy_wrote_before_the_shipped_config(tmp_path, monkeypatch):
    """`config copy text_char` writes ./text_char.yaml; `train text_char` then trained the shipped config, silently
    leaving the edited copy out (the README: a file of that path, if you have one, comes first)."""
    monkeypatch.chdir(tmp_path)
    assert locate_config("text_char") == SHIPPED_DIR / "text_char.yaml"
    Path("text_char.yaml").write_text("task: causal_lm\noutput_dir: runs/mine\n")
    assert locate_config("text_char") == Path("text_char.yaml")
    assert locate_config("text_char.yaml") == Path("text_char.yaml")
    assert locate_config("configs/text_char") == SHIPPED_DIR / "text_char.yaml"  # no ./configs/text_char.yaml here

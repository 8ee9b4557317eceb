"""The de-en recipe: the Ding dictionary's example sentences parse to clean pairs, once each; prepare_de_en writes
them from the Debian package offline (fake apt-get and dpkg), fails clearly, and never leaves a half-written file."""

from __future__ import annotations

import pytest
from debian_fakes import fake_debian

from markovformer.data.recipes.de_en import parse_ding, prepare_de_en
from markovformer.data.translation import read_parallel

PACKAGE, DICTIONARY = "trans-de-en", "usr/share/trans/de-en"

DING_FIXTURE = """\
# Version :: devel 2023-01-30
# License :: GPL Version 2 or later; GNU General Public License
Aal {m} [cook.] | Aale {pl} :: eel | eels
annehmbar; passabel {adj} | halbwegs annehmbar | Seine Noten sind passabel. :: decent; respectable | half-decent | His marks are decent / respectable.
Das ist doch nicht möglich. :: That really isn't possible.
Halt (endlich) die Klappe! :: Shut the fuck up! /STFU/
Es steht außer Frage.; Es besteht kein Zweifel. :: There is no mistaking.
Wir hatten kein leichtes Los. [ugs.] :: We've had a tough time. [coll.]
jdm. etw. geben {vt} | Er gab ihr etw. Geld. :: to give sb. sth. | He gave her some money.
Baum fällt! :: Timber!
Zwei Sinne | Der erste Satz ist hier. :: Only one sense here.
Das ist doch nicht möglich. :: That really isn't possible.
"""  # noqa: E501
DING_PAIRS = [
    ("Das ist doch nicht möglich.", "That really isn't possible."),
    ("Halt die Klappe!", "Shut the fuck up!"),
    ("Es steht außer Frage.", "There is no mistaking."),
    ("Wir hatten kein leichtes Los.", "We've had a tough time."),
]


def test_parse_ding_keeps_clean_example_sentences_once():
    assert parse_ding(DING_FIXTURE.splitlines()) == DING_PAIRS


def test_parse_ding_min_words():
    assert ("Baum fällt!", "Timber!") in parse_ding(DING_FIXTURE.splitlines(), min_words=1)
    with pytest.raises(ValueError, match="min_words"):
        parse_ding([], min_words=0)


def test_parse_ding_malformed_line_names_source_and_line():
    with pytest.raises(ValueError, match=r"de-en: line 2: expected 'German :: English'"):
        parse_ding(["# comment", "Kein Trenner hier."], source="de-en")


def test_prepare_de_en_writes_the_tsv_from_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_debian(tmp_path, {PACKAGE: {DICTIONARY: DING_FIXTURE}}))
    out = prepare_de_en(tmp_path / "out" / "de_en.tsv")
    assert read_parallel(out) == DING_PAIRS
    assert not list((tmp_path / "out").glob(".*.tmp"))


def test_prepare_de_en_download_failure_is_clear_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_debian(tmp_path, {PACKAGE: {DICTIONARY: DING_FIXTURE}}, failing=(PACKAGE,)))
    with pytest.raises(RuntimeError, match=r"could not download trans-de-en .*apt-get update.*Unable to locate"):
        prepare_de_en(tmp_path / "de_en.tsv")
    assert not (tmp_path / "de_en.tsv").exists()


def test_prepare_de_en_package_without_dictionary(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_debian(tmp_path, {PACKAGE: {}}))
    with pytest.raises(RuntimeError, match="trans-de-en package has no usr/share/trans/de-en"):
        prepare_de_en(tmp_path / "de_en.tsv")


def test_prepare_de_en_without_apt(tmp_path, monkeypatch):
    import markovformer.data.recipes.debian as debian

    monkeypatch.setattr(debian.shutil, "which", lambda tool: None if tool == "apt-get" else "/usr/bin/" + tool)
    with pytest.raises(RuntimeError, match="needs 'apt-get'"):
        prepare_de_en(tmp_path / "de_en.tsv")


def test_prepare_de_en_keeps_an_existing_file_when_parsing_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_debian(tmp_path, {PACKAGE: {DICTIONARY: "no separator on this line\n"}}))
    out = tmp_path / "de_en.tsv"
    out.write_text("old\tcontent\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1: expected 'German :: English'"):
        prepare_de_en(out)
    assert out.read_text(encoding="utf-8") == "old\tcontent\n"

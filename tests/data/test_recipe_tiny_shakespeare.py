"""The ``tiny-shakespeare`` recipe with a fake fetcher (no network): checksum, atomic write, the command, and the
lookups that configs and experiments use to find the prepared file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from markovformer.cli.main import main
from markovformer.data.recipes import shakespeare
from markovformer.data.recipes.registry import find_prepared_file
from markovformer.data.sources import TextSource

SHARED = Path(__file__).resolve().parents[2] / "../shared/data/tiny_shakespeare.txt"
FAKE_TEXT = b"First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40


@pytest.fixture
def fake_source(monkeypatch):
    """The recipe's fetcher returns FAKE_TEXT, whose SHA-256 becomes the expected one; records the URLs asked for."""
    asked = []

    def fetch(url: str) -> bytes:
        asked.append(url)
        return FAKE_TEXT

    monkeypatch.setattr(shakespeare, "download", fetch)
    monkeypatch.setattr(shakespeare, "SHA256", hashlib.sha256(FAKE_TEXT).hexdigest())
    return asked


def test_prepare_command_fetches_checks_and_writes_the_file(tmp_path, fake_source, capsys):
    assert main(["data", "prepare", "tiny-shakespeare", "--dir", str(tmp_path)]) == 0
    assert (tmp_path / "tiny_shakespeare.txt").read_bytes() == FAKE_TEXT
    assert fake_source == [shakespeare.URL] and shakespeare.URL.startswith("https://")
    assert "configs/text_char.yaml" in capsys.readouterr().out
    assert main(["data", "prepare", "tiny-shakespeare", "--dir", str(tmp_path)]) == 0  # there already: no fetch
    assert len(fake_source) == 1


def test_a_wrong_checksum_writes_nothing(tmp_path):
    out = tmp_path / "tiny_shakespeare.txt"
    with pytest.raises(RuntimeError, match="SHA-256"):
        shakespeare.prepare_tiny_shakespeare(out, fetch=lambda url: b"not the play")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not SHARED.is_file(), reason=f"no Tiny Shakespeare at {SHARED}")
def test_the_recorded_checksum_is_the_real_file_s():
    content = SHARED.read_bytes()
    assert len(content) == 1_115_394 and hashlib.sha256(content).hexdigest() == shakespeare.SHA256
    assert len(set(content.decode("utf-8"))) == 65  # SPEC 4: 65 symbols (all ASCII: 1,115,394 characters too)


def test_configs_find_the_prepared_file_through_the_data_directory(tmp_path, monkeypatch, fake_source):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MARKOVFORMER_DATA", str(tmp_path / "elsewhere"))
    with pytest.raises(ValueError, match="markovformer data prepare tiny-shakespeare") as missing:
        find_prepared_file("data/tiny_shakespeare.txt")
    assert "\n" not in str(missing.value) and "data.path='data/tiny_shakespeare.txt'" in str(missing.value)
    with pytest.raises(ValueError, match="data prepare tiny-shakespeare"):
        TextSource(path="data/tiny_shakespeare.txt").build(seed=0)
    assert main(["data", "prepare", "tiny-shakespeare"]) == 0  # into $MARKOVFORMER_DATA
    assert find_prepared_file("data/tiny_shakespeare.txt") == tmp_path / "elsewhere" / "tiny_shakespeare.txt"
    bundle = TextSource(path="data/tiny_shakespeare.txt", seq_len=16).build(seed=0)
    assert bundle.splits["num_characters"] == len(FAKE_TEXT)
    with pytest.raises(ValueError, match=r"no such file \(nor .*mine\.txt: \$MARKOVFORMER_DATA is .*\)$") as mine:
        find_prepared_file("data/mine.txt")
    assert "data prepare" not in str(mine.value)  # a file no recipe writes gets no prepare hint


def test_experiments_look_in_the_data_directory_then_where_users_keep_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MARKOVFORMER_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(shakespeare, "REPOSITORY_ROOT", tmp_path / "checkout")
    with pytest.raises(ValueError, match="`markovformer data prepare tiny-shakespeare` downloads it"):
        shakespeare.find_tiny_shakespeare()
    legacy = tmp_path / "checkout" / shakespeare.LEGACY_PATH
    legacy.parent.mkdir(parents=True)
    legacy.write_text("old copy")
    assert shakespeare.find_tiny_shakespeare().read_text() == "old copy"  # ../shared/data beside the checkout
    prepared = tmp_path / "data" / "tiny_shakespeare.txt"
    prepared.parent.mkdir()
    prepared.write_text("prepared")
    assert shakespeare.find_tiny_shakespeare() == prepared  # the prepared copy comes first
    assert shakespeare.find_tiny_shakespeare(str(legacy)) == legacy  # an explicit path wins

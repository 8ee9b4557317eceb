"""The data benchmark: the corpus it builds, and rows that agree with each other and with the store they measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from markovformer.bench.data import _run, build_corpus, cached_corpus, data_targets, run_case
from markovformer.data.readers.text import load_text_lm

SHAKESPEARE = Path(__file__).resolve().parents[2] / "../shared/data/tiny_shakespeare.txt"
_SOURCE = "".join(f"line {chr(97 + i % 26)}: the chain moves on, the state keeps its order.\n" for i in range(400))


def test_the_corpus_is_perturbed_copies_of_the_source_at_the_asked_size(tmp_path):
    source = tmp_path / "source.txt"
    source.write_text(_SOURCE, encoding="utf-8")
    corpus = build_corpus(source, tmp_path / "corpus.txt", 0.1)
    text = corpus.read_text(encoding="utf-8")
    assert abs(len(text) - 100_000) < len(_SOURCE) and text.endswith("\n")
    copies = [part for part in text.split("=== copy ")[1:]]
    assert len(copies) == -(-100_000 // (len(_SOURCE) + 16)) and not any(c.isdigit() for c in text.split("line")[0])
    bodies = [copy.split("===\n", 1)[1] for copy in copies[:-1]]
    assert all(sorted(body.splitlines()) == sorted(_SOURCE.splitlines()) for body in bodies)  # the same lines ...
    assert len(set(bodies)) == len(bodies)  # ... in another order each time
    mtime = corpus.stat().st_mtime_ns
    assert build_corpus(source, tmp_path / "corpus.txt", 0.1).stat().st_mtime_ns == mtime  # reused


def test_a_shared_corpus_cache_keeps_each_sources_corpus(tmp_path):
    """The cache named its corpora by size alone: a run of another source into the same cache read the first
    source's corpus back, recorded under the second source's name."""
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text(_SOURCE, encoding="utf-8")
    second.write_text(_SOURCE.replace("chain", "river"), encoding="utf-8")
    built = [cached_corpus(source, tmp_path / "cache", 0.05) for source in (first, second, first)]
    assert built[0] == built[2] != built[1]
    assert "river" in built[1].read_text(encoding="utf-8") and "river" not in built[0].read_text(encoding="utf-8")


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_prepare_open_and_train_rows_describe_the_store(tmp_path, tokenizer):
    source = tmp_path / "source.txt"
    source.write_text(_SOURCE, encoding="utf-8")
    corpus = str(build_corpus(source, tmp_path / "corpus.txt", 0.1))
    case = {"tokenizer": tokenizer, "vocab": 300, "steps": 2, "corpus": corpus, "cache": str(tmp_path / "cache")}
    prepared = run_case({**case, "case": "prepare"})
    opened = run_case({**case, "case": "open"})
    trained = run_case({**case, "case": "train"})
    bundle = load_text_lm(corpus, tokenizer=tokenizer, vocab_size=300 if tokenizer == "bpe" else None, seq_len=256,
                          fractions=(0.98, 0.01, 0.01), cache_dir=tmp_path / "cache")  # fmt: skip
    store = bundle.train.store
    assert prepared["round_trip"] and prepared["store"] == opened["store"] == str(store.folder)
    text = Path(corpus).read_text(encoding="utf-8")
    assert prepared["tokens"] == opened["tokens"] == len(store)
    assert bundle.tokenizer.decode(np.asarray(store.tokens[:]).tolist()) == text  # the store is the whole corpus
    assert prepared["store_mb"] == len(store) * np.dtype(prepared["dtype"]).itemsize / 1e6
    assert prepared["train_windows"] == trained["train_windows"] == len(bundle.train)
    assert prepared["encode_seconds"] <= prepared["seconds"] and trained["steps"] == 2
    alone = run_case({**case, "case": "hf_tokenizers_alone"})  # HF's own tokenizer: the same ids, so the same count
    assert abs(alone["tokens"] - prepared["tokens"]) <= (0 if tokenizer == "char" else 4)


def test_targets_follow_the_rows():
    large, small = "big.txt", "small.txt"
    rows = [{"case": "prepare", "tokenizer": "char", "corpus": large, "peak_mib": 900.0, "encode_mb_per_second": 8.0},
            {"case": "open", "tokenizer": "char", "corpus": large, "seconds": 1.5},
            {"case": "train", "tokenizer": "char", "corpus": large, "peak_mib": 700.0},
            {"case": "train", "tokenizer": "char", "corpus": small, "peak_mib": 450.0},
            {"case": "hf_tokenizers_alone", "tokenizer": "bpe", "corpus": large, "mb_per_second": 1.0},
            {"case": "hf_tokenizers_alone", "tokenizer": "char", "corpus": large, "mb_per_second": 2.0}]  # fmt: skip
    targets = {t["target"]: t for t in data_targets(rows, large, small)}
    assert targets["prepare peak MiB < 1024"]["met"] and not targets["open seconds < 1"]["met"]
    assert targets["train peak gap MiB < 200"]["value"] == 250.0 and not targets["train peak gap MiB < 200"]["met"]
    ratio = [t for t in targets.values() if t["target"].startswith("encode MB/s over HF")]
    assert [(t["tokenizer"], t["value"]) for t in ratio] == [("char", 4.0)]  # each tokenizer against its own HF row


def test_a_child_that_aborts_is_reported_with_its_reason_and_time():
    code = ("import os, sys, time; time.sleep(0.2); print('memory allocation of 2147483648 bytes failed', "
            "file=sys.stderr); print('note: run with RUST_BACKTRACE=full', file=sys.stderr); os.abort()")
    row = _run([sys.executable, "-c", code], 60, {"case": "nanogpt"})
    assert row["error"] == "exit -6: memory allocation of 2147483648 bytes failed"
    assert 0.2 <= row["seconds_until_error"] < 60 and row["case"] == "nanogpt"


@pytest.mark.slow
def test_the_data_part_at_one_megabyte_writes_consistent_rows(tmp_path, cli):
    if not SHAKESPEARE.is_file():
        pytest.skip(f"needs {SHAKESPEARE}")
    done = cli("bench", "--parts", "data", "--out", str(tmp_path / "bench"), "--set", "data_mb=1", "data_small_mb=0.3",
               "data_steps=3", "data_vocab=400", f"data_source={SHAKESPEARE}", timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr
    part = json.loads((tmp_path / "bench" / "bench.json").read_text())["parts"]["data"]
    rows = {(r["tokenizer"], r["case"], Path(r["corpus"]).name.rsplit("_", 1)[-1]): r for r in part["rows"]}
    assert not [r for r in part["rows"] if "error" in r]
    for tokenizer in ("char", "bpe"):
        prepared = rows[(tokenizer, "prepare", "1MB.txt")]
        assert prepared["round_trip"] and abs(prepared["corpus_mb"] - 1.0) < 0.01
        assert prepared["tokens"] == rows[(tokenizer, "open", "1MB.txt")]["tokens"]
        assert abs(prepared["tokens"] - rows[(tokenizer, "nanogpt", "1MB.txt")]["tokens"]) <= 4
        assert rows[(tokenizer, "train", "0.3MB.txt")]["steps"] == 3
    assert {t["tokenizer"] for t in part["targets"]} == {"char", "bpe"}


def test_the_data_table_shows_a_prepares_whole_rate_beside_its_encoding_rate():
    """A prepare fits the tokenizer, then encodes: its MB/s is the corpus over its whole time (the column showed
    the encoding's rate beside the whole time, 2.5 times the ratio of the two numbers printed)."""
    from markovformer.bench.data import format_data

    row = {"tokenizer": "char", "case": "prepare", "corpus_mb": 5.0, "seconds": 0.5, "mb_per_second": 10.0,
           "encode_mb_per_second": 25.0, "peak_mib": 281.0}  # fmt: skip
    line = format_data({"corpus_mb": 5, "source": "synthetic", "seq_len": 256, "rows": [row]})[-1]
    assert line.split()[2:7] == ["5.0", "0.50", "10.0", "25.0", "281"]


def test_the_train_peak_gap_is_within_the_bound_either_way():
    """"Train peak within 200 MB of the small corpus's": 250 MiB below it is as far off as 250 MiB above."""
    rows = [{"case": "train", "tokenizer": "char", "corpus": "big.txt", "peak_mib": 450.0},
            {"case": "train", "tokenizer": "char", "corpus": "small.txt", "peak_mib": 700.0}]  # fmt: skip
    (gap,) = data_targets(rows, "big.txt", "small.txt")
    assert gap["target"] == "train peak gap MiB < 200" and gap["value"] == -250.0 and gap["met"] is False


def test_rows_with_errors_are_not_read_as_measurements():
    """A prepare that ran out of memory and an open that timed out give no target (their numbers are not readings)."""
    rows = [{"case": "prepare", "tokenizer": "bpe", "corpus": "big.txt", "peak_mib": 10.0,
             "error": "exit -6: memory allocation failed"},
            {"case": "open", "tokenizer": "bpe", "corpus": "big.txt", "seconds": 0.1,
             "error": "timed out"}]  # fmt: skip
    assert data_targets(rows, "big.txt", "small.txt") == []


def test_a_corpus_of_another_size_at_the_same_name_is_rebuilt(tmp_path):
    """A 0.05 MB corpus at the path is not reused for 0.5 MB: the new one is 500,000 bytes within one source copy."""
    source = tmp_path / "source.txt"
    source.write_text(_SOURCE, encoding="utf-8")
    build_corpus(source, tmp_path / "corpus.txt", 0.05)
    assert abs(build_corpus(source, tmp_path / "corpus.txt", 0.5).stat().st_size - 500_000) < len(_SOURCE)


def test_a_prepares_encoding_rate_is_over_the_encodings_time_and_its_peak_over_every_phase(tmp_path, monkeypatch):
    """MB/s of the encoding is the corpus over ``encode_seconds``, the whole rate over ``seconds``; the high-water
    mark is reset before the encoding, so the fitting's 500 MiB (the first reading; later ones 200) is the peak."""
    from markovformer.bench import measure

    readings = iter([500.0])
    monkeypatch.setattr(measure, "status_mib", lambda field, path=None: next(readings, 200.0) if field == "VmHWM"
                        else 100.0)  # fmt: skip
    source = tmp_path / "source.txt"
    source.write_text(_SOURCE, encoding="utf-8")
    corpus = str(build_corpus(source, tmp_path / "corpus.txt", 0.05))
    row = run_case({"case": "prepare", "tokenizer": "char", "vocab": 300, "steps": 1, "corpus": corpus,
                    "cache": str(tmp_path / "cache")})  # fmt: skip
    assert row["encode_seconds"] < row["seconds"]
    assert row["encode_mb_per_second"] == pytest.approx(row["corpus_mb"] / row["encode_seconds"])
    assert row["mb_per_second"] == pytest.approx(row["corpus_mb"] / row["seconds"])
    assert row["fit_peak_mib"] == 500.0 and row["peak_mib"] == 500.0


def test_a_link_planted_at_the_corpus_partial_name_clobbers_nothing(tmp_path):
    """``data_cache`` may be a shared folder (the help's example is /tmp/corpora). The corpus was written to
    ``.NAME.<pid>.partial``, a name another user can guess, opened following links: a link planted there had the
    victim's file overwritten with the corpus and renamed into place as the corpus (measured: a 11-byte file
    became 996 bytes of '=== copy a ===' and corpus.txt a link to it)."""
    import os

    source, victim = tmp_path / "source.txt", tmp_path / "victim.txt"
    source.write_text(_SOURCE, encoding="utf-8")
    victim.write_text("my secrets\n", encoding="utf-8")
    cache = tmp_path / "shared"
    cache.mkdir()
    target = cache / "corpus.txt"
    for pid in {os.getpid(), *range(os.getpid() - 5, os.getpid() + 5)}:
        os.symlink(victim, cache / f".{target.name}.{pid}.partial")
    corpus = build_corpus(source, target, 0.01)
    assert victim.read_text(encoding="utf-8") == "my secrets\n"
    assert not corpus.is_symlink() and corpus.read_text(encoding="utf-8").startswith("=== copy a ===\n")

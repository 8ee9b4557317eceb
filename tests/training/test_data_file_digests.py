"""A run records the sha256 of every data file it reads (data.json), whatever the source: a resume refuses a file
changed since, naming it, and ``eval`` says so. Before, only text was checked (through its token store, and not at
all once the store left the cache): a CSV whose labels were flipped resumed, training on the new labels, exit 0."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import torch
from conftest import one_line_error, run_in_process  # beside this folder

MODEL = "model={d_model: 16, n_layers: 1, n_heads: 2, max_order: 2}"
TRAINER = ("trainer.max_steps=2", "trainer.eval_every=2", "trainer.checkpoint_every=2", "trainer.batch_size=4",
           "trainer.warmup_steps=1", "trainer.logger=csv")  # fmt: skip


def test_a_csv_whose_labels_changed_is_refused_on_resume_naming_it_and_eval_says_so(tmp_path):
    series = tmp_path / "series.csv"
    rows = ["x,y,label"] + [f"{i % 7},{(i * 3) % 5},{(i // 4) % 2}" for i in range(80)]
    series.write_text("\n".join(rows) + "\n")
    data = f"data={{source: csv_series, window: 4, stride: 2, path: {series}, task: sequence_classification}}"
    trained = run_in_process("train", "task=sequence_classification", data, MODEL, *TRAINER, "output_dir=run",
                             cwd=tmp_path)  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    sha256 = hashlib.sha256(series.read_bytes()).hexdigest()

    flipped = ["x,y,label"] + [f"{i % 7},{(i * 3) % 5},{1 - (i // 4) % 2}" for i in range(80)]
    series.write_text("\n".join(flipped) + "\n")  # the features, their normalisation and the classes are the same
    trained_config = (tmp_path / "run" / "config.yaml").read_bytes()
    resumed = run_in_process("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path)
    line = one_line_error(resumed, str(series.resolve()), "changed since the run started")
    # the refused extension changed nothing: the run was left unfinished, its config.yaml saying 4 steps, so eval
    # scored step 2's checkpoint as "unfinished" and a later plain --resume trained to the refused step 4
    assert (tmp_path / "run" / "finished.json").is_file()
    assert (tmp_path / "run" / "config.yaml").read_bytes() == trained_config
    recorded = json.loads((tmp_path / "run" / "data.json").read_text())["file_sha256"]
    assert recorded == {str(series.resolve()): sha256} and sha256 in line
    scored = run_in_process("eval", "run", "--json", cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert json.loads(scored.stdout)["changed_data_files"] == [str(series.resolve())]
    assert json.loads(scored.stdout)["weights"] == {"source": "model", "step": 2, "finished": True,
                                                    "run_finished": True}  # fmt: skip
    assert f"warning: {series.resolve()} changed since the run started" in scored.stderr

    series.write_text("\n".join(rows) + "\n")  # restored: the same bytes, a new mtime
    scored = run_in_process("eval", "run", "--json", cwd=tmp_path)
    assert "changed_data_files" not in json.loads(scored.stdout) and "warning" not in scored.stderr
    resumed = run_in_process("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]


def _train_a_notes_run(tmp_path) -> tuple[str, Path, Path]:
    """A char run "run" on a notes file with its own token cache: the text, the file and the cache."""
    text = "".join(f"line {i} of the notes, words and more words\n" for i in range(200))
    notes = tmp_path / "notes.txt"
    notes.write_text(text)
    cache = tmp_path / "cache"
    data = f"data={{source: text, tokenizer: char, seq_len: 16, path: {notes}, cache_dir: {cache}}}"
    trained = run_in_process("train", "task=causal_lm", data, MODEL, *TRAINER, "output_dir=run", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]
    return text, notes, cache


def test_a_text_changed_after_its_token_store_left_the_cache_is_refused_on_resume(tmp_path):
    """The resume printed that the gone store left nothing to check, and trained on the new text."""
    text, notes, cache = _train_a_notes_run(tmp_path)

    shutil.rmtree(cache)
    notes.write_text(text[3000:] + text[:3000])  # the same length and alphabet: every other record is the same
    resumed = run_in_process("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path)
    one_line_error(resumed, str(notes.resolve()), "changed since the run started")

    shutil.rmtree(cache)
    notes.write_text(text)  # unchanged: the digest stands for the gone store, without a word
    resumed = run_in_process("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "cannot be checked" not in resumed.stdout


def test_a_text_changed_under_a_run_of_a_version_before_digests_and_store_format_3_is_refused_on_resume(tmp_path):
    """A run of 2026-11-29 recorded no sha256 and a format-2 token store, which this version took for gone ("cannot be
    checked") though it was in the cache: a resume trained on the changed text. Its tokens are compared now."""
    text, notes, cache = _train_a_notes_run(tmp_path)
    record = json.loads((tmp_path / "run" / "data.json").read_text())
    del record["file_sha256"]  # as the older version wrote it, and its store
    (tmp_path / "run" / "data.json").write_text(json.dumps(record))
    meta_file = Path(record["splits"]["store"]) / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "format": 2}))

    notes.write_text(text.replace("line 7 of", "line 7 in"))
    resumed = run_in_process("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path)
    one_line_error(resumed, "data rebuilt from the run's config differs")

    notes.write_text(text)  # unchanged: the format-2 store's tokens are the same, without a word
    resumed = run_in_process("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "cannot be checked" not in resumed.stdout


def test_the_data_files_are_every_file_option_resolved_as_the_sources_resolve_them(tmp_path, monkeypatch):
    from markovformer.training.build import data_files

    folder = tmp_path / "texts"
    (folder / ".hidden").mkdir(parents=True)
    for name in ("b.txt", "a.txt", ".hidden/c.txt"):
        (folder / name).write_text("words\n")
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    (prepared / "genes.fa").write_text(">x\nACGT\n")
    (tmp_path / "labels.tsv").write_text("x\t1\n")
    monkeypatch.setenv("MARKOVFORMER_DATA", str(prepared))
    monkeypatch.chdir(tmp_path)
    assert data_files({"source": "text", "path": str(folder)}) == [folder / "a.txt", folder / "b.txt"]
    assert data_files({"source": "text", "path": f"{folder}/*.txt", "cache_dir": str(tmp_path)}) == [
        folder / "a.txt", folder / "b.txt"]  # fmt: skip
    assert data_files({"source": "fasta", "path": "data/genes.fa", "labels": "labels.tsv"}) == [
        prepared / "genes.fa", tmp_path / "labels.tsv"]  # fmt: skip
    assert data_files({"source": "translation_file", "path": "labels.tsv", "target_path": None}) == [
        tmp_path / "labels.tsv"]  # fmt: skip
    assert data_files({"source": "hf_dataset", "data_files": [str(folder / "a.txt"), str(folder / "a.txt")]}) == [
        folder / "a.txt"]  # fmt: skip
    assert data_files({"source": "markov_chain", "num_symbols": 4}) == []


def test_every_option_a_source_resolves_as_a_file_is_a_file_option():
    """A source's file is recorded and checked only when its option's name is in FILE_OPTIONS: a new source whose
    file option had another name (`tsv:`) trained, resumed after an edit and was scored without a word."""
    import re
    from pathlib import Path

    from markovformer.data import sources
    from markovformer.training.run_config import FILE_OPTIONS

    code = Path(sources.__file__).read_text()
    resolved = set(re.findall(r"(?:_require_path|find_prepared_file)\(self\.(\w+)", code))
    assert {"path", "labels", "reference", "target_path"} <= resolved  # the pattern finds the sources' files
    assert resolved <= set(FILE_OPTIONS), f"add {resolved - set(FILE_OPTIONS)} to FILE_OPTIONS (training/run_config.py)"


def test_a_file_of_many_hash_chunks_is_hashed_whole_and_a_change_to_its_last_byte_is_refused(tmp_path, monkeypatch):
    """Data files are hashed a chunk at a time (GBs): with 7-byte chunks this 8.7 kB text is 1242 of them, the last
    one partial; the digest is the whole file's, so a change to the last byte alone is refused on resume."""
    from markovformer import file_digest

    monkeypatch.setattr(file_digest, "HASH_CHUNK_BYTES", 7)
    text = "".join(f"line {i} of the notes, words and more words\n" for i in range(200))
    notes = tmp_path / "notes.txt"
    notes.write_text(text)
    assert len(text) > 1000 * 7 and len(text) % 7 != 0
    cache = tmp_path / "cache"
    data = f"data={{source: text, tokenizer: char, seq_len: 16, path: {notes}, cache_dir: {cache}}}"
    trained = run_in_process("train", "task=causal_lm", data, MODEL, *TRAINER, "output_dir=run", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]
    recorded = json.loads((tmp_path / "run" / "data.json").read_text())["file_sha256"]
    assert recorded == {str(notes.resolve()): hashlib.sha256(text.encode()).hexdigest()}

    shutil.rmtree(cache)  # the store would tell the change too: the digest is left as the one check
    notes.write_text(text[:-1] + "s")  # the last "\n": a character of the alphabet, in the test part
    resumed = run_in_process("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path)
    one_line_error(resumed, str(notes.resolve()), "changed since the run started")


def test_a_run_trained_through_the_data_directory_is_scored_without_it_from_the_files_it_recorded(
    tmp_path, monkeypatch
):
    """A CSV named data/series.csv, found in $MARKOVFORMER_DATA at training: ``eval`` without the variable scores the
    file data.json recorded (the same metrics as with it); before, only text runs did, and this one exited 2."""
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    rows = ["x,y,label"] + [f"{i % 7},{(i * 3) % 5},{(i // 4) % 2}" for i in range(80)]
    (prepared / "series.csv").write_text("\n".join(rows) + "\n")
    data = "data={source: csv_series, window: 4, stride: 2, path: data/series.csv, task: sequence_classification}"
    monkeypatch.setenv("MARKOVFORMER_DATA", str(prepared))
    trained = run_in_process("train", "task=sequence_classification", data, MODEL, *TRAINER, "output_dir=run",
                             cwd=tmp_path)  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    with_variable = run_in_process("eval", "run", "--json", "--split", "test", cwd=tmp_path)
    assert with_variable.returncode == 0, with_variable.stderr[-2000:]

    monkeypatch.delenv("MARKOVFORMER_DATA")
    assert not (tmp_path / "data").exists()  # data/series.csv no longer resolves here
    without = run_in_process("eval", "run", "--json", "--split", "test", cwd=tmp_path)
    assert without.returncode == 0, without.stderr[-2000:]
    assert json.loads(without.stdout)["metrics"] == json.loads(with_variable.stdout)["metrics"]
    assert "warning" not in without.stderr

    (prepared / "series.csv").unlink()  # the recorded file gone too: the one-line error naming the path given
    gone = run_in_process("eval", "run", "--split", "test", cwd=tmp_path)
    one_line_error(gone, "data/series.csv", "no such file")


def test_a_run_given_a_relative_path_is_scored_from_another_working_folder(tmp_path):
    """path: series.csv, trained in folder a/: ``eval a/run`` from the folder above scores the file data.json
    recorded (the same metrics as from a/), where series.csv alone names no file."""
    (tmp_path / "a").mkdir()
    rows = ["x,y,label"] + [f"{i % 7},{(i * 3) % 5},{(i // 4) % 2}" for i in range(80)]
    (tmp_path / "a" / "series.csv").write_text("\n".join(rows) + "\n")
    data = "data={source: csv_series, window: 4, stride: 2, path: series.csv, task: sequence_classification}"
    trained = run_in_process("train", "task=sequence_classification", data, MODEL, *TRAINER, "output_dir=run",
                             cwd=tmp_path / "a")  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    inside = run_in_process("eval", "run", "--json", cwd=tmp_path / "a")
    outside = run_in_process("eval", "a/run", "--json", cwd=tmp_path)
    assert inside.returncode == 0 and outside.returncode == 0, outside.stderr[-2000:]
    assert json.loads(outside.stdout)["metrics"] == json.loads(inside.stdout)["metrics"]


def test_a_recording_an_audio_manifest_names_is_hashed_and_a_changed_one_is_refused_on_resume(tmp_path):
    """The manifest is the file the options name; its recordings are read through it. Only the manifest was hashed:
    a recording replaced by another of the same words (the manifest's bytes unchanged) resumed silently."""
    from markovformer.data.readers.audio import write_wav

    def tone(frequency: float, seconds: float = 0.3, rate: int = 8000) -> torch.Tensor:
        return 0.5 * torch.sin(2 * math.pi * frequency * torch.arange(round(seconds * rate)) / rate)

    (tmp_path / "audio").mkdir()
    lines = []
    for i in range(10):
        write_wav(tmp_path / "audio" / f"{i}.wav", tone(300.0 + 50 * i), 8000)
        lines.append(f"audio/{i}.wav\tword {'abcdefghij'[i]}")
    (tmp_path / "manifest.tsv").write_text("\n".join(lines) + "\n")
    data = "data={source: audio_manifest, path: manifest.tsv}"
    trained = run_in_process("train", "task=ctc", data, MODEL, *TRAINER, "output_dir=run", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]
    recorded = json.loads((tmp_path / "run" / "data.json").read_text())
    recordings = [tmp_path / "audio" / f"{i}.wav" for i in range(10)]
    assert recorded["file_sha256"] == {str(file.resolve()): hashlib.sha256(file.read_bytes()).hexdigest()
                                       for file in [tmp_path / "manifest.tsv", *recordings]}  # fmt: skip

    changed = (tmp_path / recorded["splits"]["test"][0]).resolve()
    write_wav(changed, tone(1234.0), 8000)  # a test recording (the features' normalisation is the same): other sound
    resumed = run_in_process("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path)
    one_line_error(resumed, str(changed), "changed since the run started")
    scored = run_in_process("eval", "run", "--json", cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert json.loads(scored.stdout)["changed_data_files"] == [str(changed)]


def test_a_data_file_moved_and_linked_from_where_it_was_resumes_and_a_changed_one_is_refused_and_said(tmp_path):
    """data.json records resolved paths: a file moved and replaced by a link to it (the same bytes) was refused on
    resume as data 'this version of markovformer builds otherwise' (splits.resolved_paths differed), and its sha256
    went uncompared, the new path being one data.json never recorded."""
    text = "".join(f"line {i} of the notes, words and more words\n" for i in range(200))
    (tmp_path / "e").mkdir()
    (tmp_path / "store").mkdir()
    notes = tmp_path / "e" / "notes.txt"
    notes.write_text(text)
    data = f"data={{source: text, tokenizer: char, seq_len: 16, path: e/notes.txt, cache_dir: {tmp_path / 'cache'}}}"
    trained = run_in_process("train", "task=causal_lm", data, MODEL, *TRAINER, "output_dir=run", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]

    notes.rename(tmp_path / "store" / "notes.txt")
    notes.symlink_to(tmp_path / "store" / "notes.txt")
    (tmp_path / "store" / "notes.txt").write_text(text[3000:] + text[:3000])  # the same length and alphabet
    resumed = run_in_process("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path)
    one_line_error(resumed, str(notes), "changed since the run started")
    scored = run_in_process("eval", "run", "--json", cwd=tmp_path)  # it said nothing, the path being new to it
    assert json.loads(scored.stdout)["changed_data_files"] == [str(notes)]
    assert f"warning: {notes} changed since the run started" in scored.stderr

    (tmp_path / "store" / "notes.txt").write_text(text)
    resumed = run_in_process("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (tmp_path / "run" / "finished.json").is_file()


def test_inspect_of_a_run_whose_text_changed_says_its_figures_read_the_file_as_it_is_now(tmp_path):
    """eval said so and inspect did not: its attention maps, gates and attention-by-lag profile, captioned as the
    validation examples', were drawn from the changed file without a word."""
    text = "".join(f"line {i} of the notes, words and more words\n" for i in range(200))
    notes = tmp_path / "notes.txt"
    notes.write_text(text)
    data = f"data={{source: text, tokenizer: char, seq_len: 16, path: {notes}, cache_dir: {tmp_path / 'cache'}}}"
    trained = run_in_process("train", "task=causal_lm", data, MODEL, *TRAINER, "output_dir=run", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]
    inspected = run_in_process("inspect", "run", cwd=tmp_path)
    assert inspected.returncode == 0 and "warning" not in inspected.stderr, inspected.stderr[-2000:]
    notes.write_text(text[3000:] + text[:3000])  # the same length and alphabet
    inspected = run_in_process("inspect", "run", cwd=tmp_path)
    assert inspected.returncode == 0, inspected.stderr[-2000:]
    assert f"warning: {notes.resolve()} changed since the run started" in inspected.stderr
    assert "the report's figures read the file as it is now" in inspected.stderr


def test_a_file_added_to_or_removed_from_a_runs_folder_is_named_by_resume_and_eval(tmp_path):
    """A folder's files are split whole, in name order, by the fractions: a file added to it moves the splits. The
    resume refused with the two whole file lists (2,026 characters for 26 files, cut with '...', the new file's name
    lost among them), blaming another version of markovformer (the files it had hashed were unchanged); eval
    scored another test split without a word (409 windows of the run's test file became 67 of the added file's)."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("a", "b", "c", "d"):
        (folder / f"{name}.txt").write_text("".join(f"{name} line {i}, a b c d e words\n" for i in range(60)))
    data = (f"data={{source: text, tokenizer: char, seq_len: 16, path: {folder}, fractions: [0.5, 0.25, 0.25], "
            f"cache_dir: {tmp_path / 'cache'}}}")  # fmt: skip
    trained = run_in_process("train", "task=causal_lm", data, MODEL, *TRAINER, "output_dir=run", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]

    added = folder / "e.txt"
    added.write_text((folder / "a.txt").read_text())  # the same alphabet: every file but the new one as it was
    resumed = run_in_process("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path)
    line = one_line_error(resumed, f"1 file added to {folder.resolve()} since the run started: {added.resolve()}",
                          "init_from='run'")  # fmt: skip
    assert "was a data file changed" not in line and "this version of markovformer" not in line
    assert str(folder / "b.txt") not in line
    scored = run_in_process("eval", "run", "--split", "test", cwd=tmp_path)
    one_line_error(scored, f"1 file added to {folder.resolve()} since the run started: {added.resolve()}",
                   "--data path=")  # fmt: skip
    inspected = run_in_process("inspect", "run", cwd=tmp_path)  # its figures: said, as of a file changed
    assert inspected.returncode == 0, inspected.stderr[-2000:]
    assert f"warning: 1 file added to {folder.resolve()} since the run started: {added.resolve()}" in inspected.stderr

    added.unlink()
    (folder / "b.txt").unlink()
    scored = run_in_process("eval", "run", cwd=tmp_path)
    removed = folder.resolve() / "b.txt"
    one_line_error(scored, f"1 file removed from {folder.resolve()} since the run started: {removed}")

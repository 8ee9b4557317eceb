"""The Hugging Face behaviours of issue 30 that concern a run's model directory, through transformers' public API:
the tokenizer files a run writes (AutoTokenizer, pipelines, generate's special ids and suppressed padding), an
export killed at any write and mended, markovformer's loader reading the Hugging Face format both ways, and a run
without ``tokenizers``. Skipped when the ``hf`` extra is absent."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is absent: pip install 'markovformer[hf]'")
# registers the Auto classes; skipped with its one-line reason where transformers cannot run this torch
pytest.importorskip("markovformer.hf", exc_type=ImportError)
from hf_small import small_hf  # noqa: E402


def _trained_text_run(kind: str, tmp_path):
    """A text run of a few steps (the tokenizer fitted on the corpus): its directory."""
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat.\nthe dog sat on the log.\n" * 40, encoding="utf-8")
    tokenizer = {"tokenizer": "bpe", "vocab_size": 280} if kind == "bpe" else {}
    train(resolve_run_config({
        "task": "causal_lm", "output_dir": str(tmp_path / "run"),
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
        "data": {"source": "text", "path": str(corpus), "seq_len": 16, **tokenizer},
        "trainer": {"max_steps": 2, "batch_size": 4, "eval_every": 2, "checkpoint_every": 2, "log_every": 2,
                    "eval_batch_size": 8, "lr": 0.05},
    }))  # fmt: skip
    return tmp_path / "run"


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_a_runs_model_directory_loads_with_auto_tokenizer_and_builds_a_pipeline(kind, tmp_path):
    """The run writes the Hugging Face tokenizer files into model/ itself: AutoTokenizer gives the run's ids, the
    pipeline's text is markovformer's generate decoded, and the run still loads (its fingerprint intact)."""
    from markovformer.data.readers.tokenizer import load_tokenizer
    from markovformer.training.run_dir import load_run

    run = _trained_text_run(kind, tmp_path)
    ours = load_tokenizer(run / "tokenizer")
    _, model, _ = load_run(run)  # model/config.json, edited for the special ids, still matches its fingerprint
    theirs = transformers.AutoTokenizer.from_pretrained(run / "model")
    sample = "the dog sat on the mat.\n"
    assert theirs(sample)["input_ids"] == ours.encode(sample) and theirs.pad_token_id == 0
    assert theirs.decode(ours.encode(sample)) == sample
    assert transformers.AutoConfig.from_pretrained(run / "model").pad_token_id == 0
    generator = transformers.pipeline("text-generation", model=str(run / "model"), device="cpu")
    prompt = "the cat"
    written = generator(prompt, max_new_tokens=12, do_sample=False, suppress_tokens=[0])[0]["generated_text"]
    ids = model.eval().generate(torch.tensor([ours.encode(prompt)]), max_new_tokens=12, suppress_tokens=[0])
    assert written == ours.decode(ids[0].tolist()) and len(written) > len(prompt)
    if kind == "char":  # a run trained before runs wrote these files: export_tokenizer adds them, the run still loads
        from markovformer.hf import export_tokenizer

        _as_trained_before_runs_exported(run)
        export_tokenizer(run / "tokenizer", run / "model")
        assert transformers.AutoConfig.from_pretrained(run / "model").pad_token_id == 0
        assert transformers.AutoTokenizer.from_pretrained(run / "model")(sample)["input_ids"] == ours.encode(sample)
        assert torch.equal(load_run(run)[1].model.embed.weight, model.model.embed.weight)


def test_transformers_sampling_from_a_runs_model_directory_never_chooses_padding(tmp_path):
    """Padding is never a target and markovformer's generate never chooses it; transformers' pipeline sampled it (a
    run's model/ had no generation config: 4 of 1,200 tokens were <pad> after 5 steps). The causal LM's
    generation_config.json now suppresses it, and a transformers save keeps it."""
    run = _trained_text_run("char", tmp_path)
    generator = transformers.pipeline("text-generation", model=str(run / "model"), device="cpu")
    assert generator.model.generation_config.suppress_tokens == [0]
    torch.manual_seed(0)  # temperature 50: about uniform, so about one token in the vocabulary's size is <pad>
    out = generator("the cat", max_new_tokens=300, do_sample=True, temperature=50.0, top_k=0, return_tensors=True)
    ids = out[0]["generated_token_ids"]
    assert len(ids) == len("the cat") + 300 and 0 not in ids and len(set(ids)) > 10
    generator.model.save_pretrained(tmp_path / "saved")
    assert transformers.GenerationConfig.from_pretrained(tmp_path / "saved").suppress_tokens == [0]


def _as_trained_before_runs_exported(run) -> None:
    """Make ``run``'s model/ as runs wrote it before they exported their tokenizer: no Hugging Face tokenizer files,
    no pad id in config.json, the fingerprint matching that config."""
    from markovformer.training.fingerprint import write_model_fingerprint

    config = run / "model" / "config.json"
    config.write_text(config.read_text().replace('"pad_token_id": 0', '"pad_token_id": null'))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (run / "model" / name).unlink()
    write_model_fingerprint(run / "model", json.loads((run / "model" / "fingerprint.json").read_text())["run"])


class Killed(BaseException):
    """A kill, simulated (SIGKILL would end the test's process)."""


def _killed_at_write(point: int):
    """A stand-in for ``markovformer.atomic.write_point`` that raises ``Killed`` at its ``point``-th call, where the
    write about to land would be lost."""
    writes = iter(range(1, 1 << 30))

    def write_point() -> None:
        if next(writes) == point:
            raise Killed

    return write_point


def test_export_tokenizer_killed_at_any_write_is_mended_by_exporting_again(tmp_path, monkeypatch):
    """export_tokenizer edits a run's model/config.json and its fingerprint: killed between the two (before), the
    run refused its own model/ and exporting again did not mend it. Killed at each of its writes, then run again,
    the run loads and AutoConfig reads the pad id."""
    import shutil

    import markovformer.atomic
    from markovformer.hf import export_tokenizer
    from markovformer.training.run_dir import load_run

    run = _trained_text_run("char", tmp_path)
    _as_trained_before_runs_exported(run)
    shutil.copytree(run / "model", tmp_path / "before")
    point, finished = 0, False
    while not finished:
        point += 1
        shutil.rmtree(run / "model")
        shutil.copytree(tmp_path / "before", run / "model")
        with monkeypatch.context() as patch:
            patch.setattr(markovformer.atomic, "write_point", _killed_at_write(point))
            try:
                export_tokenizer(run / "tokenizer", run / "model")
                finished = True
            except Killed:
                pass
        if not finished:
            export_tokenizer(run / "tokenizer", run / "model")  # the same call again, to its end
        load_run(run)  # refuses a model/ whose files disagree with its fingerprint
        assert transformers.AutoConfig.from_pretrained(run / "model").pad_token_id == 0, point
    assert point > 4  # the fingerprint, both tokenizer files, config.json


@pytest.mark.parametrize("kind", ["char", "char_documents", "bpe"])
def test_markovformers_loader_reads_the_hugging_face_format_both_ways(kind, tmp_path):
    """Ours -> the Hugging Face files -> ours, and ours -> AutoTokenizer -> its own save_pretrained -> ours: the same
    ids and text, and the record (what a token store's cache key reads) unchanged; special tokens written as text
    are text on every side (never the special ids)."""
    from markovformer.data.readers.tokenizer import BPETokenizer, CharTokenizer, load_tokenizer
    from markovformer.hf import export_tokenizer, to_transformers

    text = "the cat sat on the mat, é ü.\nthe dog sat on the log.\n" * 10 + "<pad> <eod> <bos> <eos>\n"
    ours = (BPETokenizer.train(text, vocab_size=290, special_tokens=("<pad>", "<eod>", "<bos>", "<eos>"))
            if kind == "bpe" else CharTokenizer(CharTokenizer.from_text(text).alphabet,
                                                end_of_document=kind == "char_documents"))  # fmt: skip
    ours.save(tmp_path / "ours")
    export_tokenizer(tmp_path / "ours", tmp_path / "hf")  # = save_hf_format(ours, ...)
    to_transformers(ours).save_pretrained(tmp_path / "transformers")
    sample = "the mat sat on the dog, ü.\n"
    for directory in (tmp_path / "hf", tmp_path / "transformers"):
        loaded = load_tokenizer(directory)
        assert type(loaded) is type(ours) and loaded.record() == ours.record()
        assert loaded.encode(sample) == ours.encode(sample) and loaded.decode(ours.encode(sample)) == sample
    assert to_transformers(ours)(sample)["input_ids"] == ours.encode(sample)
    literal = "the <pad> sat on the <eod> and <eos>"
    specials = {0, ours.end_of_document_id, ours.token_to_id("<bos>") if kind == "bpe" else None,
                ours.token_to_id("<eos>") if kind == "bpe" else None} - {None}  # fmt: skip
    assert not specials & set(ours.encode(literal)) and ours.decode(ours.encode(literal)) == literal
    for theirs in (to_transformers(ours), transformers.AutoTokenizer.from_pretrained(tmp_path / "transformers")):
        assert theirs(literal)["input_ids"] == ours.encode(literal)
    if kind == "bpe":
        assert (to_transformers(ours).bos_token_id, to_transformers(ours).eos_token_id) == (2, 3)
    (tmp_path / "hf" / "tokenizer.json").write_text('{"model": {"type": "Unigram", "vocab": []}}')
    with pytest.raises(ValueError, match="model type 'Unigram' that is not a markovformer tokenizer"):
        load_tokenizer(tmp_path / "hf")


def test_without_tokenizers_a_run_finishes_its_model_without_the_hugging_face_files_and_says_so(tmp_path, monkeypatch,
                                                                                                capsys):  # fmt: skip
    import sys

    from markovformer.data.readers.tokenizer import CharTokenizer
    from markovformer.training.run_dir import write_hf_tokenizer

    ours = CharTokenizer("ab \n")
    ours.save(tmp_path / "tokenizer")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"d_model": 16}\n')
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # any import of tokenizers now fails
    write_hf_tokenizer(tmp_path)
    assert capsys.readouterr().out.splitlines() == [
        "model/ holds no Hugging Face tokenizer files: BPE and the Hugging Face tokenizer format need Hugging Face "
        "'tokenizers', a dependency of markovformer: pip install markovformer"]  # fmt: skip
    assert sorted(path.name for path in (tmp_path / "model").iterdir()) == ["config.json"]
    assert (tmp_path / "model" / "config.json").read_text() == '{"d_model": 16}\n'
    monkeypatch.delitem(sys.modules, "tokenizers")
    write_hf_tokenizer(tmp_path)  # with it: the files, and the pad id
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "model")("ba \n")["input_ids"] == ours.encode("ba \n")
    assert '"pad_token_id": 0' in (tmp_path / "model" / "config.json").read_text()


def test_export_tokenizer_gives_generate_its_special_ids_in_a_transformers_save(tmp_path):
    """transformers' save_pretrained writes generation_config.json, which generate reads: export_tokenizer put the
    ids into config.json only, so generate had no eos and ran to max_new_tokens past it."""
    from markovformer.data.readers.tokenizer import BPETokenizer
    from markovformer.hf import export_tokenizer

    text = "the cat sat on the mat.\nthe dog sat on the log.\n" * 20
    tokenizer = BPETokenizer.train(text, vocab_size=280, special_tokens=("<pad>", "<eod>", "<bos>", "<eos>"))
    small_hf("causal_lm", vocab_size=tokenizer.vocab_size).save_pretrained(tmp_path)
    export_tokenizer(tokenizer, tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    eos = tokenizer.token_to_id("<eos>")
    assert (loaded.generation_config.eos_token_id, loaded.generation_config.pad_token_id) == (eos, 0)


def test_a_text_run_with_documents_exports_its_end_of_document_as_eos(tmp_path):
    """A vocabulary with <eod> and no <eos> (a text run with documents) exports <eod> as eos: transformers'
    generate and pipeline end a sample at the end of its document, as GPT-2's at its end of text (they ran on past
    it, and the pipeline's skip_special_tokens then dropped the boundary from the text)."""
    from markovformer.data.readers.tokenizer import CharTokenizer
    from markovformer.hf import export_tokenizer

    tokenizer = CharTokenizer(CharTokenizer.from_text("the cat sat.\n").alphabet, end_of_document=True)
    small_hf("causal_lm", vocab_size=tokenizer.vocab_size).save_pretrained(tmp_path)
    export_tokenizer(tokenizer, tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.generation_config.eos_token_id == tokenizer.end_of_document_id
    assert transformers.AutoTokenizer.from_pretrained(tmp_path).eos_token == "<eod>"

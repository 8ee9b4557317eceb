"""Issue 32 on the text path, through the command line: a small text's one-line error, fractions without validation
refused up front, eval on another file with the run's saved tokenizer, a run evaluable without $MARKOVFORMER_DATA."""

import json

import pytest
import torch
import torch.nn.functional as F
import yaml

from markovformer.data.splits import contiguous_split
from markovformer.training.trainer_config import ConfigError

TEXT_RUN = {
    "task": "causal_lm",
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
    "data": {"source": "text", "path": "data/corpus.txt", "seq_len": 16},
    "trainer": {"max_steps": 4, "batch_size": 4, "eval_every": 4, "checkpoint_every": 4, "log_every": 2,
                "eval_batch_size": 8},
}  # fmt: skip


def _config(tmp_path, **data) -> str:
    path = tmp_path / "text.yaml"
    path.write_text(yaml.safe_dump({**TEXT_RUN, "data": {**TEXT_RUN["data"], **data}}))
    return str(path)


def _hand_loss(run_dir, text: str) -> float:
    """The mean next-token cross-entropy of the run's model over ``text`` encoded here with the run's saved
    tokenizer, cut as validation cuts it: windows of seq_len + 1 tokens one after another, a shorter tail dropped."""
    from markovformer.data.readers.tokenizer import load_tokenizer
    from markovformer.training.runner import load_run

    _, model, _ = load_run(run_dir)
    model.eval()
    ids = torch.tensor(load_tokenizer(run_dir / "tokenizer").encode(text))
    length = TEXT_RUN["data"]["seq_len"] + 1
    windows = ids[: len(ids) // length * length].view(-1, length)
    with torch.no_grad():
        logits = model(input_ids=windows).logits[:, :-1].double()
    return float(F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten()))


def test_a_small_text_and_fractions_without_validation_are_refused_in_one_line(tmp_path, main_cli):
    (tmp_path / "notes.txt").write_text("a short note about chains.\n" * 20, encoding="utf-8")
    small = main_cli("train", _config(tmp_path, path=str(tmp_path / "notes.txt")), "trainer.batch_size=64",
                     f"output_dir={tmp_path / 'small'}")  # fmt: skip
    assert small.returncode != 0 and "fewer than one global batch" in small.stderr
    assert "empty list" not in small.stderr
    no_val = main_cli("train", _config(tmp_path, path=str(tmp_path / "notes.txt")), "data.fractions=[1,0,0]",
                      f"output_dir={tmp_path / 'no_val'}")  # fmt: skip
    assert no_val.returncode != 0 and "validation split of data.source='text' has no examples" in no_val.stderr
    assert "data.fractions" in no_val.stderr and "devices" not in no_val.stderr  # one process: no device to drop
    assert not (tmp_path / "no_val" / "checkpoints").exists()  # refused before training


def test_eval_uses_the_saved_tokenizer_and_the_recorded_path(tmp_path, main_cli, monkeypatch):
    data_dir = tmp_path / "prepared"
    data_dir.mkdir()
    (data_dir / "corpus.txt").write_text("the chain keeps its order; the state moves on.\n" * 60, encoding="utf-8")
    run_dir = tmp_path / "run"
    monkeypatch.setenv("MARKOVFORMER_DATA", str(data_dir))
    trained = main_cli("train", _config(tmp_path), f"output_dir={run_dir}")
    assert trained.returncode == 0, trained.stderr

    # without $MARKOVFORMER_DATA, data/corpus.txt no longer resolves; data.json recorded where it was
    monkeypatch.delenv("MARKOVFORMER_DATA")
    again = main_cli("eval", str(run_dir))
    assert again.returncode == 0, again.stderr

    # another file with some of the run's characters only: encoded with the run's alphabet, not a refitted one
    # (which would lack ';', 'k' and 'p' and number the letters after them one to three lower)
    other_text = "the order moves on. the chain moves on.\n" * 30
    assert set(other_text) < set((data_dir / "corpus.txt").read_text(encoding="utf-8"))
    (tmp_path / "other.txt").write_text(other_text, encoding="utf-8")
    other = main_cli("eval", str(run_dir), "--json", "--data", f"path={tmp_path / 'other.txt'}",
                     "fractions=[0.5,0.5,0]")  # fmt: skip
    assert other.returncode == 0, other.stderr
    val = contiguous_split(len(other_text), (0.5, 0.5, 0))[1]
    expected = _hand_loss(run_dir, other_text[val.start : val.stop])
    assert json.loads(other.stdout)["metrics"]["loss"] == pytest.approx(expected, rel=1e-6)
    (tmp_path / "unseen.txt").write_text("the chain.\n" * 30 + "Zebra\n", encoding="utf-8")
    unseen = main_cli("eval", str(run_dir), "--data", f"path={tmp_path / 'unseen.txt'}")
    assert unseen.returncode != 0 and "character 'Z'" in unseen.stderr and "saved char alphabet" in unseen.stderr
    assert json.loads((run_dir / "data.json").read_text())["splits"]["resolved_paths"] == [
        str((data_dir / "corpus.txt").resolve())]


def test_a_run_whose_text_changed_is_inspected_evaluated_and_resumed_with_its_saved_tokenizer(tmp_path, monkeypatch):
    from markovformer.data.readers.tokenizer import load_tokenizer
    from markovformer.training import evaluation, inspection, runner
    from markovformer.training.build import build_data
    from markovformer.training.run_config import resolve_run_config

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the chain keeps its order; the state moves on.\n" * 60, encoding="utf-8")
    run_dir = tmp_path / "run"
    values = {**TEXT_RUN, "data": {**TEXT_RUN["data"], "path": str(corpus), "cache_dir": str(tmp_path / "cache")},
              "output_dir": str(run_dir)}  # fmt: skip
    runner.train(resolve_run_config(values))
    saved = load_tokenizer(run_dir / "tokenizer").record()
    # the text changes after training: a refitted alphabet would lack ';' and 'k' and shift every later id
    corpus.write_text("the chain moves on. the state moves on.\n" * 60, encoding="utf-8")
    config = resolve_run_config(values)
    assert build_data(config).tokenizer.record() != saved  # what the commands below must not use
    assert build_data(config, run_dir).tokenizer.record() == saved

    seen = []
    for module in (inspection, evaluation, runner):
        def spy(config, run_dir=None, _real=build_data):
            bundle = _real(config, run_dir)
            seen.append(bundle.tokenizer.record())
            return bundle
        monkeypatch.setattr(module, "build_data", spy)
    inspection.write_inspection_report(run_dir)
    evaluation.evaluate(run_dir)
    with pytest.raises(ConfigError, match="corpus.txt changed since the run started"):  # never two texts in a run
        runner.resume(run_dir, ["trainer.max_steps=6"])
    assert len(seen) == 3 and all(record == saved for record in seen)


def test_a_fine_tuning_run_encodes_with_the_tokenizer_of_the_run_it_starts_from(tmp_path, capsys):
    """A BPE fitted again on the new text has as many ids (its fixed size) for other tokens: the embeddings would
    load, without an error, for the wrong ones. The fine-tuning run encodes with its source's tokenizer instead (a
    run directory's tokenizer/ or a saved model's tokenizer.json), refuses another kind, and fits its own only when
    the embeddings start fresh."""
    import pytest

    from markovformer.data.readers.tokenizer import load_tokenizer
    from markovformer.training import runner
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.trainer_config import ConfigError

    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text("the chain keeps its order; the state moves on.\n" * 80, encoding="utf-8")
    second.write_text("a walker forgets all but the last few steps it took.\n" * 80, encoding="utf-8")
    bpe = {"tokenizer": "bpe", "vocab_size": 280, "cache_dir": str(tmp_path / "cache")}

    def run(name: str, path, **extra):
        values = {**TEXT_RUN, "data": {**TEXT_RUN["data"], **bpe, "path": str(path)},
                  "output_dir": str(tmp_path / name), **extra}  # fmt: skip
        runner.train(resolve_run_config(values))
        return load_tokenizer(tmp_path / name / "tokenizer")

    source = run("source", first)
    refitted = run("refitted", second)
    assert refitted.vocab_size == source.vocab_size and refitted.record() != source.record()  # the silent case
    for start in ("source", "source/model", "source/checkpoints/last.ckpt"):  # a checkpoint: its run's tokenizer
        tuned = run(f"tuned-{start.replace('/', '-')}", second, init_from=str(tmp_path / start))
        assert tuned.record() == source.record()
    fresh = run("fresh", second, init_from=str(tmp_path / "source"), init_from_skip=["head", "embeddings"])
    assert fresh.record() == refitted.record()
    bare = tmp_path / "bare"  # a saved model without its tokenizer: the run fits its own, and says what that means
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((tmp_path / "source" / "model" / name).read_bytes())
    capsys.readouterr()
    assert run("from-bare", first, init_from=str(bare)).record() == source.record()
    assert "keeps no tokenizer: this run fitted its own" in capsys.readouterr().out
    other_kind = {**TEXT_RUN, "data": {**TEXT_RUN["data"], "path": str(second), "tokenizer": "char"},
                  "output_dir": str(tmp_path / "char"), "init_from": str(tmp_path / "source")}  # fmt: skip
    with pytest.raises(ConfigError, match="trained on a bpe tokenizer, and data.tokenizer='char'"):
        runner.train(resolve_run_config(other_kind))


def test_a_fine_tuning_run_refuses_tokenizer_options_its_sources_tokenizer_was_not_fitted_with(tmp_path):
    """The run encodes with the source run's tokenizer, so its own data.vocab_size (and BPE fit_bytes) go unused:
    data.vocab_size=999 from a run fitted at 300 trained silently on 300 ids, its config.yaml saying 999. The same
    values, or null, or a run whose tokenizer is fitted afresh, are accepted."""
    from markovformer.data.readers.tokenizer import BPETokenizer
    from markovformer.training.init_from import tokenizer_source
    from markovformer.training.run_config import resolve_run_config

    def run(data: dict, skip: tuple[str, ...] = ()):  # a run fine-tuned from ``source`` with these data options
        return resolve_run_config({**TEXT_RUN, "data": data, "init_from": str(source), "init_from_skip": list(skip)})

    source = tmp_path / "source"
    BPETokenizer.train("the chain keeps its order; the state moves on.\n" * 20, 300).save(source / "tokenizer")
    bpe = {"source": "text", "path": "a.txt", "tokenizer": "bpe", "vocab_size": 300}
    (source / "config.yaml").write_text(yaml.safe_dump({**TEXT_RUN, "data": bpe}))
    for data in ({**bpe, "vocab_size": 999}, {**bpe, "fit_bytes": 4096}):
        key = "vocab_size" if data["vocab_size"] == 999 else "fit_bytes"
        fitted_with = {"vocab_size": 300, "fit_bytes": 64 << 20}[key]
        with pytest.raises(ConfigError, match=rf"^data.{key}={data[key]}: this run encodes with the tokenizer of "
                                              rf"init_from=.*fitted with data.{key}={fitted_with}\), .* set it to "
                                              rf"{fitted_with} \(or null\)"):  # fmt: skip
            tokenizer_source(run(data))
    for data in (bpe, {**bpe, "vocab_size": None, "fit_bytes": 64 << 20}, {"source": "text"}):
        assert tokenizer_source(run(data)) == source
    assert tokenizer_source(run({**bpe, "vocab_size": 999}, ("head", "embeddings"))) is None


def test_the_note_on_a_source_without_a_tokenizer_is_printed_only_when_its_token_weights_are_taken(tmp_path, capsys):
    """init_from a saved model without a tokenizer: the run fits its own and says its ids are the weights' only if
    fitted on the same text. With init_from_skip naming the token embedding and lm_head (the advice for another
    vocabulary beside learned positions), it said so too, though no weight with a row per token id was taken; with
    init_from_skip naming only a changed position table, the token weights are taken and the note stands."""
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
    from markovformer.training import runner
    from markovformer.training.run_config import resolve_run_config

    (tmp_path / "corpus.txt").write_text("the chain keeps its order; the state moves on.\n" * 80, encoding="utf-8")
    shape = {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2, "position": "learned"}
    six = MarkovianTransformerConfig(vocab_size=6, max_positions=64, **shape)
    MarkovianTransformerForCausalLM(six).save_pretrained(tmp_path / "six")
    note = "keeps no tokenizer: this run fitted its own"

    def run(name: str, source, skip: list[str], max_positions: int) -> str:
        values = {**TEXT_RUN, "model": {**shape, "max_positions": max_positions}, "output_dir": str(tmp_path / name),
                  "data": {**TEXT_RUN["data"], "path": str(tmp_path / "corpus.txt"), "tokenizer": "char"},
                  "init_from": str(source), "init_from_skip": skip}  # fmt: skip
        capsys.readouterr()
        runner.train(resolve_run_config(values))
        return capsys.readouterr().out

    vocabulary = ["model.embed.weight", "lm_head.weight"]
    printed = run("new-vocabulary", tmp_path / "six", vocabulary, 64)
    assert "(2 left fresh by init_from_skip)" in printed and note not in printed, printed
    bare = tmp_path / "bare"  # the same vocabulary, without its tokenizer, and another position table
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((tmp_path / "new-vocabulary" / "model" / name).read_bytes())
    printed = run("new-positions", bare, ["model.position_embedding.weight"], 32)
    assert "(1 left fresh by init_from_skip)" in printed and note in printed, printed


def test_the_tokenizer_a_fine_tuning_run_encodes_with_follows_the_tensors_it_skips_however_named(tmp_path):
    """Whether a fine-tuning run keeps its source's tokenizer was read from the word 'embeddings' in init_from_skip:
    skipping the same tensors by name (model.embed, lm_head) to fit a BPE on a char run's text was refused ("trained
    on a char tokenizer ... start them fresh with init_from_skip: [head, embeddings]"), though nothing with a row
    per token id was taken. It follows the tensors skipped: those names fit a BPE of their own; skipping lm_head
    alone takes the embedding, and the refusal stands."""
    from markovformer.data.readers.tokenizer import load_tokenizer
    from markovformer.training import runner
    from markovformer.training.init_from import tokenizer_source
    from markovformer.training.run_config import resolve_run_config

    (tmp_path / "corpus.txt").write_text("the chain keeps its order; the state moves on.\n" * 80, encoding="utf-8")
    char = {**TEXT_RUN["data"], "path": str(tmp_path / "corpus.txt"), "tokenizer": "char"}
    runner.train(resolve_run_config({**TEXT_RUN, "data": char, "output_dir": str(tmp_path / "source")}))

    def tuned(name: str, skip: list[str]) -> dict:
        return {**TEXT_RUN, "data": {**char, "tokenizer": "bpe", "vocab_size": 300}, "output_dir": str(tmp_path / name),
                "init_from": str(tmp_path / "source"), "init_from_skip": skip}  # fmt: skip

    runner.train(resolve_run_config(tuned("by-name", ["model.embed", "lm_head"])))
    assert load_tokenizer(tmp_path / "by-name" / "tokenizer").kind == "bpe"
    with pytest.raises(ConfigError, match="was trained on a char tokenizer, and data.tokenizer='bpe'"):
        runner.train(resolve_run_config(tuned("head-only", ["lm_head"])))
    vmt = {**TEXT_RUN, "task": "vmt", "model_type": "vmt", "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
           "data": char, "init_from": str(tmp_path / "source")}  # fmt: skip
    for skip, kept in ((["embed", "emission"], None), (["embed"], tmp_path / "source")):  # its emission: a row per id
        assert tokenizer_source(resolve_run_config({**vmt, "init_from_skip": skip})) == kept, skip


def test_reading_which_tokenizer_a_fine_tuning_run_encodes_with_draws_nothing_from_the_runs_random_stream(tmp_path):
    """tokenizer_source builds the run's model on the meta device to name its tensors with a row per token id; the
    random-feature kinds draw their projections there from the global generator all the same, so a fine-tuning run
    of rff or a hybrid shuffled and initialised from another stream than the same run before the check (measured:
    text_char fine-tuned 4 steps from a run, val loss 4.0184 before it, 4.0176 after). The stream is left as found."""
    from markovformer.data.readers.tokenizer import BPETokenizer
    from markovformer.training.init_from import tokenizer_source
    from markovformer.training.run_config import resolve_run_config

    source = tmp_path / "source"
    BPETokenizer.train("the chain keeps its order; the state moves on.\n" * 20, 300).save(source / "tokenizer")
    for attention, layers in (("rff", 1), ("hybrid_split", 1), (["markov", "hybrid_parallel"], 2)):
        model = {"d_model": 16, "n_heads": 2, "attention": attention, "n_layers": layers}
        config = resolve_run_config({**TEXT_RUN, "model": model, "init_from": str(source)})
        torch.manual_seed(0)
        before = torch.get_rng_state()
        assert tokenizer_source(config) == source
        assert torch.equal(torch.get_rng_state(), before), attention


def test_a_missing_init_from_is_the_one_line_a_run_prints_about_it(tmp_path, capsys):
    """The tokenizer notice came first and spoke of the missing folder as of a run that keeps no tokenizer."""
    from markovformer.training import runner
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.trainer_config import ConfigError

    (tmp_path / "corpus.txt").write_text("the chain keeps its order; the state moves on.\n" * 80, encoding="utf-8")
    values = {**TEXT_RUN, "data": {**TEXT_RUN["data"], "path": str(tmp_path / "corpus.txt")},
              "output_dir": str(tmp_path / "run"), "init_from": str(tmp_path / "nowhere")}  # fmt: skip
    with pytest.raises(ConfigError, match="no such run or model directory"):
        runner.train(resolve_run_config(values))
    assert "keeps no tokenizer" not in capsys.readouterr().out



def test_a_run_of_packed_documents_refuses_to_start_one_and_its_report_samples_from_a_documents_start(
        tmp_path, main_cli):  # fmt: skip
    """A packed run's model reads each document alone and never scores its first token: what follows an <eod> is
    nothing it learned (a 600-step char run: 6.29 nats for a document's first character after a lone <eod>, 8.66
    after a document and its <eod>, against 1.39 = ln 4 unpacked). `generate --prompt ''` (which starts after an
    <eod>) and `--through-eod` sampled that silently, and its report showed the nonsense; both are refused, naming
    the flag, and the report samples from the first token of a validation document, as `generate` does with it."""
    import html
    import re

    from markovformer.training.inspection import write_inspection_report

    names = ["ROMEO: ", "NURSE: "]
    corpus = "\n\n".join(names[k % 2] + "the state moves on and the chain keeps its order" for k in range(60))
    (tmp_path / "docs.txt").write_text(corpus + "\n", encoding="utf-8")
    documents = dict(path=str(tmp_path / "docs.txt"), documents="blank_line", cache_dir=str(tmp_path / "cache"))
    for packing in (True, False):
        config = _config(tmp_path, **documents, packing=packing)
        done = main_cli("train", config, f"output_dir={tmp_path / str(packing)}")
        assert done.returncode == 0, done.stderr
    packed = str(tmp_path / "True")
    done = main_cli("generate", packed, "--prompt", "")
    assert done.returncode == 2 and done.stderr.startswith("markovformer: error: --prompt '': this run packed its "
                                                           "documents (data.packing: true)")  # fmt: skip
    done = main_cli("generate", packed, "--prompt", "ROMEO:", "--through-eod")
    assert done.returncode == 2 and done.stderr.startswith("markovformer: error: --through-eod: this run packed its "
                                                           "documents")  # fmt: skip
    assert main_cli("generate", packed, "--prompt", "ROMEO:").returncode == 0
    assert main_cli("generate", str(tmp_path / "False"), "--prompt", "").returncode == 0  # unpacked: after <eod>
    page = write_inspection_report(packed).read_text()
    heading = re.search(r"<h2>Generated sample \(200 tokens from '(.)', the first token of a validation document "
                        r"\(a packed run cannot start one from nothing\)", html.unescape(page))  # fmt: skip
    assert heading and heading.group(1) in "RN"  # the documents' first characters
    printed = main_cli("generate", packed, "--prompt", heading.group(1)).stdout
    assert f"<pre>{html.escape(printed[:-1])}</pre>" in page

"""What init_from reads (a saved model directory's weights, refused in one line when they cannot be read, and which
tensors init_from_skip starts fresh) and what a fine-tuning run records of it."""

import itertools
import json
import re

import pytest
import torch
import yaml
from conftest import TINY_RUN, one_line_error, run_in_process, shard_weights

from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.training.init_from import initialise_from, initialised_line, started_from_line
from markovformer.training.trainer_config import ConfigError


def tiny_model() -> MarkovianTransformerForCausalLM:
    config = MarkovianTransformerConfig(vocab_size=6, d_model=8, n_layers=1, n_heads=2, max_order=2)
    return MarkovianTransformerForCausalLM(config)


def test_a_saved_model_directory_with_a_cut_weights_file_is_refused_in_one_line(tmp_path):
    """A save_pretrained folder whose model.safetensors was cut short (a copy or a save killed midway) printed
    safetensors' traceback ("incomplete metadata, file not fully covered") instead of the one error line, and the
    model it was to initialise is left as it was."""
    saved = tmp_path / "saved"
    tiny_model().save_pretrained(saved)
    weights = saved / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:3000])
    model = tiny_model()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(ConfigError, match=re.escape(f"init_from={str(saved)!r}: {weights} is not a readable "
                                                    f"safetensors file")):  # fmt: skip
        initialise_from(model, saved, [])
    assert all(tensor.equal(before[name]) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize("tied", [False, True])
def test_init_from_skip_embeddings_starts_the_language_models_output_over_the_vocabulary_fresh_too(tmp_path, tied):
    """init_from_skip: [embeddings] makes the run fit a new tokenizer, yet lm_head (one row per token id) was loaded:
    a new alphabet of the same size kept the old head's rows for other symbols, silently; tied to the embedding
    (tie_word_embeddings), the loaded lm_head.weight even overwrote the embedding said to start fresh. Both now keep
    the new model's initialisation, every other tensor the source's, bit for bit."""
    config = MarkovianTransformerConfig(vocab_size=6, d_model=8, n_layers=1, n_heads=2, max_order=2,
                                        tie_word_embeddings=tied)  # fmt: skip
    source = MarkovianTransformerForCausalLM(config)
    source.save_pretrained(tmp_path / "source")
    model = MarkovianTransformerForCausalLM(config)
    fresh = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    line = initialised_line(initialise_from(model, tmp_path / "source", ["embeddings"]))
    vocabulary = {"model.embed.weight", "lm_head.weight"}
    for name, tensor in model.state_dict().items():
        expected = fresh[name] if name in vocabulary else source.state_dict()[name]
        assert tensor.equal(expected), name
    assert line.endswith("(2 left fresh by init_from_skip)"), line


def test_a_fine_tuning_run_records_the_run_it_started_from_wherever_it_is_resumed(tmp_path):
    """config.yaml kept init_from as typed, relative to the folder the run was started in: resumed from another
    folder before its first checkpoint, a fine-tuning run loaded that folder's parent/, another run, silently (or
    refused "no such run" where there was none). It records the source's absolute path."""
    trainer = {**TINY_RUN["trainer"], "max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer}))
    assert run_in_process("train", "tiny.yaml", "output_dir=parent", cwd=tmp_path).returncode == 0
    tuned = run_in_process("train", "tiny.yaml", "output_dir=tuned", "init_from=parent", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    recorded = yaml.safe_load((tmp_path / "tuned" / "config.yaml").read_text())["init_from"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert (elsewhere / recorded).resolve() == (tmp_path / "parent").resolve(), recorded


@pytest.mark.parametrize("start", ["run", "./run/", "run/checkpoints/last.ckpt"])
def test_a_run_that_would_start_from_itself_is_refused_in_one_line_naming_why(tmp_path, start):
    """output_dir=run init_from=run claimed the new folder, then refused "init_from='run' is neither a run directory
    (config.yaml) nor a saved model directory": true of the empty folder it had just made, and no word of the cause.
    The config is refused before anything is written, naming both keys."""
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY_RUN))
    refused = run_in_process("train", "tiny.yaml", "output_dir=run", f"init_from={start}", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "init_from=" in refused.stderr and "is inside this run's own output_dir='run'" in refused.stderr
    assert not (tmp_path / "run").exists()


def test_a_changed_position_table_is_named_alone_in_the_advice_not_with_every_embedding(tmp_path):
    """A source with another max_positions (learned positions) differs in one tensor, model.position_embedding; the
    advice was init_from_skip: [embeddings], which also starts the token embeddings and lm_head fresh. It now names
    the differing tensor, and following it takes every other tensor from the source."""
    options = {"vocab_size": 6, "d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2, "position": "learned"}
    source = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**options, max_positions=16))
    source.save_pretrained(tmp_path / "source")
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**options, max_positions=32))
    with pytest.raises(ConfigError) as refused:
        initialise_from(model, tmp_path / "source", [])
    advice = str(refused.value).split("add init_from_skip: [")[1].rstrip("]").split(", ")
    assert advice == [name for name in model.state_dict() if "position" in name]
    line = initialised_line(initialise_from(model, tmp_path / "source", advice))
    assert line.endswith("(1 left fresh by init_from_skip)"), line
    for name, tensor in model.state_dict().items():
        if name not in advice:
            assert tensor.equal(source.state_dict()[name]), name


def test_the_record_of_a_saved_model_directory_names_its_file_and_the_tensors_left_fresh(tmp_path):
    """What initialise_from returns of a save_pretrained folder: its weights file, no step, the init_from_skip entries,
    the counts, and the digest of exactly the tensors taken (the source's, not the fresh ones)."""
    from test_init_from_weights import tensors_sha256

    from markovformer.training.run_dir import STARTED_FROM_KEYS

    source = tiny_model()
    source.save_pretrained(tmp_path / "source")
    record = initialise_from(tiny_model(), tmp_path / "source", ["embeddings"])
    taken = {name: tensor for name, tensor in source.state_dict().items()
             if name not in ("model.embed.weight", "lm_head.weight")}  # fmt: skip
    assert record["tensors_sha256"] == tensors_sha256(taken)
    assert record.keys() == STARTED_FROM_KEYS  # what inspect requires of the record (read_started_from)
    assert record["file"] == str((tmp_path / "source" / "model.safetensors").resolve()) and record["step"] is None
    assert (record["tensors_taken"], record["tensors_fresh"], record["init_from_skip"]) == (len(taken), 2,
                                                                                           ["embeddings"])  # fmt: skip
    assert started_from_line(record) == (f"{(tmp_path / 'source').resolve()}, tensors sha256 "
                                         f"{record['tensors_sha256']} (2 left fresh by init_from_skip: embeddings)")


@pytest.mark.parametrize("damage", [None, "pickle", "elsewhere", "missing", "absent"])
def test_a_sharded_directory_loads_its_shards_and_a_damaged_index_is_refused_naming_what(tmp_path, damage):
    """A folder of safetensors shards and their index loads each tensor from its shard (it was refused: "neither a
    run directory nor a saved model directory"); an index naming a pickle or a file outside the folder, a shard gone,
    or a tensor no shard holds is refused naming it, the model left as it was."""
    source = tiny_model()
    source.save_pretrained(tmp_path / "source")
    weight_map = shard_weights(tmp_path / "source")
    index = tmp_path / "source" / "model.safetensors.index.json"
    first = [name for name, shard in weight_map.items() if shard == "model-00001-of-00002.safetensors"]
    named = {"pickle": "pytorch_model-00001-of-00002.bin", "elsewhere": "../model-00001-of-00002.safetensors",
             "missing": "model-00002-of-00002.safetensors", "absent": "model.extra"}.get(damage)  # fmt: skip
    if damage == "pickle":
        torch.save({name: source.state_dict()[name] for name in first}, tmp_path / "source" / named)
    if damage in ("pickle", "elsewhere"):
        weight_map.update({name: named for name in first})
    if damage == "missing":
        (tmp_path / "source" / named).unlink()
    if damage == "absent":
        weight_map[named] = "model-00001-of-00002.safetensors"
    index.write_text(json.dumps({"weight_map": weight_map}))
    model = tiny_model()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    if damage is None:
        initialise_from(model, tmp_path / "source", [])
        assert all(tensor.equal(source.state_dict()[name]) for name, tensor in model.state_dict().items())
        return
    with pytest.raises(ConfigError, match=re.escape(named)):
        initialise_from(model, tmp_path / "source", [])
    assert all(tensor.equal(before[name]) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize("environment", [{"init_from": {"source": "parent"}}, {"init_from": ["parent"]}, [],
                                         '{"init_from": {"source": '],
                         ids=["keys-missing", "a-list", "not-an-object", "not-json"])  # fmt: skip
def test_a_damaged_record_of_the_weights_a_run_started_from_reads_as_none(tmp_path, environment):
    """inspect reads environment.json's init_from record for its summary: a record cut short or edited by hand is
    none, not a KeyError (or a JSON error) in the middle of the report."""
    import json

    from markovformer.training.run_dir import read_started_from

    text = environment if isinstance(environment, str) else json.dumps(environment)
    (tmp_path / "environment.json").write_text(text)
    assert read_started_from(tmp_path) is None


def test_a_new_start_replaces_the_record_a_killed_start_left_and_a_resume_keeps_it(tmp_path):
    """A start killed before config.yaml leaves environment.json with the record of the weights it took; a new run
    started there (init_from another source) writes its own record, which a resume of it then keeps."""
    import torch

    from markovformer.data.bundle import DataBundle
    from markovformer.training.run_dir import read_started_from, write_start_files

    example = {"input_ids": torch.arange(4), "labels": torch.arange(4)}
    bundle = DataBundle(train=[example] * 4, val=[example], test=[example], info={"vocab_size": 4})
    for name in ("a", "b"):
        tiny_model().save_pretrained(tmp_path / name)
    source, other = (initialise_from(tiny_model(), tmp_path / name, []) for name in ("a", "b"))
    write_start_files(tmp_path, bundle, keep_existing=False, started_from=source)
    write_start_files(tmp_path, bundle, keep_existing=False, started_from=other)
    assert read_started_from(tmp_path) == other != source
    write_start_files(tmp_path, bundle, keep_existing=True, started_from=source)
    assert read_started_from(tmp_path) == other


def test_the_advice_for_a_weight_tied_under_two_names_names_both(tmp_path):
    """With tie_word_embeddings (one weight, model.embed and lm_head) and learned positions, another vocabulary was
    advised init_from_skip: [lm_head.weight]; following it was refused advising [model.embed.weight], and that one
    advised [lm_head.weight] again. The advice holds both names of the weight (the group embeddings, with the other
    position table, which no group holds, named), and following it takes every other tensor from the source."""
    options = {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2, "position": "learned",
               "tie_word_embeddings": True}  # fmt: skip
    source = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=6, max_positions=16, **options))
    source.save_pretrained(tmp_path / "source")
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=9, max_positions=32, **options))
    with pytest.raises(ConfigError) as refused:
        initialise_from(model, tmp_path / "source", [])
    advice = str(refused.value).split("add init_from_skip: [")[1].rstrip("]").split(", ")
    assert advice == ["embeddings", "model.position_embedding.weight"]
    initialise_from(model, tmp_path / "source", advice)
    fresh = ["lm_head.weight", "model.embed.weight", "model.position_embedding.weight"]
    for name, tensor in model.state_dict().items():
        if name not in fresh:
            assert tensor.equal(source.state_dict()[name]), name


def test_the_advice_may_name_a_tensor_only_the_source_holds(tmp_path):
    """A source with learned positions, for a model with rotary ones, differs in model.position_embedding.weight,
    which only the source holds: the advice named it, and init_from_skip then refused it as naming no tensor of the
    model. An entry may name a tensor of the source; following the advice takes every tensor of the model."""
    options = {"vocab_size": 6, "d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2, "max_positions": 16}
    source = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**options, position="learned"))
    source.save_pretrained(tmp_path / "source")
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**options, position="rotary"))
    with pytest.raises(ConfigError) as refused:
        initialise_from(model, tmp_path / "source", [])
    advice = str(refused.value).split("add init_from_skip: [")[1].rstrip("]").split(", ")
    assert advice == ["model.position_embedding.weight"]
    record = initialise_from(model, tmp_path / "source", advice)
    assert record["tensors_fresh"] == 0
    for name, tensor in model.state_dict().items():
        assert tensor.equal(source.state_dict()[name]), name
    with pytest.raises(ConfigError, match="init_from_skip entry 'model.typo' names no tensor of the model or of"):
        initialise_from(model, tmp_path / "source", ["model.typo"])


@pytest.mark.parametrize("entry", ["", " "])
def test_an_empty_skip_entry_is_refused_not_read_as_a_prefix_of_every_tensor(tmp_path, entry):
    """``init_from_skip: [""]`` (a stray comma in a YAML list, an empty shell variable) was read as a tensor-name
    prefix, which every name starts with: the run took 0 of its tensors from init_from and trained from scratch,
    saying only '16 left fresh'. It is refused naming the entry."""
    options = {"vocab_size": 6, "d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2, "max_positions": 16}
    source = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**options))
    source.save_pretrained(tmp_path / "source")
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**options))
    with pytest.raises(ConfigError, match=f"init_from_skip entry {entry!r} is empty"):
        initialise_from(model, tmp_path / "source", [entry])


def test_no_advice_is_given_that_following_would_still_be_refused(tmp_path):
    """Another vocabulary and another max_order differ in the embeddings and lm_head, which init_from_skip:
    [embeddings] starts fresh, and in the Markov bias's tensors, which no group holds: an advice to skip
    [embeddings] would be refused again on the rest, so none is given; the refusal names the differing tensors. Where
    the differing tensors all lie in a group (the vocabulary alone), the advice given is accepted."""
    options = {"d_model": 8, "n_layers": 1, "n_heads": 2}
    source = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=6, max_order=2, **options))
    source.save_pretrained(tmp_path / "source")
    for max_order, advised in [(3, False), (2, True)]:
        model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=9, max_order=max_order,
                                                                           **options))  # fmt: skip
        with pytest.raises(ConfigError) as refused:
            initialise_from(model, tmp_path / "source", [])
        message = str(refused.value)
        assert ("add init_from_skip: [" in message) == advised, message
        if advised:
            advice = message.split("add init_from_skip: [")[1].rstrip("]").split(", ")
            assert initialise_from(model, tmp_path / "source", advice)["tensors_fresh"] == 2  # embed, lm_head
        else:
            assert "5 tensors differ (lm_head.weight [6, 8] -> [9, 8]; model.blocks.0" in message, message


def test_a_run_whose_last_checkpoint_is_damaged_is_refused_naming_its_newest_intact_step_checkpoint(tmp_path):
    """init_from of an unfinished run whose last.ckpt was cut short refused ("cannot read it") without a word of
    the step checkpoints beside it, whose weights it could start from. The refusal names the newest intact one (a
    damaged newer one passed over), and init_from of that checkpoint is taken."""
    trainer = {**TINY_RUN["trainer"], "max_steps": 6, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer}))
    assert run_in_process("train", "tiny.yaml", "output_dir=parent", cwd=tmp_path).returncode == 0
    (tmp_path / "parent" / "finished.json").unlink()  # read as a run stopped after its last checkpoint
    checkpoints = tmp_path / "parent" / "checkpoints"
    for name in ("last.ckpt", "step-000006.ckpt"):
        (checkpoints / name).write_bytes((checkpoints / name).read_bytes()[:3000])
    refused = run_in_process("train", "tiny.yaml", "output_dir=tuned", "init_from=parent", cwd=tmp_path)
    line = one_line_error(refused, "parent/checkpoints/last.ckpt: cannot read it")
    assert line.endswith("; the run's newest intact checkpoint is parent/checkpoints/step-000004.ckpt (step 4): "
                         "give that instead"), line
    tuned = run_in_process("train", "tiny.yaml", "output_dir=tuned", "init_from=parent/checkpoints/step-000004.ckpt",
                           cwd=tmp_path)  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr[-2000:]


VOCABULARY = 37  # no other size of these models: a tensor with a dimension of 37 has a row per token id


@pytest.mark.parametrize("family", ["markovian_transformer", "scan_markov", "markov_translator", "vmt"])
def test_init_from_skip_embeddings_starts_exactly_the_tensors_a_vocabulary_indexes_fresh(tmp_path, family):
    """The group was guessed from names holding 'embed' (and lm_head): the VMT's token emission (a row per token id)
    was loaded after a tokenizer change, its rows for other symbols, while the translator's embedding_norm and a
    learned position table, which no vocabulary indexes, started fresh. Each model now says its vocabulary's modules;
    the tensors fresh are those with a dimension of the vocabulary's size, every other one is the source's."""
    from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration
    from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM
    from markovformer.models.vmt import VariationalMarkovTransformer, VMTConfig

    build = {"markovian_transformer": lambda: MarkovianTransformerForCausalLM(MarkovianTransformerConfig(
                 vocab_size=VOCABULARY, d_model=8, n_layers=1, n_heads=2, max_order=2, position="learned",
                 max_positions=16)),
             "scan_markov": lambda: ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=VOCABULARY, d_model=8,
                                                                           max_positions=16, order=4)),
             "markov_translator": lambda: MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
                 vocab_size=VOCABULARY, d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=16,
                 max_positions=16)),
             "vmt": lambda: VariationalMarkovTransformer(VMTConfig(vocab_size=VOCABULARY, latent_dim=4, d_model=8,
                                                                   n_layers=1, n_heads=2, hidden_dim=12, window=8,
                                                                   skip_length=2))}[family]  # fmt: skip
    source = build()
    with torch.no_grad():  # no tensor of the source equals a fresh one (a layer norm starts at ones and zeros)
        for parameter in source.parameters():
            parameter.add_(torch.rand_like(parameter) + 1)
    source.save_pretrained(tmp_path / "source")
    model = build()
    fresh = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    initialise_from(model, tmp_path / "source", ["embeddings"])
    for name, tensor in model.state_dict().items():
        expected = fresh[name] if VOCABULARY in tensor.shape else source.state_dict()[name]
        assert tensor.equal(expected), name


def _refused_advice(refuse) -> list[str]:
    """The init_from_skip entries in the ConfigError that ``refuse()`` raises ("... init_from_skip: [a, b]")."""
    with pytest.raises(ConfigError) as refused:
        refuse()
    return str(refused.value).split("init_from_skip: [")[1].split("]")[0].split(", ")


@pytest.mark.parametrize(("head", "vocabulary"), [("lm", (6, 9)), ("labels", (6, 6)), ("labels", (6, 9))],
                         ids=["a language model's vocabulary", "a classifier's labels", "labels and vocabulary"])
def test_the_advised_init_from_skip_is_the_smallest_that_is_taken(tmp_path, head, vocabulary):
    """A causal LM's new vocabulary was advised init_from_skip: [head, embeddings], though the group embeddings holds
    lm_head (a row per token id): head added nothing. The advice is taken, and without any one of its entries it is
    refused again: no entry is needless."""
    from markovformer.models.markovian_transformer import MarkovianTransformerForSequenceClassification

    def built(vocab_size: int, num_labels: int):
        config = MarkovianTransformerConfig(vocab_size=vocab_size, d_model=8, n_layers=1, n_heads=2, max_order=2,
                                            num_labels=num_labels)  # fmt: skip
        kind = MarkovianTransformerForCausalLM if head == "lm" else MarkovianTransformerForSequenceClassification
        return kind(config)

    built(vocabulary[0], 2).save_pretrained(tmp_path / "source")
    model = built(vocabulary[1], 2 if head == "lm" else 3)
    advice = _refused_advice(lambda: initialise_from(model, tmp_path / "source", []))
    initialise_from(model, tmp_path / "source", advice)
    for entry in advice:
        with pytest.raises(ConfigError, match="does not fit this run's model"):
            initialise_from(model, tmp_path / "source", [other for other in advice if other != entry])


@pytest.mark.parametrize("skip", [[], ["model.blocks"]])
def test_a_new_tokenizer_is_advised_the_smallest_init_from_skip_that_fits_its_own(tmp_path, skip):
    """A fine-tuning run asking another tokenizer than its source's was advised init_from_skip: [head, embeddings]:
    head adds nothing to a language model (embeddings holds lm_head), and the run's own entries were dropped. The
    advice, the run's entries and embeddings, lets the run fit its own tokenizer; without embeddings it is refused."""
    from markovformer.data.readers.tokenizer import CharTokenizer
    from markovformer.training.init_from import tokenizer_source
    from markovformer.training.run_config import resolve_run_config

    tiny_model().save_pretrained(tmp_path / "source")
    CharTokenizer("abcde").save(tmp_path / "source")
    (tmp_path / "corpus.txt").write_text("abcde edcba\n" * 20)
    values = {**TINY_RUN, "init_from": str(tmp_path / "source"), "init_from_skip": skip,
              "data": {"source": "text", "path": str(tmp_path / "corpus.txt"), "seq_len": 8, "tokenizer": "bpe",
                       "vocab_size": 300}}  # fmt: skip
    advice = _refused_advice(lambda: tokenizer_source(resolve_run_config(values)))
    assert advice == [*skip, "embeddings"]
    assert tokenizer_source(resolve_run_config({**values, "init_from_skip": advice})) is None  # fits its own


@pytest.mark.parametrize("family", ["markovian_transformer", "scan_markov"])
def test_the_advice_for_a_new_vocabulary_and_position_table_joins_the_group_and_the_table(tmp_path, family):
    """Another vocabulary and another learned position table: the advice named the three tensors (the token
    embedding, the table, lm_head), where init_from_skip: [embeddings, <the table>] is taken too. The advice is
    taken, and no init_from_skip of fewer entries (groups or tensor names, tried one by one) is."""
    from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM

    def built(vocab_size: int, max_positions: int):
        if family == "scan_markov":
            return ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=vocab_size, d_model=8, order=4,
                                                          max_positions=max_positions))  # fmt: skip
        return MarkovianTransformerForCausalLM(MarkovianTransformerConfig(
            vocab_size=vocab_size, d_model=8, n_layers=1, n_heads=2, max_order=2, position="learned",
            max_positions=max_positions))  # fmt: skip

    built(6, 16).save_pretrained(tmp_path / "source")
    model = built(9, 32)
    advice = _refused_advice(lambda: initialise_from(model, tmp_path / "source", []))
    initialise_from(model, tmp_path / "source", advice)
    entries = ["head", "embeddings", *model.state_dict()]
    for fewer in range(1, len(advice)):
        for skip in itertools.combinations(entries, fewer):
            with pytest.raises(ConfigError):
                initialise_from(model, tmp_path / "source", list(skip))


def test_a_model_without_a_backbone_is_never_advised_the_group_head(tmp_path):
    """A Scan Markov model of another width (12 tensors differ) was advised init_from_skip: [head], and following the
    advice was refused: the model has no model. backbone, so head would start every tensor fresh. A model without a
    backbone is advised no group it refuses, neither there nor in the refusal of an entry naming no tensor."""
    from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM

    ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=6, d_model=8, order=4)).save_pretrained(tmp_path / "source")
    model = ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=6, d_model=16, order=4))
    with pytest.raises(ConfigError) as refused:
        initialise_from(model, tmp_path / "source", [])
    message = str(refused.value)
    assert "12 tensors differ (decoder.0.bias [32] -> [64]" in message and "init_from_skip" not in message, message
    with pytest.raises(ConfigError) as refused:
        initialise_from(model, tmp_path / "source", ["nosuch"])
    assert str(refused.value).endswith("names no tensor of the model or of init_from; use embeddings or a tensor-name "
                                       "prefix"), refused.value  # fmt: skip


def test_a_model_without_token_embeddings_is_never_advised_the_group_embeddings(tmp_path):
    """A CTC model over feature frames has no tensor with a row per token id: init_from_skip: [embeddings] was refused
    as naming no tensor, "use head or embeddings or a tensor-name prefix", advising the entry it refused."""
    from markovformer.models.markovian_transformer.classifiers import MarkovianTransformerForCTC

    config = MarkovianTransformerConfig(input_dim=5, d_model=8, n_layers=1, n_heads=2, num_labels=4)
    MarkovianTransformerForCTC(config).save_pretrained(tmp_path / "source")
    for entry in ("embeddings", "nosuch"):
        with pytest.raises(ConfigError) as refused:
            initialise_from(MarkovianTransformerForCTC(config), tmp_path / "source", [entry])
        assert str(refused.value).endswith(f"init_from_skip entry {entry!r} names no tensor of the model or of "
                                           f"init_from; use head or a tensor-name prefix"), refused.value  # fmt: skip

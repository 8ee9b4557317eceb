"""The engine's vmt task: windows walked along documents as a function of (seed, step), the carry handed from one
training step to the next (and through a checkpoint), KL warm-up, validation as the ELBO of whole documents walked
window by window, and trainer options refused by models that cannot take them."""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import subprocess
import sys
import time

import lightning
import pytest
import torch
import yaml
from conftest import run_in_process  # beside this folder

import markovformer.training.tasks.vmt as vmt_task
from markovformer.data.collate import collate
from markovformer.data.synthetic.state_space import StickyHMMSource
from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.models.vmt import VariationalMarkovTransformer, VMTConfig
from markovformer.training.batches import DocumentWindows, window_stride, windows_in_document
from markovformer.training.build import build_run_task
from markovformer.training.checkpoint import load_checkpoint_file
from markovformer.training.module import TrainingModule
from markovformer.training.run_config import ConfigError, TrainerConfig, resolve_run_config
from markovformer.training.runner import build_data, build_model, evaluate, load_run, train
from markovformer.training.tasks import build_task
from markovformer.training.tasks.vmt import DocumentMetrics, DocumentWalk, VMTOptions, kl_weight

TINY_VMT = {
    "task": "vmt",
    "model_type": "vmt",
    "model": {"latent_dim": 4, "d_model": 16, "n_layers": 1, "n_heads": 2, "hidden_dim": 16, "window": 4,
              "skip_length": 3},
    "data": {"source": "sticky_hmm", "num_states": 3, "num_symbols": 6, "doc_len": 18, "train_documents": 12,
             "val_documents": 3, "test_documents": 3},
    "trainer": {"max_steps": 9, "batch_size": 3, "warmup_steps": 2, "eval_every": 9, "checkpoint_every": 9,
                "log_every": 3, "eval_batch_size": 2, "seed": 5},
    "task_options": {"kl_warmup_steps": 4},
}  # fmt: skip


def tiny_vmt(**changes) -> dict:
    values = json.loads(json.dumps(TINY_VMT))
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        values[section][key] = value
    return values


# --------------------------------------------------------------------------------------------- the stream


def _numbered_documents(lengths: list[int]) -> list[dict]:
    """Document d holds ids 100·d + position, so a window says where it was cut from."""
    return [{"input_ids": 100 * d + torch.arange(length)} for d, length in enumerate(lengths)]


@pytest.mark.parametrize("overlap", [False, True])
def test_document_windows_walk_each_document_in_order_and_resume_exactly(overlap):
    lengths, window, lanes = [37, 8, 50, 3, 64, 21], 8, 3
    stride = window_stride(window, overlap)
    documents = _numbered_documents(lengths)

    def stream(start: int, count: int, seed: int = 1) -> list[dict]:
        iterator = iter(DocumentWindows(documents, lanes, seed, collate, window, stride, start=lambda: start))
        return [next(iterator) for _ in range(count)]

    steps = stream(0, 200)
    previous: list[tuple[int, int] | None] = [None] * lanes
    taken = [0] * lanes  # windows taken in the lane's current document (None: it joined that document midway)
    walked = torch.zeros(len(lengths), dtype=torch.long)  # documents walked to their end from their first window
    for batch in steps:
        assert set(batch) == {"input_ids", "attention_mask", "carry_mask"}
        for lane in range(lanes):
            ids = batch["input_ids"][lane][batch["attention_mask"][lane].bool()]
            document, start = int(ids[0]) // 100, int(ids[0]) % 100
            expected = torch.arange(start, min(start + window, lengths[document])) + 100 * document
            assert torch.equal(ids, expected)  # one contiguous window, cut short only by the document's end
            continues = bool(batch["carry_mask"][lane])
            if previous[lane] is None:  # step 0: a random window, nothing to carry
                assert not continues and start % stride == 0
                taken[lane] = None
            else:
                last_document, last_start = previous[lane]
                ended = last_start + window >= lengths[last_document]
                assert continues == (not ended)
                if continues:
                    assert (document, start) == (last_document, last_start + stride)
                else:  # a new document, from its beginning
                    assert start == 0
                    if taken[lane] is not None:
                        assert taken[lane] == windows_in_document(lengths[last_document], window, stride)
                        walked[last_document] += 1
                    taken[lane] = 0
            if taken[lane] is not None:
                taken[lane] += 1
            previous[lane] = (document, start)
    assert bool((walked > 0).all())  # every document was drawn and walked through
    assert windows_in_document(37, window, stride) == (5 if not overlap else 9)  # the last one short: 32..36
    for start in (1, 57, 199):  # a resumed stream continues the same sequence
        count = min(5, len(steps) - start)
        for later, batch in zip(stream(start, count), steps[start : start + count], strict=True):
            for key in batch:
                assert torch.equal(later[key], batch[key]), (start, key)
    other_seed = stream(0, 20, seed=2)
    assert any(not torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(other_seed, steps[:20], strict=True))


# ------------------------------------------------------------------------------------- training steps


@pytest.fixture
def recorded_forwards(monkeypatch):
    """Every VMT forward call during a run: its keyword arguments and output."""
    calls = []
    original = VariationalMarkovTransformer.forward

    @functools.wraps(original)
    def recording(self, **kwargs):
        output = original(self, **kwargs)
        calls.append((kwargs, output))
        return output

    monkeypatch.setattr(VariationalMarkovTransformer, "forward", recording)
    return calls


@pytest.mark.parametrize("changes", [{}, {"task_options__window_overlap": True}, {"task_options__carry": False}],
                         ids=["carry", "overlap", "no_carry"])  # fmt: skip
def test_each_step_gets_the_previous_steps_carry_and_the_warming_kl_weight(changes, recorded_forwards, tmp_path,
                                                                           capsys):  # fmt: skip
    values = tiny_vmt(**changes)
    values["output_dir"] = str(tmp_path / "run")
    config = resolve_run_config(values)
    train(config)
    printed = capsys.readouterr().out  # training's objective and validation's -ELBO are named apart
    assert "train objective/token" in printed and "validation: -ELBO/token" in printed
    assert "final validation: -ELBO/token" in printed and "train loss" not in printed
    tc, options = config.trainer, config.task_options
    stride = window_stride(config.model["window"], options.window_overlap)
    bundle = build_data(config)
    stream = iter(DocumentWindows(bundle.train, tc.batch_size, tc.seed, collate, config.model["window"], stride))
    assert len(recorded_forwards) == tc.max_steps  # training only: validation walks with elbo / iw_bound
    continued = 0
    for step, (kwargs, _) in enumerate(recorded_forwards):
        batch = next(stream)
        assert torch.equal(kwargs["input_ids"], batch["input_ids"])
        assert kwargs["kl_weight"] == pytest.approx(min(1.0, (step + 1) / options.kl_warmup_steps))
        assert kwargs["carry_index"] == stride - 1
        if not options.carry or step == 0 or not bool(batch["carry_mask"].any()):
            assert kwargs.get("carry") is None and kwargs.get("carry_mask") is None
            continue
        continued += 1
        assert torch.equal(kwargs["carry_mask"], batch["carry_mask"])  # rows starting a document use no carry
        assert torch.equal(kwargs["carry"], recorded_forwards[step - 1][1].carry)
    assert continued > 0 if options.carry else continued == 0
    assert (kl_weight(1, 0), kl_weight(2, 4), kl_weight(9, 4)) == (1.0, 0.5, 1.0)


# --------------------------------------------------------------------------------------------- validation


def _walk_by_hand(model, documents: torch.Tensor, window: int, carry: bool, generator) -> dict:
    totals = {"elbo": 0.0, "reconstruction": 0.0, "kl": 0.0}
    state = None
    for start in range(0, documents.shape[1], window):
        result = model.elbo(documents[:, start : start + window], carry=state, generator=generator)
        for name in totals:
            totals[name] += float(getattr(result, name)) * result.num_tokens
        state = result.carry if carry else None
    return totals


@pytest.mark.parametrize("carry", [True, False])
def test_validation_is_the_elbo_of_the_documents_walked_window_by_window(carry):
    """-ELBO per token of the whole documents: consecutive windows (the last one short), the carry chained, batches
    of documents scored in turn with one noise stream."""
    torch.manual_seed(0)
    # residual_posterior off: Q differs from P from the start, so there is a KL to count
    config = VMTConfig(vocab_size=6, latent_dim=4, d_model=16, n_layers=1, n_heads=2, hidden_dim=16, window=8,
                       skip_length=3, residual_posterior=False)  # fmt: skip
    model = VariationalMarkovTransformer(config).eval()
    documents = StickyHMMSource(num_states=3, num_symbols=6, doc_len=21, val_documents=5).build(seed=0).val
    metrics = DocumentMetrics()
    walk = DocumentWalk(carry=carry)
    with torch.no_grad():
        for first in (0, 3):  # two batches: 3 documents, then 2
            walk(model, collate(documents[first : first + 3]), metrics)
        measured = metrics.compute()
        generator = torch.Generator().manual_seed(0)
        stacked = torch.stack([document["input_ids"] for document in documents])
        totals = [_walk_by_hand(model, stacked[rows], 8, carry, generator) for rows in (slice(0, 3), slice(3, 5))]
    tokens = stacked.numel()
    for name in ("elbo", "reconstruction", "kl"):
        assert measured[name] == pytest.approx(sum(t[name] for t in totals) / tokens, rel=1e-5)
    assert measured["loss"] == pytest.approx(-measured["elbo"])
    assert measured["bits_per_token"] == pytest.approx(-measured["elbo"] / torch.log(torch.tensor(2.0)).item())
    assert measured["iw_bound"] > measured["elbo"] - 0.05  # K = 10 paths: tighter, up to Monte-Carlo noise
    assert measured["kl"] > 0


def test_a_killed_vmt_run_resumes_with_its_carry_to_the_same_final_metrics(tmp_path):
    values = tiny_vmt(
        model__d_model=32, model__hidden_dim=32, model__window=6, data__doc_len=30, data__train_documents=32,
        trainer__max_steps=40, trainer__batch_size=8, trainer__eval_every=20, trainer__checkpoint_every=10,
    )  # fmt: skip
    config_path = tmp_path / "vmt.yaml"
    config_path.write_text(yaml.safe_dump(values))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}

    def command(*args: str) -> list[str]:
        return [sys.executable, "-m", "markovformer", *args]

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    done = run_in_process("train", str(config_path), f"output_dir={whole}", cwd=tmp_path)  # the killed one: a process
    assert done.returncode == 0, done.stderr
    assert "exact log-likelihood" in done.stdout  # the data's reference, printed beside the bounds

    process = subprocess.Popen(command("train", str(config_path), f"output_dir={killed}"), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.time() + 240
    while not (killed / "checkpoints" / "step-000020.ckpt").exists():
        assert process.poll() is None, process.stderr.read().decode()
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "metrics.json").exists()  # it really died before the end
    saved = load_checkpoint_file(killed / "checkpoints" / "last.ckpt")
    assert saved["vmt_carry"].shape == (8, 4)  # the lanes' carry travels with the checkpoint

    resumed = run_in_process("train", "--resume", str(killed), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stdout
    final = {name: json.loads((run / "metrics.json").read_text())["val"] for name, run in
             (("whole", whole), ("killed", killed))}  # fmt: skip
    assert set(final["whole"]) == {"loss", "bits_per_token", "elbo", "reconstruction", "kl", "iw_bound"}
    for name, value in final["whole"].items():
        assert final["killed"][name] == pytest.approx(value, rel=1e-6), name
    # eval walks the documents as validation did, and gives the exact reference beside them
    measured = evaluate(whole)
    for name, value in final["whole"].items():
        assert measured["metrics"][name] == pytest.approx(value, rel=1e-6), name
    reference = json.loads((whole / "metrics.json").read_text())["reference"]
    assert measured["exact_log_likelihood_per_token"] == reference["val_log_likelihood_per_token"]
    assert evaluate(whole, split="test")["exact_log_likelihood_per_token"] == reference["test_log_likelihood_per_token"]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_resumed_process_takes_its_own_lanes_of_the_saved_carry(monkeypatch, rank):
    """The checkpoint holds every process's lanes in rank order (here 2 processes of 3 lanes each)."""
    monkeypatch.setattr(vmt_task, "world", lambda: (rank, 2))
    task = build_task("vmt")
    saved = torch.arange(6.0)[:, None].expand(6, 4)
    task.load_state({"vmt_carry": saved})
    assert torch.equal(task.carry, saved[3 * rank : 3 * rank + 3])


# ------------------------------------------------------------------------------------------------ options


def test_task_options_are_refused_by_tasks_and_models_that_cannot_take_them(tmp_path):
    causal = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=6, d_model=16, n_layers=1,
                                                                        n_heads=2))  # fmt: skip
    vmt = VariationalMarkovTransformer(VMTConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2))
    for option, value in (("kl_warmup_steps", 10), ("carry", False), ("window_overlap", True)):
        with pytest.raises(ConfigError, match=f"task_options.{option} is not an option of task causal_lm"):
            resolve_run_config({**tiny_vmt(), "task": "causal_lm", "task_options": {option: value}})
        with pytest.raises(ConfigError, match=f"task_options.{option} is set but MarkovianTransformerForCausalLM"):
            build_task("vmt", options=VMTOptions(**{option: value})).check_model(causal)
        build_task("vmt", options=VMTOptions(**{option: value})).check_model(vmt)
    with pytest.raises(ConfigError, match="trainer.label_smoothing is set but task vmt does not use it"):
        TrainingModule(vmt, build_task("vmt", TrainerConfig(label_smoothing=0.1)))
    with pytest.raises(ConfigError, match=r"task_options.orders is not an option of task vmt \(its options: "
                                          r"\('kl_warmup_steps', 'carry', 'window_overlap', 'iw_samples'\)\)"):
        resolve_run_config(tiny_vmt(task_options__orders=[2]))
    with pytest.raises(ConfigError, match="task_options.kl_warmup_steps=-1"):
        VMTOptions(kl_warmup_steps=-1)
    with pytest.raises(ConfigError, match="task_options.carry"):
        resolve_run_config(tiny_vmt(task_options__carry="yes"))
    with pytest.raises(ConfigError, match="feeds"):  # the state-space sources feed the vmt task only
        build_data(resolve_run_config({**tiny_vmt(), "task": "causal_lm", "task_options": {}}))
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    values = {**tiny_vmt(), "data": {"source": "text", "path": str(text), "seq_len": 31, "overlap": 4}}
    config = resolve_run_config(values)
    with pytest.raises(ConfigError, match="data.overlap=4"):  # overlapping windows would score tokens twice
        build_run_task(config, build_data(config))
    values["data"]["overlap"] = 0
    values["output_dir"] = str(tmp_path / "text_run")
    results = train(resolve_run_config(values))  # text feeds the VMT too: each window a document
    assert results["val"]["loss"] > 0 and results["reference"] == {}


def test_an_old_vmt_config_with_trainer_carry_loads_with_the_option_in_its_new_home():
    old = tiny_vmt()
    old["trainer"].update(old.pop("task_options"), carry=False, window_overlap=True)
    config = resolve_run_config(old)
    assert config.task_options == VMTOptions(kl_warmup_steps=4, carry=False, window_overlap=True)
    assert "carry" not in config.to_dict()["trainer"] and config.to_dict()["task_options"]["carry"] is False
    assert build_task("vmt", config.trainer, options=config.task_options).walk.carry is False
    with pytest.raises(ConfigError, match="trainer.carry is the old place of task_options.carry; give only"):
        resolve_run_config({**old, "task_options": {"carry": True}})


def test_generate_on_a_vmt_run_reads_the_prompt_and_writes_with_the_models_own_sampler(tmp_path, capsys):
    from markovformer.cli.main import main

    values = tiny_vmt()
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    _, model, _ = load_run(tmp_path / "run")
    expected = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=8, do_sample=True, temperature=0.7,
                              generator=torch.Generator().manual_seed(4))  # fmt: skip
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "run"), "--prompt", "1 2 3", "--max-new-tokens", "8", "--temperature",
                 "0.7", "--seed", "4"]) == 0  # fmt: skip
    assert capsys.readouterr().out.split() == [str(i) for i in expected[0].tolist()]
    expected = model.generate(torch.tensor([[1, 2]]), max_new_tokens=5, do_sample=True, top_p=0.5,
                              generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert main(["generate", str(tmp_path / "run"), "--prompt", "1 2", "--max-new-tokens", "5", "--top-p", "0.5"]) == 0
    assert capsys.readouterr().out.split() == [str(i) for i in expected[0].tolist()]


def test_generate_on_a_vmt_run_samples_an_empty_prompt_from_the_models_own_start(tmp_path, capsys):
    """The VMT has its own start, x_1 ~ P(x_1): an empty prompt is a sample of the model, not a continuation of a
    token drawn uniformly (which put a uniform first symbol, and its posterior, into every unconditional sample)."""
    from markovformer.cli.main import main

    values = tiny_vmt()
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    _, model, _ = load_run(tmp_path / "run")
    for seed in range(3):
        expected = model.generate(torch.zeros(1, 0, dtype=torch.long), max_new_tokens=6, do_sample=True,
                                  generator=torch.Generator().manual_seed(seed))  # fmt: skip
        capsys.readouterr()
        assert main(["generate", str(tmp_path / "run"), "--prompt", "", "--max-new-tokens", "6", "--seed",
                     str(seed)]) == 0  # fmt: skip
        assert capsys.readouterr().out.split() == [str(i) for i in expected[0].tolist()]


def _naive_forward_log_likelihood(initial, transition, emission, tokens) -> float:
    """log p(y_1..y_T) of one document by the unscaled forward recursion in float64 (short documents only)."""
    alpha = [initial[s] * emission[s][tokens[0]] for s in range(len(initial))]
    for token in tokens[1:]:
        alpha = [sum(alpha[r] * transition[r][s] for r in range(len(alpha))) * emission[s][token]
                 for s in range(len(alpha))]  # fmt: skip
    return math.log(sum(alpha))


@pytest.mark.parametrize("split", ["val", "test"])
def test_eval_prints_the_bounds_beside_the_exact_log_likelihood_of_the_split(split, tmp_path, capsys):
    """As training's last lines do: `eval` of a state-space run sets its ELBO and IW bound beside the exact
    log-likelihood of the documents it scored (before, only --json carried that value)."""
    from markovformer.cli.main import main

    values = tiny_vmt()
    values["output_dir"] = str(tmp_path / "run")
    config = resolve_run_config(values)
    train(config)
    bundle = build_data(config)
    parameters = bundle.info["parameters"]
    documents = [example["input_ids"].tolist() for example in getattr(bundle, split)]
    exact = sum(_naive_forward_log_likelihood(parameters["initial"], parameters["transition"], parameters["emission"],
                                              document) for document in documents)  # fmt: skip
    exact /= sum(len(document) for document in documents)
    metrics = evaluate(tmp_path / "run", split)["metrics"]
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--split", split]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    name = {"val": "validation"}.get(split, split)
    assert line == (f"  vs the exact log-likelihood of the {name} documents {exact:.4f} nats/token, each bound minus "
                    f"it: ELBO {metrics['elbo'] - exact:+.4f}, importance-weighted bound (K = {vmt_task.IW_SAMPLES}) "
                    f"{metrics['iw_bound'] - exact:+.4f}")  # fmt: skip


def test_eval_batch_size_help_names_the_vmt_whose_bounds_depend_on_it(tmp_path, capsys):
    """`eval --help` said the metrics never depend on --batch-size; a VMT's bounds draw their noise per batch of
    documents, so another size gives another (equally valid) Monte-Carlo estimate: the help says so."""
    from markovformer.cli.main import main

    values = tiny_vmt()
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    one, three = (evaluate(tmp_path / "run", "val", batch_size=size)["metrics"] for size in (1, 3))
    assert one["elbo"] != three["elbo"]
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "the metrics do not depend on it, but for a VMT's Monte-Carlo bounds" in help_text


def test_generative_from_data_trains_the_posterior_alone(tmp_path):
    """P is the data's own linear-Gaussian model and stays so through training; only Q moves."""
    values = tiny_vmt(model__latent_dim=2)
    values["data"] = {"source": "linear_gaussian", "doc_len": 16, "train_documents": 6, "val_documents": 2,
                      "test_documents": 2}  # fmt: skip
    values["model"]["generative_from_data"] = True
    values["output_dir"] = str(tmp_path / "run")
    config = resolve_run_config(values)
    train(config)
    trained = load_run(tmp_path / "run")[1]
    lightning.seed_everything(config.trainer.seed, workers=True, verbose=False)  # the run's start, rebuilt as _fit does
    bundle = build_data(config)
    start = build_model(config, bundle.info)
    build_run_task(config, bundle).prepare_model(start)
    generative = {id(p) for p in start.generative_parameters()}
    assert all(not p.requires_grad for p in start.generative_parameters())
    moved = 0
    for (name, initial), (_, measured) in zip(start.named_parameters(), trained.named_parameters(), strict=True):
        if id(initial) in generative:
            torch.testing.assert_close(measured, initial, rtol=0, atol=0, msg=name)
        else:
            moved += int(not torch.equal(measured, initial))
    assert moved > 0  # the posterior did train
    tokens = tiny_vmt(**{"model__generative_from_data": True})
    tokens["output_dir"] = str(tmp_path / "tokens")
    with pytest.raises(ConfigError, match="generative_from_data"):
        train(resolve_run_config(tokens))


def test_eval_iw_samples_chooses_k_and_the_results_say_which(tmp_path, capsys):
    """K was fixed at 10 and said nowhere in eval --json or metrics.json, so a bound could not be tightened or read
    with its K. task_options.iw_samples sets validation's, `eval --iw-samples K` scores a run with another; on the
    data's own linear-Gaussian model (P frozen at the truth), K = 200 lies closer to the exact log-likelihood than
    K = 1 (the ELBO in expectation)."""
    from markovformer.cli.main import main

    values = tiny_vmt(model__latent_dim=2)
    values["data"] = {"source": "linear_gaussian", "doc_len": 16, "train_documents": 6, "val_documents": 4,
                      "test_documents": 2}  # fmt: skip
    values["model"]["generative_from_data"] = True
    values["task_options"] = {"iw_samples": 3}
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["iw_samples"] == 3
    assert "importance-weighted bound (K = 3)" in capsys.readouterr().out
    results = {k: evaluate(tmp_path / "run", "val", task_options={"iw_samples": k}) for k in (1, 200)}
    exact = results[1]["exact_log_likelihood_per_token"]
    assert results[1]["iw_samples"] == 1 and results[200]["iw_samples"] == 200
    assert exact - results[200]["metrics"]["iw_bound"] < exact - results[1]["metrics"]["iw_bound"]
    assert main(["eval", str(tmp_path / "run"), "--iw-samples", "200"]) == 0
    assert "importance-weighted bound (K = 200)" in capsys.readouterr().out
    assert main(["eval", str(tmp_path / "run"), "--iw-samples", "0", "--json"]) == 0
    unbounded = json.loads(capsys.readouterr().out)
    assert "iw_bound" not in unbounded["metrics"] and "iw_samples" not in unbounded
    assert main(["eval", str(tmp_path / "run"), "--iw-samples", "-1"]) == 2
    assert "--iw-samples -1 must be >= 0" in capsys.readouterr().err


def test_window_overlap_on_a_one_token_window_is_refused_naming_both_values():
    """Half of a one-token window rounds up to the whole window (stride 1 either way): the option would change
    nothing, without a word, so the run is refused instead."""
    assert window_stride(1, True) == window_stride(1, False) == 1
    one = VariationalMarkovTransformer(VMTConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2, window=1))
    with pytest.raises(ConfigError, match=r"task_options.window_overlap=true needs model.window >= 2.*"
                                          r"model.window=1"):  # fmt: skip
        build_task("vmt", options=VMTOptions(window_overlap=True)).check_model(one)
    build_task("vmt", options=VMTOptions(window_overlap=False)).check_model(one)
    two = VariationalMarkovTransformer(VMTConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2, window=2))
    build_task("vmt", options=VMTOptions(window_overlap=True)).check_model(two)


def test_generative_from_data_with_another_latent_size_names_model_latent_dim():
    """The error was set_linear_gaussian's "emission has shape (1, 2); this VMT needs (input_dim, latent_dim) =
    (1, 4)", naming no option of the run."""
    values = tiny_vmt(model__latent_dim=4)  # the data's state has 2 dimensions
    values["data"] = {"source": "linear_gaussian", "state_dim": 2, "doc_len": 16, "train_documents": 2,
                      "val_documents": 1, "test_documents": 1}  # fmt: skip
    values["model"]["generative_from_data"] = True
    config = resolve_run_config(values)
    bundle = build_data(config)
    with pytest.raises(ConfigError, match=r"model.latent_dim=4: .* 2 dimensions \(data.state_dim\); set "
                                          r"model.latent_dim=2"):  # fmt: skip
        build_run_task(config, bundle).prepare_model(build_model(config, bundle.info))


def test_inspect_curves_name_the_iw_bounds_k_and_draw_the_exact_log_likelihood_on_both_bounds(tmp_path, kept_figures):
    """The curves' bound panels: the importance-weighted bound's title said "iw bound" (it rises with K, so a value
    without K is no number), and neither bound panel drew the exact log-likelihood both approach from below (only
    the loss panel drew its negative). The exact value drawn is the naive forward algorithm's on the validation
    documents."""
    from markovformer.plots import curves
    from markovformer.training.inspection import write_inspection_report

    values = tiny_vmt()
    values["output_dir"] = str(tmp_path / "run")
    values["task_options"] = {"iw_samples": 7}
    config = resolve_run_config(values)
    train(config)
    bundle = build_data(config)
    parameters = bundle.info["parameters"]
    documents = [example["input_ids"].tolist() for example in bundle.val]
    exact = sum(_naive_forward_log_likelihood(parameters["initial"], parameters["transition"], parameters["emission"],
                                              document) for document in documents)  # fmt: skip
    exact /= sum(len(document) for document in documents)
    figures = kept_figures(curves)
    write_inspection_report(tmp_path / "run")
    panels = {ax.get_title(): ax for ax in figures["curves.png"].axes}
    assert "importance-weighted bound, K = 7 (nats/token)" in panels and "iw bound" not in panels
    for title in ("elbo", "importance-weighted bound, K = 7 (nats/token)"):
        [line] = [line for line in panels[title].get_lines() if line.get_label().startswith("exact log-likelihood")]
        assert line.get_ydata()[0] == pytest.approx(exact, abs=1e-9)


def test_a_kl_warm_up_longer_than_the_run_is_refused_before_anything_is_written(tmp_path):
    """Past max_steps the KL weight never reaches 1: the run ended on a down-weighted KL, not its ELBO, unsaid. The
    refusal is for new runs only (as the learning rate's warm-up)."""
    values = tiny_vmt()
    steps = values["trainer"]["max_steps"]
    values["task_options"] = {"kl_warmup_steps": steps + 1}
    values["output_dir"] = str(tmp_path / "run")
    refusal = rf"task_options.kl_warmup_steps={steps + 1} is larger than trainer.max_steps={steps}: the KL weight"
    with pytest.raises(ConfigError, match=refusal + " would never reach 1"):
        train(resolve_run_config(values))
    assert not (tmp_path / "run").exists()

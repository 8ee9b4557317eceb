"""A trained vmt run's eval, generate and inspect: generate reads the prompt (or samples the model's own start), eval
prints the bounds beside the exact log-likelihood and says which K it drew, and the curves name the bounds."""

from __future__ import annotations

import json
import math

import pytest
import torch
from vmt_run_values import tiny_vmt

import markovformer.training.tasks.vmt as vmt_task
from markovformer.training.run_config import resolve_run_config
from markovformer.training.runner import build_data, evaluate, load_run, train


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

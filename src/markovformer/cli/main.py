"""markovformer: train, evaluate, sample from and inspect Markov-structured sequence models.

Errors are one line on stderr and exit status 2 (add --debug for the traceback).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import warnings

from markovformer.cli import bench as bench_command  # its parser imports no torch

EXIT_BAD_INPUT = 2


def quiet_frameworks() -> None:
    """Keep Lightning's banners and third-party deprecation chatter out of the progress output."""
    import lightning.pytorch  # noqa: F401 - it sets its loggers' levels on import, so import it before changing them

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for message in (".*LeafSpec.*is deprecated", ".*does not have many workers.*", ".*Checkpoint directory.*exists",
                    ".*GPU available but not used.*", ".*TensorBoard.*", ".*tensorboardX.*"):  # fmt: skip
        warnings.filterwarnings("ignore", message=message)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="markovformer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a run from a YAML config (default: the embedded demo run)")
    train.add_argument("config", nargs="?", help="YAML run config (see configs/); omitted: the demo run")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model.max_order=3 trainer.max_steps=2000")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a killed run from its last checkpoint")

    evaluate = commands.add_parser("eval", help="metrics of a trained run on a split of its data")
    evaluate.add_argument("target", help="run directory or checkpoint file")
    evaluate.add_argument("--split", default="val", choices=("train", "val", "test"))
    evaluate.add_argument("--data", nargs="*", default=[], metavar="KEY=VALUE",
                          help="override data options, e.g. path=other.txt")  # fmt: skip
    evaluate.add_argument("--json", action="store_true", help="print the metrics as JSON")
    evaluate.add_argument("--beam-size", type=int, default=1, help="translation: beam search width for BLEU")

    generate = commands.add_parser("generate", help="sample from a language model, or translate with a translation "
                                   "model (one sentence per --prompt, or per line of --input)")  # fmt: skip
    generate.add_argument("target", help="run directory or checkpoint file")
    generate.add_argument("--prompt", help="text (or space-separated token ids without tokenizer); for a "
                          "translation run, the source sentence")  # fmt: skip
    generate.add_argument("--input", help="translation: a file of source sentences, one per line")
    generate.add_argument("--beam-size", type=int, default=1, help="translation: beam width (1 = greedy)")
    generate.add_argument("--length-penalty", type=float, default=1.0, help="translation: beam score / length^this")
    generate.add_argument("--max-new-tokens", type=int, default=200)
    generate.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    generate.add_argument("--top-k", type=int, default=None)
    generate.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass")
    generate.add_argument("--seed", type=int, default=0)

    inspect = commands.add_parser("inspect", help="figures of a trained run: curves, strengths, gates, attention")
    inspect.add_argument("target", help="run directory or checkpoint file")
    inspect.add_argument("--layers", type=int, nargs="*", default=None, help="layers whose attention maps to draw")
    inspect.add_argument("--out", default=None, help="output folder (default RUN_DIR/report)")

    experiment = commands.add_parser("experiment", help="run a named reproduction (`experiment list` names them)")
    experiment.add_argument("name", help="experiment name, or 'list'")
    experiment.add_argument("--out", default=None, help="output folder (default runs/experiments/NAME); "
                            "rerunning into it reuses the cells that finished")  # fmt: skip
    experiment.add_argument("--quick", action="store_true", help="a smaller version (fewer cells, seeds, steps)")
    experiment.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default: the experiment's)")
    experiment.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", dest="overrides",
                            help="change the experiment's settings, e.g. steps=500 'orders=[1, 2]'")  # fmt: skip

    data = commands.add_parser("data", help="the data sources")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    data_commands.add_parser("list", help="list the data sources")
    show = data_commands.add_parser("show", help="a data source's options and defaults")
    show.add_argument("name")
    prepare = data_commands.add_parser("prepare", help="fetch and convert a public data set into the data directory")
    prepare.add_argument("name", help="recipe name (`data prepare list` names them)")
    prepare.add_argument("--dir", default=None, help="data directory (default $MARKOVFORMER_DATA or ./data)")
    prepare.add_argument("--force", action="store_true", help="rebuild even when the file is already there")
    bench_command.add_parser(commands)
    return parser


def run_train(args: argparse.Namespace) -> None:
    from markovformer.allocator import keep_freed_memory
    from markovformer.training.demo import DEMO_CONFIG
    from markovformer.training.run_config import apply_overrides, load_yaml, resolve_run_config
    from markovformer.training.runner import resume, train

    keep_freed_memory()  # reuse freed memory: glibc would page-fault long-T activations in on every step
    if args.resume:
        if args.config or args.overrides:
            raise ValueError("--resume continues a run exactly as configured; give no config or overrides with it")
        resume(args.resume)
        return
    overrides = list(args.overrides)
    if args.config and "=" in args.config:  # `markovformer train key=value ...` overrides the demo run
        overrides.insert(0, args.config)
        args.config = None
    values = load_yaml(args.config) if args.config else copy.deepcopy(DEMO_CONFIG)
    train(resolve_run_config(apply_overrides(values, overrides)))


def run_eval(args: argparse.Namespace) -> None:
    from markovformer.training.run_config import parse_override
    from markovformer.training.runner import evaluate

    data = {}
    for text in args.data:
        path, value = parse_override(text)
        data[".".join(path)] = value
    results = evaluate(args.target, args.split, data, beam_size=args.beam_size)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    shown = "  ".join(f"{k} {v:.4f}" for k, v in results["metrics"].items())
    print(f"{results['run_dir']} [{results['split']}]: {shown}")


def run_generate(args: argparse.Namespace) -> None:
    from markovformer.training.runner import load_run

    config, model, run_dir = load_run(args.target)
    if config.task == "translation":
        translate(args, model, run_dir)
    elif config.task in ("causal_lm", "vmt") and not getattr(model.config, "input_dim", None):
        continue_prompt(args, model, run_dir)
    else:
        raise ValueError(f"{run_dir} is a {config.task} run; generate needs a causal_lm, vmt (tokens) or "
                         f"translation run")  # fmt: skip


def continue_prompt(args: argparse.Namespace, model, run_dir) -> None:
    from pathlib import Path

    import torch

    from markovformer.data.collate import PAD_ID
    from markovformer.models.generation import generate_tokens

    if args.prompt is None or args.input is not None:
        raise ValueError("a language model continues one --prompt (--input is for translation runs)")
    tokenizer = None
    if (Path(run_dir) / "tokenizer").is_dir():
        from markovformer.data.text import load_tokenizer

        tokenizer = load_tokenizer(Path(run_dir) / "tokenizer")
    if tokenizer is not None:
        ids = tokenizer.encode(args.prompt)
    else:
        try:
            ids = [int(token) for token in args.prompt.split()]
        except ValueError as error:
            raise ValueError(
                f"this run has no tokenizer: give the prompt as token ids, e.g. '3 1 4' ({error})"
            ) from None
    prompt = torch.tensor([ids], dtype=torch.long)
    generator = torch.Generator().manual_seed(args.seed)
    banned = PAD_ID if tokenizer is not None else None  # a tokenizer reserves id 0 for padding: never sample it
    if hasattr(model, "iw_bound"):  # the VMT: read the prompt with the posterior, write with transition and emission
        if args.top_k is not None or args.top_p is not None:
            raise ValueError("the VMT samples its emission at --temperature only (no --top-k / --top-p)")
        out = model.generate(prompt, args.max_new_tokens, generator, temperature=args.temperature)
    elif hasattr(model, "step"):  # a recurrent model: its own incremental generation, exactly its training recurrence
        if args.top_k is not None:
            raise ValueError(f"--top-k is not supported by {type(model).__name__}; use --top-p")
        out = model.generate(prompt, args.max_new_tokens, args.temperature, args.top_p or 1.0, generator,
                             banned_token_id=banned)  # fmt: skip
    else:
        limit = getattr(model.config, "max_position", None)
        out = generate_tokens(model, prompt, args.max_new_tokens, args.temperature, args.top_k, args.top_p, generator,
                              max_context=limit, banned_token_id=banned)  # fmt: skip
    new = out[0, len(ids) :].tolist()
    print(args.prompt + tokenizer.decode(new) if tokenizer is not None else " ".join(map(str, ids + new)))


def translate(args: argparse.Namespace, model, run_dir) -> None:
    """Translate --prompt, or each line of --input, printing one translation per line (batches of 32)."""
    from pathlib import Path

    import torch

    from markovformer.data.translation import collate_translation, decode_generated, load_translation_tokenizer

    if (args.prompt is None) == (args.input is None):
        raise ValueError("a translation run translates either --prompt SENTENCE or --input FILE (one per line)")
    if args.input is not None and not Path(args.input).is_file():
        raise ValueError(f"--input {args.input!r}: no such file")
    sentences = [args.prompt] if args.input is None else Path(args.input).read_text(encoding="utf-8").splitlines()
    if not sentences or any(not sentence.strip() for sentence in sentences):
        raise ValueError(f"{args.input or '--prompt'}: every source sentence must be non-empty")
    tokenizer = load_translation_tokenizer(Path(run_dir) / "tokenizer")
    max_length = min(args.max_new_tokens, model.config.max_positions)
    model.eval()
    for start in range(0, len(sentences), 32):
        chunk = sentences[start : start + 32]
        examples = [{"src_ids": torch.tensor(tokenizer.encode(s)), "tgt_ids": torch.tensor([], dtype=torch.long)}
                    for s in chunk]  # fmt: skip
        batch = collate_translation(examples)
        generated = model.generate(batch["src_ids"], batch["src_mask"], beam_size=args.beam_size,
                                   max_length=max_length, length_penalty=args.length_penalty)  # fmt: skip
        for line in decode_generated(tokenizer, generated.sequences):
            print(line, flush=True)


def run_inspect(args: argparse.Namespace) -> None:
    from markovformer.training.inspection import write_inspection_report

    path = write_inspection_report(args.target, layers=args.layers, out_dir=args.out)
    print(f"inspection report: {path}")


def run_data(args: argparse.Namespace) -> None:
    import dataclasses

    from markovformer.data.sources import DATA_SOURCES, SOURCE_TASKS
    from markovformer.training.run_config import suggest

    if args.data_command == "prepare":
        prepare_data(args)
        return
    if args.data_command == "list":
        for name, source in DATA_SOURCES.items():
            summary = " ".join((source.__doc__ or "").split()).split(": ")[0].split(". ")[0].rstrip(".")
            print(f"{name:14} {summary}\n{'':14} tasks: {', '.join(SOURCE_TASKS[name])}")
        return
    if args.name not in DATA_SOURCES:
        raise ValueError(
            f"no data source {args.name!r}{suggest(args.name, DATA_SOURCES)}; see `markovformer data list`"
        )
    source = DATA_SOURCES[args.name]
    print(f"{args.name}: {' '.join((source.__doc__ or '').split())}")
    print(f"tasks: {', '.join(SOURCE_TASKS[args.name])}\noptions (data.<option> in a run config):")
    for field in dataclasses.fields(source):
        print(f"  {field.name:18} default {field.default!r}")
    if hasattr(source, "chain"):
        chain = source().chain()
        print(f"default chain: order {chain.order}, {chain.num_symbols} symbols, true lags {chain.true_lags}, "
              f"entropy rate {chain.entropy_rate():.4f} nats/token")  # fmt: skip


def prepare_data(args: argparse.Namespace) -> None:
    import os
    from pathlib import Path

    from markovformer.data.recipes import DATA_RECIPES
    from markovformer.training.run_config import suggest

    if args.name == "list":
        for name, recipe in DATA_RECIPES.items():
            print(f"{name:10} {recipe.summary}  -> {recipe.file_name}")
        return
    if args.name not in DATA_RECIPES:
        raise ValueError(f"no data recipe {args.name!r}{suggest(args.name, DATA_RECIPES)}; known: "
                         f"{', '.join(DATA_RECIPES)}")  # fmt: skip
    recipe = DATA_RECIPES[args.name]
    out = Path(args.dir or os.environ.get("MARKOVFORMER_DATA") or "data") / recipe.file_name
    if out.exists() and not args.force:
        print(f"{out} is already there (--force rebuilds it)")
        return
    try:
        recipe.prepare(out)
    except RuntimeError as error:  # a missing tool or a failed download: the user's environment, not a bug
        raise ValueError(str(error)) from None
    print(f"wrote {out}\n{recipe.usage.format(path=out)}")


def run_experiment_command(args: argparse.Namespace) -> None:
    import time

    from markovformer.experiments import EXPERIMENTS, run_experiment
    from markovformer.training.run_config import parse_override

    if args.name == "list":
        for name, experiment in EXPERIMENTS.items():
            print(f"{name:16} {experiment.summary}")
        return
    out = args.out or f"runs/experiments/{args.name}"
    start = time.perf_counter()
    seeds = tuple(args.seeds) if args.seeds else None
    overrides = {}
    for text in args.overrides:
        path, value = parse_override(text)
        if len(path) != 1:
            raise ValueError(f"--set {text!r}: experiment settings are flat; use KEY=VALUE")
        overrides[path[0]] = value
    report = run_experiment(args.name, out, quick=args.quick, seeds=seeds, overrides=overrides,
                            log=lambda line: print(line, flush=True))  # fmt: skip
    print(f"report: {report}  ({time.perf_counter() - start:.0f} s)")


COMMANDS = {
    "train": run_train,
    "experiment": run_experiment_command,
    "eval": run_eval,
    "generate": run_generate,
    "inspect": run_inspect,
    "data": run_data,
    "bench": bench_command.run_bench,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "train" and not args.debug:
            quiet_frameworks()
        COMMANDS[args.command](args)
        return 0
    except (ValueError, FileNotFoundError) as error:
        if args.debug:
            raise
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"markovformer: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())

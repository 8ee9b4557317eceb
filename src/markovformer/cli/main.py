"""markovformer: train, evaluate, sample from and inspect Markov-structured sequence models.

First steps:
  markovformer train                  train the demo run (a small model on a synthetic Markov chain) into runs/demo
  markovformer inspect runs/demo      its figures and report (runs/demo/report/index.html)
  markovformer config list            the shipped example configs; `markovformer train NAME` trains one
  markovformer COMMAND --help         what a command does and its options

Errors are one line on stderr with exit status 2 (a training run that diverged exits 1); --debug, anywhere on the
line, prints the traceback instead, with the same exit status. A command stopped by Ctrl-C exits 130, by SIGTERM
143 (a training run's line names its last checkpoint: `train --resume` continues from it).
"""

from __future__ import annotations

import argparse
import codecs
import copy
import logging
import math
import re
import sys
import time
import traceback
import warnings
from pathlib import Path

from markovformer.advice import command_line, suggest
from markovformer.cli import bench as bench_command  # its parser imports no torch
from markovformer.cli import catalogue
from markovformer.cli import generate as generate_command
from markovformer.cli.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_STDOUT_CLOSED,
    error_message,
    exit_status,
    stdout_reader_left,
)
from markovformer.strict_json import strict_dumps
from markovformer.training.trainer_config import RunTerminated

# Each command imports the machinery it runs (Lightning, the training code) inside its own function ("deferred" below),
# so that --help and a mistyped option do not wait for it (the package loads its models on first use).


def quiet_frameworks() -> None:
    """Keep Lightning's banners and third-party deprecation chatter out of the progress output."""
    import lightning.pytorch  # noqa: F401 - it sets its loggers' levels on import, so import it before changing them

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for message in (".*LeafSpec.*is deprecated", ".*does not have many workers.*", ".*Checkpoint directory.*exists",
                    ".*GPU available but not used.*", ".*TensorBoard.*", ".*tensorboardX.*",
                    # under spawn: the training stream starts its workers once; a validation pass's are fresh
                    ".*Consider setting `persistent_workers=True`.*",
                    # under DDP: the validation metrics sync their sums across processes themselves (torchmetrics)
                    ".*sync_dist=True.*when logging on epoch level in distributed setting.*"):  # fmt: skip
        warnings.filterwarnings("ignore", message=message)


def streams_that_hold_any_text() -> None:
    """Point stdout and stderr at an encoding that holds what the commands print (generated text, the catalogues'
    Greek and dots). Under the C locale with UTF-8 mode turned off (``PYTHONUTF8=0``) Python opens them as ASCII and
    every non-ASCII character failed the command: they write UTF-8 there, as that mode would. Under another
    encoding (Latin-1), a character it lacks is written as a backslash escape rather than failing."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if encoding is None or not hasattr(stream, "reconfigure"):
            continue
        encoding = codecs.lookup(encoding).name
        if encoding.startswith("utf"):
            continue
        if encoding == "ascii":
            stream.reconfigure(encoding="utf-8", errors=stream.errors)  # the locale's surrogateescape kept
        else:
            stream.reconfigure(errors="backslashreplace")


class Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line, as the commands' own errors are: the subcommand's name, the
    problem, the closest command, choice or option when one is close, and where the help is. ``--debug`` may stand
    anywhere on the line, and an unknown option is named by the subcommand it was given to (argparse's top parser
    would report it with its own usage and options)."""

    def parse_args(self, args=None, namespace=None):
        argv = list(sys.argv[1:] if args is None else args)
        end = argv.index("--") if "--" in argv else len(argv)
        if "--debug" in argv[1:end]:  # `markovformer train x.yaml --debug` means what `markovformer --debug ...` does
            argv = ["--debug", *(word for word in argv[:end] if word != "--debug"), *argv[end:]]
        dashed = next((word for word in argv[:end] if word.startswith("-") and Path(word).exists()), None)
        if dashed is not None:  # argparse takes it for an option, and asks for a path it does not name
            self.error(f"{dashed} is a path that starts with '-', which reads as an option: give it as ./{dashed} "
                       f"(or after --)")  # fmt: skip
        parsed, extras = self.parse_known_args(argv, namespace)
        if extras:
            innermost_parser(self, parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}{self.suggestion(message)}; see `{self.prog} "
                                  f"--help`\n")  # fmt: skip

    def suggestion(self, message: str) -> str:
        """`` (did you mean 'x'?)`` for a mistyped choice or option named in argparse's ``message``, else ''."""
        choice = re.search(r"invalid choice: '([^']*)'", message)
        if choice:
            known = [str(name) for action in self._actions if action.choices for name in action.choices]
            typed = choice.group(1)
        elif message.startswith("unrecognized arguments: "):
            known = [option for action in self._actions for option in action.option_strings] + ["--debug"]
            typed = next((word.split("=")[0] for word in message.split()[2:] if word.startswith("-")), "")
            if typed == "--set" and any(action.metavar == "KEY=VALUE" and not action.option_strings
                                        for action in self._actions):  # fmt: skip
                return f" ({self.prog} takes its changes as KEY=VALUE words, without --set)"  # experiment's way
        else:
            return ""
        return suggest(typed, known) if typed else ""


def innermost_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the deepest subcommand ``args`` chose (``markovformer data show``'s for ``data show NAME``)."""
    while True:
        commands = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
        chosen = getattr(args, commands[0].dest, None) if commands else None
        if chosen is None:
            return parser
        parser = commands[0].choices[chosen]


class Once(argparse.Action):
    """An option that may be given once: argparse's last-one-wins would drop a repeated ``--prompt`` silently."""

    def __call__(self, parser, namespace, value, option_string=None):
        if getattr(namespace, self.dest) is not None:
            hint = "; several sentences: a file of them, one per line, with --input" if self.dest == "prompt" else ""
            raise argparse.ArgumentError(self, f"given twice ({getattr(namespace, self.dest)!r}, then {value!r}): "
                                         f"one per call{hint}")
        setattr(namespace, self.dest, value)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="markovformer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="on an error, print the traceback instead of the one line "
                        "(also accepted after the command)")  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser(
        "train", help="train a run from a YAML config (default: the embedded demo run)",
        description="Train a model from a run config (YAML: task, model, data and trainer sections). Everything the\n"
        "run writes goes into its output_dir (the final model/, checkpoints/, logs/, metrics.json); a folder that\n"
        "already holds a run is refused. Without a config: the demo run (an order-3 Markov chain, runs/demo).",
        epilog="examples:\n"
        "  markovformer train                                      the demo run\n"
        "  markovformer train trainer.max_steps=300                the demo run, shorter\n"
        "  markovformer train text_char data.path=my.txt           a shipped config on your own text\n"
        "  markovformer train my.yaml output_dir=runs/try2         your config into another folder\n"
        "  markovformer train --resume runs/demo trainer.max_steps=2400   continue a run, or extend it\n"
        "the keys: `markovformer config show NAME` (a commented config), `markovformer data show SOURCE` (data.*)",
        formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    train.add_argument("config", nargs="?", help="YAML run config: a file, or a shipped config's name (`markovformer "
                       "config list`; configs/NAME.yaml also names one); omitted: the demo run")  # fmt: skip
    train.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="changes to the config, dotted by section, "
                       "e.g. model.max_order=3 trainer.max_steps=2000 data.path=my.txt; VALUE is read as YAML "
                       "(3, 1e-3, true, null, '[1, 2]')")  # fmt: skip
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a killed run from its last checkpoint; "
                       "overrides may extend it (trainer.max_steps=N) or change how it is watched")  # fmt: skip

    evaluate = commands.add_parser("eval", help="metrics of a trained run on a split of its data",
                                   description="Score a trained run on a split of its data: the loss and the task's "
                                   "metrics (chain runs: beside the entropy rate; translation: BLEU).")  # fmt: skip
    evaluate.add_argument("target", help="run directory or checkpoint file")
    evaluate.add_argument("--split", default="val", choices=("train", "val", "test", "all"),
                          help="the split scored (all: the three together, as the run's recipe builds them on "
                               "the data; default: val)")  # fmt: skip
    evaluate.add_argument("--data", nargs="*", action="extend", default=[], metavar="KEY=VALUE",
                          help="change the run's data options, e.g. path=other.txt to score another file split by "
                          "the run's recipe (the options: `markovformer data show SOURCE`)")  # fmt: skip
    evaluate.add_argument("--json", action="store_true", help="print the metrics as JSON")
    evaluate.add_argument("--beam-size", type=int, default=1, help="translation: beam search width for BLEU "
                          "(default: 1, greedy)")  # fmt: skip
    evaluate.add_argument("--batch-size", type=int, help="examples scored per batch (default: the run's "
                          "trainer.eval_batch_size); the metrics do not depend on it, but for a VMT's Monte-Carlo "
                          "bounds, whose noise is drawn per batch: another size, another estimate")  # fmt: skip
    evaluate.add_argument("--iw-samples", type=int, metavar="K", help="VMT: K of the importance-weighted bound "
                          "(default: the run's task_options.iw_samples, 10; 0: none); it tightens toward the "
                          "log-likelihood as K grows, at K times the ELBO's cost")  # fmt: skip
    evaluate.add_argument("--predictions", "--translations", metavar="FILE", help="write what each scored example "
                          "was predicted as to FILE (tab-separated, a header line), in the split's order: "
                          "translation: source, reference, translation (BLEU on its columns is eval's); "
                          "sequence_classification: example, label, predicted, each class's probability; "
                          "token_classification: the same per labelled position; ctc: reference, hypothesis")

    generate = commands.add_parser("generate", help="sample from a language model, translate with a translation "
                                   "model (one sentence by --prompt, or one per line of --input), or transcribe "
                                   "recordings with a CTC model",
                                   description="Sample text from a language model run, translate with a "
                                   "translation run, or transcribe recordings with a CTC run.", epilog='examples:\n'
                                   '  markovformer generate runs/text_char --prompt "ROMEO:" --temperature 0.8 '
                                   '--top-k 20\n'
                                   '  markovformer generate runs/mat_de_en --input sources.txt --beam-size 4\n'
                                   '  markovformer generate runs/speech --input recordings.txt',
                                   formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    generate.add_argument("target", help="run directory or checkpoint file")
    generate.add_argument("--prompt", action=Once,
                          help="text (or space-separated token ids without tokenizer); an empty prompt "
                          "samples unconditionally (a VMT from its own P(x_1); a run with documents after an <eod>, "
                          "refused if it packed them: its model never learned how one starts; else after a line "
                          "break, else from a token drawn with --seed); for a translation run, the source "
                          "sentence")  # fmt: skip
    generate.add_argument("--skip-unknown", action="store_true", help="drop prompt characters outside a character "
                          "run's alphabet instead of refusing them")  # fmt: skip
    generate.add_argument("--through-eod", action="store_true", help="a run with documents, not packed: sample past "
                          "a document's end (each end printed as <eod>) instead of stopping there")
    generate.add_argument("--input", action=Once,
                          help="translation: a file of source sentences, one per line; CTC: a WAV file, "
                          "or a file of WAV paths, one per line (a manifest's transcripts ignored), each transcribed "
                          "greedily, one line each")  # fmt: skip
    generate.add_argument("--beam-size", type=int, default=1, help="translation: beam width, 1 = greedy (default: "
                          "%(default)s)")  # fmt: skip
    generate.add_argument("--length-penalty", type=float, default=1.0, help="translation with --beam-size > 1: beams "
                          "are ranked by score / length^this (default: %(default)s)")  # fmt: skip
    generate.add_argument("--max-new-tokens", type=int, default=argparse.SUPPRESS,
                          help="most tokens generated (default: 200); translation: the most of each translation "
                          "(default: 2 |source| + 10, as eval)")
    generate.add_argument("--temperature", type=float, default=1.0, help="language models: sampling temperature; "
                          "0 = greedy, the likeliest token each step (default: %(default)s)")  # fmt: skip
    generate.add_argument("--top-k", type=int, default=None, help="language models: sample among the k likeliest "
                          "tokens only (default: all)")  # fmt: skip
    generate.add_argument("--top-p", type=float, default=None, help="language models: nucleus sampling, among the "
                          "likeliest tokens whose probabilities sum to p (default: all)")  # fmt: skip
    generate.add_argument("--seed", type=int, default=0, help="random seed: the same seed gives the same sample "
                          "(default: %(default)s)")  # fmt: skip
    generate.add_argument("--compile-step", action="store_true", help="language models: run the one-token decoding "
                          "step through torch.compile: a compile of 10-30 s first, then about half the time per token "
                          "(long generations)")  # fmt: skip

    inspect = commands.add_parser("inspect", help="figures of a trained run: curves, strengths, gates, attention",
                                  description="Write a trained run's figures (PNG) and an HTML report of them "
                                  "(OUT/index.html): training curves, transition strengths, order gates, attention "
                                  "by lag and attention maps.")  # fmt: skip
    inspect.add_argument("target", help="run directory or checkpoint file")
    inspect.add_argument("--layers", type=int, nargs="*", action="extend", help="layers whose attention maps "
                         "and attention by lag to draw, counted from 0 (default: the first two layers that have "
                         "attention maps)")  # fmt: skip
    inspect.add_argument("--out", default=None, help="output folder (default RUN_DIR/report; for a checkpoint file "
                         "RUN_DIR/report-STEM)")  # fmt: skip

    experiment = commands.add_parser("experiment", help="run a named reproduction (`experiment list` names them)",
                                     description="Run a named experiment (many small trainings, called cells) and "
                                     "write its report.md and results.json into --out.",
                                     epilog="examples:\n"
                                     "  markovformer experiment list\n"
                                     "  markovformer experiment landscape --quick\n"
                                     "  markovformer experiment icl-depth --seeds 0 1 2 --set steps=500",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    experiment.add_argument("name", help="experiment name, or list")
    experiment.add_argument("--out", default=None, help="output folder (default runs/experiments/NAME, with "
                            "--quick NAME-quick); rerunning into it reuses the cells that finished")  # fmt: skip
    experiment.add_argument("--quick", action="store_true", help="a smaller version (fewer cells, seeds, steps)")
    experiment.add_argument("--seeds", type=int, nargs="+", action="extend",
                            help="seeds (default: the experiment's)")
    experiment.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE", dest="overrides",
                            help="change the experiment's settings, e.g. steps=500 'orders=[1, 2]' (an unknown key's "
                            "error lists the experiment's settings)")  # fmt: skip
    experiment.add_argument("--recompute", nargs="+", action="extend", default=[], metavar="PATTERN",
                            help="compute again the finished cells whose keys match these globs (as named in "
                            "OUT/cells, e.g. '*forgetting*'), e.g. cells trained before a fix")  # fmt: skip
    experiment.add_argument("--from-cells", action="store_true",
                            help="write the report from the cells already in --out, training nothing (mixers: each "
                            "grid point from the learning rates and seeds it has; others need every cell)")  # fmt: skip

    catalogue.add_parsers(commands)
    bench_command.add_parser(commands)
    return parser


def run_train(args: argparse.Namespace) -> None:
    from markovformer.allocator import keep_freed_memory  # deferred (see above)
    from markovformer.training.build import check_new_run
    from markovformer.training.config_files import locate_config
    from markovformer.training.demo import DEMO_CONFIG
    from markovformer.training.kind_switches import apply_switching_overrides
    from markovformer.training.run_config import load_yaml, resolve_run_config
    from markovformer.training.run_dir import config_to_resume

    keep_freed_memory()  # reuse freed memory: glibc would page-fault long-T activations in on every step
    overrides = list(args.overrides)
    if args.config and "=" in args.config:  # `markovformer train key=value ...` overrides the demo run
        overrides.insert(0, args.config)
        args.config = None
    if args.resume:
        if args.config:
            raise ValueError(f"--resume rebuilds the run from its own config.yaml; drop {args.config!r} (only "
                             f"key=value overrides such as trainer.max_steps=N may follow)")  # fmt: skip
        config_to_resume(args.resume, overrides)  # as resume does again: a folder holding no run, said sooner
    else:
        values = load_yaml(locate_config(args.config)) if args.config else copy.deepcopy(DEMO_CONFIG)
        values, notes = apply_switching_overrides(values, overrides)
        config = resolve_run_config(values)  # a bad value's error is then the one line printed
        for note in notes:
            print(note, flush=True)
        check_new_run(config)  # as train does again: a refusal need not wait for the runner's import
    # the run config checked first: Lightning brings torchmetrics, transformers and scipy (5 s of a 2-core CPU's 8 s),
    # which a missing config file or a mistyped key of any section need not wait for
    if not args.debug:
        quiet_frameworks()
    from markovformer.training.runner import resume, train

    if args.resume:
        resume(args.resume, overrides)
    else:
        train(config)


def run_eval(args: argparse.Namespace) -> None:
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size} must be >= 1")
    if args.iw_samples is not None and args.iw_samples < 0:
        raise ValueError(f"--iw-samples {args.iw_samples} must be >= 0")
    from markovformer.models.generation import MAX_BEAMS  # deferred (see above)
    from markovformer.training.evaluation import evaluate  # scoring only: the runner's Lightning is not needed
    from markovformer.training.run_config import check_each_key_once, parse_override
    from markovformer.training.run_dir import weights_described

    check_each_key_once(args.data)
    data = {}
    for text in args.data:
        path, value = parse_override(text)
        data[".".join(path)] = value
    if not 1 <= args.beam_size <= MAX_BEAMS:
        raise ValueError(f"--beam-size {args.beam_size} must lie in [1, {MAX_BEAMS}]")
    options = {} if args.iw_samples is None else {"iw_samples": args.iw_samples}
    results = evaluate(args.target, args.split, data, beam_size=args.beam_size, predictions=args.predictions,
                       batch_size=args.batch_size, task_options=options)  # fmt: skip
    if args.json:
        print(strict_dumps(results, indent=2))  # NaN is not JSON
        return
    shown = "  ".join(f"{k} {v:.4f}" for k, v in results["metrics"].items())
    scored = weights_described(results["weights"])
    print(f"{results['run_dir']} [{results['split']}, {results['examples']} examples] ({scored}): {shown}")
    if "started_from" in results:  # a fine-tuning run: the weights it started from, as inspect's summary says
        from markovformer.training.init_from import started_from_line  # deferred (see above)

        print(f"  started from {started_from_line(results['started_from'])}")
    if "unscored_tail_tokens" in results:
        from markovformer.training.run_report import unscored_tail  # deferred (see above)

        print(f"  {unscored_tail(results['unscored_tail_tokens'], results['split'])}")
    if "per_class" in results:
        print_per_class(results["per_class"], auroc="auroc" in results["metrics"])
    if args.predictions:
        print(f"  predictions: {args.predictions}")
    if "entropy_rate" in results and "loss" in results["metrics"]:
        from markovformer.training.run_report import entropy_rate_gap  # deferred (see above)

        gap = entropy_rate_gap(results["metrics"]["loss"], results["entropy_rate"], results["continuous_source"])
        truth = f"; the true chain scores {results['true_chain_loss']:.4f}" if "true_chain_loss" in results else ""
        print(f"  vs entropy rate {results['entropy_rate']:.4f}: {gap}{truth}")
    if "bayes_loss" in results and "loss" in results["metrics"]:
        from markovformer.training.run_report import bayes_gap  # deferred (see above)

        print(f"  {bayes_gap(results['metrics']['loss'], results['bayes_loss'])}")
    if "chance_accuracy" in results and "accuracy" in results["metrics"]:
        from markovformer.training.run_report import chance_gap  # deferred (see above)

        print(f"  {chance_gap(results['metrics']['accuracy'], results['chance_accuracy'])}")
    if "exact_log_likelihood_per_token" in results and "elbo" in results["metrics"]:
        from markovformer.training.run_report import exact_likelihood_gap  # deferred (see above)

        split = {"val": "validation"}.get(results["split"], results["split"])
        exact = results["exact_log_likelihood_per_token"]
        print(f"  {exact_likelihood_gap(results['metrics'], exact, split, results.get('iw_samples'))}")


def print_per_class(per_class: dict[str, dict], auroc: bool = False) -> None:
    """A classifier's numbers per class, one line each (a ratio with nothing to divide: -), then what always guessing
    the most frequent label would score: accuracy, macro F1 and, where the task reports one (``auroc``; token
    classification does not), AUROC (0.5 once two classes occur; with one there is none to score)."""
    width = max(len("class"), *(len(name) for name in per_class))
    columns = {"precision": 9, "recall": 6, "f1": 6}
    print(f"  {'class':<{width}}  " + "  ".join(key.rjust(size) for key, size in columns.items()) + "  support")
    for name, row in per_class.items():
        ratios = ["-".rjust(size) if math.isnan(row[key]) else f"{row[key]:{size}.4f}" for key, size in columns.items()]
        print(f"  {name:<{width}}  " + "  ".join(ratios) + f"  {row['support']:7d}")
    supports = {name: row["support"] for name, row in per_class.items()}
    total, (most, count) = sum(supports.values()), max(supports.items(), key=lambda item: item[1])
    if total:  # the bar to clear: an accuracy of 0.52 is nothing when 52 % of the split is one class
        share, present = count / total, sum(1 for support in supports.values() if support)
        print(f"  always {most!r} (the split's most frequent label) would score accuracy {share:.4f}, macro_f1 "
              f"{2 * share / (1 + share) / present:.4f}" + (", auroc 0.5" if auroc and present > 1 else ""))


def run_inspect(args: argparse.Namespace) -> None:
    from markovformer.training.inspection import write_inspection_report  # deferred (see above)

    path = write_inspection_report(args.target, layers=args.layers, out_dir=args.out)
    print(f"inspection report: {path}")


def run_experiment_command(args: argparse.Namespace) -> None:
    from markovformer.experiments import EXPERIMENTS, find_experiment, run_experiment  # deferred (see above)

    if args.name == "list":
        for name, experiment in EXPERIMENTS.items():
            print(f"{name:16} {experiment.summary}")
        return
    find_experiment(args.name)  # a mistyped name is refused before the experiments' machinery is imported
    from markovformer.training.run_config import check_each_key_once, parse_override

    out = args.out or f"runs/experiments/{args.name}{'-quick' if args.quick else ''}"
    start = time.perf_counter()
    seeds = tuple(args.seeds) if args.seeds else None
    overrides = {}
    for text in args.overrides:
        path, value = parse_override(text)
        if len(path) != 1:
            raise ValueError(f"--set {text!r}: experiment settings are flat; use KEY=VALUE")
        overrides[path[0]] = value
    check_each_key_once(args.overrides)
    try:
        report = run_experiment(args.name, out, quick=args.quick, seeds=seeds, overrides=overrides,
                                recompute=args.recompute, from_cells=args.from_cells,
                                log=lambda line: print(line, flush=True),
                                on_open=None if args.debug else quiet_frameworks)  # fmt: skip
    except RunTerminated as stop:  # inside a cell's training run: its line names the run; the experiment goes on too
        raise RunTerminated(f"{stop}; or rerun this experiment, which keeps its finished cells and resumes this "
                            f"one", stop.exit_status - 128, stop.shown) from None  # fmt: skip
    print(f"report: {report}  ({time.perf_counter() - start:.0f} s)")


COMMANDS = {
    "train": run_train,
    "experiment": run_experiment_command,
    "eval": run_eval,
    "generate": generate_command.run_generate,
    "inspect": run_inspect,
    "data": catalogue.run_data,
    "kind": catalogue.run_kind,
    "config": catalogue.run_config_command,
    "bench": bench_command.run_bench,
}


def main(argv: list[str] | None = None) -> int:
    streams_that_hold_any_text()  # before anything is printed: --help's text, an error line
    args = build_parser().parse_args(argv)
    try:
        with command_line():  # a refusal's advice names this command line's flags, not the Python calls
            COMMANDS[args.command](args)
        return 0
    except BrokenPipeError:
        if stdout_reader_left():  # `markovformer ... | head`: stop quietly, as a process SIGPIPE ends
            return EXIT_STDOUT_CLOSED
        raise
    except KeyboardInterrupt:  # Ctrl-C outside a training run (which ends with RunTerminated and its own line)
        if args.debug:
            traceback.print_exc()
        else:
            print(f"markovformer: {args.command} was interrupted (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (Exception, RunTerminated) as error:
        status = exit_status(error)
        if status is None:  # a bug: the interpreter's traceback and exit status 1
            raise
        if args.debug:
            traceback.print_exc()
        elif getattr(error, "shown", True):  # a stopped run's other processes: its writer prints the line
            print(f"markovformer: error: {error_message(error)}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())

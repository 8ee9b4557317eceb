"""The ``markovformer`` command. Thin: parse, validate, call the library; errors are one line and exit status 2."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import warnings

from markovformer.training.chain_lm import ChainLMJob


def _add_job_arguments(parser: argparse.ArgumentParser, job_class: type) -> None:
    for field in dataclasses.fields(job_class):
        default = field.default
        flag = "--" + field.name.replace("_", "-")
        if isinstance(default, tuple):
            parser.add_argument(flag, type=int, nargs="+", default=list(default), help=f"default {default}")
        else:
            parser.add_argument(flag, type=type(default), default=default, help=f"default {default!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="markovformer", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser(
        "train", help="train a Markovian Transformer LM on a synthetic Markov chain (the demo's defaults)"
    )
    _add_job_arguments(train, ChainLMJob)
    return parser


def quiet_frameworks() -> None:
    """Keep Lightning's banners and third-party deprecation chatter out of the progress output."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*is deprecated")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.debug:
        quiet_frameworks()
    try:
        if args.command == "train":
            values = {f.name: getattr(args, f.name) for f in dataclasses.fields(ChainLMJob)}
            values["lags"] = tuple(values["lags"])
            from markovformer.training.chain_lm import run_chain_lm

            run_chain_lm(ChainLMJob(**values))
        return 0
    except (ValueError, FileNotFoundError) as error:
        if args.debug:
            raise
        print(f"markovformer: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

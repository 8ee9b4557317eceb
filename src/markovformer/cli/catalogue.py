"""``markovformer data`` and ``markovformer config``: what the package ships and how to use it (the data sources,
the data sets to fetch, the example run configs), listed, shown, prepared or copied. Imports of the library are
deferred into each command, as in ``cli.main``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shutil
import signal
import textwrap
from pathlib import Path

from markovformer.training.trainer_config import RunTerminated


def add_parsers(commands) -> None:
    """Add the ``data`` and ``config`` subcommands to an ``add_subparsers()`` object."""
    data = commands.add_parser("data", help="the data sources and their options; public data sets to fetch")
    data_commands = data.add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    data_commands.add_parser("list", help="list the data sources (data.source in a run config)")
    show = data_commands.add_parser("show", help="a data source's options and defaults")
    show.add_argument("name", help="a data source (`markovformer data list` names them)")
    prepare = data_commands.add_parser("prepare", help="fetch and convert a public data set into the data directory")
    prepare.add_argument("name", help="data set to fetch, or list to name them")
    prepare.add_argument("--dir", default=None, help="data directory (default $MARKOVFORMER_DATA or ./data)")
    prepare.add_argument("--force", action="store_true", help="rebuild even when the file is already there")
    config = commands.add_parser("config", help="the example run configs shipped with the package")
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    config_commands.add_parser("list", help="name and summary of each shipped config")
    config_show = config_commands.add_parser("show", help="print a shipped config, with its comments")
    config_show.add_argument("name", help="a shipped config (`markovformer config list` names them)")
    config_copy = config_commands.add_parser("copy", help="copy a shipped config to edit it")
    config_copy.add_argument("name", help="a shipped config (`markovformer config list` names them)")
    config_copy.add_argument("dest", nargs="?", default=None, help="file or folder (default ./NAME.yaml)")
    config_copy.add_argument("--force", action="store_true", help="overwrite an existing file")


def plain_text(docstring: str | None) -> str:
    """A docstring as one line of plain text: whitespace collapsed, reStructuredText's ``code`` marks made single
    backticks, as the command line's own messages mark names (`order` is then an option, not a word)."""
    return " ".join((docstring or "").replace("``", "`").split())


def wrapped(text: str, indent: int, first: str = "") -> str:
    """``first`` + ``text`` wrapped to the terminal's width, continuation lines indented by ``indent``."""

    width = max(shutil.get_terminal_size((100, 24)).columns, 60)
    return textwrap.fill(text, width, initial_indent=first.ljust(indent), subsequent_indent=" " * indent)


def run_data(args: argparse.Namespace) -> None:
    from markovformer.data.options import option_help  # deferred: see the module docstring
    from markovformer.data.sources import DATA_SOURCES, SOURCE_TASKS
    from markovformer.training.run_config import suggest

    if args.data_command == "prepare":
        prepare_data(args)
        return
    if args.data_command == "list":
        column = max(map(len, DATA_SOURCES)) + 2
        for name, source in DATA_SOURCES.items():
            summary = plain_text(source.__doc__).split(". ")[0].rstrip(".")  # the first sentence, whole
            print(wrapped(summary, column, name))
            print(wrapped(f"tasks: {', '.join(SOURCE_TASKS[name])}", column))
        print("\nmarkovformer data show NAME: a source's options; markovformer data prepare list: data sets to fetch")
        return
    if args.name not in DATA_SOURCES:
        raise ValueError(
            f"no data source {args.name!r}{suggest(args.name, DATA_SOURCES)}; see `markovformer data list`"
        )
    source = DATA_SOURCES[args.name]
    print(wrapped(plain_text(source.__doc__), 2, f"{args.name}: "))
    print(f"tasks: {', '.join(SOURCE_TASKS[args.name])}\noptions (data.<option> in a run config):")
    fields = dataclasses.fields(source)
    name_width = max(len(field.name) for field in fields) + 2
    instance = source() if hasattr(source, "chain") else None  # a chain source's defaults depend on its kind
    for field in fields:
        if instance is not None:
            default = instance.__dict__[field.name]
        elif field.default is not dataclasses.MISSING:
            default = field.default
        else:
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else None
        print(wrapped(f"{option_help(args.name, field.name)} (default {as_yaml(default)})", name_width + 2,
                      f"  {field.name}"))  # fmt: skip
    if hasattr(source, "chain"):
        from markovformer.training.lag_report import describe_chain  # deferred: see the module docstring

        chain = source().chain()
        print(wrapped(f"order {chain.order}, {chain.num_symbols} symbols, entropy rate {chain.entropy_rate():.4f} "
                      f"nats/token; the data's lags {', '.join(map(str, chain.true_lags))} (steps back from the "
                      f"predicted symbol), i.e. {describe_chain(chain.true_lags)}", 2, "default chain: "))  # fmt: skip


def as_yaml(value) -> str:
    """An option's default as it is written in a run config: null, true, [1, 2, 3], 'text', 0.5."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return f"[{', '.join(map(as_yaml, value))}]"
    return repr(value)


def prepare_data(args: argparse.Namespace) -> None:
    from markovformer.data.recipes.locations import data_directory  # deferred: see the module docstring
    from markovformer.data.recipes.registry import DATA_RECIPES
    from markovformer.training.run_config import suggest

    if args.name == "list":
        for name, recipe in DATA_RECIPES.items():
            print(f"{name:20} {recipe.summary}  -> {recipe.file_name}")
        return
    if args.name not in DATA_RECIPES:
        raise ValueError(f"no data recipe {args.name!r}{suggest(args.name, DATA_RECIPES)}; known: "
                         f"{', '.join(DATA_RECIPES)}")  # fmt: skip
    recipe = DATA_RECIPES[args.name]
    out = (Path(args.dir) if args.dir else data_directory()) / recipe.file_name
    if out.exists() and not args.force:
        print(f"{out} is already there (--force rebuilds it)")
        return
    try:
        with stopped_by_signals(f"data prepare {args.name} was stopped before it wrote {out} (nothing is left "
                                f"behind); run it again"):  # fmt: skip
            recipe.prepare(out)
    except RuntimeError as error:  # a missing tool or a failed download: the user's environment, not a bug
        if isinstance(error, RunTerminated):
            raise
        raise ValueError(str(error)) from None
    print(f"wrote {out}\n{recipe.usage.format(path=out)}")


@contextlib.contextmanager
def stopped_by_signals(message: str):
    """Within it, SIGTERM and SIGINT raise ``RunTerminated(message)`` where they land, so that the command's
    ``with`` blocks and ``finally`` clauses run (temporary folders removed, atomic writes abandoned), which SIGTERM's
    default action skipped; the command exits 143 or 130 with the one line. Handlers are restored after."""

    def stop(number, frame):
        for ignored in previous:  # a second signal must not cut the cleanup short
            signal.signal(ignored, signal.SIG_IGN)
        raise RunTerminated(f"{message} ({signal.Signals(number).name})", number)

    previous: dict = {}
    for number in (signal.SIGTERM, signal.SIGINT):
        previous[number] = signal.signal(number, stop)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def run_config_command(args: argparse.Namespace) -> None:
    from markovformer.atomic import atomic_write_text
    from markovformer.training.config_files import (  # deferred: module docstring
        config_summary,
        copy_destination,
        shipped_config,
        shipped_configs,
    )

    if args.config_command == "list":
        configs = shipped_configs()
        column = max(map(len, configs)) + 2
        for name, path in configs.items():
            print(wrapped(config_summary(path), column, name))
        print("\nmarkovformer config show NAME: print one; markovformer config copy NAME [DEST]: copy it to edit; "
              "markovformer train NAME (or configs/NAME.yaml) trains it")  # fmt: skip
        return
    source = shipped_config(args.name)
    if args.config_command == "show":
        print(source.read_text(), end="")
        return
    dest = copy_destination(args.dest, source.name)  # DEST/ is a folder; a missing folder is refused, never made
    if dest.exists() and not args.force:
        raise ValueError(f"{dest} already exists; choose another DEST or add --force to overwrite it")
    atomic_write_text(dest, source.read_text())  # a full disk leaves no config cut short (it would parse)
    print(f"wrote {dest}; edit it, then: markovformer train {dest}")

"""``markovformer data``, ``markovformer kind`` and ``markovformer config``: what the package ships and how to use it
(the data sources, the data sets to fetch, the attention kinds, the example run configs), listed, shown, prepared or
copied. Imports of the library are deferred into each command, as in ``cli.main``."""

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
    """Add the ``data``, ``kind`` and ``config`` subcommands to an ``add_subparsers()`` object."""
    data = commands.add_parser("data", help="the data sources and their options; public data sets to fetch")
    data_commands = data.add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    data_commands.add_parser("list", help="list the data sources (data.source in a run config)")
    show = data_commands.add_parser("show", help="a data source's options and defaults")
    show.add_argument("name", help="a data source (`markovformer data list` names them)")
    prepare = data_commands.add_parser("prepare", help="fetch and convert a public data set into the data directory")
    prepare.add_argument("name", help="data set to fetch, or list to name them")
    prepare.add_argument("--dir", default=None, help="data directory (default $MARKOVFORMER_DATA or ./data)")
    prepare.add_argument("--force", action="store_true", help="rebuild even when the file is already there")
    kind = commands.add_parser("kind", help="the attention kinds (model.attention) and their options")
    kind_commands = kind.add_subparsers(dest="kind_command", required=True, metavar="COMMAND")
    kind_commands.add_parser("list", help="each attention kind, whether it decodes incrementally, is causal only "
                             "or has a window")  # fmt: skip
    kind_show = kind_commands.add_parser("show", help="an attention kind's options, defaults and how to set them")
    kind_show.add_argument("name", help="an attention kind (`markovformer kind list` names them)")
    config = commands.add_parser("config", help="the example run configs shipped with the package")
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    config_commands.add_parser("list", help="name and summary of each shipped config")
    config_show = config_commands.add_parser("show", help="print a shipped config, with its comments")
    config_show.add_argument("name", help="a shipped config (`markovformer config list` names them)")
    config_copy = config_commands.add_parser("copy", help="copy a shipped config to edit it")
    config_copy.add_argument("name", help="a shipped config (`markovformer config list` names them)")
    config_copy.add_argument("dest", nargs="?", default=None, help="file or folder (default ./NAME.yaml)")
    config_copy.add_argument("--force", action="store_true", help="overwrite an existing file")


NARROWEST_COLUMN = 24  # characters a line of text beside a name column needs (a narrow terminal's: below the name)
NARROWER_INDENT = 4


def plain_text(docstring: str | None) -> str:
    """A docstring as one line of plain text: whitespace collapsed, reStructuredText's ``code`` marks made single
    backticks, as the command line's own messages mark names (`order` is then an option, not a word)."""
    return " ".join((docstring or "").replace("``", "`").split())


def wrapped(text: str, indent: int, first: str = "") -> str:
    """``first`` + ``text`` wrapped to the terminal's width (``COLUMNS``), continuation lines indented by ``indent``;
    where that column would be narrower than ``NARROWEST_COLUMN``, the text starts below ``first``, indented less."""
    width = shutil.get_terminal_size((100, 24)).columns
    whole_words = {"break_long_words": False, "break_on_hyphens": False}  # a path or a `name` is never cut
    if width - indent >= NARROWEST_COLUMN:
        return textwrap.fill(text, width, initial_indent=first.ljust(indent), subsequent_indent=" " * indent,
                             **whole_words)  # fmt: skip
    indent = min(indent, NARROWER_INDENT)
    below = textwrap.fill(text, max(width, indent + NARROWEST_COLUMN), initial_indent=" " * indent,
                          subsequent_indent=" " * indent, **whole_words)  # fmt: skip
    return f"{first.rstrip()}\n{below}" if first.strip() else below


def run_data(args: argparse.Namespace) -> None:
    from markovformer.advice import suggest
    from markovformer.data.options import option_help  # deferred: see the module docstring
    from markovformer.data.sources import DATA_SOURCES, source_tasks

    if args.data_command == "prepare":
        prepare_data(args)
        return
    if args.data_command == "list":
        column = max(map(len, DATA_SOURCES)) + 2
        for name, source in DATA_SOURCES.items():
            summary = plain_text(source.__doc__).split(". ")[0].rstrip(".")  # the first sentence, whole
            print(wrapped(summary, column, name))
            print(wrapped(f"tasks: {', '.join(source_tasks(name))}", column))
        print("\n" + wrapped("markovformer data show NAME: a source's options; markovformer data prepare list: "
                            "data sets to fetch", 0))  # fmt: skip
        return
    if args.name not in DATA_SOURCES:
        raise ValueError(
            f"no data source {args.name!r}{suggest(args.name, DATA_SOURCES)}; see `markovformer data list`"
        )
    source = DATA_SOURCES[args.name]
    print(wrapped(plain_text(source.__doc__), 2, f"{args.name}: "))
    print(wrapped(f"tasks: {', '.join(source_tasks(args.name))}", 0))
    print(wrapped("options (data.<option> in a run config):", 0))
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


KIND_MARKS = {"either": "either", "causal only": "only", "non-causal only": "never"}  # kind list's causal column


def kind_window(options: type) -> str:
    """Whether a kind attends within a window: "local" (by default), "optional" (global unless ``scope: local``),
    or "none" (it has no ``scope``)."""
    scopes = [field.default for field in dataclasses.fields(options) if field.name == "scope"]
    return "none" if not scopes else "local" if scopes[0] == "local" else "optional"


def run_kind(args: argparse.Namespace) -> None:
    from markovformer.advice import suggest
    from markovformer.layers.registry import ATTENTION_KINDS, decodes_incrementally  # deferred: module docstring

    if args.kind_command == "list":
        name_width = max(map(len, ATTENTION_KINDS)) + 2
        columns = f"{'kind':{name_width}}{'decodes':9}{'causal':8}{'window':10}"
        print(f"{columns}summary")
        for name, kind in ATTENTION_KINDS.items():
            marks = (f"{name:{name_width}}{'yes' if decodes_incrementally(name) else 'no':9}"
                     f"{KIND_MARKS[kind.causality]:8}{kind_window(kind.options):10}")  # fmt: skip
            print(wrapped(kind.summary, len(columns), marks))
        print("\n" + wrapped("decodes: generate feeds one token per step from the layer's state (no: it re-runs the "
                            "prefix). causal: only = the kind refuses causal=False, never = it refuses causal=True. "
                            "window: local = keys t-window..t by default (scope: global sees every key), optional = "
                            "every key unless scope: local.", 0))  # fmt: skip
        print(wrapped("markovformer kind show NAME: a kind's options and how to set them in a run config", 0))
        return
    if args.name not in ATTENTION_KINDS:
        raise ValueError(f"no attention kind {args.name!r}{suggest(args.name, ATTENTION_KINDS)}; see `markovformer "
                         f"kind list`")  # fmt: skip
    show_kind(args.name)


def show_kind(name: str) -> None:
    """``markovformer kind show NAME``: the kind's summary and marks, then each option with its help, default and
    where a run config sets it."""
    from markovformer.layers.options import option_help  # deferred: see the module docstring
    from markovformer.layers.registry import ATTENTION_KINDS, decodes_incrementally
    from markovformer.models.markovian_transformer.config import ATTENTION_OPTION_FIELDS, MODEL_WIDE_OPTIONS

    kind = ATTENTION_KINDS[name]
    print(wrapped(kind.summary, 2, f"{name}: "))
    decodes = ("decodes incrementally" if decodes_incrementally(name) else "no incremental decoding" +
               (" (non-causal)" if kind.causality == "non-causal only" else ": generate re-runs the prefix"))
    causal = {"either": "causal or not (model.causal)", "causal only": "causal only (refuses causal=False)",
              "non-causal only": "non-causal only (refuses causal=True)"}[kind.causality]  # fmt: skip
    window = {"local": "a window by default (scope: local; scope: global sees every key)",
              "optional": "every key by default (scope: global); scope: local with a window",
              "none": "no window"}[kind_window(kind.options)]  # fmt: skip
    print(wrapped(f"{decodes}; {causal}; {window}", 2))
    fields = dataclasses.fields(kind.options)
    if not fields:
        print(wrapped("options: none of its own (model.attention: NAME; the model's d_model and causal shape it)", 0))
        return
    print(wrapped("options (model.<option> in a run config: flat, for every layer; or per layer, in the layer's "
                  "entry):", 0))  # fmt: skip
    name_width = max(len(field.name) for field in fields) + 2
    for field in fields:
        where = "flat or per layer" if field.name in ATTENTION_OPTION_FIELDS else "per layer only"
        if field.name in MODEL_WIDE_OPTIONS:
            where += f"; flat model.{field.name} also sets the rest of the model's"
        print(wrapped(f"{option_help(kind.options, field.name)} (default {as_yaml(field.default)}; {where})",
                      name_width + 2, f"  {field.name}"))  # fmt: skip
    flat = next((field for field in fields if field.name in ATTENTION_OPTION_FIELDS), None)
    own = next((field for field in fields if field.name not in ATTENTION_OPTION_FIELDS), fields[0])
    print(wrapped("in a run config's model section (defaults as values):", 0))
    if flat is not None:
        print(f"  attention: {name}\n  {flat.name}: {example_value(flat.default)}   # flat: every layer")
    print(f"  attention: [{{kind: {name}, {own.name}: {example_value(own.default)}}}, ...]   # per layer: one entry "
          f"per layer")  # fmt: skip


def example_value(default) -> str:
    """A default as a run config writes it, or ``<value>`` for one that must be given (None)."""
    return "<value>" if default is None else as_yaml(default)


def prepare_data(args: argparse.Namespace) -> None:
    from markovformer.advice import suggest
    from markovformer.data.recipes.locations import data_directory  # deferred: see the module docstring
    from markovformer.data.recipes.registry import DATA_RECIPES

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
        print("\n" + wrapped("markovformer config show NAME: print one; markovformer config copy NAME [DEST]: copy "
                            "it to edit; markovformer train NAME (or configs/NAME.yaml) trains it", 0))  # fmt: skip
        return
    source = shipped_config(args.name)
    if args.config_command == "show":
        print(source.read_text(encoding="utf-8"), end="")
        return
    dest = copy_destination(args.dest, source.name)  # DEST/ is a folder; a missing folder is refused, never made
    if dest.exists() and not args.force:
        raise ValueError(f"{dest} already exists; choose another DEST or add --force to overwrite it")
    atomic_write_text(dest, source.read_text(encoding="utf-8"))  # a full disk leaves no config cut short
    print(f"wrote {dest}; edit it, then: markovformer train {dest}")

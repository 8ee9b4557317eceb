"""What the registry declares about each attention kind, held to the kinds themselves: every option has its help
line (`markovformer kind show`)."""

from __future__ import annotations

import dataclasses

import pytest

from markovformer.layers.options import interval, option, option_help
from markovformer.layers.registry import ATTENTION_KINDS


def test_every_option_of_every_kind_has_one_help_line():
    for kind, entry in ATTENTION_KINDS.items():
        for field in dataclasses.fields(entry.options):
            text = option_help(entry.options, field.name)
            assert len(text) > 10 and "\n" not in text and "``" not in text, (kind, field.name, text)


def test_an_undescribed_option_is_named_with_where_to_describe_it():
    @dataclasses.dataclass(frozen=True)
    class NewOptions:
        described: int = option(1, interval(1), help="an option a contributor described")
        width: int = option(2, interval(1))

    assert option_help(NewOptions, "described") == "an option a contributor described"
    with pytest.raises(KeyError, match=r"option 'width' of NewOptions has no help line: declare it as "
                                       r"option\(default, rule, help=\.\.\.\) in " + __name__):  # fmt: skip
        option_help(NewOptions, "width")


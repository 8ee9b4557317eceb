"""The two tables a data source is registered in (``data/sources.py``): ``DATA_SOURCES`` (its dataclass) and
``SOURCE_TASKS`` (the tasks it feeds) name the same sources, and a source added to the first alone is named, with
where its tasks go, by ``train`` and by ``data list`` / ``data show`` (each stopped on a bare ``KeyError: 'NAME'``)."""

from __future__ import annotations

import pytest

from markovformer.cli.main import main
from markovformer.data import sources
from markovformer.data.synthetic.markov_sources import MarkovChainSource
from markovformer.training.build import build_data
from markovformer.training.run_config import resolve_run_config
from markovformer.training.tasks import TASKS

UNLISTED = r"data source 'toy' is in DATA_SOURCES but not in SOURCE_TASKS: add 'toy': \(TASK, \.\.\.\), the tasks"


def test_every_registered_source_feeds_tasks_that_exist():
    assert set(sources.DATA_SOURCES) == set(sources.SOURCE_TASKS)
    for name, tasks in sources.SOURCE_TASKS.items():
        assert tasks and set(tasks) <= set(TASKS), (name, tasks)


def test_a_source_without_its_tasks_is_named_with_where_to_add_them(monkeypatch, capsys):
    class ToySource(MarkovChainSource):
        """A contributor's new source, registered in DATA_SOURCES only."""

    monkeypatch.setitem(sources.DATA_SOURCES, "toy", ToySource)
    config = resolve_run_config({"task": "causal_lm", "data": {"source": "toy", "seq_len": 8},
                                 "trainer": {"max_steps": 2}})  # fmt: skip
    with pytest.raises(LookupError, match=UNLISTED) as error:
        build_data(config)
    assert "markovformer/data/sources.py" in str(error.value)
    for command in (["data", "list"], ["data", "show", "toy"]):
        with pytest.raises(LookupError, match=UNLISTED):
            main(command)

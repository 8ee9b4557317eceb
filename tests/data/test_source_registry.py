"""A data source declares the tasks it feeds on its class (``feeds``, read through ``sources.source_tasks``), beside
its options: one place to register it, ``DATA_SOURCES``. A class that declares none is named, with where its tasks
go, by ``train`` and by ``data list`` / ``data show`` (each stopped on a bare ``KeyError: 'NAME'`` when the tasks
were a second table)."""

from __future__ import annotations

import dataclasses

import pytest

from markovformer.cli.main import main
from markovformer.data import sources
from markovformer.data.synthetic.markov_sources import MarkovChainSource
from markovformer.training.build import build_data
from markovformer.training.run_config import resolve_run_config
from markovformer.training.tasks import TASKS

UNDECLARED = r"data source 'toy' \(ToySource\) declares no tasks: give the class `feeds: ClassVar\[tuple\[str, "


def test_every_registered_source_feeds_tasks_that_exist():
    for name in sources.DATA_SOURCES:
        tasks = sources.source_tasks(name)
        assert tasks and set(tasks) <= set(TASKS), (name, tasks)


@dataclasses.dataclass
class ToySource:
    """A contributor's new source, its tasks not declared."""

    seq_len: int = 8

    def build(self, seed: int):
        return MarkovChainSource(seq_len=self.seq_len).build(seed)


def test_a_source_without_its_tasks_is_named_with_where_to_declare_them(monkeypatch):
    monkeypatch.setitem(sources.DATA_SOURCES, "toy", ToySource)
    config = resolve_run_config({"task": "causal_lm", "data": {"source": "toy", "seq_len": 8},
                                 "trainer": {"max_steps": 2}})  # fmt: skip
    with pytest.raises(LookupError, match=UNDECLARED) as error:
        build_data(config)
    assert "markovformer/data/synthetic/markov_sources.py" in str(error.value)  # the example to copy
    for command in (["data", "list"], ["data", "show", "toy"]):
        with pytest.raises(LookupError, match=UNDECLARED):
            main(command)
    monkeypatch.setattr(ToySource, "feeds", ("causal_lm",), raising=False)  # declared: built and listed
    assert len(build_data(config).train) > 0


@pytest.mark.parametrize(("name", "loader", "files"), [
    ("fasta", "load_fasta_classification", {"path": "a.fa", "labels": "labels.tsv"}),
    ("bed", "load_bed_classification", {"path": "a.bed", "reference": "genome.fa"}),
])  # fmt: skip
def test_a_file_source_split_at_random_is_split_by_the_run_seed(tmp_path, monkeypatch, name, loader, files):
    """The seed a source's build is given is the one its loader splits with (a loader given 0 would split the data
    alike for every run seed); test_fasta.py checks that the seed moves the split (the BED loader's is the FASTA
    loader's)."""
    seen = []
    monkeypatch.setattr(sources, loader, lambda *args, **options: seen.append(options["seed"]))
    for file in files.values():
        (tmp_path / file).write_text("")
    sources.DATA_SOURCES[name](**{key: str(tmp_path / file) for key, file in files.items()}).build(seed=5)
    assert seen == [5]

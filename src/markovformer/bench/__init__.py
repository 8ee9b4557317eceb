"""The benchmark suite behind ``markovformer bench``: attention ops against T, equal-size models, longest context.

``run_suite(out, BenchSettings(...))`` runs the chosen parts (``BenchSettings.parts``: ``PARTS`` by default, any of
``suite.ALL_PARTS``) in child processes and writes ``OUT/bench.json`` (machine, settings, every row — measured or
with the reason it was skipped — the summary tables and the issue-8 targets) plus the figures of the parts run
(``ops.png``, ``models.png``, ``longest.png``) and of the targets (``targets.png``). See ``suite`` for the parts,
``cases`` for what one measurement runs and ``measure`` for how time and peak memory are read.
"""

from markovformer.bench.suite import PARTS, RESULTS_NAME, BenchSettings, run_suite

__all__ = ["PARTS", "RESULTS_NAME", "BenchSettings", "run_suite"]

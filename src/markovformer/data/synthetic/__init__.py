"""Synthetic generators: seeded data of known structure, drawn in memory, nothing read from disk.

Markov chains of known lags and order (``markov_sources``), linear-Gaussian and sticky-HMM documents with exact
likelihoods (``state_space``), CTC strings of noisy frames (``ctc``), and the sequence-mixer tasks (``tasks``: MQAR,
induction heads, selective copying, in-context Markov chains) with their sources (``task_sources``).

To add one: a dataclass whose fields are its ``data.<option>``s and whose ``build(seed) -> DataBundle`` draws the
splits (``data.splits.generated_splits``), in a module here named in the paragraph above (``tests/data/test_shelves.py``
fails on a module this docstring does not name); then register it in ``data/sources.py``.
"""

"""Datasets, tokenizers and loaders for standard file formats (torch and numpy only at import).

Shelved by concept, each layer importing only the ones below it:

- here: what every source returns and how it is cut and batched (``bundle``, ``splits``, ``collate``), and the
  sources by name (``sources``: ``DATA_SOURCES``, the dataclasses a config's ``data:`` section builds; ``options``:
  one line of help per option);
- ``readers/``: file formats (text and its token store, local ``datasets`` files, FASTA, CSV series, WAV);
- ``synthetic/``: seeded generators of known structure (Markov chains, state-space models, sequence-mixer tasks);
- ``recipes/``: ``markovformer data prepare NAME``, which downloads or unpacks a public data set into the data
  directory;
- ``translation/``: the translation task's data (parallel text, synthetic pairs, batching, BLEU).

A new data set: its reader (or generator, or recipe) in its shelf, then a source dataclass in ``sources.py``.
"""

from markovformer.data.bundle import DataBundle
from markovformer.data.collate import collate
from markovformer.data.sources import DATA_SOURCES, source_tasks

__all__ = ["DATA_SOURCES", "DataBundle", "collate", "source_tasks"]

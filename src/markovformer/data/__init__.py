"""Datasets, tokenizers and loaders for standard file formats (torch and numpy only at import)."""

from markovformer.data.bundle import DataBundle
from markovformer.data.collate import collate
from markovformer.data.sources import DATA_SOURCES, SOURCE_TASKS

__all__ = ["DATA_SOURCES", "DataBundle", "SOURCE_TASKS", "collate"]

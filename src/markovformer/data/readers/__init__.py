"""File readers: each turns files of one format into a ``DataBundle`` (or the pieces of one), offline.

Text (``text``, ``text_stream``, ``records``, ``tokenizer``, ``bpe_cuts``, ``token_store``, ``store_windows``,
``tokenized_text``: files or their records encoded once, streamed in pieces cut where the tokenizer cuts anyway, into
a cached, memory-mapped token store and cut into windows), local Hugging Face ``datasets`` files (``hf_dataset``),
FASTA (``fasta``; its one parser ``fasta_format``), numeric CSV series (``csv_series``) and WAV audio (``audio``).

To add a format: a module here with a ``load_...(path, ...) -> DataBundle`` that reads local files only and raises
ValueError naming the file (and line) on bad input, named in the paragraph above with what it reads
(``tests/data/test_shelves.py`` fails on a module this docstring does not name); then a source dataclass calling it
in ``data/sources.py`` (README.md's "A data source" lists the rest). A reader imports ``data.bundle``,
``data.collate``, ``data.splits`` and other readers, never a recipe or a source (the same test).
"""

"""The SHA-256 of a file's bytes, read a chunk at a time (data files may be GBs): what a run records of its data
files, weights and tokenizer, and what an experiment's cell records of the files it trained on."""

from __future__ import annotations

import hashlib
from pathlib import Path

HASH_CHUNK_BYTES = 1 << 20


def file_sha256(path: str | Path) -> str:
    """The SHA-256 (hex) of the bytes of ``path``, read ``HASH_CHUNK_BYTES`` at a time."""
    digest, chunk = hashlib.sha256(), bytearray(HASH_CHUNK_BYTES)
    with open(path, "rb") as handle:
        while read := handle.readinto(chunk):
            digest.update(memoryview(chunk)[:read])
    return digest.hexdigest()


__all__ = ["HASH_CHUNK_BYTES", "file_sha256"]

"""The ``tiny-shakespeare`` data recipe: Karpathy's char-rnn Tiny Shakespeare (1,115,394 characters, 65 symbols),
the text the Scan Markov experiments train on, fetched once from its public source and checked against its SHA-256.

``find_tiny_shakespeare`` is how the experiments look for it: the prepared data directory first, then the places
users already keep it (``../shared/data`` beside a checkout)."""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from markovformer.atomic import atomic_write
from markovformer.data.recipes.locations import REPOSITORY_ROOT, data_directory

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
FILE_NAME = "tiny_shakespeare.txt"
CONFIG_PATH = f"data/{FILE_NAME}"  # what the configs say; resolved through the data directory
LEGACY_PATH = f"../shared/data/{FILE_NAME}"  # where earlier setups kept it, relative to the checkout
PREPARE_COMMAND = "markovformer data prepare tiny-shakespeare"


def download(url: str, timeout: float = 60.0) -> bytes:
    """The bytes at ``url``; RuntimeError (one line, naming the URL) when it cannot be fetched."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - a fixed https URL
            return response.read()
    except (urllib.error.URLError, OSError) as error:
        raise RuntimeError(f"could not download {url}: {error}") from None


def prepare_tiny_shakespeare(out_path: str | Path, fetch: Callable[[str], bytes] | None = None) -> Path:
    """Fetch the text with ``fetch(URL)`` (default ``download``), check its SHA-256, write it to ``out_path``
    atomically.

    Raises RuntimeError (nothing written) when the download fails or its checksum differs. Returns ``out_path``.
    """
    content = (fetch or download)(URL)
    digest = hashlib.sha256(content).hexdigest()
    if digest != SHA256:
        raise RuntimeError(f"{URL}: SHA-256 {digest} differs from the expected {SHA256} ({len(content)} bytes)")
    return atomic_write(out_path, lambda path: path.write_bytes(content))


def find_tiny_shakespeare(path: str | None = None) -> Path:
    """The Tiny Shakespeare file. ``path`` given: that file, from the working directory or the checkout's root.
    Otherwise the data directory's copy (``data prepare`` writes it), else ``../shared/data`` from the working
    directory or the checkout's root. ValueError on one line naming the prepare command when none exists."""
    relative = [path] if path else [str(data_directory() / FILE_NAME), CONFIG_PATH, LEGACY_PATH]
    candidates = [Path(p) for p in relative] + [REPOSITORY_ROOT / p for p in relative if not Path(p).is_absolute()]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(dict.fromkeys(str(c) for c in candidates))
    raise ValueError(f"Tiny Shakespeare not found (looked at {looked}); `{PREPARE_COMMAND}` downloads it")

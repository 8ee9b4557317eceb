"""Data files as they come from editors and downloads: a UTF-8 byte-order mark (Notepad, Excel), invalid UTF-8 deep
in a file, compressed files; each reader reads them as their text or names the file and what is wrong with it."""

from __future__ import annotations

import pytest
import torch

from markovformer.data.readers.audio import read_audio_manifest, read_recording_list, write_wav
from markovformer.data.readers.csv_series import load_csv_series

BOM = b"\xef\xbb\xbf"  # what Notepad and Excel's "CSV UTF-8" put before the text: no character of it


def test_an_audio_manifest_or_list_saved_with_a_byte_order_mark_reads_its_first_path(tmp_path):
    write_wav(tmp_path / "one.wav", torch.zeros(80), 8000)
    manifest, listing = tmp_path / "manifest.tsv", tmp_path / "recordings.txt"
    manifest.write_bytes(BOM + b"one.wav\thello\r\n")
    listing.write_bytes(BOM + b"one.wav\n")
    assert read_audio_manifest(manifest) == [(tmp_path / "one.wav", "hello")]
    assert read_recording_list(listing) == [tmp_path / "one.wav"]


def test_invalid_utf8_deep_in_a_csv_is_named_by_its_line_and_file_offset(tmp_path):
    """The decoder's error gave a place in its 8 KB buffer: 'position 2716' for a byte at offset 223900."""
    lines = [b"t,x,label"] + [f"{row},{row % 7},{'up' if row % 3 else 'down'}".encode() for row in range(3000)]
    lines[2500] = b"2499,\xff,up"
    data = b"\n".join(lines) + b"\n"
    offset = data.index(b"\xff")
    path = tmp_path / "series.csv"
    path.write_bytes(data)
    with pytest.raises(ValueError) as raised:
        load_csv_series(path, label_column="label", window=4)
    assert str(raised.value) == f"{path}: line 2501: byte 0xff at offset {offset} is not valid UTF-8"

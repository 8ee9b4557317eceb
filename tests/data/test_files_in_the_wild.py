"""Data files as they come from editors and downloads: a UTF-8 byte-order mark (Notepad, Excel), invalid UTF-8 deep
in a file, compressed files; each reader reads them as their text or names the file and what is wrong with it."""

from __future__ import annotations

import torch

from markovformer.data.readers.audio import read_audio_manifest, read_recording_list, write_wav

BOM = b"\xef\xbb\xbf"  # what Notepad and Excel's "CSV UTF-8" put before the text: no character of it


def test_an_audio_manifest_or_list_saved_with_a_byte_order_mark_reads_its_first_path(tmp_path):
    write_wav(tmp_path / "one.wav", torch.zeros(80), 8000)
    manifest, listing = tmp_path / "manifest.tsv", tmp_path / "recordings.txt"
    manifest.write_bytes(BOM + b"one.wav\thello\r\n")
    listing.write_bytes(BOM + b"one.wav\n")
    assert read_audio_manifest(manifest) == [(tmp_path / "one.wav", "hello")]
    assert read_recording_list(listing) == [tmp_path / "one.wav"]

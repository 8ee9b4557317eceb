"""A run's data.json: the record of the data it trained on (the data's facts, what went where, the sha256 of its
files), written when the run starts, read back by eval, generate and inspect, and compared with the data a resume
rebuilds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from markovformer.data.bundle import DataBundle
from markovformer.data.readers.token_store import READABLE_FORMATS, TokenStore
from markovformer.file_digest import file_sha256
from markovformer.strict_json import parse_json, strict_dumps
from markovformer.training.trainer_config import ConfigError

DATA_RECORD = "data.json"
FILE_DIGESTS = "file_sha256"  # data.json's record of the data files' contents: {resolved path: sha256}


def data_record(bundle: DataBundle) -> dict:
    """data.json's contents: the data's facts (``info``), the record of its splits and their sizes, and the sha256
    of every data file it was read from (``bundle.files``), as JSON reads them back (lists for tuples, None for
    non-finite floats)."""
    sizes = {split: len(getattr(bundle, split)) for split in ("train", "val", "test")}
    record = {"info": bundle.info, "splits": bundle.splits, "sizes": sizes, FILE_DIGESTS: file_digests(bundle.files)}
    return json.loads(strict_dumps(record, default=str))


def file_digests(files: list[Path]) -> dict[str, str]:
    """``{path: sha256 hex}`` of ``files``."""
    return {str(file): file_sha256(file) for file in files}


def changed_data_files(run_dir: Path, bundle: DataBundle) -> dict[str, tuple[str, str]]:
    """``{path: (sha256 then, now)}`` of the data files of ``bundle`` whose contents are not those data.json recorded
    when the run started; files it did not record (other data given to ``eval``) are not compared."""
    recorded = read_data_record(run_dir, FILE_DIGESTS, strict=False)  # a broken one is reported where info is read
    names = linked_names(recorded)
    digests = file_digests([file for file in bundle.files if str(file) in recorded or str(file) in names])
    return changed_digests(recorded, {names.get(path, path): digest for path, digest in digests.items()})


def linked_names(recorded: dict[str, str]) -> dict[str, str]:
    """``{path now: path recorded}`` of each recorded data file whose recorded path now leads elsewhere (the file
    moved and a link to it left where it was): the same file, compared under the name the run recorded."""
    names = {}
    for path in recorded:
        now = str(Path(path).resolve())
        if now != path and now not in recorded:
            names[now] = path
    return names


def changed_digests(recorded: dict[str, str], now: dict[str, str]) -> dict[str, tuple[str, str]]:
    """``{path: (sha256 then, now)}`` of the files both digest maps hold whose sha256 differ."""
    return {path: (recorded[path], digest) for path, digest in now.items()
            if path in recorded and digest != recorded[path]}  # fmt: skip


def check_same_data(run_dir: Path, bundle: DataBundle) -> None:
    """ConfigError when the data a resumed run rebuilds from its config is not the data it started with (data.json):
    a data file edited or replaced under the same path would be mixed into the run silently. The data files are
    compared first, by their sha256 (``changed_digests``, as ``eval`` does; the one check of a text whose token
    store left the cache), so that the refusal names the file that changed rather than a record that came out
    different because of it. Then every value both records hold (a newer version may record more; a run recorded
    without sha256): floats to 1e-6, token stores by their tokens."""
    saved = read_data_record(run_dir, strict=False)
    if not saved:
        return  # a start killed before data.json: it is written from the rebuilt data
    restore = f"or start a new run from this one's weights (init_from={str(run_dir)!r})"
    record = data_record(bundle)  # hashes the data files once
    digests = isinstance(saved, dict) and bool(saved.get(FILE_DIGESTS))
    recorded = saved.get(FILE_DIGESTS) if digests else None
    if isinstance(recorded, dict):
        record = _renamed(record, linked_names(recorded))
    changed = changed_digests(recorded, record[FILE_DIGESTS]) if isinstance(recorded, dict) else {}
    if changed:
        raise ConfigError(_changed_files_message(run_dir, changed, restore))
    moved = changed_documents(saved.get("splits"), record["splits"])
    if moved:
        raise ConfigError(f"{moved}: resuming would train on other data than the run started with. Restore the "
                          f"folder's files, {restore}")  # fmt: skip
    difference = _first_difference(saved, record, "", digests=digests)
    if difference is None:
        return
    where, before, now = difference
    if digests:  # every file as it was (sha256): the code that builds the data changed (a leak fixed, say)
        raise ConfigError(f"{run_dir / DATA_RECORD}: the data rebuilt from the run's config differs from the data "
                          f"it started with ({where}: {before!r} then, {now!r} now) though its files are unchanged "
                          f"(sha256): this version of markovformer builds that data otherwise than the one that "
                          f"started the run; finish it with that version, {restore}")  # fmt: skip
    raise ConfigError(f"{run_dir / DATA_RECORD}: the data rebuilt from the run's config differs from the data it "
                      f"started with ({where}: {before!r} then, {now!r} now): was a data file changed? "
                      f"Restore it, {restore}")  # fmt: skip


def changed_documents(saved, now: dict) -> str | None:
    """The files added to and removed from a folder or glob of documents since the run split it, in one sentence:
    ``saved`` is the record of its splits (data.json's ``splits``), ``now`` that of the data rebuilt from the same
    path. Its files are split whole, in name order, by the fractions, so one file more or less moves every part's
    files. None when the path holds the files it held, or ``now`` reads another path or data of another kind."""
    key = {"documents": "documents", "records": "files"}.get(saved.get("kind")) if isinstance(saved, dict) else None
    before, after = (saved.get(key), now.get(key)) if key else (None, None)
    if not (isinstance(before, list) and isinstance(after, list)) or saved.get("path") != now.get("path"):
        return None
    said = []
    for what, files in (("added to", [f for f in after if f not in before]),
                        ("removed from", [f for f in before if f not in after])):  # fmt: skip
        if files:
            more = f" and {len(files) - 3} more" if len(files) > 3 else ""
            said.append(f"{len(files)} file{'s' * (len(files) > 1)} {what} {saved['path']} since the run started: "
                        f"{', '.join(files[:3])}{more}")  # fmt: skip
    if not said:
        return None
    return (f"{'; '.join(said)} (data.json records the {len(before)} files the run split whole, in name order, "
            f"by data.fractions: the parts would now hold other files)")


def _renamed(value, names: dict[str, str]):
    """``value`` (a record as JSON reads it) with each string, and each key, that ``names`` holds written as its
    value there."""
    if isinstance(value, dict):
        return {names.get(key, key): _renamed(item, names) for key, item in value.items()}
    if isinstance(value, list):
        return [_renamed(item, names) for item in value]
    return names.get(value, value) if isinstance(value, str) else value


def _changed_files_message(run_dir: Path, changed: dict[str, tuple[str, str]], restore: str) -> str:
    """The resume refusal for the data files ``changed_data_files`` found changed, each named with its sha256 then
    (as data.json recorded it) and now."""
    record = run_dir / DATA_RECORD
    if len(changed) == 1:
        [(path, (then, now))] = changed.items()
        return (f"{path} changed since the run started (sha256 {then} then, in {record}; {now} now): resuming would "
                f"train on other data than the run started with. Restore it, {restore}")  # fmt: skip
    files = "; ".join(f"{path} (sha256 {then} then, {now} now)" for path, (then, now) in changed.items())
    return (f"{len(changed)} data files changed since the run started (their sha256 then as {record} recorded "
            f"them): {files}. Resuming would train on other data than the run started with. Restore them, "
            f"{restore}")  # fmt: skip


def _same_tokens(saved: Path, now: Path, digests: bool) -> bool:
    """Whether two token stores hold the same tokens: one store (its key names its files' content, mtimes
    included), or equal tokens in both (a file touched or copied without its mtime). A store since removed from
    the cache cannot be compared: taken as the same, the text files' recorded sha256 (``digests``) deciding; a
    run recorded without them says on one line that nothing can be checked."""
    if saved.name == now.name:
        return True
    try:
        before = TokenStore(saved, READABLE_FORMATS)
    except (OSError, ValueError):
        if not digests:
            print(f"the token store this run started with ({saved}) is gone: whether its text files changed since "
                  f"cannot be checked", flush=True)  # fmt: skip
        return True
    after = TokenStore(now)
    return bool(np.array_equal(before.offsets, after.offsets) and np.array_equal(before.tokens, after.tokens))


def _first_difference(saved, now, where: str, digests: bool = False) -> tuple[str, object, object] | None:
    """The first (where, saved value, value now) in which two records differ, in ``saved``'s order; ``digests``:
    the saved record holds its files' sha256 (``_same_tokens``)."""
    if isinstance(saved, dict) and isinstance(now, dict):
        for key in [key for key in saved if key in now]:
            if key == "store" and isinstance(saved[key], str) and isinstance(now[key], str):
                same = _same_tokens(Path(saved[key]), Path(now[key]), digests)
                found = None if same else (f"{where}.{key}".lstrip("."), saved[key], now[key])
            else:
                found = _first_difference(saved[key], now[key], f"{where}.{key}", digests)
            if found is not None:
                return found
        return None
    if isinstance(saved, float) and isinstance(now, (int, float)) and not isinstance(now, bool):
        return None if math.isclose(saved, now, rel_tol=1e-6, abs_tol=1e-12) else (where.lstrip("."), saved, now)
    return None if saved == now else (where.lstrip("."), saved, now)


def read_data_record(run_dir: Path, section: str | None = None, *, strict: bool = True) -> dict:
    """The run's data.json (as ``data_record`` made it), or its ``section``: ``info`` (the data's facts),
    ``splits`` (the record of what went where), ``sizes``, ``file_sha256``. ``strict``: a missing or unreadable file,
    or a section that is not a mapping, is a ConfigError naming the file; otherwise it reads as ``{}`` (for the checks
    that leave a broken record to the reader that needs it: a start killed before data.json, a folder that is not a
    run)."""
    path = Path(run_dir) / DATA_RECORD
    try:
        record = parse_json(path.read_text(encoding="utf-8"))
        value = record if section is None else record[section]
    except FileNotFoundError:
        if strict:
            raise ConfigError(f"{path}: missing; the run directory is incomplete") from None
        return {}
    except (OSError, ValueError, KeyError, TypeError) as error:
        if strict:
            raise ConfigError(f"{path}: not a run's data record ({type(error).__name__}: {error})") from None
        return {}
    if isinstance(value, dict):
        return value
    if strict:
        raise ConfigError(f"{path}: not a run's data record ({section or 'the file'!r} is not a mapping)")
    return {}


def read_data_info(run_dir: Path) -> dict:
    """The data's facts as the run recorded them (data.json's ``info``); a ConfigError naming the file if it cannot."""
    return read_data_record(run_dir, "info")

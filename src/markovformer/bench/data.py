"""The ``data`` part of ``markovformer bench``: preparing a large text corpus into a token store, against Hugging Face
``tokenizers`` alone and against nanoGPT's ``prepare.py`` approach.

The corpus is ``data_mb`` MB of Tiny Shakespeare copies, each perturbed (its lines rotated by a different amount,
under a numbered header), built once in ``data_cache`` and reused. For char and BPE (``data_vocab`` tokens), each
measurement runs in a child process of its own and reports its own peak resident memory (``VmHWM``), so cases do not
contaminate each other:

- ``prepare``: ``load_text_lm`` on a fresh cache (fit the tokenizer, plan the splits, encode into the store); the
  encoding alone is timed too (MB/s);
- ``open``: the same call again, answered from the cache;
- ``hf_tokenizers_alone``: the run's own fitted tokenizer as a Hugging Face ``tokenizers.Tokenizer``
  (``hf_backend``: for BPE the same byte-level BPE; for char a ``WordLevel`` model over single characters behind a
  ``Split`` pre-tokenizer that isolates every character, which gives the same ids) encoding the same file with
  the batch API (``encode_batch_fast`` where the installed version has it, else ``encode_batch``) in 4 MB reads
  cut into 64 pieces each, nothing written: the throughput the store's encoding is compared with (ratio);
- ``train``: ``data_steps`` optimiser steps of a small model reading batches from the store, on the large corpus
  and on a ``data_small_mb`` one (peak memory compared);
- ``nanogpt``: nanoGPT's approach (the whole file read into one string, encoded whole into a list, then an array
  written and memory-mapped), in a child with no torch, under an address-space limit of ``data_nanogpt_limit_mb``.

Targets (issue 29): prepare peak < 1 GB, open < 1 s, train peak within 200 MB of the small corpus's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from markovformer.atomic import atomic_write
from markovformer.bench.harness import child_environment

TARGET_PREPARE_MIB, TARGET_OPEN_SECONDS, TARGET_TRAIN_GAP_MIB = 1024.0, 1.0, 200.0
SEQ_LEN, BATCH = 256, 8
_FRACTIONS = (0.98, 0.01, 0.01)


def cached_corpus(source: Path, cache: Path, size_mb: float) -> Path:
    """``build_corpus`` of ``source`` in the folder ``cache``, named by the source's bytes and the size: a cache
    shared by runs of other sources never hands back another source's corpus."""
    from markovformer.file_digest import file_sha256

    return build_corpus(source, cache / f"corpus_{file_sha256(source)[:16]}_{size_mb:g}MB.txt", size_mb)


def build_corpus(source: Path, target: Path, size_mb: float) -> Path:
    """``target``: about ``size_mb`` MB (1e6 bytes) of perturbed copies of ``source`` (reused when present with
    that size). Copy i is a header line ``=== copy <i in letters> ===`` then the source's lines rotated by i * 7919
    lines; the last copy is cut at a line end. Written by ``atomic_write``: ``data_cache`` may be a folder others
    can write to (/tmp/corpora), where a temporary name they could guess would let a link planted there redirect
    the write to another file."""
    size = int(size_mb * 1e6)
    if target.is_file() and abs(target.stat().st_size - size) < 200_000:
        return target
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)

    def write(temporary: Path) -> None:
        written, copy = 0, 0
        with temporary.open("x", encoding="utf-8") as out:  # a fresh file: never through a link left at its name
            while written < size:
                shift = copy * 7919 % len(lines)
                text = f"=== copy {_letters(copy)} ===\n" + "".join(lines[shift:] + lines[:shift])
                data = text.encode("utf-8")
                if written + len(data) > size:  # the last copy, cut at a line end
                    cut = data.rfind(b"\n", 0, size - written) + 1
                    out.write(data[: max(cut, 1)].decode("utf-8", errors="ignore"))
                    break
                out.write(text)
                written, copy = written + len(data), copy + 1

    return atomic_write(target, write)


def _letters(number: int) -> str:
    """``number`` in base 26 written with a..z (no digits: a char vocabulary fitted on the train part has them all)."""
    word = ""
    while True:
        number, digit = divmod(number, 26)
        word = chr(ord("a") + digit) + word
        if number == 0:
            return word


def run_case(case: dict) -> dict:
    """One measurement, in this (child) process; returns its row, with ``peak_mib`` (this process's VmHWM)."""
    from markovformer.bench.measure import status_mib

    kind, tokenizer = case["case"], case["tokenizer"]
    vocab = case["vocab"] if tokenizer == "bpe" else None
    row = {"case": kind, "tokenizer": tokenizer, "corpus": case["corpus"],
           "corpus_mb": Path(case["corpus"]).stat().st_size / 1e6}  # fmt: skip
    from markovformer.data.readers import text as text_module

    row["baseline_mib"] = status_mib("VmRSS")  # after the imports (torch): what every markovformer process costs
    load = text_module.load_text_lm
    options = {"tokenizer": tokenizer, "vocab_size": vocab, "seq_len": SEQ_LEN, "fractions": _FRACTIONS,
               "cache_dir": case["cache"]}  # fmt: skip
    if kind in ("prepare", "open"):
        encode_seconds = []
        real = text_module.open_or_build

        def timed(*args, **kwargs):  # the encoding alone: its time, and its own peak (VmHWM reset before it)
            row["fit_peak_mib"] = status_mib("VmHWM")  # reading, planning and fitting the tokenizer
            reset = _reset_peak()
            start = time.perf_counter()
            store = real(*args, **kwargs)
            encode_seconds.append(time.perf_counter() - start)
            if reset:
                row["encode_peak_mib"] = status_mib("VmHWM")
            return store

        text_module.open_or_build = timed
        try:
            start = time.perf_counter()
            bundle = load(case["corpus"], **options)
            row["seconds"] = time.perf_counter() - start
        finally:
            text_module.open_or_build = real
        store = bundle.train.store
        row.update(tokens=len(store), dtype=store.tokens.dtype.name, vocab_size=bundle.tokenizer.vocab_size,
                   store=str(store.folder), store_mb=(store.folder / "tokens.bin").stat().st_size / 1e6,
                   train_windows=len(bundle.train))  # fmt: skip
        if kind == "prepare":
            row["encode_seconds"] = encode_seconds[0]
            row["encode_mb_per_second"] = row["corpus_mb"] / encode_seconds[0]
            row["mb_per_second"] = row["corpus_mb"] / row["seconds"]
            bundle.tokenizer.save(Path(case["cache"]))  # the hf_tokenizers_alone case encodes with it
            row["round_trip"] = _round_trips(bundle, case["corpus"])
    elif kind == "hf_tokenizers_alone":
        from markovformer.data.readers.text_stream import text_pieces
        from markovformer.data.readers.tokenizer import load_tokenizer

        fitted = load_tokenizer(Path(case["cache"]))
        hf = fitted.hf_backend()
        batch = getattr(hf, "encode_batch_fast", None) or hf.encode_batch  # no offsets: the fastest HF call
        start, tokens = time.perf_counter(), 0
        for piece in text_pieces(Path(case["corpus"]), safe_cut=fitted.safe_cut):
            tokens += sum(len(encoding.ids) for encoding in batch(_split(piece)))
        row["seconds"] = time.perf_counter() - start
        row.update(tokens=tokens, mb_per_second=row["corpus_mb"] / row["seconds"])
    elif kind == "train":
        row.update(_train_steps(load(case["corpus"], **options), case["steps"]))
    else:
        raise ValueError(f"unknown data bench case {kind!r}")
    row["peak_mib"] = max(status_mib("VmHWM") or 0.0, row.get("fit_peak_mib") or 0.0)  # over every phase
    return row


def _reset_peak() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux: 5 > /proc/self/clear_refs); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="utf-8") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _split(piece: str, parts: int = 64) -> list[str]:
    """``piece`` in up to ``parts`` pieces cut before a space (as ``BPETokenizer.encode_array`` cuts for the batch
    API), so ``encode_batch`` spreads over every core."""
    step, cuts, start = max(len(piece) // parts, 1 << 14), [], 0
    while start < len(piece):
        stop = piece.find(" ", start + step)
        stop = len(piece) if stop < 0 else stop
        cuts.append(piece[start:stop])
        start = stop
    return cuts


def _round_trips(bundle, corpus: str) -> bool:
    """Whether the store's first and last 64 KB of tokens decode to the corpus's first and last characters
    (the store has no separators for one file: its tokens are the text's, in order)."""
    import numpy as np

    tokens = bundle.train.store.tokens
    head = bundle.tokenizer.decode(np.asarray(tokens[: 1 << 16]).tolist())
    tail = bundle.tokenizer.decode(np.asarray(tokens[-(1 << 16) :]).tolist())
    with open(corpus, encoding="utf-8") as handle:
        start = handle.read(len(head))
    with open(corpus, "rb") as handle:
        handle.seek(max(0, Path(corpus).stat().st_size - 4 * len(tail) - 16))
        end = handle.read().decode("utf-8", errors="ignore")
    return start == head and end.endswith(tail)


def _train_steps(bundle, steps: int) -> dict:
    """``steps`` AdamW steps of a small Markovian Transformer on batches read from the bundle's store."""
    import torch

    from markovformer.models.markovian_transformer import (
        MarkovianTransformerConfig,
        MarkovianTransformerForCausalLM,
    )
    from markovformer.training.batches import EpochBatches

    torch.manual_seed(0)
    config = MarkovianTransformerConfig(vocab_size=bundle.info["vocab_size"], d_model=64, n_layers=2, n_heads=4,
                                        max_order=4, max_positions=SEQ_LEN + 1)  # fmt: skip
    model = MarkovianTransformerForCausalLM(config)
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = iter(EpochBatches(bundle.train, BATCH, seed=0, collate=bundle.collate))
    start = time.perf_counter()
    for _ in range(steps):
        batch = next(batches)
        loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)
    return {"steps": steps, "seconds": time.perf_counter() - start, "last_loss": loss.item(),
            "train_windows": len(bundle.train)}  # fmt: skip


# nanoGPT's data/shakespeare_char/prepare.py and data/shakespeare/prepare.py, restated (not copied): the whole text
# as one string, its ids as one Python list, then a uint16 array written to a file that training memory-maps. It
# imports no torch (nanoGPT's prepare scripts do not) and runs under an address-space limit.
_NANOGPT = r"""
from markovformer.bench.harness import die_with_parent
die_with_parent()
import json, resource, sys, time
import numpy as np
corpus, tokenizer_dir, kind, out, limit_mib = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
resource.setrlimit(resource.RLIMIT_AS, (limit_mib << 20, limit_mib << 20))
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
start = time.perf_counter()
try:
    with open(corpus, encoding="utf-8") as handle:
        data = handle.read()
    if kind == "char":
        chars = sorted(set(data))
        stoi = {c: i + 1 for i, c in enumerate(chars)}
        ids = [stoi[c] for c in data]
    else:
        from tokenizers import Tokenizer
        record = json.load(open(f"{tokenizer_dir}/tokenizer.json"))
        tokenizer = Tokenizer.from_str(json.dumps(record["tokenizer"]))
        tokenizer.encode_special_tokens = True  # as the library encodes: "<eod>" in the text is text
        ids = tokenizer.encode(data).ids
    array = np.array(ids, dtype=np.uint16)
    array.tofile(out)
    tokens = len(array)
    del data, ids, array
    mapped = np.memmap(out, dtype=np.uint16, mode="r")
    row = {"seconds": time.perf_counter() - start, "tokens": tokens, "mapped_tokens": len(mapped)}
except MemoryError:
    row = {"error": f"MemoryError: over the {limit_mib} MiB address-space limit",
           "seconds_until_error": time.perf_counter() - start}
row["peak_mib"] = peak()
print(json.dumps(row))
"""


def _child(case: dict, timeout: float) -> dict:
    """``run_case(case)`` in a fresh interpreter; its row (or the error it died with)."""
    code = ("import json, sys\nfrom markovformer.bench.harness import die_with_parent\ndie_with_parent()\n"
            "from markovformer.bench.data import run_case\n"
            "print(json.dumps(run_case(json.loads(sys.argv[1]))))")
    return _run([sys.executable, "-c", code, json.dumps(case)], timeout, case)


def _run(command: list[str], timeout: float, case: dict) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=child_environment(env))
    except subprocess.TimeoutExpired:
        return {**case, "error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        # the line that says why: a Rust abort (Hugging Face tokenizers out of memory) prints its reason first,
        # then a backtrace; a Python error prints it last
        said = done.stderr.strip().splitlines() or ["no output"]
        reason = next((line for line in said if line.startswith(("memory allocation of", "thread '"))), said[-1])
        return {**case, "error": f"exit {done.returncode}: {reason[:300]}",
                "seconds_until_error": time.perf_counter() - start}  # fmt: skip
    return json.loads(lines[-1])


def run_data_part(settings, out: Path, log: Callable[[str], None], write: Callable[[dict], None]) -> dict:
    """The data part's record ``{"corpus": ..., "rows": [...], "targets": [...]}``; ``write(part)`` after each row."""
    from markovformer.data.recipes.registry import find_prepared_file

    source = Path(settings.data_source) if settings.data_source else find_prepared_file("data/tiny_shakespeare.txt")
    cache = Path(settings.data_cache) if settings.data_cache else out / "data_cache"
    large, small = (cached_corpus(source, cache, size) for size in (settings.data_mb, settings.data_small_mb))
    rows: list[dict] = []
    part = {"source": str(source), "corpus": str(large), "corpus_mb": large.stat().st_size / 1e6,
            "small_corpus_mb": small.stat().st_size / 1e6, "seq_len": SEQ_LEN, "batch": BATCH,
            "rows": rows}  # fmt: skip
    timeout = settings.data_timeout
    for tokenizer in settings.data_tokenizers:
        if tokenizer not in ("char", "bpe"):
            raise ValueError(f"data_tokenizers: {tokenizer!r} is not 'char' or 'bpe'")
        stores = out / "data_stores" / tokenizer  # measured afresh every run
        shutil.rmtree(stores, ignore_errors=True)
        base = {"tokenizer": tokenizer, "vocab": settings.data_vocab, "steps": settings.data_steps}
        cases = [{**base, "case": "prepare", "corpus": str(large), "cache": str(stores / "large")},
                 {**base, "case": "open", "corpus": str(large), "cache": str(stores / "large")},
                 {**base, "case": "hf_tokenizers_alone", "corpus": str(large), "cache": str(stores / "large")},
                 {**base, "case": "train", "corpus": str(large), "cache": str(stores / "large")},
                 {**base, "case": "prepare", "corpus": str(small), "cache": str(stores / "small")},
                 {**base, "case": "train", "corpus": str(small), "cache": str(stores / "small")}]  # fmt: skip
        for case in cases:
            row = _child(case, timeout)
            rows.append(row)
            log(f"data    {tokenizer:4} {case['case']:19} {Path(case['corpus']).name:22} {_shown(row)}")
            write(part)
        row = _run([sys.executable, "-c", _NANOGPT, str(large), str(stores / "large"), tokenizer,
                    str(stores / "nanogpt.bin"), str(settings.data_nanogpt_limit_mb)], timeout,
                   {"case": "nanogpt", "tokenizer": tokenizer})  # fmt: skip
        row.update(case="nanogpt", tokenizer=tokenizer, corpus=str(large), corpus_mb=part["corpus_mb"])
        (stores / "nanogpt.bin").unlink(missing_ok=True)
        rows.append(row)
        log(f"data    {tokenizer:4} {'nanogpt':19} {large.name:22} {_shown(row)}")
        write(part)
    part["targets"] = data_targets(rows, str(large), str(small))
    write(part)
    for target in part["targets"]:
        log(f"data    target {target['tokenizer']} {target['target']}: {target['value']:.2f} "
            f"{'met' if target['met'] else 'NOT met'}")  # fmt: skip
    return part


def _shown(row: dict) -> str:
    if "error" in row:
        return row["error"]
    shown = f"{row['seconds']:.2f} s, peak {row['peak_mib']:.0f} MiB"
    if "encode_mb_per_second" in row:
        shown += f", encode {row['encode_mb_per_second']:.1f} MB/s"
    elif "mb_per_second" in row:
        shown += f", {row['mb_per_second']:.1f} MB/s"
    return shown


def data_targets(rows: list[dict], large: str, small: str) -> list[dict]:
    """The issue's targets per tokenizer, from the rows that measured them (rows with errors count as not met)."""
    targets = []
    for tokenizer in ("char", "bpe"):
        def find(case, corpus, tokenizer=tokenizer):
            return next((r for r in rows if r.get("case") == case and r.get("tokenizer") == tokenizer
                         and r.get("corpus") == corpus and "error" not in r), None)  # fmt: skip

        prepare, opened, big, little = find("prepare", large), find("open", large), find("train", large), \
            find("train", small)  # fmt: skip
        hf = find("hf_tokenizers_alone", large)
        if prepare:
            targets.append({"tokenizer": tokenizer, "target": f"prepare peak MiB < {TARGET_PREPARE_MIB:.0f}",
                            "value": prepare["peak_mib"], "met": prepare["peak_mib"] < TARGET_PREPARE_MIB})  # fmt: skip
        if opened:
            targets.append({"tokenizer": tokenizer, "target": f"open seconds < {TARGET_OPEN_SECONDS:g}",
                            "value": opened["seconds"], "met": opened["seconds"] < TARGET_OPEN_SECONDS})  # fmt: skip
        if big and little:
            gap = big["peak_mib"] - little["peak_mib"]
            targets.append({"tokenizer": tokenizer, "target": f"train peak gap MiB < {TARGET_TRAIN_GAP_MIB:.0f}",
                            "value": gap, "met": abs(gap) < TARGET_TRAIN_GAP_MIB})  # fmt: skip
        if prepare and hf:
            targets.append({"tokenizer": tokenizer, "target": "encode MB/s over HF tokenizers alone (info)",
                            "value": prepare["encode_mb_per_second"] / hf["mb_per_second"], "met": True})  # fmt: skip
    return targets


def format_data(part: dict) -> list[str]:
    """The data part as a plain-text table."""
    lines = [f"data: {part['corpus_mb']:.0f} MB corpus ({part['source']}), seq_len {part['seq_len']}",
             f"{'tokenizer':9} {'case':20} {'corpus MB':>9} {'seconds':>9} {'MB/s':>7} {'encode MB/s':>11} "
             f"{'peak MiB':>9}  note"]  # fmt: skip
    for row in part["rows"]:
        if "error" in row:
            lines.append(f"{row.get('tokenizer', ''):9} {row.get('case', ''):20} {'':>9} {'':>9} {'':>7} {'':>11} "
                         f"{'':>9}  {row['error']}")  # fmt: skip
            continue
        # MB/s: the whole case (a prepare's fitting included); encode MB/s: its encoding alone, where measured
        rate, encode = row.get("mb_per_second"), row.get("encode_mb_per_second")
        note = f"{row['tokens']:,} tokens" if "tokens" in row else ""
        lines.append(f"{row['tokenizer']:9} {row['case']:20} {row['corpus_mb']:9.1f} {row['seconds']:9.2f} "
                     f"{'' if rate is None else f'{rate:.1f}':>7} {'' if encode is None else f'{encode:.1f}':>11} "
                     f"{row['peak_mib']:9.0f}  {note}")  # fmt: skip
    for target in part.get("targets", []):
        lines.append(f"target {target['tokenizer']}: {target['target']}: {target['value']:.2f} "
                     f"{'met' if target['met'] else 'NOT met'}")  # fmt: skip
    return lines

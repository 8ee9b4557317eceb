"""Two CPU processes in one gloo process group: the token store is built once (the other process waits on the build
lock, then maps the same files) and each rank reads only its own windows of every global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from markovformer.data.readers.text import load_text_lm
from markovformer.training.batches import EpochBatches

_RANK = textwrap.dedent("""
    import json, sys
    import torch.distributed as dist
    from markovformer.data.readers import token_store
    from markovformer.data.collate import collate
    from markovformer.data.readers.text import load_text_lm
    from markovformer.training.batches import EpochBatches

    rank, out, corpus, cache = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    real_build = token_store._build

    def counted_build(root, folder, write):
        with open(f"{out}/builds.txt", "a") as log:
            log.write(f"{rank}\\n")
        real_build(root, folder, write)

    token_store._build = counted_build
    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"file://{out}/rendezvous")
    bundle = load_text_lm(corpus, tokenizer="bpe", vocab_size=300, seq_len=16, cache_dir=cache)
    read = []

    class Spy:
        def __len__(self):
            return len(bundle.train)

        def __getitem__(self, index):
            read.append(bundle.train.window(index))
            return bundle.train[index]

    batches = iter(EpochBatches(Spy(), batch_size=4, seed=7, collate=collate))
    for _ in range(5):
        next(batches)
    json.dump({"read": read, "store": str(bundle.train.store.folder)}, open(f"{out}/rank{rank}.json", "w"))
    dist.barrier()
    dist.destroy_process_group()
""")


def test_two_ranks_build_the_store_once_and_read_disjoint_windows(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i}: the chain moves on, the state keeps its order.\n" for i in range(4000)))
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ranks = [subprocess.Popen([sys.executable, str(script), str(rank), str(tmp_path), str(corpus),
                               str(tmp_path / "cache")], env=env, stderr=subprocess.PIPE, text=True)
             for rank in range(2)]  # fmt: skip
    for process in ranks:
        assert process.wait(timeout=120) == 0, process.stderr.read()
    assert (tmp_path / "builds.txt").read_text().split() in (["0"], ["1"])  # built once, by whichever came first
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert results[0]["store"] == results[1]["store"]  # both map the one store
    reads = [{tuple(window) for window in result["read"]} for result in results]
    assert len(reads[0]) == len(reads[1]) == 20 and not reads[0] & reads[1]
    # together they read exactly what one process with the global batch reads
    alone = load_text_lm(corpus, tokenizer="bpe", vocab_size=300, seq_len=16, cache_dir=tmp_path / "cache")
    batches = iter(EpochBatches(range(len(alone.train)), batch_size=8, seed=7, collate=lambda indices: indices))
    single = {alone.train.window(i) for _ in range(5) for i in next(batches)}
    assert reads[0] | reads[1] == single

"""The gated linear recurrence h_t = a_t ⊙ h_{t-1} + b_t (an associative scan): a loop reference and fast paths.

``linear_scan`` validates its inputs once and dispatches to a backend; tests pin every path to ``naive``:

- ``"naive"``: a Python loop over time under autograd; the reference.
- ``"sequential"``: a no-grad blocked loop (about 4√(T/2) Python steps: within blocks of about √(T/2) steps, across
  the about 2√(T/2) blocks, then the entering state into them) with a hand-written adjoint backward (O(T) memory,
  no graph); fastest on CPU.
- ``"chunked"``: chunk-local doubling scans joined by a scan over chunk summaries; no loop over time; for GPUs.
- ``"auto"``: ``chunked`` on CUDA, ``sequential`` elsewhere.

``windowed_linear_scan`` restarts the recurrence at every position over the last ``window`` steps (the Scan
Markov model's "markov" context mode); ``window_offsets`` owns its window convention. ``min_gru`` is the minGRU
recurrence on ``linear_scan`` (``min_gru_naive`` its loop reference).
"""

from markovformer.ops.scan.chunked import DEFAULT_CHUNK_SIZE, linear_scan_chunked
from markovformer.ops.scan.dispatch import BACKENDS, WINDOWED_BACKENDS, linear_scan, windowed_linear_scan
from markovformer.ops.scan.min_gru import min_gru, min_gru_naive
from markovformer.ops.scan.naive import linear_scan_naive, windowed_linear_scan_naive
from markovformer.ops.scan.sequential import linear_scan_sequential
from markovformer.ops.scan.windowed import window_offsets, windowed_linear_scan_offsets

__all__ = [
    "BACKENDS",
    "DEFAULT_CHUNK_SIZE",
    "WINDOWED_BACKENDS",
    "linear_scan",
    "linear_scan_chunked",
    "linear_scan_naive",
    "linear_scan_sequential",
    "min_gru",
    "min_gru_naive",
    "window_offsets",
    "windowed_linear_scan",
    "windowed_linear_scan_naive",
    "windowed_linear_scan_offsets",
]

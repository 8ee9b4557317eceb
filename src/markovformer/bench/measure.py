"""Timing and peak memory of one benchmark step, and the rule that decides a size is too large to try.

Peak memory on CPU is the process's resident high-water mark (``VmHWM``) above its resident size when the case
started; Linux lets a process reset that mark (``/proc/self/clear_refs``), so several cases can share one process.
Where the reset is refused, the reading covers everything since the process began (run one case per process).
On CUDA it is ``torch.cuda.max_memory_allocated`` above the memory allocated at the start.
"""

from __future__ import annotations

import ctypes
import gc
import math
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

STATUS = Path("/proc/self/status")
CAP_REACHED = "longest_max reached"  # the longest part's stop reason when every T trained: a lower bound


def status_mib(field: str, path: str | Path = STATUS) -> float | None:
    """A ``kB`` field of a /proc status file (``VmRSS``, ``VmHWM``, ``MemAvailable`` ...) in MiB; None if absent."""
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", Path(path).read_text(encoding="utf-8"), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) / 1024 if match else None


def reset_resident_peak() -> bool:
    """Reset this process's resident high-water mark to its current size; False where Linux refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5", encoding="utf-8")
    except OSError:
        return False
    return True


def release_free_memory() -> None:
    """Hand freed heap memory back to the OS (glibc keeps it resident otherwise), so that the next case's resident
    size starts from what is really in use."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PeakMemory:
    """``start()`` marks the baseline, ``peak_mib()`` is the highest memory in use since then above it, in MiB."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.baseline = 0.0
        self.isolated = True  # False: the CPU reading may include earlier cases of this process

    def start(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.baseline = torch.cuda.memory_allocated() / 2**20
            return
        release_free_memory()
        self.isolated = reset_resident_peak()
        self.baseline = status_mib("VmRSS") or 0.0

    def peak_mib(self) -> float:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() / 2**20 - self.baseline
        return (status_mib("VmHWM") or 0.0) - self.baseline


def time_steps(step: Callable[[], None], repeats: int, time_cap: float, sync: Callable[[], None]) -> dict:
    """Up to ``repeats`` timed runs of ``step`` (at least one) while their total stays within ``time_cap`` seconds;
    ``seconds`` is their median. The first run is made whatever the cap (a caller's budget left after its warm-up
    can be spent already)."""
    times: list[float] = []
    while not times or (len(times) < repeats and sum(times) <= time_cap):
        began = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - began)
    return {"seconds": statistics.median(times), "runs": len(times)}


def growth_exponent(points: list[tuple[int, float]], default: float = 2.0) -> float:
    """Exponent p of value ~ T**p through the last two (T, value) points, clamped to [1, 2.5]; ``default``
    (quadratic, the cautious guess) with fewer points."""
    usable = [(t, value) for t, value in points if value and value > 0]
    if len(usable) < 2:
        return default
    (t1, v1), (t2, v2) = usable[-2], usable[-1]
    if t2 == t1:
        return default
    return min(2.5, max(1.0, math.log(v2 / v1) / math.log(t2 / t1)))


def predicted_over_caps(
    done: list[dict], seq_len: int, memory_cap_mib: float, time_cap: float, default_growth: float = 2.0
) -> str | None:
    """Why a case at ``seq_len`` should not be tried given the measured rows ``done`` of the same kind (ascending
    T, each with ``T``, ``seconds``, ``peak_mib``), or None: extrapolate time and memory along their growth
    (``default_growth`` while fewer than two sizes are measured)."""
    measured = [row for row in done if row.get("seconds") is not None]
    if not measured:
        return None
    last = measured[-1]
    scale = seq_len / last["T"]
    for key, cap, unit in (("peak_mib", memory_cap_mib, "MiB"), ("seconds", time_cap, "s")):
        points = [(row["T"], row.get(key)) for row in measured]
        if last.get(key) is None:
            continue
        predicted = last[key] * scale ** growth_exponent(points, default_growth)
        if predicted > cap:
            name = "peak memory" if key == "peak_mib" else "step time"
            return f"predicted {name} {predicted:.0f} {unit} > cap {cap:.0f} {unit}"
    return None


class SizeSeries:
    """The sizes of one benchmark kind, tried in ascending T: after a size fails (out of memory, timed out, an
    error) or its step exceeds the time cap, larger sizes are skipped; a size predicted to exceed a cap is skipped.
    Every size gets a row: its measurements or a ``skipped`` reason. ``default_growth``: the exponent of T assumed
    while only one size is measured (quadratic unless the kind is known to grow slower)."""

    def __init__(self, memory_cap_mib: float, time_cap: float, default_growth: float = 2.0) -> None:
        self.memory_cap_mib, self.time_cap, self.default_growth = memory_cap_mib, time_cap, default_growth
        self.rows: list[dict] = []
        self.stopped: str | None = None

    def skip_reason(self, seq_len: int) -> str | None:
        return self.stopped or predicted_over_caps(
            self.rows, seq_len, self.memory_cap_mib, self.time_cap, self.default_growth
        )

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if self.stopped:
            return
        if "skipped" in row or "error" in row:
            self.stopped = f"a smaller size stopped (T={row['T']}: {row.get('skipped') or row.get('error')})"
        elif row.get("warmup_seconds", 0.0) > self.time_cap:
            self.stopped = f"T={row['T']} already took longer than the {self.time_cap:.0f} s time cap"

"""The GPU's SM clock, board power and clock-event (throttle) reasons while a measurement ran.

An H100 at its 700 W limit under a sustained GEMM runs at 1.4-1.6 GHz, not its 1.98 GHz maximum
(session 22, `scripts/power_clocks.py`: every suite case, cuBLAS's and evt's, under
`sw-power-cap`), and not every kernel at the same clock: a kernel whose epilogue keeps the
tensor cores waiting draws less power and runs faster clocks. A TFLOP/s figure without its clock
mixes the kernel's schedule with the board's power budget, so each timed record carries the
median SM clock, mean power and clock-event reasons its timing window saw.

`nvidia-smi -lms` runs in the background from the first window on (one process per bench
process, stopped at exit); nothing is sampled off CUDA or without `nvidia-smi`.
"""

from __future__ import annotations

import atexit
import bisect
import contextlib
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator

import torch

FIELDS = ("clocks.sm", "power.draw", "clocks_event_reasons.active")
# nvmlClocksEventReason* bits (nvml.h); "idle" and "app-clocks" are left out of the reasons
REASONS = {0x4: "sw-power-cap", 0x8: "hw-slowdown", 0x20: "sw-thermal", 0x40: "hw-thermal",
           0x80: "hw-power-brake"}  # fmt: skip
PERIOD_MS = 20


class Sampler:
    """`nvidia-smi -lms PERIOD_MS` for one GPU, read by a daemon thread into (time, fields)."""

    def __init__(self, index: int, period_ms: int = PERIOD_MS) -> None:
        self.rows: list[tuple[float, list[str]]] = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "-i", str(index), f"--query-gpu={','.join(FIELDS)}",
             "--format=csv,noheader,nounits", f"-lms={period_ms}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.rows.append((time.monotonic(), [x.strip() for x in line.split(",")]))

    def summary(self, t0: float, t1: float) -> dict:
        """What the samples taken between monotonic times t0 and t1 say (empty: none). The rows
        arrive in time order: a window is found by bisection, not by reading a long run's all."""
        rows = self.rows  # the reader thread only appends: indices found here stay valid
        lo = bisect.bisect_left(rows, t0, key=lambda r: r[0])
        hi = bisect.bisect_right(rows, t1, key=lambda r: r[0])
        return summarize([r for _, r in rows[lo:hi]])

    def close(self) -> None:
        self.proc.terminate()


def summarize(rows: list[list[str]]) -> dict:
    """{"sm_mhz": median SM clock, "power_w": mean board power, "events": active clock-event
    reasons, "samples": n} of nvidia-smi rows (FIELDS, no units); {} without a usable row."""
    clocks, power, bits = [], [], 0
    for r in rows:
        if len(r) != len(FIELDS):
            continue
        with contextlib.suppress(ValueError):
            clocks.append(float(r[0]))
        with contextlib.suppress(ValueError):
            power.append(float(r[1]))
        with contextlib.suppress(ValueError):
            bits |= int(r[2], 16)
    if not clocks:
        return {}
    return {
        "sm_mhz": statistics.median(clocks),
        "power_w": statistics.fmean(power) if power else None,
        "events": [name for bit, name in REASONS.items() if bits & bit],
        "samples": len(clocks),
    }


_sampler: Sampler | None = None
_failed = False


def sampler(device: str) -> Sampler | None:
    """This process's sampler of `device`'s GPU, started on first use; None off CUDA or where
    nvidia-smi is missing or fails to start."""
    global _sampler, _failed
    if _sampler is not None or _failed or not device.startswith("cuda"):
        return _sampler
    if not torch.cuda.is_available() or not shutil.which("nvidia-smi"):
        _failed = True
        return None
    try:
        index = torch.device(device).index
        _sampler = Sampler(torch.cuda.current_device() if index is None else index)
    except OSError:
        _failed = True
        return None
    atexit.register(_sampler.close)
    time.sleep(0.2)  # its first sample
    return _sampler


@contextlib.contextmanager
def window(device: str) -> Iterator[dict]:
    """Yields a dict that holds, after the block, what the samples taken during it say
    (`summarize`); stays empty off CUDA or without nvidia-smi."""
    found: dict = {}
    s = sampler(device)
    t0 = time.monotonic()
    try:
        yield found
    finally:
        if s is not None:
            time.sleep(PERIOD_MS / 1000)  # the sample that covers the block's end
            found.update(s.summary(t0, time.monotonic()))

"""CUDA-event timing shared by max-autotune (`evt.runtime.autotune`) and the benchmark harness."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def cuda_time_ms(fn: Callable[[], object], warmup: int = 5, reps: int = 25) -> float:
    """The median of `reps` CUDA-event timings of `fn` (in ms) after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)

"""CUDA-event timing shared by max-autotune (`evt.runtime.autotune`) and the benchmark harness,
and the random inputs max-autotune times on."""

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


def random_like(fake: torch.Tensor, device: str = "cuda") -> torch.Tensor:
    """A tensor with `fake`'s sizes, strides (symbolic ones by their hints) and dtype on
    `device`, filled with random values."""
    shape, stride = [_hint(x) for x in fake.shape], [_hint(x) for x in fake.stride()]
    t = torch.empty_strided(shape, stride, dtype=fake.dtype, device=device)
    if fake.dtype == torch.bool:
        return t.random_(2)
    if not fake.dtype.is_floating_point:
        return t.zero_()
    return t.normal_()


def _hint(x) -> int:
    return int(x.node.hint) if isinstance(x, torch.SymInt) else int(x)

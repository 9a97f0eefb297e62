"""GPU timing shared by max-autotune (`evt.runtime.autotune`) and the benchmark harness, and the
random inputs max-autotune times on.

- `gpu_ms(fn)`: the median time of one call, `triton.testing.do_bench` when triton imports (calls
  enqueued back to back, L2 flushed before each), else CUDA events around each call.
- `capture(fn)`: `fn` recorded into a CUDA graph after warm-up on a side stream (as
  `torch.cuda.graphs` asks). Replaying it costs the host one launch, so a replay's time is the
  GPU's alone: evt's fused kernel (a Python launch, tens of microseconds of host time) and the
  unfused path (Inductor's wrapper and kernels) are compared as the GPU runs them, which is how a
  step runs under CUDA graphs or with the host ahead of the GPU.
- `replay_ms(fn)`: `gpu_ms` of `capture(fn)`'s replays.
"""

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


def has_triton() -> bool:
    try:
        import triton.testing  # noqa: F401
    except ImportError:
        return False
    return True


def gpu_ms(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """The median time of one call of `fn` on the GPU, in milliseconds (see the module's
    docstring); CUDA events (10 warm-up calls, 50 timed) without triton."""
    if has_triton():
        import triton.testing

        return float(
            triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
        )
    return cuda_time_ms(fn, warmup=10, reps=50)


def capture(fn: Callable[[], object], warmup: int = 2) -> torch.cuda.CUDAGraph:
    """`fn` recorded into a CUDA graph, after `warmup` calls on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def replay_ms(fn: Callable[[], object], warmup_ms: int = 10, rep_ms: int = 40) -> float:
    """`gpu_ms` of the replays of `capture(fn)`: the GPU's time of one call, without the host's."""
    graph = capture(fn)
    return gpu_ms(graph.replay, warmup_ms, rep_ms)


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

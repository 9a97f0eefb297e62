"""How things are timed.

- Run time: the median of many calls after warm-up. On CUDA `triton.testing.do_bench(fn,
  return_mode="median")` when triton imports (it also flushes L2 before every call), else CUDA
  events around each call; on CPU (tests only) a wall-clock timer.
- Under CUDA graphs (GEMM cases, every baseline): one graph captured per input set, replays
  rotating through them, timed the same way. Host cost (Python, dispatch, guards, launch) is
  gone, so this is the GPU's time alone; a baseline whose capture fails records why.
- Input sets: when one set of inputs and outputs fits in L2, calls rotate through several fresh
  sets, so no call finds its operands already cached.
- Compile time: the first call of a freshly compiled callable (tracing, compiling, building
  kernels and one run), cold (empty Inductor caches) and warm (caches filled), separately.
- Peak memory (training steps): `torch.cuda.max_memory_allocated` over one call, above what was
  allocated before it (parameters and inputs; the previous call's gradients are dropped first),
  so activations, gradients and workspaces.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable

import torch

from evt.runtime import timing

L2_BYTES_DEFAULT = 50 * 2**20  # H100 / H200
MAX_INPUT_SETS = 8


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timer_name(device: str) -> str:
    if not device.startswith("cuda"):
        return "cpu-wallclock"
    return "triton.do_bench" if timing.has_triton() else "cuda-events"


def kernels_built() -> None:
    """Wait for evt's kernel builds: under `EVT_WAIT_KERNELS=0` a region runs its reference path
    until its kernel is built, and that is not evt's time."""
    from evt.runtime import build

    build.wait_all()


def time_ms(fn: Callable[[], object], device: str) -> float:
    """The median time of one call of `fn`, in milliseconds (evt's kernels built first)."""
    kernels_built()
    if device.startswith("cuda"):
        return timing.gpu_ms(fn)
    return _wallclock_ms(fn)


def in_turn(runs: dict[str, Callable[[], object]], rounds: int, device: str) -> dict[str, list[float]]:
    """name -> `rounds` timings (`time_ms`) of `runs[name]`, each round timing every call once,
    in order: a drift of the GPU's clocks over the rounds touches all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(time_ms(run, device))
    return times


def profile_once(fn: Callable[[], object]) -> None:
    """One call of `fn` between cudaProfilerStart and Stop, for `ncu --profile-from-start off`:
    only its kernels are profiled."""
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def _wallclock_ms(fn, reps: int = 3) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def l2_bytes(device: str) -> int:
    if device.startswith("cuda"):
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or (
            L2_BYTES_DEFAULT
        )
    return L2_BYTES_DEFAULT


def input_set_count(working_set: int, l2: int) -> int:
    """1 when the working set exceeds L2, else enough sets to cover 3x L2 (at most 8)."""
    if working_set <= 0 or working_set > l2:
        return 1
    return min(MAX_INPUT_SETS, math.ceil(3 * l2 / working_set))


def graph_replay(fn: Callable, input_sets: list[tuple]) -> Callable[[], None]:
    """A no-argument call that replays `fn` on the next input set from a CUDA graph, one graph
    per input set captured after warm-up on a side stream (`evt.runtime.timing.capture`)."""
    graphs = [timing.capture(lambda inputs=inputs: fn(*inputs)) for inputs in input_sets]
    cycle = itertools.cycle(graphs)
    return lambda: next(cycle).replay()


def graph_time_ms(fn: Callable, input_sets: list[tuple], device: str) -> float:
    """The median time of `fn` on rotating input sets, each call replayed from a CUDA graph."""
    return time_ms(graph_replay(fn, input_sets), device)


def host_ms(fn: Callable[[], object], device: str, n: int = 50) -> float:
    """The host's time per call with calls enqueued back to back (no synchronization between
    them): when it exceeds the timed result's, the host, not the GPU, sets the pace."""
    kernels_built()
    for _ in range(3):
        fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n * 1e3
    sync(device)
    return host


def host_ms_median(fn: Callable[[], object], device: str, readings: int, n: int = 50) -> float:
    """The median of `readings` readings of `host_ms`: one reading can take a stall of the
    host's (a process woken, a page fault, a collection) for the call's pace. Session 67 read
    torch.compile's host time at one of bias_gelu/bert's seven readings 64 us and at their
    median 86."""
    return statistics.median(host_ms(fn, device, n) for _ in range(max(1, readings)))


def host_probe_us(device: str, readings: int = 5) -> float:
    """This process's host time per call of one small in-place add on `device`, in us (median of
    `readings`): how fast the host runs torch's dispatch and a launch here and now. Session 66's
    bench read every baseline's host time 1.1-2.6x a later call's process, and nothing recorded
    whether that call's machine or the bench's process was the slower; each stage records this
    at its start and end (`runner.run_stage`), so a report can tell."""
    x = torch.zeros(1, device=device)
    return statistics.median(host_ms(lambda: x.add_(1), device, n=1000) for _ in range(readings)) * 1e3


def rotating(fn: Callable, input_sets: list[tuple]) -> Callable[[], object]:
    """A no-argument call that runs `fn` on the next input set each time."""
    cycle = itertools.cycle(input_sets)
    return lambda: fn(*next(cycle))


def first_call_s(make: Callable[[], Callable], inputs: tuple, device: str):
    """Build a callable with `make()` and time its first call: (seconds, callable, outputs)."""
    sync(device)
    t0 = time.perf_counter()
    fn = make()
    out = fn(*inputs)
    sync(device)
    return time.perf_counter() - t0, fn, out


def peak_memory(fn: Callable[[], object], device: str) -> int | None:
    """Bytes allocated at the peak of one call, above what was allocated before it."""
    if not device.startswith("cuda"):
        return None
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    sync(device)
    return torch.cuda.max_memory_allocated(device) - before

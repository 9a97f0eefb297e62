"""Where evt's host time goes: the per-call cost of `evt::fused_gemm` on a tiny problem (GPU time
negligible, so the rate is the host's), split into the op dispatch, evt's dispatch/guards and the
C++ launcher, then the op through the C++ launch path (`evt.runtime.fast`), plus a cProfile of
MLP training steps (on the C++ path unless EVT_FAST_LAUNCH=0).

    python scripts/host_overhead.py
"""

from __future__ import annotations

import copy
import cProfile
import pstats
import time
from pathlib import Path

import torch

from evt import ir
from evt.examples import MLP
from evt.runtime import dispatch, fast, launch
from tests import specs


def per_call_us(fn, n=2000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def cold_us(fn, n=200) -> float:
    """Median host us of one call after 64 MB of host memory is written (the CPU caches hold
    none of the call's code or data, as between launches inside a training step)."""
    thrash = torch.empty(64 << 20, dtype=torch.uint8)
    times = []
    for i in range(n):
        torch.cuda.synchronize()
        thrash.fill_(i % 251)
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return sorted(times)[n // 2]


def main() -> None:
    spec = specs.mlp_fc1_forward()
    bf = dict(device="cuda", dtype=torch.bfloat16)
    x, w, b = torch.randn(128, 64, **bf), torch.randn(128, 64, **bf), torch.randn(128, **bf)
    text = ir.to_json(spec)
    parsed = ir.from_json(text)
    kernel = dispatch.kernel_for(parsed)
    problem = kernel.guard([x, w, b])
    print(f"torch.ops.evt.fused_gemm  {per_call_us(lambda: torch.ops.evt.fused_gemm(text, [x, w, b])):7.1f} us")
    print(f"dispatch.run              {per_call_us(lambda: dispatch.run(parsed, [x, w, b])):7.1f} us")
    print(f"Kernel.guard + launch     {per_call_us(lambda: kernel.launch(kernel.guard([x, w, b]), [x, w, b])):7.1f} us")
    print(f"Kernel.launch             {per_call_us(lambda: kernel.launch(problem, [x, w, b])):7.1f} us")
    print(f"Kernel.guard              {per_call_us(lambda: kernel.guard([x, w, b])):7.1f} us")
    plan = kernel._plan(problem)
    out = [torch.empty(s, dtype=d, device="cuda") for s, _, d, _ in plan.outputs]
    args = (launch._pointers([x, w, b]), plan.input_strides, launch._pointers(out),
            plan.output_strides, problem.M, problem.N, problem.K, problem.L, plan.tile_order, None, 0,
            launch.stream_handle(x.device))  # fmt: skip
    print(f"C++ launcher (ctypes)     {per_call_us(lambda: kernel.library.run(*args)):7.1f} us")
    # each launch with outputs the launcher's memo has not seen (more than its 64 ways in turn):
    # the kernel parameters (TMA descriptors) are built again every time
    ring = [[torch.empty(s, dtype=d, device="cuda") for s, _, d, _ in plan.outputs] for _ in range(97)]
    pointers = [launch._pointers(outs) for outs in ring]  # built here, not in the timed calls
    turn = iter(range(10**9))

    def fresh_outputs():
        return kernel.library.run(*args[:2], pointers[next(turn) % len(ring)], *args[3:])

    print(f"C++ launcher, new outputs {per_call_us(fresh_outputs):7.1f} us (parameters rebuilt)")
    print(f"C++ launcher, same outputs {per_call_us(lambda: kernel.library.run(*args[:2], pointers[0], *args[3:])):6.1f} us")
    shape, strides, dtype, _ = plan.outputs[0]
    print(f"torch.empty (1 output)    {per_call_us(lambda: torch.empty(shape, dtype=dtype, device='cuda')):7.1f} us")
    empty = launch._empty_strided(x.device)
    print(f"_empty_strided (1 output) {per_call_us(lambda: empty(shape, strides, dtype)):7.1f} us")
    print(f"current_stream().cuda_stream {per_call_us(lambda: torch.cuda.current_stream().cuda_stream):7.1f} us")
    print(f"raw stream                {per_call_us(lambda: launch.stream_handle(x.device)):7.1f} us")
    source = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    print(f"time.monotonic_ns()       {per_call_us(time.monotonic_ns):7.2f} us "
          f"(clock source: {source.read_text().strip() if source.exists() else '?'})")
    noop = torch.library.Library("evt_probe", "DEF")
    noop.define("noop(str spec, Tensor[] inputs) -> Tensor[]")
    noop.impl("noop", lambda spec, inputs: inputs[:1], "CompositeExplicitAutograd")
    print(f"no-op torch.library op    {per_call_us(lambda: torch.ops.evt_probe.noop(text, [x, w, b])):7.1f} us")
    print(f"torch.addmm (reference)   {per_call_us(lambda: torch.addmm(b, x, w.t())):7.1f} us")
    print(f"cold caches: C++ launcher {cold_us(lambda: kernel.library.run(*args)):7.1f} us, "
          f"torch.addmm {cold_us(lambda: torch.addmm(b, x, w.t())):7.1f} us, torch.empty "
          f"{cold_us(lambda: torch.empty(shape, dtype=dtype, device='cuda')):7.1f} us")  # fmt: skip
    if fast.ensure():
        op = torch.ops.evt.fused_gemm.default
        print(f"op, C++ launch path       {per_call_us(lambda: op(text, [x, w, b])):7.1f} us "
              f"(C++ launches: {sum(fast.launches().values())})")  # fmt: skip
        print(f"cold caches: op, C++ launch path {cold_us(lambda: op(text, [x, w, b])):7.1f} us")
        with fast.timed():
            print(f"op, C++ path timing it    {per_call_us(lambda: op(text, [x, w, b])):7.1f} us "
                  "(fast.timed(): four clock reads per call)")  # fmt: skip
        fast.set_enabled(False)
        print(f"op, C++ path switched off {per_call_us(lambda: op(text, [x, w, b])):7.1f} us")
        fast.set_enabled(True)
    model = torch.compile(copy.deepcopy(MLP(1024, 4096)).to(**bf), backend="evt")
    xs = torch.randn(8192, 1024, **bf, requires_grad=True)
    probe = torch.randn(8192, 1024, device="cuda")

    def step():
        (model(xs).float() * probe).sum().backward()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()

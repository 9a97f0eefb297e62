"""`EVT_WAIT_KERNELS=0` and the C++ launch path (`evt.runtime.fast`), in a process of its own on
the GPU (`tests/test_gpu_mlp.py` runs it: a loaded library stays loaded for the process). The
MLP's kernels are cached; the launch path builds through a host compiler that first sleeps, so
the compile returns while it builds. Steps then launch from Python, and once the build has ended
a step loads the library (before its graph's ops) and later calls launch from C++. Each check
prints a line; any failure raises.

    CXX=<slow compiler> EVT_WAIT_KERNELS=0 python -m tests.no_wait_launch_path
"""

from __future__ import annotations

import time

import torch

from evt.runtime import dispatch, fast
from tests.test_gpu_mlp import check_against_fp32, fresh_x, make_model


def main() -> None:
    model = make_model(11)
    compiled = torch.compile(model, backend="evt")
    start = time.monotonic()
    check_against_fp32(compiled, model, fresh_x())
    assert fast.pending() and fast.loaded() is None, "the compile waited for the launch path"
    assert sum(dispatch.launches().values()) >= 4, dispatch.launches()  # the kernels, from Python
    print(f"ok: the first step ended {time.monotonic() - start:.1f} s in, the launch path building")
    steps = 0
    while fast.pending() and time.monotonic() - start < 400:
        check_against_fp32(compiled, model, fresh_x())
        steps += 1
        time.sleep(0.1)
    assert fast.loaded() == "cuda", "the launch path was not loaded after its build"
    print(f"ok: loaded after {steps} more steps, {time.monotonic() - start:.1f} s in")
    for _ in range(3):
        check_against_fp32(compiled, model, fresh_x())
    assert sum(fast.launches().values()) >= 4, fast.launches()
    assert not dispatch.FALLBACKS, dispatch.FALLBACKS
    print(f"ok: later steps launch from C++: {dict(fast.launches())}")


if __name__ == "__main__":
    main()

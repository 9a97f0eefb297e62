"""The C++ launch path (`evt.runtime.fast`) on CPU tensors, in its own process (tests/test_fast_launch.py
runs it: loading the library registers a C++ kernel for the op's CPU key for the rest of a process).

The library is built for the CPU key; the region's kernel is the fake library of
`tests.runtime_fakes` (records its arguments, fills output 0 with ones). Each check prints a line;
any failure raises.

    python -m tests.fast_launch_cpu <scratch dir> <C compiler>
"""

from __future__ import annotations

import ctypes
import os
import sys
import warnings
from pathlib import Path

import torch

import evt.runtime.ops  # noqa: F401 - defines evt::fused_gemm before the library adds its kernel
from evt import ir
from evt.runtime import dispatch, fast, launch
from tests.runtime_fakes import build_fake_library, fc1_eager, fc1_inputs, fc1_spec


def main(scratch: Path, cc: str) -> None:
    assert fast.ensure("cpu"), "the CPU variant of the C++ launch path did not load"
    took, waited = fast.TIMES["compiler_s"], fast.TIMES["ensure_waited_s"]
    assert took is not None and 0 < took <= waited, fast.TIMES  # a cold cache: ensure waited for it
    print("ok: the library's compile and ensure's wait for it are timed")
    library = launch.load(build_fake_library(scratch, cc))
    record = library.handle.evt_test_record
    record.restype = ctypes.POINTER(ctypes.c_int64)
    dispatch.use_kernels = lambda inputs: True
    launch.check_device = lambda tensors: None
    spec = fc1_spec()
    dispatch._kernels[dispatch.identity(spec)] = launch.Kernel(spec, library)
    text = ir.to_json(spec)

    def call(inputs):
        return torch.ops.evt.fused_gemm(text, inputs)

    def counts():
        return dispatch.LAUNCHES[spec.name], fast.launches()[spec.name]

    M, K, N = 64, 32, 48
    inputs = fc1_inputs(M, K, N)
    first = call(inputs)
    assert counts() == (1, 0), counts()
    out = call(inputs)
    assert counts() == (1, 1), f"the second call did not launch from C++: {counts()}"
    rec = record()[:40]
    assert rec[:5] == [M, N, K, 1, 256] and rec[5] != 0 and rec[6] == 0, rec[:8]
    assert rec[8:17] == [K, 1, 0, K, 1, 0, 0, 1, 0] and rec[20:26] == [N, 1, 0, N, 1, 0], rec
    assert rec[30:33] == [t.data_ptr() for t in inputs] and rec[33:35] == [o.data_ptr() for o in out]
    assert [o.shape for o in out] == [o.shape for o in first] == [(M, N), (M, N)]
    assert [o.dtype for o in out] == [torch.bfloat16] * 2 and torch.equal(out[0], first[0])
    assert dispatch.launches()[spec.name] == 2
    print("ok: a repeated call launches from C++ with the Python path's arguments")

    other = fc1_inputs(2 * M, K, N, seed=1)
    call(other)
    assert counts() == (2, 1), counts()
    call(other)
    call(inputs)
    assert counts() == (2, 3), counts()
    assert record()[0] == M
    print("ok: a new input layout goes to Python once, then both layouts launch from C++")

    misaligned = [inputs[0], inputs[1], torch.empty(N + 1, dtype=inputs[2].dtype)[1:]]
    misaligned[2].copy_(inputs[2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ref = call(misaligned)
    assert counts() == (2, 3), counts()
    assert any("16-byte" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert torch.allclose(ref[0].float(), fc1_eager(inputs)[0].float(), atol=1e-2, rtol=1e-2)
    print("ok: a misaligned input takes the Python path, which falls back with its warning")

    os.environ["EVT_INJECT"] = "nothing"
    call(inputs)
    del os.environ["EVT_INJECT"]
    os.environ["EVT_VERIFY"] = "0"
    call(inputs)
    del os.environ["EVT_VERIFY"]
    assert counts() == (3, 4), counts()
    print("ok: EVT_INJECT sends calls to Python; EVT_VERIFY=0 does not")

    with dispatch.reference_only():
        ref = call(inputs)
    assert counts() == (3, 4) and not torch.equal(ref[0], out[0]), counts()
    call(inputs)
    assert counts() == (3, 5), counts()
    print("ok: reference_only() turns the C++ path off and on again")

    library.handle.evt_test_set_rc(-1)
    ref = call(inputs)  # (the region warned once already, for the misaligned input)
    assert "can_implement" in dispatch.FALLBACKS[spec.name], dispatch.FALLBACKS
    assert counts() == (3, 5), counts()
    assert torch.allclose(ref[0].float(), fc1_eager(inputs)[0].float(), atol=1e-2, rtol=1e-2)
    print("ok: a launcher's error code sends the call to Python, which falls back")

    library.handle.evt_test_set_rc(0)
    dispatch.reset()
    dispatch._kernels[dispatch.identity(spec)] = launch.Kernel(spec, library)
    assert not dispatch.launches()
    call(inputs)
    call(inputs)
    assert counts() == (1, 1), counts()
    print("ok: dispatch.reset() forgets the C++ path's plans and counts")

    padded = launch.load(build_fake_library(scratch / "padded", cc,
                                            "kfake;128x256x64_c1x1_cooperative_pr;{}"))  # fmt: skip
    assert padded.pad_rows
    dispatch.reset()
    dispatch._kernels[dispatch.identity(spec)] = launch.Kernel(spec, padded)
    narrow = fc1_inputs(M, K, 100)  # 200-byte bf16 rows: padded to 224
    outs = [call(narrow), call(narrow)]
    assert counts() == (1, 1), counts()
    for out in outs:
        assert [o.stride() for o in out] == [(112, 1), (112, 1)], [o.stride() for o in out]
        assert all(o.untyped_storage().nbytes() >= M * 112 * 2 for o in out)
        assert bool((out[0] == 1).all())
    padded.handle.evt_test_record.restype = ctypes.POINTER(ctypes.c_int64)
    assert padded.handle.evt_test_record()[20] == 112
    print("ok: outputs with padded rows get their whole storage from C++ as from Python")

    # an aux input TMA cannot read as it is (a bool mask with 104-byte rows): both paths launch
    # on a copy with rows padded to 128 bytes (guards.copy_into_rows; the C++ plan's pads)
    masked = ir.KernelSpec("masked", spec.gemm, (
        ir.AccFetch("acc"), ir.AuxLoad("mask", 2, "b8", "n"), ir.ScalarBroadcast("zero", 0.0),
        ir.Compute("masked", "where", ("mask", "zero", "acc"), "bf16"),
        ir.AuxStore("saved", "masked", 1, "bf16")), "masked", "bf16", 3)  # fmt: skip
    dispatch.reset()
    dispatch._kernels[dispatch.identity(masked)] = launch.Kernel(masked, library)
    x, w, _ = fc1_inputs(M, K, 104)
    masks = [torch.rand(M, 104) > 0.5 for _ in range(2)]
    text = ir.to_json(masked)
    outs = [torch.ops.evt.fused_gemm(text, [x, w, m]) for m in (masks[0], masks[1], masks[0])]
    assert (dispatch.LAUNCHES[masked.name], fast.launches()[masked.name]) == (1, 2)
    rec = record()[:40]
    assert rec[14:17] == [128, 1, 0], rec[8:17]  # the mask's (M, N, L) strides: the padded copy's
    assert rec[32] not in (m.data_ptr() for m in masks), "the kernel read the unpadded mask"
    assert all(bool((o[0] == 1).all()) for o in outs)
    print("ok: an aux input TMA cannot read launches on a padded copy, from Python and from C++")

    assert masked.name not in fast.host_times(), "calls timed outside fast.timed()"
    with fast.timed():
        torch.ops.evt.fused_gemm(text, [x, w, masks[1]])
    timed = fast.host_times()[masked.name]
    assert timed.launches == 1 and timed.call_ns >= timed.launcher_ns > 0, timed
    assert timed.call_us == timed.call_ns / 1e3
    torch.ops.evt.fused_gemm(text, [x, w, masks[1]])  # timing is off again
    assert fast.host_times()[masked.name] == timed and fast.launches()[masked.name] == 4
    print("ok: inside fast.timed() the C++ path times its launches per region (the call, the "
          "launcher inside it), outside it does not")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])

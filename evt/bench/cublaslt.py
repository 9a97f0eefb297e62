"""cuBLASLt's fused epilogues that torch does not expose, as a baseline: GELU with its
pre-activation saved for the backward (`GELU_AUX_BIAS`), GELU's backward in the data gradient
(`DGELU`) and the same with the bias gradient of the GELU's input (`DGELU_BGRAD`).

torch reaches cuBLASLt's bias, bias+ReLU and bias+tanh-GELU epilogues (`torch._addmm_activation`,
`addmm`); these three are called here through ctypes on the libcublasLt torch itself loaded, so
the suite can compare evt with cuBLASLt on the training epilogues too. cuBLASLt's GELU is the
tanh form: the patterns they stand in for ask for it (`evt.bench.patterns`).

cuBLASLt is column-major; a row-major product D = a @ b (M x N) is computed as its transpose,
Dᵀ = bᵀ aᵀ (N x M column-major, the same memory). `operand` maps a row-major operand to the
column-major view cuBLASLt reads, `Plan` caches the descriptors and the heuristic's algorithm
for one problem (the host work per call is then a few attribute sets and the launch). The
algorithm is the heuristic's first, as torch's own cuBLASLt calls take it;
`EVT_CUBLASLT_ALGOS=N` times its first N once and keeps the fastest.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from evt import debug
from evt.runtime import timing

# cublasLt.h / cublas_api.h / library_types.h (CUDA 12 and 13)
EPILOGUES = {"gelu_aux_bias": 164, "dgelu": 192, "dgelu_bgrad": 208}
CUDA_DTYPES = {torch.float32: 0, torch.float16: 2, torch.bfloat16: 14}
COMPUTE_32F = 68
OP_N, OP_T = 0, 1
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER = 3, 4, 7, 8
DESC_AUX_POINTER, DESC_AUX_LD, DESC_AUX_DATA_TYPE, DESC_BIAS_DATA_TYPE = 11, 12, 22, 26
PREF_MAX_WORKSPACE_BYTES = 1
WORKSPACE_BYTES = 32 << 20  # torch's cuBLAS workspace on Hopper


class CublasLtError(RuntimeError):
    pass


class _HeuristicResult(ctypes.Structure):
    _fields_ = [
        ("algo", ctypes.c_uint64 * 8),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves_count", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


def operand(shape: tuple[int, int], stride: tuple[int, int]) -> tuple[int, int, int, int]:
    """A row-major 2-D operand t (r x c, its strides in elements) as cuBLASLt reads tᵀ:
    (op, rows, cols, ld) of the column-major matrix in memory, op(matrix) = tᵀ (c x r).
    Either dimension must be contiguous (a transposed view is read transposed)."""
    r, c = shape
    if stride[1] == 1 and stride[0] >= max(c, 1):
        return OP_N, c, r, stride[0]
    if stride[0] == 1 and stride[1] >= max(r, 1):
        return OP_T, r, c, stride[1]
    raise CublasLtError(f"operand {tuple(shape)} with strides {tuple(stride)}: one dimension "
                        "must be contiguous")  # fmt: skip


def _library_path() -> str:
    """The libcublasLt this process already mapped (torch's), else the linker's."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libcublasLt.so" in line:
                    return line.split()[-1]
    except OSError:
        pass
    for name in ("libcublasLt.so.13", "libcublasLt.so.12", ctypes.util.find_library("cublasLt")):
        if name:
            try:
                ctypes.CDLL(name)
                return name
            except OSError:
                continue
    raise CublasLtError("libcublasLt not found: torch's CUDA build loads it")


@functools.cache
def _lib() -> ctypes.CDLL:
    torch.cuda.init()
    lib = ctypes.CDLL(_library_path())
    lib.cublasLtGetStatusName.restype = ctypes.c_char_p
    return lib


def _check(status: int, what: str) -> None:
    if status:
        name = _lib().cublasLtGetStatusName(status).decode()
        raise CublasLtError(f"{what}: {name} ({status})")


@functools.cache
def _handle(device: int) -> ctypes.c_void_p:
    handle = ctypes.c_void_p()
    with torch.cuda.device(device):
        _check(_lib().cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
    return handle


@functools.cache
def _workspace(device: int) -> torch.Tensor:
    return torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=f"cuda:{device}")


def _set(setter, desc, attr: int, value) -> None:
    _check(setter(desc, attr, ctypes.byref(value), ctypes.sizeof(value)), f"attribute {attr}")


def _layout(dtype: int, rows: int, cols: int, ld: int) -> ctypes.c_void_p:
    layout = ctypes.c_void_p()
    _check(_lib().cublasLtMatrixLayoutCreate(ctypes.byref(layout), dtype, ctypes.c_uint64(rows),
                                             ctypes.c_uint64(cols), ctypes.c_int64(ld)),
           "cublasLtMatrixLayoutCreate")  # fmt: skip
    return layout


@dataclass
class Plan:
    """One problem's descriptors and algorithm: D (M x N) = a (M x K) @ b (K x N), epilogue."""

    desc: ctypes.c_void_p
    a: ctypes.c_void_p  # cuBLASLt's A: bᵀ
    b: ctypes.c_void_p  # cuBLASLt's B: aᵀ
    d: ctypes.c_void_p
    what: str  # the problem, for errors
    device: int
    algo: _HeuristicResult | None = None

    @classmethod
    @functools.cache
    def make(cls, epilogue: str, dtype: torch.dtype, m: int, n: int, k: int,
             a_stride: tuple[int, int], b_stride: tuple[int, int], device: int) -> Plan:  # fmt: skip
        lib, t = _lib(), CUDA_DTYPES[dtype]
        desc = ctypes.c_void_p()
        _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), COMPUTE_32F, CUDA_DTYPES[torch.float32]),
               "cublasLtMatmulDescCreate")  # fmt: skip
        op_a, ra, ca, lda = operand((k, n), b_stride)
        op_b, rb, cb, ldb = operand((m, k), a_stride)
        setter = lib.cublasLtMatmulDescSetAttribute
        _set(setter, desc, DESC_TRANSA, ctypes.c_int32(op_a))
        _set(setter, desc, DESC_TRANSB, ctypes.c_int32(op_b))
        _set(setter, desc, DESC_EPILOGUE, ctypes.c_uint32(EPILOGUES[epilogue]))
        _set(setter, desc, DESC_AUX_LD, ctypes.c_int64(n))
        _set(setter, desc, DESC_AUX_DATA_TYPE, ctypes.c_int32(t))
        _set(setter, desc, DESC_BIAS_DATA_TYPE, ctypes.c_int32(t))
        a, b, d = _layout(t, ra, ca, lda), _layout(t, rb, cb, ldb), _layout(t, n, m, n)
        return cls(desc, a, b, d, f"{epilogue}, {m}x{n}x{k}, {dtype}", device)

    def pick(self, launch: Callable[[_HeuristicResult], None]) -> _HeuristicResult:
        """The algorithm, asked once the epilogue's pointers are set (the heuristic reads their
        alignment from them): the heuristic's first, as torch's own cuBLASLt calls take it, or
        with `EVT_CUBLASLT_ALGOS=N` the fastest of its first N, each timed through `launch`
        (`evt.runtime.timing.cuda_time_ms`: the median of 10 calls after 2), printed at
        EVT_DEBUG=1. Not while a CUDA graph is being captured: there the first."""
        if self.algo is not None:
            return self.algo
        lib, wanted = _lib(), algorithms_wanted()
        if torch.cuda.is_current_stream_capturing():
            wanted = 1
        pref = ctypes.c_void_p()
        _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
        _set(lib.cublasLtMatmulPreferenceSetAttribute, pref, PREF_MAX_WORKSPACE_BYTES,
             ctypes.c_uint64(WORKSPACE_BYTES))  # fmt: skip
        results, found = (_HeuristicResult * wanted)(), ctypes.c_int(0)
        try:
            _check(lib.cublasLtMatmulAlgoGetHeuristic(_handle(self.device), self.desc, self.a, self.b, self.d,
                                                      self.d, pref, wanted, results, ctypes.byref(found)),
                   f"cublasLtMatmulAlgoGetHeuristic ({self.what})")  # fmt: skip
        finally:
            lib.cublasLtMatmulPreferenceDestroy(pref)
        usable = [r for r in results[: found.value] if r.state == 0]
        if not usable:
            raise CublasLtError(f"cuBLASLt has no algorithm for {self.what}")
        if len(usable) == 1:
            self.algo = usable[0]
            return self.algo
        times = [timing.cuda_time_ms(lambda r=r: launch(r), warmup=2, reps=10) for r in usable]
        best = min(range(len(usable)), key=times.__getitem__)
        debug.log(1, f"evt.bench.cublaslt: {self.what}: the heuristic's algorithm {best + 1} of "
                     f"{len(usable)}, {times[best]:.4f} ms (its first: {times[0]:.4f} ms)")  # fmt: skip
        self.algo = usable[best]
        return self.algo


def algorithms_wanted() -> int:
    """EVT_CUBLASLT_ALGOS: how many of the heuristic's algorithms to time (1, the default: its
    first, untimed)."""
    text = os.environ.get("EVT_CUBLASLT_ALGOS", "1").strip() or "1"
    if not text.isdigit() or int(text) < 1:
        raise CublasLtError(f"EVT_CUBLASLT_ALGOS={text!r}: a count of algorithms (1 or more) wanted")
    return int(text)


def matmul(a: torch.Tensor, b: torch.Tensor, epilogue: str, *, bias: torch.Tensor | None = None,
           aux: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """D = a @ b with cuBLASLt's `epilogue` (EPILOGUES), a: M x K, b: K x N, D: M x N contiguous
    (`out`, else a new tensor). `bias`: the N-vector added (gelu_aux_bias) or written with the
    bias gradient (dgelu_bgrad); `aux`: M x N contiguous, written (gelu_aux_bias: the
    pre-activation) or read (dgelu*)."""
    if epilogue not in EPILOGUES:
        raise CublasLtError(f"epilogue {epilogue!r}: one of {sorted(EPILOGUES)}")
    if a.dtype != b.dtype or a.dtype not in CUDA_DTYPES or not a.is_cuda or b.device != a.device:
        raise CublasLtError(f"operands {a.dtype}/{b.dtype} on {a.device}/{b.device}: one CUDA "
                            f"device, one of {sorted(map(str, CUDA_DTYPES))}")  # fmt: skip
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise CublasLtError(f"operands {tuple(a.shape)} @ {tuple(b.shape)}: M x K @ K x N wanted")
    (m, k), n = a.shape, b.shape[1]
    for name, t, shape in (("aux", aux, (m, n)), ("bias", bias, (n,)), ("out", out, (m, n))):
        if t is not None and (tuple(t.shape) != shape or not t.is_contiguous() or t.dtype != a.dtype):
            raise CublasLtError(f"{name}: {tuple(t.shape)} {t.dtype}, contiguous {shape} {a.dtype} wanted")
    device = a.device.index if a.device.index is not None else torch.cuda.current_device()
    plan = Plan.make(epilogue, a.dtype, m, n, k, tuple(a.stride()), tuple(b.stride()), device)
    lib = _lib()
    setter = lib.cublasLtMatmulDescSetAttribute
    for attr, t in ((DESC_BIAS_POINTER, bias), (DESC_AUX_POINTER, aux)):
        _set(setter, plan.desc, attr, ctypes.c_void_p(t.data_ptr() if t is not None else 0))
    d = torch.empty((m, n), dtype=a.dtype, device=a.device) if out is None else out
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    ws = _workspace(device)
    stream = ctypes.c_void_p(torch.cuda.current_stream(a.device).cuda_stream)

    def launch(algo: _HeuristicResult) -> None:
        _check(lib.cublasLtMatmul(_handle(device), plan.desc, ctypes.byref(alpha), ctypes.c_void_p(b.data_ptr()),
                                  plan.a, ctypes.c_void_p(a.data_ptr()), plan.b, ctypes.byref(beta),
                                  ctypes.c_void_p(d.data_ptr()), plan.d, ctypes.c_void_p(d.data_ptr()), plan.d,
                                  ctypes.byref(algo), ctypes.c_void_p(ws.data_ptr()),
                                  ctypes.c_size_t(WORKSPACE_BYTES), stream),
               f"cublasLtMatmul ({plan.what})")  # fmt: skip

    launch(plan.pick(launch))
    return d

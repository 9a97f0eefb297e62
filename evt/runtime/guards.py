"""What must hold before a kernel launches: a device fault cannot be recovered from, a refusal can.

`check(spec, infos)` is a pure function of the inputs' shapes, strides, dtypes, data pointers and
devices (`TensorInfo`), so it is tested without a GPU. It returns the `Problem` the launcher
passes to the kernel (M, N, K, L and 3 strides per input in CUTLASS mode order), or raises
`LaunchError` whose message is the reason (the dispatcher then runs the region unfused).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from evt import ir
from evt.errors import LaunchError
from evt.runtime import reference

ALIGN = 16  # bytes: TMA base addresses and strides


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    data_ptr: int
    device: str

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorInfo:
        return cls(tuple(t.shape), tuple(t.stride()), t.dtype, t.data_ptr(), str(t.device))


@dataclass(frozen=True)
class Role:
    """How the kernel reads one input: modes (e.g. M, K, L), their extents and strides."""

    what: str  # "A", "B", "aux load x", "row broadcast b", "col broadcast s"
    input: int
    dtype: str
    modes: str  # one letter per mode, e.g. "MKL"
    extents: tuple[int, int, int]
    strides: tuple[int, int, int]
    unit: int  # the mode that must have unit stride
    zero: int | None  # a broadcast mode (stride 0 by construction)
    tma: bool  # read through TMA: the unit mode must span whole 16-byte vectors


@dataclass(frozen=True)
class Problem:
    M: int
    N: int
    K: int
    L: int
    input_strides: tuple[int, ...]  # 3 per input, CUTLASS mode order
    output_strides: tuple[int, ...] = ()  # 3 per output (contiguous outputs), CUTLASS mode order


def output_strides(spec: ir.KernelSpec, M: int, N: int) -> tuple[int, ...]:
    """The (M, N, L) strides of each freshly allocated output: [L, M, N] row-major, or a vector
    or scalar a reduction writes (stride 0 along the reduced modes): `KernelSpec.output_strides`."""
    return spec.output_strides(M, N)


def static_reason(spec: ir.KernelSpec) -> str | None:
    """Why no kernel can run `spec` whatever the inputs, else None."""
    if spec.gemm.dtype == "f32":
        return tf32_reason(spec.gemm)
    for n in spec.nodes:
        if isinstance(n, ir.AuxStore) and n.major != "n":
            return f"aux store {n.name} is {n.major}-major; outputs are allocated N-major"
    return None


def tf32_reason(gemm: ir.Gemm) -> str | None:
    """Why an fp32 GEMM cannot run on TF32 tensor cores, else None. torch multiplies fp32 in
    TF32 only where `torch.get_float32_matmul_precision()` is not "highest" (its default), and
    WGMMA reads TF32 operands K-major only. The kernels compile (the nvcc tier) but have not run
    on a GPU yet: `EVT_TF32=1` opts in until the GPU tier covers them."""
    if torch.get_float32_matmul_precision() == "highest":
        return "fp32 needs TF32 kernels; torch.get_float32_matmul_precision() is 'highest'"
    if os.environ.get("EVT_TF32", "0") in ("", "0"):
        return "TF32 kernels are experimental (not yet run on a GPU): EVT_TF32=1 enables them"
    majors = {"A": gemm.a.major, "B": gemm.b.major}
    if any(m != "k" for m in majors.values()):
        which = ", ".join(f"{k} is {m}-major" for k, m in majors.items() if m != "k")
        return f"TF32 tensor cores read both operands K-major ({which})"
    return None


def static_cuda(v) -> bool:
    """Whether a (fake) value decides the guards at compile time: a CUDA tensor ("meta" stands
    for CUDA) whose sizes and strides are all static."""
    return (
        isinstance(v, torch.Tensor)
        and v.device.type in ("cuda", "meta")
        and not any(isinstance(x, torch.SymInt) for x in (*v.shape, *v.stride()))
    )


def shape_reason(spec: ir.KernelSpec, values: Sequence) -> str | None:
    """Why the kernel could never run on tensors of these (fake) values' shapes, strides and
    dtypes, else None: `static_reason`, then the launch guards on aligned data pointers. None too where a size or
    stride is symbolic (a dynamic shape decides at launch) or the values are not CUDA tensors
    (the CPU runs the reference path by design; "meta" stands for CUDA: the bench's capture)."""
    if not all(static_cuda(v) for v in values):
        return None
    if reason := static_reason(spec):  # e.g. an fp32 GEMM (no TF32 kernels yet): never runs
        return reason
    infos = [TensorInfo(tuple(v.shape), tuple(v.stride()), v.dtype, 0, "cuda") for v in values]
    try:
        check(spec, infos)
    except LaunchError as e:
        return str(e)
    return None


def check(spec: ir.KernelSpec, infos: Sequence[TensorInfo]) -> Problem:
    if len(infos) != spec.num_inputs:
        raise LaunchError(f"{len(infos)} inputs, the kernel takes {spec.num_inputs}")
    if len({i.device for i in infos}) > 1:
        raise LaunchError(f"inputs on several devices: {sorted({i.device for i in infos})}")
    M, N, K, L = (int(x) for x in reference.problem_shape(spec, infos))  # type: ignore[arg-type]
    if min(M, N, K, L) <= 0:
        raise LaunchError(f"empty problem (M, N, K, L) = {(M, N, K, L)}")
    roles = _roles(spec, infos, (M, N, K, L))
    strides = [(0, 0, 0)] * spec.num_inputs
    for r in roles:
        _check_role(r, infos[r.input])
        triple = _passed_strides(r)
        if strides[r.input] != (0, 0, 0) and strides[r.input] != triple:
            raise LaunchError(f"input {r.input} is read in two roles with different strides")
        strides[r.input] = triple
    for i, dtype in enumerate(spec.output_dtypes()):
        _check_extent(f"output {i}", "N", N, dtype)
    inputs = tuple(s for t in strides for s in t)
    return Problem(M, N, K, L, inputs, output_strides(spec, M, N))


def _roles(spec: ir.KernelSpec, infos: Sequence[TensorInfo], mnkl) -> list[Role]:
    M, N, K, L = mnkl
    g = spec.gemm
    a, b = infos[g.a.input], infos[g.b.input]
    _expect_dim(a, 3 if g.batched else 2, "A", g.a.input)
    _expect_dim(b, 3 if g.batched else 2, "B", g.b.input)
    s_a = _logical(a, g.a.transposed)
    s_b = _logical(b, g.b.transposed)[::-1]  # CUTLASS's B is N x K
    b_ext = _logical_shape(b, g.b.transposed)[::-1]
    if b_ext != (N, K) or (g.batched and b.shape[0] != L):
        raise LaunchError(f"input {g.b.input} (B) has shape {b.shape}; A implies K={K}, L={L}")
    if g.batched and L > 1 and 0 in (a.stride[0], b.stride[0]):
        raise LaunchError("an operand has L stride 0 (an expanded batch); the kernel needs a "
                          "real batch stride")  # fmt: skip
    lstride = (lambda t: t.stride[0]) if g.batched else (lambda t: 0)
    roles = [
        Role("A", g.a.input, g.dtype, "MKL", (M, K, L), (*s_a, lstride(a)), "mk".index(g.a.major),
             None, True),
        Role("B", g.b.input, g.dtype, "NKL", (N, K, L), (*s_b, lstride(b)), "nk".index(g.b.major),
             None, True),
    ]  # fmt: skip
    for n in spec.nodes:
        if isinstance(n, (ir.AuxLoad, ir.RowBroadcast, ir.ColBroadcast)):
            roles.append(_load_role(n, infos[n.input], (M, N, L), g.batched))
    return roles


def _load_role(n, t: TensorInfo, mnl, batched: bool) -> Role:
    M, N, L = mnl
    ext = (M, N, L)
    if isinstance(n, ir.AuxLoad):
        ok = _aux_shape_ok(n, t, (M, N, L), batched)
        s_m, s_n = t.stride[-2:] if len(t.shape) >= 2 else (0, 0)
        s_l = t.stride[0] if len(t.shape) == 3 and not n.broadcast_l else 0
        role = Role(f"aux load {n.name}", n.input, n.dtype, "MNL", ext, (s_m, s_n, s_l),
                    "mn".index(n.major), 2 if n.broadcast_l else None, True)  # fmt: skip
    elif isinstance(n, ir.RowBroadcast):
        ok = len(t.shape) >= 1 and t.shape[-1] == N and math.prod(t.shape[:-1]) == 1
        role = Role(f"row broadcast {n.name}", n.input, n.dtype, "MNL", ext,
                    (0, t.stride[-1] if t.shape else 0, 0), 1, 0, False)  # fmt: skip
    else:  # an M-vector stored as [M] or [..., M, 1]
        ok = t.shape == (M,) or (len(t.shape) >= 2 and t.shape[-2:] == (M, 1)
                                 and math.prod(t.shape[:-2]) == 1)  # fmt: skip
        s_m = t.stride[0] if len(t.shape) == 1 else t.stride[-2] if t.shape else 0
        role = Role(
            f"col broadcast {n.name}", n.input, n.dtype, "MNL", ext, (s_m, 0, 0), 0, 1, False
        )
    if not ok:
        raise LaunchError(f"input {n.input} ({role.what}) has shape {t.shape}; (M, N, L) = {mnl}")
    return role


def _aux_shape_ok(n: ir.AuxLoad, t: TensorInfo, mnl, batched: bool) -> bool:
    """[M, N] (unbatched, or read by every batch), or [L, M, N] with a real L stride (a stride-0
    L needs the kernel built with a static zero: `broadcast_l`)."""
    M, N, L = mnl
    if n.broadcast_l:
        return t.shape in ((M, N), (1, M, N))
    if not batched:
        return t.shape == (M, N)
    return t.shape == (L, M, N) and (L == 1 or t.stride[0] != 0)


def _logical_shape(t: TensorInfo, transposed: bool) -> tuple[int, int]:
    rows, cols = t.shape[-2:]
    return (cols, rows) if transposed else (rows, cols)


def _logical(t: TensorInfo, transposed: bool) -> tuple[int, int]:
    rows, cols = t.stride[-2:]
    return (cols, rows) if transposed else (rows, cols)


def _expect_dim(t: TensorInfo, dim: int, what: str, index: int) -> None:
    if len(t.shape) != dim:
        raise LaunchError(f"input {index} ({what}) has shape {t.shape}, expected {dim} dims")


def _check_role(r: Role, t: TensorInfo) -> None:
    where = f"input {r.input} ({r.what})"
    if t.dtype != ir.torch_dtype(r.dtype):
        raise LaunchError(f"{where} is {t.dtype}, the kernel was built for {r.dtype}")
    size = t.dtype.itemsize
    if t.data_ptr % ALIGN:
        raise LaunchError(f"{where}: data pointer is {t.data_ptr % ALIGN} bytes past a 16-byte "
                          "boundary (a narrow/split view?); the kernel needs 16-byte alignment")  # fmt: skip
    unit = r.modes[r.unit]
    if r.extents[r.unit] > 1 and r.strides[r.unit] != 1:
        raise LaunchError(f"{where}: stride along {unit} is {r.strides[r.unit]}; the kernel was "
                          f"built {unit.lower()}-major and needs it to be 1")  # fmt: skip
    for i, mode in enumerate(r.modes):
        if i not in (r.unit, r.zero) and r.extents[i] > 1 and (r.strides[i] * size) % ALIGN:
            raise LaunchError(f"{where}: stride along {mode} is {r.strides[i]} elements "
                              f"({r.strides[i] * size} bytes), not a multiple of 16 bytes")  # fmt: skip
    if r.tma:
        _check_extent(where, unit, r.extents[r.unit], r.dtype)


def _check_extent(where: str, mode: str, extent: int, dtype: str) -> None:
    size = ir.torch_dtype(dtype).itemsize
    if (extent * size) % ALIGN:
        raise LaunchError(f"{where}: {mode} = {extent} is not a multiple of {ALIGN // size} "
                          f"{dtype} elements (16 bytes), which TMA needs")  # fmt: skip


def _passed_strides(r: Role) -> tuple[int, int, int]:
    """The strides handed to the kernel: unit and broadcast modes fixed, size-1 modes 0."""
    out = [0 if r.extents[i] <= 1 else s for i, s in enumerate(r.strides)]
    out[r.unit] = 1
    if r.zero is not None:
        out[r.zero] = 0
    return (out[0], out[1], out[2])

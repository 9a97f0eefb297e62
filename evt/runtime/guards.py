"""What must hold before a kernel launches: a device fault cannot be recovered from, a refusal can.

`check(spec, infos)` is a pure function of the inputs' shapes, strides, dtypes, data pointers and
devices (`TensorInfo`), so it is tested without a GPU. It returns the `Problem` the launcher
passes to the kernel (M, N, K, L and 3 strides per input in CUTLASS mode order; a nested batch:
M, N, K, L1, L2 and 4 strides per tensor, (M, N, L1, L2) or (M, K, L1, L2)), or raises
`LaunchError` whose message is the reason (the dispatcher then runs the region unfused).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from evt import debug, ir
from evt.errors import LaunchError
from evt.runtime import reference

ALIGN = 16  # bytes: TMA base addresses and strides
# the first stride handed for a scalar load's 0-d tensor in host memory (a CPU scalar beside CUDA
# operands, as eager takes one): the launcher reads the value there and passes it in the kernel's
# parameters (`Sm90ScalarBroadcast`'s `scalars[0]`; a device scalar's strides are all 0)
HOST_SCALAR = 1
PADDED = "_evt_padded_rows"  # the attribute `copy_into_rows` marks its copies with


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    data_ptr: int
    device: str
    # evt's own copy with rows padded to whole 32-byte sectors (`copy_into_rows`): TMA may read the
    # 16-byte vector a row ends in, so an aux load's row extent need not be one
    padded: bool = False

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorInfo:
        return cls(tuple(t.shape), tuple(t.stride()), t.dtype, t.data_ptr(), str(t.device),
                   getattr(t, PADDED, False))  # fmt: skip


@dataclass(frozen=True)
class Role:
    """How the kernel reads one input: modes (e.g. M, K, L), their extents and strides."""

    what: str  # "A", "B", "aux load x", "row broadcast b", "col broadcast s"
    input: int
    dtype: str
    modes: tuple[str, ...]  # e.g. ("M", "K", "L"); a nested batch ("M", "K", "L1", "L2")
    extents: tuple[int, ...]
    strides: tuple[int, ...]
    unit: int  # the mode that must have unit stride
    zero: tuple[int, ...]  # broadcast modes (stride 0 by construction)
    tma: bool  # read through TMA: the unit mode must span whole 16-byte vectors


@dataclass(frozen=True)
class Problem:
    M: int
    N: int
    K: int
    L: int
    input_strides: tuple[int, ...]  # 3 per input (4 nested), CUTLASS mode order
    output_strides: tuple[int, ...] = ()  # 3 (4) per output (`KernelSpec.output_strides`), CUTLASS order
    nested: tuple[int, int] | None = None  # a nested batch's (L1, L2), L = L1 * L2

    @property
    def abi_shape(self) -> tuple[int, ...]:
        """The launcher's problem arguments: (M, N, K, L), or (M, N, K, L1, L2) nested."""
        return (self.M, self.N, self.K, *(self.nested or (self.L,)))


def output_strides(spec: ir.KernelSpec, M: int, N: int, L2: int = 1) -> tuple[int, ...]:
    """The (M, N, L) strides of each freshly allocated output: [L, M, N] row-major with rows
    padded to 32 bytes where they are not 16-byte multiples (`ir.row_pitch`), or a vector or scalar a reduction writes (stride 0
    along the reduced modes): `KernelSpec.output_strides` ((M, N, L1, L2) for a nested batch)."""
    return spec.output_strides(M, N, L2)


def static_reason(spec: ir.KernelSpec) -> str | None:
    """Why no kernel can run `spec` whatever the inputs, else None."""
    if spec.gemm.dtype == "f32":
        return tf32_reason(spec.gemm)
    for n in spec.nodes:
        if isinstance(n, ir.AuxStore) and n.major != "n":
            return f"aux store {n.name} is {n.major}-major; outputs are allocated N-major"
        if spec.gemm.nested and isinstance(n, ir.NOT_NESTED):
            return (f"{n.name}: a nested batch (L1 x L2) has no reductions over M yet; the "
                    "region runs unfused")  # fmt: skip
    return None


def tf32_reason(gemm: ir.Gemm) -> str | None:
    """Why an fp32 GEMM cannot run on TF32 tensor cores, else None. torch multiplies fp32 in
    TF32 only where `torch.get_float32_matmul_precision()` is not "highest" (its default), and
    WGMMA reads TF32 operands K-major only. The kernels compile (the nvcc tier) and pass their GPU
    tests (H100, session 9), but fp32 training steps ran slower with them than with torch.compile
    (H100, session 12: MLP 0.84x, GPT-2 block 0.93x under CUDA graphs): `EVT_TF32=1` opts in."""
    if torch.get_float32_matmul_precision() == "highest":
        return "fp32 needs TF32 kernels; torch.get_float32_matmul_precision() is 'highest'"
    if os.environ.get("EVT_TF32", "0") in ("", "0"):
        return ("TF32 kernels are opt-in (fp32 steps measured slower with them than with "
                "torch.compile): EVT_TF32=1 enables them")  # fmt: skip
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
    loads = scalar_inputs(spec)
    devices = {v.device.type for k, v in enumerate(values) if isinstance(v, torch.Tensor) and k not in loads}
    if "cpu" in devices and devices & {"cuda", "meta"}:
        return ("an input the kernel reads as a tensor is a CPU tensor beside CUDA operands; the "
                "kernel reads device memory")  # fmt: skip
    on_host = {k for k in loads if isinstance(values[k], torch.Tensor) and values[k].device.type == "cpu"}
    if not all(static_cuda(v) for k, v in enumerate(values) if k not in on_host):
        return None
    if reason := static_reason(spec):  # e.g. an fp32 GEMM (no TF32 kernels yet): never runs
        return reason
    infos = [TensorInfo(tuple(v.shape), tuple(v.stride()), v.dtype, 0, "cpu" if k in on_host else "cuda")
             for k, v in enumerate(values)]  # fmt: skip
    for n in spec.nodes:  # what `copy_into_rows` copies at launch, as the launch sees the copy
        if isinstance(n, ir.AuxLoad) and n.major == "n" and len(infos[n.input].shape) >= 2:
            infos[n.input] = _padded_info(infos[n.input])
    try:
        check(spec, infos, store_align=None)  # the heuristic builds a kernel for any N
    except LaunchError as e:
        return str(e)
    return None


def check(spec: ir.KernelSpec, infos: Sequence[TensorInfo], store_align: int | None = 0,
          pad_rows: bool = False) -> Problem:
    """The launch's `Problem`, or `LaunchError` with the reason. How the kernel stores its
    outputs: `store_align` a from registers a elements at a time (N a multiple of a;
    `TileConfig.store_align`), else through TMA: into padded rows (`ir.row_pitch`)
    with `pad_rows`, any N; without it each output's N a whole number of 16-byte vectors (the
    kernel checks the extent). None: whichever kernel the heuristic builds at this N (any N;
    the compile-time check)."""
    if len(infos) != spec.num_inputs:
        raise LaunchError(f"{len(infos)} inputs, the kernel takes {spec.num_inputs}")
    host = host_scalars(spec, infos)
    devices = {i.device for k, i in enumerate(infos) if k not in host}
    if len(devices) > 1:
        raise LaunchError(f"inputs on several devices: {sorted(devices)}")
    M, N, K, L = (int(x) for x in reference.problem_shape(spec, infos))  # type: ignore[arg-type]
    if min(M, N, K, L) <= 0:
        raise LaunchError(f"empty problem (M, N, K, L) = {(M, N, K, L)}")
    batch = tuple(int(x) for x in reference.batch_extents(spec, infos))
    roles = _roles(spec, infos, (M, N, K), batch)
    for n in spec.nodes:
        if isinstance(n, ir.ScalarLoad):
            _check_scalar(n, infos[n.input])
    none = (0,) * (4 if spec.gemm.nested else 3)
    strides = [none] * spec.num_inputs
    for k in host:
        strides[k] = (HOST_SCALAR,) + none[1:]
    for r in roles:
        _check_role(r, infos[r.input])
        passed = _passed_strides(r)
        if strides[r.input] != none and strides[r.input] != passed:
            raise LaunchError(f"input {r.input} is read in two roles with different strides")
        strides[r.input] = passed
    if store_align:
        if N % store_align:
            raise LaunchError(f"outputs: N = {N} is not a multiple of {store_align}, the elements "
                              "the kernel stores at a time")  # fmt: skip
    elif store_align is not None and not pad_rows:
        for i, dtype in enumerate(spec.output_dtypes()):
            _check_extent(f"output {i}", "N", N, dtype)
    inputs = tuple(s for t in strides for s in t)
    nested = (batch[0], batch[1]) if spec.gemm.nested else None
    return Problem(M, N, K, L, inputs, output_strides(spec, M, N, batch[-1]), nested)


def scalar_inputs(spec: ir.KernelSpec) -> set[int]:
    """The inputs the kernel reads as 0-d tensors (`ir.ScalarLoad`)."""
    return {n.input for n in spec.nodes if isinstance(n, ir.ScalarLoad)}


def host_scalars(spec: ir.KernelSpec, infos: Sequence[TensorInfo]) -> set[int]:
    """The scalar loads' inputs in host memory beside device operands (passed by value)."""
    loads = scalar_inputs(spec)
    on_device = any(i.device != "cpu" for k, i in enumerate(infos) if k not in loads)
    return {k for k in loads if on_device and infos[k].device == "cpu"} if loads else set()


def _check_scalar(n: ir.ScalarLoad, t: TensorInfo) -> None:
    """A scalar load reads one element of its dtype through a plain pointer (no TMA), or takes
    its value from host memory at launch."""
    where = f"input {n.input} (scalar load {n.name})"
    if t.shape != ():
        raise LaunchError(f"{where} has shape {list(t.shape)}; the kernel reads a 0-d tensor")
    if t.dtype != ir.torch_dtype(n.dtype):
        raise LaunchError(f"{where} is {t.dtype}; the kernel was built for {n.dtype}")
    if t.device != "cpu" and t.data_ptr % t.dtype.itemsize:
        raise LaunchError(f"{where}: data pointer not aligned to its {t.dtype.itemsize} bytes")


def _roles(spec: ir.KernelSpec, infos: Sequence[TensorInfo], mnk, batch) -> list[Role]:
    M, N, K = mnk
    g = spec.gemm
    a, b = infos[g.a.input], infos[g.b.input]
    dims = (3, 4) if g.nested else (3,) if g.batched else (2,)
    _expect_dim(a, dims, "A", g.a.input)
    _expect_dim(b, dims, "B", g.b.input)
    s_a = _logical(a, g.a.transposed)
    s_b = _logical(b, g.b.transposed)[::-1]  # CUTLASS's B is N x K
    b_ext = _logical_shape(b, g.b.transposed)[::-1]
    l_a, l_b = _batch_strides(a, g, batch), _batch_strides(b, g, batch)
    if b_ext != (N, K) or l_b is None:
        raise LaunchError(f"input {g.b.input} (B) has shape {b.shape}; A implies K={K}, "
                          f"L={' x '.join(map(str, batch))}")  # fmt: skip
    if l_a is None:
        raise LaunchError(f"input {g.a.input} (A) has shape {a.shape}; B implies L={batch}")
    if g.nested and any(e > 1 and 0 in (sa, sb) for e, sa, sb in zip(batch, l_a, l_b)):
        raise LaunchError("an operand has L stride 0 in a nested batch (an expanded batch); "
                          "the kernel needs real batch strides")  # fmt: skip
    ls = _batch_modes(g)
    roles = [
        Role("A", g.a.input, g.dtype, ("M", "K", *ls), (M, K, *batch), (*s_a, *l_a),
             "mk".index(g.a.major), (), True),
        Role("B", g.b.input, g.dtype, ("N", "K", *ls), (N, K, *batch), (*s_b, *l_b),
             "nk".index(g.b.major), (), True),
    ]  # fmt: skip
    for n in spec.nodes:
        if isinstance(n, (ir.AuxLoad, ir.RowBroadcast, ir.ColBroadcast)):
            roles.append(_load_role(n, infos[n.input], (M, N), batch, g))
    return roles


def _batch_modes(g: ir.Gemm) -> tuple[str, ...]:
    return ("L1", "L2") if g.nested else ("L",)


def _batch_strides(t: TensorInfo, g: ir.Gemm, batch) -> tuple[int, ...] | None:
    """The strides of a batched tensor's batch modes: (L,) ((0,) unbatched), or a nested
    batch's (L1, L2), from [L1, L2, ...] or from [L1 * L2, ...] (L1 steps L2 of its L stride);
    None where its batch is not `batch`."""
    if not g.batched:
        return (0,)
    if g.nested and len(t.shape) == 4:
        return tuple(t.stride[:2]) if tuple(t.shape[:2]) == batch else None
    if t.shape[0] != math.prod(batch):
        return None
    return (t.stride[0] * batch[1], t.stride[0]) if g.nested else (t.stride[0],)


def _load_role(n, t: TensorInfo, mn, batch, g: ir.Gemm) -> Role:
    M, N = mn
    ext, modes, flat = (M, N, *batch), ("M", "N", *_batch_modes(g)), (0,) * len(batch)
    if isinstance(n, ir.AuxLoad):
        s_l = flat if n.broadcast_l else _aux_batch_strides(n, t, (M, N), batch, g)
        s_m, s_n = t.stride[-2:] if len(t.shape) >= 2 else (0, 0)
        zero = tuple(range(2, len(ext))) if n.broadcast_l else ()
        role = Role(f"aux load {n.name}", n.input, n.dtype, modes, ext, (s_m, s_n, *(s_l or flat)),
                    "mn".index(n.major), zero, True)  # fmt: skip
        ok = s_l is not None
    elif isinstance(n, ir.RowBroadcast):
        ok = len(t.shape) >= 1 and t.shape[-1] == N and math.prod(t.shape[:-1]) == 1
        role = Role(f"row broadcast {n.name}", n.input, n.dtype, modes, ext,
                    (0, t.stride[-1] if t.shape else 0, *flat), 1, (0,), False)  # fmt: skip
    else:  # an M-vector stored as [M] or [..., M, 1]
        ok = t.shape == (M,) or (len(t.shape) >= 2 and t.shape[-2:] == (M, 1)
                                 and math.prod(t.shape[:-2]) == 1)  # fmt: skip
        s_m = t.stride[0] if len(t.shape) == 1 else t.stride[-2] if t.shape else 0
        role = Role(
            f"col broadcast {n.name}", n.input, n.dtype, modes, ext, (s_m, 0, *flat), 0, (1,), False
        )
    if not ok:
        raise LaunchError(f"input {n.input} ({role.what}) has shape {t.shape}; "
                          f"(M, N, {', '.join(modes[2:])}) = {ext}")  # fmt: skip
    return role


def _aux_batch_strides(n: ir.AuxLoad, t: TensorInfo, mn, batch, g: ir.Gemm):
    """An aux tensor's batch strides, or None where its shape does not fit: [M, N] (read by
    every batch: `broadcast_l`; or unbatched), or [L, M, N] (a nested batch also [L1, L2, M, N])
    with real batch strides (a stride-0 L needs the kernel built with a static zero:
    `broadcast_l`)."""
    if n.broadcast_l:
        return (0,) * len(batch) if t.shape in (mn, (1, *mn)) else None
    if not g.batched:
        return (0,) if t.shape == mn else None
    if tuple(t.shape[-2:]) != mn or len(t.shape) not in ((3, 4) if g.nested else (3,)):
        return None
    strides = _batch_strides(t, g, batch)
    if strides is None or any(e > 1 and s == 0 for e, s in zip(batch, strides)):
        return None
    return strides


def _logical_shape(t: TensorInfo, transposed: bool) -> tuple[int, int]:
    rows, cols = t.shape[-2:]
    return (cols, rows) if transposed else (rows, cols)


def _logical(t: TensorInfo, transposed: bool) -> tuple[int, int]:
    rows, cols = t.stride[-2:]
    return (cols, rows) if transposed else (rows, cols)


def _expect_dim(t: TensorInfo, dims: tuple[int, ...], what: str, index: int) -> None:
    if len(t.shape) not in dims:
        raise LaunchError(f"input {index} ({what}) has shape {t.shape}, expected "
                          f"{' or '.join(map(str, dims))} dims")  # fmt: skip


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
        if i != r.unit and i not in r.zero and r.extents[i] > 1 and (r.strides[i] * size) % ALIGN:
            raise LaunchError(f"{where}: stride along {mode} is {r.strides[i]} elements "
                              f"({r.strides[i] * size} bytes), not a multiple of 16 bytes")  # fmt: skip
    if r.tma and not t.padded:
        _check_extent(where, unit, r.extents[r.unit], r.dtype)


def _check_extent(where: str, mode: str, extent: int, dtype: str) -> None:
    size = ir.torch_dtype(dtype).itemsize
    if (extent * size) % ALIGN:
        raise LaunchError(f"{where}: {mode} = {extent} is not a multiple of {ALIGN // size} "
                          f"{dtype} elements (16 bytes), which TMA needs")  # fmt: skip


def _passed_strides(r: Role) -> tuple[int, ...]:
    """The strides handed to the kernel: unit and broadcast modes fixed, size-1 modes 0."""
    out = [0 if r.extents[i] <= 1 else s for i, s in enumerate(r.strides)]
    out[r.unit] = 1
    for i in r.zero:
        out[i] = 0
    return tuple(out)


def copy_into_rows(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
    """`inputs` with each one the kernel reads along its last dimension (A, B, an N-major aux
    load) but cannot read as it is replaced by a copy into rows padded to whole 32-byte sectors
    (`ir.row_pitch`), marked so the guards waive the row extent for it; None where every input
    is readable as it is. Two kinds need it:

    - aux rows TMA cannot read (rows that are not whole 16-byte vectors, strides or a base
      address off 16 bytes: ViT's 197 x 197 bool attention mask). An [M, N] mask every batch
      reads costs one small kernel a call, where leaving its `where` outside the region costs a
      pass over the whole [L, M, N] output;
    - an input whose last dimension is not unit-stride, though the graph the kernel was built
      from had it so: Inductor may lay out a value it computes in another order than the graph's
      (PatchTST's BatchNorm backward reached the dgrad GEMM's A column-major where nothing
      constrained the op's list of inputs; `evt.graph.record_input_layouts` does now, under
      Inductor). One copy instead of the unfused path.

    The copies run on the current stream before the kernel; the C++ launch path makes the same
    ones (its plan's pads)."""
    out = None
    for index, what, aux in _row_major_inputs(spec):
        t = inputs[index]
        if t.dim() < 2 or getattr(t, PADDED, False) or (out is not None and out[index] is not t):
            continue
        strided = _turned(t)
        if not strided and (not aux or _readable(TensorInfo.of(t))):
            continue
        if strided and (spec.name, index) not in RELAID:
            RELAID.add((spec.name, index))
            debug.log(1, f"{spec.name}: input {index} ({what}) arrived with strides {tuple(t.stride())}, its "
                      "last dimension not unit-stride as in the graph; copied into rows before each launch")
        pitch = ir.row_pitch(t.shape[-1], ir.dtype_name(t.dtype))
        padded = torch.empty((*t.shape[:-1], pitch), dtype=t.dtype, device=t.device)[..., : t.shape[-1]]
        padded.copy_(t)
        setattr(padded, PADDED, True)
        out = list(inputs) if out is None else out
        out[index] = padded
    return out


# (region, input) copied into rows because it arrived against the layout the kernel was built
# for, each reported once by EVT_DEBUG=1 (`dispatch.reset` clears it; tests read it)
RELAID: set[tuple[str, int]] = set()


def against_layout(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor]) -> list[str]:
    """The inputs the kernel reads along their last dimension that arrived with it not
    unit-stride, as "input i (role) with strides (...)": laid out against the kernel
    (`copy_into_rows` copies them and records them in `RELAID`)."""
    return [f"input {i} ({what}) with strides {tuple(inputs[i].stride())}"
            for i, what, _ in _row_major_inputs(spec) if inputs[i].dim() >= 2 and _turned(inputs[i])]


def _turned(t: torch.Tensor) -> bool:
    return t.shape[-1] > 1 and t.stride(-1) != 1


def _row_major_inputs(spec: ir.KernelSpec) -> list[tuple[int, str, bool]]:
    """(input, role, whether an aux load) of each input the kernel reads with unit stride along
    the tensor's last dimension: A k-major ([M, K]) or transposed m-major ([K, M]), B n-major
    ([K, N]) or transposed k-major ([N, K]), N-major aux loads ([M, N])."""
    g = spec.gemm
    out = []
    if (g.a.major == "k") != g.a.transposed:
        out.append((g.a.input, "A", False))
    if (g.b.major == "n") != g.b.transposed:
        out.append((g.b.input, "B", False))
    out += [(n.input, f"aux load {n.name}", True) for n in spec.nodes if isinstance(n, ir.AuxLoad) and n.major == "n"]
    return out


def _padded_info(t: TensorInfo) -> TensorInfo:
    """`t` as `copy_into_rows` would copy it where TMA cannot read it as it is."""
    if _readable(t):
        return t
    pitch = ir.row_pitch(t.shape[-1], ir.dtype_name(t.dtype))
    strides = [1]
    for sz in reversed((*t.shape[:-1], pitch)[1:]):
        strides.insert(0, strides[0] * sz)
    return TensorInfo(t.shape, tuple(strides), t.dtype, t.data_ptr, t.device, padded=True)


def _readable(t: TensorInfo) -> bool:
    """Whether TMA reads `t` as it is: a 16-byte base, strides and row extent (anything not
    N-major counts as readable here: the guards decide, an M-major aux load is not copied)."""
    size, n = t.dtype.itemsize, t.shape[-1]
    if n > 1 and t.stride[-1] != 1:
        return True
    if t.data_ptr % ALIGN or (n * size) % ALIGN:
        return False
    return all((st * size) % ALIGN == 0 for sz, st in zip(t.shape[:-1], t.stride[:-1]) if sz > 1)

"""Load a compiled kernel with ctypes and launch it on the current CUDA stream.

The library's ABI (rendered by `evt.codegen.emit`):

    int    evt_<name>_run(inputs, input_strides, outputs, output_strides, M, N, K, L,
                          tile_order, workspace, workspace_bytes, stream)   // 0 = success
    size_t evt_<name>_workspace(M, N, K, L, tile_order)
    char const* evt_<name>_signature()

The tile order (`TileOrder`: the persistent scheduler's raster order, 0 CUTLASS's choice, 1 along
M, 2 along N, and swizzle 0 evt's choice per problem, 1/2/4/8; passed as raster + 4 * swizzle) is
an argument of every launch: one binary runs every order. A kernel launches 0:0 (`auto_swizzle`
in evt/templates/evt_launch.h) unless its `tile_order` function says otherwise per problem
(max-autotune's choice, `evt.runtime.dispatch`) or its waves would read more operand bytes than
DRAM serves (`evt.codegen.wave_traffic`: a swizzle then, decided here at each problem).

A kernel with a nested batch (L = L1 x L2) takes `L1, L2` where the others take `L`, and 4
strides per tensor (M, N, L1, L2) where the others take 3.

A launch allocates its outputs and workspace from torch's caching allocator, enqueues the kernel on
`torch.cuda.current_stream()` and never synchronizes, so a step stays capturable in CUDA graphs.
"""

from __future__ import annotations

import ctypes
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import torch

from evt import debug, ir
from evt.codegen import wave_traffic
from evt.codegen.config import SM_COUNT, TileConfig
from evt.errors import CodegenError, LaunchError
from evt.runtime import cache as kernel_cache
from evt.runtime import guards

RETURN_CODES = {
    -1: "Gemm::can_implement rejected the problem",
    -2: "a stride contradicts the kernel's static (unit or zero) strides",
    -3: "the workspace is too small",
    -4: "no current CUDA device",
    -5: "a statistic's finishing kernel failed to launch",
    -6: "the tile order is out of range",
}
_I, _P = ctypes.c_int, ctypes.c_void_p
RUN_ARGTYPES = [_P, _P, _P, _P, _I, _I, _I, _I, _I, _P, ctypes.c_size_t, _P]
RUN_ARGTYPES_NESTED = [_P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _P, ctypes.c_size_t, _P]
SWIZZLES = (0, 1, 2, 4, 8)


@dataclass(frozen=True)
class TileOrder:
    """The persistent tile scheduler's raster order (0: CUTLASS's choice, 1: along M, 2: along N)
    and swizzle (0: evt's choice per problem, 1, 2, 4 or 8 tiles), written `raster:swizzle`."""

    raster: int = 0
    swizzle: int = 0

    def __post_init__(self):
        if self.raster not in (0, 1, 2) or self.swizzle not in SWIZZLES:
            raise LaunchError(f"tile order {self.raster}:{self.swizzle}: the raster order is 0 "
                              "(CUTLASS's choice), 1 (along M) or 2 (along N), the swizzle 0 "
                              "(evt's choice), 1, 2, 4 or 8")  # fmt: skip

    @property
    def code(self) -> int:
        """What the ABI takes: raster + 4 * swizzle."""
        return self.raster + 4 * self.swizzle

    @property
    def label(self) -> str:
        return f"{self.raster}:{self.swizzle}"

    @classmethod
    def from_code(cls, code: int) -> TileOrder:
        """The order whose ABI code (`code`) is `code`."""
        return cls(code % 4, code // 4)

    @classmethod
    def from_label(cls, text: str) -> TileOrder:
        raster, _, swizzle = text.strip().partition(":")
        try:
            return cls(int(raster), int(swizzle))
        except ValueError:
            raise LaunchError(f"tile order {text!r}: write RASTER:SWIZZLE, e.g. 0:2") from None


EVT_ORDER = TileOrder()  # 0:0, what a launch takes unless told otherwise


@dataclass(frozen=True)
class Library:
    path: Path
    name: str  # the C name: evt_<name>_run
    handle: ctypes.CDLL
    run: Any
    workspace: Any
    nested: bool = False  # its ABI takes a nested batch's L1, L2 (and 4 strides per tensor)
    config: TileConfig | None = None  # what it was built with (its signature says; None: unknown)

    @property
    def store_align(self) -> int:
        """Outputs stored from registers, so many elements at a time (0: through TMA)."""
        return self.config.store_align if self.config else 0

    @property
    def pad_rows(self) -> bool:
        """TMA stores into padded rows of any N (`TileConfig.pad_rows`)."""
        return bool(self.config and self.config.pad_rows)

    @property
    def any_row_length(self) -> bool:
        """Outputs of any N: TMA stores into padded rows (`pad_rows`), or the epilogue threads'
        own stores from shared memory (`TileConfig.staged_stores`)."""
        return self.pad_rows or bool(self.config and self.config.staged_stores)


_libraries: dict[str, Library] = {}
_lock = threading.Lock()


def load(path: Path) -> Library:
    """The library at `path` (a cache entry), loaded once per process."""
    with _lock:
        if str(path) not in _libraries:
            _libraries[str(path)] = _load(Path(path))
        return _libraries[str(path)]


def _load(path: Path) -> Library:
    try:
        meta = json.loads((path.parent / kernel_cache.META).read_text())
        name = meta["name"]
        handle = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        run, workspace, signature = (
            getattr(handle, f"evt_{name}_{fn}") for fn in ("run", "workspace", "signature")
        )
    except (OSError, ValueError, KeyError, AttributeError) as e:
        raise LaunchError(f"cannot load kernel library {path}: {e}") from e
    signature.argtypes, signature.restype = [], ctypes.c_char_p
    got = signature().decode()
    if meta.get("signature") and got != meta["signature"]:
        raise LaunchError(f"{path} says it is {got!r}, its cache entry says {meta['signature']!r}")
    nested = _nested(got)
    run.argtypes, run.restype = RUN_ARGTYPES_NESTED if nested else RUN_ARGTYPES, ctypes.c_int
    workspace.argtypes, workspace.restype = [_I] * (6 if nested else 5), ctypes.c_size_t
    return Library(path, name, handle, run, workspace, nested, _config(got))


def _nested(signature: str) -> bool:
    """Whether the library's kernel has a nested batch (its ABI takes L1, L2): from the spec
    its signature carries (`evt.codegen.emit.signature`: name;config;spec JSON). A signature
    without one is flat; `Kernel` checks the answer against its own spec before any launch."""
    parts = signature.split(";", 2)
    try:
        return len(parts) == 3 and ir.from_json(parts[2]).gemm.nested
    except (ValueError, KeyError, TypeError):
        return False


def _config(signature: str) -> TileConfig | None:
    """The tile config the library's kernel was built with, from the label its signature
    carries (None where it carries none)."""
    parts = signature.split(";", 2)
    try:
        return TileConfig.from_label(parts[1]) if len(parts) == 3 else None
    except CodegenError:
        return None


def current_device() -> int:
    """The current CUDA device's index, -1 without CUDA."""
    return torch.cuda.current_device() if torch.cuda.is_available() else -1


def sm_count() -> int:
    """SMs of the current CUDA device (the persistent grid's width; `SM_COUNT` without one)."""
    return _sm_count(torch.cuda.current_device()) if torch.cuda.is_available() else SM_COUNT


@cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@cache
def capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def check_device(tensors: Sequence[torch.Tensor]) -> None:
    """All tensors on one SM90 CUDA device but 0-d CPU tensors, which a scalar load takes by value
    (`guards.check` refuses them anywhere else). Tests on CPU replace this function."""
    devices = {t.device for t in tensors if t.dim() or t.device.type != "cpu"} or {tensors[0].device}
    if len(devices) != 1:
        raise LaunchError(f"inputs on several devices: {sorted(map(str, devices))}")
    (device,) = devices
    if device.type != "cuda":
        raise LaunchError(f"inputs on {device}; kernels run on CUDA")
    major, minor = capability(device.index if device.index is not None else 0)
    if (major, minor) != (9, 0):
        raise LaunchError(f"{device} is sm_{major}{minor}; the kernels are built for sm_90a")


def fingerprint(inputs: Sequence[torch.Tensor]) -> tuple:
    """Everything the guards read about the inputs; alignment only as `data_ptr % 16`."""
    return tuple(
        (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % guards.ALIGN, getattr(t, guards.PADDED, False))
        for t in inputs
    )


@dataclass(frozen=True)
class Kernel:
    """A region's kernel: `kernel(inputs) -> outputs`, guarded before every launch.

    Guard verdicts are remembered per input fingerprint (shapes, strides, dtypes, devices,
    pointer alignment), so a training step pays for the full checks once per new layout.
    `tile_order(problem)` is the tile order of its launches at each problem (None: `EVT_ORDER`),
    asked once per problem."""

    spec: ir.KernelSpec
    library: Library
    tile_order: Callable[[guards.Problem], TileOrder] | None = field(default=None, compare=False)
    _passed: dict = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)
    _plans: dict = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)

    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return self.launch(self.guard(inputs), inputs)

    def guard(self, inputs: Sequence[torch.Tensor]) -> guards.Problem:
        key = fingerprint(inputs)
        problem = self._passed.get(key)
        if problem is None:
            check_device(inputs)
            infos = [guards.TensorInfo.of(t) for t in inputs]
            problem = guards.check(self.spec, infos, self.library.store_align, self.library.any_row_length)
            if len(self._passed) < 1024:
                self._passed[key] = problem
        return problem

    def named(self, spec: ir.KernelSpec) -> Kernel:
        """This kernel as the region `spec` (another of its signature) calls it: named after that
        region, sharing its guard verdicts and launch plans (`dataclasses.replace` alone would
        start both afresh, and `evt.runtime.dispatch.planned` would never see the plans)."""
        out = replace(self, spec=spec)
        object.__setattr__(out, "_passed", self._passed)
        object.__setattr__(out, "_plans", self._plans)
        return out

    def ordered(self, order: TileOrder) -> Kernel:
        """This kernel launching every problem in `order` (its guards and plans start afresh)."""
        return replace(self, tile_order=lambda p: order)

    def output_shapes(self, p: guards.Problem) -> list[tuple[int, ...]]:
        return self.spec.output_shapes(p.M, p.N, p.L)

    def launch(self, p: guards.Problem, inputs: Sequence[torch.Tensor], outputs=None):
        """Enqueue the kernel; `outputs` (laid out as `KernelSpec.output_layouts`, e.g.
        NaN-poisoned by a test) or fresh ones."""
        device = inputs[self.spec.gemm.a.input].device  # (a scalar load may be a CPU tensor)
        if device.type == "cuda" and device.index != torch.cuda.current_device():
            with torch.cuda.device(device):  # the launcher launches on the current device, and
                return self.launch(p, inputs, outputs)  # the plan is that device's
        plan = self.plan(p)
        empty = _empty_strided(device)
        if outputs is None:
            outputs = [allocate(empty, *o) for o in plan.outputs]
        else:
            _check_outputs(outputs, *zip(*plan.outputs), device)
        ws = plan.workspace_bytes
        workspace = empty((ws,), (1,), torch.uint8) if ws else None
        rc = self.library.run(
            _pointers(inputs), plan.input_strides, _pointers(outputs), plan.output_strides,
            *p.abi_shape, plan.tile_order, None if workspace is None else workspace.data_ptr(), ws,
            stream_handle(device),
        )  # fmt: skip
        if rc != 0:
            why = RETURN_CODES.get(rc, f"cutlass::Status {rc}")
            raise LaunchError(f"kernel {self.library.name} (region {self.spec.name}): {why}")
        return outputs

    def plan(self, p: guards.Problem) -> LaunchPlan:
        """What a launch at problem `p` on the current device needs besides the tensors (also
        what the C++ launch path is handed), computed once per problem and device: its swizzle
        and workspace follow the device's SM count."""
        key = (p, current_device())
        return self._plans.get(key) or self._plan(p, key)

    def plans(self) -> list[tuple[guards.Problem, LaunchPlan]]:
        """The problems this kernel planned a launch for, with their plans (one per device)."""
        return [(p, plan) for (p, _), plan in self._plans.items()]

    def resolve(self, order: TileOrder, p: guards.Problem) -> TileOrder:
        """`order` with evt's choices made explicit where the waves' operand traffic calls for
        them (`wave_traffic.launch_order`): its swizzle 0 (evt's choice), and in evt's own order
        (0:0) the raster order too; else as it is (the kernel's `auto_swizzle`, CUTLASS's
        raster heuristic)."""
        if order.swizzle or self.library.config is None or self.spec.gemm.nested:
            return order
        cfg, size = self.library.config, ir.torch_dtype(self.spec.gemm.dtype).itemsize
        r, s, why = wave_traffic.launch_order(cfg, p.M, p.N, p.K, p.L, sm_count(), order.raster, size)
        if (r, s) == (order.raster, 0):
            return order
        debug.log(1, f"region {self.spec.name}: tile order {r}:{s} at (M, N, K, L) = "
                     f"{(p.M, p.N, p.K, p.L)}: {why} (evt.codegen.wave_traffic)")  # fmt: skip
        return TileOrder(r, s)

    def _plan(self, p: guards.Problem, key: tuple) -> LaunchPlan:
        if self.library.nested != self.spec.gemm.nested:
            raise LaunchError(f"kernel {self.library.name} (region {self.spec.name}): its library "
                              f"{'has' if self.library.nested else 'has no'} nested batch, the "
                              "region's spec disagrees")  # fmt: skip
        dtypes = [ir.torch_dtype(d) for d in self.spec.output_dtypes()]
        layouts = self.spec.output_layouts(p.M, p.N, p.L)
        order = self.resolve(self.tile_order(p) if self.tile_order else EVT_ORDER, p).code
        plan = LaunchPlan(
            outputs=tuple((shape, strides, d, ir.padded_storage(shape, strides))
                          for (shape, strides), d in zip(layouts, dtypes)),  # fmt: skip
            input_strides=_int64s(p.input_strides),
            output_strides=_int64s(p.output_strides),
            workspace_bytes=int(self.library.workspace(*p.abi_shape, order)),
            tile_order=order,
        )
        if len(self._plans) < 1024:
            self._plans[key] = plan
        return plan


@dataclass(frozen=True)
class LaunchPlan:
    # (shape, strides, torch dtype, `ir.padded_storage`) per output (`KernelSpec.output_layouts`)
    outputs: tuple
    input_strides: ctypes.Array  # the ABI's int64 arrays, built once
    output_strides: ctypes.Array
    workspace_bytes: int
    tile_order: int = 0  # TileOrder.code


def stream_handle(device: torch.device) -> int | None:
    """The current stream's cudaStream_t (what Inductor's generated code reads, without building
    a torch.cuda.Stream object)."""
    if device.type != "cuda":
        return None
    return torch._C._cuda_getCurrentRawStream(device.index if device.index is not None else 0)


def _empty_strided(device: torch.device):
    """`empty(size, stride, dtype)` on `device`: on CUDA the allocator entry Inductor's generated
    code calls (a third of `torch.empty`'s host time, per output and per launch) when this torch
    has it; it allocates on the current device, which `Kernel.launch` made the inputs' own."""
    if device.type == "cuda":
        fast = getattr(torch._C._dynamo.guards, "_empty_strided_cuda", None)
        if fast is not None:
            return fast
    return lambda size, stride, dtype: torch.empty_strided(size, stride, dtype=dtype, device=device)


def allocate(empty, shape: tuple, strides: tuple, dtype: torch.dtype, full: int) -> torch.Tensor:
    """An output of `shape` and `strides` from `empty(size, stride, dtype)`; padded rows get
    their whole storage, `full` elements (`ir.padded_storage`; 0: not padded)."""
    return empty((full,), (1,), dtype).as_strided(shape, strides) if full else empty(shape, strides, dtype)


def _check_outputs(outputs, shapes, strides, dtypes, fulls, device) -> None:
    for i, (o, shape, stride, dtype, full) in enumerate(
        zip(outputs, shapes, strides, dtypes, fulls, strict=True)
    ):
        ok = tuple(o.shape) == shape and o.dtype == dtype and o.device == device
        room = o.untyped_storage().nbytes() // o.element_size() - o.storage_offset()
        if not (ok and ir.has_strides(o, stride) and o.data_ptr() % guards.ALIGN == 0 and room >= full):
            raise LaunchError(f"output {i} must be a 16-byte aligned {shape} {dtype} tensor with "
                              f"strides {stride} on {device} (`KernelSpec.output_layouts`; padded "
                              f"rows: storage for {full} elements, `ir.padded_storage`), got "
                              f"{tuple(o.shape)} {o.dtype} with strides {o.stride()} on {o.device}")  # fmt: skip


def _pointers(tensors: Sequence[torch.Tensor]) -> ctypes.Array:
    return (ctypes.c_void_p * len(tensors))(*(t.data_ptr() for t in tensors))


def _int64s(values: Sequence[int]) -> ctypes.Array:
    return (ctypes.c_int64 * len(values))(*values)

"""Choose how a region runs: its compiled CUTLASS kernel on an SM90 GPU, else the reference path.

On CPU tensors the reference path is the design (no warning). On CUDA, every failure on the way to
a launch (render, compile, load, guard, launch) runs the region through the reference path, which
is exactly the unfused computation, with one warning per region naming the stage and the reason.

Stages: spec (static reasons such as fp32) -> device -> render -> compile -> load -> guard ->
launch. Render, compile and load happen once per kernel signature and process; their outcome,
success or failure, is remembered. Guard and launch depend on the call's tensors.

Test hooks: `INJECT[stage] = message` (or `EVT_INJECT="stage[:message],..."`) makes a stage fail;
`use_kernels` decides whether inputs take the kernel path; `COMPILE_FN` replaces nvcc.
`EVT_VERIFY=1` compares every launch with the reference path (`evt.runtime.verify`).

`EVT_WAIT_KERNELS=0`: a region whose kernel is still building runs its reference path instead of
waiting for nvcc, and launches the kernel from the first call after the build ends (`BUILDING`
counts those calls). The first step then comes at Inductor's pace, not at nvcc's (~40 s a
kernel); the steps before the switch are slower and round like eager, so it is opt-in. It
waits anyway while a CUDA graph is being captured (the graph would keep the reference path)
and under `torch.use_deterministic_algorithms(True)` (the switch's step depends on timing).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import Future

import torch

from evt import debug, ir
from evt.codegen.config import TileConfig, heuristic
from evt.errors import CompileError, EvtError, LaunchError
from evt.runtime import build, fast, guards, launch, reference, verify
from evt.runtime.canonical import canonical

STAGES = ("spec", "device", "render", "compile", "load", "guard", "launch")
INJECT: dict[str, str] = {}  # stage -> message: make that stage fail (tests)
COMPILE_FN: build.CompileFn | None = None  # None: nvcc
FALLBACKS: dict[str, str] = {}  # region name -> why it ran unfused (read by evt.explain)
LAUNCHES: collections.Counter = collections.Counter()  # region name -> launches from Python (`launches()` adds C++)
BUILDING: collections.Counter = collections.Counter()  # region name -> calls run on the reference
# path while its kernel built (`EVT_WAIT_KERNELS=0`)

_kernels: dict[str, launch.Kernel | EvtError] = {}  # canonical signature -> kernel or why not
_configs: dict[str, TileConfig] = {}  # canonical signature -> the tile config it is built with
# (canonical signature, config label, (M, N, K, L)) -> the tile order its launches take there
_orders: dict[tuple[str, str, tuple[int, int, int, int]], launch.TileOrder] = {}
# canonical signature -> (config, problem) max-autotune chose and timed it at in this process
_autotuned: dict[str, tuple[TileConfig, tuple[int, int, int, int]]] = {}
_ready: dict[int, launch.Kernel] = {}  # id(spec) -> its kernel, after one successful launch
_builds: dict[str, Future] = {}  # canonical signature -> its build (`EVT_WAIT_KERNELS=0`)
_lock = threading.Lock()


class StageFailed(EvtError):
    """A stage on the way to a launch failed; the message is the reason the warning gives."""

    def __init__(self, stage: str, cause: BaseException):
        what = str(cause).removeprefix("evt: ")
        what = what if isinstance(cause, EvtError) else f"{type(cause).__name__}: {what}"
        super().__init__(what if stage == "spec" else f"{stage} failed: {what}")
        self.stage = stage


def use_kernels(inputs: Sequence[torch.Tensor]) -> bool:
    """Whether the inputs take the kernel path (tests force it on CPU tensors)."""
    return any(t.is_cuda for t in inputs)


_reference_only = 0  # > 0 inside `reference_only()` (process-wide: CUDA backwards run on
# the autograd engine's own threads)


@contextlib.contextmanager
def reference_only() -> Iterator[None]:
    """Inside, every region runs its reference path: no kernel is waited for or launched, while
    compiling still starts each region's build (`prefetch`). The bench's prebuild captures a case
    on its own device this way, at full size, without waiting for one kernel at a time."""
    global _reference_only
    with _lock:
        _reference_only += 1
        fast.set_enabled(False)
    try:
        yield
    finally:
        with _lock:
            _reference_only -= 1
            fast.set_enabled(_reference_only == 0)


_no_prefetch = 0  # > 0 inside `no_prefetch()`


@contextlib.contextmanager
def no_prefetch() -> Iterator[None]:
    """Inside, compiling starts no kernel build (`prefetch` returns None): for capturing what a
    program's regions are without building them (the model fuzzer's scan for seeds whose
    regions compute an op, on the GPU machine: it started 104 builds for 180 seeds it then
    dropped, session 49)."""
    global _no_prefetch
    with _lock:
        _no_prefetch += 1
    try:
        yield
    finally:
        with _lock:
            _no_prefetch -= 1


def prefetch(spec: ir.KernelSpec, problem: tuple[int, int, int, int] | None = None) -> Future | None:
    """Start building `spec`'s kernel in the background if this process can run it (an SM90 GPU
    and no static reason against it); the backend calls this while it lowers regions, with the
    problem shape (M, N, K, L) the graph expects, which picks the tile config."""
    return build_for(spec, problem) if sm90_available() and not _no_prefetch else None


def build_for(spec: ir.KernelSpec, problem: tuple[int, int, int, int] | None = None) -> Future | None:
    """`prefetch` without asking for a GPU (nvcc needs none): the kernel this process would build
    for `spec` at `problem`, None where a static reason stands against it
    (`scripts/kernel_pack.py build --tests` builds a GPU test module's kernels with it)."""
    if guards.static_reason(spec):
        return None
    return build.prefetch(spec, config_for(spec, problem), compile_fn=COMPILE_FN)


def prefetch_for(spec: ir.KernelSpec, values: Sequence) -> tuple[int, int, int, int] | None:
    """`prefetch` at the problem shape `values` (a call's fake or real inputs) give; returns that
    shape, None where a size has no hint (the kernel then gets the shape-blind default)."""
    try:
        problem = problem_hint(spec, values)
    except Exception:  # noqa: BLE001 - no hint
        problem = None
    prefetch(spec, problem)
    return problem


def config_for(spec: ir.KernelSpec, problem: tuple[int, int, int, int] | None) -> TileConfig | None:
    """The tile config of `spec`'s kernel in this process: chosen once per kernel signature, by
    `evt.codegen.config.heuristic` at the first problem shape seen (later shapes reuse the
    binary); None (the shape-blind default) while no shape is known."""
    sig = _identity(spec)
    with _lock:
        if sig not in _configs and problem is not None:
            chosen = _tuned(spec, problem) or next(iter(heuristic(spec, *problem)), None)
            if chosen is not None:  # none fits: the default config's CodegenError says why
                _configs[sig] = chosen
                debug.log(1, f"region {spec.name}: tile config {chosen.label} for "
                             f"(M, N, K, L) = {tuple(problem)}")  # fmt: skip
        return _configs.get(sig)


def _tuned(spec: ir.KernelSpec, problem) -> TileConfig | None:
    """max-autotune's cached choice for `spec` at `problem`, if a run measured one."""
    from evt.runtime import autotune

    decision = autotune.load(autotune.decision_key(spec, problem))
    if decision is None or not decision.fuse or not decision.config:
        return None
    try:
        return autotune.config_of(spec, problem, decision.config)
    except KeyError:
        return None


def set_config(spec: ir.KernelSpec, config: TileConfig) -> None:
    """Build `spec`'s kernel with `config` (max-autotune's choice) from now on in this process."""
    with _lock:
        _configs[_identity(spec)] = config


def set_tile_order(spec: ir.KernelSpec, problem, config: str, order: launch.TileOrder) -> None:
    """Launch `spec`'s kernel built with the config labelled `config` in `order` at `problem`
    = (M, N, K, L) (max-autotune's choice; other problems and configs keep evt's order)."""
    with _lock:
        _orders[(_identity(spec), config, tuple(problem))] = order
        if (chosen := _configs.get(_identity(spec))) is not None and chosen.label == config:
            _autotuned[_identity(spec)] = (chosen, tuple(problem))


def inherit_tuning(spec: ir.KernelSpec, pruned: ir.KernelSpec) -> None:
    """max-autotune's config and tile order for `spec`, where it chose them in this process, for
    `pruned` too: `spec` less the aux stores nothing reads once AOTAutograd has split the graph
    (`prune_unused_outputs`), the kernel that runs in its place. They were timed with those
    stores (more written than runs), and a pruned kernel with its own heuristic pick lost
    max-autotune's choice (session 63). Without one (the default mode) `pruned` keeps its own."""
    with _lock:
        tuned = _autotuned.get(_identity(spec))
        if tuned is None:
            return
        config, problem = tuned
        order = _orders[(_identity(spec), config.label, problem)]
        _configs[_identity(pruned)] = config
        _orders[(_identity(pruned), config.label, problem)] = order
        _autotuned[_identity(pruned)] = tuned


def tile_order(spec: ir.KernelSpec, config: str, p: guards.Problem) -> launch.TileOrder:
    """The tile order of `spec`'s kernel (built with `config`) at problem `p`: max-autotune's
    choice in this process or its cached decision for this problem and config, else evt's
    (`launch.EVT_ORDER`). Asked once per problem and kernel (`launch.Kernel.plan`)."""
    from evt.runtime import autotune

    key = (_identity(spec), config, (p.M, p.N, p.K, p.L))
    with _lock:
        found = _orders.get(key)
    if found is None:
        found = autotune.tuned_order(spec, key[2], config) or launch.EVT_ORDER
        with _lock:
            _orders.setdefault(key, found)
    return found


def problem_hint(spec: ir.KernelSpec, values: Sequence) -> tuple[int, int, int, int] | None:
    """(M, N, K, L) of `spec` on `values` (fake or real tensors; symbolic sizes by their hints),
    or None where a size has no hint."""
    out = []
    for x in reference.problem_shape(spec, values):
        x = x.node.hint if isinstance(x, torch.SymInt) else x
        if x is None:
            return None
        out.append(int(x))
    return tuple(out)  # type: ignore[return-value]


def sm90_available() -> bool:
    return torch.cuda.is_available() and launch.capability(torch.cuda.current_device()) == (9, 0)


def run(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor], key: str | None = None) -> list[torch.Tensor]:
    """Run a region; `key` is the op's spec text, under which a kernel launch is handed to the
    C++ launch path (`evt.runtime.fast`), which then serves calls with the same input layout."""
    if _reference_only or not use_kernels(inputs):
        return reference.run(spec, inputs)
    if id(spec) not in _ready and _still_building(spec, inputs):
        return reference.run(spec, inputs)
    padded = guards.copy_into_rows(spec, inputs)  # inputs the kernel cannot read as they are
    try:
        outputs = _launch_ready(spec, padded or inputs) or _launch(spec, padded or inputs)
    except EvtError as e:
        return fallback(spec, inputs, str(e))
    LAUNCHES[spec.name] += 1
    if os.environ.get("EVT_VERIFY", "0") not in ("", "0"):
        verify.check(spec, inputs, outputs)
    elif key is not None and fast.loaded() == inputs[spec.gemm.a.input].device.type and not injected():
        kernel = _ready[id(spec)]
        fast.remember(key, spec.name, kernel, kernel.guard(padded or inputs), inputs, outputs, padded)
    return outputs


def calls_wait() -> bool:
    """Whether a region's call waits for its kernel's build (the default), see the module's doc."""
    return (os.environ.get("EVT_WAIT_KERNELS", "1") != "0"
            or torch.are_deterministic_algorithms_enabled()
            or capturing())  # fmt: skip


def capturing() -> bool:
    """Whether this thread's current CUDA stream is capturing a graph."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _still_building(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor]) -> bool:
    """True where the call should not wait: `EVT_WAIT_KERNELS=0` and the kernel of `spec`'s
    signature is building (the call then counts in `BUILDING`). False where it waits, is built,
    loaded or failed (the full path then loads it or reports the failure)."""
    if calls_wait():
        return False
    sig = _identity(spec)
    with _lock:
        if sig in _kernels:
            return False
        future = _builds.get(sig)
    if future is None:
        try:
            hint = problem_hint(spec, inputs)
        except Exception:  # noqa: BLE001 - malformed inputs: the full path's guard says why
            return False
        future = build_for(spec, hint)
        if future is None:  # a static reason (`build_for` asks): the full path reports it
            return False
        with _lock:
            _builds[sig] = future
    if future.done():
        return False
    with _lock:
        first = spec.name not in BUILDING
        BUILDING[spec.name] += 1
    if first:
        debug.log(1, f"region {spec.name} runs its reference path while its kernel builds")
    return True


def launches() -> collections.Counter:
    """Region name -> kernel launches since `reset()`, from Python and the C++ launch path."""
    return LAUNCHES + fast.launches()


def planned() -> dict[tuple[str, tuple[int, int, int, int]], str]:
    """(kernel signature, problem) -> what its launches there take, e.g. `evt_f0_addmm:
    128x256x64_c1x1_cooperative 0:8 at 8192x16384x4096x1` (the first region of the kernel, its
    tile config, the tile order of its launch plan: `launch.Kernel.resolve`), for every problem
    a loaded kernel planned a launch for since `reset()`."""
    with _lock:
        kernels = [(sig, k) for sig, k in _kernels.items() if isinstance(k, launch.Kernel)]
    out = {}
    for sig, k in kernels:
        label = k.library.config.label if k.library.config else k.library.name
        for p, plan in k.plans():
            order = launch.TileOrder.from_code(plan.tile_order).label
            out[(sig, (p.M, p.N, p.K, p.L))] = f"{k.spec.name}: {label} {order} at {p.M}x{p.N}x{p.K}x{p.L}"
    return out


def _launch_ready(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor]) -> list | None:
    """The hot path: a kernel that launched for this spec before, no failure being injected.
    Guards still run (remembered per input layout); anything new takes the full path. Plain
    try/except instead of `stage()`: this runs once per region per training step."""
    kernel = _ready.get(id(spec))
    if kernel is None or kernel.spec is not spec or INJECT or "EVT_INJECT" in os.environ:
        return None
    try:
        problem = kernel.guard(inputs)
    except Exception as e:
        raise StageFailed("guard", e) from e
    try:
        return kernel.launch(problem, inputs)
    except Exception as e:
        raise StageFailed("launch", e) from e


def _launch(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    with stage("spec"):
        reason = guards.static_reason(spec)
        if reason:
            raise LaunchError(reason)
    with stage("device"):
        launch.check_device(inputs)
    try:  # the shape that picks the tile config; malformed inputs fail the guard stage below
        hint = problem_hint(spec, inputs)
    except Exception:  # noqa: BLE001
        hint = None
    kernel = kernel_for(spec, hint)
    with stage("guard"):
        problem = kernel.guard(inputs)
    with stage("launch"):
        outputs = kernel.launch(problem, inputs)
    with _lock:
        _ready[id(spec)] = kernel  # `spec` comes from ir.from_json's cache: one object per region
        waited = BUILDING.get(spec.name, 0)
    if waited:
        debug.log(1, f"region {spec.name} launches its kernel, built after {waited} calls on its reference path")
    return outputs


def kernel_for(spec: ir.KernelSpec, problem: tuple[int, int, int, int] | None = None) -> launch.Kernel:
    """The loaded kernel of `spec`'s signature (its config picked for `problem` if none was yet);
    raises (the remembered) StageFailed otherwise."""
    sig = _identity(spec)
    with _lock:
        found = _kernels.get(sig)
    if found is None:
        try:
            found = _acquire(spec, config_for(spec, problem))
        except StageFailed as e:
            found = e
        with _lock:
            _kernels[sig] = found
    if isinstance(found, EvtError):
        raise found
    return found.named(spec)


@functools.lru_cache(maxsize=4096)
def _identity(spec: ir.KernelSpec) -> str:
    return canonical(spec).signature()


def identity(spec: ir.KernelSpec) -> str:
    """The canonical signature: regions equal up to names share it (and one binary)."""
    return _identity(spec)


def _acquire(spec: ir.KernelSpec, config: TileConfig | None) -> launch.Kernel:
    with stage("render"):
        job = build.plan(spec, config, compile_fn=COMPILE_FN)
    with stage("compile"):
        path = build.submit(job).result()
    with stage("load"):
        library = launch.load(path)
    debug.log(4, f"region {spec.name}: kernel {job.name} from {path}")
    label = config.label if config is not None else ""
    return launch.Kernel(spec, library, functools.partial(tile_order, spec, label))


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Run a stage: an injected failure or any exception becomes StageFailed naming the stage."""
    try:
        message = injected().get(name)
        if message is not None:
            raise LaunchError(f"injected failure: {message}")
        yield
    except StageFailed:
        raise
    except Exception as e:  # a missing compiler shows up while planning: call it a compile failure
        raise StageFailed("compile" if isinstance(e, CompileError) else name, e) from e


def injected() -> dict[str, str]:
    out = dict(INJECT)
    for item in filter(None, os.environ.get("EVT_INJECT", "").split(",")):
        where, _, message = item.partition(":")
        out[where.strip()] = message or f"EVT_INJECT={where.strip()}"
    return out


def fallback(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor], reason: str):
    """The reference path, with one warning per region."""
    with _lock:
        first = spec.name not in FALLBACKS
        FALLBACKS[spec.name] = reason
    if first:
        warnings.warn(f"evt: region {spec.name} runs unfused: {reason}", stacklevel=3)
        debug.log(1, f"region {spec.name} runs unfused: {reason}")
    return reference.run(spec, inputs)


def reset() -> None:
    """Forget loaded kernels, failures, warnings and counters (tests)."""
    with _lock:
        _kernels.clear()
        _configs.clear()
        _orders.clear()
        _autotuned.clear()
        _ready.clear()
        _builds.clear()
        BUILDING.clear()
        FALLBACKS.clear()
        LAUNCHES.clear()
        guards.RELAID.clear()
    fast.forget_all()

"""Choose how a region runs: its compiled CUTLASS kernel on an SM90 GPU, else the reference path.

On CPU tensors the reference path is the design (no warning). On CUDA, every failure on the way to
a launch (render, compile, load, guard, launch) runs the region through the reference path, which
is exactly the unfused computation, with one warning per region naming the stage and the reason.

Stages: spec (static reasons such as fp32) -> device -> render -> compile -> load -> guard ->
launch. Render, compile and load happen once per kernel signature and process; their outcome,
success or failure, is remembered. Guard and launch depend on the call's tensors.

Test hooks: `INJECT[stage] = message` (or `EVT_INJECT="stage[:message],..."`) makes a stage fail;
`use_kernels` decides whether inputs take the kernel path; `COMPILE_FN` replaces nvcc.
`EVT_VERIFY=1` compares every launch with the reference path and raises `LaunchError` on mismatch.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import warnings
from collections.abc import Iterator, Sequence

import torch

from evt import debug, ir
from evt.errors import EvtError, LaunchError
from evt.runtime import build, guards, launch, reference
from evt.runtime.canonical import canonical

STAGES = ("spec", "device", "render", "compile", "load", "guard", "launch")
INJECT: dict[str, str] = {}  # stage -> message: make that stage fail (tests)
COMPILE_FN: build.CompileFn | None = None  # None: nvcc
FALLBACKS: dict[str, str] = {}  # region name -> why it ran unfused (read by evt.explain)
LAUNCHES: collections.Counter = collections.Counter()  # region name -> successful kernel launches
TOLERANCE = {"bf16": 2e-2, "f16": 4e-3, "f32": 2e-3}  # EVT_VERIFY: max |err| / max |reference|

_kernels: dict[str, launch.Kernel | EvtError] = {}  # canonical signature -> kernel or why not
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


def run(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    if not use_kernels(inputs):
        return reference.run(spec, inputs)
    try:
        outputs = _launch(spec, inputs)
    except EvtError as e:
        return fallback(spec, inputs, str(e))
    LAUNCHES[spec.name] += 1
    if os.environ.get("EVT_VERIFY", "0") not in ("", "0"):
        verify(spec, inputs, outputs)
    return outputs


def _launch(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    with stage("spec"):
        reason = guards.static_reason(spec)
        if reason:
            raise LaunchError(reason)
    with stage("device"):
        launch.check_device(inputs)
    kernel = kernel_for(spec)
    with stage("guard"):
        problem = kernel.guard(inputs)
    with stage("launch"):
        return kernel.launch(problem, inputs)


def kernel_for(spec: ir.KernelSpec) -> launch.Kernel:
    """The loaded kernel of `spec`'s signature; raises (the remembered) StageFailed otherwise."""
    sig = canonical(spec).signature()
    with _lock:
        found = _kernels.get(sig)
    if found is None:
        try:
            found = _acquire(spec)
        except StageFailed as e:
            found = e
        with _lock:
            _kernels[sig] = found
    if isinstance(found, EvtError):
        raise found
    return launch.Kernel(spec, found.library)  # named after this region


def _acquire(spec: ir.KernelSpec) -> launch.Kernel:
    with stage("render"):
        job = build.plan(spec, compile_fn=COMPILE_FN)
    with stage("compile"):
        path = build.submit(job).result()
    with stage("load"):
        library = launch.load(path)
    debug.log(4, f"region {spec.name}: kernel {job.name} from {path}")
    return launch.Kernel(spec, library)


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
    except Exception as e:
        raise StageFailed(name, e) from e


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


def verify(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor], outputs: list[torch.Tensor]):
    """EVT_VERIFY=1: compare with the reference path (synchronizes; skipped in graph capture)."""
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return
    expected = reference.run(spec, inputs)
    for i, (got, ref, dtype) in enumerate(
        zip(outputs, expected, spec.output_dtypes(), strict=True)
    ):
        err = relative_error(got, ref)
        if not err <= TOLERANCE[dtype]:
            raise LaunchError(f"EVT_VERIFY: region {spec.name} output {i} ({dtype}) differs from "
                              f"the reference path: max error {err:.3g} relative to max |ref| "
                              f"(tolerance {TOLERANCE[dtype]:g})")  # fmt: skip


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """max |got - ref| / max |ref|; inf where NaNs differ."""
    got, ref = got.double(), ref.double()
    if not torch.equal(got.isnan(), ref.isnan()):
        return float("inf")
    got, ref = got.nan_to_num(), ref.nan_to_num()
    scale = ref.abs().max().item() if ref.numel() else 0.0
    return (got - ref).abs().max().item() / max(scale, 1e-30) if ref.numel() else 0.0


def reset() -> None:
    """Forget loaded kernels, failures, warnings and counters (tests)."""
    with _lock:
        _kernels.clear()
        FALLBACKS.clear()
        LAUNCHES.clear()

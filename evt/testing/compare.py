"""Run one fuzzed spec on the GPU against the reference path: `run_case(spec, shape, seed)`.

Outputs start as NaN, so an element the kernel leaves unwritten shows. Floats must be within
`evt.runtime.verify.TOLERANCE` (max |error| / max |reference|) of the output's dtype, or of the
coarsest cast of a not bit-stable value it depends on (one ulp of a bf16 cast is 2^-8, more than
an f32 output allows, and the two paths may round such a value to neighbouring bf16 numbers);
bool outputs must match exactly (masks compare only bit-stable values, see `evt.testing.facts`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from evt import ir
from evt.runtime import dispatch, reference, verify
from evt.testing.inputs import make_inputs
from evt.testing.spec_check import facts_of

# (M, N, K): whole 128x256 tiles, then residues in M, N and K (N and M multiples of 16: bool
# outputs and m-major bool loads need 16-byte rows for TMA); a nested spec runs each over the
# batch `evt.testing.inputs.NESTED_BATCH` = (L1, L2)
SHAPES = ((512, 1024, 256), (208, 144, 72), (64, 48, 24))


@dataclass(frozen=True)
class Failure:
    kind: str  # "render", "compile", "load", "guard", "launch" or "mismatch"
    message: str


def run_case(spec: ir.KernelSpec, shape: tuple[int, int, int], seed: int) -> Failure | None:
    """None when the kernel matches the reference on `shape` with inputs from `seed`."""
    M, N, K = shape
    inputs = make_inputs(spec, M, N, K, seed, "cuda")
    try:
        kernel = dispatch.kernel_for(spec)
    except dispatch.StageFailed as e:
        return Failure(e.stage, str(e))
    try:
        with dispatch.stage("guard"):
            problem = kernel.guard(inputs)
        with dispatch.stage("launch"):
            outs = kernel.launch(problem, inputs, _poisoned(kernel, problem, spec))
            torch.cuda.synchronize()
    except dispatch.StageFailed as e:
        return Failure(e.stage, str(e))
    want = reference.run(spec, inputs)
    writers = [spec.d] + [n.name for n in spec.output_nodes()]
    for i, (got, ref, dtype) in enumerate(zip(outs, want, spec.output_dtypes(), strict=True)):
        if dtype == "b8":
            wrong = int((got != ref).sum())
            if wrong:
                return Failure("mismatch", f"output {i} (b8): {wrong} of {ref.numel()} differ")
            continue
        err, tol = verify.relative_error(got, ref), tolerance(spec, writers[i], dtype)
        if not err <= tol:
            unwritten = int((got.float().isnan() & ~ref.float().isnan()).sum())
            return Failure("mismatch", f"output {i} ({dtype}): error {err:.3g} > {tol:g}, "
                           f"{unwritten} elements unwritten")  # fmt: skip
    return None


def tolerance(spec: ir.KernelSpec, value: str, dtype: str) -> float:
    """The output's dtype tolerance, or that of a cast of an unstable value upstream of it."""
    facts, upstream = facts_of(spec), {value}
    tol = verify.TOLERANCE[dtype]
    for n in reversed(spec.nodes):
        if n.name in upstream:
            upstream.update(ir.node_args(n))
            fact = facts[n.name]
            if isinstance(n, ir.Compute) and n.dtype != "f32" and fact and not fact.stable:
                tol = max(tol, verify.TOLERANCE[n.dtype])
    return tol


def _poisoned(kernel, problem, spec: ir.KernelSpec) -> list[torch.Tensor]:
    return [
        torch.full(shape, math.nan, device="cuda").to(ir.torch_dtype(dtype))
        for shape, dtype in zip(kernel.output_shapes(problem), spec.output_dtypes())
    ]

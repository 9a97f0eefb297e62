"""Is a result right? Each output against the float64 reference, before anything is timed.

The measure is the norm-wise relative error ||got - ref|| / ||ref|| over the finite reference
elements; non-finite reference elements (a causal mask's -inf) must be matched exactly, and a NaN
the reference does not have is always wrong. A result is right when every output's error is within
the case's tolerance: the larger of a floor per operand dtype (bf16 and fp16 round every stored
element, relative 2^-9 and 2^-12, so honest kernels land around 1e-3..1e-2) and `EAGER_FACTOR`
times the error of eager itself on the same inputs (long chains, such as a training step's
gradients, accumulate more rounding than one GEMM).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from evt.bench.workload import outputs

TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 1e-2, torch.float32: 1e-3}
EAGER_FACTOR = 4.0


@dataclass(frozen=True)
class Verdict:
    ok: bool
    errors: list[float]  # per output compared
    tolerance: float
    why: str = ""


def rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref|| over the finite reference elements (inf where they disagree)."""
    got, ref = got.detach().double(), ref.detach().double()
    finite = torch.isfinite(ref)
    if not torch.equal(got[~finite], ref[~finite]) or torch.isnan(got[finite]).any():
        return math.inf
    diff = torch.linalg.vector_norm(got[finite] - ref[finite])
    scale = torch.linalg.vector_norm(ref[finite])
    return float(diff / scale) if scale > 0 else float(diff)


def tolerance(eager, ref, dtype: torch.dtype) -> float:
    """The case's tolerance, from eager's own (finite) error on the same inputs."""
    errors = [rel_error(g, r) for g, r in zip(outputs(eager), outputs(ref))]
    return max([TOLERANCE[dtype]] + [EAGER_FACTOR * e for e in errors if math.isfinite(e)])


def mismatch(got, ref) -> str | None:
    """Why two output lists cannot be compared element by element, or None."""
    if len(got) != len(ref):
        return f"{len(got)} outputs, the reference has {len(ref)}"
    for i, (g, r) in enumerate(zip(got, ref)):
        if g is None or r is None or g.shape != r.shape:
            shape = lambda t: None if t is None else tuple(t.shape)  # noqa: E731
            return f"output {i}: shape {shape(g)}, expected {shape(r)}"
    return None


def compare(got, ref, tol: float) -> Verdict:
    """Compare every output of an implementation with the reference's."""
    got, ref = outputs(got), outputs(ref)
    why = mismatch(got, ref)
    if why:
        return Verdict(False, [], tol, why)
    errors = [rel_error(g, r) for g, r in zip(got, ref)]
    bad = max(range(len(errors)), key=lambda i: errors[i], default=None)
    if bad is None or errors[bad] <= tol:
        return Verdict(True, errors, tol)
    return Verdict(False, errors, tol, f"output {bad}: relative error {errors[bad]:.3g} > {tol:g}")

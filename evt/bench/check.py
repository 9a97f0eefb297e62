"""Is a result right? Each output against the float64 reference, before anything is timed.

The measure is the norm-wise relative error ||got - ref|| / ||ref|| over the finite reference
elements; non-finite reference elements (a causal mask's -inf) must be matched exactly, and a NaN
the reference does not have is always wrong. Tolerances are per operand dtype: bf16 and fp16
round every stored element (relative 2^-9 and 2^-12), so an honest kernel lands around 1e-3..1e-2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evt.bench.workload import outputs

TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 1e-2, torch.float32: 1e-3}


@dataclass(frozen=True)
class Verdict:
    ok: bool
    errors: list[float | None]  # per output; None where it could not be compared
    tolerance: float
    why: str = ""


def rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref|| over the finite reference elements (inf where they disagree)."""
    got, ref = got.detach().double(), ref.detach().double()
    finite = torch.isfinite(ref)
    if not torch.equal(got[~finite], ref[~finite]) or torch.isnan(got[finite]).any():
        return float("inf")
    diff = torch.linalg.vector_norm(got[finite] - ref[finite])
    scale = torch.linalg.vector_norm(ref[finite])
    return float(diff / scale) if scale > 0 else float(diff)


def compare(got, ref, dtype: torch.dtype) -> Verdict:
    """Compare every output of an implementation with the reference's."""
    tol = TOLERANCE[dtype]
    got, ref = outputs(got), outputs(ref)
    if len(got) != len(ref):
        return Verdict(False, [], tol, f"{len(got)} outputs, the reference has {len(ref)}")
    errors: list[float | None] = []
    for i, (g, r) in enumerate(zip(got, ref)):
        if g is None or r is None or g.shape != r.shape:
            shapes = (None if g is None else tuple(g.shape), None if r is None else tuple(r.shape))
            errors.append(None)
            return Verdict(False, errors, tol, f"output {i}: shape {shapes[0]}, expected {shapes[1]}")
        errors.append(rel_error(g, r))
    worst = max(errors, default=0.0)
    if worst is not None and worst <= tol:
        return Verdict(True, errors, tol)
    bad = max(range(len(errors)), key=lambda i: errors[i])
    return Verdict(False, errors, tol, f"output {bad}: relative error {errors[bad]:.3g} > {tol:g}")

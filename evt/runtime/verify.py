"""`EVT_VERIFY=1`: compare each kernel launch with the reference path, the unfused computation.

It synchronizes (it reads the error back), so it is skipped while a CUDA graph is being captured.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from evt import ir
from evt.errors import LaunchError
from evt.runtime import reference

TOLERANCE = {"bf16": 2e-2, "f16": 4e-3, "f32": 2e-3}  # max |err| / max |reference|, by output dtype


def check(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor], outputs: list[torch.Tensor]):
    """Raise LaunchError when an output is further from the reference than its dtype allows."""
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
    """max |got - ref| / max |ref|; inf where the NaNs differ (an unwritten element, say)."""
    if ref.numel() == 0:
        return 0.0
    got, ref = got.double(), ref.double()
    if not torch.equal(got.isnan(), ref.isnan()):
        return float("inf")
    got, ref = got.nan_to_num(), ref.nan_to_num()
    return ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()

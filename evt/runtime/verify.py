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
TF32 = 1e-2  # an fp32 GEMM on TF32 tensor cores: 10-bit mantissas, against the fp32 reference


def check(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor], outputs: list[torch.Tensor]):
    """Raise LaunchError when an output is further from the reference than its dtype allows."""
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return
    expected = reference.run(spec, inputs)
    for i, (got, ref, dtype) in enumerate(
        zip(aligned(spec, outputs, expected), expected, spec.output_dtypes(), strict=True)
    ):
        err, tol = relative_error(got, ref), tolerance(spec, i)
        if not err <= tol:
            raise LaunchError(f"EVT_VERIFY: region {spec.name} output {i} ({dtype}) differs from "
                              f"the reference path: max error {err:.3g} relative to max |ref| "
                              f"(tolerance {tol:g})")  # fmt: skip


def aligned(spec: ir.KernelSpec, outputs: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]):
    """`outputs` with each softmax sum rescaled to the reference's max, s exp(m - m_ref), where
    the kernel writes both: a max one bf16 ulp off the reference's (`tolerance`) scales its sum
    by exp of that ulp (2% at a max of 5: BERT's MLM head under EVT_VERIFY), while m + log s,
    what a softmax or cross-entropy reads, stays put."""
    out = list(outputs)
    for n in spec.nodes:
        if isinstance(n, ir.SoftmaxStats) and None not in (n.max_output, n.sum_output):
            m, m_ref = outputs[n.max_output].float(), expected[n.max_output].float()
            shift = torch.where(m.isfinite() & m_ref.isfinite(), m - m_ref, 0.0)
            s = outputs[n.sum_output]
            out[n.sum_output] = (s.float() * torch.exp(shift)).to(s.dtype)
    return out


def tolerance(spec: ir.KernelSpec, i: int) -> float:
    """Output `i`'s tolerance: its dtype's, but for a max of values rounded to a narrower dtype
    anywhere upstream that dtype's (a max picks one element: a bf16 value the accumulation order
    rounds the other way shows at full size in an fp32 max, where a sum averages such flips
    out; also through a widening cast after the rounding, as cross-entropy's fp32 max of bf16
    logits: BERT's MLM head under EVT_VERIFY, 1 bf16 ulp = 3.4e-3 against f32's 2e-3)."""
    own = spec.output_dtypes()[i]
    if spec.gemm.dtype == "f32":  # every output derives from the TF32 products
        return max(TOLERANCE[own], TF32)
    if i == 0:
        return TOLERANCE[own]
    out = spec.outputs()[i - 1]
    n = out.node
    is_max = getattr(n, "op", None) == "max" or (
        isinstance(n, ir.SoftmaxStats) and out.index == n.max_output
    )
    rounded = _rounded_upstream(spec, n.arg) if is_max else set()
    return max(TOLERANCE[d] for d in {own, *rounded})


def _rounded_upstream(spec: ir.KernelSpec, name: str) -> set[str]:
    """The dtypes the computes that `name` derives from (itself included) round to."""
    computes = {c.name: c for c in spec.nodes if isinstance(c, ir.Compute)}
    todo, seen, out = [name], set(), set()
    while todo:
        node = computes.get(todo.pop())
        if node is not None and node.name not in seen:
            seen.add(node.name)
            out.add(node.dtype)
            todo.extend(node.args)
    return out


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """max |got - ref| / max |ref|; inf where the NaNs differ (an unwritten element, say)."""
    if ref.numel() == 0:
        return 0.0
    got, ref = got.double(), ref.double()
    if not torch.equal(got.isnan(), ref.isnan()):
        return float("inf")
    got, ref = got.nan_to_num(), ref.nan_to_num()
    return ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()

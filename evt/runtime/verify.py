"""`EVT_VERIFY=1`: compare each kernel launch with the reference path, the unfused computation.

It synchronizes (it reads the error back), so it is skipped while a CUDA graph is being captured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from evt import ir
from evt.errors import LaunchError
from evt.runtime import reference

# max |err| / max |reference|, by output dtype; a bool mask exactly (beyond `rounding_slack`)
TOLERANCE = {"bf16": 2e-2, "f16": 4e-3, "f32": 2e-3, "b8": 0.0}
# ops whose result jumps where an argument crosses a threshold: a value the kernel computes a few
# fp32 ulps off the reference's may land on the other side (a ReLU mask, its backward)
DISCONTINUOUS = frozenset({"gt", "ge", "lt", "le", "eq", "ne", "threshold_backward"})
TF32 = 1e-2  # an fp32 GEMM on TF32 tensor cores: 10-bit mantissas, against the fp32 reference


def check(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor], outputs: list[torch.Tensor]):
    """Raise LaunchError when an output is further from the reference than its dtype allows."""
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return
    expected = restated(spec, outputs, reference.run(spec, inputs))
    slack = rounding_slack(spec, inputs, expected)
    for i, (got, ref, dtype) in enumerate(zip(outputs, expected, spec.output_dtypes(), strict=True)):
        err, tol = relative_error(got, ref, slack[i]), tolerance(spec, i)
        if not err <= tol:
            beyond = "" if slack[i] is None else ", beyond what its roundings' flips move it"
            raise LaunchError(f"EVT_VERIFY: region {spec.name} output {i} ({dtype}) differs from "
                              f"the reference path: max error {err:.3g} relative to max |ref|{beyond} "
                              f"(tolerance {tol:g})")  # fmt: skip


# How far the kernel's fp32 accumulator may differ from the reference's, in units of
# sum_k |a_k b_k| (another summation order; the worst case K 2^-24 stays below it to K = 1024,
# the typical sqrt(K) 2^-24 far below it at any K)
FLIP = 2.0**-14


def rounding_slack(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor],
                   expected: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:  # fmt: skip
    """Per output, how far each element may move beyond its dtype's tolerance because the
    epilogue rounds a value to bf16 or fp16 and computes on with it, or compares it: the
    kernel's accumulator, summed in another order than the reference's, can land such a value
    one ulp (bf16: up to 2^-7 relative) or one side of a threshold the other way, and what
    follows amplifies it (an exp of BERT's MLM logits of ~100 at initialization: 65%; a mask
    bit: all of it). The reference runs again with its accumulator moved by +FLIP and -FLIP
    times sum_k |a_k b_k|: every value that close to a rounding boundary or a threshold goes the
    other way in one of the two runs, and an element's slack is how far the two runs move it,
    summed (a sum can take flips of both directions). None where neither is upstream of the
    output, for statistics `restated` from the kernel's own stored copy, and for fp32 GEMMs
    (TF32)."""
    def upstream(i: int) -> str:
        return spec.d if i == 0 else spec.outputs()[i - 1].node.arg

    skip = restated_outputs(spec)
    affected = [i not in skip and _flips_upstream(spec, upstream(i)) for i in range(len(expected))]
    if spec.gemm.dtype == "f32" or not any(affected):
        return [None] * len(expected)
    runs = [reference.run(spec, inputs, acc_spread=s) for s in (FLIP, -FLIP)]
    slack: list[torch.Tensor | None] = []
    for i, ref in enumerate(expected):
        if not affected[i]:
            slack.append(None)
            continue
        moved = sum((run[i].double() - ref.double()).abs() for run in runs)
        slack.append(moved.nan_to_num(nan=0.0, posinf=math.inf))
    return slack


def restated_outputs(spec: ir.KernelSpec) -> set[int]:
    """The outputs `restated` checks against the kernel's own stored copy of their argument."""
    return {i for n, _ in _stored_statistics(spec) for i in ir.stat_outputs(n) if i is not None}


def _stored_statistics(spec: ir.KernelSpec) -> list[tuple[ir.SoftmaxStats, int]]:
    """(statistic, output index of the stored copy of its argument) where `stored_copy` finds one."""
    found = [(n, stored_copy(spec, n.arg)) for n in spec.nodes if isinstance(n, ir.SoftmaxStats)]
    return [(n, j) for n, j in found if j is not None]


def restated(spec: ir.KernelSpec, outputs: Sequence[torch.Tensor], expected: list[torch.Tensor]):
    """`expected` with each softmax statistic recomputed from the kernel's own stored copy of
    its argument, where the kernel stores that argument rounded exactly as the statistic reads it
    (`stored_copy`: bf16 logits stored as D whose fp32 widening the statistic reads, as
    cross-entropy's and softmax's heads do). A logit the kernel's accumulation order rounds the
    other way moves its exp(x - m) by exp(one ulp of x): 65% at the logits of ~100 of BERT's MLM
    head at initialization (bf16 ulp 0.5; EVT_VERIFY failed its step on the sum, 0.099 against
    f32's 2e-3, session 22), an error no tolerance of the sum's own dtype covers. The stored copy
    is checked against the reference at its dtype's tolerance, the statistics against it at
    theirs."""
    out = list(expected)
    for n, j in _stored_statistics(spec):
        x = outputs[j].float()
        x = x.reshape(-1, *x.shape[-2:])  # [L, M, N], a nested batch's [L1, L2] flattened
        for index, value in reference.reduce(n, x, spec.gemm.batched):
            out[index] = value.reshape(expected[index].shape).to(expected[index].dtype)
    return out


def stored_copy(spec: ir.KernelSpec, name: str) -> int | None:
    """The index of an output whose values, widened to fp32, are exactly `name`'s, where `name`
    rounds to a narrower dtype on its way: `name` is a chain of identity casts from a node S
    (itself rounded or not) through one narrower dtype (bf16 or fp16, once or more) and the
    output stores a node of that chain in that dtype. None where no such output exists."""
    computes = {c.name: c for c in spec.nodes if isinstance(c, ir.Compute)}
    chain, dtypes, node = [name], set(), computes.get(name)
    while node is not None:
        dtypes.add(node.dtype)
        if node.op != "identity":
            break
        chain.append(node.args[0])
        node = computes.get(node.args[0])
    narrow = dtypes - {"f32"}
    if len(narrow) != 1:
        return None
    (dtype,) = narrow
    if spec.d in chain and spec.d_dtype == dtype:
        return 0
    for n in spec.nodes:
        if isinstance(n, ir.AuxStore) and n.arg in chain and n.dtype == dtype:
            return n.output
    return None


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
    return {c.dtype for c in _computes_upstream(spec, name)}


def _flips_upstream(spec: ir.KernelSpec, name: str) -> bool:
    """Whether `name` derives from a value rounded to bf16 / fp16 or compared with a threshold."""
    return any(c.dtype != "f32" or c.op in DISCONTINUOUS for c in _computes_upstream(spec, name))


def _computes_upstream(spec: ir.KernelSpec, name: str) -> list[ir.Compute]:
    """The computes `name` derives from (itself included), through the writers that pass their
    argument on as it is (an aux store's value is its argument's, not its stored copy's; a
    reduction's too)."""
    nodes = {n.name: n for n in spec.nodes}
    todo, seen, out = [name], set(), []
    while todo:
        node = nodes.get(todo.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        if isinstance(node, ir.Compute):
            out.append(node)
            todo.extend(node.args)
        elif isinstance(node, (ir.AuxStore, *ir.REDUCTIONS)):
            todo.append(node.arg)
    return out


def relative_error(got: torch.Tensor, ref: torch.Tensor, slack: torch.Tensor | None = None) -> float:
    """max |got - ref| / max |ref|, each element's difference less its `slack` first (none below
    zero); inf where the NaNs differ (an unwritten element, say)."""
    if ref.numel() == 0:
        return 0.0
    got, ref = got.double(), ref.double()
    if not torch.equal(got.isnan(), ref.isnan()):
        return float("inf")
    got, ref = got.nan_to_num(), ref.nan_to_num()
    diff = (got - ref).abs()
    if slack is not None:
        diff = (diff - slack).clamp_min(0.0)
    return (diff.max() / ref.abs().max().clamp_min(1e-30)).item()

"""The reference path: a pure-torch interpreter of the EVT IR, node by node.

It reads only the `KernelSpec` (never FX nodes), computes the GEMM and every epilogue node in
fp32, reads each load through the strides its node kind implies (a Row broadcast has M-stride 0, a
Col broadcast N-stride 0), and rounds once, at each store. On a machine without CUDA the backend
runs every region through it; on the GPU it is the unfused fallback and `EVT_VERIFY=1`'s oracle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from evt import ir

F32 = torch.float32


def _gelu_backward(grad: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    cdf = 0.5 * (1.0 + torch.erf(z * (1.0 / math.sqrt(2.0))))
    pdf = torch.exp(-0.5 * z * z) * (1.0 / math.sqrt(2.0 * math.pi))
    return grad * (cdf + z * pdf)


def _gelu_tanh_backward(grad: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    k = math.sqrt(2.0 / math.pi)
    inner = k * (z + 0.044715 * z * z * z)
    t = torch.tanh(inner)
    dinner = k * (1.0 + 3.0 * 0.044715 * z * z)
    return grad * (0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * dinner)


def _silu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return grad * s * (1.0 + x * (1.0 - s))


def _mask(compare):
    return lambda a, b: compare(a, b).to(F32)


COMPUTE_REFERENCE = {
    "identity": lambda x: x,
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "neg": torch.neg,
    "cube": lambda x: x * x * x,
    "relu": torch.relu,
    "gelu": lambda x: torch.nn.functional.gelu(x),
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "gelu_backward": _gelu_backward,
    "gelu_tanh_backward": _gelu_tanh_backward,
    "silu": torch.nn.functional.silu,
    "silu_backward": _silu_backward,
    "silu_backward_sigmoid": lambda grad, x, s: grad * s * (1.0 + x * (1.0 - s)),
    "sigmoid": torch.sigmoid,
    "sigmoid_backward": lambda grad, y: grad * y * (1.0 - y),
    "tanh": torch.tanh,
    "tanh_backward": lambda grad, y: grad * (1.0 - y * y),
    "threshold_backward": lambda grad, x, t: torch.where(x <= t, 0.0, grad),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "exp": torch.exp,
    "log": torch.log,
    "rsqrt": torch.rsqrt,
    "gt": _mask(torch.gt),
    "ge": _mask(torch.ge),
    "lt": _mask(torch.lt),
    "le": _mask(torch.le),
    "eq": _mask(torch.eq),
    "ne": _mask(torch.ne),
    "where": lambda cond, a, b: torch.where(cond != 0, a, b),
}


def problem_shape(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor]) -> tuple[int, int, int, int]:
    """(M, N, K, L) from the operand tensors as passed (L = L1 * L2 for a nested batch)."""
    a, b = inputs[spec.gemm.a.input], inputs[spec.gemm.b.input]
    m, k = (a.shape[-1], a.shape[-2]) if spec.gemm.a.transposed else (a.shape[-2], a.shape[-1])
    n = b.shape[-2] if spec.gemm.b.transposed else b.shape[-1]
    return m, n, k, math.prod(batch_extents(spec, inputs))  # ints, or SymInts under fake tensors


def batch_extents(spec: ir.KernelSpec, inputs: Sequence) -> tuple:
    """The batch: (L,) (1 unbatched), or a nested batch's (L1, L2), from the first operand passed
    as [L1, L2, rows, cols] (A, then B; both [L, rows, cols]: (L, 1))."""
    g = spec.gemm
    a, b = inputs[g.a.input], inputs[g.b.input]
    if not g.nested:
        return (a.shape[0] if g.batched else 1,)
    four = [t for t in (a, b) if len(t.shape) == 4]
    return tuple(four[0].shape[:2]) if four else (a.shape[0], 1)


def _operand(t: torch.Tensor, op: ir.Operand, batched: bool) -> torch.Tensor:
    t = t.flatten(0, 1) if t.dim() == 4 else t  # a nested batch [L1, L2, rows, cols]
    t = t.mT if op.transposed else t
    return t if batched else t.unsqueeze(0)


def _load(node: ir.Node, t: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
    """Read an input as [L, M, N] through the strides its node kind implies."""
    L, M, N = shape
    if isinstance(node, ir.AuxLoad) and t.dim() == 4 and not node.broadcast_l:  # [L1, L2, M, N]
        return t.reshape(L, M, N).to(F32)
    if isinstance(node, ir.AuxLoad):
        s = t.stride()
        strides = (s[0] if t.dim() == 3 and not node.broadcast_l else 0, s[-2], s[-1])
    elif isinstance(node, ir.RowBroadcast):
        strides = (0, 0, t.stride(-1))
    else:  # ColBroadcast: an M-vector stored as [M] or [M, 1]
        strides = (0, t.stride(0) if t.dim() == 1 else t.stride(-2), 0)
    return torch.as_strided(t, (L, M, N), strides, t.storage_offset()).to(F32)


def run(spec: ir.KernelSpec, inputs: Sequence[torch.Tensor], acc_spread: float = 0.0) -> list[torch.Tensor]:
    """Execute `spec` on `inputs`; returns [D, outputs 1, 2, ...] shaped and strided as
    `spec.output_layouts` says (D and aux stores [L, M, N] batched or [M, N], ...).
    `acc_spread`: the accumulator moved by that many times sum_k |a_k b_k|, the scale of an fp32
    sum's rounding error (`EVT_VERIFY`'s rounding slack)."""
    M, N, K, L = problem_shape(spec, inputs)
    g = spec.gemm
    a = _operand(inputs[g.a.input], g.a, g.batched).to(F32)
    b = _operand(inputs[g.b.input], g.b, g.batched).to(F32)
    values: dict[str, torch.Tensor] = {}
    outputs: dict[int, torch.Tensor] = {}
    for node in spec.nodes:
        values[node.name] = _visit(node, values, inputs, a, b, (L, M, N), outputs, g.batched)
        if isinstance(node, ir.AccFetch) and acc_spread:
            values[node.name] = values[node.name] + acc_spread * torch.matmul(a.abs(), b.abs())
    outputs[0] = _store(values[spec.d], spec.d_dtype)
    result = [outputs[i] for i in range(spec.num_outputs)]
    result = [o.squeeze(0) if o.dim() == 3 and not g.batched else o for o in result]
    return [_laid_out(o, shape, strides) for o, (shape, strides) in
            zip(result, spec.output_layouts(M, N, L))]  # fmt: skip


def _laid_out(t: torch.Tensor, shape: tuple, strides: tuple) -> torch.Tensor:
    """`t` with the kernel's output strides (`KernelSpec.output_layouts`): the fake
    implementation promises them whichever path runs."""
    if ir.has_strides(t, strides):
        return t
    full = ir.padded_storage(shape, strides)
    out = torch.empty(full, dtype=t.dtype, device=t.device).as_strided(shape, strides)
    return out.copy_(t)


def _visit(node, values, inputs, a, b, shape, outputs, batched: bool) -> torch.Tensor:
    if isinstance(node, ir.AccFetch):
        return torch.matmul(a, b)
    if isinstance(node, (ir.AuxLoad, ir.RowBroadcast, ir.ColBroadcast)):
        return _load(node, inputs[node.input], shape)
    if isinstance(node, ir.ScalarLoad):  # a 0-d tensor
        return inputs[node.input].to(F32).expand(shape)
    if isinstance(node, ir.ScalarBroadcast):
        return torch.full(shape, node.value, dtype=F32, device=a.device)
    if isinstance(node, ir.Compute):
        out = COMPUTE_REFERENCE[ir.COMPUTE_OPS[node.op].reference](*(values[x] for x in node.args))
        return out if node.dtype == "f32" else out.to(ir.torch_dtype(node.dtype)).to(F32)
    if isinstance(node, ir.REDUCTIONS):  # fp32 over the reduced modes, rounded once
        for index, value in reduce(node, values[node.arg], batched):
            outputs[index] = _store(value, node.dtype)
        return values[node.arg]
    assert isinstance(node, ir.AuxStore), node
    outputs[node.output] = _store(values[node.arg], node.dtype)
    return values[node.arg]


REDUCE = {"sum": torch.sum, "max": torch.amax}  # amax propagates NaN


def reduce(node, x: torch.Tensor, batched: bool) -> list[tuple[int, torch.Tensor]]:
    """(output index, value) of each output of a reduction or statistic of the [L, M, N] `x`."""
    if isinstance(node, ir.RowReduction):  # over L and M: [N] or [1, N]
        total = REDUCE[node.op](x, dim=(0, 1))
        return [(node.output, total.unsqueeze(0) if node.keepdim else total)]
    if isinstance(node, ir.ColumnWelfordStats):  # over L and M: [N] or [1, N] each
        stats = x.mean(dim=(0, 1)), x.var(dim=(0, 1), correction=node.correction)
        return [(i, v.unsqueeze(0) if keep else v)
                for i, v, keep in zip(ir.stat_outputs(node), stats, node.keepdim) if i is not None]  # fmt: skip
    if isinstance(node, ir.ScalarReduction):  # over everything: [] or all ones
        total = REDUCE[node.op](x, dim=(0, 1, 2))
        return [(node.output, total.reshape((1,) * (3 if batched else 2)) if node.keepdim else total)]
    if isinstance(node, ir.ColReduction):
        return [(node.output, _col(REDUCE[node.op](x, dim=2), node.keepdim, batched))]
    stats = _softmax_stats(x, node) if isinstance(node, ir.SoftmaxStats) else _welford(x, node)
    return [(i, _col(v, keep, batched))
            for i, v, keep in zip(ir.stat_outputs(node), stats, node.keepdim) if i is not None]  # fmt: skip


def _col(v: torch.Tensor, keepdim: bool, batched: bool) -> torch.Tensor:
    """An [L, M] per-row value as the output's shape: [L,] M or [L,] M, 1."""
    v = v.unsqueeze(-1) if keepdim else v
    return v if batched else v.squeeze(0)


def _softmax_stats(x: torch.Tensor, node: ir.SoftmaxStats) -> tuple[torch.Tensor, torch.Tensor]:
    """m = max x and s = sum exp(x - m) over N, as softmax's (or logsumexp's) decomposition."""
    m = torch.amax(x, dim=2, keepdim=True)
    shift = torch.where(m.abs() == math.inf, 0.0, m) if node.zero_inf_max else m
    return m.squeeze(2), torch.exp(x - shift).sum(dim=2)


def _welford(x: torch.Tensor, node: ir.WelfordStats) -> tuple[torch.Tensor, torch.Tensor]:
    """aten.mean's and aten.var's (the ops a region's statistic replaces): a row with an infinite
    element has mean +-inf (torch.var_mean would say NaN) and var NaN."""
    return x.mean(dim=2), x.var(dim=2, correction=node.correction)


def _store(value: torch.Tensor, dtype: str) -> torch.Tensor:
    """Round once into a fresh contiguous tensor (never a view of an input)."""
    out = torch.empty(value.shape, dtype=ir.torch_dtype(dtype), device=value.device)
    return out.copy_(value)

"""Which aten ops an epilogue can absorb, and what each one computes, as a rule table.

A rule maps an FX node to an `Expr` over the node's inputs (FX nodes or Python numbers), written
with the op names of `evt.ir.COMPUTE_OPS` (or of `REDUCTION_OPS`), or returns None when this
particular call cannot be fused (e.g. an unsupported keyword). Tables combine with `|`; adding an
op is one entry here and one row in `COMPUTE_OPS` (+ its functor and its reference).

Reductions of an [M, N] (or batched [L, M, N]) value: `<where>_<op>` with where `row` (over M:
an N-vector), `col` (over the last dim N: an M-vector per batch) or `scalar` (over every dim), op
`sum` or `max` (`amax`); the statistics over N: `col_mean`, `col_var` (arg 1: the
correction) and `softmax_sum` (`evt::softmax_sum`, args 1: zero_inf_max); and over M:
`row_mean`, `row_var` (BatchNorm1d's). The summand is arg 0.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.fx import Node

from evt.graph.statistics_ops import SOFTMAX_SUM
from evt.ir import MASK_OPS

aten = torch.ops.aten
prims = torch.ops.prims


@dataclass(frozen=True)
class Expr:
    op: str
    args: tuple[Arg, ...]
    dtype: torch.dtype | None = None  # round the result to this dtype (an explicit cast)


Arg = Node | float | int | Expr
Rule = Callable[[Node], Expr | None]


def _alpha(node: Node, y: Arg) -> Arg:
    alpha = node.kwargs.get("alpha", 1)
    return y if alpha == 1 else Expr("mul", (y, alpha))


def _binary(op: str, with_alpha: bool = False) -> Rule:
    def rule(node: Node) -> Expr | None:
        x, y = node.args[0], node.args[1]
        if not isinstance(y, (Node, float, int)) or isinstance(y, bool):
            return None
        return Expr(op, (x, _alpha(node, y) if with_alpha else y))

    return rule


def _div(node: Node) -> Expr | None:
    """x / c for a number c as x * (1 / c), the reciprocal rounded to float32: what ATen's CUDA
    kernel computes for a division by a CPU scalar (BinaryDivTrueKernel.cu: `a * inv_b` with
    `inv_b = opmath_t(1) / b`), so the same bits as eager, without an IEEE division per element
    (its slow-path call was ~30% of cross-entropy's backward epilogue: the mean's 1 / N)."""
    y = node.args[1]
    if isinstance(y, (float, int)) and not isinstance(y, bool):
        one = torch.tensor(1.0, dtype=torch.float32)
        return Expr("mul", (node.args[0], (one / torch.tensor(float(y), dtype=torch.float32)).item()))
    return _binary("div")(node)


def _unary(op: str) -> Rule:
    return lambda node: Expr(op, (node.args[0],))


# the exact GELU for a result the graph rounds to a 16-bit dtype (evt.ir.COMPUTE_OPS)
_GELU_FOR = {torch.bfloat16: "gelu_for_bf16", torch.float16: "gelu_for_f16"}


def _gelu(node: Node) -> Expr:
    if node.kwargs.get("approximate", "none") == "tanh":
        return Expr("gelu_tanh", (node.args[0],))
    dtype = getattr(node.meta.get("val"), "dtype", None)
    return Expr(_GELU_FOR.get(dtype, "gelu"), (node.args[0],))


def _gelu_backward(node: Node) -> Expr:
    tanh = node.kwargs.get("approximate", "none") == "tanh"
    return Expr("gelu_tanh_backward" if tanh else "gelu_backward", (node.args[0], node.args[1]))


def _compare(op: str) -> Rule:
    def rule(node: Node) -> Expr | None:
        expr = _binary(op)(node)
        return None if expr is None else Expr(op, as_compared(*expr.args))

    return rule


def as_compared(x: Arg, y: Arg) -> tuple[Arg, Arg]:
    """(x, y) as torch compares them: both rounded to their common dtype (bf16 and f16 compare
    after rounding, e.g. `t > 0.1` with a bf16 `t` compares against bf16(0.1) = 0.10009765625)."""
    vals = [a.meta.get("val") if isinstance(a, Node) else a for a in (x, y)]
    if any(v is None for v in vals):
        return x, y
    dtype = torch.result_type(*vals)
    if dtype not in (torch.bfloat16, torch.float16):
        return x, y
    rounded = (Expr("identity", (a,), dtype) if isinstance(a, Node) else
               torch.tensor(a, dtype=dtype).item() for a in (x, y))  # fmt: skip
    return tuple(rounded)  # type: ignore[return-value]


def _threshold_backward(node: Node) -> Expr | None:
    grad, x, threshold = node.args[:3]
    if not _number(threshold):
        return None
    return Expr("threshold_backward", (grad, *as_compared(x, threshold)))


def _where(node: Node) -> Expr | None:
    cond, a, b = node.args[:3]
    ok = all(isinstance(v, Node) or _number(v) for v in (a, b))
    return Expr("where", (cond, a, b)) if ok and isinstance(cond, Node) else None


def _reduced(x, dims) -> str | None:
    """Which modes a reduction of `x` over `dims` removes: "row" (M of an [M, N] value), "col"
    (its last dim, N), "scalar" (all; also an empty dim list), or None."""
    val = x.meta.get("val") if isinstance(x, Node) else None
    if val is None or val.dim() not in (2, 3):
        return None
    rank = val.dim()
    found = sorted({d % rank for d in dims or range(rank)})
    if found == list(range(rank)):
        return "scalar"
    if found == [rank - 1]:
        return "col"
    return "row" if rank == 2 and found == [0] else None


def _reduction(op: str) -> Rule:
    """sum/amax(x, dims, keepdim) of an [L,] M, N value: a row, col or scalar reduction."""

    def rule(node: Node) -> Expr | None:
        x = node.args[0]
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        where = _reduced(x, dims)
        if where is None or set(node.kwargs) - {"dtype", "keepdim", "dim"}:
            return None
        return Expr(f"{where}_{op}", (x,))

    return rule


def _mean(node: Node) -> Expr | None:
    """mean(x, [-1]) (LayerNorm's mean): a Welford statistic over N; mean(x, [0]) of an [M, N]
    value beside a var of it over M (BatchNorm1d's batch statistics): one over M. A mean over M
    alone stays outside: a Welford pass over M for it alone costs more than a sum would."""
    x, dims = node.args[0], node.args[1] if len(node.args) > 1 else None
    where = _reduced(x, dims)
    if where not in ("col", "row") or node.kwargs.get("dtype") not in (None, _dtype(node)):
        return None
    if where == "row" and not any(_var_over_rows(u) for u in x.users):
        return None
    return Expr(f"{where}_mean", (x,))


def _var_over_rows(node: Node) -> bool:
    """Whether `node` is a var over M of an [M, N] value."""
    if node.op != "call_function" or node.target is not aten.var.correction:
        return False
    return _reduced(node.args[0], node.args[1] if len(node.args) > 1 else None) == "row"


def _pow(node: Node) -> Expr | None:
    """x ** 2 (an MSE loss's square) as x * x, x ** 3 (the tanh GELU written out, HF GPT-2's
    `gelu_new`) as `cube`; other exponents stay outside."""
    x, exponent = node.args[0], node.args[1]
    if not _number(exponent) or exponent not in (2, 3):
        return None
    return Expr("mul", (x, x)) if exponent == 2 else Expr("cube", (x,))


def _var(node: Node) -> Expr | None:
    """var(x, [-1], correction=c) (LayerNorm's biased var: c = 0): a Welford statistic over N;
    var(x, [0], correction=c) of an [M, N] value (BatchNorm1d's): one over M."""
    x, dims = node.args[0], node.args[1] if len(node.args) > 1 else None
    c = node.kwargs.get("correction")
    c = 1 if c is None else c
    where = _reduced(x, dims)
    if where not in ("col", "row") or not _number(c) or c < 0 or float(c) != int(c):
        return None
    return Expr(f"{where}_var", (x, int(c)))


def _softmax_sum(node: Node) -> Expr | None:
    """evt::softmax_sum(x, keepdim, zero_inf_max): sum exp(x - max x) over N, per row."""
    x = node.args[0]
    return Expr("softmax_sum", (x, bool(node.args[2]))) if _reduced(x, [-1]) == "col" else None


def _dtype(node: Node):
    return getattr(node.meta.get("val"), "dtype", None)


def _number(v) -> bool:
    return isinstance(v, (float, int)) and not isinstance(v, bool)


def _convert(node: Node) -> Expr | None:
    dtype = node.args[1]
    return Expr("identity", (node.args[0],), dtype) if dtype in FLOAT_DTYPES else None


def _to_copy(node: Node) -> Expr | None:
    if set(node.kwargs) - {"dtype", "layout", "device", "memory_format"}:
        return None
    dtype = node.kwargs.get("dtype")
    return Expr("identity", (node.args[0],), dtype) if dtype in FLOAT_DTYPES else None


FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

ARITHMETIC: dict = {
    aten.add.Tensor: _binary("add", with_alpha=True),
    aten.add.Scalar: _binary("add", with_alpha=True),
    aten.sub.Tensor: _binary("sub", with_alpha=True),
    aten.sub.Scalar: _binary("sub", with_alpha=True),
    aten.mul.Tensor: _binary("mul"),
    aten.mul.Scalar: _binary("mul"),
    aten.div.Tensor: _div,
    aten.div.Scalar: _div,
    aten.neg.default: _unary("neg"),
    aten.pow.Tensor_Scalar: _pow,
}
ACTIVATIONS: dict = {
    aten.relu.default: _unary("relu"),
    aten.threshold_backward.default: _threshold_backward,
    aten.gelu.default: _gelu,
    aten.gelu_backward.default: _gelu_backward,
    aten.silu.default: _unary("silu"),
    aten.silu_backward.default: _binary("silu_backward"),
    aten.sigmoid.default: _unary("sigmoid"),
    aten.sigmoid_backward.default: _binary("sigmoid_backward"),
    aten.tanh.default: _unary("tanh"),
    aten.tanh_backward.default: _binary("tanh_backward"),
}
MATH: dict = {
    aten.exp.default: _unary("exp"),
    aten.log.default: _unary("log"),
    aten.rsqrt.default: _unary("rsqrt"),
    aten.maximum.default: _binary("maximum"),
    aten.minimum.default: _binary("minimum"),
}
COMPARISONS: dict = {
    overload: _compare(op)
    for op in ("gt", "ge", "lt", "le", "eq", "ne")
    for overload in (getattr(aten, op).Scalar, getattr(aten, op).Tensor)
}
SELECT: dict = {
    aten.where.self: _where,
    aten.where.ScalarSelf: _where,
    aten.where.ScalarOther: _where,
    aten.where.Scalar: _where,
}
REDUCTIONS: dict = {
    aten.sum.dim_IntList: _reduction("sum"),
    aten.sum.default: _reduction("sum"),
    aten.amax.default: _reduction("max"),
    aten.mean.dim: _mean,
    aten.var.correction: _var,
    SOFTMAX_SUM: _softmax_sum,
}
CASTS: dict = {
    prims.convert_element_type.default: _convert,
    aten._to_copy.default: _to_copy,
}

EPILOGUE_RULES: dict = ARITHMETIC | ACTIVATIONS | MATH | COMPARISONS | SELECT | CASTS | REDUCTIONS
# terminal in a region: a reduced value exists only after the kernel
REDUCTION_OPS = (
    "row_sum", "row_max", "col_sum", "col_max", "scalar_sum", "scalar_max",
    "col_mean", "col_var", "row_mean", "row_var", "softmax_sum",
)  # fmt: skip


_memo: dict | None = None  # node -> expr, while a partitioner runs on a graph it does not change


@contextlib.contextmanager
def memoized() -> Iterator[None]:
    """Remember `epilogue_expr` per node for the duration (the partitioner asks ~10x per node)."""
    global _memo
    outer, _memo = _memo, {}
    try:
        yield
    finally:
        _memo = outer


def epilogue_expr(node: Node) -> Expr | None:
    """The expression `node` computes, or None if it cannot join an epilogue (including a result
    of a dtype an epilogue cannot hold: bool only from comparisons and where, else floats)."""
    if _memo is None:
        return _epilogue_expr(node)
    if node not in _memo:
        _memo[node] = _epilogue_expr(node)
    return _memo[node]


def statistics_enabled() -> bool:
    """Reductions other than the bias gradient's sum over M (statistics over N, max, scalar
    reductions, softmax and Welford statistics): on unless EVT_STATISTICS=0."""
    return os.environ.get("EVT_STATISTICS", "1") != "0"


def _epilogue_expr(node: Node) -> Expr | None:
    if node.op != "call_function" or node.target not in EPILOGUE_RULES:
        return None
    expr = EPILOGUE_RULES[node.target](node)
    if expr is not None and expr.op in REDUCTION_OPS and expr.op != "row_sum":
        if not statistics_enabled():
            return None
    dtype = getattr(node.meta.get("val"), "dtype", None)
    if expr is None or dtype is None or dtype in FLOAT_DTYPES:
        return expr
    return expr if dtype == torch.bool and expr.op in MASK_OPS else None


def is_reduction(node: Node) -> bool:
    """Whether `node` is an epilogue reduction (its output is a vector, not an [M, N] value)."""
    expr = epilogue_expr(node)
    return expr is not None and expr.op in REDUCTION_OPS


def tensor_args(expr: Expr) -> list[Node]:
    """The FX nodes an expression reads, in order, without duplicates."""
    out: list[Node] = []
    for a in expr.args:
        for n in tensor_args(a) if isinstance(a, Expr) else [a] if isinstance(a, Node) else []:
            if n not in out:
                out.append(n)
    return out

"""Which aten ops an epilogue can absorb, and what each one computes, as a rule table.

A rule maps an FX node to an `Expr` over the node's inputs (FX nodes or Python numbers), written
with the op names of `evt.ir.COMPUTE_OPS`, or returns None when this particular call cannot be
fused (e.g. an unsupported keyword). Tables combine with `|`; adding an op is one entry here and one
row in `COMPUTE_OPS` (+ its functor and its reference).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.fx import Node

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


def _unary(op: str) -> Rule:
    return lambda node: Expr(op, (node.args[0],))


def _gelu(node: Node) -> Expr:
    tanh = node.kwargs.get("approximate", "none") == "tanh"
    return Expr("gelu_tanh" if tanh else "gelu", (node.args[0],))


def _gelu_backward(node: Node) -> Expr:
    tanh = node.kwargs.get("approximate", "none") == "tanh"
    return Expr("gelu_tanh_backward" if tanh else "gelu_backward", (node.args[0], node.args[1]))


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
    aten.div.Tensor: _binary("div"),
    aten.div.Scalar: _binary("div"),
    aten.neg.default: _unary("neg"),
}
ACTIVATIONS: dict = {
    aten.relu.default: _unary("relu"),
    aten.gelu.default: _gelu,
    aten.gelu_backward.default: _gelu_backward,
}
CASTS: dict = {
    prims.convert_element_type.default: _convert,
    aten._to_copy.default: _to_copy,
}

EPILOGUE_RULES: dict = ARITHMETIC | ACTIVATIONS | CASTS


def epilogue_expr(node: Node) -> Expr | None:
    """The expression `node` computes, or None if it cannot join an epilogue."""
    if node.op != "call_function" or node.target not in EPILOGUE_RULES:
        return None
    return EPILOGUE_RULES[node.target](node)


def tensor_args(expr: Expr) -> list[Node]:
    """The FX nodes an expression reads, in order, without duplicates."""
    out: list[Node] = []
    for a in expr.args:
        for n in tensor_args(a) if isinstance(a, Expr) else [a] if isinstance(a, Node) else []:
            if n not in out:
                out.append(n)
    return out

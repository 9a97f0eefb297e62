"""GEMM canonicalization: describe each `mm`/`addmm` by operand layouts, folding transposes.

Writes `node.meta["evt_gemm"]` (a `GemmOperands`) on every GEMM; the graph itself stays plain
aten. A chain of `permute`/`t`/`transpose` on an operand becomes a `transposed` flag on the base
tensor, so a transposed weight is read in place, without a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Graph, Node

aten = torch.ops.aten
GEMM = "evt_gemm"


@dataclass(frozen=True)
class GemmOperands:
    a: Node  # logical A = a (or aᵀ)
    a_transposed: bool
    b: Node
    b_transposed: bool
    bias: Node | None = None  # addmm's `self`
    alpha: float = 1.0
    beta: float = 1.0


def _is_transpose(node: Node) -> bool:
    if node.op != "call_function" or "val" not in node.meta:
        return False
    if node.meta["val"].dim() != 2:
        return False
    if node.target == aten.permute.default:
        return list(node.args[1]) == [1, 0]
    if node.target == aten.transpose.int:
        return sorted(d % 2 for d in node.args[1:3]) == [0, 1]
    return node.target == aten.t.default


def strip_transposes(node: Node) -> tuple[Node, bool]:
    transposed = False
    while _is_transpose(node):
        node, transposed = node.args[0], not transposed
    return node, transposed


def _operands(node: Node) -> GemmOperands | None:
    if node.target == aten.mm.default:
        (a, at), (b, bt) = strip_transposes(node.args[0]), strip_transposes(node.args[1])
        return GemmOperands(a, at, b, bt)
    if node.target == aten.addmm.default:
        (a, at), (b, bt) = strip_transposes(node.args[1]), strip_transposes(node.args[2])
        beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
        return GemmOperands(a, at, b, bt, node.args[0], alpha, beta)
    return None


def fold_gemm_operands(graph: Graph) -> Graph:
    for node in graph.nodes:
        if node.op == "call_function":
            operands = _operands(node)
            if operands is not None:
                node.meta[GEMM] = operands
    return graph

"""GEMM canonicalization: describe each `mm`/`addmm`/`bmm`/`baddbmm` by operand layouts, folding
transposes.

Writes `node.meta["evt_gemm"]` (a `GemmOperands`) on every GEMM; the graph itself stays plain
aten. A chain of `permute`/`t`/`transpose` of the last two dimensions on an operand becomes a
`transposed` flag on the base tensor, so a transposed weight (or attention's Kᵀ) is read in
place, without a copy. A batched operand is then read as [L, rows, cols] with one L stride: the
`clone` Inductor's decomposition puts before a `bmm` of attention's heads is the tensor read here
(a [B, H] batch of a [B, S, H, D] projection needs two batch strides: `read_heads_in_place`, the
next pass, reads the projection instead where a kernel can).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch.fx import Graph, Node

aten = torch.ops.aten
GEMM = "evt_gemm"
# the aten GEMMs a region may anchor
GEMM_TARGETS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}


@dataclass(frozen=True)
class GemmOperands:
    a: Node  # logical A = a (or aᵀ)
    a_transposed: bool
    b: Node
    b_transposed: bool
    bias: Node | None = None  # addmm's `self`
    alpha: float = 1.0
    beta: float = 1.0
    batched: bool = False  # bmm/baddbmm: operands and result carry a leading L
    nested: bool = False  # batched, L = L1 x L2: an operand is [L1, L2, rows, cols] (read in place)


def _is_transpose(node: Node, dim: int) -> bool:
    """Whether `node` swaps the last two dimensions of a `dim`-D tensor, and only those."""
    if node.op != "call_function" or "val" not in node.meta:
        return False
    if node.meta["val"].dim() != dim:
        return False
    if node.target == aten.permute.default:
        perm = cast(list[int], node.args[1])
        return [d % dim for d in perm] == [*range(dim - 2), dim - 1, dim - 2]
    if node.target == aten.transpose.int:
        pair = cast(tuple[int, int], node.args[1:3])
        return sorted(d % dim for d in pair) == [dim - 2, dim - 1]
    return node.target == aten.t.default


def strip_transposes(node: Node, dim: int = 2) -> tuple[Node, bool]:
    transposed = False
    while _is_transpose(node, dim):
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
    if node.target == aten.bmm.default:
        (a, at), (b, bt) = strip_transposes(node.args[0], 3), strip_transposes(node.args[1], 3)
        return GemmOperands(a, at, b, bt, batched=True)
    if node.target == aten.baddbmm.default:
        (a, at), (b, bt) = strip_transposes(node.args[1], 3), strip_transposes(node.args[2], 3)
        beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
        return GemmOperands(a, at, b, bt, node.args[0], alpha, beta, batched=True)
    return None


def fold_gemm_operands(graph: Graph) -> Graph:
    for node in graph.nodes:
        if node.op == "call_function":
            operands = _operands(node)
            if operands is not None:
                node.meta[GEMM] = operands
    return graph

"""A region whose GEMM would read its heads in place (`read_heads_in_place`) but whose epilogue
holds a reduction a nested-batch kernel cannot have yet reads the graph's copies instead.

Kernels with a nested batch (L = L1 x L2) reduce over N (softmax's max and sum of the scores,
column sums: M-vectors per batch) but not over M or over everything (`ir.NOT_NESTED`), and a
reduction kept on chip is worth more than the copies: it reads an [B·H, S, S] value, the copies
of q and k are [B·H, S, D]. The GEMM gets back the operands `fold_gemm_operands` gave it;
`free_head_copies`, next, then leaves those copies to their other readers.
"""

from __future__ import annotations

from torch.fx import Graph

from evt.graph.epilogue_rules import epilogue_expr
from evt.graph.fold_gemm_operands import GEMM
from evt.graph.read_heads_in_place import COPIED
from evt.partition.region import Region


def restore_head_copies(graph: Graph, regions: list[Region]) -> list[Region]:
    for r in regions:
        copied = r.anchor.meta.get(COPIED)
        if copied is not None and r.anchor.meta[GEMM].nested and any(map(_not_nested, r.epilogue)):
            r.anchor.meta[GEMM] = copied
    return regions


def _not_nested(node) -> bool:
    """A reduction over M (an N-vector) or over everything: no nested-batch kernel has them."""
    expr = epilogue_expr(node)
    return expr is not None and expr.op.startswith(("row_", "scalar_"))

"""Decompose the ops evt kept whole but no region took.

evt traces the joint graph with Inductor's decomposition table minus `KEPT` (GELU, SiLU and the
activation backwards), so each of them reaches the partitioner as one node and maps to one
CUTLASS functor. Inductor has no lowering for them, though: one left outside every region would
become an eager fallback kernel (torch >= 2.12) or fail Inductor's "both a fallback and a decomp"
assertion (torch 2.11). This pass, run on the Inductor route after the pipeline (also when the
pipeline failed), replaces each leftover with the nodes of its Inductor decomposition, traced on
the node's fake values, so Inductor fuses it like any other pointwise op.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.fx import Graph, Node
from torch.utils import _pytree as pytree

aten = torch.ops.aten
KEPT = frozenset({
    aten.gelu.default, aten.gelu_backward.default,
    aten.silu.default, aten.silu_backward.default,
    aten.sigmoid_backward.default, aten.tanh_backward.default,
    aten.threshold_backward.default,  # ReLU's backward
})  # fmt: skip


def decompose_kept_ops(graph: Graph) -> Graph:
    from torch._inductor.decomposition import select_decomp_table

    table = select_decomp_table()
    for op in KEPT & table.keys():
        for node in list(graph.find_nodes(op="call_function", target=op)):
            inline(graph, node, table[op], table)
    return graph


def inline(graph: Graph, node: Node, decomposition: Callable, table: dict | None = None) -> None:
    """Replace `node` by the aten graph `decomposition` (a function of the node's arguments)
    traces to on the node's fake values (`table` decomposes further); the new nodes carry the
    node's other metadata (its side, stack trace)."""
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    args, spec = pytree.tree_flatten((node.args, node.kwargs))
    vals = [a.meta["val"] if isinstance(a, Node) else a for a in args]
    tensor_at = [i for i, v in enumerate(vals) if isinstance(v, torch.Tensor)]

    def fn(*tensors):
        flat = list(vals)
        for i, t in zip(tensor_at, tensors):
            flat[i] = t
        a, kw = pytree.tree_unflatten(flat, spec)
        return decomposition(*a, **kw)

    fake_mode = detect_fake_mode([vals[i] for i in tensor_at])
    with fake_mode or torch._subclasses.FakeTensorMode():
        traced = make_fx(fn, table or {}, tracing_mode="real")(*[vals[i] for i in tensor_at])
    inherited = {k: v for k, v in node.meta.items() if k != "val"}
    env: dict[Node, Node] = {}
    placeholders = iter(args[i] for i in tensor_at)
    with graph.inserting_before(node):
        for sub in traced.graph.nodes:
            if sub.op == "placeholder":
                env[sub] = next(placeholders)
            elif sub.op == "output":
                (result,) = pytree.tree_leaves(sub.args[0])
                node.replace_all_uses_with(env[result])
            else:
                env[sub] = graph.node_copy(sub, lambda n: env[n])
                env[sub].meta.update(inherited)  # its fake value stays the traced one
    graph.erase_node(node)

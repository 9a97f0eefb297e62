"""Reachability pruning: which nodes each GEMM could ever absorb.

A node is a candidate of GEMM g only if g reaches it through epilogue-able nodes of g's side and
g's shape ([M, N], or [L, M, N] for a batched GEMM), and every input it reads is either another such node or loadable from global memory
(an aux tensor or a row/column vector). Without this pruning the ILP has a variable per
(GEMM, node) pair and explodes on real graphs.

A node computed from row/column broadcasts alone (`broadcast_tree`: cross-entropy's one-hot,
`iota(N) == target`, see `evt/graph/one_hot_scatters.py`) is a candidate too where a candidate
reads it: it is not downstream of the GEMM, but the epilogue computes it per element as cheaply
as it would load it. The ILP lets it join only a region that holds one of its readers.

A reduction or statistic of an [M, N] candidate (`REDUCTION_OPS`: a sum or max over M, N or
both, softmax's sum of exp, a mean or var over N) is terminal: its value is complete only after
the kernel, so the walk does not continue through it. A candidate that reads it (loading it as a
row/column vector) is still a candidate; the two never share a region (the ILP's
`_reductions_terminal`, the greedy partitioner and the validator each enforce it), so the ILP
chooses between them: softmax's statistics next to the GEMM, or the ops after them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from torch.fx import Graph, Node

from evt.graph.annotate_sides import side
from evt.graph.epilogue_rules import REDUCTION_OPS, epilogue_expr, is_reduction, tensor_args
from evt.graph.layouts import gemm_shape, load_kind

MAX_AUX_TENSORS = 4  # aux loads + aux stores per kernel: each costs epilogue shared memory


@dataclass
class Candidates:
    anchor: Node
    shape: tuple[int, ...]
    nodes: list[Node] = field(default_factory=list)  # graph order, anchor excluded
    must_join: dict[Node, list[Node]] = field(default_factory=dict)  # inputs that cannot be loaded
    free: set[Node] = field(default_factory=set)  # computed from broadcasts alone (broadcast_tree)

    def members(self) -> list[Node]:
        return [self.anchor, *self.nodes]


def find_candidates(graph: Graph, max_aux: int = MAX_AUX_TENSORS) -> list[Candidates]:
    order = {n: i for i, n in enumerate(graph.nodes)}
    out = []
    for node in graph.nodes:
        shape = gemm_shape(node)
        if shape is not None:
            c = _grow(node, shape, order, max_aux)
            if c.nodes:
                out.append(c)
    return out


def _grow(anchor: Node, shape: tuple[int, ...], order: dict[Node, int], max_aux: int) -> Candidates:
    """Walk users from the anchor in graph order, keeping nodes an epilogue could compute.

    A node is kept only if the aux tensors its kernel would have to load to compute it are at
    most `max_aux` (what the ILP's capacity constraint allows): every node between the anchor and
    it is in its region too (computed outside, it would read the anchor's result and feed the
    region: a cycle), so each of their full-size inputs from outside is loaded. Without this
    bound a residual stream made every layer's residual adds candidates of each earlier layer's
    GEMMs: variables quadratic in the depth (`scripts/deep_compile.py`)."""
    c = Candidates(anchor, shape)
    reach = {anchor}
    loads: dict[Node, frozenset[Node]] = {anchor: frozenset()}  # the aux loads computing it takes
    heap = [(order[u], u) for u in anchor.users]
    heapq.heapify(heap)
    seen = set(anchor.users)
    while heap:
        _, node = heapq.heappop(heap)
        if not _eligible(node, anchor, shape):
            continue
        args = tensor_args(epilogue_expr(node))
        kinds = {a: load_kind(a.meta.get("val"), *shape) for a in args}
        unloadable = [a for a in args if kinds[a] is None]
        if any(a not in reach for a in unloadable):
            continue
        trees = {a: None if a in reach else broadcast_tree(a, anchor, shape) for a in args}
        need = frozenset().union(*(loads[a] for a in args if a in reach)) | {
            a for a, tree in trees.items() if a not in reach and tree is None and kinds[a] == "aux_load"
        }
        if len(need) > max_aux:
            continue
        c.nodes.append(node)
        c.must_join[node] = [a for a in unloadable if a is not anchor]
        for tree in trees.values():
            for b in tree or []:
                c.free.add(b)
                if b not in c.must_join:
                    c.nodes.append(b)
                    c.must_join[b] = []
        if is_reduction(node):
            continue
        reach.add(node)
        loads[node] = need
        for u in node.users:
            if u not in seen:
                seen.add(u)
                heapq.heappush(heap, (order[u], u))
    c.nodes.sort(key=order.__getitem__)
    return c


BROADCASTS = ("row_broadcast", "col_broadcast")


def broadcast_tree(node: Node, anchor: Node, shape: tuple[int, ...]) -> list[Node] | None:
    """`node` and its producers if `node` is an [M, N] value an epilogue computes from row and
    column broadcasts (and numbers) alone, through ops of `anchor`'s side; else None."""
    if not isinstance(node, Node) or not _eligible(node, anchor, shape) or is_reduction(node):
        return None
    out = [node]
    for a in tensor_args(epilogue_expr(node)):
        if load_kind(a.meta.get("val"), *shape) in BROADCASTS:
            continue
        below = broadcast_tree(a, anchor, shape)
        if below is None:
            return None
        out += below
    return out


def _eligible(node: Node, anchor: Node, shape: tuple[int, ...]) -> bool:
    return (
        epilogue_expr(node) is not None
        and value_shape(node) == shape
        and side(node) == side(anchor)
    )


def value_shape(node: Node) -> tuple | None:
    """The shape ([L,] M, N) a node's epilogue works on: its own, or a reduction's summand's."""
    expr = epilogue_expr(node)
    x = expr.args[0] if expr is not None and expr.op in REDUCTION_OPS else node
    val = x.meta.get("val") if isinstance(x, Node) else None
    return None if val is None else tuple(val.shape)

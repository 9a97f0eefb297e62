"""Reachability pruning: which nodes each GEMM could ever absorb.

A node is a candidate of GEMM g only if g reaches it through epilogue-able nodes of g's side and
g's shape ([M, N], or [L, M, N] for a batched GEMM), and every input it reads is either another such node or loadable from global memory
(an aux tensor or a row/column vector). Without this pruning the ILP has a variable per
(GEMM, node) pair and explodes on real graphs.

A node computed from loads alone (`load_tree`: from row/column broadcasts, cross-entropy's
one-hot `iota(N) == target`, see `evt/graph/one_hot_scatters.py`; or from a few aux tensors,
SwiGLU's silu(g) read by the down projection's dgrad beside g itself) is a candidate too where a
candidate reads it: it is not downstream of the GEMM, but the epilogue computes it per element
from what it loads. The ILP lets it join only a region that holds one of its readers.

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
from evt.graph.sizes import same_shape

MAX_AUX_TENSORS = 4  # aux loads + aux stores per kernel: each costs epilogue shared memory


@dataclass
class Candidates:
    anchor: Node
    shape: tuple[int, ...]
    nodes: list[Node] = field(default_factory=list)  # graph order, anchor excluded
    must_join: dict[Node, list[Node]] = field(default_factory=dict)  # inputs that cannot be loaded
    free: set[Node] = field(default_factory=set)  # computed from loads alone (load_tree)

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
        trees = {a: None if a in reach else load_tree(a, anchor, shape, order) for a in args}
        need = frozenset().union(*(loads[a] for a in args if a in reach))
        for a, tree in trees.items():  # each input loaded, or computed from what its tree loads
            if a not in reach and kinds[a] != "scalar_load":  # a 0-d tensor takes no shared memory
                need |= {a} if kinds[a] == "aux_load" or tree is None else tree[1]
        if len(need) > max_aux:
            continue
        c.nodes.append(node)
        c.must_join[node] = [a for a in unloadable if a is not anchor]
        for tree in trees.values():
            for b in tree[0] if tree else []:
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
MAX_TREE = 4  # ops in a tree an epilogue computes from loads alone
MAX_TREE_AUX = 2  # aux tensors such a tree reads


def load_tree(node: Node, anchor: Node, shape: tuple[int, ...], order: dict[Node, int]
              ) -> tuple[list[Node], frozenset[Node]] | None:  # fmt: skip
    """`node` and its producers, and the aux tensors they read, if `node` is an [M, N] value an
    epilogue computes from loads alone in at most `MAX_TREE` ops of `anchor`'s side: from row and
    column broadcasts and numbers, and `node` itself also from at most `MAX_TREE_AUX` aux
    tensors computed before the anchor while its ops come after it (in graph order: no aux
    tensor depends on the anchor's region, whose kernel would then read what it feeds, and no op
    is an operand of the anchor's GEMM); else None. The ops compute in fp32: a 16-bit op's
    rounding is skipped, as Inductor's fused kernels skip it."""
    out: list[Node] = []
    aux: set[Node] = set()

    def walk(n, loads: bool) -> bool:  # n computed from broadcasts (and, with `loads`, aux tensors)
        if (not isinstance(n, Node) or not _eligible(n, anchor, shape, shared=True)
                or is_reduction(n) or len(out) >= MAX_TREE):  # fmt: skip
            return False
        out.append(n)
        for a in tensor_args(epilogue_expr(n)):
            kind = load_kind(a.meta.get("val"), *shape)
            if kind in BROADCASTS or a in out or a in aux:
                continue
            mark = len(out)
            if walk(a, loads=False):
                continue
            del out[mark:]
            if not loads or kind != "aux_load" or order[a] > order[anchor]:
                return False
            aux.add(a)
        return True

    if not walk(node, loads=True) or len(aux) > MAX_TREE_AUX:
        return None
    if aux and any(order[n] < order[anchor] for n in out):
        return None  # computed before the GEMM: maybe its operand (a residual stream's sum)
    return out, frozenset(aux)


def _eligible(node: Node, anchor: Node, shape: tuple[int, ...], shared: bool = False) -> bool:
    """Whether `node` is an epilogue op of `anchor`'s side over its shape; with `shared` (a load
    tree's node) also one over [M, N] alone that a batched GEMM's batches share (a causal mask
    computed from index vectors, `float_index_masks`), read by one node only, so that it is
    never a region output, which the kernel would store per batch."""
    if epilogue_expr(node) is None or side(node) != side(anchor):
        return False
    own = value_shape(node)
    if own is None:
        return False
    return same_shape(own, shape) or (shared and len(shape) == 3 and same_shape(own, shape[1:])
                                      and len(node.users) == 1)  # fmt: skip


def value_shape(node: Node) -> tuple | None:
    """The shape ([L,] M, N) a node's epilogue works on: its own, or a reduction's summand's."""
    expr = epilogue_expr(node)
    x = expr.args[0] if expr is not None and expr.op in REDUCTION_OPS else node
    val = x.meta.get("val") if isinstance(x, Node) else None
    return None if val is None else tuple(val.shape)

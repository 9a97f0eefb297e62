"""Make a mask computed from indices alone something an epilogue computes: a causal mask
`torch.ones(S, S, dtype=torch.bool).triu(1)` decomposes to integer index arithmetic,

    ge(sub(iota(S)[None, :], iota(S)[:, None]), 1)  ->  the same on float(iota(S))
    logical_and(mask, full(True))                    ->  mask
    bitwise_not(le(d, 0))  (`~torch.ones(S, S).tril()`)  ->  gt(d, 0)

An epilogue holds no integers, and `logical_and` is no op of its own, so the mask stayed a bool
[S, S] tensor that Inductor computed and the scores' kernel loaded through TMA (GPT-2's and
BERT's causal scores; at ViT's 197 tokens its rows are not whole 16-byte vectors, so every launch
first copied it into padded rows). With float indices the compare reads a row broadcast (the
column index, an S-vector) and a column broadcast (the row index), and joins the region of the
GEMM whose epilogue selects with it (`candidates.load_tree`, also for a batched GEMM whose
batches share the [S, S] mask): the kernel loads two vectors instead of a mask tile per subtile.

Exact: every value of the chain (iotas from 0 with step 1, sums and differences of them and of
integer constants) is an integer of magnitude below 2**24, which float32 holds, so each compare
gives what the integer one gives; wider chains are left alone. Only a compare whose every tensor
operand is such a chain, each node of which is read by the chain or the compare alone, is
rewritten (a one-hot `iota == target` is `float_index_compares`'); `logical_and` with a
`full(True)` of a shape that broadcasts nothing folds away, and a `bitwise_not` of a rewritten
compare becomes the complementary compare (an epilogue has no logical not; index values are never
NaN, so the two agree everywhere). `copy_index_masks` then gives each of the mask's readers its
own copy (in training the backward reads it too). Where no region takes the compare,
Inductor computes the float chain instead of the integer one: the same values.
`EVT_INDEX_MASKS=0` turns the pass off.
"""

from __future__ import annotations

import os

import torch
from torch.fx import Graph, Node

from evt.graph.epilogue_rules import COMPARISONS
from evt.graph.fake import fake_value, make_node, value
from evt.graph.one_hot_scatters import EXACT, INTEGERS

aten, prims = torch.ops.aten, torch.ops.prims
SHAPE_OPS = {aten.unsqueeze.default, aten.view.default, aten.reshape.default,
             aten._unsafe_view.default, aten.expand.default}  # fmt: skip
SUMS = {aten.add.Tensor, aten.sub.Tensor, aten.add.Scalar, aten.sub.Scalar}
MAX_CHAIN = 8  # nodes of one operand's chain
# `~mask` of a compare: the complementary compare (exact: index values are never NaN)
NEGATED = {"gt": "le", "ge": "lt", "lt": "ge", "le": "gt", "eq": "ne", "ne": "eq"}
NOTS = {aten.bitwise_not.default, aten.logical_not.default}
INDEX_MASK = "evt_index_mask"  # node.meta: a compare this pass rewrote (`copy_index_masks`)


def enabled() -> bool:
    return os.environ.get("EVT_INDEX_MASKS", "1") != "0"


def rewrite_index_masks(graph: Graph) -> Graph:
    if not enabled():
        return graph
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in COMPARISONS:
            chain = _index_compare(node)
            if chain:
                _in_float(graph, node, chain)
                node.meta[INDEX_MASK] = True
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.logical_and.default:
            _fold_all_true(graph, node)
        elif node.op == "call_function" and node.target in NOTS:
            _fold_not(graph, node)
    return graph


def _index_compare(node: Node) -> list[Node] | None:
    """The chain nodes (graph order) of a compare whose every tensor operand is an integer index
    expression (`_bound`) below `EXACT`, read by nothing else; None otherwise."""
    chain: list[Node] = []
    tensors = [a for a in node.args if isinstance(a, Node)]
    if not tensors or any(not isinstance(a, (Node, int)) or isinstance(a, bool) for a in node.args):
        return None
    for a in tensors:
        bound = _bound(a, chain)
        if bound is None or bound >= EXACT:
            return None
    members = set(chain)
    if any(u not in members and u is not node for n in chain for u in n.users):
        return None  # an integer reader elsewhere (position ids) keeps its integers
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    return sorted(members, key=order.__getitem__)


def _bound(a: Node, chain: list[Node]) -> int | None:
    """The largest magnitude integer expression `a` takes, adding its nodes to `chain`; None if
    it is not an index expression: `prims.iota(n, start=0, step=1)`, shape ops of one, sums and
    differences of them and of integer constants, integers throughout."""
    val = value(a)
    if not isinstance(val, torch.Tensor) or val.dtype not in INTEGERS or len(chain) >= MAX_CHAIN:
        return None
    chain.append(a)
    if a.target is prims.iota.default:
        n, kw = a.args[0], a.kwargs
        ok = isinstance(n, int) and kw.get("start", 0) == 0 and kw.get("step", 1) == 1
        return n - 1 if ok else None
    if a.target in SHAPE_OPS and isinstance(a.args[0], Node):
        return _bound(a.args[0], chain)
    if a.target in SUMS and len(a.args) == 2 and a.kwargs.get("alpha", 1) == 1:
        parts = []
        for x in a.args:
            if isinstance(x, Node):
                parts.append(_bound(x, chain))
            else:
                parts.append(abs(x) if isinstance(x, int) and not isinstance(x, bool) else None)
        return None if None in parts else sum(parts)
    return None


def _in_float(graph: Graph, compare: Node, chain: list[Node]) -> None:
    """Each iota of `chain` read as float32, the chain's values traced again in order."""
    for node in chain:
        if node.target is prims.iota.default:
            with graph.inserting_after(node):
                f32 = make_node(graph, prims.convert_element_type.default, (node, torch.float32),
                                {}, node, f"{node.name}_f32")  # fmt: skip
            for user in [u for u in node.users if u is not f32]:
                user.replace_input_with(node, f32)
    for node in [*[n for n in chain if n.target is not prims.iota.default], compare]:
        node.meta["val"] = fake_value(node.target, node.args, node.kwargs, node)


def _fold_not(graph: Graph, node: Node) -> None:
    """`bitwise_not(compare)` of a rewritten compare -> the complementary compare (`tril()`'s mask
    masked as `~mask`): an epilogue has no logical not."""
    compare = node.args[0]
    if not (isinstance(compare, Node) and compare.meta.get(INDEX_MASK)):
        return
    op, overload = compare.target._opname, compare.target._overloadname
    with graph.inserting_after(node):
        negated = make_node(graph, getattr(getattr(aten, NEGATED[op]), overload), compare.args,
                            compare.kwargs, node, f"not_{compare.name}")  # fmt: skip
    negated.meta[INDEX_MASK] = True
    node.replace_all_uses_with(negated)
    graph.erase_node(node)
    if not compare.users:
        graph.erase_node(compare)


def _fold_all_true(graph: Graph, node: Node) -> None:
    """`logical_and(x, full(True))` -> x where the full broadcasts x to no larger shape."""
    for x, other in (node.args, node.args[::-1]):
        if not (isinstance(x, Node) and isinstance(other, Node)):
            return
        if other.target is aten.full.default and other.args[1] is True and value(x) is not None:
            xv, out = value(x), value(node)
            if xv.dtype == torch.bool and tuple(xv.shape) == tuple(out.shape):
                node.replace_all_uses_with(x)
                graph.erase_node(node)
                return

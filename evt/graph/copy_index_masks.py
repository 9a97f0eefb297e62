"""Give each reader of an index mask its own copy of it, so that every region reading the mask can
compute it in its epilogue.

`rewrite_index_masks` makes a causal mask something an epilogue computes from two index vectors,
but a batched region may compute an [S, S] node only where nothing outside the region reads it
(it would be stored per batch otherwise). In training the mask has two readers: the forward's
`where(mask, -inf, scores)` and the backward's `where(mask, 0, grad)`, which AOTAutograd's joint
graph reads from one node. So the forward's scores kernel loaded the mask as a bool [S, S] tensor
after all (every causal program of `scripts/model_fuzz.py` with `EVT_SDPA=0`, session 46).

Each reader but the first (graph order) now reads a copy of the nodes it needs of the mask: the
compare, what the compare's users compute from it alone (`bitwise_not`), and the index chain down
to its `iota`s. A copy takes its reader's side, so a backward reader's copy is computed in the
backward (AOTAutograd's partitioner recomputes it there, as it does with factory ops, instead of
saving an [S, S] tensor) or in the backward region that reads it. What a copy computes costs a few
integer-exact float operations an element where Inductor computes it, and nothing where a region
does. `EVT_INDEX_MASKS=0` turns this off with `rewrite_index_masks`.
"""

from __future__ import annotations

from torch.fx import Graph, Node

from evt.graph.annotate_sides import side
from evt.graph.fake import copy_nodes, draws_random
from evt.graph.float_index_masks import INDEX_MASK, enabled

MAX_DERIVED = 4  # nodes computed from the compare alone, beyond it (bitwise_not, a view)


def copy_index_masks(graph: Graph) -> Graph:
    if not enabled():
        return graph
    for compare in [n for n in graph.nodes if n.meta.get(INDEX_MASK)]:
        mask = _mask_nodes(compare)
        readers = [
            u for u in graph.nodes if u not in mask and any(a in mask for a in u.all_input_nodes)
        ]
        for reader in readers[1:]:
            _give_copy(graph, reader, mask)
    return graph


def _mask_nodes(compare: Node) -> list[Node]:
    """The compare, its index chain, and the nodes computed from the compare alone, graph order."""
    nodes = _ancestors(compare)
    limit, frontier = len(nodes) + MAX_DERIVED, [compare]
    while frontier and len(nodes) < limit:
        node = frontier.pop()
        for u in node.users:
            if u not in nodes and _derived(u, nodes):
                nodes.add(u)
                frontier.append(u)
    return [n for n in compare.graph.nodes if n in nodes]


def _ancestors(node: Node) -> set[Node]:
    out, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n not in out:
            out.add(n)
            todo.extend(n.all_input_nodes)
    return out


def _derived(node: Node, nodes: set[Node]) -> bool:
    """Whether `node` computes, deterministically, from `nodes` alone."""
    return (node.op == "call_function"
            and not draws_random(node.target)
            and all(a in nodes for a in node.all_input_nodes))  # fmt: skip


def _give_copy(graph: Graph, reader: Node, mask: list[Node]) -> None:
    """`reader` reads a copy, made just before it, of the mask's nodes it reads and their chain."""
    read = [a for a in reader.all_input_nodes if a in mask]
    needed = set().union(*(_ancestors(a) for a in read))
    with graph.inserting_before(reader):
        copies = copy_nodes(graph, [n for n in mask if n in needed],
                            side=None if reader.op == "output" else side(reader))  # fmt: skip
    for a in read:
        reader.replace_input_with(a, copies[a])

"""Selective activation checkpointing: save the GEMM's output, recompute its epilogue's results.

A policy that saves the GEMMs and recomputes the rest (`create_selective_checkpoint_contexts`,
e.g. MUST_SAVE for aten.mm/addmm, PREFER_RECOMPUTE otherwise) tags the anchor MUST_SAVE and its
epilogue ops PREFER_RECOMPUTE. A region takes its anchor's tag (`lower_regions.ANCHOR_META`), so
every region output the backward reads is saved: an MLP's fc1 region saved both the pre-activation
h (GELU's backward reads it) and gelu(h) (fc2's weight gradient reads it), where Inductor alone
saves h and recomputes gelu(h) in the backward (a 3-block stack: 2181 KiB against 1409).

Here the backward's readers of such an output `u` read a copy of the region's pointwise chain
from a saved region value instead; the copies keep `u`'s recompute tags, so AOTAutograd's
partitioner recomputes them in the backward from the value it saves anyway. The forward region
is unchanged (it still computes `u` for its forward readers) and fuses as before. Only where it
saves memory: the chain's roots are region values the backward already reads (saved whatever
happens) and its other inputs broadcast vectors or scalars (nothing new to save). The backward
then sees what Inductor's recompute gives, the graph's ops on the saved 16-bit GEMM output,
which may differ from the kernel's results (computed before the store's rounding) by a
rounding; the GPU test holds the step to eager's bf16 error. Evt's own
statistics ops among the copies go back to aten ops with the rest outside regions
(`restore_statistics`).
"""

from __future__ import annotations

from torch.fx import Graph, Node
from torch.utils.checkpoint import CheckpointPolicy

from evt import debug
from evt.graph.annotate_sides import side
from evt.graph.epilogue_rules import epilogue_expr
from evt.graph.fake import copy_nodes, recompute_tagged
from evt.partition.narrow_outputs import VIEWS
from evt.partition.recompute_outside import full_size
from evt.partition.region import Region
from evt.report import nbytes

MAX_CHAIN = 8  # ops copied per output


def recompute_for_backward(graph: Graph, regions: list[Region]) -> list[Region]:
    return [_recompute(graph, r) if _selective(r) else r for r in regions]


def _selective(region: Region) -> bool:
    return region.side == "forward" and region.anchor.meta.get("recompute") == CheckpointPolicy.MUST_SAVE


def _backward_readers(n: Node, inside: set[Node]) -> list[Node]:
    return [x for x in n.users if x not in inside and side(x) == "backward"]


def _recompute(graph: Graph, region: Region) -> Region:
    nodes, inside = list(region.nodes), set(region.nodes)
    saved = {n for n in nodes if _backward_readers(n, inside)}
    for u in reversed(nodes):  # later outputs first: their chains may end at earlier saved ones
        if u is region.anchor or u not in saved or not recompute_tagged(u):
            continue
        chain = _chain(u, inside, saved - {u}, region.anchor)
        if chain is None:
            continue
        # read by the backward only (and recomputed there); right after u in graph order (not
        # `inserting_after(u)`, which would put the copies in reverse)
        with graph.inserting_before(u.next):
            copies = copy_nodes(graph, [n for n in nodes if n in chain], side="backward")
        for x in _backward_readers(u, inside):
            x.replace_input_with(u, copies[u])
        saved.discard(u)
        debug.log(1, f"recompute_for_backward: region of {region.anchor.name}: the backward "
                     f"recomputes {u.name} (ops copied: {len(chain)}) instead of saving it "
                     f"({nbytes(u) / 2**20:.1f} MiB)")  # fmt: skip
        if not u.users:  # only the backward read it: it leaves the region and the graph
            nodes.remove(u)
            inside.discard(u)
            graph.erase_node(u)
    return Region(region.anchor, tuple(nodes), region.side)


def _chain(u: Node, inside: set[Node], roots: set[Node], anchor: Node) -> set[Node] | None:
    """The region's nodes from saved values (`roots`) to `u` (pointwise ops, and row statistics
    such as LayerNorm's mean and variance of a saved residual sum), or None when `u` cannot be
    recomputed from them and broadcast operands alone."""
    shape = anchor.meta["val"].shape
    chain, todo = set(), [u]
    while todo:
        n = todo.pop()
        if n in chain or (n in roots and n is not u):
            continue
        if n is anchor or epilogue_expr(n) is None or n.target in VIEWS:
            return None  # the GEMM itself, or no op an epilogue computes
        if not recompute_tagged(n):
            return None  # the policy keeps it: a copy would be computed and saved too
        if len(chain) == MAX_CHAIN:
            return None
        chain.add(n)
        for a in n.all_input_nodes:
            if a in inside:
                todo.append(a)
            elif full_size(a, shape):
                return None  # an aux input the backward would have to keep as well
    return chain

"""Recompute a wide aux input of a backward kernel inside its epilogue, from the narrower values
it came from.

LayerNorm's backward, fused into the dgrad GEMM's epilogue, read the forward's normalized input
x̂ = (float(x) - mean) * rstd as an fp32 [M, N] aux tensor, so AOTAutograd's partitioner saved x̂
for the backward (4 bytes an element) where Inductor alone saves the bf16 x and the row
statistics and recomputes x̂ in its fused backward kernel: a 4-block bf16 MLP stack saved 64 MiB
more with evt (784 against 720 MiB at 8192 x 1024). Here a backward region's full-size input that
is a short pointwise chain on the forward side (outside every region) from narrower full-size
values and row/column vectors is computed in the epilogue instead: the kernel loads x (2 bytes
an element) and two vectors, and the partitioner no longer keeps x̂.

Only fp32 nodes are copied (the epilogue computes in fp32 and rounds only at its stores: a
16-bit node computed there would skip its rounding, and the backward would see other values than
the forward's; BERT's MLM head LayerNorm reads a bf16 GELU, which stays a load). A node is copied
into the region only where that does not widen what the region reads: its
full-size inputs, in bytes an element, are no more than its own (x̂ <- x̂ - mean <- float(x) <- x
stops at x, a bf16 value, and not at the residual sum's two bf16 summands); the whole chain must
end narrower than the input it replaces. The copies read only loads, nothing of the accumulator
(as `candidates.broadcast_tree`'s nodes read only vectors): the validator lets such nodes be of
either side.

Static shapes only. Opt-in (`EVT_RECOMPUTE_INSIDE=1`) until the kernels it changes have run on a GPU: the CPU tier
checks the regions and the reference path, nvcc their code; no device run has built them yet.
"""

from __future__ import annotations

import os

import torch
from torch.fx import Graph, Node

from evt import debug
from evt.graph.annotate_sides import side
from evt.graph.epilogue_rules import epilogue_expr, is_reduction, tensor_args
from evt.graph.fake import copy_nodes
from evt.graph.layouts import load_kind
from evt.partition.narrow_outputs import VIEWS
from evt.partition.region import Region
from evt.report import nbytes

MAX_CHAIN = 6  # ops copied per input


def enabled() -> bool:
    return os.environ.get("EVT_RECOMPUTE_INSIDE", "0") not in ("", "0")


def recompute_inside(graph: Graph, regions: list[Region]) -> list[Region]:
    if not enabled():
        return regions
    taken = {n for r in regions for n in r.nodes}
    return [_recompute(graph, r, taken) if r.side == "backward" else r for r in regions]


def _recompute(graph: Graph, region: Region, taken: set[Node]) -> Region:
    shape = tuple(region.anchor.meta["val"].shape)
    if len(shape) != 2 or not all(isinstance(d, int) for d in shape):
        return region  # static [M, N] GEMMs only (comparing symbolic sizes would guard on them)
    nodes = list(region.nodes)
    for a in region.inputs():
        chain = _chain(a, shape, taken)
        if chain is None:
            continue
        readers = [n for n in nodes if a in n.all_input_nodes]
        if region.anchor in readers:
            continue  # a GEMM operand (or bias): no epilogue computes it
        with graph.inserting_before(readers[0]):
            copies = copy_nodes(graph, [n for n in graph.nodes if n in chain], side=region.side)
        for n in readers:
            n.replace_input_with(a, copies[a])
        debug.log(1, f"recompute_inside: region of {region.anchor.name} computes {a.name} "
                     f"(ops copied: {len(chain)}) instead of loading it ({nbytes(a) / 2**20:.1f} MiB)")  # fmt: skip
        at = nodes.index(readers[0])
        nodes[at:at] = list(copies.values())
        taken.update(copies.values())
    return Region(region.anchor, tuple(nodes), region.side)


def _width(n: Node, shape: tuple[int, ...]) -> int | None:
    """Bytes an element that loading `n` into an epilogue of `shape` costs: its element size for
    a full-size aux tensor, 0 for a row/column vector (or a number), None if no load can read it."""
    if not isinstance(n, Node):
        return 0
    kind = load_kind(n.meta.get("val"), *shape)
    if kind is None:
        return None
    return n.meta["val"].element_size() if kind == "aux_load" else 0


def _copyable(n: Node, shape: tuple[int, ...], taken: set[Node]) -> bool:
    return (
        n.op == "call_function"
        and n not in taken
        and side(n) == "forward"
        and n.target not in VIEWS
        and epilogue_expr(n) is not None
        and not is_reduction(n)
        and isinstance(n.meta.get("val"), torch.Tensor)
        and n.meta["val"].dtype == torch.float32  # the epilogue computes in fp32: no rounding lost
        and tuple(n.meta["val"].shape) == shape
    )


def _chain(a: Node, shape: tuple[int, ...], taken: set[Node]) -> set[Node] | None:
    """The forward nodes to copy so that the region computes `a` instead of loading it, or None
    when no chain ends narrower than `a`."""
    if _width(a, shape) is None or not _copyable(a, shape, taken):
        return None
    chain, leaves, todo = {a}, set(), [a]
    while todo:
        n = todo.pop()
        for x in tensor_args(epilogue_expr(n)):
            if x in chain or x in leaves:
                continue
            grow = _copyable(x, shape, taken) and len(chain) < MAX_CHAIN
            below = tensor_args(epilogue_expr(x)) if grow else []
            widths = [_width(y, shape) for y in below if y not in chain]
            if grow and None not in widths and sum(widths) <= _width(x, shape):
                chain.add(x)
                todo.append(x)
            elif _width(x, shape) is None:
                return None  # an input no load reads (the region read `a` instead)
            else:
                leaves.add(x)
    loaded = sum(_width(x, shape) for x in leaves)
    return chain if loaded < _width(a, shape) else None

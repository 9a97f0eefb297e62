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

A LayerNorm over [B, S, D] that a GEMM reads over B·S rows (GPT-2's and ViT's first one, in
the benchmark's steps) reaches the region through a view: the chain is then found on the
[B, S, D] values and copied on their [B·S, D] views (`_unflattened`, `_copy_flattened`).

Only fp32 nodes are copied (the epilogue computes in fp32 and rounds only at its stores: a
16-bit node computed there would skip its rounding, and the backward would see other values than
the forward's; BERT's MLM head LayerNorm reads a bf16 GELU, which stays a load). A node is copied
into the region only where that does not widen what the region reads: its
full-size inputs, in bytes an element, are no more than its own (x̂ <- x̂ - mean <- float(x) <- x
stops at x, a bf16 value, and not at the residual sum's two bf16 summands); the whole chain must
end narrower than the input it replaces. The copies read only loads, nothing of the accumulator
(as `candidates.load_tree`'s nodes read only vectors): the validator lets such nodes be of
either side.

A 16-bit chain (`narrow`) is copied too, of nodes in forward regions as well, where every
value it reads is one the region loads anyway (or a vector) and the backward reads its result
nowhere else: SwiGLU's down-projection dgrad loads g for silu's backward and read silu(g) as
well, so the forward saved silu(g) beside g (one [tokens, hidden] tensor a layer AOTAutograd's
min-cut recomputes instead); the kernel now computes it from g. The copy skips the op's 16-bit
rounding, as Inductor's recompute in its fused backward kernel does.

Symbolic sizes (dynamic shapes) compare as `sizes.same_size` does, adding no guard, and a
flattening view's sizes are computed from the graph's SymInt inputs (session 58; a size they do
not give leaves x̂ a load). On by default (`EVT_RECOMPUTE_INSIDE=0` turns it off): its kernels passed
on an H100 in session 26 (`test_gpu_ops.py`'s `layer_norm_backward_recomputed`, GPT-2's and
BERT's training steps in `test_gpu_models.py`).
"""

from __future__ import annotations

import os
from contextlib import nullcontext

import torch
from torch._guards import detect_fake_mode
from torch.fx import Graph, Node

from evt import debug
from evt.graph.annotate_sides import side
from evt.graph.epilogue_rules import epilogue_expr, is_reduction, tensor_args
from evt.graph.fake import copy_nodes, make_node
from evt.graph.layouts import load_kind
from evt.graph.sink_views import size_args, size_terms
from evt.graph.sizes import same_shape, same_size
from evt.partition.narrow_outputs import VIEWS
from evt.partition.region import Region
from evt.report import nbytes

MAX_CHAIN = 6  # ops copied per input
MAX_TOGETHER = 12  # ops copied for several inputs computed together (`_recompute_together`)
aten = torch.ops.aten
FLATTENS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
# what AOTAutograd puts between a saved value and its backward readers, same shape
IDENTITY_VIEWS = (aten.alias.default, *FLATTENS)


def enabled() -> bool:
    return os.environ.get("EVT_RECOMPUTE_INSIDE", "1") != "0"


def together_enabled() -> bool:
    """Inputs computed together from a narrower one they share (`_recompute_together`), unless
    `EVT_RECOMPUTE_TOGETHER=0`."""
    return os.environ.get("EVT_RECOMPUTE_TOGETHER", "1") != "0"


def recompute_inside(graph: Graph, regions: list[Region]) -> list[Region]:
    if not enabled():
        return regions
    taken = {n for r in regions for n in r.nodes}
    regions = [_recompute(graph, r, taken) if r.side == "backward" else r for r in regions]
    return _drop_unread(graph, regions)


def _drop_unread(graph: Graph, regions: list[Region]) -> list[Region]:
    """Erase every node nothing reads, inside regions and out, the copies' leftovers among them
    (AOTAutograd's alias and view of a saved value the backward now computes, the forward's 3·x²
    of GPT-2's written-out GELU): a value read only by such a node would stay a region output,
    stored for nothing, and max-autotune would time the kernel with that store."""
    anchors = {r.anchor for r in regions}
    erased: set[Node] = set()
    for n in reversed(graph.nodes):
        if n.op == "call_function" and not n.users and n not in anchors and not n.is_impure():
            graph.erase_node(n)
            erased.add(n)
    if not erased:
        return regions
    debug.log(2, f"recompute_inside: erased {len(erased)} nodes left unread")
    return [Region(r.anchor, tuple(n for n in r.nodes if n not in erased), r.side) for r in regions]


def _recompute(graph: Graph, region: Region, taken: set[Node]) -> Region:
    shape = tuple(region.anchor.meta["val"].shape)
    if len(shape) != 2:
        return region  # [M, N] GEMMs only
    nodes = list(region.nodes)
    inputs = region.inputs()
    loaded = set(inputs)
    for a in inputs:
        readers = [n for n in nodes if a in n.all_input_nodes]
        if region.anchor in readers:
            continue  # a GEMM operand (or bias): no epilogue computes it
        start, frame = _unflattened(a, shape)
        chain = _chain(start, frame, shape, taken, loaded - {a})
        if chain is None and same_shape(frame, shape) and not _read_outside(a, nodes):
            chain = _chain(start, frame, shape, taken, loaded - {a}, narrow=True)
        if chain is None:
            continue
        ordered = [n for n in graph.nodes if n in chain]
        if not same_shape(frame, shape) and not _flattenable(ordered, frame, shape):
            continue  # a symbolic size the graph's inputs do not give: x̂ stays a load
        with graph.inserting_before(readers[0]):
            if same_shape(frame, shape):
                copies = copy_nodes(graph, ordered, side=region.side)
            else:
                copies = _copy_flattened(graph, ordered, frame, shape, region.side)
        for n in readers:
            n.replace_input_with(a, copies[start])
        debug.log(1, f"recompute_inside: region of {region.anchor.name} computes {a.name} "
                     f"(ops copied: {len(chain)}) instead of loading it ({nbytes(a) / 2**20:.1f} MiB)")  # fmt: skip
        at = nodes.index(readers[0])
        nodes[at:at] = [copies[n] for n in ordered]
        taken.update(copies.values())
    if together_enabled():
        nodes = _recompute_together(graph, region, nodes, shape, taken)
    return Region(region.anchor, tuple(nodes), region.side)


def _recompute_together(graph: Graph, region: Region, nodes: list[Node], shape: tuple[int, ...],
                        taken: set[Node]) -> list[Node]:  # fmt: skip
    """Compute several full-size inputs together where each alone would not pay.

    GPT-2's tanh GELU (HF's `gelu_new`, written out in ops) has its backward kernel load four
    [tokens, 4D] bf16 values of the forward: 0.5·x, 1 + tanh(u), tanh(u) (through AOTAutograd's
    alias and view) and 3·x². Each is a chain from x, the up projection's output, and computing
    any one of them from x loads x instead: no byte saved, so `_chain` keeps each a load.
    Computed together, the kernel loads x alone (pow(x, 3) is an epilogue op, `cube`) instead of
    the four, 8 bytes an element to 2, and the forward saves x alone for them, as Inductor's
    fused backward kernel recomputes them.

    Taken: the inputs (not GEMM operands, read by no other backward node) whose values are forward
    pointwise chains of the epilogue's shape (seen through aliases and views of the same data,
    `_through_views`), when the
    union of their chains, at most `MAX_TOGETHER` ops, reads fewer bytes an element than the
    inputs it replaces. The copies compute in fp32 and skip the forward's 16-bit roundings, as
    Inductor's recompute does (`_chain`'s `narrow`)."""
    inputs = Region(region.anchor, tuple(nodes), region.side).inputs()
    loaded = set(inputs)
    found: dict[Node, tuple[Node, set[Node]]] = {}  # input -> (the value it shows, its chain)
    for a in inputs:
        readers = [n for n in nodes if a in n.all_input_nodes]
        if region.anchor in readers or _read_outside(a, nodes) or _width(a, shape, shape) is None:
            continue
        source = _through_views(a, shape)
        chain = _closure(source, shape, taken, loaded - {a})
        if chain is not None:
            found[a] = (source, chain)
    if len(found) < 2:
        return nodes  # one input alone is `_chain`'s case
    chain = set().union(*(c for _, c in found.values()))
    leaves = {x for n in chain for x in tensor_args(epilogue_expr(n)) if x not in chain}
    kept = loaded - set(found)
    widths = {x: _width(x, shape, shape, kept) for x in leaves}
    replaced = sum(_width(a, shape, shape) or 0 for a in found)
    if len(chain) > MAX_TOGETHER or None in widths.values() or sum(widths.values()) >= replaced:  # type: ignore[arg-type]
        return nodes
    ordered = [n for n in graph.nodes if n in chain]
    first = min(i for i, n in enumerate(nodes) if any(a in n.all_input_nodes for a in found))
    with graph.inserting_before(nodes[first]):
        copies = copy_nodes(graph, ordered, side=region.side)
    for a, (source, _) in found.items():
        for n in nodes:
            n.replace_input_with(a, copies[source])
    debug.log(1, f"recompute_inside: region of {region.anchor.name} computes "
                 f"{', '.join(a.name for a in found)} together (ops copied: {len(chain)}) from "
                 f"{', '.join(x.name for x, w in widths.items() if w)} instead "
                 f"of loading them ({sum(nbytes(a) for a in found) / 2**20:.1f} MiB)")  # fmt: skip
    taken.update(copies.values())
    return nodes[:first] + [copies[n] for n in ordered] + nodes[first:]


def _through_views(a: Node, shape: tuple[int, ...]) -> Node:
    """The value of the epilogue's `shape` that `a` shows through aliases and views of the same
    contiguous data ([B·S, N] and [B, S, N] alike: AOTAutograd's `alias` and `view` of a value
    the forward saved, in the backward), or `a` itself."""
    b = a
    while b.target in IDENTITY_VIEWS and b.args and isinstance(b.args[0], Node):
        val = b.args[0].meta.get("val")
        if not (isinstance(val, torch.Tensor) and val.dim() >= 2 and _rows_of(val, shape)):
            break
        b = b.args[0]
    val = b.meta.get("val")
    return b if isinstance(val, torch.Tensor) and same_shape(tuple(val.shape), shape) else a


def _closure(a: Node, shape: tuple[int, ...], taken: set[Node], loaded: set[Node]) -> set[Node] | None:
    """The forward pointwise nodes of `shape` a region would copy to compute `a` from what it
    cannot copy (GEMM outputs, reductions, vectors, values it loads anyway); None if `a` is not
    such a node or they are more than `MAX_TOGETHER`."""
    if not _copyable(a, shape, taken, narrow=True):
        return None
    chain, todo = {a}, [a]
    while todo:
        for x in tensor_args(epilogue_expr(todo.pop())):
            if x not in chain and x not in loaded and _copyable(x, shape, taken, narrow=True):
                chain.add(x)
                todo.append(x)
                if len(chain) > MAX_TOGETHER:
                    return None
    return chain


def _unflattened(a: Node, shape: tuple[int, ...]) -> tuple[Node, tuple[int, ...]]:
    """Where a chain for input `a` starts and the shape it works on: `a` itself, or for a view of a
    contiguous [..., N] value flattened to the epilogue's [M, N] (a LayerNorm over [B, S, D] read
    by a GEMM over B·S rows) that value, in its own shape."""
    b = a.args[0] if a.target in FLATTENS and a.args else None
    val = b.meta.get("val") if isinstance(b, Node) else None
    if isinstance(val, torch.Tensor) and val.dim() > 2 and _rows_of(val, shape):
        return b, tuple(val.shape)
    return a, shape


def _rows_of(val: torch.Tensor, shape: tuple[int, ...]) -> bool:
    """Whether `val` is contiguous data of the [M, N] epilogue's elements in rows of N ([B, S, N]
    or [B·S, N] alike)."""
    return (val.is_contiguous() and same_size(val.shape[-1], shape[-1])
            and same_size(val.numel(), shape[0] * shape[1]))  # fmt: skip


def _flat(val, frame: tuple[int, ...], shape: tuple[int, ...]):
    """`val` (an operand of a chain working on `frame`) as the [M, N] epilogue sees it: its
    leading sizes flattened into M, or a vector along N; None when it is neither."""
    if same_shape(frame, shape) or not isinstance(val, torch.Tensor):
        return val
    sizes = (1,) * (len(frame) - val.dim()) + tuple(val.shape)  # broadcasting's leading ones
    if len(sizes) != len(frame) or not val.is_contiguous():
        return None
    if same_shape(sizes[:-1], frame[:-1]):
        new = (shape[0], sizes[-1])
    elif all(same_size(d, 1) for d in sizes[:-1]):
        new = (1, sizes[-1])
    else:
        return None
    with detect_fake_mode([val]) or nullcontext():
        return val.reshape(new)


def _copy_flattened(graph: Graph, ordered: list[Node], frame, shape, side_: str) -> dict[Node, Node]:
    """Copies of the chain `ordered` working on [M, N]: each operand it reads from outside
    reshaped (a view) as `_flat` says."""
    views: dict[Node, Node] = {}
    for x in _outside(ordered):
        sizes = size_args(graph, _flat(x.meta["val"], frame, shape).shape, x)
        views[x] = make_node(graph, aten.reshape.default, (x, sizes), {}, like=x)
    return copy_nodes(graph, ordered, side=side_, inputs=views)


def _flattenable(ordered: list[Node], frame, shape) -> bool:
    """Whether each operand the chain reads from outside can be viewed as `_flat` says, its
    symbolic sizes built from the graph's SymInt inputs (`sink_views.size_terms`)."""
    for x in _outside(ordered):
        flat = _flat(x.meta["val"], frame, shape)
        if flat is None or any(not isinstance(d, int) and size_terms(x.graph, d.node.expr) is None
                               for d in flat.shape):  # fmt: skip
            return False
    return True


def _outside(ordered: list[Node]) -> list[Node]:
    """The values the chain `ordered` reads from outside it, each once, in reading order."""
    return list(dict.fromkeys(x for n in ordered for x in n.all_input_nodes if x not in ordered))


def _width(n: Node, frame: tuple[int, ...], shape: tuple[int, ...], loaded=frozenset()) -> int | None:
    """Bytes an element that loading `n` (an operand of a chain working on `frame`) into an
    epilogue of `shape` costs: its element size for a full-size aux tensor, 0 for a row/column
    vector (or a number) or a value the region loads anyway (`loaded`), None if no load can
    read it."""
    if not isinstance(n, Node):
        return 0
    if n in loaded:
        return 0
    val = _flat(n.meta.get("val"), frame, shape)
    kind = load_kind(val, *shape) if val is not None else None
    if kind is None:
        return None
    return val.element_size() if kind == "aux_load" else 0


def _copyable(n: Node, shape: tuple[int, ...], taken: set[Node], narrow: bool = False) -> bool:
    return (
        n.op == "call_function"
        and (n not in taken or narrow)
        and side(n) == "forward"
        and n.target not in VIEWS
        and epilogue_expr(n) is not None
        and not is_reduction(n)
        and isinstance(n.meta.get("val"), torch.Tensor)
        # the epilogue computes in fp32: no rounding lost (`narrow`: one rounding, as Inductor's)
        and (n.meta["val"].dtype == torch.float32 or narrow)
        and same_shape(n.meta["val"].shape, shape)
    )


def _read_outside(a: Node, nodes: list[Node]) -> bool:
    """Whether the backward reads `a` anywhere but in this region (then it stays saved)."""
    inside = set(nodes)
    return any(u not in inside and side(u) == "backward" for u in a.users)


def _chain(a: Node, frame: tuple[int, ...], shape: tuple[int, ...], taken: set[Node],
           loaded: set[Node], narrow: bool = False) -> set[Node] | None:  # fmt: skip
    """The forward nodes to copy so that the region computes `a` (of shape `frame`) instead of
    loading it, or None when no chain ends narrower than `a`. Values the region loads anyway
    (`loaded`) cost nothing more. `narrow`: a 16-bit chain, also of nodes in forward regions,
    taken only where every value it reads is loaded anyway or a vector (SwiGLU's silu(g), which
    the backward's kernel computes from the g it loads for silu's backward)."""
    if _width(a, frame, shape) is None or not _copyable(a, frame, taken, narrow):
        return None
    chain, leaves, todo = {a}, set(), [a]
    while todo:
        n = todo.pop()
        for x in tensor_args(epilogue_expr(n)):
            if x in chain or x in leaves:
                continue
            grow = _copyable(x, frame, taken, narrow) and len(chain) < MAX_CHAIN and x not in loaded
            below = tensor_args(epilogue_expr(x)) if grow else []
            widths = [_width(y, frame, shape, loaded) for y in below if y not in chain]
            if grow and None not in widths and sum(widths) <= _width(x, frame, shape, loaded):
                chain.add(x)
                todo.append(x)
            elif _width(x, frame, shape) is None:
                return None  # an input no load reads (the region read `a` instead)
            else:
                leaves.add(x)
    more = sum(_width(x, frame, shape, loaded) for x in leaves)
    if narrow:
        return chain if more == 0 else None
    return chain if more < _width(a, frame, shape) else None

"""Sink reshapes below elementwise ops, so an epilogue sees the GEMM's own [M, N] layout (or a
batched GEMM's [L, M, N]: attention's scores `view(bmm, (B, H, S, S))` are scaled and masked).

A Linear on a [B, S, K] activation is `view -> addmm -> view(B, S, N)`, and everything after it
(bias-free activations, residual adds, GELU's backward) works on the 3-D view. For an epilogue-able
op whose tensor inputs are such views of 2-D [M, N] values (or 3-D values that can be viewed as
[M, N] for free, or N-vectors), this rewrites

    op(view(x, (B, S, N)), r)  ->  view(op(x, view(r, (M, N))), (B, S, N))

and repeats to a fixed point. Views are free; the graph gains no copies.

Where every tensor input of such an op is the same permute, or a view to the op's own shape of
values of one other shape keeping their last dimension (0-dim tensors and numbers aside; under
a permute also vectors broadcast to it, such as BatchNorm's [1, C, 1] mean), and
one of those values comes from a GEMM (through views, permutes and epilogue ops), the op moves
above the permute or view instead (`_sink_layout`): an einsum's `permute(view(bmm, (H, B, S, E)), (1, 0, 2, 3))` followed by a
ReLU then has the ReLU on the bmm's own [L, M, N] result. Under a permute, a tensor input
that is no permute but is laid out as the permute's result (a channels-last gradient added to a
pointwise convolution's GEMM result, `pointwise_convs_as_mm`) is read through the inverse
permute, a free view. A view that changes the last dimension
(`y.reshape(-1)`) stays where it is: it would make a region's padded rows (`ir.row_pitch`) need
a dense copy where they did not.

With dynamic shapes a view's symbolic sizes must be nodes of the graph. They are computed from
the graph's SymInt inputs (`M = s0 * s1` becomes `operator.mul(primals_2, primals_3)`; sums and
floor divisions too: `size_terms`), not
read with `sym_size` from the tensor being viewed: a `sym_size` of a GEMM's output or of an
epilogue op is a user the partitioner must keep that value for, and it split the region (a
residual add and part of LayerNorm's backward stayed unfused). `sym_size` of the flat value is
the fallback where a symbol has no input of its own.
"""

from __future__ import annotations

import math
import operator

import sympy
import torch
from torch._guards import detect_fake_mode
from torch.fx import Graph, Node
from torch.fx.node import map_arg
from torch.utils._sympy.functions import FloorDiv

from evt.graph.epilogue_rules import REDUCTION_OPS, epilogue_expr
from evt.graph.fake import make_node
from evt.graph.fold_gemm_operands import GEMM_TARGETS
from evt.graph.sizes import dense, is_static, proven_equal, same_shape, same_size

aten = torch.ops.aten
VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def sink_views(graph: Graph) -> Graph:
    changed = True
    while changed:  # one sweep rewrites all it can; the next sees the nodes the sweep made
        changed = False  # (restarting after each rewrite was quadratic: 4.5 s of GPT-2 at 24 layers)
        for node in list(graph.nodes):
            if not getattr(node, "_erased", False):  # a rewrite erases the views it consumed
                changed |= _sink(node) or _sink_reduction(node) or _sink_layout(node)
    return graph


def _flat_source(a: Node) -> Node | None:
    """x when `a` is view(x) of a 2-D x into the same last dimension, or of a 3-D x (a batched
    GEMM's [L, M, N]) into the same last two, else None."""
    if a.op != "call_function" or a.target not in VIEWS:
        return None
    x = a.args[0]
    if not isinstance(x, Node):
        return None
    xv, av = x.meta.get("val"), a.meta.get("val")
    if isinstance(xv, torch.Tensor) and isinstance(av, torch.Tensor) and same_shape(xv.shape, av.shape):
        # a view to its input's own shape (`view(h, (-1, S, N))` under dynamic shapes, which
        # static ones drop at trace time): through it
        return _flat_source(x)
    if xv is None or av is None or xv.dim() not in (2, 3) or av.dim() <= xv.dim():
        return None
    k = xv.dim() - 1
    return x if same_shape(av.shape[-k:], xv.shape[1:]) else None


def _symbolic_sizes(shape: tuple, flat: tuple, source: Node) -> tuple | None:
    """`shape` (a view target against the flat shape) with each symbolic size replaced by
    ("sym_size", source, i) where it is the source's size i at the same place; None if one
    is not."""
    out = []
    for i, d in enumerate(shape):
        if isinstance(d, int):
            out.append(d)
        elif i < len(flat) and same_size(d, flat[i]):
            out.append(("sym_size", source, i))
        else:
            return None
    return tuple(out)


def _sizes(shape, view: Node):
    """The size argument of a view back to `shape`: the literal sizes, or where a size is
    symbolic, the size argument of `view` (an existing view to that shape, whose symbolic sizes
    are nodes of the graph: a SymInt written as a literal would name a value the graph does not
    define); None when neither is available."""
    if is_static(shape):
        return list(shape)
    sizes = view.args[1] if view.target in VIEWS and len(view.args) > 1 else None
    return list(sizes) if isinstance(sizes, (list, tuple)) and len(sizes) == len(shape) else None


def _sink(node: Node) -> bool:
    if epilogue_expr(node) is None or "val" not in node.meta:
        return False
    out = node.meta["val"]
    sources = [_flat_source(a) for a in node.all_input_nodes]
    viewed = [a for a, s in zip(node.all_input_nodes, sources) if s is not None]
    # a full-size view first: a broadcast one ([B, S, 1] against [B, S, N]) cannot lead
    viewed.sort(key=lambda a: not same_shape(a.meta["val"].shape, out.shape))
    if not viewed or not same_shape(out.shape, viewed[0].meta["val"].shape):
        return False  # no input is a flattenable view, or the op broadcasts beyond it
    source = _flat_source(viewed[0])
    flat = tuple(source.meta["val"].shape)
    mapping = {}
    for a, src in zip(node.all_input_nodes, sources):
        same = src is not None and same_shape(src.meta["val"].shape, flat)
        new = src if same else _as_flat(a, flat)
        if new is False:
            return False
        if isinstance(new, tuple) and not is_static(new[1]):
            # symbolic sizes (dynamic shapes): the flat source's own sizes, as nodes
            shape = _symbolic_sizes(new[1], flat, source)
            if shape is None:
                return False
            new = ("view", shape)
        mapping[a] = new
    sizes = _sizes(tuple(out.shape), viewed[0])
    if sizes is None:
        return False
    _rewrite(node, mapping, sizes)
    return True


def _layout(a: Node) -> tuple | None:
    """(key, source) where `a` is a permute of `source` (key: the dims) or a static view of it
    (key: the source's shape and strides), else None."""
    if a.op != "call_function" or not a.args or not isinstance(a.args[0], Node):
        return None
    source = a.args[0]
    if not isinstance(source.meta.get("val"), torch.Tensor) or not isinstance(a.meta.get("val"), torch.Tensor):
        return None  # a multi-output op's tuple, or no value
    shape = _exprs(source.meta["val"].shape)
    if a.target == aten.permute.default:
        return ("permute", tuple(d % len(shape) for d in a.args[1])), source
    viewed = _exprs(a.meta["val"].shape)
    if a.target in VIEWS and _row(shape) == _row(viewed):
        # rows kept whole (a region's output with padded rows stays a view); the key holds the
        # strides: an op of inputs laid out alike lays its result out so too (or, reading an
        # expanded input, contiguously), so the view back is as valid as these. Symbolic sizes
        # and strides as their expressions (hashable; two keys alike only where they read alike)
        return ("view", shape, _exprs(source.meta["val"].stride())), source
    return None


def _exprs(sizes) -> tuple:
    """Sizes or strides as sympy expressions (an int as an Integer, a SymInt as its expression)."""
    return tuple(d.node.expr if isinstance(d, torch.SymInt) else sympy.Integer(d) for d in sizes)


def _row(shape: tuple):
    """The last dimension of `shape` (expressions) other than trailing ones (an einsum's views
    add them)."""
    sizes = list(shape)
    while sizes and sizes[-1] == 1:
        sizes.pop()
    return sizes[-1] if sizes else None


def from_gemm(x: Node, depth: int = 0) -> bool:
    """Whether `x` is a GEMM's result through views, permutes and epilogue ops."""
    while x.op == "call_function" and (x.target in VIEWS or x.target == aten.permute.default):
        x = x.args[0]
    if x.op != "call_function":
        return False
    if x.target in GEMM_TARGETS:
        return True
    expr = epilogue_expr(x)
    return (depth < 8 and expr is not None and expr.op not in REDUCTION_OPS
            and any(from_gemm(i, depth + 1) for i in x.all_input_nodes))  # fmt: skip


def _sink_layout(node: Node) -> bool:
    """op(t(x), t(y), v, c) -> t(op(x, y, v', c)) for one permute or view t, an elementwise
    epilogue op whose tensor inputs have its shape, or (under a permute) broadcast to it from a
    vector v ([1, C, 1] against [B, C, L]: v' is v viewed as the permute's input sees it) (module
    doc). Under a permute, an input computed as it is but laid out as the permute's result (a
    channels-last gradient beside a pointwise convolution's permuted GEMM result) is read through
    the inverse permute, a free view."""
    expr = epilogue_expr(node)
    if expr is None or expr.op in REDUCTION_OPS or not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    out = node.meta["val"]
    vals = [a.meta.get("val") for a in node.all_input_nodes]
    if not all(isinstance(v, (torch.Tensor, torch.SymInt, int, float)) for v in vals):
        return False
    tensors = [a for a, v in zip(node.all_input_nodes, vals) if isinstance(v, torch.Tensor) and v.dim() > 0]
    full = [a for a in tensors if same_shape(a.meta["val"].shape, out.shape)]
    if not full:
        return False  # no tensor input, or each broadcasts
    layouts = {a: _layout(a) for a in full}
    known = [lay for lay in layouts.values() if lay is not None]
    if not known or len({lay[0] for lay in known}) != 1:
        return False
    (kind, key, *_), _ = known[0]
    back_sizes = list(out.shape) if kind == "permute" else _sizes(tuple(out.shape), full[0])
    if back_sizes is None:  # symbolic sizes with no view's size argument to take them from
        return False
    if not any(from_gemm(src) for _, src in known):
        return False
    loose = [a for a, lay in layouts.items() if lay is None]  # computed as it is, not a permute
    if loose and (kind != "permute" or not all(laid_out_as(a, key) for a in loose)):
        return False
    mapping = {a: lay[1] for a, lay in layouts.items() if lay is not None}
    others = [a for a in tensors if a not in mapping and a not in loose]
    if others and kind != "permute":
        return False
    broadcast = {a: _unpermuted_vector(a, key, out.dim()) for a in others}
    if None in broadcast.values():
        return False
    graph = node.graph
    with graph.inserting_before(node):
        for a, shape in broadcast.items():
            mapping[a] = make_node(graph, aten.view.default, (a, shape), {}, node)
        for a in loose:
            mapping[a] = make_node(graph, aten.permute.default, (a, inverse(key)), {}, node)
        args = map_arg(node.args, lambda a: mapping.get(a, a))
        inner = make_node(graph, node.target, args, dict(node.kwargs), node)
        layout = (aten.permute.default, list(key)) if kind == "permute" else (aten.view.default, back_sizes)
        back = make_node(graph, layout[0], (inner, layout[1]), {}, node)
    node.replace_all_uses_with(back)
    graph.erase_node(node)
    for a in full:  # a permute or view only this node read is dead now
        if not a.users and a not in loose:
            graph.erase_node(a)
    return True


def inverse(perm) -> list[int]:
    """The permutation that undoes `perm`."""
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return inverse


def laid_out_as(a: Node, perm) -> bool:
    """Whether `a`'s value is laid out as a dense permute(x, perm): a channels-last
    [N, C, H, W] as permute(x, (0, 3, 1, 2)) of a contiguous [N, H, W, C] x, so that reading
    permute(a, inverse) in its place is a free, dense view (symbolic sizes where proven so)."""
    val = a.meta.get("val")
    if not isinstance(val, torch.Tensor) or len(perm) != val.dim():
        return False
    order = inverse(perm)
    return dense([val.shape[i] for i in order], [val.stride(i) for i in order])


def _unpermuted_vector(a: Node, perm: tuple, rank: int) -> list[int] | None:
    """The shape that `a`, broadcast against a value of rank `rank` = permute(x, perm), has
    against x, where `a` has one dimension larger than 1 at most (any such shape is a view of
    it), else None."""
    shape = list(a.meta["val"].shape)
    if len(shape) > rank or not is_static(shape) or sum(d != 1 for d in shape) > 1:
        return None
    shape = [1] * (rank - len(shape)) + shape
    inverse = [0] * rank
    for i, p in enumerate(perm):
        inverse[p] = shape[i]  # dim i of the permuted value is dim p of x
    return inverse


REDUCTIONS = (aten.sum.dim_IntList, aten.amax.default, aten.mean.dim)


def _sink_reduction(node: Node) -> bool:
    """A sum, max or mean of a [B, S, N] view of a 2-D [M, N] value over its leading dims, its
    last dim or all of them is that reduction of the [M, N] value over M, N or both (the same
    elements), viewed back:

        sum(view(x, (B, S, N)), [0, 1])  ->  sum(x, [0])              (LayerNorm's weight grad)
        sum(view(x, (B, S, N)), [2], keepdim)  ->  view(sum(x, [1], keepdim), (B, S, 1))
        mean(view(x, (B, S, N)), [-1], keepdim)  ->  ... (RMSNorm's mean of squares)
    """
    if node.op != "call_function" or node.target not in REDUCTIONS or "val" not in node.meta:
        return False
    x = node.args[0]
    src = _flat_source(x) if isinstance(x, Node) else None
    if src is None or src.meta["val"].dim() != 2 or set(node.kwargs) - {"dtype", "dim", "keepdim"}:
        return False
    rank = x.meta["val"].dim()
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", [])
    found = sorted({d % rank for d in dims}) or list(range(rank))
    flat_dims = {tuple(range(rank - 1)): [0], (rank - 1,): [1], tuple(range(rank)): [0, 1]}
    if tuple(found) not in flat_dims:
        return False
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    kwargs = {k: v for k, v in node.kwargs.items() if k == "dtype"}
    shape = tuple(node.meta["val"].shape)
    sizes = list(shape) if is_static(shape) else None
    if sizes is None and tuple(found) == (rank - 1,):  # per row: the view's leading sizes
        lead = _sizes(tuple(x.meta["val"].shape), x)
        sizes = None if lead is None else lead[:-1] + ([1] if keepdim else [])
    if sizes is None:
        return False
    graph = node.graph
    with graph.inserting_before(node):
        flat = make_node(graph, node.target, (src, flat_dims[tuple(found)], keepdim), kwargs, node)
        back = flat if same_shape(flat.meta["val"].shape, shape) else make_node(
            graph, aten.view.default, (flat, sizes), {}, node)  # fmt: skip
    node.replace_all_uses_with(back)
    graph.erase_node(node)
    if x.op == "call_function" and x.target in VIEWS and not x.users:
        graph.erase_node(x)
    return True


def _as_flat(a: Node, flat: tuple):
    """The form of input `a` that broadcasts against `flat` ([M, N] or [L, M, N]) as it did
    against the view: a free view, `a` itself, or False."""
    val = a.meta.get("val")
    if val is None:
        return False
    if val.dim() <= 1:
        return a
    k = len(flat) - 1  # the trailing dimensions kept
    tail, lead = tuple(val.shape[-k:]), val.shape[:-k]
    if not all(same_size(t, f) or same_size(t, 1) for t, f in zip(tail, flat[1:])):
        return False
    if all(same_size(d, 1) for d in lead):
        shape = (1, *tail) if k == 1 else tail
        return a if val.dim() == len(shape) else ("view", shape)  # no leading dims: `a` itself
    shape = (flat[0], *tail)
    if not same_size(math.prod(lead), flat[0]) or not _viewable(val, shape):
        return False
    return ("view", shape)


def _viewable(val: torch.Tensor, shape: tuple) -> bool:
    """Whether `val` views as `shape`: its leading dimensions merged into `shape[0]`, the rest
    kept (what `_as_flat` asks). Proven from the strides first (each merged dimension's stride
    its inner neighbour's stride times that one's size, as `sizes.same_size` proves sizes);
    torch's own view check otherwise, which on symbolic shapes simplifies for seconds a call
    (Swin's windows under `dynamic=True`)."""
    lead = val.dim() - (len(shape) - 1)
    merged = [i for i in range(lead) if not same_size(val.shape[i], 1)]
    if all(same_size(val.stride(i), val.stride(j) * val.shape[j]) for i, j in zip(merged, merged[1:])):
        return True
    try:
        with detect_fake_mode([val]) or torch._subclasses.FakeTensorMode():
            val.view(*shape)
        return True
    except (RuntimeError, ValueError):  # torch raises either, by version and tensor kind
        return False


def _rewrite(node: Node, mapping: dict, sizes: list) -> None:
    graph = node.graph
    with graph.inserting_before(node):
        def size(d):
            if isinstance(d, tuple):  # ("sym_size", x, i): dimension i of x, a node of the graph
                dim = d[1].meta["val"].shape[d[2]]
                built = size_from_inputs(graph, dim.node.expr, node)
                return built if built is not None else make_node(
                    graph, aten.sym_size.int, (d[1], d[2]), {}, node)  # fmt: skip
            return d

        def arg(a):
            new = mapping.get(a, a) if isinstance(a, Node) else a
            if isinstance(new, tuple):
                new = make_node(graph, aten.view.default, (a, [size(d) for d in new[1]]), {}, node)
            return new

        args = tuple(arg(a) for a in node.args)
        flat = make_node(graph, node.target, args, dict(node.kwargs), node)
        back = make_node(graph, aten.view.default, (flat, sizes), {}, node)
    node.replace_all_uses_with(back)
    graph.erase_node(node)
    for a in mapping:  # a view only this node read is dead now: a GEMM must not store for it
        if a.op == "call_function" and a.target in VIEWS and not a.users:
            graph.erase_node(a)


def size_from_inputs(graph: Graph, expr, like: Node):
    """A node computing the symbolic size `expr` from the graph's SymInt placeholders
    (`size_terms`), inserted at the current point; None where they do not give it."""
    terms = size_terms(graph, expr)
    return None if terms is None else _build(graph, terms, like)


def size_args(graph: Graph, sizes, like: Node) -> list:
    """A view's size argument for `sizes`: each symbolic one a node computing it from the graph's
    SymInt inputs (`size_from_inputs`), inserted at the current point; raises ValueError where
    one is not (a caller that asked `size_terms` first never sees it)."""
    out = []
    for d in sizes:
        if isinstance(d, torch.SymInt):
            built = size_from_inputs(graph, d.node.expr, like)
            if built is None:
                raise ValueError(f"symbolic size {d} is not computed from the graph's inputs")
            d = built
        out.append(d)
    return out


def _build(graph: Graph, terms, like: Node):
    if not isinstance(terms, tuple):
        return terms  # a placeholder or an integer
    op, args = terms
    out = None
    for term in (_build(graph, t, like) for t in args):
        out = term if out is None else make_node(graph, op, (out, term), {}, like)
    return out


def size_terms(graph: Graph, expr):
    """`expr` over the graph's SymInt placeholders, nothing added to the graph: a placeholder, an
    integer, or (operator, [terms]) for a product (`M = s0 * s1 * 2`: placeholders first; a
    square too), a sum or a floor division (`x.view(2, x.shape[0] // 2, ...)` flattens to `2 * (s0 // 2) * s1`);
    None if a symbol is no input or the expression is of another kind."""
    inputs, env = {}, None
    for p in graph.find_nodes(op="placeholder"):
        v = p.meta.get("val")
        if isinstance(v, torch.SymInt) and isinstance(v.node.expr, sympy.Symbol):
            inputs.setdefault(v.node.expr, p)
            env = v.node.shape_env
    return _terms(expr, inputs, env)


def _terms(expr, inputs: dict, env):
    if expr.is_Integer:
        return int(expr)
    if not isinstance(expr, sympy.Mul) and (symbol := _as_input(expr, inputs, env)) is not None:
        return inputs[symbol]
    if isinstance(expr, FloorDiv):
        op, args = operator.floordiv, list(expr.args)
    elif isinstance(expr, sympy.Mul):  # symbols first, as `M = s0 * s1 * 2` reads
        op, args = operator.mul, sorted(expr.args, key=lambda f: (f.is_Integer, str(f)))
    elif isinstance(expr, sympy.Add):
        op, args = operator.add, sorted(expr.args, key=lambda f: (f.is_Integer, str(f)))
    elif isinstance(expr, sympy.Pow) and expr.exp.is_Integer and 1 < expr.exp <= 4:
        op, args = operator.mul, [expr.base] * int(expr.exp)  # H * W where H and W are one symbol
    else:
        return None
    terms = [_terms(a, inputs, env) for a in args]
    return None if any(t is None for t in terms) else (op, terms)


def _as_input(expr, inputs: dict, env):
    """`expr` if it is an input's symbol; else the input symbol the guards Dynamo holds prove it
    equal to (HF's `h[:, -s:]` has s + S rows where a guard says s = 0: S), without adding a
    guard; else None."""
    if expr in inputs:
        return expr
    return next((symbol for symbol in inputs if proven_equal(expr, symbol, env)), None)

"""Region -> EVT tree: turn an FX region into a `KernelSpec` (and say which FX values it reads
and writes).

Naming: every IR node is named after the FX node it came from (the accumulator is `<gemm>_acc`, an
expression's inner steps `<node>_<i>`, constants `<node>_c<i>`, stores `<node>_store`, a row
reduction the `sum` node itself), so the generated C++ and the `evt dump` tree read like the graph.

Outputs: D is the region's last [M, N] output in graph order (a float one if there is one); every
other output, in graph order, is an `AuxStore` or a reduction's: a `RowReduction` (over M), a
`ColReduction` (over N), a `ScalarReduction`, or one of a statistic's two outputs. Statistics of
one value are merged into one node: softmax's max and sum of exp (`SoftmaxStats`), a mean and a
var over N (`WelfordStats`) or over M (`ColumnWelfordStats`); the other reductions get a node each.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch
from torch.fx import Node

from evt import ir
from evt.codegen.config import pads_rows
from evt.codegen.emit import c_identifier
from evt.errors import UnsupportedPattern
from evt.graph.epilogue_rules import REDUCTION_OPS, Expr, epilogue_expr
from evt.graph.fold_gemm_operands import GEMM
from evt.graph.layouts import aux_major, gemm_majors, load_kind
from evt.partition.region import Region


@dataclass(frozen=True)
class BuiltRegion:
    spec: ir.KernelSpec
    inputs: tuple[Node, ...]  # the FX values passed as the kernel's inputs, in order
    outputs: tuple[Node, ...]  # the region's FX nodes each kernel output replaces (D first)


class _Builder:
    def __init__(self, region: Region):
        self.region = region
        self.shape = tuple(region.anchor.meta["val"].shape)
        self.inputs: list[Node] = []
        self.nodes: list[ir.Node] = []
        self.value: dict[Node, str] = {}  # FX node -> IR node name holding its value
        self.computed: dict[Expr, str] = {}  # expression -> IR node name: each computed once
        # an FX node's value is named after it; an expression's inner steps and constants are
        # named after their node with a number, never as any node of the graph (`add`'s alpha
        # step was `add_2`, which a region holding the graph's own `add_2` then named twice);
        # `add` records each IR node's name here too
        self.taken = {c_identifier(n.name) for n in region.anchor.graph.nodes}

    def add(self, node: ir.Node) -> str:
        self.nodes.append(node)
        self.taken.add(node.name)
        return node.name

    def input_index(self, fx: Node) -> int:
        if fx not in self.inputs:
            self.inputs.append(fx)
        return self.inputs.index(fx)

    def load(self, fx: Node) -> str:
        """The IR node reading external value `fx` (one load per distinct FX value)."""
        if fx in self.value:
            return self.value[fx]
        val = fx.meta["val"]
        kind, dtype = load_kind(val, *self.shape), ir.dtype_name(val.dtype)
        if kind is None:
            raise UnsupportedPattern(f"cannot load {fx.format_node()} into a {self.shape} epilogue")
        idx, name = self.input_index(fx), c_identifier(fx.name)
        if kind == "aux_load":
            every = len(self.shape) == 3 and val.dim() == 2  # one [M, N] tensor for every batch
            node: ir.Node = ir.AuxLoad(name, idx, dtype, aux_major(val), every)
        else:
            cls = {"row_broadcast": ir.RowBroadcast, "col_broadcast": ir.ColBroadcast,
                   "scalar_load": ir.ScalarLoad}[kind]  # fmt: skip
            node = cls(name, idx, dtype)
        self.value[fx] = self.add(node)
        return node.name

    def arg(self, a, owner: Node, counter: list[int]) -> str:
        if isinstance(a, _Ref):
            return str(a)
        if isinstance(a, Node):
            return self.value[a] if a in self.value else self.load(a)
        if isinstance(a, Expr):
            return self.expr(a, owner, counter, final=False)
        return self.add(ir.ScalarBroadcast(self.step_name(owner, counter, "c"), float(a)))

    def expr(self, e: Expr, owner: Node, counter: list[int], final: bool = True) -> str:
        if e in self.computed:  # pure: an expression shared by several (`share_sigmoids`)
            return self.computed[e]
        args = tuple(self.arg(a, owner, counter) for a in e.args)
        if self.no_op_cast(e, args):
            return args[0]
        name = c_identifier(owner.name) if final else self.step_name(owner, counter)
        dtype = "f32" if e.dtype is None else ir.dtype_name(e.dtype)
        self.computed[e] = self.add(ir.Compute(name, e.op, args, dtype))
        return self.computed[e]

    def step_name(self, owner: Node, counter: list[int], kind: str = "") -> str:
        """`<owner>_<i>` (`<owner>_c<i>` for a constant) with the next i that names no node of the
        graph and no IR node yet (`taken`)."""
        while True:
            counter[0] += 1
            name = f"{c_identifier(owner.name)}_{kind}{counter[0]}"
            if name not in self.taken:
                return name

    def no_op_cast(self, e: Expr, args: tuple[str, ...]) -> bool:
        """A cast of a loaded value to the dtype it was loaded from (e.g. a comparison rounding
        its operands to bf16) changes nothing."""
        if e.op != "identity" or e.dtype is None:
            return False
        node = next(n for n in self.nodes if n.name == args[0])
        return isinstance(node, ir.LOADS) and node.dtype == ir.dtype_name(e.dtype)

    def anchor(self) -> ir.Gemm:
        a_node = self.region.anchor
        g = a_node.meta[GEMM]
        majors = gemm_majors(g)
        if majors is None:
            raise UnsupportedPattern(f"GEMM operands need a unit stride: {a_node.format_node()}")
        a = ir.Operand(self.input_index(g.a), g.a_transposed, majors[0])
        b = ir.Operand(self.input_index(g.b), g.b_transposed, majors[1])
        acc = self.add(ir.AccFetch(f"{c_identifier(a_node.name)}_acc"))
        counter = [0]  # one for alpha's and beta's steps: they name their nodes after the anchor
        value = acc if g.alpha == 1 else self.expr(Expr("mul", (_Ref(acc), g.alpha)), a_node, counter, False)
        if g.bias is not None:
            bias: object = g.bias if g.beta == 1 else Expr("mul", (g.bias, g.beta))
            value = self.expr(Expr("add", (_Ref(value), bias)), a_node, counter)
        self.value[a_node] = value
        return ir.Gemm(a, b, ir.dtype_name(g.a.meta["val"].dtype), g.batched, g.nested)


class _Ref(str):
    """An already-built IR value used as an expression argument."""


# ops whose functor computes sigmoid(x) of their last argument x (an exp and a reciprocal)
_SIGMOID_OF_LAST = ("sigmoid", "silu", "silu_backward")


def share_sigmoids(exprs: dict[Node, Expr]) -> dict[Node, Expr]:
    """silu(x), silu_backward(grad, x) and sigmoid(x) each compute sigmoid(x) in their functor.
    Where a region holds two or more of them for one x (SwiGLU's backward in the down
    projection's dgrad: silu_backward(dh * up, gate) and dh * silu(gate)), each takes it from one
    shared sigmoid node instead: silu(x) = x * s, silu_backward = `silu_backward_sigmoid`(grad, x,
    s). In a GEMM's epilogue every instruction an element counts (session 48): SwiGLU's backward
    goes from 12 to 9 for the two, one exp and one reciprocal fewer. Alone, each op keeps its
    functor (as many instructions either way)."""
    uses: dict[object, int] = {}
    for e in exprs.values():
        if e.op in _SIGMOID_OF_LAST:
            uses[e.args[-1]] = uses.get(e.args[-1], 0) + 1
    shared = dict(exprs)
    for fx, e in exprs.items():
        if e.op in _SIGMOID_OF_LAST and uses[e.args[-1]] > 1:
            x = e.args[-1]
            s = Expr("sigmoid", (x,))
            shared[fx] = {"sigmoid": Expr("sigmoid", (x,), e.dtype), "silu": Expr("mul", (x, s), e.dtype),
                          "silu_backward": Expr("silu_backward_sigmoid", (e.args[0], x, s), e.dtype)}[e.op]  # fmt: skip
    return shared


def build_region(region: Region, name: str) -> BuiltRegion:
    b = _Builder(region)
    gemm = b.anchor()
    reductions: dict[Node, tuple[Expr, str]] = {}  # reduction -> (its expr, the value it reduces)
    exprs: dict[Node, Expr] = {}
    epilogue = _needed(region)
    for fx in epilogue:
        expr = epilogue_expr(fx)
        assert expr is not None, fx
        exprs[fx] = expr
    exprs = share_sigmoids(exprs)
    for fx in epilogue:
        expr = exprs[fx]
        if expr.op in REDUCTION_OPS:
            summand = expr.args[0]
            assert isinstance(summand, Node) and summand in b.value, fx  # validated: inside
            reductions[fx] = (expr, b.value[summand])
        else:
            b.value[fx] = b.expr(expr, fx, [0])
    outputs = region.outputs()
    d = _choose_d(outputs, reductions, b.value)
    rest = [fx for fx in outputs if fx is not d]
    writers = _writers(rest, b.value, reductions)
    spec = ir.KernelSpec(
        c_identifier(name), gemm, _insert_writers(b.nodes, writers), b.value[d],
        ir.dtype_name(d.meta["val"].dtype), len(b.inputs),
    )  # fmt: skip
    if dense_rows(spec, d.meta["val"].shape[-1]):
        spec = dataclasses.replace(spec, dense_rows=True)
    return BuiltRegion(spec, tuple(b.inputs), (d, *rest))


def _needed(region: Region) -> list[Node]:
    """The epilogue nodes some output of the region needs: a node no output needs is not
    computed for nothing (the nn catalog's softmin_softplus had a forward exp nothing read;
    `recompute_inside._drop_unread` erases such nodes from the graph, this covers its being
    off, `EVT_RECOMPUTE_INSIDE=0`)."""
    inside, needed = set(region.nodes), set(region.outputs())
    for fx in reversed(region.epilogue):
        if fx in needed:
            needed.update(a for a in fx.all_input_nodes if a in inside)
    return [fx for fx in region.epilogue if fx in needed]


def dense_rows(spec: ir.KernelSpec, n) -> bool:
    """With `EVT_STAGED_STORES=1` (an experiment: correct on an H200 but slower than padded rows
    and the copy, session 45): whether `spec`'s
    [L,] M, N outputs have rows TMA cannot store as they are (`config.pads_rows`: ViT's 197 x 197
    bf16 scores) at a static N (`n`), so that they are allocated dense (`KernelSpec.dense_rows`)
    and its kernel stores them with its threads (`TileConfig.staged_stores`): no reader then
    needs the dense copy `contain_padded_outputs` gives padded rows. Not for a nested batch (no
    staged stores there yet)."""
    if os.environ.get("EVT_STAGED_STORES", "0") in ("", "0") or spec.gemm.nested:
        return False
    return isinstance(n, int) and pads_rows(spec, n)


def _choose_d(outputs: list[Node], reductions: dict, value: dict[Node, str]) -> Node:
    """The output stored as D: the last [M, N] one, a float one if any. A region whose only
    outputs are reductions stores the last reduction's summand as D, which no one reads."""
    full = [fx for fx in outputs if fx not in reductions]
    floats = [fx for fx in full if fx.meta["val"].dtype != torch.bool]
    if floats or full:
        return (floats or full)[-1]
    summand = reductions[outputs[-1]][1]
    return next(fx for fx, name in value.items() if name == summand)


def _writers(rest: list[Node], value: dict[Node, str], reductions: dict) -> list:
    """One writer per output (outputs 1, 2, ... in `rest` order), statistics of one value merged:
    first the statistics (softmax sums, means and vars), then the rest, a max over N joining a
    softmax statistic of the same value where it can."""
    index = {fx: i for i, fx in enumerate(rest, start=1)}
    stats: list = []
    for fx in rest:
        if fx in reductions and reductions[fx][0].op in STATISTICS:
            _join_statistic(stats, fx, index[fx], *reductions[fx])
    plain = [_writer(fx, index[fx], value, reductions, stats) for fx in rest
             if fx not in reductions or reductions[fx][0].op not in STATISTICS]  # fmt: skip
    return stats + [w for w in plain if w is not None]


# a statistic's op -> (its node, the output field it fills)
_STATISTIC = {
    "softmax_sum": (ir.SoftmaxStats, "sum_output"),
    "col_mean": (ir.WelfordStats, "mean_output"), "col_var": (ir.WelfordStats, "var_output"),
    "row_mean": (ir.ColumnWelfordStats, "mean_output"), "row_var": (ir.ColumnWelfordStats, "var_output"),
}  # fmt: skip
STATISTICS = tuple(_STATISTIC)
_SLOT = {"max_output": 0, "sum_output": 1, "mean_output": 0, "var_output": 1}  # in `keepdim`


def _with_output(s, field: str, output: int, keepdim: bool, **extra):
    """Statistic `s` also writing `field` to output `output`, shaped with or without the reduced
    dim (each output has its own: logsumexp keeps the max's dim, not the sum's)."""
    keep = list(s.keepdim)
    keep[_SLOT[field]] = keepdim
    return dataclasses.replace(s, **{field: output}, keepdim=tuple(keep), **extra)


def _join_statistic(stats: list, fx: Node, output: int, expr: Expr, summand: str) -> None:
    """Add output `output` of reduction `fx` to the statistic node of `stats` of the same value
    that still lacks it, or to a new node (in place)."""
    dtype, keepdim = _vector(fx)
    cls, field = _STATISTIC[expr.op]
    extra: dict = {}  # a softmax's shift, a var's correction
    if expr.op == "softmax_sum":
        extra["zero_inf_max"] = bool(expr.args[1])
    elif expr.op.endswith("_var"):
        extra["correction"] = int(expr.args[1])
    for i, s in enumerate(stats):
        same = isinstance(s, cls) and (s.arg, s.dtype) == (summand, dtype)
        if same and all(getattr(s, k) == v for k, v in extra.items() if k != "correction") \
                and getattr(s, field) is None:  # fmt: skip
            stats[i] = _with_output(s, field, output, keepdim, **extra)
            return
    new = cls(c_identifier(fx.name), summand, dtype, **extra)
    stats.append(_with_output(new, field, output, keepdim))


def _vector(fx: Node) -> tuple[str, bool]:
    """A reduction's output dtype and whether it keeps the reduced dims."""
    val, summand = fx.meta["val"], epilogue_expr(fx).args[0]  # type: ignore[union-attr]
    return ir.dtype_name(val.dtype), val.dim() == summand.meta["val"].dim()


def _writer(fx: Node, output: int, value: dict[Node, str], reductions: dict, stats: list):
    if fx not in reductions:
        dtype = ir.dtype_name(fx.meta["val"].dtype)
        return ir.AuxStore(f"{c_identifier(fx.name)}_store", value[fx], output, dtype)
    expr, summand = reductions[fx]
    (dtype, keepdim), name = _vector(fx), c_identifier(fx.name)
    where, op = expr.op.split("_")  # row_sum, col_max, scalar_sum, ...
    if where == "col" and op == "max":
        for i, s in enumerate(stats):  # softmax's max: the statistic computes it anyway
            same = isinstance(s, ir.SoftmaxStats) and (s.arg, s.dtype) == (summand, dtype)
            if same and s.max_output is None:
                stats[i] = _with_output(s, "max_output", output, keepdim)
                return None
    cls = {"row": ir.RowReduction, "col": ir.ColReduction, "scalar": ir.ScalarReduction}[where]
    return cls(name, summand, output, dtype, keepdim, op)


def _insert_writers(nodes: list[ir.Node], writers: list) -> tuple[ir.Node, ...]:
    """Put each writer (AuxStore, reduction, statistic) right after the value it writes and let
    later nodes read through it (they pass their value on), so they sit on the path to D wherever
    they can."""
    after: dict[str, list] = {}
    for w in writers:
        after.setdefault(w.arg, []).append(w)
    out: list[ir.Node] = []
    renamed: dict[str, str] = {}
    for n in nodes:
        if isinstance(n, ir.Compute):
            n = ir.Compute(n.name, n.op, tuple(renamed.get(a, a) for a in n.args), n.dtype)
        out.append(n)
        for w in after.get(n.name, []):
            out.append(w)
            renamed[n.name] = w.name
    return tuple(out)

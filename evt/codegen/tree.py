"""Region -> EVT tree: turn an FX region into a `KernelSpec` (and say which FX values it reads
and writes).

Naming: every IR node is named after the FX node it came from (the accumulator is `<gemm>_acc`, an
expression's inner steps `<node>_<i>`, constants `<node>_c<i>`, stores `<node>_store`), so the
generated C++ and the `evt dump` tree read like the graph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torch.fx import Node

from evt import ir
from evt.errors import UnsupportedPattern
from evt.graph.epilogue_rules import Expr, epilogue_expr
from evt.graph.fold_gemm_operands import GEMM
from evt.graph.layouts import aux_major, gemm_majors, load_kind
from evt.partition.region import Region


@dataclass(frozen=True)
class BuiltRegion:
    spec: ir.KernelSpec
    inputs: tuple[Node, ...]  # the FX values passed as the kernel's inputs, in order
    outputs: tuple[Node, ...]  # the region's FX nodes each kernel output replaces (D first)


def sanitize(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return name if name and not name[0].isdigit() else f"n_{name}"


class _Builder:
    def __init__(self, region: Region):
        self.region = region
        self.shape = tuple(region.anchor.meta["val"].shape)
        self.inputs: list[Node] = []
        self.nodes: list[ir.Node] = []
        self.value: dict[Node, str] = {}  # FX node -> IR node name holding its value

    def add(self, node: ir.Node) -> str:
        self.nodes.append(node)
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
        idx, name = self.input_index(fx), sanitize(fx.name)
        if kind == "aux_load":
            node: ir.Node = ir.AuxLoad(name, idx, dtype, aux_major(val))
        else:
            node = (ir.RowBroadcast if kind == "row_broadcast" else ir.ColBroadcast)(name, idx, dtype)
        self.value[fx] = self.add(node)
        return node.name

    def arg(self, a, owner: Node, counter: list[int]) -> str:
        if isinstance(a, _Ref):
            return str(a)
        if isinstance(a, Node):
            return self.value[a] if a in self.value else self.load(a)
        if isinstance(a, Expr):
            return self.expr(a, owner, counter, final=False)
        counter[0] += 1
        return self.add(ir.ScalarBroadcast(f"{sanitize(owner.name)}_c{counter[0]}", float(a)))

    def expr(self, e: Expr, owner: Node, counter: list[int], final: bool = True) -> str:
        args = tuple(self.arg(a, owner, counter) for a in e.args)
        counter[0] += 1
        name = sanitize(owner.name) if final else f"{sanitize(owner.name)}_{counter[0]}"
        dtype = "f32" if e.dtype is None else ir.dtype_name(e.dtype)
        return self.add(ir.Compute(name, e.op, args, dtype))

    def anchor(self) -> ir.Gemm:
        a_node = self.region.anchor
        g = a_node.meta[GEMM]
        majors = gemm_majors(g)
        if majors is None:
            raise UnsupportedPattern(f"GEMM operands need a unit stride: {a_node.format_node()}")
        a = ir.Operand(self.input_index(g.a), g.a_transposed, majors[0])
        b = ir.Operand(self.input_index(g.b), g.b_transposed, majors[1])
        acc = self.add(ir.AccFetch(f"{sanitize(a_node.name)}_acc"))
        value = acc if g.alpha == 1 else self.expr(Expr("mul", (_Ref(acc), g.alpha)), a_node, [0], False)
        if g.bias is not None:
            bias: object = g.bias if g.beta == 1 else Expr("mul", (g.bias, g.beta))
            value = self.expr(Expr("add", (_Ref(value), bias)), a_node, [0])
        self.value[a_node] = value
        return ir.Gemm(a, b, ir.dtype_name(g.a.meta["val"].dtype))


class _Ref(str):
    """An already-built IR value used as an expression argument."""


def build_region(region: Region, name: str) -> BuiltRegion:
    b = _Builder(region)
    gemm = b.anchor()
    for fx in region.epilogue:
        expr = epilogue_expr(fx)
        assert expr is not None, fx
        b.value[fx] = b.expr(expr, fx, [0])
    outputs = region.outputs()
    stores = {
        b.value[fx]: ir.AuxStore(
            f"{sanitize(fx.name)}_store", b.value[fx], i, ir.dtype_name(fx.meta["val"].dtype)
        )
        for i, fx in enumerate(outputs[:-1], start=1)
    }
    d = outputs[-1]
    spec = ir.KernelSpec(
        sanitize(name), gemm, _insert_stores(b.nodes, stores), b.value[d],
        ir.dtype_name(d.meta["val"].dtype), len(b.inputs),
    )
    return BuiltRegion(spec, tuple(b.inputs), (d, *outputs[:-1]))


def _insert_stores(nodes: list[ir.Node], stores: dict[str, ir.AuxStore]) -> tuple[ir.Node, ...]:
    """Put each AuxStore right after the value it stores and let later nodes read through it
    (a store passes its value on), so stores sit on the path to D wherever they can."""
    out: list[ir.Node] = []
    renamed: dict[str, str] = {}
    for n in nodes:
        if isinstance(n, ir.Compute):
            n = ir.Compute(n.name, n.op, tuple(renamed.get(a, a) for a in n.args), n.dtype)
        out.append(n)
        if n.name in stores:
            out.append(stores[n.name])
            renamed[n.name] = stores[n.name].name
    return tuple(out)

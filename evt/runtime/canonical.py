"""A kernel's build identity: the spec with its names replaced by ones derived from its structure.

IR node names come from FX node names (`addmm_2_acc`, `primals_5`), so the same Linear + GELU in
two layers gives two specs that differ only in names. Building the canonical spec instead lets
them share one binary. Canonical names stay readable in the generated C++: `acc`, `in2_row`,
`gelu_4`, `out1`.
"""

from __future__ import annotations

import dataclasses

from evt import ir


def canonical(spec: ir.KernelSpec, name: str = "k") -> ir.KernelSpec:
    """`spec` named `name`, its nodes renamed by kind, input/output index and position."""
    names: dict[str, str] = {}
    for i, node in enumerate(spec.nodes):
        base = node_name(node, i)
        names[node.name] = base if base not in names.values() else f"{base}_{i}"
    nodes = tuple(_rename(n, names) for n in spec.nodes)
    return dataclasses.replace(spec, name=name, nodes=nodes, d=names[spec.d])


def node_name(node: ir.Node, position: int) -> str:
    if isinstance(node, ir.AccFetch):
        return "acc"
    if isinstance(node, ir.AuxLoad):
        return f"in{node.input}"
    if isinstance(node, ir.RowBroadcast):
        return f"in{node.input}_row"
    if isinstance(node, ir.ColBroadcast):
        return f"in{node.input}_col"
    if isinstance(node, ir.ScalarLoad):
        return f"in{node.input}_scalar"
    if isinstance(node, ir.ScalarBroadcast):
        return f"c{position}"
    if isinstance(node, ir.Compute):
        return f"{node.op}_{position}"
    assert isinstance(node, ir.WRITERS), node
    return "out" + "_".join(str(o.index) for o in ir.writes(node))


def _rename(node: ir.Node, names: dict[str, str]) -> ir.Node:
    node = dataclasses.replace(node, name=names[node.name])
    if isinstance(node, ir.Compute):
        return dataclasses.replace(node, args=tuple(names[a] for a in node.args))
    if isinstance(node, ir.WRITERS):
        return dataclasses.replace(node, arg=names[node.arg])
    return node

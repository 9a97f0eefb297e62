"""An independent validator of a partition: it recomputes every constraint from the graph.

It shares no decision logic with any partitioner: sides are recomputed from the tangents, GEMMs
recognized by target, acyclicity checked on the contracted graph with networkx.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from evt.errors import PartitionError
from evt.graph.epilogue_rules import epilogue_expr, is_reduction, tensor_args
from evt.graph.fold_gemm_operands import GEMM_TARGETS
from evt.graph.layouts import load_kind
from evt.partition.contract import is_acyclic
from evt.partition.region import Region

aten = torch.ops.aten


def _backward_nodes(graph: Graph) -> set[Node]:
    out: set[Node] = set()
    for n in graph.nodes:
        tangent = n.op == "placeholder" and str(n.target).startswith("tangents")
        if tangent or any(a in out for a in n.all_input_nodes):
            out.add(n)
    return out


def validate(graph: Graph, regions: list[Region], max_aux: int = 4) -> None:
    """Raise `PartitionError` naming the region and the broken constraint. `max_aux` bounds the
    aux tensors (full [M, N] loads plus stores besides D) of each region's epilogue."""
    backward = _backward_nodes(graph)
    seen: set[Node] = set()
    for i, r in enumerate(regions):
        where = f"region {i} (anchor {r.anchor.name})"
        if seen & set(r.nodes):
            raise PartitionError(f"{where}: shares nodes with another region")
        seen.update(r.nodes)
        _check_region(r, where, backward)
        if aux_tensors(r) > max_aux:
            raise PartitionError(f"{where}: {aux_tensors(r)} aux loads+stores > {max_aux}")
    if not is_acyclic(graph, [r.nodes for r in regions]):
        raise PartitionError("the graph of contracted regions has a cycle")


def _check_region(r: Region, where: str, backward: set[Node]) -> None:
    gemms = [n for n in r.nodes if n.target in GEMM_TARGETS]
    if gemms != [r.anchor]:
        raise PartitionError(f"{where}: needs exactly one GEMM, the anchor; has {gemms}")
    shape = tuple(r.anchor.meta["val"].shape)
    loads_only = _loads_only(r, shape)
    sides = {"backward" if n in backward else "forward" for n in r.nodes if n not in loads_only}
    if sides != {r.side}:
        raise PartitionError(f"{where}: mixes sides {sorted(sides)} (declared {r.side})")
    inside = {r.anchor}
    for n in r.epilogue:
        expr = epilogue_expr(n)
        if expr is None:
            raise PartitionError(f"{where}: {n.format_node()} is not epilogue-able")
        if _value_shape(n, expr) != shape and not _shared(r, n, expr, shape, loads_only):
            raise PartitionError(f"{where}: {n.name} works on shape {_value_shape(n, expr)}")
        args = tensor_args(expr)
        if not any(a in inside for a in args) and n not in loads_only:
            raise PartitionError(f"{where}: {n.name} is not downstream of the GEMM in the region")
        if any(a in inside and is_reduction(a) for a in args):
            raise PartitionError(f"{where}: {n.name} reads a reduction of its own region, which "
                                 "is complete only after the kernel")  # fmt: skip
        for a in args:
            if a not in r.nodes and load_kind(a.meta.get("val"), *shape) is None:
                raise PartitionError(f"{where}: {n.name} reads {a.name}, which no load can read")
        inside.add(n)


def _loads_only(r: Region, shape: tuple) -> set[Node]:
    """The members that read nothing downstream of the GEMM, only what loads read (row/column
    broadcasts: `candidates.load_tree`; aux tensors too: `recompute_inside`) or other such
    members: the epilogue computes them per element, and either side could (no side of their own)."""
    out: set[Node] = set()
    for n in r.epilogue:
        expr = epilogue_expr(n)
        args = tensor_args(expr) if expr is not None else []
        if args and all(a in out or (a not in r.nodes and load_kind(a.meta.get("val"), *shape))
                        for a in args):  # fmt: skip
            out.add(n)
    return out


def _shared(r: Region, n: Node, expr, shape: tuple, loads_only: set[Node]) -> bool:
    """Whether `n` is an [M, N] value every batch of a batched region shares: computed from
    loads alone and read inside the region only (a region output is stored per batch)."""
    inside = set(r.nodes)
    return (len(shape) == 3 and _value_shape(n, expr) == shape[1:] and n in loads_only
            and all(u in inside for u in n.users))  # fmt: skip


def _value_shape(n: Node, expr) -> tuple:
    """The [M, N] or [L, M, N] shape the node works on: its own, or the summand's for a
    reduction."""
    x = expr.args[0] if is_reduction(n) else n
    return tuple(x.meta["val"].shape)


def aux_tensors(r: Region) -> int:
    """Full-size (TMA) loads plus stores besides D (reductions need no shared memory)."""
    inside = set(r.nodes)
    shape = tuple(r.anchor.meta["val"].shape)
    loads = {
        a for n in r.epilogue for a in n.all_input_nodes
        if a not in inside and load_kind(a.meta["val"], *shape) == "aux_load"
    }  # full tensors, and in a batched region [M, N] ones every batch reads
    writes = [n for n in r.nodes if not is_reduction(n)]
    stores = sum(any(u not in inside for u in n.users) for n in writes) - 1
    return len(loads) + stores

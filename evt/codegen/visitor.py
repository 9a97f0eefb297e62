"""Shape a KernelSpec's epilogue DAG into what CUTLASS can visit: an `Sm90EVT` tree or an
`Sm90TopologicalVisitor` DAG.

- An `AuxStore` (or any other writer: a reduction, a statistic) passes its input through
  unchanged, so the other readers of a stored value read the store instead: `h = a + b; store(h);
  gelu(h)` stays a chain, not a DAG.
- The root (the value stored as D) must be the last op and have no readers, and its fragment must
  be fp32 or D's element type (the collective converts only from those): otherwise an identity
  node `<d>_out` is appended.
- The result is a tree when every node but the root has exactly one reader (counting `x * x` as
  two); otherwise it is a DAG, listed in topological order with the root last.
- A DAG of two nodes (the root reading one leaf twice, `acc < acc`) gets an identity node between
  them: CUTLASS 4.2's `Sm90TopologicalVisitor` keeps its R-1 intermediate fragments in
  `cute::repeat<R-1>(...)`, which for R-1 = 1 is the fragment itself, not a tuple, and the
  visitor does not compile (found by the nested-batch fuzzer, seed 203).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from evt.ir import WRITERS, AuxLoad, Compute, KernelSpec, Node, node_args

PASS_THROUGH = WRITERS  # nodes that write outputs and return their input


@dataclass(frozen=True)
class VisitorPlan:
    nodes: tuple[Node, ...]  # topological order, root last
    root: str
    dag: bool  # True: Sm90TopologicalVisitor; False: a tree of Sm90EVT


def plan_visitor(spec: KernelSpec) -> VisitorPlan:
    nodes, root = _read_through_stores(spec.nodes, spec.d)
    nodes = _sort_root_last(nodes, root)
    dag = _is_dag(nodes, root)
    if _readers(nodes)[root] or _out_dtype(nodes, root, dag) not in ("f32", spec.d_dtype):
        taken = {n.name for n in nodes}
        name = _fresh(f"{spec.d}_out", taken)
        nodes = nodes + (Compute(name, "identity", (root,)),)
        root = name
        dag = _is_dag(nodes, root)
    if dag and len(nodes) == 2:
        nodes = _between(nodes)
    return VisitorPlan(nodes, root, dag)


def _between(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
    """[leaf, root(leaf, leaf...)] -> [leaf, copy = identity(leaf), root(copy, copy...)]."""
    leaf, root = nodes
    copy = Compute(_fresh(f"{leaf.name}_copy", {leaf.name, root.name}), "identity", (leaf.name,))
    return (leaf, copy, _rename_args(root, {leaf.name: copy.name}))


def _read_through_stores(nodes: tuple[Node, ...], d: str) -> tuple[tuple[Node, ...], str]:
    """Chain the stores of each value; point every other reader (and D) at the chain's end."""
    last: dict[str, str] = {}  # value -> the last store of it seen so far
    chained: list[Node] = []
    for n in nodes:
        if isinstance(n, PASS_THROUGH):
            source = n.arg
            n = dataclasses.replace(n, arg=last.get(source, source))
            last[source] = n.name
        chained.append(n)
    # every store in a chain holds the same value as its source: read the end of the chain
    alias = dict(last)
    for n in chained:
        if isinstance(n, PASS_THROUGH) and n.arg in alias:
            alias[n.name] = alias[n.arg]
    out = [n if isinstance(n, PASS_THROUGH) else _rename_args(n, alias) for n in chained]
    return tuple(out), alias.get(d, d)


def _rename_args(n: Node, alias: dict[str, str]) -> Node:
    if isinstance(n, Compute):
        return dataclasses.replace(n, args=tuple(alias.get(a, a) for a in n.args))
    return n


def _sort_root_last(nodes: tuple[Node, ...], root: str) -> tuple[Node, ...]:
    """Kahn's algorithm, stable in the given order, taking the root only when nothing else is
    left (it has no readers, so that is always possible)."""
    done: set[str] = set()
    todo = list(nodes)
    out: list[Node] = []
    while todo:
        ready = [n for n in todo if all(a in done for a in node_args(n))]
        pick = next((n for n in ready if n.name != root), ready[0])
        out.append(pick)
        done.add(pick.name)
        todo.remove(pick)
    return tuple(out)


def _readers(nodes: tuple[Node, ...]) -> dict[str, int]:
    count = {n.name: 0 for n in nodes}
    for n in nodes:
        for a in node_args(n):
            count[a] += 1
    return count


def _is_dag(nodes: tuple[Node, ...], root: str) -> bool:
    return any(c != (0 if name == root else 1) for name, c in _readers(nodes).items())


def _out_dtype(nodes: tuple[Node, ...], name: str, dag: bool) -> str:
    """The element type of the fragment a node's visit returns, as the collective sees it."""
    n = next(m for m in nodes if m.name == name)
    if isinstance(n, (Compute, AuxLoad)):
        return n.dtype
    if isinstance(n, PASS_THROUGH) and not dag:  # returns its child's fragment as is
        return _out_dtype(nodes, n.arg, dag)
    return "f32"  # the accumulator, broadcasts, scalars; a DAG converts every input to fp32


def _fresh(name: str, taken: set[str]) -> str:
    out, i = name, 1
    while out in taken:
        out, i = f"{name}{i}", i + 1
    return out

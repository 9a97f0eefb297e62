"""Shrink a failing spec: delta debugging over spec rewrites, keeping each rewrite that leaves a
valid spec (`spec_check.check`) that still fails (`fails(spec)`).

Rewrites, smallest result first: drop an output (its readers read its argument), or store its
argument as D instead; make a node's
readers read one of its arguments instead (bypass); make them read the accumulator; then remove
what is dead and renumber inputs and outputs. `prepare(candidates)`, if given, sees each round's
candidates before `fails` does (the GPU runner builds them in parallel there).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator

from evt import ir
from evt.testing.spec_check import check, live


def minimize(spec: ir.KernelSpec, fails: Callable[[ir.KernelSpec], bool],
             prepare: Callable[[list[ir.KernelSpec]], None] | None = None,
             budget_s: float = float("inf")) -> ir.KernelSpec:  # fmt: skip
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        candidates = [c for c in dict.fromkeys(candidates_of(spec))
                      if len(c.nodes) < len(spec.nodes) and not check(c)]  # fmt: skip
        candidates.sort(key=lambda c: len(c.nodes))
        if prepare is not None:
            prepare(candidates)
        smaller = next((c for c in candidates if time.monotonic() < deadline and fails(c)), None)
        if smaller is None:
            return spec
        spec = smaller
    return spec


def candidates_of(spec: ir.KernelSpec) -> Iterator[ir.KernelSpec]:
    for n in spec.nodes:
        if isinstance(n, ir.WRITERS):
            yield _replace_uses(spec, n, n.arg, drop=True)
            yield _replace_uses(dataclasses.replace(spec, d=n.arg), n, n.arg, drop=True)
    for n in spec.nodes:
        for a in ir.node_args(n):
            if not isinstance(n, ir.WRITERS):
                yield _replace_uses(spec, n, a)
        if not isinstance(n, ir.AccFetch):
            yield _replace_uses(spec, n, "acc")


def _replace_uses(spec: ir.KernelSpec, node: ir.Node, by: str, drop: bool = False) -> ir.KernelSpec:
    """Readers of `node` (and D) read `by`; `node` is dropped when `drop` (else when dead)."""

    def swap(name: str) -> str:
        return by if name == node.name else name

    nodes = [n for n in spec.nodes if not (drop and n is node)]
    nodes = [_map_args(n, swap) for n in nodes]
    return tidy(dataclasses.replace(spec, nodes=tuple(nodes), d=swap(spec.d)))


def _map_args(n: ir.Node, f: Callable[[str], str]) -> ir.Node:
    if isinstance(n, ir.Compute):
        return dataclasses.replace(n, args=tuple(f(a) for a in n.args))
    if isinstance(n, ir.WRITERS):
        return dataclasses.replace(n, arg=f(n.arg))
    return n


def tidy(spec: ir.KernelSpec) -> ir.KernelSpec:
    """Remove dead nodes (keeping the accumulator), renumber inputs 0.. and outputs 1.. in node
    order."""
    alive = live(spec) | {"acc"}
    nodes = [n for n in spec.nodes if n.name in alive or isinstance(n, ir.AccFetch)]
    loads = [n for n in nodes if isinstance(n, (ir.AuxLoad, ir.RowBroadcast, ir.ColBroadcast))]
    order = sorted({spec.gemm.a.input, spec.gemm.b.input} | {n.input for n in loads})
    index = {old: new for new, old in enumerate(order)}
    out = iter(range(1, len(nodes) + 1))
    renumbered = []
    for n in nodes:
        if isinstance(n, (ir.AuxLoad, ir.RowBroadcast, ir.ColBroadcast)):
            n = dataclasses.replace(n, input=index[n.input])
        elif isinstance(n, ir.WRITERS):
            n = _renumber(n, out)
        renumbered.append(n)
    g = spec.gemm
    gemm = dataclasses.replace(g, a=dataclasses.replace(g.a, input=index[g.a.input]),
                               b=dataclasses.replace(g.b, input=index[g.b.input]))  # fmt: skip
    return dataclasses.replace(spec, gemm=gemm, nodes=tuple(renumbered), num_inputs=len(order))


def _renumber(n: ir.Writer, out: Iterator[int]) -> ir.Writer:
    """`n` writing the next outputs of `out` (a statistic's present outputs in field order)."""
    if isinstance(n, ir.TWO_OUTPUT_STATISTICS):
        fields = [f.name for f in dataclasses.fields(n) if f.name.endswith("_output")]
        return dataclasses.replace(n, **{f: next(out) for f in fields if getattr(n, f) is not None})
    return dataclasses.replace(n, output=next(out))

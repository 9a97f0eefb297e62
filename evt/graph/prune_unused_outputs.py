"""Drop the aux stores nothing reads once AOTAutograd has split the joint graph.

A forward region stores a value the backward reads (GELU's pre-activation, say). Where the
partitioner then recomputes the region in the backward (activation checkpointing tags its GEMM:
`lower_regions.ANCHOR_META`), the forward graph's call no longer has a reader for that output, but
its kernel would still write it: a full [M, N] store for nothing. This pass, run on the forward
and the backward graph after the split (Inductor's `post_grad_custom_post_pass`; the eager route's
compilers), rewrites such a call to a spec without those aux stores (their values pass through
to their readers in the tree, as a store passes its argument on), outputs renumbered, and starts
building its kernel. D (output 0) and reductions are kept: the kernel writes them whatever reads
them. Any failure leaves the call as it was.
"""

from __future__ import annotations

import dataclasses
import operator
import warnings

from torch.fx import Graph, Node

from evt import debug, ir
from evt.graph import lower_regions
from evt.runtime import dispatch

# told (the region's spec, its pruned spec, the problem) of each call rewritten: `evt.explain`
# and the tests' `compile_reports` record them (`evt.report.note_pruned`)
LISTENERS: list = []


def prune_unused_outputs(graph: Graph) -> Graph:
    for call in list(graph.find_nodes(op="call_function", target=lower_regions.FUSED_GEMM)):
        spec = call.meta.get("evt_spec")
        if spec is None:
            continue
        try:
            _prune(graph, call, spec)
        except Exception as e:  # noqa: BLE001 - the call stays as it was: correct, only slower
            warnings.warn(f"evt: region {spec.name} keeps its unread outputs: {type(e).__name__}: {e}",
                          stacklevel=2)  # fmt: skip
    return graph


def _prune(graph: Graph, call: Node, spec: ir.KernelSpec) -> None:
    items = []
    for item in [u for u in call.users if u.target is operator.getitem]:
        if item.users:
            items.append(item)
        else:
            graph.erase_node(item)
    read = {item.args[1] for item in items}
    drop = {n.name for n in spec.nodes if isinstance(n, ir.AuxStore) and n.output not in read}
    if not drop:
        return
    pruned, renumber = without_stores(spec, drop)
    inputs = call.args[1]
    fakes = lower_regions.fake_outputs(pruned, inputs)
    with graph.inserting_after(call):
        new = graph.call_function(lower_regions.FUSED_GEMM, (ir.to_json(pruned), inputs))
    new.meta.update({k: v for k, v in call.meta.items() if k not in ("val", "evt_spec")})
    new.meta.update(val=fakes, evt_spec=pruned)
    for item in items:
        old = item.args[1]
        item.args = (new, renumber[old])
        item.meta["val"] = fakes[renumber[old]]
    graph.erase_node(call)
    debug.log(1, f"region {spec.name}: its unread aux stores {sorted(drop)} dropped after the "
                 "forward/backward split")  # fmt: skip
    dispatch.inherit_tuning(spec, pruned)
    problem = dispatch.prefetch_for(pruned, lower_regions.input_values(new))
    for listen in LISTENERS:
        listen(spec, pruned, problem)


def without_stores(spec: ir.KernelSpec, drop: set[str]) -> tuple[ir.KernelSpec, dict[int, int]]:
    """`spec` less the aux stores named in `drop` (their readers read their arguments), and the
    old -> new output index of every output kept (D stays 0)."""
    through = {n.name: n.arg for n in spec.nodes if n.name in drop}

    def source(name: str) -> str:
        while name in through:
            name = through[name]
        return name

    kept = []
    for n in spec.nodes:
        if n.name in drop:
            continue
        if isinstance(n, ir.Compute):
            n = dataclasses.replace(n, args=tuple(source(a) for a in n.args))
        elif hasattr(n, "arg"):
            n = dataclasses.replace(n, arg=source(n.arg))
        kept.append(n)
    nodes, renumber = ir.renumber_outputs(kept)
    return dataclasses.replace(spec, nodes=nodes, d=source(spec.d)), renumber

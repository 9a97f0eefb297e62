"""Replace each region by one `evt::fused_gemm` call (plus a `getitem` per output).

All fallible work (building specs, fake outputs) happens before the graph is touched, per region:
a region that fails is left unfused with one warning naming it, and the graph stays valid.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable

import torch
from torch._guards import detect_fake_mode
from torch.fx import Graph, Node

from evt import ir
from evt.codegen.tree import BuiltRegion, build_region
from evt.errors import EvtError
from evt.graph.fake import CHECKPOINT_TAGS
from evt.partition.region import Region

FUSED_GEMM = torch.ops.evt.fused_gemm.default
Keep = Callable[[Region, BuiltRegion], bool]
Prepare = Callable[[list[tuple[Region, BuiltRegion]]], None]


def lower_regions(
    graph: Graph, regions: list[Region], keep: Keep | None = None, prepare: Prepare | None = None
) -> list[tuple[Region, BuiltRegion]]:
    """Replace each region by one `evt::fused_gemm` call. `keep(region, built)` may veto a region
    (max-autotune leaves regions whose kernel loses to the unfused path in the graph);
    `prepare` sees every built region before the first `keep` (max-autotune starts all their
    candidates' builds at once)."""
    built_regions = []
    for i, region in enumerate(regions):
        name = f"evt_{region.side[0]}{i}_{region.anchor.name}"
        try:
            built_regions.append((region, build_region(region, name)))
        except EvtError as e:
            warnings.warn(f"evt: region {name} stays unfused: {e}", stacklevel=2)
    if prepare is not None:
        prepare(built_regions)
    plans = [(r, b) for r, b in built_regions if keep is None or keep(r, b)]
    replaced: dict[Node, Node] = {}  # outputs of regions lowered so far -> their getitem
    for region, b in plans:
        inputs = [replaced.get(n, n) for n in b.inputs]
        _replace(graph, region, b, inputs, replaced)
    if plans:
        _toposort(graph)
    return plans


def input_values(call: Node) -> list:
    """The values (fake tensors, or constants) of an `evt::fused_gemm` call's inputs."""
    return [n.meta.get("val") if isinstance(n, Node) else n for n in call.args[1]]


def fake_outputs(spec: ir.KernelSpec, inputs: list[Node]) -> list[torch.Tensor]:
    vals = [n.meta["val"] for n in inputs]
    mode = detect_fake_mode(vals)
    with mode if mode is not None else torch._subclasses.FakeTensorMode():
        return FUSED_GEMM(ir.to_json(spec), vals)


def _replace(graph: Graph, region: Region, b: BuiltRegion, inputs: list[Node], replaced) -> None:
    fakes = fake_outputs(b.spec, inputs)
    with graph.inserting_after(region.nodes[-1]):
        call = graph.call_function(FUSED_GEMM, (ir.to_json(b.spec), inputs))
    call.meta.update(val=fakes, evt_side=region.side, evt_spec=b.spec)
    _copy_trace(region, call)
    for i, old in enumerate(b.outputs):
        with graph.inserting_after(call):
            item = graph.call_function(operator.getitem, (call, i))
        item.meta.update(val=fakes[i], evt_side=region.side)
        _copy_trace(region, item)
        old.replace_all_uses_with(item)
        replaced[old] = item
    for node in reversed(region.nodes):
        graph.erase_node(node)


# Copied from a region's anchor onto its call and getitems: where the source came from, and
# activation checkpointing's tags (`torch.utils.checkpoint`: "recompute", a CheckpointPolicy, and
# "ac_graph_id"), which ask AOTAutograd's partitioner to recompute the GEMM in the backward
# instead of saving its outputs. A region whose anchor is checkpointed is recomputed whole (its
# epilogue ops too, checkpointed or not: recomputing is always correct); without the tags its
# outputs were saved and the checkpoint's memory saving lost.
ANCHOR_META = ("stack_trace", "nn_module_stack", *CHECKPOINT_TAGS)


def _copy_trace(region: Region, node: Node) -> None:
    for key in ANCHOR_META:
        if key in region.anchor.meta:
            node.meta[key] = region.anchor.meta[key]


def _toposort(graph: Graph) -> None:
    """Restore a topological node order (a region's outputs may have users placed before the
    region's last node, where its call now sits), moving as few nodes as possible."""
    placed: set[Node] = set()
    ordered: list[Node] = []
    for root in list(graph.nodes):
        stack = [root]
        while stack:
            n = stack[-1]
            pending = [a for a in n.all_input_nodes if a not in placed]
            if n in placed or not pending:
                stack.pop()
                if n not in placed:
                    placed.add(n)
                    ordered.append(n)
            else:
                stack.extend(reversed(pending))
    output = graph.output_node()
    for n in ordered:
        if n is not output and n.op != "placeholder":
            output.prepend(n)

"""The pipeline: the one place that lists evt's passes, in order.

    Dynamo passes (on Dynamo's graph, before AOTAutograd traces it) ... AOTAutograd's joint
    graph ... graph passes -> partition -> narrow outputs -> recompute outside (opt-in) -> trim
    for Inductor -> restore head copies -> free head copies -> validate -> lower regions (each
    region's shape guards and, by default, its profitability check) -> cleanup passes -> verify
    ... AOTAutograd splits the joint graph ... -> split passes, on the forward and the backward

Adding a pass is one line in `GRAPH_PASSES` plus one file in `evt/graph/`.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable

from torch.fx import Graph, GraphModule

from evt import debug
from evt.codegen import profit
from evt.errors import EvtError
from evt.graph.annotate_sides import annotate_sides, side
from evt.graph.attention_to_sdpa import attention_to_sdpa
from evt.graph.constant_indices_as_slices import constant_indices_as_slices
from evt.graph.contain_padded_outputs import contain_padded_outputs, copied_outputs
from evt.graph.copy_index_masks import copy_index_masks
from evt.graph.eliminate_common_subexpressions import eliminate_common_subexpressions
from evt.graph.eliminate_dead_code import eliminate_dead_code
from evt.graph.eliminate_noop_clones import eliminate_noop_clones
from evt.graph.fake import recompute_tagged
from evt.graph.float_index_compares import rewrite_index_compares
from evt.graph.float_index_masks import rewrite_index_masks
from evt.graph.fold_gemm_operands import GEMM, fold_gemm_operands
from evt.graph.fold_scalar_tensors import fold_scalar_tensors
from evt.graph.fold_views import fold_views
from evt.graph.fold_whole_slices import fold_whole_slices
from evt.graph.layouts import why_not_anchor
from evt.graph.lower_regions import lower_regions
from evt.graph.one_hot_scatters import rewrite_one_hot_scatters
from evt.graph.pointwise_convs_as_mm import pointwise_convs_as_mm
from evt.graph.prune_unused_outputs import prune_unused_outputs
from evt.graph.read_heads_in_place import read_heads_in_place
from evt.graph.recognize_statistics import recognize_statistics
from evt.graph.record_input_layouts import record_input_layouts
from evt.graph.restore_one_hots import restore_one_hots
from evt.graph.restore_statistics import restore_statistics
from evt.graph.sink_views import sink_views
from evt.graph.sizes_from_inputs import sizes_from_inputs
from evt.graph.snapshot import Snapshot
from evt.graph.split_full_means import split_full_means
from evt.graph.tanh_gelu_to_native import tanh_gelu_to_native
from evt.graph.unpermute_reductions import unpermute_reductions
from evt.graph.verify import verify
from evt.partition import Region, partition, validate
from evt.partition.free_head_copies import free_head_copies
from evt.partition.narrow_outputs import narrow_outputs
from evt.partition.recompute_for_backward import recompute_for_backward
from evt.partition.recompute_inside import recompute_inside
from evt.partition.recompute_outside import recompute_outside
from evt.partition.trim_for_inductor import inductor_savings, trim_for_inductor
from evt.report import (
    GraphReport,
    RegionReport,
    bytes_saved,
    format_table,
    op_name,
    saved_for_backward,
)
from evt.runtime import dispatch, guards

Pass = Callable[[Graph], Graph]

# on Dynamo's graph (torch-level calls, methods included), before AOTAutograd traces the joint
# graph: rewrites whose replacement brings its own backward (`before_aot`)
DYNAMO_PASSES: list[tuple[str, Callable[[GraphModule], object]]] = [
    ("attention_to_sdpa", attention_to_sdpa),
    ("tanh_gelu_to_native", tanh_gelu_to_native),
]

GRAPH_PASSES: list[tuple[str, Pass]] = [
    ("annotate_sides", annotate_sides),
    ("fold_scalar_tensors", fold_scalar_tensors),
    ("constant_indices_as_slices", constant_indices_as_slices),
    ("fold_whole_slices", fold_whole_slices),
    ("sizes_from_inputs", sizes_from_inputs),
    ("eliminate_noop_clones", eliminate_noop_clones),
    ("pointwise_convs_as_mm", pointwise_convs_as_mm),
    ("sink_views", sink_views),
    ("unpermute_reductions", unpermute_reductions),
    ("fold_views", fold_views),
    ("split_full_means", split_full_means),
    ("eliminate_common_subexpressions", eliminate_common_subexpressions),
    ("fold_gemm_operands", fold_gemm_operands),
    ("rewrite_one_hot_scatters", rewrite_one_hot_scatters),
    ("rewrite_index_compares", rewrite_index_compares),
    ("rewrite_index_masks", rewrite_index_masks),
    ("copy_index_masks", copy_index_masks),
    ("read_heads_in_place", read_heads_in_place),
    ("recognize_statistics", recognize_statistics),
]
# after lowering: what no region took goes back to what Inductor expects, then dead code goes
CLEANUP_PASSES: list[tuple[str, Pass]] = [
    ("contain_padded_outputs", contain_padded_outputs),
    ("restore_statistics", restore_statistics),
    ("restore_one_hots", restore_one_hots),
    ("eliminate_dead_code", eliminate_dead_code),
]
# on the forward and the backward graph once AOTAutograd has split the joint one (Inductor's
# post_grad_custom_post_pass; the eager route's compilers): each pass leaves a call it cannot
# improve as it was, so a failure here costs speed, never a wrong answer
SPLIT_PASSES: list[tuple[str, Pass]] = [
    ("prune_unused_outputs", prune_unused_outputs),
    ("record_input_layouts", record_input_layouts),
]


def run_passes(graph: Graph, passes: list[tuple[str, Pass]], check: bool) -> None:
    done: list[str] = []
    for name, fn in passes:
        try:
            fn(graph)
        except EvtError:
            raise
        except Exception as e:
            raise EvtError(f"pass '{name}' failed (after {done or 'no passes'}): {e}") from e
        done.append(name)
        debug.log(2, f"graph after {name}:\n{graph}")
        if check:
            verify(graph, after=name)


def before_aot(gm: GraphModule) -> None:
    """`DYNAMO_PASSES` on Dynamo's graph module, in place; a failing pass is reported once and
    the graph put back as it came (the passes before it keep their rewrites)."""
    import warnings

    for name, fn in DYNAMO_PASSES:
        before = Snapshot(gm.graph)
        try:
            fn(gm)
        except Exception as e:  # noqa: BLE001 - training must not crash because of evt
            before.restore(gm.graph)
            gm.recompile()
            warnings.warn(f"evt: Dynamo pass '{name}' failed, graph left as it was: "
                          f"{type(e).__name__}: {e}", stacklevel=2)  # fmt: skip
            continue
        debug.log(2, f"Dynamo graph after {name}:\n{gm.graph}")


def after_split(graph: Graph) -> None:
    """`SPLIT_PASSES` on one graph of the split (forward, backward); a failing pass is reported
    and the graph used as it is."""
    try:
        run_passes(graph, SPLIT_PASSES, check=debug.level() >= 2)
    except EvtError as e:
        import warnings

        warnings.warn(f"evt: {e}; the graph runs as the joint pass left it", stacklevel=2)


def fuse(
    graph: Graph, check: bool = False, draw: bool = False, keep=None, prepare=None
) -> GraphReport:
    """Run the whole pipeline on `graph` in place; returns what was fused (and, with `draw`, a
    picture of the partition). `keep(region, built)` may veto regions (max-autotune), after
    `prepare(regions)` saw them all (`evt.graph.lower_regions`)."""
    run_passes(graph, GRAPH_PASSES, check)
    regions = partition(graph)
    narrowed = narrow_outputs(graph, regions)
    casts_only = {r.anchor for r in regions} - {r.anchor for r in narrowed}
    trimmed = trim_for_inductor(graph, recompute_outside(graph, narrowed))
    given_back = {r.anchor for r in narrowed} - {r.anchor for r in trimmed}
    regions = free_head_copies(graph, recompute_inside(graph, recompute_for_backward(graph, trimmed)))
    validate(graph, regions)
    drawing = _draw(graph, regions) if draw else None
    gemms = [n for n in graph.nodes if GEMM in n.meta]
    why = {n: _why_unfused(n) for n in gemms}  # before lowering erases the fused ones
    for n in casts_only:
        why[n] = "only widening casts after it: cheaper outside (Inductor folds them into readers)"
    for n in given_back:
        why[n] = "its epilogue moves fewer bytes in Inductor's kernel with the ops after it"
    summaries = {r.anchor: _summary(r) for r in regions}  # before lowering erases the nodes
    taken = {n for r in regions for n in r.nodes}
    # anchor -> (profit.Prediction, its inputs: problem, saved bytes), in the default mode at
    # static CUDA shapes
    judged: dict = {}

    def keep_region(region, built) -> bool:
        if pattern := unfused_by_request(built.spec.name):
            why[region.anchor] = f"EVT_UNFUSE={os.environ['EVT_UNFUSE']} names it ({pattern})"
            debug.log(1, f"region {built.spec.name}: left unfused, EVT_UNFUSE matches {pattern}")
            return False
        vals = [n.meta.get("val") for n in built.inputs]
        if reason := guards.shape_reason(built.spec, vals):
            why[region.anchor] = f"its kernel cannot take these shapes: {reason}"
            return False
        if keep is None and all(map(guards.static_cuda, vals)):  # max-autotune measures
            problem = dispatch.problem_hint(built.spec, vals)
            # the dense copies the graph will make of padded outputs cost what they move
            saved = inductor_savings(region, taken) - sum(copied_outputs(region, built).values())
            # at the config its kernel already has in this process, if another shape chose one
            chosen = dispatch.config_for(built.spec, None)
            prediction = profit.predict(built.spec, problem, saved, chosen)
            judged[region.anchor] = (prediction, (problem, saved))
            if prediction:
                debug.log(2, f"region {built.spec.name}: predicted {prediction.fused_us:.1f} us fused "
                             f"at {prediction.config.label}, {prediction.unfused_us:.1f} us unfused")  # fmt: skip
            slower = profit.slower_reason(prediction, problem)
            if slower:
                why[region.anchor] = slower
                debug.log(1, f"region {built.spec.name}: {slower}")
                return False
        if keep is None or keep(region, built):
            return True
        why[region.anchor] = "max-autotune: its fused kernel was not faster than the unfused path"
        return False

    def prepare_requested(built_regions) -> None:  # max-autotune times none EVT_UNFUSE names
        prepare([(r, b) for r, b in built_regions if not unfused_by_request(b.spec.name)])

    lowered = lower_regions(graph, regions, keep_region, prepare and prepare_requested)
    run_passes(graph, CLEANUP_PASSES, check)
    verify(graph, after="lower_regions")
    report = GraphReport(unfused_gemms=len(gemms) - len(lowered), drawing=drawing)
    fused = {region.anchor for region, _ in lowered}
    report.unfused = [(n.name, side(n), why[n]) for n in gemms if n not in fused]
    for region, built in lowered:
        anchor, fused, saved, kept = summaries[region.anchor]
        prediction, judged_on = judged.get(region.anchor, (None, None))
        report.regions.append(
            RegionReport(built.spec.name, region.side, anchor, fused, saved, built.spec, kept,
                         predicted=prediction and (prediction.fused_us, prediction.unfused_us),
                         judged_on=judged_on)
        )  # fmt: skip
    debug.log(1, "\n" + format_table(report.regions, report.unfused_gemms, report.unfused))
    return report


def unfused_by_request(name: str) -> str | None:
    """The pattern of `EVT_UNFUSE` (comma-separated fnmatch patterns over region names, as
    `EVT_DEBUG=1` and `evt dump` print them: `evt_b4_mm_10`, `evt_f*`) that names region `name`,
    if one does: such a region stays unfused, as one the profitability check leaves. For
    measuring what each region gives a whole step (`scripts/step_variants.py`)."""
    for pattern in filter(None, (p.strip() for p in os.environ.get("EVT_UNFUSE", "").split(","))):
        if fnmatch.fnmatchcase(name, pattern):
            return pattern
    return None


def _why_unfused(gemm) -> str:
    """The reason a report gives for a GEMM no region anchors."""
    return why_not_anchor(gemm) or "nothing after it that an epilogue can compute"


def _draw(graph: Graph, regions: list[Region]):
    from evt.partition.draw import to_dot  # pydot is needed only for pictures

    return to_dot(graph, regions)


def _summary(r: Region) -> tuple[str, list[str], int, int]:
    # a checkpointed region is recomputed in the backward (`lower_regions.ANCHOR_META`): it keeps
    # nothing for it
    recomputed = recompute_tagged(r.anchor)
    return (
        op_name(r.anchor),
        [op_name(n) for n in r.epilogue],
        bytes_saved(r.nodes, r.inputs(), r.outputs()),
        0 if recomputed else saved_for_backward(r.outputs()),
    )


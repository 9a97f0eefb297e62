"""No-op clones leave the joint graph (evt/graph/eliminate_noop_clones.py): LayerNorm's backward
clones the incoming gradient, which kept every dgrad GEMM feeding a LayerNorm from its epilogue;
clones that change the layout or feed the output stay."""

from __future__ import annotations

import torch
from torch.fx import Graph

from evt.graph.eliminate_noop_clones import eliminate_noop_clones
from tests.graphs import explain_case

aten = torch.ops.aten


def clone_graph(source_shape, stride=None, to_output=False) -> Graph:
    g = Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty_strided(source_shape, stride or _contiguous(source_shape))
    c = g.call_function(aten.clone.default, (x,))
    y = c if to_output else g.call_function(aten.relu.default, (c,))
    g.output((y,))
    return g


def _contiguous(shape):
    return torch.empty(shape).stride()


def clones(g: Graph) -> int:
    return sum(n.target is aten.clone.default for n in g.nodes)


def test_only_a_contiguous_clone_read_by_ops_goes():
    g = clone_graph((4, 8))
    eliminate_noop_clones(g)
    g.lint()
    assert clones(g) == 0
    for g in (clone_graph((4, 8), stride=(1, 4)), clone_graph((4, 8), to_output=True)):
        eliminate_noop_clones(g)
        assert clones(g) == 1
    g = clone_graph((4, 8))  # the source is written in place after the clone read it
    x = next(iter(g.nodes))
    with g.inserting_before(g.output_node()):
        g.call_function(aten.copy_.default, (x, x))
    eliminate_noop_clones(g)
    assert clones(g) == 1


def test_the_lm_heads_dgrad_takes_the_layernorm_backward():
    report = explain_case("step/lm_head")
    (bwd,) = [r for r in report.regions if r.side == "backward"]
    assert bwd.anchor == "aten.mm" and bwd.fused.count("aten.sum") >= 2, bwd.fused


def test_views_sink_below_reductions_over_leading_last_or_all_dims():
    """sum/amax of a [B, S, N] view of an [M, N] value over (B, S), N or all of them become the
    [M, N] value's reduction over M, N or both (viewed back), any other split stays."""
    from evt.graph.capture import capture_joint
    from evt.graph.sink_views import sink_views

    def f(x, w):
        y = torch.mm(x, w).view(2, 8, 12)
        return y.sum([0, 1]), y.amax(-1, keepdim=True), y.sum([0, 1, 2]), y.sum([1])

    graph = capture_joint(f, torch.randn(16, 4), torch.randn(4, 12))
    sink_views(graph)
    graph.lint()
    reduced = {}
    for n in graph.nodes:
        if n.target in (aten.sum.dim_IntList, aten.amax.default):
            reduced.setdefault(n.target, []).append(
                (n.args[0].target, tuple(n.args[0].meta["val"].shape), list(n.args[1])))
    sums, maxes = reduced[aten.sum.dim_IntList], reduced[aten.amax.default]
    assert (aten.mm.default, (16, 12), [0]) in sums and (aten.mm.default, (16, 12), [0, 1]) in sums
    assert maxes == [(aten.mm.default, (16, 12), [1])]
    assert (aten.view.default, (2, 8, 12), [1]) in sums  # over S alone: not a GEMM mode

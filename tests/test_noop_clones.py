"""No-op clones leave the joint graph (evt/graph/eliminate_noop_clones.py): LayerNorm's backward
clones the incoming gradient, which kept every dgrad GEMM feeding a LayerNorm from its epilogue;
clones that change the layout or feed the output stay."""

from __future__ import annotations

import warnings

import torch
from torch.fx import Graph

import evt
from evt.bench import plan, steps
from evt.graph.eliminate_noop_clones import eliminate_noop_clones

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


def test_the_lm_heads_dgrad_takes_the_layernorm_backward():
    case = {c.name: c for c in plan.all_cases(small=True)}["step/lm_head"]
    w = steps.build(case, torch.bfloat16, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = evt.explain(w.target, *w.make_inputs(0))
    (bwd,) = [r for r in report.regions if r.side == "backward"]
    assert bwd.anchor == "aten.mm" and bwd.fused.count("aten.sum") >= 2, bwd.fused

"""Common-subexpression elimination (evt/graph/eliminate_common_subexpressions.py): duplicates
merge within a side, random and mutating ops never do, and the MSE loss's region loads its target
once (it loaded it twice, and computed y - target twice)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx import Graph

from evt import ir
from evt.graph.annotate_sides import SIDE, annotate_sides
from evt.graph.capture import capture_joint
from evt.graph.eliminate_common_subexpressions import eliminate_common_subexpressions
from tests.graphs import MSEBlock, assert_mse_trains_like_eager, mse_forward_region

aten = torch.ops.aten


def count(graph: Graph, target) -> int:
    return sum(1 for n in graph.nodes if n.target == target)


def test_the_mse_loss_computes_y_minus_target_once():
    lin = nn.Linear(32, 16)

    def step(x, t):
        return F.mse_loss(lin(x), t)

    graph = capture_joint(step, torch.randn(8, 32, requires_grad=True), torch.randn(8, 16))
    annotate_sides(graph)
    before = count(graph, aten.sub.Tensor)
    eliminate_common_subexpressions(graph)
    graph.lint()
    assert before == 2 and count(graph, aten.sub.Tensor) == 1


def hand_graph(op, twice=True) -> tuple[Graph, list]:
    g = Graph()
    x = g.placeholder("x")
    nodes = [g.call_function(op, (x,)) for _ in range(2 if twice else 1)]
    g.output(tuple(nodes))
    annotate_sides(g)
    return g, nodes


def test_pure_duplicates_merge_random_and_mutating_ops_do_not():
    g, _ = hand_graph(aten.relu.default)
    eliminate_common_subexpressions(g)
    assert count(g, aten.relu.default) == 1
    for op in (aten.rand_like.default, aten.relu_.default):
        g, _ = hand_graph(op)
        eliminate_common_subexpressions(g)
        assert count(g, op) == 2, op


def test_reads_of_a_value_written_in_place_stay_apart():
    g, _ = hand_graph(aten.relu.default)
    x = next(iter(g.nodes))
    with g.inserting_before(g.output_node()):
        g.call_function(aten.copy_.default, (x, x))
    eliminate_common_subexpressions(g)
    assert count(g, aten.relu.default) == 2


def test_forward_and_backward_copies_stay_apart():
    g, (a, b) = hand_graph(aten.relu.default)
    b.meta[SIDE] = "backward"
    eliminate_common_subexpressions(g)
    assert count(g, aten.relu.default) == 2


def test_mse_region_loads_its_target_once_and_trains_like_eager():
    torch.manual_seed(0)
    model = MSEBlock().to(torch.bfloat16)
    x = torch.randn(4, 16, 32, dtype=torch.bfloat16)  # 3-D: views per reader
    t = torch.randn(4, 16, 32)
    loss_region = mse_forward_region(model, x, t)
    nodes = loss_region.spec.nodes
    f32_loads = [n for n in nodes if isinstance(n, ir.AuxLoad) and n.dtype == "f32"]
    subs = [n for n in nodes if getattr(n, "op", None) == "sub"]
    assert len(f32_loads) == 1 and len(subs) == 1, loss_region.spec
    assert_mse_trains_like_eager(model, x, t)


def test_numbers_of_another_type_or_sign_stay_apart():
    for a, b in ((1, 1.0), (0.0, -0.0), (True, 1)):
        g = Graph()
        x = g.placeholder("x")
        nodes = [g.call_function(aten.add.Tensor, (x, v)) for v in (a, b)]
        g.output(tuple(nodes))
        annotate_sides(g)
        eliminate_common_subexpressions(g)
        assert count(g, aten.add.Tensor) == 2, (a, b)

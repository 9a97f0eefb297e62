"""`split_full_means`: a float32 mean over everything becomes sum / numel, so an MSE loss's sum of
squares joins the GEMM's epilogue (a scalar reduction) instead of the region storing the [M, N]
squares for a mean outside; the loss and every gradient still match eager."""

from __future__ import annotations

import torch

from evt import ir
from evt.graph.capture import capture_joint
from evt.graph.split_full_means import split_full_means
from tests.graphs import MSEBlock, assert_mse_trains_like_eager, mse_forward_region

aten = torch.ops.aten


def targets(graph) -> list:
    return [n.target for n in graph.nodes if n.op == "call_function"]


def test_a_float32_mean_over_everything_splits_others_stay():
    graph = capture_joint(lambda x: x.float().pow(2).mean(), torch.randn(8, 16))
    split_full_means(graph)
    graph.lint()
    assert aten.mean.default not in targets(graph)
    assert aten.sum.default in targets(graph) and aten.div.Tensor in targets(graph)
    for fn in (lambda x: x.pow(2).mean(), lambda x: x.float().pow(2).mean(-1)):  # bf16; a row
        graph = capture_joint(fn, torch.randn(8, 16).to(torch.bfloat16))
        before = targets(graph)
        split_full_means(graph)
        assert targets(graph) == before


def test_the_mse_loss_sums_its_squares_in_the_epilogue_and_trains_like_eager():
    torch.manual_seed(0)
    model = MSEBlock().to(torch.bfloat16)
    x = torch.randn(4, 16, 32, dtype=torch.bfloat16)
    t = torch.randn(4, 16, 32)
    nodes = mse_forward_region(model, x, t).spec.nodes
    assert any(isinstance(n, ir.ScalarReduction) and n.op == "sum" for n in nodes), nodes
    assert not any(isinstance(n, ir.AuxStore) for n in nodes), nodes  # no [M, N] squares stored
    assert_mse_trains_like_eager(model, x, t)

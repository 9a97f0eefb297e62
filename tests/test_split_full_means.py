"""`split_full_means`: a float32 mean over everything becomes sum / numel, so an MSE loss's sum of
squares joins the GEMM's epilogue (a scalar reduction) instead of the region storing the [M, N]
squares for a mean outside; the loss and every gradient still match eager."""

from __future__ import annotations

import copy
import warnings

import torch

import evt
from evt import ir
from evt.graph.capture import capture_joint
from evt.graph.split_full_means import split_full_means
from tests.graphs import MSEBlock

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
    ref = copy.deepcopy(model)
    x = torch.randn(4, 16, 32, dtype=torch.bfloat16)
    t = torch.randn(4, 16, 32)
    x1, x2 = (x.clone().requires_grad_() for _ in range(2))

    def step(m, x):
        loss = m(x, t)
        loss.backward()
        return loss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = evt.explain(lambda x: step(model, x), x1)
    (loss_region,) = [r for r in report.regions if r.side == "forward"]
    nodes = loss_region.spec.nodes
    assert any(isinstance(n, ir.ScalarReduction) and n.op == "sum" for n in nodes), nodes
    assert not any(isinstance(n, ir.AuxStore) for n in nodes), nodes  # no [M, N] squares stored
    model.zero_grad()
    x1.grad = None
    compiled = torch.compile(model, backend=evt.backend.evt_backend, options={"rest": "eager"})
    got = step(compiled, x1)
    want = step(ref, x2)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=0)
    torch.testing.assert_close(x1.grad.float(), x2.grad.float(), rtol=2e-2, atol=2e-3)
    torch.testing.assert_close(model.fc.weight.grad.float(), ref.fc.weight.grad.float(),
                               rtol=2e-2, atol=2e-3)  # fmt: skip

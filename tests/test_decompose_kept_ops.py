"""The ops evt keeps whole (GELU, SiLU, the activation backwards) are decomposed again after the
pipeline where no region took them: Inductor has no lowering for them (torch 2.11 fails its
"both a fallback and a decomp" assertion on a leftover `gelu_backward`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from evt.backend import JointPass, decompositions
from evt.graph.decompose_kept_ops import KEPT, decompose_kept_ops

aten = torch.ops.aten


def activations(x, g, y):
    """Every kept op, none after a GEMM (so no region can take them)."""
    a = aten.gelu_backward(g, x) + aten.gelu_backward(g, x, approximate="tanh")
    b = aten.silu_backward(g, x) + aten.sigmoid_backward(g, torch.sigmoid(y))
    c = aten.tanh_backward(g, torch.tanh(y)) + aten.threshold_backward(g, x, 0.0)
    return F.gelu(x) + F.gelu(y, approximate="tanh") + F.silu(x) + a + b + c


def kept_targets(gm: torch.fx.GraphModule) -> set:
    return {n.target for n in gm.graph.nodes if n.op == "call_function" and n.target in KEPT}


def inputs():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(16, 24, generator=g) for _ in range(3)]


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_every_kept_op_is_decomposed_and_the_values_stay(mode):
    gm = make_fx(activations, decompositions(), tracing_mode=mode)(*inputs())
    assert kept_targets(gm) == KEPT  # traced with evt's table: all seven are whole
    want = activations(*inputs())
    decompose_kept_ops(gm.graph)
    gm.graph.lint()
    gm.recompile()
    assert kept_targets(gm) == set()
    for n in gm.graph.nodes:
        assert n.op != "call_function" or "val" in n.meta, n  # Inductor reads the fake values of the inlined nodes
    torch.testing.assert_close(gm(*inputs()), want, rtol=1e-5, atol=1e-5)


def test_the_inductor_route_pass_leaves_no_kept_op():
    gm = make_fx(activations, decompositions(), tracing_mode="fake")(*inputs())
    JointPass()(gm.graph)
    assert kept_targets(gm) == set()


def test_a_leftover_gelu_backward_compiles_on_the_default_route():
    """GELU on an input (no GEMM before it): forward and backward through Inductor."""
    f = torch.compile(lambda x: F.gelu(x).square().sum(), backend="evt")
    x = torch.randn(8, 32, requires_grad=True)
    f(x).backward()
    x2 = x.detach().clone().requires_grad_()
    F.gelu(x2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_a_failing_decomposition_warns_and_training_goes_on(monkeypatch):
    import evt.backend

    def broken(graph):
        raise RuntimeError("no decomposition today")

    monkeypatch.setattr(evt.backend, "decompose_kept_ops", broken)
    gm = make_fx(activations, decompositions(), tracing_mode="fake")(*inputs())
    with pytest.warns(UserWarning, match="kept activations left whole.*no decomposition today"):
        JointPass()(gm.graph)

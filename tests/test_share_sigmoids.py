"""One sigmoid for SiLU and its backward of one value (`evt.codegen.tree.share_sigmoids`):
SwiGLU's backward computes sigmoid(gate) once instead of in each functor."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import evt
from evt import ir
from evt.bench import patterns
from tests.node_catalog import Sandwich

BF16 = dict(dtype=torch.bfloat16)


def compute_ops(report) -> list[list[str]]:
    return [[n.op for n in r.spec.nodes if isinstance(n, ir.Compute)] for r in report.regions]


def test_swiglu_backward_shares_one_sigmoid():
    """The down projection's dgrad with SwiGLU's backward: silu_backward(dh * up, gate) and
    dh * silu(gate) from one sigmoid node (the catalog's `swiglu` module trains through it on the
    reference path like eager: tests/test_node_coverage.py)."""
    g = torch.Generator().manual_seed(0)
    dy, w = torch.randn(64, 32, generator=g, **BF16), torch.randn(32, 96, generator=g, **BF16)
    gate, up = (torch.randn(64, 96, generator=g, **BF16) for _ in range(2))
    report = evt.explain(patterns.dgrad_swiglu, dy, w, gate, up)
    assert compute_ops(report) == [["mul", "sigmoid", "silu_backward_sigmoid", "mul", "mul"]]


def test_a_lone_silu_backward_keeps_its_own_functor():
    """SiLU's forward and backward are in different regions (forward and backward apart): each
    keeps its functor, as many instructions as a shared sigmoid would take."""
    model = Sandwich(F.silu, 32, 64)
    x = torch.randn(16, 32, requires_grad=True)

    def step(x):
        model(x).pow(2).sum().backward()

    ops = compute_ops(evt.explain(step, x))
    assert any("silu" in o for o in ops) and any("silu_backward" in o for o in ops)
    assert not any("sigmoid" in o or "silu_backward_sigmoid" in o for o in ops)

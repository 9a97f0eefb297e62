"""The elementwise ops beyond GELU, end to end on the CPU: capture -> fuse -> reference path, against
eager, and what each fuses into (the forward op into fc1's GEMM, its backward into fc2's dgrad
GEMM together with fc1's bias gradient)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import evt
from evt.ir import COMPUTE_OPS
from evt.runtime import reference
from tests.graphs import train_compare

ACTS = {
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "relu": F.relu,
    "exp": lambda y: torch.exp(y * 0.1),
    "log": lambda y: torch.log(y * y + 1.0),
    "rsqrt": lambda y: torch.rsqrt(y * y + 1.0),
    "maximum": lambda y: torch.maximum(y, y * 0.5),
    "minimum": lambda y: torch.minimum(y, 0.5 - y),
    "where": lambda y: torch.where(y > 0, y, y * 0.1),  # leaky ReLU: a mask saved for backward
    "compare": lambda y: (
        torch.where(y >= 0.1, y, 0.0) + torch.where(y < -0.1, y * 2, 0.0)
        + (y != 0.3).to(y.dtype) * (y == y).to(y.dtype) + torch.where(y <= 0, 1.0, y)
    ),
}  # fmt: skip

# act -> (ops that must fuse into fc1's forward GEMM, into fc2's dgrad GEMM)
FUSED = {
    "silu": ({"aten.silu"}, {"aten.silu_backward", "aten.sum"}),
    "sigmoid": ({"aten.sigmoid"}, {"aten.sigmoid_backward", "aten.sum"}),
    "tanh": ({"aten.tanh"}, {"aten.tanh_backward", "aten.sum"}),
    "relu": ({"aten.relu"}, {"aten.threshold_backward", "aten.sum"}),
    "exp": ({"aten.exp"}, {"aten.mul", "aten.sum"}),
    "log": ({"aten.log"}, {"aten.div", "aten.sum"}),
    "rsqrt": ({"aten.rsqrt"}, {"aten.mul", "aten.sum"}),
    "maximum": ({"aten.maximum", "aten.eq", "aten.gt"}, {"aten.where"}),
    "minimum": ({"aten.minimum", "aten.eq", "aten.lt"}, {"aten.where"}),
    "where": ({"aten.gt", "aten.where"}, {"aten.where", "aten.sum"}),
    "compare": ({"aten.ge", "aten.lt", "aten.le", "aten.eq", "aten.ne", "aten.where"},
                {"aten.where", "aten.sum"}),
}  # fmt: skip


class Act2(nn.Module):
    """fc1 -> act -> fc2: act's backward meets fc2's dgrad GEMM."""

    def __init__(self, act: str, k: int = 32, hidden: int = 64, n: int = 48):
        super().__init__()
        self.fc1, self.fc2, self.act = nn.Linear(k, hidden), nn.Linear(hidden, n), act

    def forward(self, x):
        return self.fc2(ACTS[self.act](self.fc1(x)))


def regions(model: nn.Module, x: torch.Tensor):
    probe = torch.randn(x.shape[0], 48)
    report = evt.explain(lambda x: (model(x) * probe).sum().backward(), x.requires_grad_())
    assert not report.fallbacks
    return report


@pytest.mark.parametrize("act", sorted(ACTS))
def test_op_trains_like_eager_and_fuses(act):
    torch.manual_seed(0)
    errs = train_compare(Act2(act), [torch.randn(40, 32)], torch.float32)
    assert max(errs.values()) < 1e-4, errs
    report = regions(Act2(act), torch.randn(40, 32))
    fwd, bwd = FUSED[act]
    fc1 = report.regions[0]
    assert fc1.side == "forward" and fc1.anchor == "aten.addmm"
    assert fwd <= set(fc1.fused), fc1.fused
    dgrad = next(r for r in report.regions if r.side == "backward" and r.anchor == "aten.mm")
    assert bwd <= set(dgrad.fused), dgrad.fused


@pytest.mark.parametrize("act", ["silu", "relu", "where"])
def test_op_trains_like_eager_in_bf16(act):
    torch.manual_seed(1)
    errs = train_compare(Act2(act), [torch.randn(64, 32)], torch.bfloat16)
    assert max(errs.values()) < 2e-2, errs


def test_masks_travel_as_bool_tensors():
    """The leaky ReLU's mask (x > 0) is stored by the forward kernel as bytes and loaded by the
    backward one."""
    report = regions(Act2("where"), torch.randn(40, 32))
    fwd = report.regions[0].spec
    bwd = next(r.spec for r in report.regions if r.side == "backward" and "aten.sum" in r.fused)
    assert any(n.kind == "aux_store" and n.dtype == "b8" for n in fwd.nodes)
    assert any(n.kind == "aux_load" and n.dtype == "b8" for n in bwd.nodes)


@pytest.mark.parametrize("act", ["silu", "sigmoid", "tanh", "relu", "maximum"])
def test_inductor_route_keeps_or_compiles_the_ops(act):
    """Kept whole by evt's decomposition table: Inductor compiles them where nothing fuses."""
    torch.manual_seed(2)
    errs = train_compare(Act2(act), [torch.randn(16, 32)], torch.float32, rest="inductor")
    assert max(errs.values()) < 1e-4, errs


@pytest.mark.parametrize("op", sorted(set(COMPUTE_OPS) - {"identity"}))
def test_every_op_has_a_reference_of_its_arity(op):
    args = [torch.rand(4, 4) + 0.5 for _ in range(COMPUTE_OPS[op].arity)]
    out = reference.COMPUTE_REFERENCE[COMPUTE_OPS[op].reference](*args)
    assert out.shape == (4, 4) and out.dtype == torch.float32


def test_comparisons_round_their_operands_like_torch():
    """bf16 `y > 0.1` compares against bf16(0.1) = 0.10009765625: an element equal to that is
    not greater, although it is greater than the fp32 0.1."""
    k = 16
    fc = nn.Linear(k, k, bias=False).bfloat16()
    with torch.no_grad():
        fc.weight.copy_(torch.eye(k))
    model = nn.Sequential(fc, Select())
    x = torch.full((32, k), 0.10009765625, dtype=torch.bfloat16)
    x[::2] = 0.5
    with torch.no_grad():
        report = evt.explain(model, x)
        assert "aten.gt" in report.regions[0].fused
        got = torch.compile(model, backend="evt", options={"rest": "eager"})(x)
    assert torch.equal(got, model(x)) and (got == 0).sum() == 16 * k


class Select(nn.Module):
    def forward(self, y):
        return torch.where(y > 0.1, y, 0.0)

"""Bias gradients as row reductions: `sum(grad, [0])` fused into the GEMM that produces `grad`
(the dgrad GEMM with GELU' for the MLP's fc1), the reference's semantics, the partitioner's rules
for terminal reductions, and the runtime's per-output shapes and strides."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import evt
from evt import ir
from evt.errors import PartitionError
from evt.examples import MLP
from evt.partition import Region, greedy, validate
from evt.partition.candidates import find_candidates
from evt.runtime import guards, reference
from tests import specs
from tests.graphs import train_compare
from tests.test_partition import mlp_graph, prepared

aten = torch.ops.aten
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def explain_with_probe(model: nn.Module, x: torch.Tensor):
    probe = torch.randn(*x.shape[:-1], model.fc2.out_features)
    return evt.explain(lambda x: (model(x) * probe).sum().backward(), x.requires_grad_())


def test_fc1_bias_gradient_lands_in_the_dgrad_gemm():
    report = explain_with_probe(MLP(64, 256), torch.randn(128, 64))
    dgrad = next(r for r in report.regions if "aten.gelu_backward" in r.fused)
    assert dgrad.fused == ["aten.gelu_backward", "aten.sum"] and dgrad.anchor == "aten.mm"
    (red,) = [n for n in dgrad.spec.nodes if isinstance(n, ir.RowReduction)]
    assert red.keepdim and red.output == 1 and red.arg.startswith("gelu_backward")
    assert dgrad.spec.output_shapes(128, 256, 1) == [(128, 256), (1, 256)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mlp_bias_gradients_match_eager(dtype):
    torch.manual_seed(0)
    errs = train_compare(MLP(64, 256), [torch.randn(128, 64)], dtype)
    assert errs["grad_fc1.bias"] < TOL[dtype] and max(errs.values()) < TOL[dtype], errs


class Stack3d(nn.Module):
    def __init__(self, d=32, h=64):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.silu(self.fc1(x)))


def test_bias_gradient_of_a_3d_linear_is_fused():
    """[B, S, D] activations: the sum reads view(view(grad)), which fold_views reduces to grad."""
    torch.manual_seed(1)
    report = explain_with_probe(Stack3d(), torch.randn(2, 8, 32))
    assert any(r.fused == ["aten.silu_backward", "aten.sum"] for r in report.regions)
    errs = train_compare(Stack3d(), [torch.randn(2, 8, 32)], torch.float32)
    assert max(errs.values()) < TOL[torch.float32], errs


def test_reference_sums_in_fp32_and_rounds_once():
    spec = specs.mlp_dgrad_gelu_bias()
    g = torch.Generator().manual_seed(0)
    a, b, z = (torch.randn(*s, generator=g).bfloat16() for s in ((300, 64), (64, 48), (300, 48)))
    d, db = reference.run(spec, [a, b, z])
    want = reference._gelu_backward(a.float() @ b.float(), z.float())
    assert db.shape == (1, 48) and db.dtype == torch.bfloat16
    assert torch.equal(db, want.sum(0, keepdim=True).bfloat16())
    assert torch.equal(d, want.bfloat16())


def test_batched_reference_sums_over_l_and_m():
    gemm = dataclasses.replace(specs.LINEAR, batched=True, dtype="f32")
    nodes = (ir.AccFetch("acc"), ir.RowReduction("s", "acc", 1, "f32"))
    spec = ir.KernelSpec("k", gemm, nodes, "acc", "f32", 2)
    x, w = torch.randn(3, 5, 4), torch.randn(3, 6, 4)
    d, s = reference.run(spec, [x, w])
    assert d.shape == (3, 5, 6) and s.shape == (6,)
    assert torch.allclose(s, (x @ w.mT).sum((0, 1)), atol=1e-5)


def test_fake_outputs_and_output_strides_follow_the_outputs():
    spec = specs.mlp_dgrad_gelu_bias()
    inputs = [torch.empty(64, 32, dtype=torch.bfloat16), torch.empty(32, 48, dtype=torch.bfloat16),
              torch.empty(64, 48, dtype=torch.bfloat16)]  # fmt: skip
    fakes = torch.ops.evt.fused_gemm(ir.to_json(spec), inputs)  # CPU: the reference path
    assert [tuple(f.shape) for f in fakes] == [(64, 48), (1, 48)]
    p = guards.check(spec, [guards.TensorInfo.of(t) for t in inputs])
    assert p.output_strides == (48, 1, 0, 0, 1, 0)


def test_candidates_and_greedy_take_the_sum_but_never_grow_through_it():
    g = prepared(mlp_graph())
    sums = {n for n in g.nodes if n.target == aten.sum.dim_IntList}
    dgrad = next(c for c in find_candidates(g) if c.nodes and c.nodes[0].target == aten.gelu_backward.default)
    assert sums & set(dgrad.nodes)
    regions = greedy.partition(g)
    validate(g, regions)
    assert any(sums & set(r.nodes) for r in regions)


def test_validator_rejects_a_reader_of_its_own_reduction():
    g = prepared(mlp_graph())
    r = next(r for r in greedy.partition(g) if any(n.target == aten.sum.dim_IntList for n in r.nodes))
    red = next(n for n in r.nodes if n.target == aten.sum.dim_IntList)
    with g.inserting_after(red):
        reader = g.call_function(aten.add.Tensor, (r.nodes[1], red))
    reader.meta.update(val=r.nodes[1].meta["val"], evt_side=r.side)
    bad = Region(r.anchor, (*r.nodes, reader), r.side)
    with pytest.raises(PartitionError, match="reads a reduction"):
        validate(g, [bad])

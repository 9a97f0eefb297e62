"""`read_heads_in_place`: attention's batched GEMMs read q, k and v from their projections (a
nested batch, two batch strides) instead of the copies Inductor's decomposition makes before each
`bmm`, where a kernel can read them; the copies stay where it cannot (CPU)."""

from __future__ import annotations

import pytest
import torch
from torch.fx import Graph

from evt import ir, pipeline
from evt.graph.capture import capture_joint
from evt.graph.fold_gemm_operands import GEMM
from evt.graph.lower_regions import FUSED_GEMM
from tests.graphs import Attention, train_compare

aten = torch.ops.aten
B, S = 2, 16


def causal(s=S):
    return torch.triu(torch.full((s, s), float("-inf")), 1)


def attention_graph(d=32, heads=2, dtype=torch.float32, qkv=True) -> Graph:
    torch.manual_seed(0)
    model = Attention(d, heads, softmax=True, qkv=qkv).to(dtype)
    x = torch.randn(B, S, d, dtype=dtype, requires_grad=True)
    return capture_joint(lambda x, m: model(x, m).float().square().sum().backward(), x,
                         causal().to(dtype))  # fmt: skip


def bmm_operands(graph: Graph) -> list:
    """Each bmm's `evt_gemm` after the graph passes (no partition)."""
    pipeline.run_passes(graph, pipeline.GRAPH_PASSES, check=True)
    return [n.meta[GEMM] for n in graph.nodes if n.target == aten.bmm.default]


def fused_without_the_pass(monkeypatch, graph: Graph):
    passes = [p for p in pipeline.GRAPH_PASSES if p[0] != "read_heads_in_place"]
    monkeypatch.setattr(pipeline, "GRAPH_PASSES", passes)
    return pipeline.fuse(graph, check=True)


def path_to_projection(node) -> list:
    """The ops from a GEMM input back to the GEMM (mm/addmm, or a region's output) it views."""
    out = []
    while node.op == "call_function" and node.target not in (aten.mm.default, aten.addmm.default):
        out.append(node.target)
        if node.target is FUSED_GEMM or node.target.__name__ == "getitem":
            break
        node = node.args[0]
    return out


@pytest.mark.parametrize("qkv", [True, False], ids=["one-qkv-projection", "three-projections"])
def test_every_attention_bmm_reads_the_projection_in_place(qkv):
    gemms = bmm_operands(attention_graph(qkv=qkv))
    assert len(gemms) == 6  # Q·Kᵀ and P·V forward, four in the backward
    assert all(g.nested for g in gemms)
    read = [n for g in gemms for n in (g.a, g.b) if n.meta["val"].dim() == 4]
    # q, k and v twice each, the output's gradient dY twice (dV = Pᵀ·dY, dP = dY·Vᵀ); P and
    # the scores' gradient are [B*H, S, S] values of their own
    assert len(read) == 8
    assert all(aten.clone.default not in path_to_projection(n) for n in read)


def test_fused_regions_read_the_projections(monkeypatch):
    fused = attention_graph()
    report = pipeline.fuse(fused, check=True)
    before = fused_without_the_pass(monkeypatch, attention_graph())
    assert [r.name for r in report.regions] == [r.name for r in before.regions]
    assert not any(r.spec.gemm.nested for r in before.regions)
    nested = [r for r in report.regions if r.spec.gemm.nested]
    assert {r.anchor for r in nested} == {"aten.bmm"} and len(nested) == 2  # scores, dP
    calls = [n for n in fused.nodes if n.target is FUSED_GEMM and n.meta["evt_spec"].gemm.nested]
    for call in calls:
        spec: ir.KernelSpec = call.meta["evt_spec"]
        inputs = call.args[1]
        four = [inputs[op.input] for op in (spec.gemm.a, spec.gemm.b)
                if inputs[op.input].meta["val"].dim() == 4]  # fmt: skip
        assert four and all(aten.clone.default not in path_to_projection(n) for n in four)


def test_heads_tma_cannot_read_keep_their_copy():
    # 12 bf16 per head: the head stride is 24 bytes, no 16-byte multiple; in fp32 it is 48
    assert not any(g.nested for g in bmm_operands(attention_graph(48, 4, torch.bfloat16)))
    assert all(g.nested for g in bmm_operands(attention_graph(48, 4, torch.float32)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("qkv", [True, False], ids=["one-qkv-projection", "three-projections"])
def test_attention_read_in_place_trains_like_eager(dtype, qkv):
    torch.manual_seed(3)
    model = Attention(32, 2, softmax=True, qkv=qkv)
    errs = train_compare(model, [torch.randn(B, S, 32), causal()], dtype)
    assert max(errs.values()) < {torch.float32: 1e-4, torch.bfloat16: 2e-2}[dtype], errs

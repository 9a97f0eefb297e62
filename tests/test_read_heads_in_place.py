"""`read_heads_in_place`: attention's batched GEMMs read q, k and v from their projections (a
nested batch, two batch strides) instead of the copies Inductor's decomposition makes before each
`bmm`, where a kernel can read them; the copies stay where it cannot. `free_head_copies`: the
GEMMs without an epilogue get a region of their own where that leaves a copy unread (CPU)."""

from __future__ import annotations

import pytest
import torch
from torch.fx import Graph

import evt
from evt import ir, pipeline
from evt.backend import evt_backend
from evt.graph.capture import capture_joint
from evt.graph.fold_gemm_operands import GEMM
from evt.graph.lower_regions import FUSED_GEMM
from evt.graph.read_heads_in_place import readable
from evt.partition.free_head_copies import PASS_THROUGH, copies_skipped, free_head_copies
from evt.report import format_table
from tests.graphs import Attention, symbolic_value, train_compare

aten = torch.ops.aten
B, S = 2, 16
# attention with an additive mask, kept on evt's kernels (else one SDPA call)
pytestmark = pytest.mark.usefixtures("attention_as_written")


@pytest.fixture(autouse=True)
def nested_batches_on(monkeypatch):
    """The pass is on by default; tests say so whatever the environment (`EVT_NESTED_BATCH`)."""
    monkeypatch.delenv("EVT_NESTED_BATCH", raising=False)


def test_the_pass_is_off_with_evt_nested_batch_0(monkeypatch):
    assert any(g.nested for g in bmm_operands(attention_graph()))
    monkeypatch.setenv("EVT_NESTED_BATCH", "0")
    assert not any(g.nested for g in bmm_operands(attention_graph()))


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


def gemm_copies(graph: Graph) -> list:
    """The clones a GEMM (a bmm, or a region's call) reads through views."""
    gemms = (aten.bmm.default, FUSED_GEMM)
    out = []
    for c in (n for n in graph.nodes if n.target == aten.clone.default):
        todo, seen = list(c.users), set()
        while todo:
            u = todo.pop()
            if u.target in gemms:
                out.append(c)
                break
            if u not in seen and u.target in PASS_THROUGH:
                seen.add(u)
                todo.extend(u.users)
    return out


def test_fused_regions_read_the_projections(monkeypatch):
    fused = attention_graph()
    report = pipeline.fuse(fused, check=True)
    copied = attention_graph()
    before = fused_without_the_pass(monkeypatch, copied)
    assert not any(r.spec.gemm.nested for r in before.regions)
    assert len(gemm_copies(copied)) == 4  # q, k, v (read twice each) and dY (twice)
    assert gemm_copies(fused) == []  # every attention GEMM reads its heads in place
    nested = [r for r in report.regions if r.spec.gemm.nested]
    assert {r.anchor for r in nested} == {"aten.bmm"} and len(nested) == 6
    # the scores' mask add (dP * P goes back to Inductor: evt/partition/trim_for_inductor.py)
    assert [r.fused for r in nested if r.fused] == [["aten.add"]]
    # the bmms without an epilogue joined only to free the copies: their regions are new
    assert len(report.regions) == len(before.regions) + 5
    assert format_table(report.regions, 0).count("reads its heads in place, freeing") == 5
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


def test_a_copy_still_read_elsewhere_keeps_its_gemm_with_cublas():
    def step(x, w):
        k = (x @ w).view(B, S, 2, 16).transpose(1, 2)
        return k @ k.transpose(-1, -2)

    graph = capture_joint(step, torch.randn(B, S, 32), torch.randn(32, 32))
    pipeline.run_passes(graph, pipeline.GRAPH_PASSES, check=True)
    (bmm,) = [n for n in graph.nodes if n.target == aten.bmm.default]
    copies = copies_skipped(bmm)
    assert len(copies) == 2 and bmm.meta[GEMM].nested  # k and kᵀ, both read in place
    assert [r.anchor for r in free_head_copies(graph, [])] == [bmm]
    for c in copies:  # each copy gets another reader: freeing none, the bmm stays with cuBLAS
        with graph.inserting_after(c):
            graph.call_function(aten.neg.default, (c,))
    assert free_head_copies(graph, []) == []


def softmax_of_scores(x, w):
    """softmax(Q·Kᵀ) with q and k cut from one projection: its statistics (the row max and sum of
    exp) join the scores' GEMM."""
    qk = (x @ w).view(B, S, 2, 2, 16)
    q = qk[:, :, 0].transpose(1, 2).reshape(B * 2, S, 16)
    k = qk[:, :, 1].transpose(1, 2).reshape(B * 2, S, 16)
    return torch.softmax(torch.bmm(q, k.transpose(1, 2)), -1)


def test_a_region_with_statistics_reads_in_place():
    x, w = torch.randn(B, S, 32), torch.randn(32, 64)
    graph = capture_joint(softmax_of_scores, x, w)
    pipeline.run_passes(graph, pipeline.GRAPH_PASSES, check=True)
    (bmm,) = [n for n in graph.nodes if n.target == aten.bmm.default]
    assert bmm.meta[GEMM].nested
    report = evt.explain(softmax_of_scores, x, w)
    (scores,) = [r for r in report.regions if r.anchor == "aten.bmm"]
    assert scores.fused == ["aten.amax", "evt.softmax_sum"] and scores.spec.gemm.nested
    compiled = torch.compile(softmax_of_scores, backend=evt_backend, options={"rest": "eager"})
    torch.testing.assert_close(compiled(x, w), softmax_of_scores(x, w), rtol=1e-5, atol=1e-6)


def sum_of_scores(x, w):
    """Q·Kᵀ summed over everything (q and k cut from one projection): a scalar reduction."""
    qk = (x @ w).view(B, S, 2, 2, 16)
    q = qk[:, :, 0].transpose(1, 2).reshape(B * 2, S, 16)
    k = qk[:, :, 1].transpose(1, 2).reshape(B * 2, S, 16)
    return torch.bmm(q, k.transpose(1, 2)).sum()


def test_a_region_with_a_scalar_reduction_reads_in_place():
    x, w = torch.randn(B, S, 32), torch.randn(32, 64)
    report = evt.explain(sum_of_scores, x, w)
    (scores,) = [r for r in report.regions if r.anchor == "aten.bmm"]
    assert scores.fused == ["aten.sum"] and scores.spec.gemm.nested
    compiled = torch.compile(sum_of_scores, backend=evt_backend, options={"rest": "eager"})
    torch.testing.assert_close(compiled(x, w), sum_of_scores(x, w), rtol=1e-4, atol=1e-3)


def test_free_head_copies_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("EVT_FREE_HEAD_COPIES", "0")
    graph = attention_graph()
    report = pipeline.fuse(graph, check=True)
    assert all(r.fused for r in report.regions)  # no GEMM-only regions
    assert len(gemm_copies(graph)) == 4  # q, k, v and dY: their unfused bmms still read them


def test_symbolic_strides_are_read_in_place_where_every_size_allows_them():
    bf16 = torch.bfloat16
    # heads cut from an [s, S, H * D] projection: batch stride S * 64 elements, 128 bytes a row
    cut = symbolic_value(lambda s: torch.empty(s, S, 4 * 16, dtype=bf16).view(s, S, 4, 16)
                         .transpose(1, 2))  # fmt: skip
    assert readable(cut)
    # rows of 16 + s elements: a whole 16 bytes only where s is a multiple of 8
    padded = symbolic_value(lambda s: torch.empty(2, 4, S, 16 + s, dtype=bf16)[..., :16])
    assert not readable(padded)
    # rows of 16 * s elements: 32 bytes a step of s, every s
    wide = symbolic_value(lambda s: torch.empty(2, 4, S, 16 * s, dtype=bf16)[..., :16])
    assert readable(wide)
    # a start s elements in: aligned only where s is
    shifted = symbolic_value(lambda s: torch.empty(s + 2 * 4 * S * 16, dtype=bf16)[s:]
                             .as_strided((2, 4, S, 16), (4 * S * 16, S * 16, 16, 1)))  # fmt: skip
    assert not readable(shifted)


@pytest.mark.parametrize("qkv", [True, False], ids=["one-qkv-projection", "three-projections"])
def test_attention_under_dynamic_shapes_reads_its_heads_in_place(qkv):
    """`dynamic=True` (a symbolic batch and sequence): the batched GEMMs read the projections in
    place as under static shapes, and training matches eager."""
    from tests.graphs import compile_reports

    torch.manual_seed(3)
    model = Attention(32, 2, softmax=True, qkv=qkv)
    x, mask = torch.randn(B, S, 32, requires_grad=True), causal()
    probe = torch.randn(B, S, 32)
    (model(x, mask) * probe).sum().backward()
    want = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    with compile_reports() as reports:
        compiled = torch.compile(model, backend=evt_backend, options={"rest": "eager"}, dynamic=True)
        (compiled(x, mask) * probe).sum().backward()
    nested = [r for g in reports for r in g.regions if r.spec.gemm.nested]
    assert len(nested) == 6, [r.name for g in reports for r in g.regions]
    got = [x.grad] + [p.grad for p in model.parameters()]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)

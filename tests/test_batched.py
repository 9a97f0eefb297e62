"""Batched GEMMs (attention's Q·Kᵀ and P·V): pipeline vs eager, what fuses, and the batched
kernel spec through the reference, the guards and codegen (CPU)."""

import pytest
import torch

import evt
from evt import ir
from evt.codegen.emit import render
from evt.errors import LaunchError
from evt.runtime import guards, reference
from tests import specs
from tests.graphs import Attention, train_compare

TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2}
B, S, D = 2, 16, 32

# evt's batched kernels for attention written out with an additive mask
pytestmark = pytest.mark.usefixtures("attention_as_written")


def causal(s=S):
    return torch.triu(torch.full((s, s), float("-inf")), 1)


def step(model):
    probe = torch.randn(B, S, D) if model.softmax else torch.randn(B, 2, S, S)
    return lambda x, mask: (model(x, mask) * probe).sum().backward()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scores_with_a_full_mask_match_eager(dtype):
    torch.manual_seed(0)
    mask = torch.randn(B, 2, S, S)  # one per batch and head: an [L, M, N] aux load
    errs = train_compare(Attention(D), [torch.randn(B, S, D), mask], dtype)
    assert max(errs.values()) < TOL[dtype], errs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_attention_matches_eager(dtype):
    torch.manual_seed(1)
    errs = train_compare(Attention(D, softmax=True), [torch.randn(B, S, D), causal()], dtype)
    assert max(errs.values()) < TOL[dtype], errs


def test_heads_cut_from_one_qkv_projection_match_eager():
    torch.manual_seed(2)
    model = Attention(D, softmax=True, qkv=True)
    errs = train_compare(model, [torch.randn(B, S, D), causal()], torch.float32)
    assert max(errs.values()) < TOL[torch.float32], errs
    report = evt.explain(step(model), torch.randn(B, S, D, requires_grad=True), causal())
    assert ("forward", "aten.bmm", ["aten.add"]) in [
        (r.side, r.anchor, r.fused) for r in report.regions
    ]


@pytest.mark.parametrize("nested", [False, True], ids=["copies", "in-place"])
def test_scores_fuse_the_scale_and_the_mask(monkeypatch, nested):
    monkeypatch.setenv("EVT_NESTED_BATCH", "1" if nested else "0")
    model = Attention(D, softmax=True)
    report = evt.explain(step(model), torch.randn(B, S, D, requires_grad=True), causal())
    bmm = [r for r in report.regions if r.anchor == "aten.bmm" and r.fused]
    alone = [r.side for r in report.regions if r.anchor == "aten.bmm" and not r.fused]
    # in place: P·V, dV, dP, dQ, dK alone (they free the head copies); else they stay with cuBLAS
    assert sorted(alone) == (["backward"] * 4 + ["forward"] if nested else [])
    # forward: Q·Kᵀ * scale + mask; softmax's backward dP * P is Inductor's (trim_for_inductor:
    # its kernel reads P anyway)
    assert [(r.side, r.fused) for r in bmm] == [("forward", ["aten.mul", "aten.add"])]
    scores = bmm[0].spec
    assert scores.gemm.batched and scores.gemm.nested == nested  # q, k in place: a B x H batch
    (mask,) = [n for n in scores.nodes if isinstance(n, ir.AuxLoad)]
    assert mask.broadcast_l  # the [S, S] causal mask: one tensor every batch reads


def inputs(L=3, M=64, N=32, K=16, dtype=torch.bfloat16):
    torch.manual_seed(3)
    q, k = torch.randn(L, M, K, dtype=dtype), torch.randn(L, N, K, dtype=dtype)
    return [q, k, torch.randn(M, N, dtype=dtype), torch.randn(L, M, N, dtype=dtype),
            torch.randn(N, dtype=dtype)]  # fmt: skip


def test_reference_reads_the_broadcast_mask_for_every_batch():
    spec = specs.attention_scores()
    q, k, mask, bias, pos = inputs()
    (d,) = reference.run(spec, [q, k, mask, bias, pos])
    want = (q.float() @ k.float().mT) * 0.125 + mask.float() + bias.float() + pos.float()
    assert d.shape == (3, 64, 32) and d.dtype == torch.bfloat16
    torch.testing.assert_close(d, want.to(torch.bfloat16), rtol=1e-2, atol=1e-2)
    assert ir.from_json(ir.to_json(spec)) == spec


def test_guards_pass_a_zero_batch_stride_only_where_the_kernel_has_one():
    spec = specs.attention_scores()
    infos = [guards.TensorInfo.of(t) for t in inputs()]
    p = guards.check(spec, infos)
    assert (p.M, p.N, p.K, p.L) == (64, 32, 16, 3)
    assert p.input_strides[6:9] == (32, 1, 0)  # the mask: L stride 0
    assert p.input_strides[9:12] == (32, 1, 64 * 32)  # the full bias
    expanded = inputs()[2].expand(3, 64, 32)  # a stride-0 L where a real one was built
    with pytest.raises(LaunchError, match="aux load bias"):
        guards.check(spec, infos[:3] + [guards.TensorInfo.of(expanded)] + infos[4:])


def test_guards_pass_an_expanded_operand_batch():
    """An operand expanded over L (one K for every batch) goes to the kernel with L stride 0: its
    TMA descriptor reads the same rows for every batch (session 51)."""
    spec = specs.attention_scores()
    ts = inputs()
    ts[1] = ts[1][:1].expand(3, 32, 16)  # one K for every batch: L stride 0
    p = guards.check(spec, [guards.TensorInfo.of(t) for t in ts])
    assert p.input_strides[3:6] == (16, 1, 0)


def test_codegen_reads_the_mask_with_a_static_zero_batch_stride():
    source = render(specs.attention_scores())
    assert "cute::Stride<int64_t, cute::_1, cute::_0>, cutlass::bfloat16_t>" in source  # mask
    assert "cute::Stride<int64_t, cute::_1, int64_t>, cutlass::bfloat16_t>" in source  # bias
    assert "GemmUniversalMode::kBatched" in source
    assert "the same for every batch" in source

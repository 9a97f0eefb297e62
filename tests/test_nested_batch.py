"""A nested batch (L = L1 x L2, two batch strides per tensor): attention's heads read in place
from [B, S, H, D] projections, through the reference path, the guards, the launcher's ABI and
codegen (CPU; `tests/test_nvcc.py` compiles `nested_attention_scores`, `tests/test_gpu_nested_batch.py`
runs it)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from evt import ir
from evt.codegen.config import default_config
from evt.codegen.emit import render, signature
from evt.errors import CodegenError, LaunchError
from evt.runtime import guards, launch, reference
from tests import specs

B, S, H, D = 2, 32, 3, 16
BF16 = torch.bfloat16


def heads(seed=0, d=D, dtype=BF16):
    """q and k as [B, H, S, D] views of one [B, S, 3, H, D] qkv projection (no copy)."""
    torch.manual_seed(seed)
    qkv = torch.randn(B, S, 3, H, d, dtype=dtype)
    return qkv[:, :, 0].permute(0, 2, 1, 3), qkv[:, :, 1].permute(0, 2, 1, 3)


def scores_inputs(seed=0, flat_bias=False):
    q, k = heads(seed)
    mask = torch.triu(torch.full((S, S), -4.0), 1).to(BF16)
    bias = torch.randn(B * H, S, S) if flat_bias else torch.randn(B, H, S, S)
    return [q, k, mask, bias.to(BF16), torch.randn(S).to(BF16)]


def eager_scores(q, k, mask, bias, pos):
    scaled = (q.float() @ k.float().mT) * 0.125
    d = scaled + mask.float() + bias.float().reshape(B, H, S, S) + pos.float()
    return d.reshape(B * H, S, S), scaled.reshape(B * H, S, S)


def infos(tensors):
    return [guards.TensorInfo.of(t) for t in tensors]


@pytest.mark.parametrize("flat_bias", [False, True], ids=["bias-4d", "bias-3d"])
def test_reference_reads_the_heads_in_place(flat_bias):
    inputs = scores_inputs(flat_bias=flat_bias)
    assert not inputs[0].is_contiguous()  # a view of the projection, as the kernel reads it
    d, scaled = reference.run(specs.nested_attention_scores(), inputs)
    want_d, want_scaled = eager_scores(*inputs)
    assert d.shape == scaled.shape == (B * H, S, S) and d.dtype == BF16
    torch.testing.assert_close(d, want_d.to(BF16), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(scaled, want_scaled.to(BF16), rtol=1e-2, atol=1e-2)


def test_reference_takes_the_nested_batch_from_b():
    _, v = heads(1)  # [B, H, S, D] view: B of P·V, n-major
    p = torch.randn(B * H, S, S).to(BF16)
    (out,) = reference.run(specs.nested_attention_values(), [p, v])
    want = (p.float().reshape(B, H, S, S) @ v.float()).reshape(B * H, S, D)
    assert out.shape == (B * H, S, D)
    torch.testing.assert_close(out, want.to(BF16), rtol=1e-2, atol=1e-2)


def test_reference_reads_a_transposed_flat_a_and_heads_as_b():
    q, _ = heads(2)
    ds = torch.randn(B * H, S, S).to(BF16)  # dK = dSᵀ·Q
    spec = specs.nested_attention_key_grad()
    (dk,) = reference.run(spec, [ds, q])
    want = (ds.float().mT.reshape(B, H, S, S) @ q.float()).reshape(B * H, S, D)
    torch.testing.assert_close(dk, want.to(BF16), rtol=1e-2, atol=1e-2)
    p = guards.check(spec, infos([ds, q]))
    assert p.input_strides[:4] == (1, S, H * S * S, S * S)  # dSᵀ: m-major, (M, K, L1, L2)
    assert p.input_strides[4:8] == (1, 3 * H * D, S * 3 * H * D, D)  # q as N x K: n-major


def test_json_keeps_flat_specs_as_they_were():
    nested = specs.nested_attention_scores()
    assert ir.from_json(ir.to_json(nested)) == nested
    assert '"nested":true' in ir.to_json(nested)
    assert "nested" not in ir.to_json(specs.attention_scores())  # old JSON, old kernels


def test_guards_pass_two_batch_strides_per_tensor():
    p = guards.check(specs.nested_attention_scores(), infos(scores_inputs()))
    assert (p.M, p.N, p.K, p.L, p.nested) == (S, S, D, B * H, (B, H))
    assert p.abi_shape == (S, S, D, B, H)
    row = 3 * H * D  # one token of the qkv projection
    assert p.input_strides[0:4] == (row, 1, S * row, D)  # q: (M, K, L1, L2)
    assert p.input_strides[4:8] == (row, 1, S * row, D)  # k as N x K
    assert p.input_strides[8:12] == (S, 1, 0, 0)  # the mask: every batch reads it
    assert p.input_strides[12:16] == (S, 1, H * S * S, S * S)  # the full bias
    assert p.input_strides[16:20] == (0, 1, 0, 0)  # pos, an N-vector
    assert p.output_strides == (S, 1, H * S * S, S * S) * 2  # D and the stored scores


def test_guards_split_a_flat_batch_into_the_nested_modes():
    p = guards.check(specs.nested_attention_scores(), infos(scores_inputs(flat_bias=True)))
    assert p.input_strides[12:16] == (S, 1, H * S * S, S * S)
    _, v = heads(1)
    p = guards.check(specs.nested_attention_values(), infos([torch.randn(B * H, S, S).to(BF16), v]))
    assert p.nested == (B, H) and p.input_strides[:4] == (S, 1, H * S * S, S * S)
    assert p.input_strides[4:8] == (1, 3 * H * D, S * 3 * H * D, D)  # v as N x K: n-major


def misfit(pad: int, offset: int = 0, h: int = 4):
    """Scores inputs whose q and k are [B, h, S, D] views of a [B, S, h, D + pad] tensor,
    starting `offset` elements in."""
    x = torch.randn(B, S, h, D + pad, dtype=BF16)[..., offset : offset + D].transpose(1, 2)
    mask = torch.zeros(S, S, dtype=BF16)
    return [x, x, mask, torch.zeros(B * h, S, S, dtype=BF16), torch.zeros(S, dtype=BF16)]


def test_guards_refuse_heads_tma_cannot_read():
    spec = specs.nested_attention_scores()
    p = guards.check(spec, infos(misfit(pad=8)))  # a head every 24 elements: 48 bytes
    assert p.input_strides[:4] == (4 * (D + 8), 1, S * 4 * (D + 8), D + 8)
    with pytest.raises(LaunchError, match="input 0 \\(A\\): stride along L2 is 20 elements"):
        guards.check(spec, infos(misfit(pad=4)))  # a head every 20 elements: 40 bytes
    with pytest.raises(LaunchError, match="input 0 \\(A\\): data pointer is 8 bytes past"):
        guards.check(spec, infos(misfit(pad=8, offset=4)))


def test_guards_refuse_mismatched_or_expanded_batches():
    inputs = scores_inputs()
    other_h = torch.randn(B, S, H + 1, D, dtype=BF16).transpose(1, 2)
    with pytest.raises(LaunchError, match="input 1 \\(B\\)"):
        guards.check(specs.nested_attention_scores(), infos([inputs[0], other_h, *inputs[2:]]))
    one_b = inputs[1][:1].expand(B, H, S, D)  # every B reads one k: L1 stride 0
    with pytest.raises(LaunchError, match="L stride 0"):
        guards.check(specs.nested_attention_scores(), infos([inputs[0], one_b, *inputs[2:]]))
    bias = inputs[3][:, :1].expand(B, H, S, S)  # an expanded head mode where a real one was built
    with pytest.raises(LaunchError, match="aux load bias"):
        guards.check(specs.nested_attention_scores(), infos([*inputs[:3], bias, inputs[4]]))


def test_statistics_render_with_a_nested_batch():
    """Softmax's statistics of nested scores and their sum: partials and finishing step sized
    for L1 x L2 batches, the outputs' stride loaded from the nested ABI's L1 and L2 strides."""
    spec = specs.nested_attention_statistics()
    assert guards.static_reason(spec) is None
    text = render(spec)
    assert "partials_bytes(M, N, L1 * L2)" in text and "finishers.evt_softmax, M, N, L1 * L2))" in text
    assert "cute::Stride<cute::_1, cute::_0, int64_t> evt_softmax_stride" in text
    assert "evt::Sm90ScalarStatistic" in text


def test_a_reduction_over_m_is_refused_with_a_nested_batch():
    spec = specs.nested_attention_scores()
    spec = dataclasses.replace(spec, nodes=(*spec.nodes, ir.RowReduction("r", "add_2", 2, "f32")))
    assert "nested batch" in guards.static_reason(spec)
    with pytest.raises(CodegenError, match="node r: a nested batch"):
        render(spec)


def test_a_reduction_over_everything_renders_with_a_nested_batch():
    spec = specs.nested_attention_scores()
    spec = dataclasses.replace(spec, nodes=(*spec.nodes, ir.ScalarReduction("r", "add_2", 2, "f32")))
    assert guards.static_reason(spec) is None
    assert "evt::Sm90ScalarStatistic" in render(spec)


def test_statistics_reference_with_a_nested_batch():
    """The reference path of nested scores with softmax statistics: the row max and sum of exp of
    each head's scores (eager, in fp32), [B * H, S] each."""
    spec = specs.nested_attention_statistics()
    inputs = scores_inputs()
    d, scaled, row_max, row_sum, total = reference.run(spec, inputs)
    want = eager_scores(*inputs)[0]
    assert row_max.shape == row_sum.shape == (B * H, S) and row_max.dtype == torch.float32
    torch.testing.assert_close(total, want.sum(), rtol=1e-4, atol=1e-2)
    torch.testing.assert_close(d.float(), want, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(row_max, want.amax(-1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(row_sum, (want - want.amax(-1, keepdim=True)).exp().sum(-1),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_launcher_passes_both_batch_extents_and_four_strides():
    calls = []

    def run(*args):
        calls.append(args)
        return 0

    spec = specs.nested_attention_scores()
    lib = launch.Library(None, "k", None, run, lambda *shape: calls.append(shape) or 0, nested=True)
    inputs = scores_inputs()
    p = guards.check(spec, infos(inputs))
    d, scaled = launch.Kernel(spec, lib).launch(p, inputs)
    (workspace_query, args) = calls
    assert workspace_query == (S, S, D, B, H, 0) and args[4:10] == (S, S, D, B, H, 0)
    assert list(args[1]) == list(p.input_strides) and len(args[1]) == 4 * spec.num_inputs
    assert list(args[3]) == list(p.output_strides) and len(args[3]) == 4 * spec.num_outputs
    assert d.shape == scaled.shape == (B * H, S, S) and d.is_contiguous()
    flat = launch.Kernel(spec, dataclasses.replace(lib, nested=False))  # a library of another ABI
    with pytest.raises(LaunchError, match="nested batch"):
        flat.launch(p, inputs)


def test_a_nested_library_is_recognized_by_its_signature():
    nested, flat = specs.nested_attention_scores(), specs.attention_scores()
    assert launch._nested(signature(nested, default_config(nested)))
    assert not launch._nested(signature(flat, default_config(flat)))
    assert not launch._nested("kfake;sig")  # no spec: the flat ABI (Kernel checks its own spec)


def test_codegen_describes_the_batch_as_two_modes():
    source = render(specs.nested_attention_scores())
    assert "cute::Shape<int, int, int, cute::Shape<int, int>>" in source
    assert "{M, N, K, cute::make_shape(L1, L2)}" in source
    assert (
        "using LayoutA = cute::Stride<int64_t, cute::_1, cute::Stride<int64_t, int64_t>>;" in source
    )
    assert "load_stride(strides_of(input_strides, 0, 4), M, K, L1, L2, stride_a)" in source
    assert "cute::Stride<int64_t, cute::_1, cute::Stride<cute::_0, cute::_0>>" in source  # mask
    assert "cute::Stride<cute::_0, cute::_1, cute::Stride<int64_t, int64_t>>" in source  # pos
    assert "evt_nested_attention_scores_workspace(int M, int N, int K, int L1, int L2, int tile_order)" in source
    assert "batched over L = L1 x L2" in source
    flat = render(specs.attention_scores())
    assert "L1" not in flat and "cute::Shape<int, int, int, int>" in flat

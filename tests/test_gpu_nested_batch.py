"""Attention's scores with a nested batch (L = B x H) on an SM90 GPU: q and k read in place from
one [B, S, 3, H, D] qkv projection (no copy), against eager torch, with NaN-poisoned outputs, on
fresh random data: whole tiles, residues, and heads whose rows are padded."""

from __future__ import annotations

import os

import pytest
import torch

from evt import ir
from evt.runtime import build, reference, verify
from tests import specs
from tests.test_gpu_ops import poisoned_launch

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> ir.KernelSpec:
    if not os.environ.get("EVT_CACHE_DIR"):
        os.environ["EVT_CACHE_DIR"] = str(tmp_path_factory.mktemp("evt-cache"))
    s = specs.nested_attention_scores()
    build.prefetch(s).result()
    return s


def projection_inputs(b, s, h, d, pad=0) -> list[torch.Tensor]:
    """q, k as [B, H, S, D] views of a qkv projection [B, S, 3, H, D + pad] (k starts H * (D +
    pad) elements in), a causal mask every batch reads, a full [B, H, S, S] bias, an N-vector."""
    qkv = torch.randn(b, s, 3, h, d + pad, device="cuda").to(BF16)[..., :d]
    q, k = qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)
    mask = torch.triu(torch.full((s, s), -4.0, device="cuda"), 1).to(BF16)
    bias = torch.randn(b, h, s, s, device="cuda").to(BF16)
    return [q, k, mask, bias, torch.randn(s, device="cuda").to(BF16)]


def eager(q, k, mask, bias, pos) -> tuple[torch.Tensor, torch.Tensor]:
    b, h, s, _ = q.shape
    scaled = torch.matmul(q.float(), k.float().transpose(-1, -2)) * 0.125
    d = scaled + mask.float() + bias.float() + pos.float()
    return d.reshape(b * h, s, s), scaled.reshape(b * h, s, s)


@pytest.mark.parametrize(
    "shape", [(2, 256, 4, 64, 0), (3, 200, 3, 72, 0), (2, 128, 2, 32, 8)],
    ids=["tiles", "residues", "padded-heads"],
)  # fmt: skip
def test_nested_kernel_reads_heads_in_place_like_eager(spec, shape):
    torch.manual_seed(sum(shape))
    inputs = projection_inputs(*shape)
    assert not inputs[0].is_contiguous()  # the kernel reads the projection, not a copy
    got = poisoned_launch(spec, inputs)
    for out, want, ref in zip(got, eager(*inputs), reference.run(spec, inputs), strict=True):
        assert out.shape == want.shape
        assert not out.float().isnan().any(), "elements left unwritten"
        assert verify.relative_error(out, want.to(BF16)) <= verify.TOLERANCE["bf16"]
        assert verify.relative_error(out, ref) <= verify.TOLERANCE["bf16"]


"""The batched kernel of `tests.specs` (attention's scores: Q·Kᵀ * scale + a mask every batch
reads + a full [L, M, N] bias + an N-vector) on an SM90 GPU against the reference path, with
NaN-poisoned outputs, on fresh data: whole tiles, residues, and a batch of views of one buffer (a
batch stride larger than M * K)."""

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
    s = specs.attention_scores()
    build.prefetch(s).result()
    return s


def scores_inputs(L, M, N, K, padded=False) -> list[torch.Tensor]:
    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda") * scale).to(BF16)

    q = rand(L, M, K + 8)[..., :K] if padded else rand(L, M, K)  # batch stride M * (K + 8)
    k = rand(L, N, K, scale=K**-0.5)
    mask = torch.triu(torch.full((M, N), -4.0, device="cuda"), 1).to(BF16)
    return [q, k, mask, rand(L, M, N), rand(N)]


@pytest.mark.parametrize(
    "shape", [(4, 256, 128, 64), (3, 200, 144, 72), (1, 128, 64, 32)],
    ids=["tiles", "residues", "one-batch"],
)  # fmt: skip
def test_batched_kernel_matches_the_reference(spec, shape):
    inputs = scores_inputs(*shape)
    (got,) = poisoned_launch(spec, inputs)
    (want,) = reference.run(spec, inputs)
    assert got.shape == (shape[0], shape[1], shape[2])
    assert not got.float().isnan().any(), "elements left unwritten"
    assert verify.relative_error(got, want) <= verify.TOLERANCE["bf16"]


def test_batched_kernel_reads_a_padded_batch_stride(spec):
    inputs = scores_inputs(2, 128, 64, 56, padded=True)
    (got,) = poisoned_launch(spec, inputs)
    (want,) = reference.run(spec, inputs)
    assert verify.relative_error(got, want) <= verify.TOLERANCE["bf16"]

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


def causal_scores_spec() -> ir.KernelSpec:
    """The causal scores' region as the pipeline builds it from `attention_scores`: the mask
    computed in the epilogue from a row and a column index vector (`float_index_masks`)."""
    from evt.bench.patterns import attention_scores
    from tests.graphs import explain

    q = torch.randn(2, 3, 16, 8, dtype=BF16)
    (region,) = explain(attention_scores, q, q.clone()).regions
    return region.spec


def prebuilt_specs() -> list[ir.KernelSpec]:
    """The kernels this module builds at their default configs (`kernel_pack.py build --tests
    batched` builds them ahead of a device call)."""
    return [specs.attention_scores(), causal_scores_spec()]


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


@pytest.mark.parametrize("L, S, D", [(4, 256, 64), (3, 200, 72), (2, 136, 64)])
def test_causal_mask_computed_from_index_vectors(spec, L, S, D):
    """The mask `triu(ones(S, S), 1)` computed by the kernel from the column and row indices
    (an N- and an M-vector every batch shares): -inf exactly above the diagonal in every batch,
    the rest as the reference path computes it, residue tiles included."""
    causal = causal_scores_spec()
    build.prefetch(causal).result()
    assert {type(n).__name__ for n in causal.nodes} >= {"RowBroadcast", "ColBroadcast"}
    q = torch.randn(L, S, D, device="cuda").to(BF16)
    k = (torch.randn(L, S, D, device="cuda") * D**-0.5).to(BF16)
    index = torch.arange(S, device="cuda", dtype=torch.float32)
    inputs = [q, k.transpose(1, 2), index[None, :], index[:, None]]
    (got,) = poisoned_launch(causal, inputs)
    (want,) = reference.run(causal, inputs)
    above = torch.ones(S, S, dtype=torch.bool, device="cuda").triu(1).expand(L, S, S)
    assert torch.equal(got.isinf(), above) and bool((got[above] < 0).all())
    assert not got.float().isnan().any(), "elements left unwritten"
    assert verify.relative_error(got.masked_fill(above, 0), want.masked_fill(above, 0)) <= verify.TOLERANCE["bf16"]

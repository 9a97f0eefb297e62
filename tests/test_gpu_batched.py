"""The batched kernel of `tests.specs` (attention's scores: Q·Kᵀ * scale + a mask every batch
reads + a full [L, M, N] bias + an N-vector) on an SM90 GPU against the reference path, with
NaN-poisoned outputs, on fresh data: whole tiles, residues, and a batch of views of one buffer (a
batch stride larger than M * K)."""

from __future__ import annotations

import os
from unittest import mock

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


TRAINING_SHAPES = [(2, 4, 256, 64), (2, 3, 197, 64)]  # (B, H, S, D)


def training_step_report(shape):
    """`evt.explain` of `causal_attention`'s training step at `shape` in bf16, captured on the
    CPU with the math attention kept (`EVT_SDPA=0`)."""
    from tests.graphs import explain

    with mock.patch.dict(os.environ, {"EVT_SDPA": "0"}):
        q, k, v = (torch.randn(*shape, dtype=BF16, requires_grad=True) for _ in range(3))
        return explain(lambda *a: causal_attention(*a).sum().backward(), q, k, v)


def captured() -> dict[str, list[tuple]]:
    """The training test's regions at its shapes (`kernel_pack.py build --tests batched` builds
    them at the configs its process picks)."""
    return {str(shape): training_step_report(shape).kernels() for shape in TRAINING_SHAPES}


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


def causal_attention(q, k, v):
    """Math attention with a causal mask written as models write it (`~tril()`, `-inf`)."""
    s = q.shape[-2]
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
    scores = (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.usefixtures("attention_as_written")
@pytest.mark.parametrize("shape", TRAINING_SHAPES, ids=["whole-tiles", "vit-197"])
def test_causal_attention_trains_with_the_mask_computed_in_the_forward(shape):
    """Training math attention (`EVT_SDPA=0`): the backward reads the mask too, and with its own
    copy (`copy_index_masks`) the forward's scores kernel computes the mask; the output and
    q/k/v gradients in bf16 against fp32 eager, within max(2e-2, 2x bf16 eager's error), no
    region falling back."""
    from evt.backend import evt_backend
    from evt.runtime import dispatch
    from evt.testing.models import _rel

    regions = training_step_report(shape).regions
    forward = [r.spec for r in regions if r.anchor == "aten.bmm" and r.side == "forward"]
    kinds = [{type(n).__name__ for n in f.nodes} for f in forward]
    assert any({"RowBroadcast", "ColBroadcast"} <= k and "AuxLoad" not in k for k in kinds), kinds
    dispatch.reset()  # the capture above chose configs on the CPU; the run chooses its own
    g = torch.Generator(device="cuda").manual_seed(11)
    base = [torch.randn(*shape, device="cuda", generator=g) for _ in range(3)]
    grad = torch.randn(*shape, device="cuda", generator=g)

    def step(fn, dtype):
        q, k, v = (t.to(dtype).requires_grad_() for t in base)
        out = fn(q, k, v)
        out.backward(grad.to(dtype))
        return {"out": out.detach(), "q": q.grad, "k": k.grad, "v": v.grad}

    want, eager = step(causal_attention, torch.float32), step(causal_attention, BF16)
    dispatch.FALLBACKS.clear()
    torch._dynamo.reset()
    try:
        compiled = torch.compile(causal_attention, backend=evt_backend, options={"rest": "eager"})
        got = step(compiled, BF16)
    finally:
        torch._dynamo.reset()
    assert not dispatch.FALLBACKS, dispatch.FALLBACKS
    for name in want:
        err, bound = _rel(got[name], want[name]), max(2e-2, 2 * _rel(eager[name], want[name]))
        assert err <= bound, (name, err, bound)

"""Reductions and per-row statistics on an SM90 GPU (issue #6): the hand-built kernels of
`tests.specs` (`row_statistics`: every node kind; `batched_row_statistics`;
`statistics_edge_cases`: -inf, +inf and NaN elements and rows; and BatchNorm1d's statistics
over M, `batch_statistics` and its edge cases in columns) against the reference path, on
fresh random data with NaN-poisoned outputs, under several tile configs; bitwise deterministic
across launches; and a Linear + cross-entropy / LayerNorm training step through the backend.

Self-contained: kernels are built into a fresh cache unless `EVT_CACHE_DIR` is set."""

from __future__ import annotations

import copy
import math
import os

import pytest
import torch

from evt import ir
from evt.backend import evt_backend
from evt.codegen.config import TileConfig
from evt.runtime import build, dispatch, launch, reference, verify
from evt.runtime.dispatch import launches
from tests import specs
from tests.graphs import LinearStatistics
from tests.test_gpu_mlp import random_inputs

pytestmark = pytest.mark.gpu


# (spec, tile config or None for the default one)
KERNELS = {
    "row_statistics": ("row_statistics", None),
    "row_statistics_pingpong": ("row_statistics", TileConfig(64, 256, 64, schedule="pingpong")),
    "row_statistics_256x128_c2": ("row_statistics", TileConfig(256, 128, 64, cluster_m=2)),
    "batched_row_statistics": ("batched_row_statistics", None),
    "statistics_edge_cases": ("statistics_edge_cases", None),
    # BatchNorm1d's statistics over M (evt::Sm90ColumnStatistics): 8 warps in M, 4 (ping-pong),
    # and two epilogue subtiles in M per tile (256-row tiles)
    "batch_statistics": ("batch_statistics", None),
    "batch_statistics_pingpong": ("batch_statistics", TileConfig(64, 256, 64, schedule="pingpong")),
    "batch_statistics_256x128_c2": ("batch_statistics", TileConfig(256, 128, 64, cluster_m=2)),
    "batch_statistics_edge_cases": ("batch_statistics_edge_cases", None),
}
SHAPES = {"tiles": (512, 1024, 256), "residues": (200, 136, 72), "one_n_tile": (96, 64, 64)}


def prebuilt_kernels() -> list[tuple[ir.KernelSpec, TileConfig | None]]:
    """The kernels of `KERNELS` (None: the default config); `scripts/kernel_pack.py build --tests
    statistics` builds them ahead of a device call."""
    return [(specs.ALL[name](), cfg) for name, cfg in KERNELS.values()]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> dict[str, launch.Kernel]:
    if not os.environ.get("EVT_CACHE_DIR"):
        os.environ["EVT_CACHE_DIR"] = str(tmp_path_factory.mktemp("evt-cache"))
    plans = dict(zip(KERNELS, prebuilt_kernels(), strict=True))
    futures = {key: build.submit(build.plan(spec, cfg)) for key, (spec, cfg) in plans.items()}
    return {key: launch.Kernel(plans[key][0], launch.load(f.result())) for key, f in futures.items()}


def inputs_for(spec: ir.KernelSpec, M: int, N: int, K: int, L: int = 3) -> list[torch.Tensor]:
    if not spec.gemm.batched:
        return random_inputs(spec, M, N, K)
    a = torch.randn(L, M, K, device="cuda").bfloat16()
    b = (torch.randn(L, N, K, device="cuda") * K**-0.5).bfloat16()  # passed as [L, N, K]
    return [a, b]


def special_values(M: int, N: int) -> torch.Tensor:
    """0 mostly; whole rows of -inf and +inf, single +inf, -inf and NaN elements, half rows -inf."""
    s = torch.zeros(M, N, device="cuda")
    s[0] = -math.inf
    s[1] = math.inf
    s[2, N // 2] = math.inf
    s[3, N - 1] = -math.inf
    s[4, 1] = math.nan
    s[5, ::2] = -math.inf
    s[M - 1, :] = -math.inf  # the last row, in a partial M tile at residue shapes
    return s


def poisoned_launch(kernel: launch.Kernel, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    problem = kernel.guard(inputs)
    outs = [
        torch.full(shape, math.nan, device="cuda").to(ir.torch_dtype(d))
        for shape, d in zip(kernel.output_shapes(problem), kernel.spec.output_dtypes())
    ]
    return kernel.launch(problem, inputs, outs)


def check_against_reference(spec: ir.KernelSpec, inputs, outs) -> None:
    want_all = reference.run(spec, inputs)
    for i, (got, want, dtype) in enumerate(zip(outs, want_all, spec.output_dtypes(), strict=True)):
        assert got.shape == want.shape, (i, got.shape, want.shape)
        legit = want.float().isnan()
        assert torch.equal(got.float().isnan(), legit), (i, "NaN pattern differs (unwritten?)")
        ok = ~legit
        assert torch.equal(got.float()[ok].isinf(), want.float()[ok].isinf()), (i, "inf pattern")
        finite = ok & ~want.float().isinf()
        if finite.any():
            assert torch.equal(got.float()[ok & ~finite], want.float()[ok & ~finite]), (i, "inf sign")
            err = verify.relative_error(got[finite], want[finite])
            assert err <= verify.tolerance(spec, i), (i, dtype, err)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("key", sorted(KERNELS))
def test_statistics_match_the_reference(kernels, key, shape):
    kernel = kernels[key]
    M, N, K = SHAPES[shape]
    inputs = inputs_for(kernel.spec, M, N, K)
    if kernel.spec.name == "statistics_edge_cases":
        inputs[2] = special_values(M, N)
    if kernel.spec.name == "batch_statistics_edge_cases":  # the same patterns in columns
        inputs[2] = special_values(N, M).t().contiguous()
    check_against_reference(kernel.spec, inputs, poisoned_launch(kernel, inputs))


@pytest.mark.parametrize("key", ["row_statistics", "batched_row_statistics", "batch_statistics"])
def test_statistics_are_bitwise_deterministic(kernels, key):
    kernel = kernels[key]
    inputs = inputs_for(kernel.spec, 4096, 2048, 256)
    first = poisoned_launch(kernel, inputs)
    for _ in range(3):
        again = poisoned_launch(kernel, inputs)
        assert all(torch.equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize("key", ["row_statistics", "row_statistics_256x128_c2",
                                 "batched_row_statistics", "batch_statistics"])
def test_a_repeated_launch_on_new_data_in_the_same_tensors(kernels, key):
    """A training step launches each region with the same pointers every step: the launcher then
    reuses the kernel parameters it built (its memo, workspaces included) and only zeroes the
    workspace's counters again. New data in the same input, output and workspace blocks must give
    the new results."""
    kernel = kernels[key]
    M, N, K = SHAPES["tiles"]
    inputs = inputs_for(kernel.spec, M, N, K)
    problem = kernel.guard(inputs)
    outs = [torch.empty(shape, device="cuda", dtype=ir.torch_dtype(d))
            for shape, d in zip(kernel.output_shapes(problem), kernel.spec.output_dtypes())]  # fmt: skip
    for seed in range(3):
        torch.manual_seed(seed)
        for x, new in zip(inputs, inputs_for(kernel.spec, M, N, K)):
            x.copy_(new)
        for o in outs:
            o.fill_(math.nan)
        check_against_reference(kernel.spec, inputs, kernel.launch(problem, inputs, outs))


def test_a_row_of_many_n_tiles_matches_a_float64_softmax(kernels):
    """A wide vocabulary (N = 32000: 125+ N tiles per row): the combined statistics against
    float64 math on the same bf16 logits the kernel stores."""
    kernel = kernels["row_statistics"]
    inputs = inputs_for(kernel.spec, 256, 32000, 128)
    d, m, s, mean, var = (t.double().flatten() for t in poisoned_launch(kernel, inputs)[:5])
    # flattened: the spec's statistics keep or drop the reduced dim per output (mixed keepdim)
    y = d.view(256, 32000)
    torch.testing.assert_close(m, y.amax(-1), rtol=0, atol=0)
    want = torch.exp(y - y.amax(-1, keepdim=True)).sum(-1)
    torch.testing.assert_close(s, want, rtol=5e-5, atol=0)
    torch.testing.assert_close(mean, y.mean(-1), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(var, y.var(-1, correction=0), rtol=1e-4, atol=0)


@pytest.mark.parametrize("key", ["batch_statistics", "batch_statistics_pingpong"])
def test_a_column_of_many_m_tiles_matches_float64(kernels, key):
    """A batch of 32768 rows (256+ M tiles a column; a mean far from 0, as BatchNorm's input
    can have): Welford's combined statistics against float64 math on the kernel's own bf16 h."""
    kernel = kernels[key]
    x, w = inputs_for(kernel.spec, 32768, 512, 128)
    x += 4.0  # h's columns have means of several times their spread
    d, mean, var, var2 = (t.double() for t in poisoned_launch(kernel, [x, w]))
    h = d / 2  # D = h * 2, exact in bf16
    torch.testing.assert_close(mean.flatten(), h.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(var, h.var(0, correction=0), rtol=1e-4, atol=0)
    torch.testing.assert_close(var2, d.var(0, correction=1), rtol=1e-2, atol=0)  # rounded to bf16


@pytest.mark.parametrize("kind", ["cross_entropy", "layer_norm"])
def test_training_step_runs_the_fused_kernel_and_matches_eager(kind, tmp_path_factory):
    """The forward region (the GEMM with the statistics) launches its kernel, no fallback."""
    if not os.environ.get("EVT_CACHE_DIR"):
        os.environ["EVT_CACHE_DIR"] = str(tmp_path_factory.mktemp("evt-cache"))
    torch.manual_seed(0)
    model = LinearStatistics(kind, k=256, n=512, rows=1024).cuda().bfloat16()
    fused = copy.deepcopy(model)
    x1 = torch.randn(1024, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    dispatch.reset()
    compiled = torch.compile(fused, backend=evt_backend, options={"rest": "eager"})
    probe = torch.randn(model(x1).shape, device="cuda")
    (model(x1).float() * probe).sum().backward()
    (compiled(x2).float() * probe).sum().backward()
    assert not [r for r in dispatch.FALLBACKS if r.startswith("evt_f")], dispatch.FALLBACKS
    assert [r for r in launches() if r.startswith("evt_f")], launches()
    for a, b in [(x1.grad, x2.grad)] + [(p.grad, q.grad) for p, q in
                                        zip(model.parameters(), fused.parameters())]:  # fmt: skip
        assert verify.relative_error(b, a) < 3e-2

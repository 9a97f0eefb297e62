"""Cross-entropy's one-hot in the epilogue: `scatter_add` of one value per row becomes a compare of
the column index with the row's target (`evt/graph/one_hot_scatters.py`), and nodes computed from
broadcasts alone join the region of their reader (`candidates.load_tree`)."""

from __future__ import annotations

import warnings

import torch

from evt.backend import evt_backend
from evt.bench.patterns import ce_backward
from tests.graphs import explain, explain_case

aten = torch.ops.aten
BF16 = dict(dtype=torch.bfloat16)


def inputs(m=64, n=96, k=32, device="cpu"):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(m, k, generator=g, **BF16), torch.randn(n, k, generator=g, **BF16)
    t = torch.randint(0, n, (m,), generator=g)
    lse = torch.logsumexp((x @ w.t()).float(), dim=1)
    return [a.to(device) for a in (x, w, t, lse)]


def test_a_scatter_not_after_a_gemm_stays():
    """The scatter reads an input, not a GEMM's result: Inductor keeps its own scatter."""

    def f(x, w, p, t):
        return (x @ w.t()).float() * p.scatter_add(1, t[:, None], torch.full_like(p[:, :1], -1.0))

    x, w, t, _ = inputs()
    report = explain(f, x, w, torch.rand(x.shape[0], w.shape[0]), t)
    fused = [op for r in report.regions for op in r.fused]
    assert "aten.eq" not in fused and "aten.where" not in fused, fused


def test_the_whole_gradient_is_one_region():
    report = explain_case("ce_backward/gpt2")
    (region,) = report.regions
    for op in ("aten.exp", "aten.eq", "aten.where", "aten.add", "aten.div"):
        assert op in region.fused, region.fused
    assert region.fused[-1] == "prims.convert_element_type"  # stores the bf16 gradient
    assert report.unfused == [], report.unfused


def exact(x, w, t, lse) -> torch.Tensor:
    g = torch.exp(x.double() @ w.double().t() - lse.double()[:, None])
    g[torch.arange(x.shape[0]), t] -= 1
    return g / x.shape[0]


def test_reference_path_matches_eager():
    """Against float64: evt's error is no worse than eager's bf16 one (the epilogue keeps the
    logits in fp32 where eager rounds them to bf16 before the exp, so evt's is smaller)."""
    args = inputs()
    want, eager = exact(*args), ce_backward(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(ce_backward, backend=evt_backend, options={"rest": "eager"})(*args)
    err = (got.double() - want).abs().max().item()
    assert err <= (eager.double() - want).abs().max().item(), err
    assert err < 2e-4, err
    # the one-hot is there: most targets' columns are (probability - 1) / M, about -1 / M
    rows = torch.arange(args[0].shape[0])
    assert (got.float()[rows, args[2]] < -0.5 / len(rows)).float().mean() > 0.5


def test_rows_wider_than_float32_integers_stay_unfused():
    """N > 2**24: a float32 column index would round, so the scatter stays with Inductor (meta
    tensors: shapes only)."""
    m, n, k = 16, 2**24 + 16, 32
    x, w = torch.empty(m, k, device="meta", **BF16), torch.empty(n, k, device="meta", **BF16)
    t = torch.empty(m, dtype=torch.int64, device="meta")
    lse = torch.empty(m, device="meta")
    report = explain(ce_backward, x, w, t, lse)
    fused = [op for r in report.regions for op in r.fused]
    assert "aten.eq" not in fused and "aten.add" not in fused, fused


def test_a_broadcast_only_node_needs_its_reader_in_the_region():
    """`where(iota == t, -1, 0)` read only by an op no epilogue runs (atan2) stays outside."""

    def f(x, w, t):
        y = x @ w.t()
        hit = torch.arange(y.shape[1], dtype=torch.float32) == t[:, None].float()
        return torch.atan2(y.float(), torch.where(hit, -1.0, 0.0)) + y.float()

    x, w, t, _ = inputs()
    report = explain(f, x, w, t)
    fused = [op for r in report.regions for op in r.fused]
    assert "aten.eq" not in fused and "aten.where" not in fused, fused


def test_a_per_row_source_is_a_column_broadcast():
    """`src` a tensor (a per-row weight, e.g. zero for ignored targets) rather than a constant:
    read as a column broadcast; the result matches eager."""

    def f(x, w, t, lse, weight):
        p = torch.exp((x @ w.t()).float() - lse[:, None])
        return (p.scatter_add(1, t[:, None], -weight[:, None]) / x.shape[0]).to(x.dtype)

    x, w, t, lse = inputs()
    weight = (torch.arange(x.shape[0]) % 3 != 0).float()  # every third row ignored
    report = explain(f, x, w, t, lse, weight)
    (region,) = report.regions
    assert "aten.eq" in region.fused and "aten.where" in region.fused, region.fused
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(f, backend=evt_backend, options={"rest": "eager"})(x, w, t, lse, weight)
    want = torch.exp(x.double() @ w.double().t() - lse.double()[:, None])
    want[torch.arange(x.shape[0]), t] -= weight.double()
    err = (got.double() - want / x.shape[0]).abs().max().item()
    assert err < 2e-4, err


def test_a_one_hot_no_region_took_compiles_with_inductor(monkeypatch):
    """Where the gradient's region is not lowered (the profitability check, max-autotune's veto,
    a shape its kernel cannot take), the rewritten one-hot stays in the graph for Inductor,
    which has no lowering of `where` with a number for a branch (on an H100 max-autotune's
    cross-entropy backward failed to compile so, session 18): `restore_one_hots` gives it
    `where.self` of scalar tensors, and the step computes what eager does."""
    from evt.runtime import guards

    monkeypatch.setattr(guards, "shape_reason", lambda spec, values: "vetoed by the test")
    args = inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = explain(ce_backward, *args)
        got = torch.compile(ce_backward, backend=evt_backend)(*args)
    assert report.regions == [] and "vetoed by the test" in report.unfused[0][2], report.unfused
    want = exact(*args)
    assert (got.double() - want).abs().max().item() <= (ce_backward(*args).double() - want).abs().max().item() + 1e-3


def test_the_gpu_modules_regions_are_captured_on_the_cpu_one_per_test():
    """`tests/test_gpu_one_hot.py`'s `captured()` (what `kernel_pack.py build --tests one_hot`
    builds here): each test's one region, at the test's own problem shape."""
    from tests import test_gpu_one_hot as gpu

    seen = gpu.captured()
    want = [(*shape, 1) for shape in [*gpu.CE_SHAPES, gpu.ONE_HOT_SHAPE]]
    assert [len(regions) for regions in seen.values()] == [1, 1, 1, 1], seen
    assert [problem for regions in seen.values() for _, problem in regions] == want

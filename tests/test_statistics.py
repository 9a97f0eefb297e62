"""Per-row statistics after a GEMM (issue #6): softmax's max and sum of exp (online softmax),
LayerNorm's mean and var (Welford), sums and maxes over N, M or everything.

CPU tier: what the pipeline fuses from small modules (the statistics land in the GEMM's region,
the ops that need the finished row stay outside) and their training matching eager through the
reference path; the graph rewrites (and their undoing where nothing fuses); the reference's
semantics, infinite and NaN rows included; the tree's merging of statistics of one value; the
runtime's output shapes and strides; the generated C++."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import evt
from evt import ir, pipeline
from evt.codegen.emit import render
from evt.graph.capture import capture_joint
from evt.graph.restore_statistics import restore_statistics
from evt.graph.statistics_ops import SOFTMAX_SUM
from evt.graph.verify import verify
from evt.runtime import guards, reference
from evt.runtime.canonical import canonical
from tests import specs
from tests.graphs import LinearStatistics, train_compare

aten = torch.ops.aten
SOFTMAX = ["aten.amax", "evt.softmax_sum"]
FUSED = {
    "softmax": SOFTMAX,
    "log_softmax": SOFTMAX,
    "cross_entropy": SOFTMAX,
    "logsumexp": SOFTMAX,
    "layer_norm": ["aten.add", "aten.var", "aten.mean"],
    "reductions": ["aten.amax", "aten.sum", "aten.sum"],
}


def explain(kind: str, dtype=torch.float32):
    model = LinearStatistics(kind).to(dtype)
    x = torch.randn(16, 32, dtype=dtype, requires_grad=True)
    return evt.explain(lambda x: model(x).float().pow(2).sum().backward(), x)


@pytest.mark.parametrize("kind", sorted(FUSED))
def test_statistics_land_in_the_gemm_region(kind):
    report = explain(kind)
    forward = [r for r in report.regions if r.side == "forward"]
    assert [(r.anchor, r.fused) for r in forward] == [("aten.addmm", FUSED[kind])]
    assert not report.fallbacks


@pytest.mark.parametrize("kind", sorted(FUSED))
def test_training_matches_eager(kind):
    torch.manual_seed(0)
    errs = train_compare(LinearStatistics(kind), [torch.randn(16, 32)], torch.float32)
    assert max(errs.values()) < 1e-4, errs


@pytest.mark.parametrize("kind", ["softmax", "cross_entropy", "layer_norm"])
def test_training_matches_eager_in_bf16(kind):
    torch.manual_seed(0)
    errs = train_compare(LinearStatistics(kind), [torch.randn(16, 32)], torch.bfloat16)
    assert max(errs.values()) < 2e-2, errs


def _nodes(kind: str, cls) -> list:
    (region,) = [r for r in explain(kind).regions if r.side == "forward"]
    return [n for n in region.spec.nodes if isinstance(n, cls)]


def test_softmax_max_and_sum_are_one_online_softmax_node():
    (stats,) = _nodes("log_softmax", ir.SoftmaxStats)
    assert stats.max_output is not None and stats.sum_output is not None
    assert stats.keepdim == (True, True) and not stats.zero_inf_max
    assert not _nodes("log_softmax", ir.ColReduction)  # the max is the statistic's


def test_logsumexp_shifts_infinite_maxima_by_zero():
    (stats,) = _nodes("logsumexp", ir.SoftmaxStats)
    assert stats.zero_inf_max and stats.sum_output is not None and stats.max_output is not None
    # the max (amax, keepdim) is the statistic's too, though the sum drops the dim: one pass
    assert stats.keepdim == (True, False)
    assert not _nodes("logsumexp", ir.ColReduction)


def test_a_hand_written_softmax_max_unsqueezed_back_is_recognized():
    """`m = x.amax(1); exp(x - m[:, None]).sum(1)` (no keepdim, then unsqueeze): the sum of exp
    joins the GEMM's region next to the max (it stayed a separate reduction over the logits)."""
    from evt.bench.patterns import softmax_stats

    x, w = torch.randn(16, 32, dtype=torch.bfloat16), torch.randn(48, 32, dtype=torch.bfloat16)
    report = evt.explain(softmax_stats, x, w)
    ((region),) = report.regions
    assert region.fused == ["prims.convert_element_type", "aten.amax", "evt.softmax_sum"]
    (stats,) = [n for n in region.spec.nodes if isinstance(n, ir.SoftmaxStats)]
    assert stats.sum_output is not None and not any(stats.keepdim) and not stats.zero_inf_max
    got = torch.compile(softmax_stats, backend="evt", options={"rest": "eager"})(x, w)
    want = softmax_stats(x.double(), w.double())
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g.double(), r.double(), rtol=2e-2, atol=2e-2)


def test_layer_norm_mean_and_var_are_one_welford_node():
    (stats,) = _nodes("layer_norm", ir.WelfordStats)
    assert stats.mean_output is not None and stats.var_output is not None
    assert stats.correction == 0 and all(stats.keepdim)


def test_reductions_over_n_and_everything():
    kinds = {(type(n).__name__, n.op) for n in _nodes("reductions", ir.REDUCTIONS)}
    assert kinds == {("ColReduction", "max"), ("ColReduction", "sum"), ("ScalarReduction", "sum")}


# ---------------------------------------------------------------------------------------------
# Graph rewrites
# ---------------------------------------------------------------------------------------------


def _softmax_graph(fn=None):
    lin = torch.nn.Linear(32, 64)
    x = torch.randn(16, 32, requires_grad=True)
    fn = fn or (lambda x: F.softmax(lin(x), -1).pow(2).sum())
    return capture_joint(fn, x)


def _run(graph, inputs):
    graph = copy.deepcopy(graph)
    graph._codegen = torch.fx.graph.CodeGen()  # flat inputs and outputs, not AOT's pytrees
    return torch.fx.GraphModule(torch.nn.Module(), graph)(*inputs)


def _inputs(graph):
    g = torch.Generator().manual_seed(0)
    vals = [n.meta["val"] for n in graph.nodes if n.op == "placeholder"]
    return [torch.randn(v.shape, generator=g, dtype=v.dtype) for v in vals]


def test_unfused_softmax_sum_goes_back_to_aten():
    graph = _softmax_graph()
    before = copy.deepcopy(graph)
    pipeline.run_passes(graph, pipeline.GRAPH_PASSES, check=True)
    assert len(graph.find_nodes(op="call_function", target=SOFTMAX_SUM)) == 1
    restore_statistics(graph)
    verify(graph, after="restore_statistics")
    assert not graph.find_nodes(op="call_function", target=SOFTMAX_SUM)
    inputs = _inputs(before)
    for want, got in zip(_run(before, inputs), _run(graph, inputs)):
        torch.testing.assert_close(got, want)


def test_softmax_away_from_a_gemm_is_left_alone():
    graph = _softmax_graph(lambda x: F.softmax(x * 2.0, -1).pow(2).sum())
    pipeline.run_passes(graph, pipeline.GRAPH_PASSES, check=True)
    assert not graph.find_nodes(op="call_function", target=SOFTMAX_SUM)
    assert graph.find_nodes(op="call_function", target=aten.amax.default)


def test_var_mean_after_a_gemm_splits_into_var_and_mean():
    norm = torch.nn.LayerNorm(64)
    lin = torch.nn.Linear(32, 64)
    graph = capture_joint(lambda x: norm(lin(x)).pow(2).sum(), torch.randn(8, 32, requires_grad=True))
    before = copy.deepcopy(graph)
    pipeline.run_passes(graph, pipeline.GRAPH_PASSES, check=True)
    assert not graph.find_nodes(op="call_function", target=aten.var_mean.correction)
    assert graph.find_nodes(op="call_function", target=aten.var.correction)
    inputs = _inputs(before)
    for want, got in zip(_run(before, inputs), _run(graph, inputs)):
        torch.testing.assert_close(got, want)


def test_softmax_sum_op_is_its_decomposition():
    x = torch.randn(6, 10)
    x[1] = -math.inf
    x[2, 3] = math.inf
    for zero_inf_max in (False, True):
        got = torch.ops.evt.softmax_sum(x, True, zero_inf_max)
        m = x.amax(-1, keepdim=True)
        c = torch.where(m.abs() == math.inf, 0.0, m) if zero_inf_max else m
        torch.testing.assert_close(got, torch.exp(x - c).sum(-1, keepdim=True), equal_nan=True)


# ---------------------------------------------------------------------------------------------
# Reference semantics
# ---------------------------------------------------------------------------------------------


def _logits_inputs(M=40, N=24, K=16):
    g = torch.Generator().manual_seed(1)
    x, w, b = (torch.randn(*s, generator=g).bfloat16() for s in ((M, K), (N, K), (N,)))
    logits = (x.float() @ w.float().t() + b.float()).bfloat16().float()
    return [x, w, b], logits


def test_reference_computes_every_statistic_in_fp32():
    spec = specs.row_statistics()
    inputs, y = _logits_inputs()
    d, m, s, mean, var, row_sum, row_max, col_max, total = reference.run(spec, inputs)
    assert d.dtype == torch.bfloat16 and torch.equal(d.float(), y)
    torch.testing.assert_close(m, y.amax(-1, keepdim=True))
    torch.testing.assert_close(s, torch.exp(y - y.amax(-1, keepdim=True)).sum(-1, keepdim=True))
    torch.testing.assert_close(mean, y.mean(-1, keepdim=True))
    torch.testing.assert_close(var, y.var(-1, correction=0))  # this output drops the dim
    torch.testing.assert_close(row_sum, y.sum(-1))
    assert row_max.dtype == torch.bfloat16 and torch.equal(row_max, y.amax(-1).bfloat16())
    torch.testing.assert_close(col_max, y.amax(0))
    torch.testing.assert_close(total, y.sum())
    shapes = [tuple(t.shape) for t in (d, m, s, mean, var, row_sum, row_max, col_max, total)]
    assert shapes == spec.output_shapes(40, 24, 1)


def test_reference_statistics_of_infinite_and_nan_rows_are_torchs():
    spec = specs.statistics_edge_cases()
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(4, 8, generator=g).bfloat16(), torch.randn(16, 8, generator=g).bfloat16()
    special = torch.zeros(4, 16)
    special[0] = -math.inf  # a whole row -inf
    special[1, 3] = math.inf  # one +inf
    special[2, 5] = math.nan
    special[3, ::2] = -math.inf  # half the row -inf
    _, m, s, lse_sum, mean, var = reference.run(spec, [x, w, special])
    assert m[0] == -math.inf and s[0].isnan() and lse_sum[0] == 0 and mean[0] == -math.inf
    assert m[1] == math.inf and s[1].isnan() and lse_sum[1] == math.inf and mean[1] == math.inf
    assert all(t[2].isnan() for t in (m, s, lse_sum, mean, var))
    assert torch.isfinite(s[3]) and s[3] >= 1 and var[0].isnan() and var[3].isnan()


def test_batched_statistics_are_per_batch():
    spec = specs.batched_row_statistics()
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(3, 10, 8, generator=g).bfloat16(), torch.randn(3, 12, 8, generator=g).bfloat16()
    d, lse_sum, var, row_sum, col_sum = reference.run(spec, [a, b])
    y = (a.float() @ b.float().mT) * 0.125
    assert d.shape == (3, 10, 12) and lse_sum.shape == (3, 10) and row_sum.shape == (3, 10, 1)
    torch.testing.assert_close(lse_sum, torch.exp(y - y.amax(-1, keepdim=True)).sum(-1))
    torch.testing.assert_close(var, y.var(-1, correction=1))
    torch.testing.assert_close(row_sum, y.sum(-1, keepdim=True))
    torch.testing.assert_close(col_sum, y.sum((0, 1)))  # over the batches too


# ---------------------------------------------------------------------------------------------
# Runtime shapes and strides, JSON, canonical names, generated C++
# ---------------------------------------------------------------------------------------------


def test_output_shapes_and_strides():
    spec = specs.row_statistics()
    assert spec.output_shapes(40, 24, 1) == [
        (40, 24), (40, 1), (40, 1), (40, 1), (40,), (40,), (40,), (24,), ()]  # fmt: skip
    strides = guards.output_strides(spec, 40, 24)
    assert strides[3:6] == (1, 0, 0) and strides[-6:-3] == (0, 1, 0) and strides[-3:] == (0, 0, 0)
    batched = specs.batched_row_statistics()
    shapes = [(3, 10, 12), (3, 10), (3, 10), (3, 10, 1), (12,)]
    assert batched.output_shapes(10, 12, 3) == shapes
    assert guards.output_strides(batched, 10, 12)[3:-3] == (1, 0, 10) * 3


def test_specs_round_trip_and_keep_older_json():
    for spec in (specs.row_statistics(), specs.batched_row_statistics()):
        assert ir.from_json(ir.to_json(spec)) == spec
    assert '"op":"sum"' not in ir.to_json(specs.mlp_dgrad_gelu_bias())  # the JSON of before
    names = [n.name for n in canonical(specs.row_statistics()).nodes]
    assert names[3:] == ["out1_2", "out3_4", "out5", "out6", "out7", "out8"]


def test_generated_cpp_uses_stock_and_evt_nodes():
    src = render(specs.row_statistics())
    assert '#include "evt_statistics.h"' in src
    assert "evt::Sm90RowStatistics<evt::SoftmaxStat<false>, TileShape, float," in src
    assert "evt::Sm90RowStatistics<evt::WelfordStat<0>, TileShape, float," in src
    # column reductions (over N) also go through evt's visitor: its final combine batches loads
    assert "evt::Sm90RowStatistics<evt::ReduceStat<false>, TileShape, float," in src
    assert "evt::Sm90RowStatistics<evt::ReduceStat<true>, TileShape, cutlass::bfloat16_t," in src
    assert "fusion::Sm90ColReduction" not in src
    # reductions over M: CUTLASS's visitor writes per-tile partials, evt's kernel sums them
    assert ("evt::Sm90RowReductionDeferred<cutlass::maximum_with_nan_propagation, "
            "evt::ReduceStat<true>, TileShape,") in src  # fmt: skip
    assert "evt::Sm90ScalarStatistic<evt::ReduceStat<false>, TileShape, float>" in src
    assert ("{out_ptr<float>(outputs, 1), out_ptr<float>(outputs, 2), evt_softmax_stride, "
            "evt_softmax_partials}") in src  # fmt: skip
    assert ("{out_ptr<cutlass::bfloat16_t>(outputs, 6), nullptr, evt_row_max_stride, "
            "evt_row_max_partials}") in src  # fmt: skip
    # per-row statistics finish after the GEMM, each from its slice of the workspace, all in
    # one launch (the jobs in the tree's order)
    jobs = [f"evt_{name}_op::finish_job(launch->finishers.evt_{name}, M, N, L)"
            for name in ("softmax", "norm", "row_sum", "row_max", "col_max")]
    assert src.count("evt::finish_all(") == 1
    call = src[src.index("evt::finish_all("):]
    call = call[: call.index(");") + 2]
    assert [call.index(job) for job in jobs] == sorted(call.index(job) for job in jobs), call
    for name in ("softmax", "norm", "row_sum", "row_max", "col_max"):
        assert f"stats_bytes += evt_{name}_op::partials_bytes(M, N, L);" in src
    assert "evt_total_op" not in src  # the scalar statistic finishes in its last CTA
    lse = render(specs.batched_row_statistics())
    assert "evt::SoftmaxStat<true>" in lse and "{nullptr, out_ptr<float>(outputs, 1)," in lse
    assert "evt::WelfordStat<1>" in lse
    assert "Sm90TopologicalVisitor" in lse and "evt_lse::Arguments evt_lse_args{evt_lse_op_args};" in lse
    assert "evt_statistics.h" not in render(specs.mlp_fc2_residual())


def test_tree_text_names_each_statistic():
    text = ir.format_tree(specs.row_statistics())
    assert ("softmax = SoftmaxStats(max, sum exp(x - max) over N; logits): max -> out1; "
            "sum -> out2 (f32, [M, 1])") in text  # fmt: skip
    assert "norm = WelfordStats(Welford mean, var (correction 0) over N; logits)" in text
    assert "row_max = ColReduction(max over N; logits) -> out6 (bf16, [M])" in text
    assert "total = ScalarReduction(sum over L, M, N; logits) -> out8 (f32)" in text


def test_softmax_and_layer_norm_statistics_of_one_value_are_two_nodes():
    """A region with softmax's and LayerNorm's statistics of the same logits: one node each."""

    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(32, 64)

        def forward(self, x):
            y = self.fc(x)
            return F.log_softmax(y, -1) + F.layer_norm(y, (64,))

    model = Both()
    report = evt.explain(lambda x: model(x).pow(2).sum().backward(), torch.randn(16, 32, requires_grad=True))
    (region,) = [r for r in report.regions if r.side == "forward"]
    kinds = sorted(type(n).__name__ for n in region.spec.nodes if isinstance(n, ir.REDUCTIONS))
    assert kinds == ["SoftmaxStats", "WelfordStats"]
    torch.manual_seed(0)
    errs = train_compare(Both(), [torch.randn(16, 32)], torch.float32)
    assert max(errs.values()) < 1e-4, errs

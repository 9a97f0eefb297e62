"""BatchNorm1d's batch statistics in a GEMM's epilogue: var_mean over M of a Linear's [M, N]
output becomes a Welford node over M (`ColumnWelfordStats`, evt's `Sm90ColumnStatistics`).

CPU tier: the graph rewrite and what the pipeline fuses (the statistics land in the GEMM's region;
the normalization, which needs finished columns, stays outside), training against eager through
the reference path, the reference's semantics (infinite and NaN columns included), output shapes,
JSON, the generated C++, and the configs the node can take."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

import evt
from evt import ir
from evt.bench.models import PatchTSTLayer
from evt.codegen.config import TileConfig, fits, mainloop_stages
from evt.codegen.emit import render
from evt.errors import CodegenError
from evt.runtime import guards, reference
from evt.runtime.canonical import canonical
from evt.testing.layouts import checked_layouts
from tests import specs
from tests.graphs import explain, rel_err, train_compare


class LinearBatchNorm(nn.Module):
    def __init__(self, bias: bool = False, k: int = 32, n: int = 64):
        super().__init__()
        self.fc, self.norm = nn.Linear(k, n, bias=bias), nn.BatchNorm1d(n)

    def forward(self, x):
        return torch.relu(self.norm(self.fc(x)))


def _forward_region(model, x):
    report = evt.explain(lambda x: model(x).float().pow(2).sum().backward(), x)
    (region,) = [r for r in report.regions if r.side == "forward"]
    assert not report.fallbacks
    return region


@pytest.mark.parametrize("bias", [False, True])
def test_batch_statistics_land_in_the_gemm_region(bias):
    region = _forward_region(LinearBatchNorm(bias), torch.randn(16, 32, requires_grad=True))
    assert (region.anchor, region.fused) == ("aten.addmm" if bias else "aten.mm", ["aten.var", "aten.mean"])
    (stats,) = [n for n in region.spec.nodes if isinstance(n, ir.ColumnWelfordStats)]
    assert stats.mean_output is not None and stats.var_output is not None
    assert stats.correction == 0 and all(stats.keepdim)  # BatchNorm's biased var, [1, N] each


@pytest.mark.parametrize("bias", [False, True])
def test_training_matches_eager(bias):
    torch.manual_seed(0)
    errs = train_compare(LinearBatchNorm(bias), [torch.randn(24, 32)], torch.float32)
    errs.pop("grad_fc.bias", None)  # zero but for rounding: BatchNorm subtracts the mean
    assert max(errs.values()) < 1e-4, errs


def test_bf16_training_is_as_close_to_float64_as_eager_bf16():
    """BatchNorm's gradients cancel (the mean's share is subtracted): in bf16 both eager and evt
    are a few percent off float64; evt no further than eager."""
    torch.manual_seed(0)
    model, x = LinearBatchNorm(), torch.randn(64, 32)
    probe = torch.randn(64, 64, generator=torch.Generator().manual_seed(7))

    def grads(m, fn, dtype):
        xs = x.to(dtype).requires_grad_()
        (fn(xs).double() * probe).sum().backward()
        return [xs.grad.double(), *(p.grad.double() for p in m.parameters())]

    exact = copy.deepcopy(model).double()
    want = grads(exact, exact, torch.float64)
    eager = copy.deepcopy(model).bfloat16()
    fused = copy.deepcopy(model).bfloat16()
    compiled = torch.compile(fused, backend="evt", options={"rest": "eager"})
    for w, e, f in zip(want, grads(eager, eager, torch.bfloat16), grads(fused, compiled, torch.bfloat16)):
        e_err, f_err = rel_err(e, w), rel_err(f, w)
        assert f_err <= 1.5 * e_err + 2e-3, (f_err, e_err)


def test_running_statistics_and_dynamic_batches_follow_eager():
    """The fused batch statistics feed BatchNorm's running mean and var as eager's do, over steps
    of three batch sizes under `dynamic=True`."""
    torch.manual_seed(0)
    model = LinearBatchNorm()
    fused = copy.deepcopy(model)
    compiled = torch.compile(fused, backend="evt", dynamic=True, options={"rest": "eager"})
    for rows in (24, 40, 17):
        x = torch.randn(rows, 32)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused.norm.running_mean, model.norm.running_mean)
    torch.testing.assert_close(fused.norm.running_var, model.norm.running_var)
    assert int(fused.norm.num_batches_tracked) == 3


def test_a_mean_over_the_rows_alone_stays_outside():
    """Without a var beside it a mean over M is not a Welford node (one pass of it for a mean
    alone costs more than a sum would)."""

    class Centered(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 64)

        def forward(self, x):
            y = self.fc(x)
            return y - y.mean(0)

    x = torch.randn(16, 32, requires_grad=True)
    report = evt.explain(lambda x: Centered()(x).pow(2).sum().backward(), x)
    assert not any(isinstance(n, ir.ColumnWelfordStats) for r in report.regions for n in r.spec.nodes)
    assert not any("aten.mean" in r.fused for r in report.regions)


def test_statistics_over_the_rows_of_a_3d_value_stay_outside():
    """BatchNorm1d of a Linear's own [B, C, L] output (C splits the GEMM's rows, L is its N)
    reduces over B and L: no column whole, no node over M (a transposed output is one: below)."""

    class Conv1dLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.norm = nn.Linear(8, 16), nn.BatchNorm1d(4)

        def forward(self, x):  # [B, 4, 8] -> [B, 4, 16]: the channels are dim 1
            return self.norm(self.fc(x))

    x = torch.randn(6, 4, 8, requires_grad=True)
    report = evt.explain(lambda x: Conv1dLike()(x).pow(2).sum().backward(), x)
    assert not any(isinstance(n, ir.ColumnWelfordStats) for r in report.regions for n in r.spec.nodes)


class TransposedBlock(nn.Module):
    """A Linear's [B, L, C] output normalized over its channels by BatchNorm1d, which wants
    [B, C, L]: transposed there and back (PatchTST), or flattened to [B * L, C] (the same
    statistics, over all of the Linear's rows)."""

    def __init__(self, transpose: bool):
        super().__init__()
        self.transpose = transpose
        self.fc1, self.norm, self.fc2 = nn.Linear(32, 64), nn.BatchNorm1d(64), nn.Linear(64, 32)

    def forward(self, x):
        h = self.fc1(x)
        if self.transpose:
            h = self.norm(h.transpose(1, 2)).transpose(1, 2)
        else:
            h = self.norm(h.flatten(0, 1)).view(h.shape)
        return x + self.fc2(torch.relu(h))


def _regions(model, x):
    report = explain(lambda x: model(x).pow(2).sum().backward(), x)
    assert not report.fallbacks
    return report.regions


def test_statistics_of_a_transposed_linear_output_fuse_as_the_flat_ones_do():
    """BatchNorm1d of the transposed [B, C, L] reduces over all of the Linear's rows: its
    statistics, and its backward's sums over B and L, land in the GEMMs' epilogues as those of
    BatchNorm1d of the flattened [B * L, C] do, in the same kernels."""
    torch.manual_seed(0)
    x = torch.randn(4, 6, 32, requires_grad=True)
    transposed, flat = _regions(TransposedBlock(True), x), _regions(TransposedBlock(False), x)
    (forward,) = [r for r in transposed if r.side == "forward" and r.anchor == "aten.addmm" and r.fused != ["aten.add"]]
    assert sorted(forward.fused) == ["aten.mean", "aten.var"]
    assert any(isinstance(n, ir.ColumnWelfordStats) for n in forward.spec.nodes)
    assert any(r.side == "backward" and r.fused.count("aten.sum") == 2 for r in transposed)
    assert [canonical(r.spec) for r in transposed] == [canonical(r.spec) for r in flat]
    assert [r.bytes_saved for r in transposed] == [r.bytes_saved for r in flat]


@pytest.mark.parametrize("dynamic", [False, True])
def test_transposed_batch_statistics_train_as_eager(dynamic):
    torch.manual_seed(0)
    model = TransposedBlock(True)
    fused = copy.deepcopy(model)
    compiled = torch.compile(fused, backend="evt", dynamic=dynamic, options={"rest": "eager"})
    for batch in (3, 5) if dynamic else (3,):
        x = torch.randn(batch, 7, 32)
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        want, got = model(a), compiled(b)
        probe = torch.randn(want.shape)
        (want * probe).sum().backward()
        (got * probe).sum().backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(model.named_parameters(), fused.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    torch.testing.assert_close(fused.norm.running_var, model.norm.running_var)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_inductor_hands_each_region_its_inputs_in_the_layouts_its_kernel_was_built_for(monkeypatch, tmp_path, dynamic):
    """Inductor computes PatchTST's BatchNorm backward on the transposed [B, C, L] and may lay its
    result out in that order. The region reading it as the dgrad GEMM's A was built k-major (the
    graph's layout): without a layout constraint its guard failed on the GPU and the region ran
    unfused (session 53). The op's `needs_exact_strides` tag and the layouts
    `record_input_layouts` records on each call give it rows; without the record this fails on
    torch 2.13. With `dynamic=True` the recorded strides are symbolic. On the CPU the kernel's
    guards run on every region call here."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # compile, not replay
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = PatchTSTLayer(32, 2, 64).bfloat16()
    compiled = torch.compile(copy.deepcopy(model), backend="evt", dynamic=dynamic)  # Inductor for the rest
    with checked_layouts() as (calls, failed):
        for batch in (4, 6) if dynamic else (4,):
            x = torch.randn(batch, 8, 32, dtype=torch.bfloat16, requires_grad=True)
            compiled(x).float().pow(2).sum().backward()
            assert x.grad is not None and torch.isfinite(x.grad).all()
    torch._dynamo.reset()
    assert calls, "no region ran"
    assert not failed, failed


@pytest.mark.parametrize("reduce, fuses", [
    (lambda h: torch.var_mean(h.transpose(1, 2), [0, 2]), True),  # over B and L: whole columns
    (lambda h: torch.var_mean(h.transpose(1, 2), [0, 1]), False),  # over B and C
    (lambda h: torch.var_mean(h.reshape(4, 6, 2, 32), [0, 1, 3]), False),  # 32 columns each
    (lambda h: torch.var_mean(h.reshape(4, 6, 2, 32).transpose(2, 3), [0, 1, 3]), False),  # two each
])
def test_reductions_through_views_fuse_over_m_only_where_they_take_whole_columns(reduce, fuses):
    """A reduction through views and permutes is one over M only where each output element
    reduces exactly one of the Linear's columns."""
    fc = nn.Linear(32, 64)

    def step(x):
        var, mean = reduce(fc(x))
        (var.sum() + mean.pow(2).sum()).backward()

    report = explain(step, torch.randn(4, 6, 32, requires_grad=True))
    nodes = [n for r in report.regions for n in r.spec.nodes]
    assert any(isinstance(n, ir.ColumnWelfordStats) for n in nodes) == fuses
    assert any("aten.var" in r.fused for r in report.regions) == fuses


@pytest.mark.parametrize("reduce, fused", [
    (lambda t: t.sum((0, 2)), ["aten.sum"]),
    (lambda t: t.sum((0, 2), keepdim=True), ["aten.sum"]),
    (lambda t: t.amax((0, 2)), ["aten.amax"]),
    (lambda t: t.mean((0, 2)), []),  # a mean over M alone stays outside, as on the flat value
])
def test_other_reductions_of_a_transposed_output_over_its_rows(reduce, fused):
    """Sums and maxima over the rows of a transposed Linear output are the Linear's column
    reductions: the forward's region takes them (a lone mean stays outside, as on the 2-D
    value), and the step's values and gradients are eager's."""
    torch.manual_seed(0)
    fc = nn.Linear(32, 64)
    x = torch.randn(4, 6, 32)

    def step(fc, x):
        h = fc(x).transpose(1, 2)
        loss = reduce(h).pow(2).sum() + h.sum()
        loss.backward()
        return [loss.detach(), x.grad, fc.weight.grad, fc.bias.grad]

    probe, eager, fused_fc = (copy.deepcopy(fc) for _ in range(3))
    report = explain(lambda x: step(probe, x), x.clone().requires_grad_())
    assert [r.fused for r in report.regions if r.side == "forward"] == ([fused] if fused else [])
    want = step(eager, x.clone().requires_grad_())
    got = torch.compile(step, backend="evt", options={"rest": "eager"})(fused_fc, x.clone().requires_grad_())
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Reference semantics, shapes, JSON
# ---------------------------------------------------------------------------------------------


def _linear_inputs(M=40, N=24, K=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    x, w = (torch.randn(*s, generator=g).bfloat16() for s in ((M, K), (N, K)))
    return [x, w], (x.float() @ w.float().t()).bfloat16().float()


def test_reference_is_torchs_mean_and_var_over_m():
    spec = specs.batch_statistics()
    inputs, h = _linear_inputs()
    d, mean, var, var2 = reference.run(spec, inputs)
    torch.testing.assert_close(mean, h.mean(0, keepdim=True))
    torch.testing.assert_close(var, h.var(0, correction=0))
    assert var2.dtype == torch.bfloat16
    torch.testing.assert_close(var2, (h * 2).var(0, correction=1).bfloat16())
    assert [tuple(t.shape) for t in (d, mean, var, var2)] == spec.output_shapes(40, 24, 1)


def test_reference_of_infinite_and_nan_columns_is_torchs():
    spec = specs.batch_statistics_edge_cases()
    inputs, _ = _linear_inputs(8, 16)
    h = inputs[0].float() @ inputs[1].float().t()  # f32 h: the accumulator, not rounded
    special = torch.zeros(8, 16)
    special[:, 0] = -math.inf  # a whole column
    special[3, 1] = math.inf
    special[5, 2] = math.nan
    special[::2, 3] = math.inf
    special[1, 4], special[6, 4] = math.inf, -math.inf
    _, mean, var = reference.run(spec, [*inputs, special])
    assert mean[0] == -math.inf and mean[1] == math.inf and mean[3] == math.inf
    assert mean[2].isnan() and mean[4].isnan() and var[:5].isnan().all()
    torch.testing.assert_close(mean[5:], h[:, 5:].mean(0))
    torch.testing.assert_close(var[5:], h[:, 5:].var(0, correction=0))


def test_output_shapes_strides_and_json():
    spec = specs.batch_statistics()
    assert spec.output_shapes(40, 24, 1) == [(40, 24), (1, 24), (24,), (24,)]
    assert guards.output_strides(spec, 40, 24)[3:] == (0, 1, 0) * 3
    assert ir.from_json(ir.to_json(spec)) == spec
    text = ir.format_tree(spec)
    assert ("stats = ColumnWelfordStats(Welford mean, var (correction 0) over M; h): "
            "mean -> out1 [1, N]; var -> out2 [N] (f32)") in text  # fmt: skip
    assert "var -> out3 (bf16, [N])" in text


# ---------------------------------------------------------------------------------------------
# Generated C++ and configs
# ---------------------------------------------------------------------------------------------


def test_generated_cpp_uses_the_column_statistics_node():
    src = render(specs.batch_statistics())
    assert ("using evt_stats_op = evt::Sm90ColumnStatistics<evt::WelfordStat<0>, TileShape, float,\n"
            "    cute::Stride<cute::_0, cute::_1, cute::_0>>;  // finished after the GEMM") in src  # fmt: skip
    assert "evt::Sm90ColumnStatistics<evt::WelfordStat<1>, TileShape, cutlass::bfloat16_t," in src
    assert ("{out_ptr<float>(outputs, 1), out_ptr<float>(outputs, 2), evt_stats_stride, "
            "evt_stats_partials}") in src  # fmt: skip
    assert "{nullptr, out_ptr<cutlass::bfloat16_t>(outputs, 3), evt_stats2_stride," in src
    for name in ("stats", "stats2"):  # finished after the GEMM, from the workspace
        assert f"stats_bytes += evt_{name}_op::partials_bytes(M, N, L);" in src
        assert f"evt_{name}_op::finish_job(launch->finishers.evt_{name}, M, N, L)" in src


def test_configs_keep_room_for_the_warps_partials():
    spec, plain = specs.batch_statistics(), specs.mlp_fc1_forward()
    wide = TileConfig()
    # 8 warps x 256 columns x 16 bytes of shared memory: the main loop keeps 3 stages
    assert mainloop_stages(spec, wide) == 3 and fits(spec, wide)
    assert fits(spec, TileConfig(64, 256, 64, schedule="pingpong"))
    assert not fits(spec, TileConfig(128, 128, 64, epi_n=16))  # 8 lanes need 32 columns
    assert fits(plain, TileConfig(128, 128, 64, epi_n=16))


def test_a_nested_batch_refuses_statistics_over_m():
    spec = specs.batch_statistics()
    gemm = ir.Gemm(spec.gemm.a, spec.gemm.b, "bf16", batched=True, nested=True)
    with pytest.raises(CodegenError, match="no reductions over M"):
        render(ir.KernelSpec("nested_stats", gemm, spec.nodes, spec.d, spec.d_dtype, 2))

"""A region output in fp32 that is a pointwise chain from the GEMM's bf16 result is recomputed by
its outside readers (`evt.partition.recompute_outside`): LayerNorm's backward stores dY (bf16)
instead of dY * gamma (fp32), and the step still trains like eager."""

from __future__ import annotations

import pytest
import torch

from evt import ir
from tests.graphs import explain, explain_case, train_compare


@pytest.fixture(autouse=True)
def on(monkeypatch):
    monkeypatch.setenv("EVT_RECOMPUTE_OUTSIDE", "1")


def layernorm_backward_regions(name: str, dtype: torch.dtype = torch.bfloat16):
    report = explain_case(name, dtype)
    return [r for r in report.regions if r.side == "backward" and r.fused.count("aten.sum") == 4]


def fused_without(monkeypatch, name: str, dtype: torch.dtype = torch.bfloat16) -> list[list[str]]:
    """What the LayerNorm backward regions fuse with the pass off (each list counts x̂'s chain
    too where `recompute_inside` computes it in the kernel)."""
    monkeypatch.setenv("EVT_RECOMPUTE_OUTSIDE", "0")
    fused = [r.fused for r in layernorm_backward_regions(name, dtype)]
    monkeypatch.setenv("EVT_RECOMPUTE_OUTSIDE", "1")
    return fused


def test_layernorm_backward_stores_the_narrow_gradient(monkeypatch):
    regions = layernorm_backward_regions("step/gpt2")
    assert len(regions) == 2, [r.fused for r in regions]
    for r, without in zip(regions, fused_without(monkeypatch, "step/gpt2"), strict=True):
        assert r.spec.d_dtype == "bf16", ir.format_tree(r.spec)
        wide = [n for n in r.spec.nodes if isinstance(n, ir.AuxStore) and n.dtype == "f32"]
        assert not wide, ir.format_tree(r.spec)
        assert r.fused.count("aten.mul") == without.count("aten.mul") - 1  # dY * gamma * N went outside


def test_on_by_default_and_off_with_0(monkeypatch):
    """On unless `EVT_RECOMPUTE_OUTSIDE=0` (since session 32, timed on an H100)."""
    without = fused_without(monkeypatch, "step/gpt2")
    assert all(f.count("aten.mul") >= 4 for f in without), without
    monkeypatch.delenv("EVT_RECOMPUTE_OUTSIDE")
    on = [r.fused for r in layernorm_backward_regions("step/gpt2")]
    assert [f.count("aten.mul") for f in on] == [f.count("aten.mul") - 1 for f in without]


def test_off_without_a_narrow_gemm_result(monkeypatch):
    """fp32 steps have nothing narrower to store: the regions keep their outputs."""
    ln = layernorm_backward_regions("step/gpt2", torch.float32)
    assert ln and [r.fused for r in ln] == fused_without(monkeypatch, "step/gpt2", torch.float32)
    assert all(r.fused.count("aten.mul") == 4 for r in ln), [r.fused for r in ln]


def test_a_linear_then_layernorm_trains_like_eager():
    """The dgrad of the Linear feeding a LayerNorm carries LN's backward; with the product
    recomputed outside, the step matches bf16 eager as the fp32-stored version did."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 48), torch.nn.LayerNorm(48), torch.nn.Linear(48, 16)
    )
    errs = train_compare(model, [torch.randn(64, 32)], torch.bfloat16)
    assert max(errs.values()) < 3e-2, errs


def rmsnorm_backward_regions():
    """LLaMA's two RMSNorm backward regions (the statistics' per-row sum over N) at its small
    CPU sizes."""
    report = explain_case("step/llama")
    return [r for r in report.regions
            if r.side == "backward" and any(isinstance(n, ir.ColReduction) for n in r.spec.nodes)]  # fmt: skip


def test_rmsnorm_backward_stores_the_bf16_product(monkeypatch):
    """RMSNorm's backward widens `dY * gamma`, a bf16 product, to fp32 for `* rstd`: the region
    stores the bf16 product instead of the fp32 one and its statistics read it rounded to bf16
    as the stored copy is (no chain reaches the GEMM's own result here: dY sums three dgrads)."""
    regions = rmsnorm_backward_regions()
    assert len(regions) == 2, [r.fused for r in regions]
    for r in regions:
        assert r.spec.d_dtype == "bf16", ir.format_tree(r.spec)
        assert not [n for n in r.spec.nodes if isinstance(n, ir.AuxStore) and n.dtype == "f32"]
        rounded = [n for n in r.spec.nodes
                   if isinstance(n, ir.Compute) and n.args == (r.spec.d,) and n.dtype == "bf16"]  # fmt: skip
        assert len(rounded) == 1, ir.format_tree(r.spec)
        readers = [n for n in r.spec.nodes if rounded[0].name in getattr(n, "args", ())]
        assert readers and not [n for n in r.spec.nodes if r.spec.d in getattr(n, "args", ())
                                and n is not rounded[0]], ir.format_tree(r.spec)  # fmt: skip
    monkeypatch.setenv("EVT_RECOMPUTE_OUTSIDE", "0")
    assert [r.spec.d_dtype for r in rmsnorm_backward_regions()] == ["f32", "f32"]


class NormThenTwoLinears(torch.nn.Module):
    """A Linear, LLaMA's RMSNorm, and two Linears reading the norm (as q, k and v do): the
    norm's input gradient sums two dgrads, so the chain to `* rstd` starts at the bf16
    `dY * gamma`, not at a GEMM's result."""

    def __init__(self):
        from evt.bench.models import RMSNorm

        super().__init__()
        self.inp, self.norm = torch.nn.Linear(32, 48), RMSNorm(48)
        self.a, self.b = torch.nn.Linear(48, 16), torch.nn.Linear(48, 16)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        h = self.norm(self.inp(x))
        return self.a(h) * self.b(h)


def test_rmsnorm_after_two_readers_trains_like_eager(monkeypatch):
    """With the bf16 `dY * gamma` stored and `* rstd` recomputed outside, the step matches bf16
    eager; with the pass off the same region stores the fp32 product."""
    torch.manual_seed(0)
    model = NormThenTwoLinears().to(torch.bfloat16)
    x = torch.randn(64, 32)
    norm_dgrad = [r for r in explain(model, x.to(torch.bfloat16)).regions
                  if any(isinstance(n, ir.ColReduction) for n in r.spec.nodes)]  # fmt: skip
    assert [r.spec.d_dtype for r in norm_dgrad] == ["bf16"], [ir.format_tree(r.spec) for r in norm_dgrad]
    errs = train_compare(model, [x], torch.bfloat16)
    assert max(errs.values()) < 3e-2, errs
    monkeypatch.setenv("EVT_RECOMPUTE_OUTSIDE", "0")
    off = [r for r in explain(model, x.to(torch.bfloat16)).regions
           if any(isinstance(n, ir.ColReduction) for n in r.spec.nodes)]  # fmt: skip
    assert [r.spec.d_dtype for r in off] == ["f32"]

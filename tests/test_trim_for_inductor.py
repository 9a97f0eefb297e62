"""Epilogue ops that Inductor runs with less traffic go back to it
(`evt.partition.trim_for_inductor`): softmax backward's `dP * P` stays out of the dP GEMM, while
epilogues that do save a pass (GELU, the bias gradient, LayerNorm's backward statistics) stay."""

from __future__ import annotations

import torch

import evt
from evt.partition import trim_for_inductor as trim
from tests.graphs import explain, explain_case

BF16 = dict(dtype=torch.bfloat16)


def product_read_again(x, w, p):
    """(x @ w) * p, read by an op no epilogue computes (atan2) that reads p too, as softmax's
    backward reads P beside dP * P."""
    return torch.atan2(torch.mm(x, w) * p, p)


def test_a_product_that_inductor_reads_again_goes_back():
    args = torch.randn(64, 32, **BF16), torch.randn(32, 48, **BF16), torch.rand(64, 48, **BF16)
    report = explain(product_read_again, *args)
    assert report.regions == [], str(report)
    (why,) = [why for _, _, why in report.unfused]
    assert why.startswith("its epilogue moves fewer bytes in Inductor's kernel"), why


def test_an_activation_and_a_bias_gradient_stay():
    def f(x, w, b):
        return torch.nn.functional.gelu(torch.addmm(b, x, w))

    args = torch.randn(64, 32, **BF16), torch.randn(32, 48, **BF16), torch.randn(48, **BF16)
    args = [a.requires_grad_() for a in args]
    report = explain(lambda *a: f(*a).sum().backward(), *args)
    fused = {r.side: r.fused for r in report.regions}
    assert "aten.gelu" in fused["forward"], str(report)


def test_attention_with_softmax_written_out(monkeypatch):
    """GPT-2 with attention written out: the dP GEMM of softmax's backward is left to cuBLAS and
    Inductor; the scores keep their scale and compute their causal mask from index vectors (its
    own copy: the backward reads one too, `copy_index_masks`), the MLP its GELU backward and bias gradient,
    both LayerNorm backwards their statistics. (With heads read in place, the dP GEMM would
    become a GEMM-only region that frees a copy; off here to see the trim's reason.)"""
    monkeypatch.setenv("EVT_NESTED_BATCH", "0")
    monkeypatch.setenv("EVT_SDPA", "0")  # else it is one SDPA call (attention_to_sdpa)
    report = explain_case("step/gpt2_math")
    fused = [(r.side, r.anchor, r.fused) for r in report.regions]
    backward = [f for side, _, f in fused if side == "backward"]
    scores = ["aten.mul", "aten.sub", "aten.le", "aten.where"]
    assert scores in [f for side, _, f in fused if side == "forward"], fused
    assert ["aten.gelu_backward", "aten.sum"] in backward, fused
    assert sum(f.count("aten.sum") == 4 for f in backward) == 2, fused  # the two LayerNorms
    assert backward.count(["aten.mul"]) == 0, fused  # dP * P stays out of the dP GEMM
    given = [n for n, side, why in report.unfused if why.startswith("its epilogue moves fewer")]
    assert len(given) == 1 and given[0].startswith("bmm"), report.unfused


def test_traffic_counts_a_read_inductor_would_make_again():
    """The model itself: fused, the kernel reads p and writes the product, and Inductor reads
    both (4 passes); unfused, the GEMM writes x @ w and Inductor reads it and p (3 passes)."""
    gm = torch.fx.symbolic_trace(product_read_again)
    x, w, p = torch.randn(64, 32), torch.randn(32, 48), torch.rand(64, 48)
    torch.fx.passes.shape_prop.ShapeProp(gm).propagate(x, w, p)
    for n in gm.graph.nodes:
        n.meta["val"] = torch.empty(n.meta["tensor_meta"].shape)
    nodes = {n.name: n for n in gm.graph.nodes}
    anchor, mul = nodes["mm"], nodes["mul"]
    region = evt.partition.Region(anchor, (anchor, mul), "forward")
    readers = trim._group_readers(region, set(region.nodes))
    one = 64 * 48 * 4
    fused = trim.traffic(anchor, {mul}, {mul}, readers, set(region.nodes))
    unfused = trim.traffic(anchor, set(), {mul}, readers, set(region.nodes))
    assert fused - unfused == one, (fused, unfused)

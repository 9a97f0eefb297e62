"""Widening casts read only outside a region leave it (`evt.partition.narrow_outputs`): the
region stores the narrow value and Inductor folds the cast into its readers."""

from __future__ import annotations

import warnings

import torch

import evt
from tests.graphs import explain_case

capture = explain_case


def test_a_cast_only_region_is_dropped_and_a_residual_is_stored_narrow():
    def f(x, w):  # the GEMM's only epilogue op would be the widening cast its reader needs
        return torch.cumsum(torch.mm(x, w).float(), 0)

    bf16 = dict(dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cast_only = evt.explain(f, torch.randn(64, 32, **bf16), torch.randn(32, 48, **bf16))
    assert cast_only.regions == []
    assert [why for _, side, why in cast_only.unfused if why.startswith("only widening casts")]
    gpt2 = capture("step/gpt2")
    (residual,) = [r for r in gpt2.regions if r.name.startswith("evt_f0")]
    assert residual.fused == ["aten.add"] and residual.spec.output_dtypes() == ["bf16"]


def test_a_cast_read_inside_or_by_the_output_stays():
    ce = capture("ce_forward/gpt2")  # the statistics read the fp32 logits inside the region
    assert "prims.convert_element_type" in ce.regions[0].fused
    cast = capture("residual_scale_cast/gpt2")  # the fp32 result is the graph's output
    assert "prims.convert_element_type" in cast.regions[0].fused
    assert cast.regions[0].spec.output_dtypes() == ["f32"]


def test_a_cast_also_read_inside_is_stored_narrow_and_rounded_first():
    """The LM head: the statistics read the fp32 logits inside, the loss outside. The region
    stores the bf16 logits; inside, the value is rounded to bf16 before widening (as eager)."""
    from evt import ir

    (head,) = capture("ce_forward/gpt2").regions
    assert head.spec.output_dtypes()[0] == "bf16"  # D: the logits, narrow
    casts = [n for n in head.spec.nodes if isinstance(n, ir.Compute) and n.op == "identity"]
    assert [n.dtype for n in casts] == ["bf16", "f32"]  # round, then widen

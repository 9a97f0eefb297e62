"""Ops computed from loaded tensors alone join the region of their reader (`candidates.load_tree`):
SwiGLU's silu(g), where g is an aux tensor the epilogue loads, in the up projection's epilogue and
in the down projection's dgrad. Only trees whose ops come after the GEMM and whose tensors come
before it (graph order): none can then be an operand of the GEMM or read what its region writes."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from evt.backend import evt_backend
from evt.bench.patterns import dgrad_swiglu, swiglu
from tests.graphs import explain, explain_case

BF16 = dict(dtype=torch.bfloat16)


def region_ops(report) -> list[str]:
    (region,) = report.regions
    return region.fused


def test_the_up_projection_computes_silu_of_the_gate_it_loads():
    ops = region_ops(explain_case("swiglu/llama"))
    assert "aten.silu" in ops and "aten.mul" in ops, ops


def test_the_down_projections_dgrad_computes_silu_and_its_backward():
    report = explain_case("dgrad_swiglu/llama")
    ops = region_ops(report)
    assert {"aten.silu", "aten.silu_backward", "aten.mul"} <= set(ops), ops
    loads = [n for n in report.regions[0].spec.nodes if n.kind == "aux_load"]
    assert sorted(n.dtype for n in loads) == ["bf16", "bf16"], loads  # g and u, not silu(g) too
    assert report.unfused == []


def test_an_op_computed_before_the_gemm_stays_outside():
    """silu(g) computed before the GEMM (in program order) could feed the GEMM itself in another
    graph: it is left to Inductor, and the region loads its result."""

    def f(x, w, g):
        s = F.silu(g)
        return s * (x @ w.t())

    g = torch.Generator().manual_seed(0)
    x, w, gate = (torch.randn(*s, generator=g, **BF16) for s in ((64, 32), (48, 32), (64, 48)))
    ops = region_ops(explain(f, x, w, gate))
    assert "aten.silu" not in ops and "aten.mul" in ops, ops


def test_reference_path_matches_eager():
    """Against float64, evt's bf16 results are no further off than eager's (the epilogue keeps
    silu(g) in fp32 where eager rounds it to bf16)."""
    g = torch.Generator().manual_seed(1)
    m, n, k = 64, 96, 32
    fwd = tuple(torch.randn(*s, generator=g, **BF16) for s in ((m, k), (n, k), (m, n)))
    bwd = tuple(torch.randn(*s, generator=g, **BF16) for s in ((m, k), (k, n), (m, n), (m, n)))
    for fn, args in ((swiglu, fwd), (dgrad_swiglu, bwd)):
        want = fn(*(a.double() for a in args))
        eager = fn(*args)
        torch._dynamo.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = torch.compile(fn, backend=evt_backend, options={"rest": "eager"})(*args)
        for o, e, r in zip(got, eager, want):
            err, eager_err = ((t.double() - r).abs().max().item() for t in (o, e))
            assert err <= 1.5 * eager_err + 1e-3, (fn.__name__, err, eager_err)

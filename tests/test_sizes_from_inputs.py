"""`sizes_from_inputs`: under `dynamic=True` a size AOTAutograd reads from a computed value
(`sym_size(addmm, 0)`) becomes the same size computed from the graph's SymInt inputs, so that
the read no longer holds the GEMM's or an epilogue op's result in memory."""

from __future__ import annotations

import copy
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from evt.backend import evt_backend
from evt.partition import solve_cache
from tests.graphs import compile_reports, rel_err

aten = torch.ops.aten


class ChannelsLastMlp(nn.Module):
    """ConvNeXt's MLP (Hugging Face's): LayerNorm and two Linears over a [B, H, W, C] permute of
    the feature map, GELU between them, the residual added back in [B, C, H, W]."""

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(16, 64), nn.Linear(64, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        h = self.down(F.gelu(self.up(self.norm(x.permute(0, 2, 3, 1)))))
        return x + h.permute(0, 3, 1, 2)


def regions(model, x, dynamic: bool) -> tuple[list, torch.Tensor, dict]:
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    solve_cache.clear()  # (a solution of an isomorphic component would be reused)
    with compile_reports() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = torch.compile(twin, backend=evt_backend, options={"rest": "eager"}, dynamic=dynamic)(x)
        out.sum().backward()
    grads = {n: p.grad for n, p in twin.named_parameters()}
    return [(r.name, r.fused) for g in reports for r in g.regions], out, grads


def test_the_gelu_keeps_its_linears_epilogue_under_dynamic_shapes():
    """(Without the pass, in a fresh process, the dynamic compile left the GELU out: the
    `sym_size` read of its result made the ILP store it.)"""
    torch.manual_seed(0)
    model, x = ChannelsLastMlp(), torch.randn(2, 16, 6, 6)
    static, _, _ = regions(model, x, dynamic=False)
    assert ("evt_f0_addmm", ["aten.gelu"]) in static
    dynamic, out, grads = regions(model, x, dynamic=True)
    assert dynamic == static
    want = model(x)
    want.sum().backward()
    assert rel_err(out, want) < 1e-5
    assert all(rel_err(grads[n], p.grad) < 1e-4 for n, p in model.named_parameters())

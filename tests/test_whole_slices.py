"""Whole slices under dynamic shapes (`evt/graph/fold_whole_slices.py`): Hugging Face's causal LMs
take `h[:, -logits_to_keep:]` before the LM head with `logits_to_keep = 0`; `dynamic=True` makes
the int a symbol, and the slice (s + S rows, s = 0 by a guard the loss's shape check made) and
its backward's `slice_scatter` cost the LM head's dgrad its epilogue (the final norm's backward)
before session 58; in bf16, `recompute_inside` (the norm's x̂ computed in the epilogue from the
bf16 input and the row statistics) and `recompute_outside` (the bf16 dgrad stored, not its fp32
product with gamma) were for static shapes only. On the reference path, against eager."""

from __future__ import annotations

import copy
import warnings
from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn

from tests.graphs import compile_reports, rel_err

V, D = 128, 64


class LMHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(D, D)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, x, labels, keep: int = 0):
        h = self.norm(F.gelu(self.fc(x)))
        logits = self.head(h[:, -keep:, :])  # keep = 0: every position, as HF's default
        return F.cross_entropy(logits.flatten(0, 1), labels[:, -keep:].flatten())


def regions(dynamic: bool, keep: int, dtype=torch.float32) -> tuple[dict, dict, dict]:
    """Each region's fused ops by name, of a compiled training step; its gradients and eager's."""
    torch.manual_seed(0)
    model = LMHead().to(dtype)
    x, labels = torch.randn(2, 16, D, dtype=dtype), torch.randint(0, V, (2, 16))
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    with compile_reports() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(twin, backend="evt", options={"rest": "eager"}, dynamic=dynamic)
        compiled(x, labels, keep).backward()
    model(x, labels, keep).backward()
    got = {n: p.grad for n, p in twin.named_parameters()}
    want = {n: p.grad for n, p in model.named_parameters()}
    return {r.spec.name: Counter(r.fused) for rep in reports for r in rep.regions}, got, want


def test_a_whole_slice_under_dynamic_shapes_fuses_as_with_static_ones():
    static, _, _ = regions(False, 0)
    dynamic, got, want = regions(True, 0)
    assert any(ops["aten.sum"] for ops in static.values()), static  # the norm's backward in the dgrad
    assert dynamic == static
    assert max(rel_err(got[n], want[n]) for n in want) < 1e-5


def test_bf16_regions_under_dynamic_shapes_are_the_static_ones():
    """In bf16 the norm's backward reads x̂ recomputed from the bf16 input (`aten.sub`: x - mean;
    `recompute_inside`) and stores the bf16 dgrad, its readers outside multiplying by gamma · N
    (`recompute_outside`: else the region takes one more `aten.mul` and stores its fp32
    product), under dynamic shapes as under static ones (both were for static shapes only before
    session 58)."""
    static, _, _ = regions(False, 0, torch.bfloat16)
    dynamic, got, want = regions(True, 0, torch.bfloat16)
    assert any(ops["aten.sub"] for ops in static.values()), static
    assert dynamic == static
    assert max(rel_err(got[n].float(), want[n].float()) for n in want) < 2e-2


def test_a_slice_that_keeps_fewer_rows_stays():
    _, got, want = regions(True, 4)
    assert max(rel_err(got[n], want[n]) for n in want) < 1e-5

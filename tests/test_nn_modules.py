"""Common `torch.nn` modules (`tests/nn_catalog.py`) through the whole pipeline, CPU tier: one
float32 training step with evt (its regions run by the reference interpreter) against eager, the
loss and every gradient; and evt fuses something in each module's step but those the catalog
says it does not (and why)."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.graphs import explain, rel_err
from tests.nn_catalog import CASES, loss

B, S, D = 4, 8, 32


def step(model, inputs) -> dict[str, torch.Tensor]:
    """Forward, loss, backward: the loss, the float inputs' and the parameters' gradients."""
    model.zero_grad(set_to_none=True)
    args = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    value = loss(model(*args))
    value.backward()
    got = {"loss": value.detach()}
    got.update({f"input{i}": a.grad for i, a in enumerate(args) if a.grad is not None})
    got.update({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    return got


@pytest.mark.parametrize("name", list(CASES))
def test_module_trains_like_eager(name):
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build(D)
    inputs = case.inputs(B, S, D)
    twin = copy.deepcopy(model)
    result: dict[str, torch.Tensor] = {}
    report = explain(lambda *a: result.update(step(twin, a)), *inputs)
    if case.unfused:  # as the catalog says, and why
        assert not report.regions, f"{name}: fuses now ({case.unfused!r} no longer holds)\n{report}"
    else:
        assert report.regions, f"{name}: nothing fused\n{report}"
    assert not report.fallbacks, report.fallbacks
    want = step(model, inputs)
    assert result.keys() == want.keys()
    errs = {n: rel_err(result[n], want[n]) for n in want}
    assert max(errs.values()) < 1e-4, errs

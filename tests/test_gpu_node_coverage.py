"""Every EVT node kind and compute op from a torch module, with real kernels on an SM90 GPU: each
module of `tests/node_catalog.py` trains one bf16 step through `backend="evt"` (Inductor for the
rest) and matches fp32 eager as closely as bf16 eager does; no region may fall back. The CPU tier
(`test_node_coverage.py`) checks that the catalog reaches every kind and op.

All kernels are built first in one parallel batch, from a CPU capture of each module's regions at
the sizes the GPU runs."""

from __future__ import annotations

import copy

import pytest
import torch

import evt
from evt.runtime import dispatch
from tests.graphs import rel_err
from tests.node_catalog import CASES, untrimmed  # noqa: F401  (untrimmed: autouse)
from tests.test_gpu_mlp import fresh_dispatch  # noqa: F401  (autouse: env and dispatch reset per test)
from tests.test_gpu_models import build_in_cache

pytestmark = pytest.mark.gpu

ROWS, DIM = 512, 128
BF16 = torch.bfloat16


def make(name: str, device: str):
    torch.manual_seed(0)
    case = CASES[name]
    model = case.build(ROWS, DIM).to(device=device, dtype=BF16)
    gen = torch.Generator().manual_seed(1)
    inputs = [t.to(device=device, dtype=BF16) for t in case.inputs(ROWS, DIM)]
    probe = None
    with torch.no_grad():
        out = model(*inputs)
        probe = torch.randn(out.shape, generator=gen).to(device)
    return model, inputs, probe


def step(model, fn, inputs, probe) -> dict[str, torch.Tensor]:
    for p in model.parameters():
        p.grad = None
    x = inputs[0].detach().clone().requires_grad_(True)
    out = fn(x, *inputs[1:])
    (out.float() * probe).sum().backward()
    got = {"out": out.detach().float(), "grad_x": x.grad.float()}
    got.update({n: p.grad.float() for n, p in model.named_parameters()})
    return got


def capture(name: str) -> list[tuple]:
    """(spec, (M, N, K, L)) of each region of `name`'s bf16 training step, captured on the CPU at
    the GPU's sizes."""
    model, inputs, probe = make(name, "cpu")
    report = evt.explain(lambda *a: step(model, model, list(a), probe), *inputs)
    assert report.regions, str(report)
    return report.kernels()


def captured(names=tuple(CASES)) -> dict[str, list[tuple]]:
    """The regions of each catalog module in `names`, captured on the CPU: what the `regions`
    fixture builds (also `scripts/kernel_pack.py build --tests node_coverage`, all of them,
    without a GPU)."""
    return {name: capture(name) for name in names}


@pytest.fixture(scope="module")
def regions(request, tmp_path_factory) -> dict[str, list[tuple]]:
    """The kernels of the modules the session's selected tests train (`-k gelu_written` builds
    that module's alone)."""
    names = {item.callspec.params["name"] for item in request.session.items
             if item.module is request.module and hasattr(item, "callspec")}  # fmt: skip
    return build_in_cache(tmp_path_factory, captured([n for n in CASES if n in names]))


@pytest.mark.parametrize("name", list(CASES))
def test_module_trains_like_fp32_eager(regions, name):
    model, inputs, probe = make(name, "cuda")
    # the step compiled as `capture` explained it (forward, loss and backward), so the regions
    # that run are the ones whose kernels were built
    got = torch.compile(lambda *a: step(model, model, list(a), probe), backend="evt")(*inputs)
    assert dispatch.FALLBACKS == {}, dispatch.FALLBACKS
    assert len(dispatch.launches()) >= len(regions[name]), (
        dict(dispatch.launches()),
        len(regions[name]),
    )
    bf16 = step(model, model, inputs, probe)
    model32 = copy.deepcopy(model).float()
    want = step(model32, model32, [t.float() for t in inputs], probe)
    for n in want:
        assert torch.isfinite(got[n]).all(), n
        err, eager_err = rel_err(got[n], want[n]), rel_err(bf16[n], want[n])
        assert err < max(2e-2, 2 * eager_err), (name, n, err, eager_err)

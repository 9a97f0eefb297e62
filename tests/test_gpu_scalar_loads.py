"""0-d tensor operands (`ir.ScalarLoad`) on an SM90 GPU, on the device and in host memory: a CPU
scalar beside CUDA operands is read by the launcher and passed in the kernel's parameters (as
eager passes one), so a new value in the same host tensor must reach the next launch (the launch
memo keys on the value); a Python float under `dynamic=True` (a 0-d CPU tensor in the graph)
joins the epilogue, each call's value applied. Outputs NaN-poisoned first, against the reference
path and eager."""

from __future__ import annotations

import warnings

import pytest
import torch

from evt import ir
from evt.runtime import build, dispatch, reference
from tests import specs
from tests.graphs import compile_reports
from tests.test_gpu_mlp import fresh_dispatch  # noqa: F401  (autouse: per-test reset)
from tests.test_gpu_models import build_in_cache
from tests.test_gpu_ops import poisoned_launch

pytestmark = pytest.mark.gpu

M, N, K = 384, 256, 128  # the float's function: x [M, K] @ w [K, N]


def prebuilt_specs() -> list[ir.KernelSpec]:
    """The hand-built kernel (also `scripts/kernel_pack.py build --tests scalar_loads`)."""
    return [specs.scaled_by_scalar()]


def scaled_relu_sum(x: torch.Tensor, w: torch.Tensor, s: float) -> torch.Tensor:
    """relu(x @ w) * s summed: with `dynamic=True` Dynamo passes `s` as a 0-d CPU tensor."""
    return (torch.relu(x @ w) * s).sum()


def float_inputs(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(M, K, device=device, dtype=torch.bfloat16)
    w = (torch.randn(K, N, device=device) * K**-0.5).to(torch.bfloat16)
    return x, w


def compiled_calls(x: torch.Tensor, w: torch.Tensor, floats=(0.5, 0.25, -2.0)) -> tuple[list, list]:
    """`scaled_relu_sum` compiled by evt with `dynamic=True` and called with each float: its
    results and evt's reports of the one graph (compiled afresh: a cache hit makes none)."""
    torch._dynamo.reset()
    with compile_reports(fresh=True) as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(scaled_relu_sum, backend="evt", dynamic=True)
        return [compiled(x, w, s) for s in floats], reports


def captured() -> dict[str, list[tuple]]:
    """The float's function's regions, captured on the CPU at the GPU's sizes."""
    _, reports = compiled_calls(*float_inputs("cpu"), floats=(0.5,))
    return {"float": [k for rep in reports for k in rep.kernels()]}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> dict[str, list[tuple]]:
    regions = build_in_cache(tmp_path_factory, captured())  # (sets EVT_CACHE_DIR where unset)
    for spec in prebuilt_specs():
        build.prefetch(spec).result()
    return regions


@pytest.mark.parametrize("where", ["cuda", "cpu"])
def test_the_scalar_is_read_on_the_device_or_passed_by_value(kernels, where):
    spec = specs.scaled_by_scalar()
    x = torch.randn(200, 72, device="cuda").to(torch.bfloat16)
    inputs = [x, (torch.randn(136, 72, device="cuda") * 72**-0.5).to(torch.bfloat16)]  # W: [N, K]
    scale = torch.tensor(0.0, device=where)
    for value in (0.5, -3.0, 0.5):  # the same tensor: a host value is read at every launch
        scale.fill_(value)
        got = poisoned_launch(spec, [*inputs, scale])
        want = reference.run(spec, [*inputs, scale.cuda()])
        torch.testing.assert_close(got[0].float(), want[0].float(), rtol=1e-2, atol=1e-2)


def test_a_dynamic_float_joins_the_epilogue(kernels):
    x, w = float_inputs("cuda")
    floats = (0.5, 0.25, -2.0)  # one graph, the float a 0-d CPU tensor in it
    got, reports = compiled_calls(x, w, floats)
    for out, s in zip(got, floats):
        want = scaled_relu_sum(x.float(), w.float(), s)
        torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=1e-2 * want.abs().item())
    assert dispatch.FALLBACKS == {}, dispatch.FALLBACKS
    loading = [r.spec.name for rep in reports for r in rep.regions
               if any(isinstance(n, ir.ScalarLoad) for n in r.spec.nodes)]  # fmt: skip
    assert loading, (reports, kernels)
    launched = dispatch.launches()
    assert all(launched[name] == len(floats) for name in loading), (launched, loading)

"""The newer functors (the 16-bit GELUs against float64; SwiGLU's backward from one shared
sigmoid), bool masks, the row reduction, a TF32 GEMM (fp32 operands) and LayerNorm's
backward (row and column reductions together; and with xhat computed in the epilogue from the
bf16 input and the row statistics, `recompute_inside`) on an SM90 GPU: the hand-built kernels of
`tests.specs` (the ones the nvcc tier compiles) against the reference path, with NaN-poisoned
outputs, and the bias-gradient reduction bitwise deterministic across launches."""

from __future__ import annotations

import math
import os

import pytest
import torch

from evt import ir
from evt.runtime import build, dispatch, reference, verify
from tests import specs
from tests.test_gpu_mlp import random_inputs

pytestmark = pytest.mark.gpu

SPECS = ("activations", "mlp_dgrad_gelu_bias", "mlp_fc1_forward_tf32", "layer_norm_backward",
         "layer_norm_backward_recomputed", "gelu_forms", "swiglu_backward")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> dict[str, ir.KernelSpec]:
    if not os.environ.get("EVT_CACHE_DIR"):
        os.environ["EVT_CACHE_DIR"] = str(tmp_path_factory.mktemp("evt-cache"))
    built = {name: specs.ALL[name]() for name in SPECS}
    for future in [build.prefetch(s) for s in built.values()]:
        future.result()
    return built


def inputs_for(spec: ir.KernelSpec, M: int, N: int, K: int) -> list[torch.Tensor]:
    """Random inputs; bool masks about half true."""
    inputs = random_inputs(spec, M, N, K)
    for n in spec.nodes:
        if isinstance(n, ir.AuxLoad) and n.dtype == "b8":
            inputs[n.input] = torch.randn(M, N, device="cuda") > 0
    return inputs


def poisoned_launch(spec: ir.KernelSpec, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    kernel = dispatch.kernel_for(spec)
    problem = kernel.guard(inputs)
    outs = [
        torch.full(shape, math.nan, device="cuda").to(ir.torch_dtype(d))
        for shape, d in zip(kernel.output_shapes(problem), spec.output_dtypes())
    ]
    return kernel.launch(problem, inputs, outs)


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("shape", [(512, 1024, 256), (200, 144, 72)], ids=["tiles", "residues"])
def test_kernel_matches_the_reference(kernels, name, shape):
    spec = kernels[name]
    inputs = inputs_for(spec, *shape)
    outs = poisoned_launch(spec, inputs)
    for i, (got, want, dtype) in enumerate(
        zip(outs, reference.run(spec, inputs), spec.output_dtypes(), strict=True)
    ):
        if dtype == "b8":  # h > 0 may flip where fp32 summation orders differ about 0
            assert (got != want).float().mean() < 1e-3, (name, i)
        else:  # NaN where the math gives NaN (log of a negative: y < -2 happens), nowhere else
            legit = want.float().isnan()
            assert not (got.float().isnan() & ~legit).any(), (name, i, "elements left unwritten")
            assert torch.equal(got.float().isnan(), legit), (name, i, "NaN pattern differs")
            ok = ~legit
            assert verify.relative_error(got[ok], want[ok]) <= verify.tolerance(spec, i), (name, i)


def test_16_bit_gelus_match_float64_on_the_device(kernels):
    """The exact GELU's bf16 and fp16 forms with the SFU's ex2 and reciprocal (the host test,
    tests/test_functors_host.py, checks the same formulas through libm) against float64 at every
    element, pre-activations from -14 to 14: relative error a small share of the dtype's unit
    roundoff (bf16 2^-8, fp16 2^-11) for |h| <= 12.5; past it the GELU is h itself above 0 and
    below 1e-33 below 0 (its tail a float32 subnormal from -12.97 on, which the SFU flushes)."""
    spec = kernels["gelu_forms"]
    inputs = random_inputs(spec, 1024, 2048, 64)
    inputs[2] = torch.linspace(-14, 14, 2048, device="cuda").to(torch.bfloat16)
    d, h, gelu_f16 = poisoned_launch(spec, inputs)
    z = h.double()
    want = z * 0.5 * torch.special.erfc(-z / math.sqrt(2))
    normal = z.abs() <= 12.5
    assert normal.float().mean() > 0.8 and (~normal & (z < 0)).any() and (~normal & (z > 0)).any()
    for got, dtype, share in ((d, torch.bfloat16, 0.07), (gelu_f16, torch.float16, 0.11)):
        got = got.double()
        rel = (got - want).abs() / want.abs().clamp_min(1e-300)
        assert rel[normal].max() < share * torch.finfo(dtype).eps / 2, (dtype, float(rel[normal].max()))
        assert torch.equal(got[~normal & (z > 0)], z[~normal & (z > 0)])
        assert (got[~normal & (z < 0)].abs() < 1e-33).all()


def test_row_reduction_is_deterministic(kernels):
    spec = kernels["mlp_dgrad_gelu_bias"]
    inputs = inputs_for(spec, 4096, 1024, 256)
    first = poisoned_launch(spec, inputs)
    for _ in range(3):
        again = poisoned_launch(spec, inputs)
        assert all(torch.equal(a, b) for a, b in zip(first, again))

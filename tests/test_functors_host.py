"""evt's own elementwise functors (evt/templates/evt_functors.h) evaluated on the host: a small
program built by nvcc (host code only, a few seconds) prints each functor's value on a grid, and
the values are compared with torch in float64. The device path differs only in its reciprocal
and exp2 (MUFU, a few ulp); the GPU tier checks that one."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from evt.codegen.nvcc import nvcc_flags, nvcc_path

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found (PATH or $CUDA_HOME/bin)"),
]

PROGRAM = r"""
#include <cstdio>
#include "evt_functors.h"
int main() {
  for (int i = 0; i <= 40002; ++i) {
    float z = i < 40001 ? -10.0f + i * 5e-4f : (i == 40001 ? -0.0f : 0.0f);  // then both zeros
    std::printf("%.9g %.9g %.9g %.9g %.9g %.9g %.9g %.9g %.9g %.9g %.9g %.9g\n", z, evt::Gelu<float>{}(z),
                evt::GeluBackward<float>{}(1.0f, z), evt::Sigmoid<float>{}(2.0f * z),
                evt::Silu<float>{}(2.0f * z), evt::Exp<float>{}(2.0f * z),
                evt::GeluForBf16<float>{}(z), evt::GeluForF16<float>{}(z),
                evt::GeluTanh<float>{}(z), evt::GeluTanhBackward<float>{}(1.0f, z),
                evt::SiluBackward<float>{}(1.0f, 2.0f * z),
                evt::SiluBackwardFromSigmoid<float>{}(1.0f, 2.0f * z, evt::Sigmoid<float>{}(2.0f * z)));
  }
}
"""


def run_host_program(directory: Path, source: str) -> str:
    """Build `source` (host code only, evt's and CUTLASS's include folders) with nvcc in
    `directory`, run it and return what it prints."""
    (directory / "p.cu").write_text(source)
    flags = [f for f in nvcc_flags() if f.startswith(("-I", "-std", "--expt"))]
    subprocess.run([nvcc_path(), *flags, "-o", str(directory / "p"), str(directory / "p.cu")],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    return subprocess.run([str(directory / "p")], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def values(tmp_path_factory):
    out = run_host_program(tmp_path_factory.mktemp("functors"), PROGRAM)
    return torch.tensor([[float(v) for v in line.split()] for line in out.splitlines()],
                        dtype=torch.float64)  # fmt: skip


def cdf(z: torch.Tensor) -> torch.Tensor:
    """Phi(z) in float64 through erfc: torch's own 0.5 (1 + erf(z / sqrt 2)) cancels to 0 below
    z = -8.3 even in float64."""
    return 0.5 * torch.special.erfc(-z / math.sqrt(2))


def test_exact_gelu_is_never_less_accurate_than_torchs_float32_gelu(values):
    """Against float64: float32's few ulp where GELU's values matter (|z| < 3), and at every z no
    worse than torch's own float32 formula, 0.5 z (1 + erf(z / sqrt 2)), whose cancellation loses
    digits as Phi(z) gets small (evt's normal tail is a degree-5 fit to the error relative to
    max(tail, 1e-2): scripts/fit_normal_tail.py)."""
    z, gelu = values[:, 0], values[:, 1]
    want = z * cdf(z)
    rel = (gelu - want).abs() / want.abs().clamp_min(1e-30)
    assert rel[z.abs() < 3].max() < 2e-6  # float32's epsilon is 1.2e-7
    assert rel[z.abs() < 5].max() < 2e-4
    assert rel.max() < 1e-2  # down to z = -10, where the value is -7.6e-23
    torch_rel = (F.gelu(z.float()).double() - want).abs() / want.abs().clamp_min(1e-30)
    assert torch_rel[z.abs() < 5].max() > 0.1  # what torch's float32 formula keeps there
    # worst case per quarter of z (pointwise, torch's rounding is at times exact by luck)
    window = torch.floor(z * 4).long() + 40
    worst = torch.zeros(81, dtype=rel.dtype).scatter_reduce(0, window, rel, "amax")
    torch_worst = torch.zeros(81, dtype=rel.dtype).scatter_reduce(0, window, torch_rel, "amax")
    ulp = 2.0**-23
    assert (worst <= torch_worst + 4 * ulp).all(), (worst - torch_worst).argmax() / 4 - 10
    near = z > -3  # torch's form in float64 keeps its digits: the two agree
    assert torch.allclose(gelu[near], F.gelu(z[near]), rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize("column, dtype, share", [(6, torch.bfloat16, 0.07), (7, torch.float16, 0.11)])
def test_16_bit_gelus_stay_within_a_tenth_of_their_dtypes_rounding(values, column, dtype, share):
    """The exact GELU for a result the graph rounds to bf16 / fp16 (a cheaper normal tail, one
    exp2 of a polynomial, of lower degree for bf16): relative error against float64 at every z
    (down to -10, where the value is -7.6e-23) a small share of that rounding's unit roundoff
    (bf16 2^-8, fp16 2^-11), so values the epilogue computes from it stay nearer the exact GELU
    than eager's rounded one. Rounded to the dtype it is the correctly rounded GELU but for under
    2% of z on each side of 0 (one ulp off: bf16 at most 1.4%, below z = -3; fp16 1.0% at
    -3 < z < 0); torch's float32 GELU, rounded, misses 81% / 25% below z = -3."""
    z, gelu = values[:, 0], values[:, column]
    want = z * cdf(z)
    rel = (gelu - want).abs() / want.abs().clamp_min(1e-30)
    unit = torch.finfo(dtype).eps / 2
    assert rel.max() < share * unit, (float(rel.max()), unit)
    assert rel.max() > 1e-6  # cheaper than the float32 fit: not float32's precision
    ours, exact = gelu.to(dtype).double(), want.to(dtype).double()
    subnormal_ulp = torch.finfo(dtype).tiny * torch.finfo(dtype).eps
    assert ((ours - exact).abs() <= 2 * unit * exact.abs() + subnormal_ulp).all()  # one ulp
    eager = F.gelu(z.float()).to(dtype).double()
    for part in (z < -3, (z >= -3) & (z < 0), (z >= 0) & (z < 3), z >= 3):
        assert (ours[part] != exact[part]).double().mean() < 0.02
    below = z < -3
    assert (ours[below] != exact[below]).double().mean() < (eager[below] != exact[below]).double().mean()


def test_exact_gelu_backward_matches_float64(values):
    """Absolute error against float64 under 3e-7, and on each of z < -3, -3..0, 0..3, z > 3
    no more than torch's float32 gelu_backward's (its 1 + erf cancels as evt's 0.5 + sign(z)
    (0.5 + r) does, both to a few 1e-8 absolute where the gradient is small)."""
    z, grad = values[:, 0], values[:, 2]
    want = cdf(z) + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    err = (grad - want).abs()
    assert err.max() < 3e-7
    x = z.clone().requires_grad_()
    F.gelu(x).sum().backward()  # torch's gelu_backward
    assert (grad - x.grad).abs().max() < 1e-6
    x32 = z.float().requires_grad_()
    F.gelu(x32).sum().backward()
    torch_err = (x32.grad.double() - want).abs()
    for part in (z < -3, (z >= -3) & (z < 0), (z >= 0) & (z < 3), z >= 3):
        assert err[part].max() <= torch_err[part].max(), (err[part].max(), torch_err[part].max())
    zeros = values[-2:]  # -0 and +0: Phi(0) = 0.5 from either side of the tail's select
    assert zeros[:, 0].abs().max() == 0 and (zeros[:, 2] - 0.5).abs().max() < 2e-7


def test_exp_sigmoid_and_silu_through_exp2_match_float64(values):
    """exp(x) as exp2(x log2 e), as Triton's exp: the rounding of x log2 e adds |x| 1e-7 to the
    relative error (here |x| <= 20); sigmoid, SiLU and SiLU's backward take it and the SFU
    reciprocal."""
    x = 2 * values[:, 0]
    sig, silu, exp = values[:, 3], values[:, 4], values[:, 5]
    assert ((exp - torch.exp(x)) / torch.exp(x)).abs().max() < 3e-6
    assert ((sig - torch.sigmoid(x)) / torch.sigmoid(x)).abs().max() < 3e-6
    want = x * torch.sigmoid(x)
    assert ((silu - want).abs() / want.abs().clamp_min(1e-30)).max() < 3e-6
    x64 = x.clone().requires_grad_()
    F.silu(x64).sum().backward()  # torch's silu_backward
    assert (values[:, 10] - x64.grad).abs().max() < 3e-6  # it crosses 0 at x = -1.28: absolute
    # from a shared sigmoid node (SwiGLU's backward): the same arithmetic, the same bits
    assert torch.equal(values[:, 11], values[:, 10])


def test_tanh_gelu_and_its_backward_match_torchs_in_float64(values):
    """The tanh-approximated GELU (torch's approximate="tanh") and its derivative, with the
    constants folded so that each step of the backward is one multiply or multiply-add: against
    torch's float64 formulas within float32's rounding of them (the host takes libm's tanhf where
    the device takes tanh.approx.f32), and no less accurate than torch's own float32 ones."""
    z, gelu, grad = values[:, 0], values[:, 8], values[:, 9]
    want = F.gelu(z, approximate="tanh")
    rel = (gelu - want).abs() / want.abs().clamp_min(1e-30)
    assert rel[z > -2].max() < 2e-6  # below, 0.5 (z + z t) cancels, as torch's float32 does
    assert (gelu - want).abs().max() < 2e-6
    x = z.clone().requires_grad_()
    F.gelu(x, approximate="tanh").sum().backward()
    err = (grad - x.grad).abs()
    x32 = z.float().requires_grad_()
    F.gelu(x32, approximate="tanh").sum().backward()
    torch_err = (x32.grad.double() - x.grad).abs()
    assert err.max() < 1e-6 and err.max() <= 2 * torch_err.max(), (err.max(), torch_err.max())


def test_tanh_gelu_backward_is_one_tanh_and_nine_multiply_adds(tmp_path):
    """grad * gelu_tanh'(z) in PTX: one tanh.approx.f32 and nine float multiplies and
    multiply-adds, grad's included (the same formula in CUTLASS's dGELU order took 12 and an add:
    an epilogue at K <= 1024 waits for each)."""
    ops = float_ops(tmp_path, "GeluTanhBackward", "a[threadIdx.x], b[threadIdx.x]")
    assert ops.count("tanh.approx.f32") == 1
    assert ops.count("fma.rn.f32") == 5 and ops.count("mul.f32") == 4
    # the rest: -t, which ptxas folds into its FFMA's operand (SASS: 4 FMUL and 5 FFMA)
    assert [op for op in ops if op not in ("tanh.approx.f32", "fma.rn.f32", "mul.f32")] == ["neg.f32"]


@pytest.mark.parametrize("functor, fma", [("GeluForBf16", 9), ("GeluForF16", 11)])
def test_16_bit_gelus_are_one_ex2_and_a_polynomial(tmp_path, functor, fma):
    """max(z, 0) - x 2^P(x) with x = min(|z|, 13) in PTX: one ex2.approx, P's multiply-adds and
    the last one, a min and a max.NaN; |z| and -x are operand modifiers in SASS (12 instructions
    for bf16, 14 for fp16: in a small-K GEMM's epilogue each one counts, session 48)."""
    ops = float_ops(tmp_path, functor, "a[threadIdx.x]")
    assert ops.count("ex2.approx.ftz.f32") == 1 and ops.count("fma.rn.f32") == fma
    rest = sorted(op for op in ops if op not in ("ex2.approx.ftz.f32", "fma.rn.f32"))
    assert rest == ["abs.f32", "max.NaN.f32", "min.f32", "neg.f32"], rest


SFU_KERNEL = r"""
#include "evt_functors.h"
__global__ void apply(float const* a, float const* b, float* out) {
  out[threadIdx.x] = evt::FUNCTOR<float>{}(ARGS);
}
"""


@pytest.mark.parametrize(
    "functor, args, ex2, rcp",
    [("Gelu", "a[threadIdx.x]", 1, 1), ("GeluForBf16", "a[threadIdx.x]", 1, 0),
     ("GeluForF16", "a[threadIdx.x]", 1, 0), ("GeluBackward", "a[threadIdx.x], b[threadIdx.x]", 1, 1),
     ("Sigmoid", "a[threadIdx.x]", 1, 1), ("Silu", "a[threadIdx.x]", 1, 1),
     ("SiluBackward", "a[threadIdx.x], b[threadIdx.x]", 1, 1),
     ("SiluBackwardFromSigmoid", "a[threadIdx.x], b[threadIdx.x], a[threadIdx.x + 1]", 0, 0),
     ("Exp", "a[threadIdx.x]", 1, 0)],
)  # fmt: skip
def test_special_functions_take_the_sfu_once_each(tmp_path, functor, args, ex2, rcp):
    """Each exponential and reciprocal is one SFU instruction with no libm wrapper (range
    reduction, subnormal fix-ups, IEEE division's slow path): in a GEMM epilogue at K <= 1024
    those wrappers cost more than the functions (session 13: 20-35% of the exact GELU's and
    softmax's epilogue instructions). GELU's backward shares its exp with the normal tail; the
    whole exact GELU backward stays within 25 float instructions (PTX, before ptxas)."""
    ops = ptx_ops(tmp_path, functor, args)
    assert ops.count("ex2.approx.ftz.f32") == ex2 and ops.count("rcp.approx.ftz.f32") == rcp
    assert not [op for op in ops if op.startswith(("div.", "ex2.approx.f32", "lg2."))], ops
    assert len(float_ops(tmp_path, functor, args, ops)) <= 25


def ptx_ops(tmp_path: Path, functor: str, args: str) -> list[str]:
    """The PTX instructions (opcodes) of a kernel applying `evt::FUNCTOR<float>` to `args`."""
    cu = tmp_path / f"{functor}.cu"
    cu.write_text(SFU_KERNEL.replace("FUNCTOR", functor).replace("ARGS", args))
    flags = [f for f in nvcc_flags() if f.startswith(("-I", "-std", "--expt", "-gencode"))]
    ptx = cu.with_suffix(".ptx")
    subprocess.run([nvcc_path(), *flags, "-ptx", "-o", str(ptx), str(cu)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    return [line.split()[0] for line in ptx.read_text().splitlines() if line.strip()[:1].isalpha()]


def float_ops(tmp_path: Path, functor: str, args: str, ops: list[str] | None = None) -> list[str]:
    """Its float32 arithmetic (moves, loads and stores left out)."""
    ops = ptx_ops(tmp_path, functor, args) if ops is None else ops
    return [op for op in ops if op.endswith(".f32") and not op.startswith(("mov", "ld", "st"))]

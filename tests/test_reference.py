"""The reference interpreter of the EVT IR, on hand-built kernel specs."""

import dataclasses
import math

import pytest
import torch

from evt import ir
from evt.runtime import reference
from evt.runtime.reference import COMPUTE_REFERENCE
from tests.graphs import rel_err

A = ir.Operand(0, False, "k")
B_T = ir.Operand(1, True, "k")  # a Linear weight [N, K] read as B = Wᵀ


def fc1_spec(dtype="f32"):
    nodes = (
        ir.AccFetch("acc"),
        ir.RowBroadcast("bias", 2, dtype),
        ir.Compute("z", "add", ("acc", "bias")),
        ir.AuxStore("z_store", "z", 1, dtype),
        ir.Compute("act", "gelu", ("z_store",)),
    )
    return ir.KernelSpec("fc1", ir.Gemm(A, B_T, dtype), nodes, "act", dtype, 3)


def test_every_compute_op_has_a_reference_of_its_arity():
    for name, op in ir.COMPUTE_OPS.items():
        fn = COMPUTE_REFERENCE[op.reference]
        args = [torch.randn(4) for _ in range(op.arity)]
        assert fn(*args).shape == (4,), name


def test_fc1_matches_torch():
    torch.manual_seed(0)
    x, w, b = torch.randn(24, 16), torch.randn(40, 16), torch.randn(40)
    d, z = reference.run(fc1_spec(), [x, w, b])
    z_want = x @ w.t() + b
    assert rel_err(z, z_want) < 1e-6
    assert rel_err(d, torch.nn.functional.gelu(z_want)) < 1e-6


def test_swapping_row_and_col_broadcast_changes_the_result():
    torch.manual_seed(1)
    x, w, b = torch.randn(32, 16), torch.randn(32, 16), torch.randn(32)  # M == N
    spec = fc1_spec()
    bias = spec.nodes[1]
    swapped = dataclasses.replace(
        spec, nodes=(spec.nodes[0], ir.ColBroadcast(bias.name, bias.input, bias.dtype), *spec.nodes[2:])
    )
    good = reference.run(spec, [x, w, b])[0]
    bad = reference.run(swapped, [x, w, b.view(32, 1)])[0]
    assert not torch.allclose(good, bad, atol=1e-3)


def test_bf16_rounds_once_at_the_store():
    torch.manual_seed(2)
    x, w, b = (t.bfloat16() for t in (torch.randn(24, 64), torch.randn(40, 64), torch.randn(40)))
    d, z = reference.run(fc1_spec("bf16"), [x, w, b])
    assert d.dtype == z.dtype == torch.bfloat16
    z32 = x.float() @ w.float().t() + b.float()
    assert torch.equal(z, z32.bfloat16())  # one rounding of the fp32 value
    assert torch.equal(d, torch.nn.functional.gelu(z32).bfloat16())  # gelu read the fp32 value


def test_gelu_backward_functors_match_autograd():
    z = torch.randn(1000, dtype=torch.float64, requires_grad=True)
    g = torch.randn(1000, dtype=torch.float64)
    for approx, op in [("none", "gelu_backward"), ("tanh", "gelu_tanh_backward")]:
        (want,) = torch.autograd.grad(torch.nn.functional.gelu(z, approximate=approx), z, g)
        got = COMPUTE_REFERENCE[op](g, z.detach())
        assert rel_err(got, want) < 1e-12, op


def test_aux_load_reads_through_strides():
    torch.manual_seed(3)
    x, w = torch.randn(8, 4), torch.randn(4, 6)  # B row-major (n-major)
    r = torch.randn(6, 8).t()  # an m-major aux tensor (a transposed view)
    nodes = (ir.AccFetch("acc"), ir.AuxLoad("r", 2, "f32", "m"), ir.Compute("y", "sub", ("acc", "r")))
    spec = ir.KernelSpec("k", ir.Gemm(A, ir.Operand(1, False, "n"), "f32"), nodes, "y", "f32", 3)
    (d,) = reference.run(spec, [x, w, r])
    assert rel_err(d, x @ w - r) < 1e-6 and d.stride() == (8, 1)  # 24-byte rows padded to 32


def test_json_roundtrip_and_signature_ignores_the_name():
    spec = fc1_spec("bf16")
    assert ir.from_json(ir.to_json(spec)) == spec
    assert dataclasses.replace(spec, name="other").signature() == spec.signature()
    assert "AuxStore(z)" in ir.format_tree(spec)


def test_fake_impl_works_in_a_fresh_process_from_the_json_alone():
    import subprocess
    import sys

    code = (
        "import torch, evt, sys\n"
        "from torch._subclasses import FakeTensorMode\n"
        "with FakeTensorMode():\n"
        "    x, w, b = torch.empty(24, 16), torch.empty(40, 16), torch.empty(40)\n"
        "    d, z = torch.ops.evt.fused_gemm(sys.argv[1], [x, w, b])\n"
        "print(tuple(d.shape), tuple(z.shape), d.dtype)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, ir.to_json(fc1_spec())],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(24, 40) (24, 40) torch.float32"


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 5, 3)])
def test_odd_shapes(m, n, k):
    x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    d, _ = reference.run(fc1_spec(), [x, w, b])
    assert rel_err(d, torch.nn.functional.gelu(x @ w.t() + b)) < 1e-6
    assert not math.isnan(d.sum().item())


def test_a_spec_with_a_repeated_node_name_is_refused():
    from evt.errors import CodegenError

    nodes = (ir.AccFetch("acc"), ir.ScalarBroadcast("c", 2.0), ir.ScalarBroadcast("c", 0.5),
             ir.Compute("x", "mul", ("acc", "c")))  # fmt: skip
    with pytest.raises(CodegenError, match=r"kernel k: node names \['c'\] repeat"):
        ir.KernelSpec("k", ir.Gemm(A, B_T, "f32"), nodes, "x", "f32", 2)

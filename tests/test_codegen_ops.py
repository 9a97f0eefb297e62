"""CPU tests of the C++ text for the newer functors, bool masks and row reductions."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
import tomllib

from evt.codegen.emit import render
from evt.codegen.nvcc import TEMPLATES
from evt.codegen.visitor import plan_visitor
from evt.ir import (
    COMPUTE_OPS,
    AccFetch,
    Compute,
    KernelSpec,
    RowReduction,
    ScalarBroadcast,
    format_tree,
)
from tests import specs

# evt_functors.h, and the functors inlined into only the kernels that use them (`emit._inlined`)
FUNCTORS = "".join(f.read_text() for f in (TEMPLATES / "evt_functors.h", TEMPLATES / "evt_cube.inc"))


@pytest.mark.parametrize("op", sorted(COMPUTE_OPS))
def test_every_evt_functor_is_defined_in_the_header(op):
    functor = COMPUTE_OPS[op].functor
    if functor.startswith("evt::"):
        name = functor.removeprefix("evt::")
        assert re.search(rf"(struct {name}\b|EVT_ELEMENTWISE\({name},|using {name} =)", FUNCTORS)


@pytest.mark.parametrize("op", sorted(COMPUTE_OPS))
def test_each_op_renders_its_functor(op):
    args = ("acc", "c", "c")[: COMPUTE_OPS[op].arity]
    nodes = (AccFetch("acc"), ScalarBroadcast("c", 0.5), Compute("x", op, args))
    text = render(KernelSpec("k", specs.LINEAR, nodes, "x", "bf16", 2))
    assert f"fusion::Sm90Compute<{COMPUTE_OPS[op].functor}, float, ElementCompute, kRound>" in text


def test_only_a_kernel_computing_a_cube_inlines_its_functor():
    """Cube (evt_cube.inc) is inlined where a kernel computes one: every other kernel's source,
    and so its cache key, stays as it was before cube was an epilogue op."""
    def kernel(op):
        nodes = (AccFetch("acc"), Compute("x", op, ("acc",)))
        return render(KernelSpec("k", specs.LINEAR, nodes, "x", "bf16", 2))

    assert "struct Cube {" in kernel("cube") and "struct Cube {" not in kernel("neg")


def test_activation_kernel_uses_each_functor():
    text = render(specs.activations())
    for op in ("silu", "sigmoid", "exp", "maximum", "tanh", "rsqrt", "where", "sigmoid_backward",
               "tanh_backward", "threshold_backward", "silu_backward", "minimum", "log", "gt"):
        assert f"fusion::Sm90Compute<{COMPUTE_OPS[op].functor}, float," in text, op
    assert "fusion::Sm90TopologicalVisitor<" in text  # h has many readers


def test_bool_masks_are_bytes_through_tma():
    text = render(specs.activations())
    assert "AuxStoreDescriptor<\n    EpilogueDescriptor, cute::Stride<int64_t, cute::_1, int64_t>, uint8_t>" in text
    assert "AuxLoadDescriptor<\n    EpilogueDescriptor, cute::Stride<int64_t, cute::_1, int64_t>, uint8_t>" in text
    assert "out_ptr<uint8_t>(outputs, 1)" in text and "in_ptr<uint8_t>(inputs, 3)" in text
    assert "Sm90Compute<evt::Greater, float, ElementCompute, kRound>" in text  # 0/1 in fp32


def test_row_reduction_is_the_root_of_a_chain():
    spec = specs.mlp_dgrad_gelu_bias()
    plan = plan_visitor(spec)
    assert not plan.dag and plan.root == "bias_grad"  # it passes gelu_backward on to D
    text = render(spec)
    assert re.search(
        r"using evt_bias_grad_op = evt::Sm90RowReductionDeferred<cutlass::plus, "
        r"evt::ReduceStat<false>, TileShape,\s*cutlass::bfloat16_t, "
        r"cute::Stride<cute::_0, cute::_1, cute::_0>>;.*\n"
        r"using evt_bias_grad = fusion::Sm90EVT<evt_bias_grad_op,\s*evt_gelu_backward>;",
        text,
    )
    assert "using CustomEVT = evt_bias_grad;" in text
    assert ("{out_ptr<cutlass::bfloat16_t>(outputs, 1), ElementCompute(0), evt_bias_grad_stride, "
            "evt_bias_grad_partials}") in text  # its partials: a slice of the workspace
    assert ("evt::finish_all(\n      stream,\n"
            "      evt_bias_grad_op::finish_job(launch->finishers.evt_bias_grad, M, N, L));") in text
    assert "load_stride(strides_of(output_strides, 1), M, N, L, evt_bias_grad_stride)" in text
    assert "2 outputs (D first)" in text


def test_row_reduction_in_the_tree_text():
    text = format_tree(specs.mlp_dgrad_gelu_bias())
    assert "bias_grad = RowReduction(sum over M; gelu_backward) -> out1 (bf16, [1, N])" in text


def test_reduction_of_a_stored_value_chains_after_the_store():
    spec = specs.mlp_dgrad_gelu_bias()
    nodes = spec.nodes[:-1] + (
        RowReduction("r0", "acc", 1, "f32"),
        RowReduction("r1", "gelu_backward", 2, "bf16"),
    )
    plan = plan_visitor(type(spec)("k", spec.gemm, nodes, "gelu_backward", "bf16", 3))
    # acc feeds gelu_backward through r0; D is gelu_backward through r1
    assert plan.root == "r1" and not plan.dag
    assert next(n for n in plan.nodes if n.name == "gelu_backward").args == ("r0", "z")


def test_every_template_and_runtime_source_ships_in_the_package():
    """Each file the kernels are rendered or built from (evt/templates, evt/runtime's C++)
    matches pyproject's package-data: before session 63 a wheel left the .inc files out, and
    every region whose kernel inlines one fell back to the unfused path there (only editable
    installs, as CI's and the GPU machine's, had them)."""
    root = Path(__file__).resolve().parent.parent
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["evt"]
    files = [f for d in ("templates", "runtime") for f in (root / "evt" / d).iterdir()
             if f.is_file() and f.suffix not in (".py", ".pyc")]  # fmt: skip
    missing = [f.name for f in files if not any(fnmatch.fnmatch(f"{f.parent.name}/{f.name}", g) for g in globs)]
    assert files and not missing, missing

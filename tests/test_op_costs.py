"""What each compute op costs an epilogue (`evt.codegen.op_costs`): the committed table covers
every op and is what the functors compile to (nvcc tier: their SASS counted), and the epilogue's
count is the sum of its nodes'."""

from __future__ import annotations

import pytest

from evt.codegen import op_costs
from evt.codegen.nvcc import nvcc_path
from evt.ir import COMPUTE_OPS, AccFetch, Compute, KernelSpec
from tests.specs import LINEAR


def test_the_table_covers_every_compute_op():
    assert set(op_costs.INSTRUCTIONS) == set(COMPUTE_OPS)
    assert op_costs.INSTRUCTIONS["identity"] == (0, 0)
    # libm's tanhf (ALU) against the SFU's exp: a written-out function costs what its nodes do
    assert op_costs.weighted("tanh") > op_costs.weighted("gelu_tanh") > op_costs.weighted("add")


def spec_of(*computes: Compute) -> KernelSpec:
    return KernelSpec("k", LINEAR, (AccFetch("acc"), *computes), computes[-1].name, "bf16", 2)


def test_an_epilogue_costs_its_nodes_and_their_roundings():
    spec = spec_of(Compute("t", "tanh", ("acc",)), Compute("y", "mul", ("t", "acc"), "bf16"))
    assert op_costs.epilogue_instructions(spec) == op_costs.weighted("tanh") + op_costs.weighted("mul") + 1


@pytest.mark.nvcc
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found (PATH or $CUDA_HOME/bin)")
@pytest.mark.skipif(op_costs.cuobjdump() is None, reason="cuobjdump not found: pip install nvidia-cuda-cuobjdump")
def test_the_table_is_what_the_functors_compile_to():
    """The functors compiled alone (a few seconds): a change to evt_functors.h or CUTLASS that
    moves a count must update the table (python -m evt.codegen.op_costs prints it)."""
    assert op_costs.measure() == op_costs.INSTRUCTIONS

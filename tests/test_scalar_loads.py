"""0-d tensor operands in an epilogue (`ir.ScalarLoad`: CUTLASS's `Sm90ScalarBroadcast` reading
the value through its pointer): a learned scalar (ReZero's alpha, a temperature, CLIP's logit
scale), or a Python float Dynamo turned into a graph input under dynamic shapes (in Hugging Face
GPT-2's tanh GELU, whose backward multiplies by it). Before session 57 an op reading one stayed
out of every region. A 0-d CPU tensor beside CUDA operands (as Dynamo makes of a Python float) is
read by the launcher and passed by value (session 58; before, it was not loaded)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import evt
from evt import ir
from evt.errors import LaunchError
from evt.graph.layouts import load_kind
from evt.runtime import build, guards
from tests.graphs import compile_reports, rel_err
from tests.nn_catalog import CASES, train_step
from tests.specs import scaled_by_scalar


def test_a_0d_tensor_loads_as_a_scalar():
    assert load_kind(torch.tensor(2.0), 8, 16) == "scalar_load"
    assert load_kind(torch.tensor(2.0, dtype=torch.bfloat16), 4, 8, 16) == "scalar_load"
    assert load_kind(torch.tensor(True), 8, 16) is None  # masks are full tensors only
    assert load_kind(torch.tensor(2.0, dtype=torch.float64), 8, 16) is None
    assert load_kind(torch.tensor(2.0), 8, 16) == "scalar_load"  # on the host: passed by value


def test_a_cpu_scalar_beside_cuda_operands_is_passed_by_value():
    """A 0-d CPU tensor beside CUDA operands (a Python float Dynamo made a graph input, a constant
    made without a device) is read by the launcher from host memory and passed in the kernel's
    parameters, as eager passes one: its first stride in the ABI says so."""
    spec = scaled_by_scalar()
    bf16 = dict(device="meta", dtype=torch.bfloat16)
    cpu, gpu, weight = torch.empty(()), torch.empty(64, 32, **bf16), torch.empty(48, 32, **bf16)
    assert guards.shape_reason(spec, [gpu, weight, cpu]) is None
    operand = torch.empty(64, 32, dtype=torch.bfloat16)
    reason = guards.shape_reason(spec, [operand, weight, torch.empty((), device="meta")])
    assert reason and "CPU tensor" in reason  # a CPU operand the kernel reads as a tensor
    a, b = torch.empty(64, 32, dtype=torch.bfloat16), torch.empty(48, 32, dtype=torch.bfloat16)

    def info(t, device="cuda:0"):
        return guards.TensorInfo(tuple(t.shape), tuple(t.stride()), t.dtype, 4096, device)

    host = guards.check(spec, [info(a), info(b), info(torch.tensor(2.0), "cpu")], store_align=None)
    assert host.input_strides[6:] == (guards.HOST_SCALAR, 0, 0)
    device = guards.check(spec, [info(a), info(b), info(torch.tensor(2.0))], store_align=None)
    assert device.input_strides[6:] == (0, 0, 0)
    with pytest.raises(LaunchError, match="several devices"):  # an operand on the host
        guards.check(spec, [info(a, "cpu"), info(b), info(torch.tensor(2.0))], store_align=None)


def test_the_kernel_reads_the_scalar_through_its_pointer_or_by_value():
    spec = scaled_by_scalar()
    assert ir.from_json(ir.to_json(spec)) == spec
    source = build.plan(spec).source
    assert "fusion::Sm90ScalarBroadcast<float>" in source
    args = "(inputs, input_strides, 2, 6)"  # input 2, its strides from the ABI's 6th
    assert f"{{{{scalar_value<float>{args}}}, {{scalar_ptr<float>{args}}}}}" in source
    assert "key_host_scalar<float>(key, inputs, input_strides, 2, 6);" in source


HOST_PROGRAM = r"""
#include <cstdio>
#include "evt_launch.h"
using namespace evt::launch;
int main() {
  float on_device = 0, on_host = 2.5f;  // (the kernel would read the first through its pointer)
  void const* ptrs[2] = {&on_device, &on_host};
  int64_t strides[6] = {0, 0, 0, kHostScalar, 0, 0};
  std::array<int64_t, 9 + 4 * 2> key{};
  key[9] = 111;
  key[10] = 222;
  key_host_scalar<float>(key, ptrs, strides, 0, 0);
  key_host_scalar<float>(key, ptrs, strides, 1, 3);
  int32_t bits;
  std::memcpy(&bits, &on_host, 4);
  std::printf("%g %d %g %d %d %d %d\n", scalar_value<float>(ptrs, strides, 1, 3),
              scalar_ptr<float>(ptrs, strides, 1, 3) == nullptr,
              scalar_value<float>(ptrs, strides, 0, 0),
              scalar_ptr<float>(ptrs, strides, 0, 0) == &on_device,
              key[9] == 111, key[10] == bits, scalar_ptr<float>(nullptr, nullptr, 1, 3) == nullptr);
}
"""


@pytest.mark.nvcc
def test_the_launcher_passes_a_host_scalar_by_value(tmp_path):
    """The launcher's helpers, built for the host: a host scalar's value goes into the kernel's
    arguments (its pointer null, so `Sm90ScalarBroadcast` takes `scalars[0]`) and into the launch's
    key in its pointer's place, so a new value builds new parameters; a device scalar's pointer
    goes to the kernel and stays in the key."""
    from evt.codegen.nvcc import nvcc_path
    from tests.test_functors_host import run_host_program

    if nvcc_path() is None:
        pytest.skip("nvcc not found (PATH or $CUDA_HOME/bin)")
    assert run_host_program(tmp_path, HOST_PROGRAM).split() == ["2.5", "1", "0", "1", "1", "1", "1"]


def test_the_launch_guard_checks_the_scalar():
    spec = scaled_by_scalar()
    a, b = torch.empty(64, 32, dtype=torch.bfloat16), torch.empty(48, 32, dtype=torch.bfloat16)
    info = guards.TensorInfo.of
    guards.check(spec, [info(a), info(b), info(torch.tensor(2.0))], store_align=None)
    with pytest.raises(LaunchError, match="0-d tensor"):
        guards.check(spec, [info(a), info(b), info(torch.ones(1))], store_align=None)
    with pytest.raises(LaunchError, match="built for f32"):
        guards.check(spec, [info(a), info(b), info(torch.tensor(2.0, dtype=torch.bfloat16))],
                     store_align=None)  # fmt: skip


def test_learned_scalars_join_the_epilogue():
    case = CASES["rezero_scalars"]
    torch.manual_seed(0)
    model = case.build(32)
    inputs = case.inputs(4, 8, 32)
    twin = copy.deepcopy(model)
    got: dict[str, torch.Tensor] = {}
    report = evt.explain(lambda *a: got.update(train_step(twin, a)), *inputs)
    fc2 = next(r for r in report.regions if r.spec.name == "evt_f1_addmm_1")
    assert sum(isinstance(n, ir.ScalarLoad) for n in fc2.spec.nodes) == 2, report
    want = train_step(model, inputs)
    assert max(rel_err(got[n], want[n]) for n in want) < 1e-5


def test_gpt2_tanh_gelu_backward_fuses_under_dynamic_shapes():
    """Hugging Face GPT-2's `NewGELUActivation` multiplies by math.sqrt(2 / math.pi), which
    Dynamo passes in as a 0-d tensor under dynamic shapes: the GELU's backward joins the dgrad's
    epilogue there as it does with static shapes."""
    pytest.importorskip("transformers")
    from tests.hf_catalog import CASES as HF
    from tests.hf_catalog import CPU, errors
    from tests.hf_catalog import train_step as hf_step

    torch.manual_seed(0)
    model = HF["gpt2"].build(CPU).train()
    inputs = HF["gpt2"].inputs(CPU)
    twin = copy.deepcopy(model)
    with compile_reports() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(twin, backend=evt.backend.evt_backend,
                                 options={"rest": "eager"}, dynamic=True)  # fmt: skip
        got = hf_step(twin, inputs, compiled)
    fused = [r.fused for rep in reports for r in rep.regions]
    assert sum("aten.tanh_backward" in f for f in fused) == 2, fused  # both layers
    assert max(errors(got, hf_step(model, inputs)).values()) < 1e-4

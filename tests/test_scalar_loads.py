"""0-d tensor operands in an epilogue (`ir.ScalarLoad`: CUTLASS's `Sm90ScalarBroadcast` reading
the value through its pointer): a learned scalar (ReZero's alpha, a temperature, CLIP's logit
scale), or a Python float Dynamo turned into a graph input under dynamic shapes (Hugging Face
GPT-2's `math.sqrt(2 / math.pi)` in its tanh GELU). Before session 57 an op reading one stayed
out of every region. A 0-d CPU tensor beside CUDA operands is not loaded (the kernel reads
device memory)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import evt
from evt import ir
from evt.errors import LaunchError
from evt.graph.layouts import GRAPH_DEVICE, load_kind
from evt.runtime import build, guards
from tests.graphs import rel_err
from tests.nn_catalog import CASES, train_step
from tests.specs import scaled_by_scalar


def test_a_0d_tensor_loads_as_a_scalar():
    assert load_kind(torch.tensor(2.0), 8, 16) == "scalar_load"
    assert load_kind(torch.tensor(2.0, dtype=torch.bfloat16), 4, 8, 16) == "scalar_load"
    assert load_kind(torch.tensor(True), 8, 16) is None  # masks are full tensors only
    assert load_kind(torch.tensor(2.0, dtype=torch.float64), 8, 16) is None


def test_a_cpu_scalar_beside_cuda_operands_is_not_loaded():
    token = GRAPH_DEVICE.set("cuda")
    try:
        assert load_kind(torch.tensor(2.0), 8, 16) is None
        assert load_kind(torch.empty((), device="meta"), 8, 16) == "scalar_load"
    finally:
        GRAPH_DEVICE.reset(token)
    cpu, gpu = torch.empty(()), torch.empty(8, 16, device="meta")
    weight = torch.empty(16, 16, device="meta")
    reason = guards.shape_reason(scaled_by_scalar(), [gpu, weight, cpu])
    assert reason and "CPU tensor" in reason


def test_the_kernel_reads_the_scalar_through_its_pointer():
    spec = scaled_by_scalar()
    assert ir.from_json(ir.to_json(spec)) == spec
    source = build.plan(spec).source
    assert "fusion::Sm90ScalarBroadcast<float>" in source
    assert "{{float(0)}, {in_ptr<float>(inputs, 2)}}" in source


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
    reports: list = []
    evt.backend._listeners.append(reports.append)
    try:
        compiled = torch.compile(twin, backend=evt.backend.evt_backend,
                                 options={"rest": "eager"}, dynamic=True)  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = hf_step(twin, inputs, compiled)
    finally:
        evt.backend._listeners.remove(reports.append)
    fused = [r.fused for rep in reports for r in rep.regions]
    assert sum("aten.tanh_backward" in f for f in fused) == 2, fused  # both layers
    assert max(errors(got, hf_step(model, inputs)).values()) < 1e-4

"""Common `torch.nn` modules (`tests/nn_catalog.py`) with real kernels on an SM90 GPU: each trains
one bf16 step through `backend="evt"` (Inductor for the rest) and matches fp32 eager as closely as
bf16 eager does, the loss and every gradient; no region may fall back. The CPU tier
(`test_nn_modules.py`) runs the same steps in float32 on the reference path.

All kernels are built first in one parallel batch, from a CPU capture of each module's regions at
the sizes the GPU runs (also `scripts/kernel_pack.py build --tests nn_modules`)."""

from __future__ import annotations

import copy

import pytest
import torch

import evt
from evt.runtime import dispatch, guards
from tests.graphs import rel_err
from tests.nn_catalog import CASES, train_step
from tests.test_gpu_mlp import fresh_dispatch  # noqa: F401  (autouse: env and dispatch reset per test)
from tests.test_gpu_models import build_in_cache

# attention written out keeps evt's kernels here (EVT_SDPA=0), as in the CPU capture: by default
# CUDA would run it as one SDPA call, and the captured regions would not be the ones that run
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("attention_as_written")]

B, S, D = 8, 32, 128
BF16 = torch.bfloat16
# the CPU runs SDPA as its math decomposition, whose GEMMs evt fuses; CUDA runs SDPA's own kernel
CPU_ONLY = {"sdpa_float_mask"}
FUSED = [name for name, case in CASES.items() if not case.unfused and name not in CPU_ONLY]


def make(name: str, device: str, dtype=BF16):
    torch.manual_seed(0)
    case = CASES[name]
    dtype = torch.float32 if case.float32 else dtype
    model = case.build(D).to(device=device, dtype=dtype)
    inputs = [t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device)
              for t in case.inputs(B, S, D)]  # fmt: skip
    return model, inputs


def capture(name: str) -> list[tuple]:
    """(spec, (M, N, K, L)) of each region of `name`'s bf16 training step, captured on the CPU at
    the GPU's sizes."""
    model, inputs = make(name, "cpu")
    report = evt.explain(lambda *a: train_step(model, a), *inputs)
    return report.kernels()


def captured(names=FUSED) -> dict[str, list[tuple]]:
    """The regions of each fusing catalog module in `names`, captured on the CPU: what the
    `regions` fixture builds (also `scripts/kernel_pack.py build --tests nn_modules`, all of
    them, without a GPU)."""
    with pytest.MonkeyPatch.context() as mp:  # as the tests run (the fixture is theirs alone)
        mp.setenv("EVT_SDPA", "0")
        return {name: capture(name) for name in names}


# the module compiled autograd trains
AUTOGRAD_CASE = "encoder_pre_norm_gelu"


@pytest.fixture(scope="module")
def regions(request, tmp_path_factory) -> dict[str, list[tuple]]:
    """The kernels of the modules the session's selected tests train (`-k` picks a few: the CPU
    capture of all of them alone takes minutes)."""
    names = set()
    for item in request.session.items:
        if item.module is request.module:
            callspec = getattr(item, "callspec", None)
            names.add(callspec.params["name"] if callspec else AUTOGRAD_CASE)
    return build_in_cache(tmp_path_factory, captured([n for n in FUSED if n in names]))


@pytest.mark.parametrize("name", FUSED)
def test_module_trains_like_fp32_eager(regions, name):
    model, inputs = make(name, "cuda")
    twin = copy.deepcopy(model)
    got = torch.compile(lambda *a: train_step(twin, a), backend="evt")(*inputs)
    assert dispatch.FALLBACKS == {}, dispatch.FALLBACKS
    # Inductor handed every region its inputs in the layouts its kernel was built for
    # (`record_input_layouts`): none was copied into rows at the launch
    assert not guards.RELAID, sorted(guards.RELAID)
    # kernels ran; not necessarily every region of the CPU capture: on CUDA a region may be
    # vetoed (an operand TMA cannot read: dense_experts' router GEMM at K = 4) or not exist
    # (LSTMCell and GRUCell run torch's fused cell kernels after their GEMMs). A module the
    # catalog says fuses nothing in bf16 is held to that: no region captured, no launch
    if CASES[name].bf16_unfused:
        assert not regions[name] and not dispatch.launches(), (name, CASES[name].bf16_unfused)
    else:
        assert dispatch.launches(), (name, regions[name])
    assert_like_fp32_eager(name, model, inputs, got)


def rel_errs(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> dict[str, float]:
    return {n: rel_err(got[n], want[n]) for n in want}


def assert_like_fp32_eager(name: str, model, inputs, got: dict[str, torch.Tensor],
                           step=train_step, errors=rel_errs) -> None:  # fmt: skip
    """`got` (evt's `step` of `model` on `inputs`) holds the loss and gradients of fp32 eager's
    step, each finite and within max(2e-2, 2x bf16 eager's error), as `errors` measures them."""
    bf16 = step(model, inputs)
    model32 = copy.deepcopy(model).float()
    want = step(model32, [t.float() if t.is_floating_point() else t for t in inputs])
    assert got.keys() == want.keys()
    errs, eager_errs = errors(got, want), errors(bf16, want)
    for n in want:
        assert torch.isfinite(got[n]).all(), n
        assert errs[n] < max(2e-2, 2 * eager_errs[n]), (name, n, errs[n], eager_errs[n])


def test_compiled_autograd_trains_like_fp32_eager(regions):
    """The backward compiled again by compiled autograd, evt's regions of the first compile
    among its calls (`test_nn_modules.test_compiled_autograd_trains_like_eager` on the CPU)."""
    name = AUTOGRAD_CASE
    model, inputs = make(name, "cuda")
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    with torch._dynamo.compiled_autograd._enable(torch.compile(backend="evt")):
        got = train_step(twin, inputs, torch.compile(twin, backend="evt"))
    assert dispatch.FALLBACKS == {}, dispatch.FALLBACKS
    assert dispatch.launches(), (name, regions[name])
    assert_like_fp32_eager(name, model, inputs, got)
    torch._dynamo.reset()


@pytest.mark.parametrize("name", ["dense_experts"])
def test_operand_expanded_over_the_batch(regions, monkeypatch, name):
    """The experts' first bmm reads the tokens expanded over the experts (`x.expand(4, -1, -1)`,
    L stride 0: the TMA descriptor reads the same rows for every batch; session 51). Its region
    launches (the profitability check off: these sizes are small) and the step matches."""
    monkeypatch.setenv("EVT_PROFIT", "0")
    test_module_trains_like_fp32_eager(regions, name)
    assert dispatch.launches()["evt_f1_bmm"], dispatch.launches()  # x.expand(4, -1, -1) @ w1


@pytest.mark.parametrize("name", ["linear_4d_residual", "einsum_heads", "mixer_block",
                                  "parallel_residual"])  # fmt: skip
def test_module_trains_like_fp32_eager_under_dynamic_shapes(regions, name):
    """`dynamic=True` at two input sizes: the module's compile at the first (symbolic sizes, its
    kernels built then) serves the second, every region launched at each (none falls back), each
    step like fp32 eager's."""
    from tests.graphs import compile_reports

    model, _ = make(name, "cuda")
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="evt", dynamic=True)
    with compile_reports(fresh=True) as reports:
        for batch, seq in ((B, S), (2 * B, S // 2)):
            torch.manual_seed(batch)
            inputs = [t.to(device="cuda", dtype=BF16) if t.is_floating_point() else t.cuda()
                      for t in CASES[name].inputs(batch, seq, D)]  # fmt: skip
            dispatch.reset()
            got = train_step(twin, inputs, compiled)
            assert dispatch.FALLBACKS == {}, (batch, seq, dispatch.FALLBACKS)
            fused = [r.spec.name for rep in reports for r in rep.regions]
            assert fused and set(fused) <= set(dispatch.launches()), (fused, dict(dispatch.launches()))
            assert_like_fp32_eager(name, model, inputs, got)
    assert len(reports) == 1, f"{len(reports)} compiles for two sizes"

"""Real Hugging Face models (`tests/hf_catalog.py`) with real kernels on an SM90 GPU: each trains
one bf16 step through `backend="evt"` (Inductor for the rest, SDPA for attention as the models
call it) and matches fp32 eager as closely as bf16 eager does, the loss and every gradient; no
region falls back, and kernels ran. The CPU tier (`test_hf_models.py`) runs them in float32 on
the reference path.

All kernels are built first in one parallel batch, from a CPU capture of each model's regions at
the sizes the GPU runs (also `scripts/kernel_pack.py build --tests hf_models`). The CPU runs SDPA
as its math decomposition, whose GEMMs evt fuses there: those kernels are built and not run."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch

import evt
from evt.runtime import dispatch, guards
from tests.graphs import compile_reports
from tests.hf_catalog import CASES, GPU, errors, train_step
from tests.test_gpu_mlp import fresh_dispatch  # noqa: F401  (autouse: env and dispatch reset per test)
from tests.test_gpu_models import build_in_cache
from tests.test_gpu_nn_modules import assert_like_fp32_eager

pytest.importorskip("transformers")
pytestmark = pytest.mark.gpu

BF16 = torch.bfloat16
# the decoders that differ in what evt fuses (LLaMA's, Qwen3's norms on q and k, Gemma's tanh
# GELU gate, Mixtral's experts, each token routed to all of them: `hf_catalog`'s comment), GPT-2,
# BERT, T5 (relative position bias, ReLU), ViT, Gemma 2 (tanh soft-capped scores and logits),
# BLOOM (ALiBi), DeBERTa-v2 (disentangled attention), Swin (windowed attention) and Falcon
# (multi-query heads taken by constant list indices: `constant_indices_as_slices`)
NAMES = ["gpt2", "bert", "llama", "qwen3", "gemma", "mixtral_dense", "t5", "vit", "gemma2", "bloom",
         "deberta_v2", "swin", "falcon"]  # fmt: skip


def make(name: str, device: str, dtype=BF16):
    torch.manual_seed(0)
    case = CASES[name]
    model = case.build(GPU).train().to(device=device, dtype=dtype)
    inputs = [t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device)
              for t in case.inputs(GPU)]  # fmt: skip
    return model, inputs


def reported_step(model, inputs, dynamic: bool = True) -> tuple[dict[str, torch.Tensor], list]:
    """One training step of `model` compiled by evt (afresh: a cache hit reports no regions):
    its loss and gradients and evt's reports."""
    torch._dynamo.reset()
    with compile_reports(fresh=True) as reports:
        compiled = torch.compile(lambda *a: train_step(model, a), backend="evt", dynamic=dynamic)
        return compiled(*inputs), reports


def captured_dynamic() -> dict[str, list[tuple]]:
    """GPT-2's regions under `dynamic=True`, captured on the CPU at the GPU's sizes: its LM head's
    dgrad keeps the final norm's backward (`fold_whole_slices`); its tanh GELU is the native one
    there too (`tanh_gelu_to_native` takes √(2/π) at the value Dynamo traced it with)."""
    model, inputs = make("gpt2", "cpu")
    _, reports = reported_step(model, inputs)
    return {"gpt2_dynamic": [(s, p) for rep in reports for s, p in rep.kernels()
                             if not guards.static_reason(s)]}  # fmt: skip


def captured(names=NAMES, dynamic: bool = True) -> dict[str, list[tuple]]:
    """(spec, (M, N, K, L)) of each region of each model's bf16 training step, captured on the CPU
    at the GPU's sizes: what the `regions` fixture builds (also `scripts/kernel_pack.py build
    --tests hf_models`, without a GPU)."""
    out = {}
    for name in names:
        model, inputs = make(name, "cpu")
        report = evt.explain(lambda *a, m=model: train_step(m, a), *inputs)
        # the CPU forms regions CUDA vetoes for a static reason (T5's float32 attention GEMMs:
        # no TF32 kernels by default, `guards.tf32_reason`); those run unfused there, not built
        out[name] = [(s, p) for s, p in report.kernels() if not guards.static_reason(s)]
    return out | (captured_dynamic() if dynamic and "gpt2" in names else {})


@pytest.fixture(scope="module")
def regions(request, tmp_path_factory) -> dict[str, list[tuple]]:
    """The kernels of the models the session's selected tests train."""
    names = {item.callspec.params["name"] for item in request.session.items
             if item.module is request.module and hasattr(item, "callspec")}  # fmt: skip
    dynamic = any(item.name.startswith("test_gpt2_under") for item in request.session.items)
    wanted = [n for n in NAMES if n in names or (dynamic and n == "gpt2")]
    return build_in_cache(tmp_path_factory, captured(wanted, dynamic))


@pytest.mark.parametrize("name", NAMES)
def test_model_trains_like_fp32_eager(regions, name):
    model, inputs = make(name, "cuda")
    twin = copy.deepcopy(model)
    got = torch.compile(lambda *a: train_step(twin, a), backend="evt")(*inputs)
    assert dispatch.FALLBACKS == {}, dispatch.FALLBACKS
    assert not guards.RELAID, sorted(guards.RELAID)
    assert dispatch.launches(), (name, regions[name])
    assert_like_fp32_eager(name, model, inputs, got, train_step, errors)


def test_gpt2_under_dynamic_shapes_fuses_what_static_shapes_do(regions):
    """GPT-2 with `dynamic=True`: a region for each GEMM static shapes fuse, each taking at least
    those ops (the LM head's dgrad keeps the final norm's backward, `fold_whole_slices`; x̂
    recomputed from bf16 x), each launched, and the step like fp32 eager's. (Dynamo traces the
    tanh GELU's math.pi as an input: `tanh_gelu_to_native` takes its value and guards on it,
    so both compiles fuse the native GELU, session 63.)"""
    model, inputs = make("gpt2", "cuda")
    _, static = reported_step(copy.deepcopy(model), inputs, dynamic=False)
    dispatch.reset()
    got, reports = reported_step(copy.deepcopy(model), inputs)
    assert dispatch.FALLBACKS == {}, dispatch.FALLBACKS

    def fused(reps) -> dict[str, Counter]:  # casts aside: a bf16 rounding may be a store there
        return {r.spec.name: Counter(op for op in r.fused if op != "prims.convert_element_type")
                for rep in reps for r in rep.regions}  # fmt: skip

    want, have = fused(static), fused(reports)
    assert have.keys() == want.keys() and all(want[n] <= have[n] for n in want), (want, have)
    launched = dispatch.launches()
    assert all(launched[n] for n in have), (launched, list(have), regions["gpt2_dynamic"])
    assert_like_fp32_eager("gpt2", model, inputs, got, train_step, errors)

"""Common `torch.nn` modules (`tests/nn_catalog.py`) through the whole pipeline, CPU tier: one
float32 training step with evt (its regions run by the reference interpreter) against eager, the
loss and every gradient; and evt fuses something in each module's step but those the catalog
says it does not (and why)."""

from __future__ import annotations

import copy
import functools
import warnings

import pytest
import torch

import evt
from tests.graphs import rel_err
from tests.nn_catalog import CASES, train_step

B, S, D = 4, 8, 32


def fallbacks(caught) -> list[str]:
    """evt's warnings among `caught`: a region left unfused (it would still match eager)."""
    return [str(w.message) for w in caught if str(w.message).startswith("evt:")]


def explained_step(model, inputs, step=train_step):
    """`step` of a copy of `model` on `inputs` through `evt.explain` (regions on the reference
    path): its result and the report; no region may have fallen back."""
    twin = copy.deepcopy(model)
    result: dict[str, torch.Tensor] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = evt.explain(lambda *a: result.update(step(twin, a)), *inputs)
    assert not fallbacks(caught), fallbacks(caught)
    return result, report


@pytest.mark.parametrize("name", list(CASES))
def test_module_trains_like_eager(name):
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build(D)
    inputs = case.inputs(B, S, D)
    result, report = explained_step(model, inputs)
    if case.unfused:  # as the catalog says, and why
        assert not report.regions, f"{name}: fuses now ({case.unfused!r} no longer holds)\n{report}"
    else:
        assert report.regions, f"{name}: nothing fused\n{report}"
    assert not report.fallbacks, report.fallbacks
    want = train_step(model, inputs)
    assert result.keys() == want.keys()
    errs = {n: rel_err(result[n], want[n]) for n in want}
    assert max(errs.values()) < case.tol, errs


@pytest.mark.parametrize("name", ["encoder_pre_norm_gelu", "einsum_heads", "baddbmm_alpha_beta",
                                  "attention_padding_mask", "tied_label_smoothing",
                                  "parallel_residual", "column_statistics", "linear_4d_residual",
                                  "mixer_block", "sdpa_float_mask"])  # fmt: skip
def test_module_trains_like_eager_with_dynamic_shapes(name):
    """`dynamic=True` and two input sizes: one compile with symbolic sizes serves both (evt's
    passes add no guard: `B * S == 32` compared with `==` compiled again at the second size), it
    has as many regions as the static compile, and each step matches eager."""
    from tests.graphs import compile_reports

    case = CASES[name]
    torch.manual_seed(0)
    model = case.build(D)
    static = len(explained_step(model, case.inputs(B, S, D))[1].regions)
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(twin, backend=evt.backend.evt_backend, options={"rest": "eager"},
                             dynamic=True)  # fmt: skip
    with compile_reports() as reports:
        for batch, seq in ((B, S), (2 * B, S // 2)):
            torch.manual_seed(batch)
            inputs = case.inputs(batch, seq, D)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = train_step(twin, inputs, compiled)
            assert not fallbacks(caught), fallbacks(caught)  # an unfused region would still match eager
            want = train_step(model, inputs)
            errs = {n: rel_err(got[n], want[n]) for n in want}
            assert max(errs.values()) < 1e-4, (batch, seq, errs)
    assert len(reports) == 1, f"{len(reports)} compiles for two sizes"
    assert len(reports[0].regions) == static, reports[0]
    torch._dynamo.reset()


def test_compiled_autograd_trains_like_eager():
    """Compiled autograd traces the backward's calls, evt's fused regions among them, into a graph
    of its own and compiles it with evt again: those calls carry no spec there (session 51: the
    kernel prefetch raised KeyError and the step failed)."""
    case = CASES["encoder_pre_norm_gelu"]
    torch.manual_seed(0)
    model = case.build(D)
    inputs = case.inputs(B, S, D)
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    backend = functools.partial(evt.backend.evt_backend, options={"rest": "eager"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch._dynamo.compiled_autograd._enable(torch.compile(backend=backend)):
            got = train_step(twin, inputs, torch.compile(twin, backend=backend))
    assert not fallbacks(caught), fallbacks(caught)
    want = train_step(model, inputs)
    errs = {n: rel_err(got[n], want[n]) for n in want}
    assert max(errs.values()) < 1e-4, errs
    torch._dynamo.reset()


def test_operand_expanded_over_the_batch_fuses():
    """`bmm(x.expand(E, -1, -1), w)` (dense experts) reads x with L stride 0, as TMA can
    (session 51; before, such a bmm stayed with torch): its ReLU joins the bmm's epilogue, and
    the step matches eager (test_module_trains_like_eager)."""
    case = CASES["dense_experts"]
    torch.manual_seed(0)
    model = case.build(D)
    inputs = case.inputs(B, S, D)
    report = evt.explain(lambda *a: train_step(model, a), *inputs)
    fused = {r.name: r.fused for r in report.regions}
    assert fused.get("evt_f1_bmm") == ["aten.relu"], report


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.bf16_unfused])
def test_module_the_catalog_says_fuses_nothing_in_bf16_does_not(name):
    """The GPU tier's bf16 step of such a module, captured on the CPU at the GPU's sizes, has no
    region (the GPU test holds the module to that; a change either way is seen here first)."""
    from tests.test_gpu_nn_modules import captured

    assert captured([name])[name] == [], CASES[name].bf16_unfused

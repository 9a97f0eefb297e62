"""The built-in GPT-2 and BERT models (`evt.examples`), CPU tier: a whole training step (forward,
cross-entropy, backward) through evt's `rest="eager"` route, every region run by the reference
interpreter, against eager (loss and every parameter gradient); and what evt fuses in them, so
coverage cannot shrink silently. `FLOOR` holds today's counts: raise it when fusion improves.

Each model is compiled once per dtype (a module-scoped cache): fp32 for the comparison with eager
at fp32 tolerance, bf16 for what the GPU tier runs (the regions differ: casts join them), where
every region's inputs also pass the kernel guards, so the GPU tier cannot fall back on a layout.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass

import pytest
import torch

import evt
from evt import ir
from evt.cli import main
from evt.examples import (
    EXAMPLES,
    GPT2,
    SMALL,
    Bert,
    Example,
    Llama,
    _bert,
    _gpt2,
    bert_inputs,
    gpt2_inputs,
)
from evt.explain import Report
from evt.partition import solve_cache
from evt.report import coverage
from evt.runtime import guards, reference
from tests.graphs import compile_reports, rel_err

F32, BF16 = torch.float32, torch.bfloat16

# the example GPT-2 spells its attention out; these tests are about evt's own kernels for it and
# their floors
pytestmark = pytest.mark.usefixtures("attention_as_written")

TOL_F32 = 1e-4  # as the other CPU-tier comparisons with eager
MODELS = {
    "gpt2": (lambda: GPT2(SMALL, tied=True), lambda: gpt2_inputs(SMALL, "cpu")),
    "gpt2-untied": (lambda: GPT2(SMALL, tied=False), lambda: gpt2_inputs(SMALL, "cpu")),
    "bert": (lambda: Bert(SMALL, "mlm"), lambda: bert_inputs(SMALL, "cpu", "mlm")),
    "bert-cls": (lambda: Bert(SMALL, "cls"), lambda: bert_inputs(SMALL, "cpu", "cls")),
    "llama": (lambda: Llama(SMALL), lambda: gpt2_inputs(SMALL, "cpu")),
}
# (forward kernels, ops fused into them, backward kernels, ops fused into them) today
# bf16: widening casts read only outside a region are not fused (evt/partition/narrow_outputs.py:
# Inductor folds them into their readers for free; fused, they doubled the bytes stored), so the
# bf16 floors count fewer ops and backward regions than the casts once made
FLOOR = {
    ("gpt2", F32): (5, 7, 4, 28),
    ("gpt2", BF16): (5, 8, 3, 6),
    ("gpt2-untied", F32): (5, 7, 4, 28),
    ("bert", F32): (5, 6, 5, 36),
    ("bert", BF16): (5, 8, 5, 40),
    ("bert-cls", F32): (6, 7, 4, 22),
}
GEMMS = {"gpt2": (9, 18), "gpt2-untied": (9, 18), "bert": (8, 16), "bert-cls": (8, 16)}


@dataclass
class Run:
    report: Report
    loss: torch.Tensor
    grads: dict[str, torch.Tensor]
    guard_failures: dict[str, str]  # region -> why its kernel would refuse these inputs
    guarded: set[str]  # the regions whose inputs were shown to the guards


def train(model: torch.nn.Module, inputs: tuple) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    loss = model(*inputs)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def guard_checked(failures: dict[str, str], guarded: set[str]):
    """The reference path, after asking the kernel guards about the same inputs: the regions run
    go into `guarded`, the guards' refusals into `failures` (region -> why)."""
    original = reference.run

    def checked(spec: ir.KernelSpec, tensors):
        guarded.add(spec.name)
        try:
            if reason := guards.static_reason(spec):
                raise ValueError(reason)
            guards.check(spec, [guards.TensorInfo.of(t) for t in tensors])
        except Exception as e:  # noqa: BLE001 - recorded, asserted on by the callers
            failures[spec.name] = f"{type(e).__name__}: {e}"
        return original(spec, tensors)

    return checked


@functools.cache
def run(name: str, dtype: torch.dtype, nested: bool = False) -> Run:
    """One evt training step of model `name` (seeded), with what `evt.explain` reports; `nested`:
    with attention's heads read in place (`EVT_NESTED_BATCH=1`, experimental)."""
    build, inputs = MODELS[name]
    torch.manual_seed(0)
    model = build().to(dtype)
    # solutions cached from other tests' isomorphic components are equally good but may break
    # ties differently; the assertions below describe this graph's own solve
    solve_cache.clear()
    out: list = []
    failures: dict[str, str] = {}
    guarded: set[str] = set()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reference, "run", guard_checked(failures, guarded))
        mp.setenv("EVT_NESTED_BATCH", "1" if nested else "0")
        report = evt.explain(lambda *args: out.append(train(model, args)), *inputs())
    ((loss, grads),) = out
    return Run(report, loss, grads, failures, guarded)


def eager(name: str, dtype: torch.dtype) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    build, inputs = MODELS[name]
    torch.manual_seed(0)
    return train(build().to(dtype), inputs())


def grad_err(name: str, got: dict, want: dict) -> float:
    """Max error of gradient `name` relative to its largest element; for GPT-2's key bias, whose
    gradient is 0 (softmax ignores a per-query constant: only rounding remains), relative to the
    query bias gradient's largest element instead."""
    scale = want[name.replace("attn.k.bias", "attn.q.bias")].double().abs().max().clamp_min(1e-12)
    return ((got[name].double() - want[name].double()).abs().max() / scale).item()


def regions(r: Run, side: str, anchor: str, *ops: str) -> list:
    """The `side` regions anchored on `anchor` (e.g. "bmm") whose fused ops include `ops`."""
    return [
        x for x in r.report.regions
        if x.side == side and x.anchor == f"aten.{anchor}" and all(f"aten.{o}" in x.fused for o in ops)
    ]  # fmt: skip


def computes(region, op: str) -> list[ir.Compute]:
    return [n for n in region.spec.nodes if isinstance(n, ir.Compute) and n.op == op]


def bias_gradients(region) -> list[str]:
    """What the region's sums over M (bias gradients) sum."""
    return [n.arg for n in region.spec.nodes if isinstance(n, ir.RowReduction)]


# --- the training step against eager -----------------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_training_step_matches_eager_fp32(name):
    got = run(name, F32)
    loss, grads = eager(name, F32)
    assert got.report.fallbacks == {}
    assert set(got.grads) == set(grads) and all(g is not None for g in got.grads.values())
    errs = {"loss": rel_err(got.loss, loss)}
    errs.update({n: grad_err(n, got.grads, grads) for n in grads})
    assert max(errs.values()) < TOL_F32, errs


def norm_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-12)).item()


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_training_step_in_bf16_is_as_close_to_fp32_as_eager(name):
    """The GPU tier's criterion, on the reference interpreter (which rounds as the kernels do):
    per gradient (and the loss), evt's bf16 error against fp32 over eager's bf16 error, geomean
    over 3 seeds (weights and inputs), below 2. At this size one seed's error is rounding noise
    (either side is 3x the other on some seed and parameter), so one seed cannot tell a bias."""

    def evt_step(model, x):
        out: list = []
        evt.explain(lambda *args: out.append(train(model, args)), *x)
        return out[0]

    geomean = error_ratios(
        name, lambda m, x: train(m.to(BF16), x), lambda m, x: evt_step(m.to(BF16), x)
    )
    assert max(geomean.values()) < 2.0, sorted(geomean.items(), key=lambda kv: -kv[1])[:5]


def error_ratios(name: str, eager_step, evt_step) -> dict[str, float]:
    """Per gradient (and the loss): evt's error against the fp32 step over eager's, geomean over
    seeds 0-2 (weights and inputs). `eager_step(model, inputs)` and `evt_step` take a fresh fp32
    model and return (loss, gradients), as `train` does."""
    build, inputs = MODELS[name]
    logs: dict[str, list[float]] = {}
    for seed in range(3):
        torch.manual_seed(seed)
        state = build().state_dict()
        torch.manual_seed(100 + seed)
        x = inputs()

        def fresh(state=state):
            m = build()
            m.load_state_dict(state)
            return m

        loss32, grads32 = train(fresh(), x)
        loss_e, grads_e = eager_step(fresh(), x)
        solve_cache.clear()
        loss, grads = evt_step(fresh(), x)
        pairs = {"loss": (loss, loss_e, loss32)}
        pairs.update({n: (grads[n], grads_e[n], g) for n, g in grads32.items() if g.norm() > 0})
        for n, (got, eager_got, ref) in pairs.items():
            ratio = norm_err(got, ref) / max(norm_err(eager_got, ref), 1e-3)
            logs.setdefault(n, []).append(math.log(ratio))
    return {n: math.exp(sum(v) / len(v)) for n, v in logs.items()}


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_bf16_regions_pass_the_kernel_guards(name):
    r = run(name, BF16)
    assert r.guarded == {x.name for x in r.report.regions}
    assert r.guard_failures == {}


# --- what is fused -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,dtype", list(FLOOR), ids=[f"{n}-{ir.dtype_name(d)}" for n, d in FLOOR]
)
def test_fused_region_counts_do_not_shrink(name, dtype):
    r = run(name, dtype)
    sides = {c.side: c for c in coverage(r.report.regions, r.report.unfused)}
    fwd, bwd = sides["forward"], sides["backward"]
    assert (fwd.gemms, bwd.gemms) == GEMMS[name]  # every GEMM is listed, fused or not
    got = (len(fwd.fused), fwd.fused_ops, len(bwd.fused), bwd.fused_ops)
    assert all(g >= f for g, f in zip(got, FLOOR[name, dtype])), (got, str(r.report))
    assert all(why for _, why in fwd.unfused + bwd.unfused)


@pytest.mark.parametrize("nested", [False, True], ids=["copies", "in-place"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
def test_gpt2_scores_fuse_the_scale_and_the_causal_mask(dtype, nested):
    (scores,) = regions(run("gpt2", dtype, nested), "forward", "bmm", "mul", "where")
    scale = [n.value for n in scores.spec.nodes if isinstance(n, ir.ScalarBroadcast)]
    assert (SMALL.dim // SMALL.heads) ** -0.5 in scale
    (mask,) = [n for n in scores.spec.nodes if isinstance(n, ir.AuxLoad) and n.dtype == "b8"]
    assert mask.broadcast_l  # one [S, S] bool mask read by every batch
    assert scores.spec.gemm.nested == nested  # q and k read in place from their projections


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
def test_gpt2_mlp(dtype):
    r = run("gpt2", dtype)
    (fc1,) = regions(r, "forward", "addmm", "gelu")
    assert computes(fc1, "gelu_tanh")
    assert len(regions(r, "forward", "addmm", "add")) >= 2  # attention and MLP residuals
    # GELU's backward in fc1's dgrad GEMM, fc1's bias gradient (a sum over M) with it
    (dgrad,) = regions(r, "backward", "mm", "gelu_backward", "sum")
    (gelu_bwd,) = computes(dgrad, "gelu_tanh_backward")
    assert bias_gradients(dgrad) == [gelu_bwd.name]


@pytest.mark.parametrize("nested", [False, True], ids=["copies", "in-place"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
def test_gpt2_attention_backward(dtype, nested):
    r = run("gpt2", dtype, nested)
    # softmax's backward dP * P stays out of the dP GEMM: Inductor's softmax-backward kernel
    # reads P anyway (evt/partition/trim_for_inductor.py); in place, the GEMM joins alone
    assert not regions(r, "backward", "bmm", "mul")
    given = [n for n, side, why in r.report.unfused if why.startswith("its epilogue moves fewer")]
    dp = [x for x in r.report.regions if x.side == "backward" and x.anchor == "aten.bmm"]
    assert (len(dp) == 4 and all(x.spec.gemm.nested for x in dp)) if nested else given
    # the input gradient of ln1 sums the q, k and v dgrads: two GEMM results loaded and added
    (dx,) = [x for x in regions(r, "backward", "mm", "add") if x.fused.count("aten.add") >= 2]
    loads = [n.name for n in dx.spec.nodes if isinstance(n, ir.AuxLoad)]
    assert sum(name.startswith("mm") for name in loads) == 2, ir.format_tree(dx.spec)


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_attention_gemms_read_their_heads_in_place(name):
    """Q·Kᵀ and P·V, and the backward's dV, dP, dQ and dK: each a region reading q, k, v (and
    the attention output's gradient) from their projections, with no copy before it (the ones
    without an epilogue join to free those copies); their inputs pass the kernel guards."""
    r = run(name, BF16, nested=True)
    bmm = [x for x in r.report.regions if x.anchor == "aten.bmm"]
    assert sorted(x.side for x in bmm) == ["backward"] * 4 + ["forward"] * 2
    assert all(x.spec.gemm.nested for x in bmm)
    assert not r.guard_failures and {x.spec.name for x in bmm} <= r.guarded


def test_gpt2_lm_head_fuses_the_fp32_cast_of_the_logits():
    (head,) = [
        x for x in run("gpt2", BF16).report.regions if x.side == "forward" and x.anchor == "aten.mm"
    ]
    assert "prims.convert_element_type" in head.fused


@pytest.mark.parametrize("nested", [False, True], ids=["copies", "in-place"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
def test_bert_layer(dtype, nested):
    r = run("bert", dtype, nested)
    (scores,) = regions(r, "forward", "bmm", "div")
    assert scores.spec.gemm.nested == nested  # q and k read in place from their projections
    # / sqrt(d) as * float32(1 / sqrt(d)), as eager's CUDA kernel divides by a number
    scale = (torch.tensor(1.0) / torch.tensor((SMALL.dim // SMALL.heads) ** 0.5)).item()
    assert any(n.value == scale for n in scores.spec.nodes
               if isinstance(n, ir.ScalarBroadcast))  # fmt: skip
    # the FFN's fc1; the MLM head transform's GELU goes to Inductor's LayerNorm kernel after it
    # (evt/partition/trim_for_inductor.py: the pre-activation is saved for the backward anyway)
    gelus = regions(r, "forward", "addmm", "gelu")
    # the exact GELU; in bf16 its form for a result rounded to bf16 (evt_functors.h, TailFit)
    exact = "gelu_for_bf16" if dtype == BF16 else "gelu"
    assert len(gelus) == 1 and all(computes(x, exact) for x in gelus)
    assert len(regions(r, "forward", "addmm", "add")) >= 2  # proj and fc2 with their residuals
    (dgrad,) = regions(r, "backward", "mm", "gelu_backward", "sum")
    (gelu_bwd,) = computes(dgrad, "gelu_backward")
    assert bias_gradients(dgrad) == [gelu_bwd.name]
    assert not regions(r, "backward", "bmm", "mul")  # dP * P: Inductor's (see the GPT-2 test)


def test_bert_classification_head_fuses_the_pooler():
    r = run("bert-cls", F32)
    assert regions(r, "forward", "addmm", "tanh")
    # tanh's backward and the pooler's bias gradient in the classifier's dgrad GEMM
    (dgrad,) = regions(r, "backward", "mm", "tanh_backward", "sum")
    (tanh_bwd,) = computes(dgrad, "tanh_backward")
    assert bias_gradients(dgrad) == [tanh_bwd.name]


def test_report_lists_every_gemm_per_side():
    r = run("gpt2", BF16)
    text = str(r.report)
    assert text.startswith("forward: 9 GEMMs, ") and "\nbackward: 18 GEMMs, " in text
    for x in r.report.regions:
        assert f"  {x.gemm} " in text and x.name in text
    for gemm, _, _ in r.report.unfused:
        assert f"  {gemm} " in text
    assert "gelu_backward, sum" in text and "unfused: " in text
    # a GEMM whose result another kernel's epilogue adds says so (the q, k, v dgrads)
    assert "is an input of evt_" in text


def test_dropout_is_optional():
    torch.manual_seed(0)
    model = GPT2(SMALL, dropout=0.1)
    model.train()
    ids, targets = gpt2_inputs(SMALL, "cpu")
    report = evt.explain(lambda i, t: model(i, t).backward(), ids, targets)
    assert report.regions and all(p.grad is not None for p in model.parameters())


# --- evt dump ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name,dtype", [("gpt2", "bf16"), ("bert", "bf16"), ("gpt2", "f32")])
def test_evt_dump_example(name, dtype, tmp_path, monkeypatch, capsys):
    build = {"gpt2": _gpt2, "bert": _bert}[name]
    small = Example(EXAMPLES[name].description, lambda d, dev: build(d, dev, sizes=SMALL))
    monkeypatch.setitem(EXAMPLES, name, small)
    explain_module = sys.modules["evt.explain"]  # (`evt.explain` the attribute is the function)
    reports = []
    explain = explain_module.explain
    monkeypatch.setattr(explain_module, "explain", lambda *a, **k: reports.append(explain(*a, **k)) or reports[-1])
    assert main(["dump", "--example", name, "--out", str(tmp_path), "--dtype", dtype]) == 0
    summary = (tmp_path / "summary.txt").read_text()
    assert summary == capsys.readouterr().out.split("wrote ")[0]
    assert "forward: " in summary and "backward: " in summary and "unfused: " in summary
    regions = sorted(p.name.removesuffix(".tree.txt") for p in tmp_path.glob("*.tree.txt"))
    assert regions and all(r in summary for r in regions)
    kernels = sorted(p.stem for p in tmp_path.glob("*.cu"))
    assert kernels == sorted(p.name.removesuffix(".nvcc.sh") for p in tmp_path.glob("*.nvcc.sh"))
    # every region has its kernel source, or the summary says why not (fp32: shared memory)
    missing = set(regions) - set(kernels)
    assert all(f"no kernel source: kernel {r}:" in summary for r in missing)
    if dtype == "bf16":
        assert not missing
    # each kernel's source is the one the backend builds at the example's shapes: the config
    # the summary names for it (the heuristic's first there), in the order it names
    from evt.codegen.config import TileConfig, heuristic
    from evt.runtime import dispatch

    lines = summary.split("kernels at the example's shapes")[1].splitlines()[1:]
    assert sorted(line.split()[0] for line in lines) == kernels
    # the kernel each region launches: its own, or its form less the stores the split left
    # unread (`Report.kernels`)
    launched = dict(zip((r.name for r in reports[0].regions), reports[0].kernels(), strict=True))
    first = {}  # kernel signature -> the first kernel of it, whose problem picks its config
    for spec, problem in launched.values():
        first.setdefault(dispatch.identity(spec), (spec, problem))
    for line in lines:
        name, label, problem = line.split()[:3]
        assert problem == "x".join(map(str, launched[name][1])), line
        spec, at = first[dispatch.identity(launched[name][0])]
        assert label == heuristic(spec, *at)[0].label, line
        source = (tmp_path / f"{name}.cu").read_text()
        assert source.startswith(f"// Generated by evt.codegen.emit: kernel {name}, tile {TileConfig.from_label(label).label}."), line


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_dynamic_shapes_train_like_eager(name):
    """`dynamic=True` (what a second batch size turns on): the step runs (it raised NameError on
    a symbolic size written into a view the pipeline made), fuses, and matches eager."""
    build, inputs = MODELS[name]
    torch.manual_seed(0)
    model = build()
    compiled = torch.compile(model, backend=evt.backend.evt_backend, options={"rest": "eager"},
                             dynamic=True)  # fmt: skip
    torch._dynamo.reset()
    with compile_reports() as reports:
        loss = compiled(*inputs())
    loss.backward()
    # views with symbolic sizes are rebuilt from the graph's SymInt inputs: the same regions as
    # with static shapes (GPT-2 9 regions / 35 ops, BERT 10 / 42)
    regions = [r for g in reports for r in g.regions]
    want_regions, want_ops = {"gpt2": (9, 35), "bert": (10, 42)}[name]
    assert len(regions) >= want_regions and sum(len(r.fused) for r in regions) >= want_ops, [
        (r.anchor, r.fused) for r in regions]  # fmt: skip
    if name == "gpt2":  # the causal mask (an [S, S] where), both residual adds; dP * P left out
        assert any("aten.where" in r.fused for r in regions if r.anchor == "aten.bmm")
        assert sum(r.fused == ["aten.add"] and r.side == "forward" for r in regions) == 2
        # the backward's bmms read their heads in place as with static shapes, GEMMs alone
        dp = [r for r in regions if r.anchor == "aten.bmm" and r.side == "backward"]
        assert len(dp) == 4 and all(r.spec.gemm.nested and not r.fused for r in dp), dp
    grads = {n: p.grad for n, p in model.named_parameters()}
    want_loss, want = eager(name, torch.float32)
    torch._dynamo.reset()
    assert rel_err(loss, want_loss) < 1e-4
    assert max(grad_err(n, grads, want) for n in want) < 1e-3


@pytest.mark.parametrize("name, dtype", [("gpt2", BF16), ("bert", BF16), ("gpt2", torch.float16)])
def test_autocast_training_step_is_as_close_to_fp32_as_eager(name, dtype):
    """Mixed precision as most training runs it: fp32 parameters, the step under
    `torch.autocast(dtype=bfloat16)` (or float16; its GEMMs in that type on casts of the fp32
    weights, the casts back in the backward). evt fuses regions into that graph, every region's inputs pass the
    kernel guards (the GPU tier would run kernels, not fall back), and its loss and gradients are
    as close to the fp32 step as eager's autocast step is (geomean over 3 seeds of the error
    ratio below 2, as the bf16 test above)."""

    def autocast_train(model, args):
        with torch.autocast("cpu", dtype=dtype):
            loss = model(*args)
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters()}

    def evt_step(model, x):
        out: list = []
        failures: dict[str, str] = {}
        guarded: set[str] = set()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(reference, "run", guard_checked(failures, guarded))
            report = evt.explain(lambda *a: out.append(autocast_train(model, a)), *x)
        assert report.fallbacks == {} and failures == {}, (report.fallbacks, failures)
        assert guarded == {r.name for r in report.regions}
        # GEMMs in the autocast type with epilogues (GPT-2 and BERT: 8 today), in both passes
        fused = [r for r in report.regions if r.spec.gemm.dtype == ir.dtype_name(dtype) and r.fused]
        assert len(fused) >= 8 and {r.side for r in fused} == {"forward", "backward"}, [
            (r.anchor, r.fused) for r in report.regions]  # fmt: skip
        loss, grads = out[0]
        assert all(g.dtype == torch.float32 for g in grads.values())  # fp32 parameters' gradients
        return loss, grads

    geomean = error_ratios(name, autocast_train, evt_step)
    assert max(geomean.values()) < 2.0, sorted(geomean.items(), key=lambda kv: -kv[1])[:5]


def test_a_train_and_evaluate_loop_matches_eager():
    """The loop a user writes: a compiled GPT-2 trained with SGD, evaluated under `model.eval()`
    and `torch.no_grad()` after each step (an inference graph, compiled beside the training
    one), then trained again: every loss and the final parameters as eager's, fp32, and evt's
    regions run in both graphs."""
    import copy

    torch.manual_seed(0)
    base = GPT2(SMALL)
    ids, targets = gpt2_inputs(SMALL, "cpu")

    def loop(model, fn) -> tuple[list[float], dict[str, torch.Tensor]]:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(2):
            model.train()
            opt.zero_grad()
            loss = fn(ids, targets)
            loss.backward()
            opt.step()
            model.eval()
            with torch.no_grad():
                losses += [loss.item(), fn(ids, targets).item()]
        return losses, {n: p.detach() for n, p in model.named_parameters()}

    eager = copy.deepcopy(base)
    want, want_params = loop(eager, eager)
    runs: dict[str, int] = {}

    model = copy.deepcopy(base)

    def counted(spec, tensors, original=reference.run):
        key = spec.name[:5] + ("" if model.training else " eval")  # evt_f... forward, evt_b... backward
        runs[key] = runs.get(key, 0) + 1
        return original(spec, tensors)

    torch._dynamo.reset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reference, "run", counted)
        got, got_params = loop(model, torch.compile(model, backend="evt", options={"rest": "eager"}))
    assert all(runs.get(k, 0) > 0 for k in ("evt_f", "evt_b", "evt_f eval")), runs
    assert all(math.isclose(g, w, rel_tol=1e-5) for g, w in zip(got, want, strict=True)), (got, want)
    assert max(rel_err(got_params[n], want_params[n]) for n in want_params) < 1e-5

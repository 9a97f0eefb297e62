"""The MLP on an SM90 GPU: real kernels against an fp32 eager reference, launch counts against
`evt.explain`, binary reuse across batch sizes, CUDA graphs, EVT_VERIFY, and each region's kernel
against the reference path with NaN-poisoned outputs.

Four kernels in all (fc1 + bias + GELU, fc2 + bias + residual, dgrad x GELU' + fc1's bias
gradient as a row reduction, dgrad + residual gradient), built in parallel once per session under
`$EVT_CACHE_DIR` (a temporary directory when unset). Every test asserts that no region fell back,
so a passing test ran real kernels.
"""

from __future__ import annotations

import copy
import math
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import evt
from evt import ir
from evt.examples import MLP
from evt.runtime import build, cache, dispatch, reference, verify

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent

DIM, HIDDEN, TOKENS = 256, 1024, 512
BF16 = torch.bfloat16


class Loss(nn.Module):
    """The MLP and its loss in one module, so every compiled graph has the same four regions."""

    def __init__(self):
        super().__init__()
        self.mlp = MLP(DIM, HIDDEN)

    def forward(self, x):
        return self.mlp(x).float().pow(2).mean()


def make_model(seed: int) -> Loss:
    torch.manual_seed(seed)
    return Loss().to("cuda", BF16)


def fresh_x(tokens: int = TOKENS) -> torch.Tensor:
    return torch.randn(tokens, DIM, device="cuda", dtype=BF16)


def step(fn, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Forward + backward through `fn`; the loss and every gradient, cloned."""
    for p in model.parameters():
        p.grad = None
    x = x.detach().clone().requires_grad_(True)
    loss = fn(x)
    loss.backward()
    out = {"loss": loss.detach().clone(), "x": x.grad.detach().clone()}
    out.update({n: p.grad.detach().clone() for n, p in model.named_parameters()})
    return out


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


def check_against_fp32(fn, model: Loss, x: torch.Tensor) -> None:
    """`fn` (a compiled `model`) vs fp32 eager, allowing what bf16 eager itself is off by."""
    got = step(fn, model, x)
    bf16 = step(model, model, x)
    model32 = copy.deepcopy(model).float()
    want = step(model32, model32, x.float())
    for name, ref in want.items():
        assert not got[name].isnan().any(), name
        err, eager_err = rel_err(got[name], ref), rel_err(bf16[name], ref)
        assert err < max(2e-2, 2 * eager_err), (name, err, eager_err)


def assert_kernels_ran(min_launches: int = 1) -> None:
    assert dispatch.FALLBACKS == {}, dispatch.FALLBACKS
    assert sum(dispatch.launches().values()) >= min_launches, dispatch.launches()


def cache_entries() -> set[str]:
    return {p.name for p in cache.root().iterdir() if len(p.name) == 64}


def mlp_specs() -> list[ir.KernelSpec]:
    """The bf16 MLP's four region specs, from a CPU capture."""
    regions = capture_step(BF16, tokens=64)
    assert len(regions) == 4, regions
    return [spec for spec, _ in regions]


def capture_step(dtype: torch.dtype, tokens: int = TOKENS) -> list[tuple]:
    """(spec, (M, N, K, L)) of each region of the MLP's training step in `dtype` at `tokens`,
    captured on the CPU: the kernels a compiled step at that size builds."""
    torch.manual_seed(0)
    model = Loss().to(dtype)
    x = torch.randn(tokens, DIM, dtype=dtype, requires_grad=True)  # its gradient: the 4th region
    report = evt.explain(lambda x: model(x).backward(), x)
    assert report.regions, str(report)
    return report.kernels()


def captured() -> dict[str, list[tuple]]:
    """The kernels this module's tests build, captured on the CPU (`scripts/kernel_pack.py build
    --tests mlp` builds them without a GPU): the `kernels` fixture's at the shape-blind default
    config (first: a kernel's config is chosen at the first shape seen), the compiled bf16 and
    fp16 steps' at the configs their shapes pick, and the fp32 step's TF32 forward kernels."""
    seen = {"default": [(spec, None) for spec in mlp_specs()]}
    seen["bf16"], seen["fp16"] = capture_step(BF16), capture_step(torch.float16)
    precision = torch.get_float32_matmul_precision()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVT_TF32", "1")
        torch.set_float32_matmul_precision("high")
        try:
            seen["tf32"] = capture_step(torch.float32)
        finally:
            torch.set_float32_matmul_precision(precision)
    return seen


@pytest.fixture(scope="session")
def kernels(tmp_path_factory) -> list[ir.KernelSpec]:
    """The MLP's region specs (from a CPU capture), their kernels built in parallel."""
    if not os.environ.get("EVT_CACHE_DIR"):
        os.environ["EVT_CACHE_DIR"] = str(tmp_path_factory.mktemp("evt-cache"))
    specs = mlp_specs()
    for future in [build.prefetch(s) for s in specs]:
        future.result()
    return specs


@pytest.fixture(autouse=True)
def fresh_dispatch(monkeypatch):
    monkeypatch.delenv("EVT_VERIFY", raising=False)
    monkeypatch.delenv("EVT_INJECT", raising=False)
    dispatch.reset()
    yield
    dispatch.reset()


@pytest.mark.parametrize("options", [{}, {"rest": "eager"}], ids=["inductor", "eager"])
def test_training_step_matches_eager(kernels, options):
    model = make_model(1)
    compiled = torch.compile(model, backend="evt", options=options)
    check_against_fp32(compiled, model, fresh_x())
    assert_kernels_ran(len(kernels))


def test_launches_equal_explained_regions(kernels):
    model = make_model(2)
    x = fresh_x().requires_grad_(True)
    report = evt.explain(lambda x: model(x).backward(), x)
    assert {r.side for r in report.regions} == {"forward", "backward"}
    assert dispatch.FALLBACKS == {}
    assert dict(dispatch.launches()) == {r.name: 1 for r in report.regions}


@pytest.mark.parametrize("dynamic", [False, None], ids=["static", "dynamic"])
def test_new_batch_size_reuses_binaries(kernels, dynamic, monkeypatch):
    """Static graphs recompiled per batch size reuse the first one's binaries. With dynamic=None
    the second batch size recompiles the graph with symbolic sizes, whose regions may differ
    (the partitioner sees symbolic sizes); every batch size after that reuses its kernels, and
    each step launches every region of the graph last compiled."""
    from evt import backend

    reports = []
    monkeypatch.setattr(backend, "_listeners", [*backend._listeners, reports.append])
    # an earlier test's graph of the same model would be replayed from Inductor's and
    # AOTAutograd's caches without evt's pass running (no report to count regions from)
    monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", False, raising=False)
    monkeypatch.setattr(torch._functorch.config, "enable_autograd_cache", False, raising=False)
    model = make_model(3)
    compiled = torch.compile(model, backend="evt", dynamic=dynamic)
    sizes = [TOKENS, 384, 640, 896]
    warm = 1 if dynamic is False else 2  # calls that may build kernels
    for tokens in sizes[:warm]:
        check_against_fp32(compiled, model, fresh_x(tokens))
    builds, entries = sum(build.BUILDS.values()), cache_entries()
    regions = len(reports[-1].regions)
    assert regions >= 3, str(reports[-1])
    for tokens in sizes[warm:]:
        launches = sum(dispatch.launches().values())
        check_against_fp32(compiled, model, fresh_x(tokens))
        assert_kernels_ran(launches + regions)
    assert sum(build.BUILDS.values()) == builds and cache_entries() == entries


def test_cuda_graphs(kernels):
    model = make_model(4)
    compiled = torch.compile(model, backend="evt", mode="reduce-overhead")

    def run(x):
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(x)

    for _ in range(3):  # warm-up, record, replay
        check_against_fp32(run, model, fresh_x())
    assert_kernels_ran(len(kernels))


@pytest.mark.parametrize("options", [{}, {"rest": "eager"}], ids=["inductor", "eager"])
def test_verify_mode(kernels, monkeypatch, options):
    monkeypatch.setenv("EVT_VERIFY", "1")
    model = make_model(5)
    step(torch.compile(model, backend="evt", options=options), model, fresh_x())
    assert_kernels_ran(len(kernels))


def random_inputs(spec: ir.KernelSpec, M: int, N: int, K: int) -> list[torch.Tensor]:
    """Fresh inputs laid out as the spec's majors and transposes say."""
    g = spec.gemm
    inputs: list[torch.Tensor | None] = [None] * spec.num_inputs
    inputs[g.a.input] = matrix(M, K, "mk".index(g.a.major), g.dtype, g.a.transposed)
    inputs[g.b.input] = matrix(K, N, "kn".index(g.b.major), g.dtype, g.b.transposed, K**-0.5)
    for n in spec.nodes:
        if isinstance(n, ir.AuxLoad):
            inputs[n.input] = matrix(M, N, "mn".index(n.major), n.dtype)
        elif isinstance(n, ir.RowBroadcast):
            inputs[n.input] = torch.randn(N, device="cuda").to(ir.torch_dtype(n.dtype))
        elif isinstance(n, ir.ColBroadcast):
            inputs[n.input] = torch.randn(M, 1, device="cuda").to(ir.torch_dtype(n.dtype))
    assert all(t is not None for t in inputs)
    return inputs  # type: ignore[return-value]


def matrix(rows, cols, unit: int, dtype: str, transposed=False, scale=1.0) -> torch.Tensor:
    """A logical rows x cols matrix whose dimension `unit` (0 rows, 1 cols) has unit stride,
    passed transposed when `transposed`."""
    shape = (rows, cols) if unit == 1 else (cols, rows)
    t = (torch.randn(shape, device="cuda") * scale).to(ir.torch_dtype(dtype))
    logical = t if unit == 1 else t.t()
    return logical.t() if transposed else logical


@pytest.mark.parametrize("shape", [(512, 1024, 256), (200, 136, 72)], ids=["tiles", "residues"])
def test_each_kernel_writes_every_element(kernels, shape):
    M, N, K = shape
    for spec in kernels:
        inputs = random_inputs(spec, M, N, K)
        kernel = dispatch.kernel_for(spec)
        problem = kernel.guard(inputs)
        poisoned = [
            torch.full(shape, math.nan, device="cuda", dtype=ir.torch_dtype(d))
            for shape, d in zip(kernel.output_shapes(problem), spec.output_dtypes())
        ]
        outs = kernel.launch(problem, inputs, poisoned)
        via_dispatch = dispatch.run(spec, inputs)
        expected = reference.run(spec, inputs)
        for i, dtype in enumerate(spec.output_dtypes()):
            assert not outs[i].isnan().any(), f"{spec.name} output {i}: elements left unwritten"
            tol = verify.TOLERANCE[dtype]
            assert verify.relative_error(outs[i], expected[i]) <= tol, (spec.name, i)
            assert verify.relative_error(via_dispatch[i], expected[i]) <= tol, (spec.name, i)
    assert_kernels_ran(len(kernels))


def test_misaligned_view_falls_back_once(kernels):
    spec = kernels[0]
    assert spec.gemm.a == ir.Operand(0, False, "k"), spec.gemm  # x [M, K], K-major
    inputs = random_inputs(spec, TOKENS, HIDDEN, DIM)
    wide = torch.randn(TOKENS, DIM + 8, device="cuda").to(BF16)
    inputs[0] = wide.narrow(1, 1, DIM)  # 2 bytes past a 16-byte boundary
    with pytest.warns(UserWarning, match=f"region {spec.name} runs unfused: guard failed"):
        outs = dispatch.run(spec, inputs)
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        outs_again = dispatch.run(spec, inputs)
    assert not [w for w in again if "evt:" in str(w.message)]  # one warning per region
    for got, again, want in zip(outs, outs_again, reference.run(spec, inputs), strict=True):
        assert torch.equal(got, want) and torch.equal(again, want)
    assert "16-byte" in dispatch.FALLBACKS[spec.name] and not dispatch.launches()


def test_fp32_model_on_tf32_kernels(monkeypatch):
    """An fp32 MLP with TF32 allowed (`set_float32_matmul_precision("high")`, EVT_TF32=1): its
    forward GEMMs (both operands K-major) run evt's TF32 kernels, the backward GEMMs stay
    unfused (an operand is not K-major), and the step matches fp32 eager within TF32's error."""
    monkeypatch.setenv("EVT_TF32", "1")
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        torch.manual_seed(5)
        model = Loss().to("cuda")
        x = torch.randn(TOKENS, DIM, device="cuda")
        got = step(torch.compile(model, backend="evt"), model, x)
        assert dispatch.FALLBACKS == {}, dispatch.FALLBACKS
        assert sum(dispatch.launches().values()) >= 2, dispatch.launches()  # fc1 and fc2 forward
        torch.set_float32_matmul_precision("highest")
        want = step(model, model, x)
    finally:
        torch.set_float32_matmul_precision(precision)
    for name, ref in want.items():
        assert not got[name].isnan().any(), name
        assert rel_err(got[name], ref) < 1e-2, (name, rel_err(got[name], ref))


def test_fp16_model_on_fp16_kernels(monkeypatch):
    """An fp16 MLP (fp32 accumulation): its four regions become f16 kernels (`EVT_PROFIT=0`: at
    this size the default check may leave a region to cuBLAS) and the step matches fp32 eager
    within twice what fp16 eager is off by."""
    monkeypatch.setenv("EVT_PROFIT", "0")
    torch.manual_seed(6)
    model = Loss().to("cuda", torch.float16)
    x = torch.randn(TOKENS, DIM, device="cuda", dtype=torch.float16)
    report = evt.explain(lambda x: model(x).backward(), x.clone().requires_grad_(True))
    assert len(report.regions) == 4 and {r.spec.gemm.dtype for r in report.regions} == {"f16"}
    dispatch.reset()
    check_against_fp32(torch.compile(model, backend="evt"), model, x)
    assert_kernels_ran(4)
    assert len(dispatch.launches()) == 4, dict(dispatch.launches())


@pytest.mark.parametrize("mode", [None, "reduce-overhead"], ids=["as_run", "cuda_graphs"])
def test_no_wait_trains_on_the_reference_path_until_the_kernels_are_built(tmp_path, monkeypatch, mode):
    """`EVT_WAIT_KERNELS=0` with an empty kernel cache (nvcc builds this test's kernels, ~40 s):
    the first steps run the regions' reference paths without a fallback recorded, every step
    matches fp32 eager, and once the builds end every region launches its kernel. Under CUDA
    graphs the capture waits for the kernels, so the replayed graph holds them."""
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path / "cold"))
    monkeypatch.setenv("EVT_WAIT_KERNELS", "0")
    monkeypatch.setattr(build, "_futures", {})  # no build this process already finished
    model = make_model(7)
    compiled = torch.compile(model, backend="evt", mode=mode)

    def run(x):
        if mode:
            torch.compiler.cudagraph_mark_step_begin()
        return compiled(x)

    check_against_fp32(run, model, fresh_x())
    assert dispatch.BUILDING and not dispatch.FALLBACKS, (dispatch.BUILDING, dispatch.FALLBACKS)
    if mode:  # warm-up ran on the reference path; the recording waits for the kernels
        check_against_fp32(run, model, fresh_x())
        assert_kernels_ran(4)
        for _ in range(2):  # replays
            check_against_fp32(run, model, fresh_x())
        return
    for _ in range(600):
        if set(dispatch.launches()) >= set(dispatch.BUILDING):
            break
        check_against_fp32(run, model, fresh_x())
        torch.cuda.synchronize()
        time.sleep(0.2)
    building = dict(dispatch.BUILDING)
    check_against_fp32(run, model, fresh_x())
    assert dispatch.BUILDING == building and set(dispatch.launches()) == set(building), (
        dict(dispatch.launches()), building)
    assert_kernels_ran(4)


def test_no_wait_loads_the_launch_path_when_its_build_ends(kernels, tmp_path):
    """`EVT_WAIT_KERNELS=0` and the C++ launch path still building after the compile (its host
    compiler sleeps 20 s first): in a process of its own (`tests/no_wait_launch_path.py`), the
    steps launch from Python, then from C++ once a step after the build has loaded it."""
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    slow = tmp_path / "slow-c++"
    slow.write_text(f'#!/bin/sh\n[ "$1" = --version ] || sleep 20\nexec {cxx} "$@"\n')
    slow.chmod(0o755)
    # the child's cache: the step's kernels, built, and no launch path (a cache that had kept
    # the one an earlier run built with this compiler would have it loaded at once: session 61)
    fresh = tmp_path / "cache"
    fresh.mkdir()
    for spec, problem in capture_step(BF16):
        future = dispatch.build_for(spec, problem)
        assert future is not None, spec.name
        entry = Path(future.result()).parent
        if not (fresh / entry.name).exists():
            shutil.copytree(entry, fresh / entry.name)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "CXX": str(slow), "EVT_WAIT_KERNELS": "0", "PYTHONPATH": path,
           "EVT_CACHE_DIR": str(fresh)}  # fmt: skip
    for var in ("EVT_INJECT", "EVT_VERIFY", "EVT_FAST_LAUNCH"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-m", "tests.no_wait_launch_path"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=500)  # fmt: skip
    print(proc.stdout)  # its three lines: when the first step ended, the load, the C++ launches
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert proc.stdout.count("ok:") == 3, proc.stdout

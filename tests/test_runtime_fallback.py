"""The dispatcher's fallback: every failure on the way to a launch runs the reference path, with one
warning per region. "CUDA mode" is forced on CPU tensors; the compiler, the loader and the launch
are fakes, so no test here needs nvcc or a GPU."""

from __future__ import annotations

import dataclasses
import threading
import warnings

import pytest
import torch

from evt import ir
from evt.errors import LaunchError
from evt.runtime import build, dispatch, launch, reference
from tests.runtime_fakes import (
    FakeEmitter,
    count,
    failing_compile,
    fake_compile,
    fc1_eager,
    fc1_inputs,
    fc1_spec,
)


def fake_load(path):
    return launch.Library(path, "kfake", None, None, None)


def reference_launch(self, problem, inputs, outputs=None):
    return reference.run(self.spec, inputs)


@pytest.fixture
def cuda_mode(tmp_path, monkeypatch):
    for var in ("EVT_INJECT", "EVT_VERIFY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EVT_TEST_COUNTER", str(tmp_path / "calls"))
    monkeypatch.setattr(build, "EMITTER", FakeEmitter)
    monkeypatch.setattr(build, "_futures", {})
    monkeypatch.setattr(dispatch, "INJECT", {})
    monkeypatch.setattr(dispatch, "COMPILE_FN", fake_compile)
    monkeypatch.setattr(dispatch, "use_kernels", lambda inputs: True)
    monkeypatch.setattr(launch, "check_device", lambda tensors: None)
    monkeypatch.setattr(launch, "load", fake_load)
    monkeypatch.setattr(launch.Kernel, "launch", reference_launch)
    dispatch.reset()
    yield tmp_path
    dispatch.reset()


def run_recording(spec, inputs, times=3):
    """Run `times` times; (outputs of each run, evt warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [dispatch.run(spec, inputs) for _ in range(times)]
    return outs, [str(w.message) for w in caught if str(w.message).startswith("evt:")]


def assert_reference_and_eager(outs, spec, inputs):
    expected = reference.run(spec, inputs)
    eager = fc1_eager(inputs)
    for out in outs:
        for got, ref, eag in zip(out, expected, eager, strict=True):
            assert torch.equal(got, ref)
            torch.testing.assert_close(got.float(), eag.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("stage", ["render", "compile", "load", "guard", "launch"])
def test_injected_failure_runs_unfused_with_one_warning(cuda_mode, monkeypatch, stage):
    monkeypatch.setitem(dispatch.INJECT, stage, "boom")
    spec, inputs = fc1_spec(), fc1_inputs()
    outs, warned = run_recording(spec, inputs)
    assert_reference_and_eager(outs, spec, inputs)
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"evt: region {spec.name} runs unfused: {stage} failed")
    assert "boom" in warned[0] and "boom" in dispatch.FALLBACKS[spec.name]
    assert dispatch.launches()[spec.name] == 0


def test_injection_through_the_environment(cuda_mode, monkeypatch):
    monkeypatch.setenv("EVT_INJECT", "compile:nvcc exploded")
    _, warned = run_recording(fc1_spec(), fc1_inputs())
    assert len(warned) == 1 and "compile failed" in warned[0] and "nvcc exploded" in warned[0]
    assert count(cuda_mode / "calls") == 0


def test_custom_op_falls_back_too(cuda_mode, monkeypatch):
    monkeypatch.setitem(dispatch.INJECT, "load", "no library")
    spec, inputs = fc1_spec(), fc1_inputs()
    with pytest.warns(UserWarning, match="region evt_f0_addmm runs unfused: load failed"):
        outs = torch.ops.evt.fused_gemm(ir.to_json(spec), inputs)
    assert_reference_and_eager([outs], spec, inputs)


def test_success_counts_launches(cuda_mode):
    spec, inputs = fc1_spec(), fc1_inputs()
    outs, warned = run_recording(spec, inputs)
    assert warned == [] and dispatch.FALLBACKS == {}
    assert dispatch.launches()[spec.name] == 3 and count(cuda_mode / "calls") == 1
    assert_reference_and_eager(outs, spec, inputs)


def test_compile_failure_is_remembered_and_warned_per_region(cuda_mode, monkeypatch):
    monkeypatch.setattr(dispatch, "COMPILE_FN", failing_compile)
    inputs = fc1_inputs()
    _, warned_a = run_recording(fc1_spec("evt_f0_addmm"), inputs)
    _, warned_b = run_recording(fc1_spec("evt_f7_addmm_5"), inputs)
    assert len(warned_a) == len(warned_b) == 1 and count(cuda_mode / "calls") == 1
    assert "evt_f7_addmm_5 runs unfused: compile failed" in warned_b[0]
    assert "kernel.cu" in warned_a[0] and "evt_missing_functor" in warned_a[0]


def test_guard_failure_is_per_call(cuda_mode):
    spec = fc1_spec()
    x, w, b = fc1_inputs(k=40)
    misaligned = [x.narrow(1, 1, 32), w.narrow(1, 0, 32), b]
    outs, warned = run_recording(spec, misaligned, times=2)
    assert len(warned) == 1 and "guard failed" in warned[0] and "16-byte" in warned[0]
    assert_reference_and_eager(outs, spec, misaligned)
    _, warned = run_recording(spec, fc1_inputs(), times=1)
    assert warned == [] and dispatch.launches()[spec.name] == 1


@pytest.mark.parametrize("wait", ["1", "0"])
def test_fp32_falls_back_with_reason_and_never_compiles(cuda_mode, monkeypatch, wait):
    monkeypatch.setenv("EVT_WAIT_KERNELS", wait)  # "0": a static reason starts no build either
    spec, inputs = fc1_spec(dtype="f32"), fc1_inputs(dtype=torch.float32)
    precision = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        _, warned = run_recording(spec, inputs)
    finally:
        torch.set_float32_matmul_precision(precision)
    reason = "fp32 needs TF32 kernels; torch.get_float32_matmul_precision() is 'highest'"
    assert warned == [f"evt: region {spec.name} runs unfused: {reason}"]
    assert dispatch.FALLBACKS == {spec.name: reason} and count(cuda_mode / "calls") == 0


def test_cpu_tensors_take_the_reference_path_silently(monkeypatch):
    dispatch.reset()
    monkeypatch.setitem(dispatch.INJECT, "render", "never reached")
    spec, inputs = fc1_spec(), fc1_inputs()
    outs, warned = run_recording(spec, inputs, times=1)
    assert warned == [] and dispatch.FALLBACKS == {} and not dispatch.launches()
    assert_reference_and_eager(outs, spec, inputs)


def test_verify_accepts_a_correct_kernel(cuda_mode, monkeypatch):
    monkeypatch.setenv("EVT_VERIFY", "1")
    _, warned = run_recording(fc1_spec(), fc1_inputs(), times=1)
    assert warned == []


@pytest.mark.parametrize("damage", ["offset", "nan"])
def test_verify_rejects_a_wrong_kernel(cuda_mode, monkeypatch, damage):
    def wrong_launch(self, problem, inputs, outputs=None):
        out = reference.run(self.spec, inputs)
        out[1] = (
            out[1] + 1
            if damage == "offset"
            else out[1].index_fill(0, torch.tensor([3]), float("nan"))
        )
        return out

    monkeypatch.setenv("EVT_VERIFY", "1")
    monkeypatch.setattr(launch.Kernel, "launch", wrong_launch)
    with pytest.raises(LaunchError, match=r"region evt_f0_addmm output 1 \(bf16\).*max error"):
        dispatch.run(fc1_spec(), fc1_inputs())


def test_missing_nvcc_is_a_compile_failure(cuda_mode, monkeypatch):
    from evt.codegen import nvcc

    monkeypatch.setattr(nvcc, "nvcc_path", lambda: None)
    monkeypatch.setattr(dispatch, "COMPILE_FN", None)
    _, warned = run_recording(fc1_spec(), fc1_inputs())
    assert len(warned) == 1 and "runs unfused: compile failed: nvcc not found" in warned[0]


def test_a_max_of_bf16_values_has_bf16_tolerance():
    """A max picks one element: a bf16 value rounded the other way by a different accumulation
    order shows at full size in an fp32 max, so it gets bf16's tolerance; sums and means (which
    average such flips out) keep their own dtype's, as does D."""
    from evt.runtime import verify
    from tests import specs

    spec = specs.row_statistics()  # bf16 logits; outputs: D, softmax max/sum, mean/var, ...
    tol = [verify.tolerance(spec, i) for i in range(len(spec.output_dtypes()))]
    bf16, f32 = verify.TOLERANCE["bf16"], verify.TOLERANCE["f32"]
    # D (bf16), max, sum, mean, var, row sum, row max (bf16), max over M, sum of everything
    assert tol == [bf16, bf16, f32, f32, f32, f32, bf16, bf16, f32]


MLM_HEAD_NODES = (ir.AccFetch("acc"), ir.RowBroadcast("bias", 2, "bf16"),
                  ir.Compute("logits", "add", ("acc", "bias")),
                  ir.Compute("rounded", "identity", ("logits",), "bf16"),
                  ir.Compute("widened", "identity", ("rounded",), "f32"),
                  ir.SoftmaxStats("stats", "widened", "f32", max_output=1, sum_output=2))  # fmt: skip
BF16_GEMM = ir.Gemm(ir.Operand(0, False, "k"), ir.Operand(1, True, "k"), "bf16")


def _mlm_head() -> ir.KernelSpec:
    """Cross-entropy's statistics of BERT's MLM head: logits + bias stored as bf16 D, widened to
    fp32, their softmax max and sum."""
    return ir.KernelSpec("mlm_head", BF16_GEMM, MLM_HEAD_NODES, "logits", "bf16", 3)


def test_a_max_through_a_widening_cast_keeps_the_rounded_dtypes_tolerance():
    """Cross-entropy's statistics of BERT's MLM head: logits rounded to bf16, widened to fp32,
    then the softmax max in fp32 (session 21: EVT_VERIFY failed the step on one bf16 ulp, 3.4e-3
    relative, against f32's 2e-3); the sum keeps f32's."""
    from evt.runtime import verify

    spec = _mlm_head()
    tol = [verify.tolerance(spec, i) for i in range(3)]
    assert tol == [verify.TOLERANCE["bf16"], verify.TOLERANCE["bf16"], verify.TOLERANCE["f32"]]
    # D the fp32 accumulator: the statistics read bf16-rounded logits the kernel does not store.
    # A kernel summing in another order rounds some logit, a row's max among them, one ulp the
    # other way; its sum moves with it beyond f32's tolerance, within what the reference's own
    # flips move it (`rounding_slack`); a sum that is off still fails
    unstored = ir.KernelSpec("mlm_stats", BF16_GEMM, MLM_HEAD_NODES, "acc", "f32", 3)
    torch.manual_seed(1)
    a, b, bias = 4 * torch.randn(64, 64), torch.randn(256, 64), torch.randn(256)
    inputs = [a.bfloat16(), b.bfloat16(), bias.bfloat16()]
    want = reference.run(unstored, inputs)
    got = reference.run(unstored, inputs, acc_spread=verify.FLIP / 2)
    assert (got[1] != want[1]).any()  # a max moved by its flip
    assert verify.relative_error(got[2], want[2]) > 10 * verify.tolerance(unstored, 2)
    verify.check(unstored, inputs, got)
    with pytest.raises(LaunchError, match="output 2"):
        verify.check(unstored, inputs, [got[0], got[1], 1.05 * got[2]])  # a sum that is off


def test_verify_allows_what_a_rounding_flip_moves_downstream():
    """Cross-entropy's gradient recomputed in the epilogue: exp(bf16(logits) - lse), the logits
    not stored. At logits of ~250 a bf16 ulp is 2: a kernel whose fp32 accumulator differs from
    the reference's (another summation order) rounds some logit the other way and its exp moves
    by e^2; the reference run again with its accumulator moved by -+ FLIP sum_k |a_k b_k| gives
    each element that slack, and nothing beyond it passes."""
    from evt.runtime import verify

    nodes = (*MLM_HEAD_NODES[:5], ir.ColBroadcast("lse", 3, "f32"),
             ir.Compute("shifted", "sub", ("widened", "lse")), ir.Compute("p", "exp", ("shifted",)))  # fmt: skip
    spec = ir.KernelSpec("ce_grad", BF16_GEMM, nodes, "p", "bf16", 4)
    torch.manual_seed(0)
    a, b, bias = (8 * torch.randn(64, 64)).bfloat16(), torch.randn(256, 64).bfloat16(), torch.randn(256).bfloat16()
    logits = (a.float() @ b.float().T + bias.float()).bfloat16().float()
    inputs = [a, b, bias, torch.logsumexp(logits, 1, keepdim=True)]
    want = reference.run(spec, inputs)
    kernel = reference.run(spec, inputs, acc_spread=verify.FLIP / 2)  # another summation order
    assert verify.relative_error(kernel[0], want[0]) > 10 * verify.tolerance(spec, 0)  # flips
    verify.check(spec, inputs, kernel)
    off = kernel[0].float() + 0.05 * kernel[0].float().amax()  # a kernel that is wrong
    with pytest.raises(LaunchError, match="beyond what its roundings' flips move it"):
        verify.check(spec, inputs, [off.bfloat16()])
    # no rounding before the exp: no slack, the dtype's tolerance alone
    plain = ir.KernelSpec("exp", BF16_GEMM, (ir.AccFetch("acc"), ir.Compute("e", "exp", ("acc",))), "e", "bf16", 2)
    assert verify.rounding_slack(plain, [a, b], reference.run(plain, [a, b])) == [None]


def test_verify_passes_every_spec_against_its_own_reference():
    """Every hand-built spec (batched, nested, statistics, aux loads and stores, masks, TF32)
    checked against its reference outputs and against a kernel summing in another order: the
    slack and restated statistics are shaped right for each, and a mask's bits
    that flip near their threshold are within its slack (a bool output's tolerance was missing:
    EVT_VERIFY raised KeyError on a stored ReLU mask)."""
    from evt.runtime import verify
    from evt.testing.inputs import make_inputs
    from tests import specs

    for make in specs.ALL.values():
        spec = make()
        inputs = make_inputs(spec, 48, 40, 32, seed=1, normal=True)
        want = reference.run(spec, inputs)
        verify.check(spec, inputs, want)
        # a right kernel summing in another order: its accumulator a few fp32 ulps off (2^-20
        # of sum_k |a_k b_k|, the size of sqrt(K) 2^-24 at these K; here every element moved
        # one way, which a real summation order does not do to a sum over the whole output)
        verify.check(spec, inputs, reference.run(spec, inputs, acc_spread=2.0**-20))
        damaged = [t.clone() for t in want]
        damaged[0].view(-1)[0] = damaged[0].float().abs().max() * 2 + 1
        with pytest.raises(LaunchError, match="output 0"):
            verify.check(spec, inputs, damaged)


def test_a_max_through_an_aux_store_keeps_the_rounded_dtypes_tolerance():
    """An aux store passes its argument on as it is: a max reading bf16-rounded values through
    one keeps bf16's tolerance; the store's own rounding (to f16 here) is its copy's, not the
    max's."""
    from evt.runtime import verify

    nodes = (ir.AccFetch("acc"), ir.Compute("rounded", "identity", ("acc",), "bf16"),
             ir.AuxStore("saved", "rounded", 1, "f16"),
             ir.ColReduction("row_max", "saved", 2, "f32", op="max"))  # fmt: skip
    spec = ir.KernelSpec("saved_max", BF16_GEMM, nodes, "acc", "f32", 3)
    assert [verify.tolerance(spec, i) for i in range(3)] == [
        verify.TOLERANCE["f32"], verify.TOLERANCE["f16"], verify.TOLERANCE["bf16"]]


def test_verify_takes_softmax_statistics_of_large_logits_from_the_stored_logits():
    """BERT's MLM head at initialization has logits of ~100 (bf16 ulp 0.5): one the kernel's
    accumulation order rounds the other way moves its exp(x - m) by 65%, so the statistics are
    checked against the kernel's own stored bf16 logits (checked themselves at bf16's
    tolerance), not the reference's (session 22: the sum off by 0.099 against f32's 2e-3)."""
    from evt.runtime import verify

    spec = _mlm_head()
    assert verify.stored_copy(spec, "widened") == 0
    torch.manual_seed(0)
    a, b, bias = 8 * torch.randn(8, 64), torch.randn(32, 64), torch.randn(32)
    inputs = [a.bfloat16(), b.bfloat16(), bias.bfloat16()]
    want = reference.run(spec, inputs)
    # the kernel rounds each row's second largest logit one ulp up (its f32 value sat at a
    # rounding midpoint) and computes its statistics from what it stored
    d = want[0].float().clone()
    rows = torch.arange(d.shape[0])
    second = d.topk(2, dim=1).indices[:, 1]
    x = d[rows, second]
    d[rows, second] = x + torch.ldexp(torch.ones_like(x), torch.frexp(x).exponent - 8)
    m = d.amax(1)
    got = [d.bfloat16(), m, torch.exp(d - m[:, None]).sum(1)]
    assert verify.relative_error(got[2], want[2]) > 10 * verify.tolerance(spec, 2)
    verify.check(spec, inputs, got)
    with pytest.raises(LaunchError, match="output 2"):
        verify.check(spec, inputs, [got[0], got[1], 1.01 * got[2]])  # a sum that is off
    with pytest.raises(LaunchError, match="output 0"):  # logits off beyond bf16's tolerance
        verify.check(spec, inputs, [1.05 * got[0], got[1], got[2]])
    # batched: the statistics restated per batch and row
    batched = ir.KernelSpec("mlm_head_b", dataclasses.replace(BF16_GEMM, batched=True), MLM_HEAD_NODES,
                            "logits", "bf16", 3)  # fmt: skip
    inputs = [(8 * torch.randn(2, 8, 64)).bfloat16(), torch.randn(2, 32, 64).bfloat16(), inputs[2]]
    want = reference.run(batched, inputs)
    assert [t.shape for t in verify.restated(batched, want, want)] == [t.shape for t in want]
    verify.check(batched, inputs, want)
    # an fp32 copy of the logits is no copy of the bf16-rounded values the statistic reads
    f32_copy = (*MLM_HEAD_NODES, ir.AuxStore("copy", "logits", 3, "f32"))
    assert verify.stored_copy(ir.KernelSpec("h", BF16_GEMM, f32_copy, "acc", "f32", 4), "widened") is None


def test_reference_only_waits_for_no_kernel_and_warns_nothing(cuda_mode, monkeypatch):
    """Inside `dispatch.reference_only()` (the bench prebuild's capture) a region runs its
    reference path even where kernels run, on any thread, with no warning and no fallback recorded, and no
    kernel is built for the call; outside, the same call takes the kernel path."""
    spec, inputs = fc1_spec(), fc1_inputs()
    monkeypatch.setitem(dispatch.INJECT, "compile", "would fail")
    with dispatch.reference_only():
        outs, warned = run_recording(spec, inputs, times=2)
        other = threading.Thread(target=lambda: outs.append(dispatch.run(spec, inputs)))
        other.start()  # CUDA backwards run on the autograd engine's threads
        other.join()
    assert warned == [] and dispatch.FALLBACKS == {} and dispatch.launches() == {}
    assert_reference_and_eager(outs, spec, inputs)
    assert count(cuda_mode / "calls") == 0
    monkeypatch.delitem(dispatch.INJECT, "compile")
    _, warned = run_recording(spec, inputs, times=1)
    assert warned == [] and dispatch.launches()[spec.name] == 1


@pytest.fixture
def gated_compile(cuda_mode, monkeypatch):
    """A compiler that finishes only when the test opens the gate."""
    gate = threading.Event()

    def compile_fn(cu, so):
        assert gate.wait(30), "the test never opened the gate"
        return fake_compile(cu, so)

    monkeypatch.setattr(dispatch, "COMPILE_FN", compile_fn)
    return gate


def settle(spec):
    """Wait for the build `EVT_WAIT_KERNELS=0` started for `spec` to end."""
    dispatch._builds[dispatch.identity(spec)].exception(timeout=30)


def test_no_wait_runs_the_reference_path_until_the_kernel_is_built(cuda_mode, gated_compile, monkeypatch):
    """`EVT_WAIT_KERNELS=0`: calls while the build runs take the reference path (counted in
    BUILDING, no warning, no fallback recorded); the first call after it launches the kernel."""
    monkeypatch.setenv("EVT_WAIT_KERNELS", "0")
    spec, inputs = fc1_spec(), fc1_inputs()
    outs, warned = run_recording(spec, inputs, times=3)
    assert warned == [] and dispatch.FALLBACKS == {} and dispatch.launches() == {}
    assert dispatch.BUILDING[spec.name] == 3
    assert_reference_and_eager(outs, spec, inputs)
    gated_compile.set()
    settle(spec)
    outs, warned = run_recording(spec, inputs, times=2)
    assert warned == [] and dispatch.launches()[spec.name] == 2 and dispatch.BUILDING[spec.name] == 3
    assert count(cuda_mode / "calls") == 1  # one build, started by the first call
    assert_reference_and_eager(outs, spec, inputs)


def test_no_wait_then_a_failed_build_warns_once(cuda_mode, monkeypatch):
    monkeypatch.setenv("EVT_WAIT_KERNELS", "0")
    gate = threading.Event()

    def failing(cu, so):
        gate.wait(30)
        return failing_compile(cu, so)

    monkeypatch.setattr(dispatch, "COMPILE_FN", failing)
    spec, inputs = fc1_spec(), fc1_inputs()
    _, warned = run_recording(spec, inputs, times=2)
    assert warned == [] and dispatch.BUILDING[spec.name] == 2
    gate.set()
    settle(spec)
    outs, warned = run_recording(spec, inputs, times=2)
    assert len(warned) == 1 and "compile failed" in warned[0] and "evt_missing_functor" in warned[0]
    assert dispatch.launches() == {} and count(cuda_mode / "calls") == 1
    assert_reference_and_eager(outs, spec, inputs)


@pytest.mark.parametrize("why", ["default", "deterministic", "capturing"])
def test_calls_wait_for_the_build(cuda_mode, monkeypatch, why):
    """By default, under deterministic algorithms and while a CUDA graph is captured, the first
    call waits for the build and launches the kernel, even with `EVT_WAIT_KERNELS=0`."""
    monkeypatch.setenv("EVT_TEST_SLEEP", "0.3")
    if why == "default":
        monkeypatch.delenv("EVT_WAIT_KERNELS", raising=False)
    else:
        monkeypatch.setenv("EVT_WAIT_KERNELS", "0")
    if why == "capturing":
        monkeypatch.setattr(dispatch, "capturing", lambda: True)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(why == "deterministic" or was)
    try:
        _, warned = run_recording(fc1_spec(), fc1_inputs(), times=1)
    finally:
        torch.use_deterministic_algorithms(was)
    assert warned == [] and dispatch.launches()["evt_f0_addmm"] == 1 and dispatch.BUILDING == {}


def test_wait_for_kernels_waits_for_every_build(cuda_mode, gated_compile, monkeypatch):
    """`evt.wait_for_kernels`: False while a build runs (after its timeout), True once all ended;
    the next call then launches the kernel."""
    import evt

    monkeypatch.setenv("EVT_WAIT_KERNELS", "0")
    spec, inputs = fc1_spec(), fc1_inputs()
    run_recording(spec, inputs, times=1)
    assert dispatch.BUILDING[spec.name] == 1
    assert evt.wait_for_kernels(timeout=0.1) is False
    gated_compile.set()
    assert evt.wait_for_kernels(timeout=30) is True
    run_recording(spec, inputs, times=1)
    assert dispatch.launches()[spec.name] == 1 and dispatch.BUILDING[spec.name] == 1

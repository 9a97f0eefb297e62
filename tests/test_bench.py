"""The benchmark harness on the CPU: planning, resume, reference checks, report writers.

Tiny shapes (`--small`), baselines eager and evt (evt through the reference path). No timing is
asserted: on the CPU the timer only has to run.
"""

import json
import math
from pathlib import Path

import pytest
import torch

from evt.bench import baselines, check, cli, isolate, markdown, measure, ops, plan, report, runner
from evt.bench.baselines import BASELINES, Baseline
from evt.bench.store import RECORD_FIELDS, ResumeError, Store
from evt.bench.workload import outputs

CPU = dict(device="cpu", small=True)


def small_plan(only, names="eager,evt"):
    return plan.make_plan(only=only, baselines=names, **CPU)


def run(argv):
    return cli.run(["--device", "cpu", "--small", *argv])


# -- planning ------------------------------------------------------------------------------------


def test_suite_covers_the_issue():
    cases = plan.all_cases()
    assert len({c.name for c in cases}) == len(cases)
    for name in ops.PATTERNS:
        assert sum(c.group == name for c in cases) >= 3, name
    gemms = [c.dims for c in cases if c.kind == "op" and len(c.dims) == 3]
    ks = {k for _, _, k in gemms}
    assert {768, 1024, 4096} <= ks
    assert any(m % 128 for m, _, _ in gemms)
    assert {c.group for c in cases if c.kind == "step"} == {"mlp", "gpt2", "bert", "vit", "lm_head"}


def test_quick_plan_is_a_subset_in_stage_order():
    full = plan.make_plan(device="cuda")
    quick = plan.make_plan(quick=True, device="cuda")
    assert {i.key for i in quick.items} < {i.key for i in full.items}
    assert quick.stages() == ["eager", "evt", "compile"]
    assert full.stages() == list(baselines.STAGES)
    keys = {i.key for i in quick.items}
    assert ("bias_gelu_tanh/gpt2", "cublaslt") in keys  # cuBLASLt has the tanh-GELU epilogue
    assert ("step/mlp", "mm") not in keys  # no speed-of-light column for training steps
    assert not any(i.baseline == "cublaslt" for i in plan.make_plan(quick=True, **CPU).items)
    assert {i.case.group for i in full.items if i.baseline == "sdpa"} == {"attention"}


def test_only_and_baselines_filters():
    assert all(c.kind == "step" for c in small_plan("step/*").cases)
    names = {c.name for c in small_plan("gpt2").cases}
    assert {"bias/gpt2", "step/gpt2"} <= names and "bias/bert" not in names
    assert {i.baseline for i in small_plan("bias", "evt").items} == {"evt"}
    with pytest.raises(ValueError, match="unknown baseline"):
        small_plan("bias", "eager,nope")


def test_pending_skips_final_records_and_retries_skipped():
    p = small_plan("bias/gpt2,step/mlp")
    results = [
        {"case": "bias/gpt2", "baseline": "eager", "status": "ok"},
        {"case": "step/mlp", "baseline": "eager", "status": "skipped"},
        {"case": "bias/gpt2", "baseline": "evt", "status": "wrong"},
    ]
    assert [i.key for i in plan.pending(p, results, "eager")] == [("step/mlp", "eager")]
    assert [i.key for i in plan.pending(p, results, "evt")] == [("step/mlp", "evt")]


def test_store_refuses_to_mix_runs(tmp_path):
    config = {"dtype": "bf16", "device": "cpu", "gpu": "cpu", "small": True}
    store = Store.open(tmp_path, config, resume=False)
    store.add({"case": "c", "baseline": "b", "status": "n/a", "error": "E"})
    with pytest.raises(ResumeError, match="--resume"):
        Store.open(tmp_path, config, resume=False)
    with pytest.raises(ResumeError, match="another --out"):
        Store.open(tmp_path, {**config, "dtype": "f16"}, resume=True)
    again = Store.open(tmp_path, config, resume=True)
    assert again.requeue({("c", "b")}) == 1 and again.results[0]["status"] == "skipped"


def test_rerun_skips_finished_stages(tmp_path, capsys):
    argv = ["--baselines", "eager", "--only", "bias/gpt2", "--out", str(tmp_path)]
    assert run(argv) == 0
    first = json.loads((tmp_path / "results.json").read_text())["results"]
    assert run(argv) == 2  # the folder holds a run: refused without --resume
    assert run([*argv, "--resume"]) == 0
    assert "[eager] nothing left to measure: skipped" in capsys.readouterr().out
    assert json.loads((tmp_path / "results.json").read_text())["results"] == first


def test_a_stage_cut_short_marks_the_running_case_and_skips_the_rest(tmp_path, monkeypatch):
    p = small_plan("bias/gpt2,bias/vit,step/mlp", "eager")
    config = {"dtype": "bf16", "device": "cpu", "gpu": "cpu", "small": True}
    store = Store.open(tmp_path, config, resume=False)
    monkeypatch.setattr(isolate, "run_child", lambda argv, timeout: "the stage ran past 1 s")
    isolate.run_stage("eager", [], 1.0, p, store, log=lambda s: None)
    got = [(r["case"], r["status"]) for r in store.results]
    assert got == [("bias/gpt2", "n/a"), ("bias/vit", "skipped"), ("step/mlp", "skipped")]
    assert store.results[0]["error"] == "the stage ran past 1 s"


def test_child_argv_round_trips():
    p = cli.configure(__import__("argparse").ArgumentParser())
    args = p.parse_args(["--quick", "--only", "bias*", "--device", "cpu", "--dtype", "f16"])
    child = p.parse_args(cli.child_argv(args, "OUT", "evt"))
    assert (child.stage, child.isolate, child.out, child.resume) == ("evt", "none", "OUT", True)
    assert (child.quick, child.only, child.dtype, child.device) == (True, "bias*", "f16", "cpu")


# -- checking before timing ----------------------------------------------------------------------


def test_every_workload_runs_and_eager_passes_its_own_check():
    for case in plan.all_cases(small=True):
        s = runner.CaseState.build(case, torch.bfloat16, "cpu")
        assert all(t.float().abs().sum() > 0 for t in s.input_sets[0] if t.is_floating_point())
        verdict = check.compare(s.workload.eager(*s.input_sets[0]), s.reference, s.tolerance)
        assert verdict.ok and s.flops > 0, (case.name, verdict)


def test_compare_masks_nans_and_shapes():
    ref = torch.tensor([[1.0, float("-inf")], [2.0, 3.0]])
    assert check.rel_error(ref.clone(), ref) == 0.0
    assert check.rel_error(ref.nan_to_num(neginf=-1e4), ref) == math.inf
    assert check.rel_error(torch.where(ref > 2, float("nan"), ref), ref) == math.inf
    verdict = check.compare(torch.zeros(3), torch.ones(2), 0.1)
    assert not verdict.ok and "shape" in verdict.why
    verdict = check.compare((ref, None), (ref, ref), 0.1)  # a missing gradient
    assert not verdict.ok and verdict.why == "output 1: shape None, expected (2, 2)"
    assert (
        check.tolerance(ref * float("nan"), ref, torch.bfloat16) == check.TOLERANCE[torch.bfloat16]
    )


def _stage_with(monkeypatch, name, build):
    monkeypatch.setitem(BASELINES, name, Baseline(name, "eager", "test", build))
    timed = []
    real = measure.time_ms
    monkeypatch.setattr(measure, "time_ms", lambda fn, device: timed.append(1) or real(fn, device))
    p = small_plan("bias_gelu/gpt2", f"eager,{name}")
    store = Store(Path("unused.json"), {"results": []})
    monkeypatch.setattr(Store, "save", lambda self: None)
    runner.run_stage(p, "eager", store, "cpu", torch.bfloat16, log=lambda s: None)
    return {r["baseline"]: r for r in store.results}, timed


def test_a_wrong_result_is_reported_and_not_timed(monkeypatch):
    wrong = lambda w, d: lambda *a: w.eager(*a) * 1.1  # noqa: E731
    recs, timed = _stage_with(monkeypatch, "wrong", wrong)
    assert recs["eager"]["status"] == "ok" and recs["eager"]["time_ms"] > 0
    assert recs["wrong"]["status"] == "wrong" and recs["wrong"]["time_ms"] is None
    assert "relative error" in recs["wrong"]["error"] and recs["wrong"]["rel_err"][0] > 0.05
    assert len(timed) == 1  # eager only


def test_a_failing_baseline_is_na_with_its_exception_text(monkeypatch):
    def build(w, d):
        raise RuntimeError("no kernel for this shape")

    recs, timed = _stage_with(monkeypatch, "broken", build)
    assert recs["broken"]["status"] == "n/a" and recs["broken"]["time_ms"] is None
    assert recs["broken"]["error"] == "RuntimeError: no kernel for this shape"
    assert len(timed) == 1


def test_input_sets_rotate_when_they_fit_in_l2():
    l2 = 50 * 2**20
    assert measure.input_set_count(60 * 2**20, l2) == 1
    assert measure.input_set_count(40 * 2**20, l2) == 4
    assert measure.input_set_count(1024, l2) == measure.MAX_INPUT_SETS
    seen = []
    call = measure.rotating(lambda x: seen.append(x), [(1,), (2,), (3,)])
    for _ in range(4):
        call()
    assert seen == [1, 2, 3, 1]


# -- report writers ------------------------------------------------------------------------------


def _rec(case, baseline, status="ok", ms=None, kind="op", error=None):
    r = dict.fromkeys(RECORD_FIELDS)
    r.update(case=case, kind=kind, baseline=baseline, status=status, dims=[8, 8, 8], shape="s")
    r.update(time_ms=ms, tflops=1.0 / ms if ms else None, error=error)
    return r


def test_ratios_geomean_and_markdown():
    results = [
        _rec("A", "eager", ms=2.0), _rec("A", "mm", ms=0.5), _rec("A", "evt", ms=1.0),
        _rec("B", "eager", ms=8.0), _rec("B", "mm", ms=1.0), _rec("B", "evt", ms=2.0),
        _rec("C", "eager", ms=4.0), _rec("C", "evt", "wrong", error="output 0: relative error 9"),
    ]  # fmt: skip
    assert report.speedup(results, "evt", "eager") == {"A": 2.0, "B": 4.0}
    assert report.geomean([2.0, 4.0]) == pytest.approx(math.sqrt(8))
    rows = dict(report.summary(results))
    assert rows["eager"]["op"] == (pytest.approx(math.sqrt(8)), 2)
    assert rows["evt"]["vs_mm"] == (pytest.approx(math.sqrt(0.5 * 0.5)), 2)
    data = {"config": {"dtype": "bf16", "device": "cpu"}, "env": {}, "results": results}
    md = markdown.render(data)
    assert "| eager | 2.83 (2) |" in md
    assert "evt vs eager" in md and "2.00×" in md and "4.00×" in md
    assert "| C | 8×8×8 | 0.2 | — | wrong |" in md
    assert "**C / evt**: wrong: output 0: relative error 9" in md


def test_end_to_end_on_cpu_with_eager_and_evt(tmp_path, capsys):
    argv = ["--baselines", "eager,evt", "--only", "bias_gelu_tanh/gpt2,step/mlp"]
    assert run([*argv, "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data) == {"schema", "config", "env", "sessions", "stages", "results"}
    assert {"torch", "cuda", "cutlass", "git", "gpu"} <= set(data["env"])
    assert set(data["stages"]) == {"eager", "evt"}
    assert [(r["case"], r["baseline"], r["status"]) for r in data["results"]] == [
        ("bias_gelu_tanh/gpt2", "eager", "ok"),
        ("step/mlp", "eager", "ok"),
        ("bias_gelu_tanh/gpt2", "evt", "ok"),
        ("step/mlp", "evt", "ok"),
    ]
    assert all(set(r) == set(RECORD_FIELDS) for r in data["results"])
    evt_step = data["results"][-1]
    assert evt_step["compile_cold_s"] > 0 and evt_step["notes"]["regions"]
    md = (tmp_path / "report.md").read_text()
    assert "evt vs eager" in md and "## What evt did" in md
    printed = capsys.readouterr().out
    assert "charts skipped" in printed or (tmp_path / "ops.png").exists()


def test_inductor_cutlass_checkout_from_the_wheel(tmp_path):
    pytest.importorskip("cutlass_library")
    from evt.bench import inductor_cutlass

    root = inductor_cutlass.cutlass_dir(tmp_path)
    assert (root / "include/cutlass/cutlass.h").exists()
    assert (root / "tools/util/include").is_dir() and (root / "python/cutlass_library").is_dir()
    assert inductor_cutlass.cutlass_dir(tmp_path) == root  # idempotent
    assert any(k.endswith("cutlass_dir") for k in inductor_cutlass.options(tmp_path))


def test_outputs_flattens_nested_results():
    t = torch.ones(1)
    assert outputs((t, (t, [t]))) == (t, t, t)

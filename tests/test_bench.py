"""The benchmark harness on the CPU: planning, resume, reference checks, report writers.

Tiny shapes (`--small`), baselines eager and evt (evt through the reference path). No timing is
asserted: on the CPU the timer only has to run.
"""

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from evt.bench import (
    baselines,
    check,
    cli,
    clocks,
    isolate,
    markdown,
    measure,
    ops,
    plan,
    report,
    runner,
)
from evt.bench.baselines import BASELINES, Baseline
from evt.bench.store import RECORD_FIELDS, ResumeError, Store
from evt.bench.workload import outputs

CPU = dict(device="cpu", small=True)
CONFIG = {"dtype": "bf16", "device": "cpu", "gpu": "cpu", "small": True}


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
    assert {c.group for c in cases if c.kind == "step"} == {
        "mlp",
        "gpt2",
        "gpt2_math",
        "gpt2_checkpointed",
        "gpt2_selective",
        "bert",
        "bert_math",
        "vit",
        "llama",
        "projection_head",
        "patchtst",
        "resnet_bottleneck",
        "lm_head",
    }


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
    assert run([*argv, "--resume", "--redo"]) == 0  # measured again, ok as it was
    assert "--redo: 1 results queued again" in capsys.readouterr().out
    again = json.loads((tmp_path / "results.json").read_text())["results"]
    assert [(r["case"], r["status"]) for r in again] == [("bias/gpt2", "ok")]
    assert again[0]["finished"] >= first[0]["finished"] and again[0]["session"] > first[0]["session"]


# -- time limits: a child process per stage, watched by its parent ------------------------------

FAKE_CHILD = """
import json, os, sys, time
from pathlib import Path

out, actions = Path(sys.argv[1]), sys.argv[2:]
calls = out / "calls"
n = int(calls.read_text()) if calls.exists() else 0
calls.write_text(str(n + 1))

def write(name, value):  # atomically, as evt.bench.store and evt.bench.isolate.beat do
    (out / "tmp").write_text(json.dumps(value))
    os.replace(out / "tmp", out / name)

for step in actions[n].split(";"):
    verb, *arg = step.split()
    if verb == "ok":  # a measured result
        data = json.loads((out / "results.json").read_text())
        data["results"].append(dict(case=arg[0], baseline=arg[1], stage="eager", status="ok"))
        write("results.json", data)
    elif verb == "skip":  # not started: needs more time than its stage had left
        data = json.loads((out / "results.json").read_text())
        data["results"].append(dict(case=arg[0], baseline=arg[1], stage="eager", status="skipped",
                                    skip_reason="needs more time than was left"))
        write("results.json", data)
    elif verb == "beat":  # now measuring
        beat = dict(stage="eager", phase="item", case=arg[0], baseline=arg[1], since=time.time())
        write("running.json", beat)
    elif verb == "hang":
        time.sleep(60)
    elif verb == "sleep":
        time.sleep(float(arg[0]))
    elif verb == "exit":
        sys.exit(int(arg[0]))
"""


def _watched_stage(tmp_path, actions, limit_s=30.0, item_s=None, step_item_s=None, log=None,
                   resume=False):
    """Run stage eager of a 3-case plan in fake child processes acting out `actions` (one string
    per child: `ok CASE BASELINE`, `beat CASE BASELINE`, `sleep S`, `hang`, `exit CODE`, joined
    by ';')."""
    p = small_plan("bias/gpt2,bias/vit,step/mlp", "eager")
    store = Store.open(tmp_path, CONFIG, resume=resume)
    cmd = lambda argv: ([sys.executable, "-c", FAKE_CHILD, str(tmp_path), *actions], None)  # noqa: E731
    isolate.run_stage("eager", [], limit_s, item_s, p, store, log or (lambda s: None), cmd, step_item_s)
    children = int((tmp_path / "calls").read_text())
    return {r["case"]: r for r in store.results}, children


def test_an_item_past_its_limit_is_timeout_and_a_fresh_child_goes_on(tmp_path):
    acts = ["beat bias/gpt2 eager; hang", "ok bias/vit eager; ok step/mlp eager"]
    recs, children = _watched_stage(tmp_path, acts, item_s=0.5)
    assert children == 2
    assert recs["bias/gpt2"]["status"] == "timeout"
    assert "--item-timeout 0.5 s" in recs["bias/gpt2"]["error"]
    assert recs["bias/vit"]["status"] == recs["step/mlp"]["status"] == "ok"
    assert not (tmp_path / isolate.HEARTBEAT).exists()


def test_a_training_step_gets_its_own_item_limit(tmp_path):
    """--step-item-timeout: a step may run past --item-timeout (here 1 s, the step hangs 2.5 s
    and finishes) and is killed past its own limit, which its error names."""
    acts = ["ok bias/gpt2 eager; ok bias/vit eager; beat step/mlp eager; sleep 2.5; ok step/mlp eager"]
    recs, children = _watched_stage(tmp_path, acts, item_s=1.0, step_item_s=10.0)
    assert children == 1 and recs["step/mlp"]["status"] == "ok"
    acts = ["ok bias/gpt2 eager; ok bias/vit eager; beat step/mlp eager; hang"]
    (tmp_path / "again").mkdir()
    recs, _ = _watched_stage(tmp_path / "again", acts, item_s=10.0, step_item_s=1.0)
    assert recs["step/mlp"]["status"] == "timeout"
    assert "--step-item-timeout 1 s" in recs["step/mlp"]["error"]


def test_the_stages_table_gives_the_steps_limit_where_it_differs():
    from evt.bench import coverage

    runs = [{"session": 1, "limit_s": 500, "item_s": 240, "step_item_s": 450},
            {"session": 2, "limit_s": 500, "item_s": 240, "step_item_s": 240},
            {"session": 3, "limit_s": 500, "item_s": 240}]  # before session 35: no step limit
    md = coverage.stages_table({"stages": {"max-autotune": {"runs": runs}}}, markdown.table)
    assert "| 240 (steps 450) |" in md and md.count("| 240 |") == 2


def test_a_limit_that_fires_just_after_an_item_finished_blames_nothing(tmp_path):
    p = small_plan("bias/gpt2,bias/vit", "eager")
    store = Store.open(tmp_path, CONFIG, resume=False)
    isolate.beat(tmp_path, "eager", "item", "bias/gpt2", "eager")  # as the child last said
    beat = isolate.read_beat(tmp_path / isolate.HEARTBEAT)
    assert (beat["phase"], beat["case"], beat["baseline"]) == ("item", "bias/gpt2", "eager")
    store.add({"case": "bias/gpt2", "baseline": "eager", "stage": "eager", "status": "ok"})
    left = plan.pending(p, store.results, "eager")
    assert isolate.settle(isolate.Outcome("item-timeout", "late", beat), left, store)
    assert [r["status"] for r in store.results] == ["ok"]  # bias/vit never started: no blame


def test_a_crash_costs_its_item_only(tmp_path):
    acts = ["ok bias/gpt2 eager; beat bias/vit eager; exit 3", "ok step/mlp eager"]
    recs, children = _watched_stage(tmp_path, acts)
    assert children == 2
    assert [recs[c]["status"] for c in ("bias/gpt2", "bias/vit", "step/mlp")] == ["ok", "n/a", "ok"]
    assert "exited with code 3" in recs["bias/vit"]["error"]


def test_a_crash_after_an_item_finished_costs_no_other_item(tmp_path):
    """The child dies between items (session 47: an illegal memory access one item left behind
    surfaced in the case's cleanup) after measuring one: the next item is not charged for it, a
    fresh child measures it. A child that measured nothing before dying still costs the next
    item, so a child crashing at its start cannot be restarted forever."""
    acts = ["beat bias/gpt2 eager; ok bias/gpt2 eager; exit 1", "ok bias/vit eager; ok step/mlp eager"]
    recs, children = _watched_stage(tmp_path, acts)
    assert children == 2
    assert [recs[c]["status"] for c in ("bias/gpt2", "bias/vit", "step/mlp")] == ["ok", "ok", "ok"]
    (tmp_path / "again").mkdir()  # the second child dies between items having measured nothing
    acts = ["beat bias/gpt2 eager; ok bias/gpt2 eager; exit 1", "beat bias/gpt2 eager; exit 1",
            "ok step/mlp eager"]
    recs, children = _watched_stage(tmp_path / "again", acts)
    assert children == 3
    assert [recs[c]["status"] for c in ("bias/gpt2", "bias/vit", "step/mlp")] == ["ok", "n/a", "ok"]
    assert "exited with code 1" in recs["bias/vit"]["error"]


def test_a_stage_out_of_time_leaves_its_items_not_measured(tmp_path):
    recs, children = _watched_stage(tmp_path, ["ok bias/gpt2 eager; beat bias/vit eager; hang"], 2)
    assert children == 1 and recs["bias/gpt2"]["status"] == "ok"
    for case in ("bias/vit", "step/mlp"):  # the running one and the one never reached
        assert recs[case]["status"] == "skipped"
        assert recs[case]["skip_reason"] == "stage time limit"
    assert "while this was measured" in recs["bias/vit"]["error"]
    assert "not reached" in recs["step/mlp"]["error"]
    assert [i.key for i in plan.pending(small_plan("bias/gpt2,bias/vit,step/mlp", "eager"),
            list(recs.values()))] == [("bias/vit", "eager"), ("step/mlp", "eager")]  # fmt: skip


def test_an_item_a_stage_limit_stopped_keeps_how_long_it_ran(tmp_path):
    recs, _ = _watched_stage(tmp_path, ["ok bias/gpt2 eager; beat bias/vit eager; hang"], 2)
    assert 1.0 < recs["bias/vit"]["outlasted_s"] < 30  # it ran until the limit, ~2 s
    assert re.search(r"while this was measured, after [1-9]\d* s of it$", recs["bias/vit"]["error"])
    assert recs["step/mlp"]["outlasted_s"] is None  # never started
    store = Store.open(tmp_path, CONFIG, resume=True)
    item = next(i for i in small_plan("bias/vit", "eager").items)
    store.mark([item], "skipped", "a later call's limit came first", skip="time")
    assert store.record("bias/vit", "eager")["outlasted_s"] == recs["bias/vit"]["outlasted_s"]
    store.outlasted(item, 0.5)  # a shorter run later does not lower it
    assert store.record("bias/vit", "eager")["outlasted_s"] == recs["bias/vit"]["outlasted_s"]


def test_a_child_learns_when_its_stage_ends_and_what_it_leaves_for_lack_of_time_is_not_na(tmp_path):
    """The child is told the stage's end (`--stage-ends`, epoch seconds); an item it did not
    start because it needs more time than was left stays "skipped", and no further child is
    started for it (before, a child that exited with items left cost them n/a)."""
    p = small_plan("bias/gpt2,bias/vit,step/mlp", "eager")
    store = Store.open(tmp_path, CONFIG, resume=False)
    argvs = []

    def cmd(argv):
        argvs.append(argv)
        acts = ["ok bias/gpt2 eager; skip bias/vit eager; ok step/mlp eager"]
        return [sys.executable, "-c", FAKE_CHILD, str(tmp_path), *acts], None

    t0 = time.time()
    isolate.run_stage("eager", ["--stage", "eager"], 30, None, p, store, lambda s: None, cmd)
    assert len(argvs) == 1 and argvs[0][:2] == ["--stage", "eager"]
    i = argvs[0].index("--stage-ends")
    assert t0 + 29 <= float(argvs[0][i + 1]) <= time.time() + 30
    recs = {r["case"]: r for r in store.results}
    assert [recs[c]["status"] for c in ("bias/gpt2", "bias/vit", "step/mlp")] == ["ok", "skipped", "ok"]
    assert not (tmp_path / isolate.HEARTBEAT).exists()
    args = cli.configure(__import__("argparse").ArgumentParser()).parse_args(argvs[0])
    assert args.stage_ends == float(argvs[0][i + 1])


def test_items_that_outlasted_a_limit_run_last_and_only_with_the_time_they_need(tmp_path):
    """An item an earlier call's time limit stopped after `outlasted_s` runs after the others,
    and is not started with less time left than that (session 42: Inductor's max-autotune of
    BERT's math-attention step took a call's last 222 s and was stopped)."""
    p = small_plan("bias/gpt2,step/mlp", "eager")
    store = Store.open(tmp_path, CONFIG, resume=False)
    item = p.items[0]
    assert item.key == ("bias/gpt2", "eager")
    store.mark([item], "skipped", "stopped by the limit while measured", skip="time")
    store.outlasted(item, 5.0)
    runner.run_stage(p, "eager", store, "cpu", torch.bfloat16, lambda s: None,
                     deadline=time.monotonic() + 600)  # fmt: skip
    assert [(r["case"], r["status"]) for r in store.results] == [("step/mlp", "ok"), ("bias/gpt2", "ok")]
    store.mark([item], "skipped", "stopped by the limit while measured", skip="time")
    store.outlasted(item, 1000.0)
    lines = []
    runner.run_stage(p, "eager", store, "cpu", torch.bfloat16, lines.append,
                     deadline=time.monotonic() + 600)  # fmt: skip
    rec = store.record("bias/gpt2", "eager")
    assert (rec["status"], rec["skip_reason"]) == ("skipped", "needs more time than was left")
    assert "after 1000 s" in rec["error"] and rec["outlasted_s"] == 1000.0
    assert any("not started" in line for line in lines)
    assert plan.pending(p, store.results, "eager") == [item]  # a later run with more time: again


def test_the_not_measured_count_is_of_this_runs_selection(tmp_path):
    """A resumed run narrowed with --only counts its own items left unmeasured, not those of
    earlier runs it did not select (session 41: "31 not measured" where 24 of its 44 were)."""
    earlier = Store.open(tmp_path, CONFIG, resume=False)
    earlier.add({"case": "bias/bert", "baseline": "eager", "stage": "eager", "status": "skipped"})
    lines = []
    acts = ["ok bias/gpt2 eager; beat bias/vit eager; hang"]
    recs, _ = _watched_stage(tmp_path, acts, 2, log=lines.append, resume=True)
    assert recs["bias/bert"]["status"] == "skipped"  # kept, and not counted
    assert "[eager] 2 not measured (stage time limit): rerun with --resume" in lines


def test_an_inline_stage_past_its_deadline_starts_nothing(tmp_path):
    p = small_plan("bias/gpt2,step/mlp", "eager,evt")
    store = Store.open(tmp_path, CONFIG, resume=False)
    runner.run_stage(p, "evt", store, "cpu", torch.bfloat16, lambda s: None, deadline=0.0)
    assert [(r["case"], r["status"], r["skip_reason"]) for r in store.results] == [
        ("bias/gpt2", "skipped", "stage time limit"),
        ("step/mlp", "skipped", "stage time limit"),
    ]


def test_a_spent_budget_is_reported_not_measured_and_resume_measures_it(tmp_path, capsys):
    argv = ["--baselines", "eager", "--only", "bias/gpt2", "--out", str(tmp_path)]
    assert run([*argv, "--time-budget", "0"]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert [(r["status"], r["skip_reason"]) for r in data["results"]] == [
        ("skipped", "stage time limit")
    ]
    assert "--time-budget 0 s was spent" in data["results"][0]["error"]
    md = (tmp_path / "report.md").read_text()
    assert "| bias/gpt2 | 128×48×12 | not measured (stage time limit) |" in md
    assert run([*argv, "--resume"]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert [(r["status"], r["session"]) for r in data["results"]] == [("ok", 1)]
    assert "Merged results" not in (tmp_path / "report.md").read_text()  # one session measured


def test_resume_across_processes_at_two_commits(tmp_path):
    """Two invocations ("device calls") continue one folder; the report says it is merged."""
    base = [sys.executable, "-m", "evt.bench", "--device", "cpu", "--small", "--only", "bias/gpt2"]
    base += ["--out", str(tmp_path)]
    root = Path(__file__).resolve().parents[1]
    for commit, extra in (("aaaa1111", ["--baselines", "eager"]),
                          ("bbbb2222", ["--baselines", "eager,mm", "--resume"])):  # fmt: skip
        env = {**os.environ, "EVT_BENCH_GIT_COMMIT": commit, "PYTHONPATH": str(root)}
        done = subprocess.run(base + extra, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    got = [(r["baseline"], r["status"], r["session"], r["commit"]) for r in data["results"]]
    assert got == [("eager", "ok", 0, "aaaa1111"), ("mm", "ok", 1, "bbbb2222")]
    assert [s["git"]["commit"] for s in data["sessions"]] == ["aaaa1111", "bbbb2222"]
    md = (tmp_path / "report.md").read_text()
    assert "**Warning: merged results.** These results were measured in 2 sessions" in md
    assert "aaaa1111" in md and "bbbb2222" in md and "## Sessions" in md


@pytest.mark.parametrize("level", ["0", "1"])
def test_a_childs_stderr_is_echoed_whole_under_evt_debug(tmp_path, monkeypatch, capsys, level):
    """A stage's child logs its region decisions to stderr under EVT_DEBUG: the parent echoes all
    of it then, else only the tail it keeps for a crash report."""
    from evt.bench import isolate

    monkeypatch.setenv("EVT_DEBUG", level)
    cmd = [sys.executable, "-c", f"import sys; sys.stderr.write('x' * {2 * isolate.STDERR_TAIL})"]
    outcome = isolate.run_child(cmd, None, 60, isolate.ItemLimits(), tmp_path / isolate.HEARTBEAT)
    assert outcome.kind == "done"
    echoed = capsys.readouterr().err.count("x")
    assert echoed == (2 if level == "1" else 1) * isolate.STDERR_TAIL


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


def test_in_turn_times_every_call_once_a_round(monkeypatch):
    """`measure.in_turn` (config_sweep's and epilogue_arithmetic's `--rounds`): each round times
    every call once, in the order given, and each name keeps one timing per round."""
    order = []
    monkeypatch.setattr(measure, "time_ms", lambda fn, device: fn() or len(order))
    times = measure.in_turn({"mm": lambda: order.append("mm"), "0:0": lambda: order.append("0:0")}, 3, "cpu")
    assert order == ["mm", "0:0"] * 3
    assert times == {"mm": [1, 3, 5], "0:0": [2, 4, 6]}


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


def test_what_evt_did_names_each_kernels_config_and_tile_order():
    r = _rec("bias_relu/gptj", "evt", ms=1.6)
    r["notes"] = {"regions": ["forward aten.addmm + aten.relu"], "unfused_gemms": 0,
                  "kernels_built": 0, "kernel_launches": 3, "fallbacks": {},
                  "host_us_per_region_call": 12.34,
                  "kernels": ["evt_f0_addmm: 128x256x64_c1x1_cooperative 0:4 at 8192x16384x4096x1"]}  # fmt: skip
    md = markdown.evt_notes([r, _rec("bias/gptj", "evt", ms=1.6)])
    assert "kernels (tile config, tile order, problem)" in md
    assert "| 128x256x64_c1x1_cooperative 0:4 at 8192x16384x4096x1 |" in md
    assert "| 3 | 12.3 | forward aten.addmm + aten.relu |" in md
    del r["notes"]["host_us_per_region_call"]  # results recorded before session 27
    assert "| 3 | — | forward aten.addmm + aten.relu |" in markdown.evt_notes([r])


def _outcome(region, config, rank, ms, heuristic_ms, fuse=True, measured=True):
    return {"region": region, "problem": [8192, 768, 3072, 1], "fuse": fuse, "config": config,
            "tile_order": "0:2", "rank": rank, "candidates": 4, "heuristic": "128x128x64_c1x1",
            "heuristic_ms": heuristic_ms, "best_ms": ms, "unfused_ms": 0.2,
            "unfused_by": "inductor", "measured": measured}  # fmt: skip


def test_autotune_table_ranks_the_chosen_configs_once_per_region():
    a = _rec("dgrad_gelu/gpt2", "evt-max-autotune", ms=0.1)
    a["notes"] = {"autotune": [_outcome("evt_b0_mm", "128x128x64_c1x1", 1, 0.10, 0.10),
                               _outcome("evt_b1_mm", "256x128x64_c2x1", 3, 0.08, 0.10),
                               # the warm compile's replay of the first: counted once
                               _outcome("evt_b0_mm", "128x128x64_c1x1", 1, 0.10, 0.10,
                                        measured=False)]}  # fmt: skip
    b = _rec("bias/gpt2", "evt-max-autotune", ms=0.1)
    b["notes"] = {"autotune": [_outcome("evt_f0_addmm", None, None, None, None, fuse=False)]}
    b["notes"]["autotune"][0].update(problem=[1024, 1024, 64, 96], timer="calls (...)")
    md = markdown.autotune_table([a, b, _rec("bias/gpt2", "evt", ms=0.1)])
    assert "3 regions decided" in md and "pick in 1 of 2 (rank 1: 1, rank 3: 1)" in md
    assert "geomean 1.118 over 2" in md  # (1.0 * 1.25) ** 0.5
    assert md.count("| dgrad_gelu/gpt2 |") == 2
    assert "| 256x128x64_c2x1 (0:2) | 3 | 0.0800 | 1.250 | 0.2000 (inductor) | fused |" in md
    assert "| bias/gpt2 | evt_f0_addmm | 1024x1024x64 (96 batches) | 128x128x64_c1x1: — | — | — |" in md
    assert "| left unfused; timed as calls (...) |" in md and "| fused |" in md
    assert markdown.autotune_table([_rec("bias/gpt2", "evt", ms=0.1)]) == ""
    assert "## evt's max-autotune" in markdown.render(
        {"config": {"dtype": "bf16", "device": "cuda"}, "env": {}, "results": [a, b]})


def test_autotune_table_says_where_each_measured_decisions_time_went():
    """Each measured decision's wall seconds per phase (the unfused path's compile, the builds
    waited for, the checks, the timing) and their totals; — for a decision read from the cache
    or recorded before the phases were, and neither counted."""
    a = _rec("dgrad_gelu/gpt2", "evt-max-autotune", ms=0.1)
    phases = {"unfused_compile": 41.23, "builds": 3.0, "checks": 0.4, "timing": 2.1}
    a["notes"] = {"autotune": [_outcome("evt_b0_mm", "128x128x64_c1x1", 1, 0.10, 0.10),
                               _outcome("evt_b1_mm", "256x128x64_c2x1", 3, 0.08, 0.10),
                               _outcome("evt_b2_mm", "256x128x64_c2x1", 3, 0.08, 0.10)]}  # fmt: skip
    a["notes"]["autotune"][0]["seconds"] = phases
    a["notes"]["autotune"][1]["seconds"] = {**phases, "unfused_compile": 10.0}
    # read from the cache (`outcome` gives it none): seconds it carried would be another run's
    a["notes"]["autotune"][2].update(measured=False, seconds=phases)
    old = _rec("bias/gpt2", "evt-max-autotune", ms=0.1)  # recorded before the phases were
    old["notes"] = {"autotune": [_outcome("evt_f0_addmm", None, None, None, None, fuse=False)]}
    md = markdown.autotune_table([a, old])
    assert "| s: unfused compile / builds / checks / timing |" in md
    assert "| 0.2000 (inductor) | fused | 41.2 / 3.0 / 0.4 / 2.1 |" in md
    assert "| 0.2000 (inductor) | fused | 10.0 / 3.0 / 0.4 / 2.1 |" in md
    assert "| fused, cached | — |" in md and "| left unfused | — |" in md
    assert ("Measured decisions that recorded their phases' wall seconds (2) spent 51.2 s "
            "compiling their unfused paths, 6.0 s waiting for their kernels' builds, 0.8 s "
            "checking the candidates against the reference and 4.2 s timing") in md
    assert "wall seconds" not in markdown.autotune_table([old])  # no totals of nothing
    # a region whose measurement raised: lowered with the heuristic's config, and says why
    failed = _outcome("evt_f1_addmm", None, None, None, None)
    failed.update(unfused_ms=None, unfused_by="", reason="not measured: OutOfMemoryError: CUDA")
    old["notes"]["autotune"].append(failed)
    assert ("| — (not timed) | fused with the heuristic's config, not measured: "
            "OutOfMemoryError: CUDA | — |") in markdown.autotune_table([old])
    # every candidate failed: left unfused, and the first candidate's error shown
    none_ran = _outcome("evt_f2_bmm", None, None, None, None, fuse=False)
    none_ran["reason"] = "no candidate config ran (20 rejected; the first, 128x256x64: LaunchError: x)"
    old["notes"]["autotune"].append(none_ran)
    assert ("| left unfused: no candidate config ran (20 rejected; the first, 128x256x64: "
            "LaunchError: x) | — |") in markdown.autotune_table([old])


def test_host_time_per_region_call_counts_only_the_calls_in_between(monkeypatch):
    from evt.bench.observe import host_us_per_call
    from evt.runtime import fast
    from evt.runtime.fast import HostTime

    before = {"a": HostTime(10, 100_000, 50_000), "c": HostTime(2, 10_000, 5_000)}
    after = {"a": HostTime(14, 180_000, 90_000), "b": HostTime(4, 40_000, 20_000), "c": before["c"]}
    monkeypatch.setattr(fast, "host_times", lambda: after)
    spent = fast.host_times_since(before)
    assert spent == {"a": HostTime(4, 80_000, 40_000), "b": HostTime(4, 40_000, 20_000)}  # not c
    assert host_us_per_call(spent.values()) == 15.0  # (80 + 40 us) over 4 + 4 calls
    assert host_us_per_call([]) is None


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


def test_cublaslt_is_compared_per_pattern_with_both_fractions_of_the_gemm():
    """The issue's cuBLASLt target is set on some epilogues only: the report gives each pattern's
    geomeans apart (a pattern cuBLASLt has no epilogue for has no row)."""
    results = []
    for case, mm, lt, evt in (("p/a", 1.0, 2.0, 1.0), ("p/b", 1.0, 1.0, 2.0), ("q/a", 1.0, None, 1.5)):
        for baseline, ms in (("mm", mm), ("cublaslt", lt), ("evt", evt)):
            if ms:
                results.append(_rec(case, baseline, ms=ms) | {"graph_ms": ms})
    md = markdown.by_pattern(results)
    assert "| p | 2 | 1.00 | 1.00 | 0.71 | 0.71 |" in md
    assert "| q |" not in md
    assert "issue #7's target" not in md  # none of its patterns measured
    target = [r | {"case": "bias_relu/" + r["case"]} for r in results if r["case"].startswith("p/")]
    md = markdown.by_pattern(results + target)
    assert "| issue #7's target: bias, bias_relu, bias_gelu_tanh | 2 | 1.00 |" in md


def test_cuda_graph_times_have_their_own_ratios():
    """`graph_ms` (calls replayed from CUDA graphs) gets its own geomeans and table; a record
    without one (capture failed, or a CPU run) counts in neither."""
    results = [_rec("A", "eager", ms=2.0), _rec("A", "mm", ms=1.0), _rec("A", "evt", ms=4.0),
               _rec("B", "eager", ms=2.0), _rec("B", "evt", ms=2.0)]  # fmt: skip
    for r, g in zip(results, (1.5, 0.8, 1.0, None, 1.0)):
        r.update(graph_ms=g, graph_tflops=1.0 / g if g else None)
    assert report.speedup(results, "evt", "eager", field="graph_ms") == {"A": 1.5}
    rows = dict(report.summary(results))
    assert rows["eager"]["op"] == (pytest.approx(math.sqrt(0.5 * 1.0)), 2)
    assert rows["eager"]["op_graph"] == (pytest.approx(1.5), 1)
    assert rows["evt"]["vs_mm_graph"] == (pytest.approx(0.8), 1)
    md = markdown.render(
        {"config": {"dtype": "bf16", "device": "cpu"}, "env": {}, "results": results}
    )
    assert "## GEMM+epilogue suite under CUDA graphs" in md
    assert "| eager | 0.71 (2) | — (0) | 0.50 (1) | 1.50 (1) | — (0) | 0.53 (1) |" in md


def test_clock_samples_summarize_to_median_clock_mean_power_and_events():
    rows = [["1500", "650.5", "0x0000000000000004"], ["1400", "700.0", "0x0000000000000001"],
            ["1600", "[N/A]", "0x0000000000000000"], ["bad"], ["1450", "690.0", "garbage"]]  # fmt: skip
    got = clocks.summarize(rows)
    assert got == {"sm_mhz": 1475.0, "power_w": pytest.approx((650.5 + 700 + 690) / 3),
                   "events": ["sw-power-cap"], "samples": 4}  # fmt: skip
    assert clocks.summarize([]) == {} and clocks.summarize([["[N/A]", "1", "0x0"]]) == {}
    with clocks.window("cpu") as seen:  # nothing sampled off CUDA
        pass
    assert seen == {}


def test_clock_sampler_reads_nvidia_smi_in_the_background(tmp_path, monkeypatch):
    """`clocks.Sampler` runs `nvidia-smi -lms` and keeps its lines with their arrival times
    (a stand-in nvidia-smi on PATH prints three samples, then waits to be stopped)."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nfor c in 1400 1500 1600; do echo \"$c, 690.0, 0x4\"; done\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    t0 = time.monotonic()
    s = clocks.Sampler(0)
    try:
        deadline = time.monotonic() + 10
        while len(s.rows) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        got = s.summary(t0, time.monotonic())
    finally:
        s.close()
    assert got == {"sm_mhz": 1500.0, "power_w": 690.0, "events": ["sw-power-cap"], "samples": 3}
    assert s.summary(time.monotonic() + 1, time.monotonic() + 2) == {}


def test_clock_table_compares_tflops_per_ghz_with_mm():
    """Each baseline's fraction of the bare GEMM per GHz of its own clock: evt at 0.8 of mm's
    TFLOP/s but at a clock 0.9 of mm's does 0.8 / 0.9 of mm's work per cycle."""
    results = []
    for case, (mm, evt) in {"A": ((1.0, 1500), (0.8, 1350)), "B": ((2.0, 1600), (2.0, 1600))}.items():
        for b, (tf, mhz) in (("mm", mm), ("evt", evt)):
            r = _rec(case, b, ms=1.0)
            r.update(graph_ms=1.0 / tf, graph_tflops=tf, graph_sm_mhz=mhz, graph_power_w=690.0,
                     clock_events=["sw-power-cap"] if case == "A" else [])  # fmt: skip
            results.append(r)
    md = markdown.clock_table(results)
    ratio = math.sqrt((0.8 / 1350) / (1.0 / 1500) * 1.0)
    assert f"| evt | 2 | 1475 | 690 | 1 of 2 | {ratio:.3f} |" in md
    assert "| mm | 2 | 1550 | 690 | 1 of 2 | — |" in md
    full = markdown.render({"config": {"dtype": "bf16", "device": "cuda"}, "env": {}, "results": results})
    assert "median SM clock while timed (MHz)" in full and "## Clocks while timed" in full
    step = _rec("step/mlp", "evt", ms=0.7, kind="step")
    step.update(graph_ms=0.7, graph_sm_mhz=1710.0)
    full = markdown.render({"config": {"dtype": "bf16", "device": "cuda"}, "env": {}, "results": [*results, step]})
    assert "Training steps under CUDA graphs: median SM clock while timed (MHz)" in full
    assert "| step/mlp | s | 1710 |" in full
    for r in results:
        r["graph_sm_mhz"] = None  # a CPU run, or a file from before the clock fields
    assert markdown.clock_table(results) == ""


def test_step_charts_plot_as_run_and_under_cuda_graphs():
    """steps.png plots each baseline's speedup over eager as run, steps_graphs.png under CUDA
    graphs; a record without a graph time leaves its bar out."""
    from evt.bench import charts

    results = [_rec("S", "eager", ms=2.0, kind="step"), _rec("S", "evt", ms=4.0, kind="step"),
               _rec("T", "eager", ms=1.0, kind="step"), _rec("T", "evt", ms=1.0, kind="step")]  # fmt: skip
    for r, g in zip(results, (1.6, 0.8, None, 0.5)):
        r.update(graph_ms=g)

    def bars(field):
        cases, values = charts.series(results, "step", "eager", field)
        return {b: dict(zip(cases, ys)) for b, ys in values.items()}

    assert bars("time_ms") == {"evt": {"S": 0.5, "T": 1.0}}
    assert bars("graph_ms") == {"evt": {"S": 2.0, "T": None}}


def test_training_steps_have_graph_ratios_and_host_times():
    """Steps replayed from CUDA graphs get their own geomean column and table, and the host's
    time per step its table (a step slower than its graph replay is paced by the host)."""
    results = [_rec("S", "eager", ms=2.0, kind="step"), _rec("S", "evt", ms=3.0, kind="step")]
    for r, g, h in zip(results, (1.6, 1.2), (1.9, 2.9)):
        r.update(graph_ms=g, host_ms=h)
    rows = dict(report.summary(results))
    assert rows["eager"]["step"] == (pytest.approx(2 / 3), 1)
    assert rows["eager"]["step_graph"] == (pytest.approx(1.6 / 1.2), 1)
    md = markdown.render(
        {"config": {"dtype": "bf16", "device": "cpu"}, "env": {}, "results": results}
    )
    assert "| eager | — (0) | 0.67 (1) | — (0) | — (0) | 1.33 (1) | — (0) |" in md
    assert "## Training steps under CUDA graphs" in md and "| S | s | 1.60 | 1.20 | 1.33× |" in md
    assert "## Training steps: host time per step (ms)" in md and "| S | s | 1.90 | 2.90 |" in md


def _session(commit, source="s1"):
    return {"time": "T", "argv": ["evt", "bench"], "git": {"commit": commit}, "evt_source": source}


def test_report_says_what_was_not_measured_and_why():
    results = [
        _rec("bias/gpt2", "eager", ms=2.0),
        _rec("bias/gpt2", "evt", ms=1.0),
        _rec("bias/gpt2", "max-autotune", "skipped", error="not reached before the stage's time"),
        _rec("bias/vit", "eager", ms=2.0),
        _rec("bias/vit", "evt", "timeout", error="ran past --item-timeout 240 s"),
        _rec("bias/vit", "max-autotune", "n/a", error="NoValidChoicesError: no choices"),
    ]
    results[2]["skip_reason"] = "stage time limit"
    data = {"config": CONFIG, "env": {}, "results": results, "sessions": [_session("a")]}
    md = markdown.render(data)
    assert "| bias/gpt2 | 8×8×8 | 0.5 | 1.0 | not measured (stage time limit) | 2.00× |" in md
    assert "| bias/vit | 8×8×8 | 0.5 | timeout | n/a | — |" in md
    assert "**bias/gpt2 / max-autotune**: not measured (stage time limit): not reached" in md
    assert "**bias/vit / evt**: timeout: ran past --item-timeout 240 s" in md
    cover = md[md.index("## Coverage") :]
    n = len(plan.all_cases())  # every case plans max-autotune and compile
    assert f"| max-autotune | {n} | 0 | 0 | 1 | 0 | 0 | 1 not measured (stage time limit), {n - 2} " in cover
    assert f"| compile | {n} | 0 | 0 | 0 | 0 | 0 | {n} not run |" in cover
    assert "Merged" not in md and "## Sessions" not in md


def test_a_cell_planned_but_never_run_says_so():
    results = [_rec("bias/gpt2", "eager", ms=2.0), _rec("bias/vit", "evt", ms=1.0)]
    data = {"config": CONFIG, "env": {}, "results": results, "sessions": [_session("a")]}
    md = markdown.render(data)
    assert "| bias/gpt2 | 8×8×8 | 0.5 | not run |" in md
    assert "| bias/vit | 8×8×8 | not run | 1.0 |" in md


def test_merged_results_are_flagged():
    results = [_rec("bias/gpt2", "eager", ms=2.0), _rec("bias/gpt2", "evt", ms=1.0)]
    results[0]["session"], results[1]["session"] = 0, 1
    data = {"config": CONFIG, "env": {}, "results": results}
    data["sessions"] = [_session("aaaa"), _session("aaaa")]
    md = markdown.render(data)
    assert "**Merged results.** These results were measured in 2 sessions, all at commit aaaa" in md
    data["sessions"][1] = _session("bbbb", "s2")
    md = markdown.render(data)
    assert "**Warning: merged results.**" in md and "2 commits (aaaa, bbbb)" in md
    assert "| 1 | T | bbbb | s2 |" in md  # the sessions table
    data["sessions"] = [_session("aaaa"), _session("aaaa", "s2")]  # same commit, other sources
    assert "2 versions of evt's sources" in markdown.render(data)
    results[1]["session"] = 0  # one session measured everything: a later one only re-rendered
    assert "erged" not in markdown.render(data).split("## Summary")[0]


def test_the_committed_h200_results_still_render():
    path = Path(__file__).resolve().parents[1] / "benchmarks/results/2026-11-22-H200/results.json"
    data = json.loads(path.read_text())  # written before records named their session
    md = markdown.render(data)
    assert "**Warning: merged results.** These results were measured in 2 sessions" in md
    assert "5078929" in md and "3c96695" in md
    n = len(plan.all_cases())  # today's plan: cases added since are `not run` there
    assert f"| max-autotune | {n} | 0 | 0 | 0 | 0 | 0 | {n} not run |" in md
    assert "| step/mlp | batch=16 seq=512 dim=1024 hidden=4096 | 1.18 | 1.29 | 1.04 |" in md


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


def test_evt_max_autotune_is_a_stage_of_its_own(tmp_path):
    """evt's max-autotune: planned for every case after the peers (its cold compile builds and
    times configs); off an SM90 GPU nothing is measured, so it runs like evt and is checked."""
    full = plan.make_plan(device="cuda")
    assert full.stages()[-1] == "evt-max-autotune" and "4" in plan.PARTS
    assert {i.case.name for i in full.items if i.baseline == "evt-max-autotune"} == {
        c.name for c in full.cases
    }
    argv = ["--baselines", "evt-max-autotune", "--only", "bias_gelu_tanh/gpt2"]
    assert run([*argv, "--out", str(tmp_path)]) == 0
    (rec,) = json.loads((tmp_path / "results.json").read_text())["results"]
    assert (rec["stage"], rec["status"]) == ("evt-max-autotune", "ok"), rec
    assert rec["notes"]["regions"] and rec["compile_cold_s"] > 0


def test_inductor_cutlass_checkout_from_the_wheel(tmp_path):
    pytest.importorskip("cutlass_library")
    from evt.bench import inductor_cutlass

    root = inductor_cutlass.cutlass_dir(tmp_path)
    assert (root / "include/cutlass/cutlass.h").exists()
    assert (root / "tools/util/include").is_dir() and (root / "python/cutlass_library").is_dir()
    assert inductor_cutlass.cutlass_dir(tmp_path) == root  # idempotent
    opts = inductor_cutlass.options(tmp_path)
    assert any(k.endswith("cutlass_dir") for k in opts)
    assert any(k.endswith("cutlass_tma_only") for k in opts)  # what its EVT fusion renders on
    assert opts["max_autotune_gemm_backends"] == "CUTLASS"


def test_inductor_cutlass_runs_on_its_subset():
    from evt.bench import inductor_cutlass

    items = [i for i in plan.make_plan(device="cuda").items if i.baseline == "inductor-cutlass"]
    assert [i.case.name for i in items] == list(inductor_cutlass.CASES)
    assert set(inductor_cutlass.CASES) <= {c.name for c in plan.all_cases()}


# -- the full run in parts (scripts/bench_full.sh) -----------------------------------------------


def test_parts_cover_every_baseline_and_slow_stages_go_breadth_first():
    # in-turn-ops: where named, as part 5 does
    assert set().union(*(p.baselines for p in plan.PARTS.values())) == set(BASELINES)
    assert {n for n, b in BASELINES.items() if b.opt_in} == set(plan.PARTS["5"].baselines)
    items = [i for i in plan.make_plan(device="cuda").items if i.stage == "max-autotune"]
    first = [i.case.group for i in items[: len(ops.PATTERNS) + 5]]
    assert len(set(first)) == len(first)  # every pattern once and every step, then more shapes
    assert {i.case.name for i in items} == {c.name for c in plan.all_cases()}


def test_a_part_sets_its_baselines_and_limits(capsys):
    p = cli.configure(__import__("argparse").ArgumentParser())
    args = p.parse_args(["--part", "2"])
    cli.apply_part(args)
    assert (args.baselines, args.resume) == ("inductor-cutlass", True)
    assert (args.time_budget, args.item_timeout) == (plan.PART_TIME_BUDGET_S, 240.0)
    assert args.step_item_timeout == plan.PART_STEP_ITEM_TIMEOUT_S == 450.0
    args = p.parse_args(["--part", "3", "--time-budget", "100"])
    cli.apply_part(args)
    assert (args.baselines, args.time_budget) == ("max-autotune", 100.0)
    assert cli.run(["--list", "--part", "2"]) == 0
    assert "stage inductor-cutlass: 4 measurements" in capsys.readouterr().out


def test_retry_queues_failures_again(tmp_path):
    store = Store.open(tmp_path, CONFIG, resume=False)
    for n, status in enumerate(("ok", "n/a", "timeout", "fallback", "wrong")):
        store.add({"case": f"c{n}", "baseline": "b", "status": status, "error": "E"})
    assert store.requeue({(f"c{n}", "b") for n in range(5)}) == 3
    assert [r["status"] for r in store.results] == ["ok", *["skipped"] * 3, "wrong"]
    assert store.results[2]["skip_reason"] == "queued by --retry"
    assert store.results[2]["error"] == "was timeout: E"


def test_redo_queues_the_selected_results_again_ok_ones_too(tmp_path):
    store = Store.open(tmp_path, CONFIG, resume=False)
    for n, status in enumerate(("ok", "n/a", "wrong", "skipped")):
        store.add({"case": f"c{n}", "baseline": "b", "status": status, "error": None,
                   "time_ms": 0.2, "graph_ms": 0.1})  # fmt: skip
    store.add({"case": "c0", "baseline": "other", "status": "ok", "error": None})
    assert store.requeue({(f"c{n}", "b") for n in range(4)}, redo=True) == 3
    assert [r["status"] for r in store.results] == ["skipped"] * 4 + ["ok"]  # not selected: kept
    assert store.results[0]["skip_reason"] == "queued by --redo"
    assert store.results[0]["error"] == "was ok: 0.2 ms as run, 0.1 ms under CUDA graphs"
    assert store.results[1]["error"] == "was n/a: None"


def test_a_redo_not_reached_keeps_the_result_it_had(tmp_path):
    """--redo queues ok results again; one its stage's time limit leaves unmeasured gets its
    old record back (the session and commit that measured it), not "not measured"."""
    store = Store.open(tmp_path, CONFIG, resume=False)
    for n in range(3):
        store.add({"case": f"c{n}", "baseline": "b", "status": "ok", "error": None,
                   "time_ms": 0.2 + n, "session": 0, "commit": "abc"})  # fmt: skip
    assert store.requeue({(f"c{n}", "b") for n in range(3)}, redo=True) == 3
    items = [SimpleNamespace(case=SimpleNamespace(name=f"c{n}", kind="gemm", group="g", shape="s",
                                                  dims=(1, 1, 1)), baseline="b", stage="evt")
             for n in range(3)]  # fmt: skip
    store.mark(items[:1], "n/a", "boom")  # measured again and failed: that is the result now
    store.mark(items[1:2], "skipped", "not reached", skip="time")
    again = Store.open(tmp_path, CONFIG, resume=True)
    by_case = {r["case"]: r for r in again.results}
    assert by_case["c0"]["status"] == "n/a" and by_case["c0"]["error"] == "boom"
    assert by_case["c1"]["status"] == "ok" and by_case["c1"]["time_ms"] == 1.2
    assert (by_case["c1"]["session"], by_case["c1"]["commit"]) == (0, "abc")
    assert by_case["c2"]["status"] == "skipped" and by_case["c2"]["replaced"]["time_ms"] == 2.2
    store.mark(items[2:], "skipped", "not reached", skip="time")  # a later call runs out too
    assert store.record("c2", "b")["status"] == "ok"


def test_bench_full_takes_a_calls_results_for_the_next(tmp_path):
    script = Path(__file__).resolve().parents[1] / "scripts/bench_full.sh"
    got = tmp_path / "files" / "bench"
    got.mkdir(parents=True)
    for name in ("results.json", "report.md", "part1.log"):
        (got / name).write_text(name)
    done = subprocess.run(["bash", str(script), "take", str(tmp_path / "files")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    carried = tmp_path / "out/bench-full"
    assert sorted(p.name for p in carried.iterdir()) == ["part1.log", "report.md", "results.json"]
    assert not (tmp_path / ".kpack").exists()  # the call built no kernel
    # the next call (part 1 resumed, then part 3): results replaced, logs kept and appended, the
    # kernels it built numbered after the carried archives
    for name, text in (("results.json", "second"), ("part1.log", "resumed"), ("part3.log", "three"),
                       ("kernels-built.tar.xz", "built")):  # fmt: skip
        (got / name).write_text(text)
    (tmp_path / ".kpack").mkdir()
    for n in (2, 10):
        (tmp_path / f".kpack/kernels-{n}.tar.xz").write_text(str(n))
    (got / "part1.log").chmod(0o444)  # what a call brings back is read-only
    done = subprocess.run(["bash", str(script), "take", str(tmp_path / "files")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (carried / "results.json").read_text() == "second"
    lines = (carried / "part1.log").read_text().splitlines()
    assert [line for line in lines if not line.startswith("=== part1.log, taken")] == ["part1.log", "resumed"]
    assert len(lines) == 4 and lines[0].startswith("=== part1.log, taken")
    assert (carried / "part3.log").read_text().endswith("===\nthree\n")
    assert (tmp_path / ".kpack/kernels-11.tar.xz").read_text() == "built"
    assert not (carried / "kernels-built.tar.xz").exists()


def test_outputs_flattens_nested_results():
    t = torch.ones(1)
    assert outputs((t, (t, [t]))) == (t, t, t)


def test_prebuild_picks_each_cases_tile_config_at_its_real_shape(monkeypatch):
    """The prebuild captures on "meta" at the real sizes, so a kernel is built with the config
    the heuristic picks for the shape the case runs (not the tiny CPU size, not another case's)."""
    from evt.bench import prebuild
    from evt.codegen.config import heuristic
    from evt.runtime import build

    jobs = []

    def record(job):
        jobs.append(job)
        done = build.Future()
        done.set_result(None)
        return done

    monkeypatch.setattr(build, "submit", record)
    cases = {c.name: c for c in plan.all_cases()}
    names = ["bias_relu/gpt2", "bias_relu/bert-down", "step/mlp"]
    n = prebuild.prebuild([cases[x] for x in names], torch.bfloat16, lambda line: None)
    assert n == len({j.key for j in jobs}) and len(jobs) == 1 + 1 + 4
    shapes = [(8192, 3072, 768, 1), (8192, 1024, 4096, 1)]
    for job, shape in zip(jobs, shapes):
        assert job.config == heuristic(job.spec, *shape)[0], (job.config, shape)
    tiny = plan.all_cases(small=True)[[c.name for c in plan.all_cases()].index("bias_relu/gpt2")]
    assert jobs[0].config != heuristic(jobs[0].spec, *tiny.dims, 1)[0]  # what the old capture chose


def run_in_turn_stage(monkeypatch, only: str, baseline: str) -> Store:
    """The in-turn stage on the CPU at tiny sizes, 2 rounds; torch.compile's C++ build is slow
    there, so the pair is eager and evt (reference path)."""
    from evt.bench import in_turn

    monkeypatch.setattr(in_turn, "PAIR", ("eager", "evt"))
    monkeypatch.setattr(in_turn, "ROUNDS", 2)
    store = Store(Path("unused.json"), {"results": []})
    monkeypatch.setattr(Store, "save", lambda self: None)
    runner.run_stage(small_plan(only, baseline), "in-turn", store, "cpu", torch.bfloat16, log=lambda s: None)
    return store


def test_in_turn_is_planned_for_steps_and_measures_both_in_one_process(monkeypatch):
    """The in-turn stage: planned for the training steps only (part 1, after torch.compile);
    it builds both baselines of its pair, checks them, and times them round after round into
    one record with no time of its own (no column in the per-baseline tables)."""
    from evt.bench import in_turn

    full = plan.make_plan(device="cuda")
    assert {i.case.name for i in full.items if i.baseline == "in-turn"} == {
        c.name for c in full.cases if c.kind == "step"
    }
    assert full.stages().index("in-turn") == full.stages().index("compile") + 1
    assert "in-turn" in plan.PARTS["1"].baselines
    store = run_in_turn_stage(monkeypatch, "step/mlp", "in-turn")
    (rec,) = store.results
    assert rec["status"] == "ok", rec["error"]
    assert set(rec["in_turn"]) == {"eager", "evt"}
    assert all(len(v) == 2 and min(v) > 0 for f in rec["in_turn"].values() for v in f.values())
    medians = {n: sum(f["time_ms"]) / 2 for n, f in rec["in_turn"].items()}  # of 2 rounds
    assert in_turn.ratio(rec, "time_ms") == pytest.approx(medians["eager"] / medians["evt"])
    assert report.baselines_in(store.results) == []  # not a timed baseline


def test_in_turn_ops_is_planned_only_where_named_and_measures_an_op(monkeypatch):
    """`in-turn-ops`: the same pairing for GEMM+epilogue cases (the largest GEMMs run under the
    GPU's power cap, whose clock moves between the stages' processes). Planned only where
    `--baselines` names it: the full suite does not plan it, its own part (5) does."""
    from evt.bench import markdown

    full = plan.make_plan(device="cuda")
    assert not any(i.baseline == "in-turn-ops" for i in full.items)
    assert [k for k, part in plan.PARTS.items() if "in-turn-ops" in part.baselines] == ["5"]
    named = plan.make_plan(only="swiglu/*,step/mlp", baselines="in-turn,in-turn-ops", device="cuda")
    assert {(i.case.name, i.baseline, i.stage) for i in named.items} == {
        ("swiglu/llama", "in-turn-ops", "in-turn"), ("swiglu/llama3", "in-turn-ops", "in-turn"),
        ("swiglu/tinyllama", "in-turn-ops", "in-turn"), ("step/mlp", "in-turn", "in-turn")}  # fmt: skip
    store = run_in_turn_stage(monkeypatch, "swiglu/tinyllama", "in-turn-ops")
    (rec,) = store.results
    assert rec["status"] == "ok" and set(rec["in_turn"]) == {"eager", "evt"}, rec.get("error")
    text = markdown.in_turn_table(store.results, "in-turn-ops")
    assert text.startswith("## GEMM+epilogue suite: evt and torch.compile measured in turn")
    assert "| swiglu/tinyllama |" in text and markdown.in_turn_table(store.results) == ""


def test_in_turn_rounds_faster_counts_rounds_and_gives_a_sign_test():
    from evt.bench import in_turn

    def rec(first, second):
        return {"in_turn": {"evt": {"time_ms": first}, "compile": {"time_ms": second}}}

    assert in_turn.rounds_faster(rec([1.0] * 7, [2.0] * 7), "time_ms") == (7, 7, pytest.approx(2 / 128))
    six = in_turn.rounds_faster(rec([1, 1, 1, 1, 1, 1, 3], [2] * 7), "time_ms")
    assert six == (6, 7, pytest.approx(2 * 8 / 128))  # 0.125: six of seven is not enough
    assert in_turn.rounds_faster(rec([3] * 7, [2] * 7), "time_ms") == (0, 7, pytest.approx(2 / 128))
    tie = in_turn.rounds_faster(rec([1, 2, 2, 1], [2, 2, 1, 2]), "time_ms")  # the tie is dropped
    assert tie == (2, 3, pytest.approx(1.0))
    assert in_turn.rounds_faster(rec([1, 2], [1, 2]), "time_ms") is None
    assert in_turn.rounds_faster(rec([1], [2]), "host_ms") is None
    from evt.bench import runner

    line = runner.summary({"stage": "in-turn", "case": "step/mlp", "baseline": "in-turn", "status": "ok",
                           "in_turn": {"evt": {"time_ms": [1.0] * 7, "host_ms": [1.0] * 7, "graph_ms": [0.8] * 7},
                                       "compile": {"time_ms": [2.0] * 7, "host_ms": [1.0] * 7,
                                                   "graph_ms": [1.0] * 7}}})  # fmt: skip
    assert line.endswith("evt / compile: as run 0.500, host 1.000, graphs 0.800 (medians, in turn); evt faster "
                         "in 7 of 7 rounds (p 0.016)"), line  # fmt: skip


def test_in_turn_rounds_time_graph_replays_where_given():
    from evt.bench import in_turn

    calls = []
    impls = {"evt": lambda: calls.append("evt"), "compile": lambda: calls.append("compile")}
    times = in_turn.alternate(impls, "cpu", 2, host_steps=2, replays={"evt": lambda: calls.append("replay")})
    assert set(times["evt"]) == {"time_ms", "host_ms", "graph_ms"} and set(times["compile"]) == {"time_ms", "host_ms"}
    assert all(len(v) == 2 for f in times.values() for v in f.values())
    assert "replay" in calls
    assert in_turn.ratio({"in_turn": times}, "graph_ms") is None  # compile has no graph rounds


def test_in_turn_table_gives_medians_spread_and_ratios():
    r = _rec("step/mlp", "in-turn", kind="step")
    r["in_turn"] = {"evt": {"time_ms": [1.0, 0.9, 1.2], "host_ms": [0.8, 0.7, 0.9], "graph_ms": [0.5, 0.6, 0.4]},
                    "compile": {"time_ms": [1.2, 1.1, 1.3], "host_ms": [1.0, 0.9, 1.1],
                                "graph_ms": [0.6, 0.5, 0.5]}}  # fmt: skip
    bad = _rec("step/gpt2", "in-turn", "wrong", kind="step", error="compile: mismatch")
    evt = _rec("step/mlp", "evt", ms=1.0, kind="step")
    md = markdown.in_turn_table([r, bad, evt])
    assert "## Training steps: evt and torch.compile measured in turn" in md
    assert ("| step/mlp | s | 3 | 1.00 [0.90 .. 1.20] | 1.20 [1.10 .. 1.30] | 0.83 | 3 of 3 (p 0.25) "
            "|") in md  # fmt: skip
    assert "| 0.80 [0.70 .. 0.90] | 1.00 [0.90 .. 1.10] | 0.80 | 1.00 | 2 of 3 (p 1) |" in md
    assert "| step/gpt2 | s | wrong |" in md and "Geomean evt speedup as run: 1.20× (1 steps)" in md
    assert "Under CUDA graphs: 1.00× (1 steps)." in md  # medians 0.5 and 0.5
    rows = dict(report.summary([r, evt]))
    assert set(rows) == {"evt"}  # in-turn has no row in the summary, nor a column anywhere
    full = markdown.render({"config": CONFIG, "env": {}, "results": [r, evt]})
    assert "measured in turn" in full and "| in-turn |" not in full.split("## Coverage")[0]


def test_step_cases_divide_the_batch():
    from evt.bench import plan

    full = {c.name: c for c in plan.all_cases() if c.kind == "step"}
    got = plan.step_cases("step/mlp,step/bert", 8)
    assert [c.name for c in got] == [n for n in full if n in ("step/mlp", "step/bert")]
    for c in got:
        assert c.dims == (full[c.name].dims[0] // 8, *full[c.name].dims[1:])
    assert all(c.dims[0] == 1 for c in plan.step_cases("step/*", 10**6))
    assert plan.step_cases("bias/*") == []  # GEMM cases are not steps


def test_calls_held_beyond_their_host_and_gpu_times_are_listed_with_the_geomean_without_them():
    """An as-run time well above both the host time and the CUDA-graph time (session 36: five
    evt cases at 1.26-1.51x) is listed, and evt's as-run fraction of the bare GEMM is given
    without the cases listed for evt or mm; a host-paced call (as run ≈ its host time) is not."""

    def rec(case, baseline, ms, host, graph):
        r = _rec(case, baseline, ms=ms)
        r.update(host_ms=host, graph_ms=graph, finished="2026-11-28T09:27:01+00:00")
        return r

    results = [rec("a/x", "mm", 1.0, 0.1, 1.0), rec("a/x", "evt", 1.25, 0.2, 0.9),  # held: 1.25 > 1.15 x 0.9
               rec("b/x", "mm", 1.0, 0.1, 1.0), rec("b/x", "evt", 1.1, 1.05, 0.9),  # host-paced
               rec("c/x", "mm", 2.0, 0.1, 2.0), rec("c/x", "evt", 2.0, 0.2, 1.8)]  # fmt: skip
    md = markdown.held_table(results)
    assert "| a/x | evt | 1.2500 | 0.2000 | 0.9000 | 1.39 | 09:27:01 |" in md
    assert "b/x" not in md and "c/x" not in md
    # evt ÷ mm as run: a 0.80, b 0.909, c 1.0; without a: sqrt(0.909 * 1.0)
    assert "is 0.95 (2 cases; 0.90 with them)" in md
    assert markdown.held_table(results[2:]) == ""
    assert "Timed as run, slower than their host and GPU times explain" in markdown.render(
        {"config": {"dtype": "bf16", "device": "cuda"}, "env": {}, "results": results})


def test_a_compiled_baseline_past_dynamos_recompile_limit_raises_instead_of_running_eager():
    """Past its recompile limit Dynamo runs a frame eager without an error: a script building
    the same step's code over and over timed eager code as evt's (session 43). The bench's
    compiled baselines make that an error (the limit lowered to 2 here: three builds)."""
    case = {c.name: c for c in plan.all_cases(small=True)}["step/mlp"]
    s = runner.CaseState.build(case, torch.float32, "cpu")
    with torch._dynamo.config.patch(recompile_limit=2):
        torch._dynamo.reset()
        try:
            for _ in range(2):
                BASELINES["evt"].build(s.workload, "cpu")(*s.input_sets[0])
            with pytest.raises(Exception, match="recompile"):
                BASELINES["evt"].build(s.workload, "cpu")(*s.input_sets[0])
        finally:
            torch._dynamo.reset()


def test_the_autotune_choices_are_checked_against_the_benchs_own_times():
    """Where evt's max-autotune chose another config, tile order or the unfused path, the gain
    its timing predicted is set beside evt's time ÷ evt-max-autotune's in the bench (session 43:
    1.035x predicted over 14 cases, 1.003 in the bench); cases it left as the default mode
    would, and training steps (more than the regions in their time), are not listed."""
    def case(name, outcomes, evt_ms, tuned_ms, kind="op"):
        a, e = _rec(name, "evt-max-autotune", ms=tuned_ms, kind=kind), _rec(name, "evt", ms=evt_ms, kind=kind)
        a["graph_ms"], e["graph_ms"] = tuned_ms, evt_ms
        a["notes"] = {"autotune": outcomes}
        return [a, e]

    other = _outcome("evt_f0_addmm", "256x128x64_c2x1", 3, 0.08, 0.10)  # config and order 0:2
    same = _outcome("evt_f0_addmm", "128x128x64_c1x1", 1, 0.10, 0.10)
    same["tile_order"] = "0:0"
    unfused = _outcome("evt_f0_mm", "128x128x64_c1x1", 1, 0.10, 0.25, fuse=False)  # 0.25 / 0.2
    results = (case("a/x", [other], 0.10, 0.099) + case("b/x", [same], 0.10, 0.09)
               + case("c/x", [unfused], 0.10, 0.104) + case("step/x", [other], 1.0, 0.5, "step"))
    md = markdown.autotune_held_table(results)
    assert "On 2 GEMM cases" in md and "predicted 1.250x" in md  # (1.25 * 1.25) ** 0.5
    assert "under CUDA graphs was 0.986" in md  # (0.1 / 0.099 * 0.1 / 0.104) ** 0.5
    assert "| a/x | evt_f0_addmm 256x128x64_c2x1 (0:2) | 1.250 | 1.010 | 1.010 |" in md
    assert "| c/x | evt_f0_mm left unfused | 1.250 | 0.962 | 0.962 |" in md
    assert "| b/x |" not in md and "step/x" not in md
    assert markdown.autotune_held_table(case("b/x", [same], 0.10, 0.09)) == ""


def test_timing_waits_for_evts_kernel_builds(monkeypatch):
    """Under `EVT_WAIT_KERNELS=0` a region runs its reference path until its kernel is built:
    `measure.time_ms` and `host_ms` call the timed function only once every build has ended."""
    import threading
    from concurrent.futures import Future

    from evt.runtime import build

    pending: Future = Future()
    monkeypatch.setattr(build, "_futures", {"key": pending})
    ended, first_call = [], []

    def finish():
        ended.append(time.perf_counter())
        pending.set_result(None)

    for timer in (measure.time_ms, lambda fn, device: measure.host_ms(fn, device, n=2)):
        first_call.clear()
        if pending.done():
            pending = Future()
            monkeypatch.setattr(build, "_futures", {"key": pending})
        threading.Timer(0.2, finish).start()
        timer(lambda: first_call.append(time.perf_counter()), "cpu")
        assert first_call and first_call[0] >= ended[-1]


def test_host_time_table_counts_the_calls_the_host_paces():
    """The GEMM cases' host time per call (us) by baseline, and per baseline how many cases'
    host time exceeds their CUDA-graph time (as run, those measure the host)."""

    def rec(case, baseline, host, graph):
        r = _rec(case, baseline, ms=max(host, graph))
        r.update(host_ms=host, graph_ms=graph)
        return r

    results = [rec("a/x", "mm", 0.02, 0.10), rec("a/x", "evt", 0.12, 0.09),
               rec("b/x", "mm", 0.03, 1.00), rec("b/x", "evt", 0.05, 0.95)]  # fmt: skip
    md = markdown.host_table(results)
    assert md.startswith("## GEMM+epilogue suite: host time per call (us)")
    assert "exceeds their GPU time: mm 0 of 2, evt 1 of 2." in md
    assert "| a/x | 8×8×8 | 20.0 | 120.0 |" in md and "| b/x | 8×8×8 | 30.0 | 50.0 |" in md
    assert markdown.host_table([_rec("a/x", "evt", ms=0.1)]) == ""  # no host time recorded
    assert "host time per call (us)" in markdown.render(
        {"config": {"dtype": "bf16", "device": "cuda"}, "env": {}, "results": results})


def test_each_stage_records_the_host_probe_at_its_start_and_end(monkeypatch):
    """A stage's run records its process's host time per small launch before and after its
    items (`measure.host_probe_us`), and the stages table shows both: host times of runs whose
    probes differ are not comparable (session 66)."""
    from evt.bench import coverage

    probes = iter([7.0, 9.5])
    monkeypatch.setattr(measure, "host_probe_us", lambda device: next(probes))
    store = Store(Path("unused.json"), {"results": []})
    monkeypatch.setattr(Store, "save", lambda self: None)
    runner.run_stage(small_plan("bias/gpt2", "eager"), "eager", store, "cpu", torch.bfloat16,
                     log=lambda s: None)  # fmt: skip
    assert [r["status"] for r in store.results] == ["ok"]
    (run,) = store.data["stages"]["eager"]["runs"]
    assert run["host_probe_us"] == 7.0 and run["host_probe_end_us"] == 9.5
    md = coverage.stages_table(store.data, markdown.table)
    assert "host probe (us): start / end" in md and "| 7.0 / 9.5 |" in md


def test_the_host_probe_times_a_small_launch_on_this_device():
    us = measure.host_probe_us("cpu", readings=3)
    assert 0 < us < 10_000  # one in-place add of one element, dispatched from Python


def test_an_op_cases_host_time_is_the_median_of_its_readings(monkeypatch):
    """One slow reading (a stall of the host's) does not become the case's host time; a step,
    whose 50 calls take seconds, is read once."""
    readings = iter([0.040, 0.041, 0.300, 0.039, 0.042])
    monkeypatch.setattr(measure, "host_ms", lambda fn, device, n=50: next(readings))
    assert measure.host_ms_median(lambda: None, "cpu", runner.HOST_READINGS) == 0.041
    calls = []
    monkeypatch.setattr(measure, "host_ms", lambda fn, device, n=50: calls.append(n) or 1.0)
    assert measure.host_ms_median(lambda: None, "cpu", 1) == 1.0 and calls == [50]
    assert measure.host_ms_median(lambda: None, "cpu", 0) == 1.0 and len(calls) == 2


def test_a_failing_host_probe_records_nothing_and_the_stage_runs(monkeypatch):
    def broken(device):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(measure, "host_probe_us", broken)
    store = Store(Path("unused.json"), {"results": []})
    monkeypatch.setattr(Store, "save", lambda self: None)
    runner.run_stage(small_plan("bias/gpt2", "eager"), "eager", store, "cpu", torch.bfloat16,
                     log=lambda s: None)  # fmt: skip
    assert [r["status"] for r in store.results] == ["ok"]
    assert "host_probe_us" not in str(store.data.get("stages"))

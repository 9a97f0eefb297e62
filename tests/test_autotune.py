"""Config heuristic, per-region config choice, and max-autotune's decisions (CPU tier: timings are
injected, nothing here measures speed)."""

import dataclasses
import math

import pytest
import torch

from evt import ir, pipeline
from evt.codegen import config as cfgs
from evt.examples import MLP
from evt.runtime import autotune, dispatch
from tests import specs
from tests.graphs import LinearAct, capture_joint

SHAPES = [(8192, 3072, 768), (8192, 768, 3072), (16384, 4096, 4096), (300, 200, 64), (1, 8, 8)]


@pytest.mark.parametrize("shape", SHAPES)
def test_heuristic_ranks_fitting_candidates(shape):
    spec = specs.mlp_fc1_forward()
    ranked = cfgs.heuristic(spec, *shape)
    assert ranked and all(cfgs.fits(spec, c) for c in ranked)
    assert len({c.label for c in ranked}) == len(ranked)
    # the exact GELU ranks ping-pong last; within each schedule, cheapest estimate first
    schedules = [c.schedule for c in ranked]
    assert schedules == sorted(schedules, key=lambda s: s == "pingpong")
    for schedule in set(schedules):
        est = [cfgs.estimate(spec, c, *shape) for c in ranked if c.schedule == schedule]
        assert est == sorted(est) and all(e > 0 and math.isfinite(e) for e in est)


def test_heuristic_follows_the_sweep():
    """What benchmarks/config_sweep.py measured on an H200: a light epilogue (bias + tanh GELU)
    runs fastest ping-pong (its epilogue hides behind the other warp group's main loop); one that
    also writes an [M, N] aux tensor runs fastest 128x256 cooperative at small K; and on an H100
    the exact GELU (heavy arithmetic) ran fastest cooperative with or without the aux tensor."""
    heavy = specs.mlp_fc1_forward()
    exact = ir.KernelSpec("exact", heavy.gemm, tuple(
        n for n in heavy.nodes if not isinstance(n, ir.AuxStore)), "gelu", "bf16", 3)  # fmt: skip
    tanh = tuple(dataclasses.replace(n, op="gelu_tanh") if getattr(n, "op", None) == "gelu" else n
                 for n in exact.nodes)  # fmt: skip
    light = dataclasses.replace(exact, name="light", nodes=tanh)
    assert cfgs.heuristic(light, 8192, 3072, 768)[0].schedule == "pingpong"
    assert cfgs.heuristic(exact, 8192, 3072, 768)[-1].schedule == "pingpong"
    best = cfgs.heuristic(heavy, 8192, 3072, 768)[0]
    assert (best.tile_m, best.tile_n, best.schedule) == (128, 256, "cooperative")
    # both load one [M, N] tensor; GELU's backward adds special functions (erf, exp)
    assert cfgs.epilogue_cost(specs.mlp_dgrad_gelu()) > cfgs.epilogue_cost(specs.mlp_fc2_residual())


def test_row_reductions_avoid_the_tiles_that_spill_them():
    """Measured on an H100 (scripts/spec_ablation.py; ptxas put the partials in local memory):
    two or more row reductions run far faster at 128x64, one never at 128x128 cooperative."""
    ln = specs.layer_norm_backward()  # two row and two column reductions
    for shape in [(8192, 768, 3072), (8192, 1024, 4096), (300, 200, 64)]:
        first = cfgs.heuristic(ln, *shape)[0]
        assert (first.tile_m, first.tile_n) == (128, 64), (shape, first)
    assert (cfgs.default_config(ln).tile_m, cfgs.default_config(ln).tile_n) == (128, 64)
    one = specs.mlp_dgrad_gelu_bias()  # one row reduction: the bias gradient
    for shape in SHAPES:
        ranked = cfgs.heuristic(one, *shape)
        coop128 = [i for i, c in enumerate(ranked)
                   if (c.tile_m, c.tile_n, c.schedule) == (128, 128, "cooperative")]  # fmt: skip
        assert coop128 and all(i >= len(ranked) - len(coop128) for i in coop128), shape  # last
    plain = specs.mlp_fc2_residual()  # no row reduction: the rule does not apply
    assert all(cfgs.row_reduction_tier(plain, c) == 0 for c in cfgs.CANDIDATES)


def test_config_for_picks_once_per_signature(monkeypatch, tmp_path):
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path))
    dispatch.reset()
    spec = specs.mlp_fc1_forward()
    assert dispatch.config_for(spec, None) is None  # no shape yet: the shape-blind default
    first = dispatch.config_for(spec, (16384, 4096, 4096, 1))
    assert first == cfgs.heuristic(spec, 16384, 4096, 4096)[0]
    assert dispatch.config_for(spec, (64, 64, 64, 1)) == first  # later shapes reuse the binary
    dispatch.set_config(spec, cfgs.TileConfig(128, 64, 64))
    assert dispatch.config_for(spec, None) == cfgs.TileConfig(128, 64, 64)
    dispatch.reset()


def test_config_for_reads_autotune_decisions(monkeypatch, tmp_path):
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path))
    dispatch.reset()
    spec, problem = specs.mlp_fc1_forward(), (8192, 3072, 768, 1)
    label = cfgs.heuristic(spec, *problem[:3])[-1].label  # not what the heuristic would pick
    autotune.store(autotune.decision_key(spec, problem), autotune.Decision(True, label, 1.0, 2.0))
    assert dispatch.config_for(spec, problem).label == label
    dispatch.reset()


def test_choose_fuses_only_when_faster():
    assert autotune.choose({"a": 1.0, "b": 0.5}, 0.8) == autotune.Decision(
        True, "b", 0.5, 0.8, {"a": 1.0, "b": 0.5}, "faster than unfused")
    slower = autotune.choose({"a": 1.0}, 0.8)
    assert not slower.fuse and slower.config == "a" and "slower" in slower.reason
    failed = autotune.choose({"a": math.inf}, 0.8)
    assert not failed.fuse and failed.reason == "no candidate config ran"
    assert autotune.choose({"a": 1.0}, None).fuse  # unfused path not measurable: trust the kernel


def test_decision_cache_round_trip(monkeypatch, tmp_path):
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path))
    d = autotune.Decision(False, "x", 2.0, 1.0, {"x": 2.0, "y": math.inf}, "slower than unfused")
    autotune.store("k", d)
    back = autotune.load("k")
    assert back.fuse is False and back.timings["x"] == 2.0 and math.isinf(back.timings["y"])
    (tmp_path / "autotune" / "bad.json").write_text("{truncated")
    assert autotune.load("bad") is None  # unreadable: measured again, never trusted
    assert "left unfused" in autotune.describe(back)


def test_veto_leaves_region_in_graph_with_reason():
    graph = capture_joint(MLP(32, 64), torch.randn(16, 32, requires_grad=True))
    report = pipeline.fuse(graph, check=True, keep=lambda region, built: region.side == "backward")
    assert report.regions and all(r.side == "backward" for r in report.regions)
    whys = [why for _, side, why in report.unfused if side == "forward"]
    assert any("max-autotune" in w for w in whys), report.unfused
    assert any(n.target == torch.ops.aten.gelu.default for n in graph.nodes)


def test_unfused_runner_runs_the_region_nodes():
    graph = capture_joint(LinearAct(act="gelu"), torch.randn(16, 32, requires_grad=True))
    seen = []

    def keep(region, built):
        run = autotune.unfused_runner(region, device="cpu")
        values = run()
        for out in region.outputs():
            assert values[out].shape == out.meta["val"].shape
        seen.append(region.anchor.name)
        return True

    pipeline.fuse(graph, keep=keep)
    assert seen


def test_heuristic_scores_on_the_committed_sweeps():
    """benchmarks/heuristic_score.py: the heuristic's first choice among the configs each
    committed exhaustive sweep timed, as a fraction of the measured best (CPU only)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import heuristic_score

    groups = heuristic_score.sweeps()
    results = heuristic_score.score(groups, heuristic_score.capture_specs(groups))
    fractions = [pick["tflops"] / best["tflops"] for _, pick, best in results]
    assert len(fractions) >= 38
    assert math.exp(sum(map(math.log, fractions)) / len(fractions)) > 0.985
    assert min(fractions) > 0.92

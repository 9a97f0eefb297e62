"""Config heuristic, per-region config choice, and max-autotune's decisions (CPU tier: timings are
injected, nothing here measures speed)."""

import dataclasses
import json
import math
import types
from concurrent.futures import Future

import pytest
import torch
from torch import nn

from evt import ir, pipeline
from evt.bench.patterns import attention_scores
from evt.codegen import config as cfgs
from evt.codegen import wave_traffic
from evt.codegen.emit import render
from evt.errors import CodegenError, LaunchError
from evt.examples import MLP
from evt.graph.statistics_ops import SOFTMAX_SUM
from evt.runtime import autotune, build, dispatch, guards, launch, reference, unfused
from tests import specs
from tests.graphs import LinearAct, LinearStatistics, capture_joint

SHAPES = [(8192, 3072, 768), (8192, 768, 3072), (16384, 4096, 4096), (300, 200, 64), (1, 8, 8)]


@pytest.mark.parametrize("shape", SHAPES)
def test_heuristic_ranks_fitting_candidates(shape):
    spec = specs.mlp_fc1_forward()
    ranked = cfgs.heuristic(spec, *shape)
    assert ranked and all(cfgs.fits(spec, c) for c in ranked)
    assert len({c.label for c in ranked}) == len(ranked)
    # tiles that keep 3 main-loop stages first; within each tier, cheapest estimate first
    tiers = [cfgs.stage_tier(spec, c) for c in ranked]
    assert tiers == sorted(tiers)
    for tier in set(tiers):
        est = [cfgs.estimate(spec, c, *shape) for c, t in zip(ranked, tiers) if t == tier]
        assert est == sorted(est) and all(e > 0 and math.isfinite(e) for e in est)


def test_unaligned_outputs_get_padded_rows_and_tma_stores():
    """Where an output's rows are not whole 16-byte vectors (TMA's unit), the outputs are
    allocated with rows padded to one (`ir.row_pitch`, per output dtype) and the heuristic keeps
    TMA stores; the kernel's ABI strides and the tensors' strides agree."""
    spec = specs.mlp_fc1_forward()  # bf16 D and a bf16 aux store
    for n, padded in ((768, False), (197, True), (100, True)):
        ranked = cfgs.heuristic(spec, 8192, n, 768)
        assert {(c.store_align, c.pad_rows) for c in ranked} == {(0, padded)} == {
            (0, cfgs.pads_rows(spec, n))}
    assert not cfgs.pads_rows(specs.dag_square(), 4) and cfgs.pads_rows(specs.dag_square(), 6)
    # 32-byte rows where padded at all (16 bytes is TMA's unit; see ir.row_pitch)
    assert [ir.row_pitch(197, d) for d in ("bf16", "f32", "b8")] == [208, 200, 224]
    assert [ir.row_pitch(n, "bf16") for n in (8, 200, 768, 100)] == [8, 200, 768, 112]
    (d, _), (aux, _) = spec.output_layouts(64, 197, 1)[:2], spec.output_layouts(64, 100, 1)[:2]
    assert d == ((64, 197), (208, 1)) and aux == ((64, 100), (112, 1))
    vit = specs.attention_scores()  # batched: ViT's 197 tokens
    assert vit.output_layouts(197, 197, 768)[0] == ((768, 197, 197), (197 * 208, 208, 1))
    assert vit.output_strides(197, 197, 768)[:3] == (208, 1, 197 * 208)
    assert all(c.store_align == 0 and c.pad_rows for c in cfgs.heuristic(vit, 197, 197, 64, 768))
    nested = specs.nested_attention_scores()  # [L1 * L2, M, N] with (M, N, L1, L2) ABI strides
    assert nested.output_strides(197, 197, 12)[:4] == (208, 1, 12 * 197 * 208, 197 * 208)


def test_heuristic_follows_the_sweep():
    """What benchmarks/config_sweep.py measured: on an H200 a light epilogue (bias + tanh GELU)
    ran fastest ping-pong (its epilogue hides behind the other warp group's main loop); on an
    H100 (session 13, `config_sweep_sfu_tiles.json`) the exact GELU, once its epilogue took
    20-27% fewer instructions, ran fastest ping-pong at K = 768 and 1024 (0.78-0.82 of the bare
    GEMM against 0.77-0.78 at 128x256 cooperative) and 128x256 cooperative at K = 4096 (0.94
    against 0.80), where the main loop already hides nothing and ping-pong's narrower tile
    costs more."""
    heavy = specs.mlp_fc1_forward()
    exact = ir.KernelSpec("exact", heavy.gemm, tuple(
        n for n in heavy.nodes if not isinstance(n, ir.AuxStore)), "gelu", "bf16", 3)  # fmt: skip
    tanh = tuple(dataclasses.replace(n, op="gelu_tanh") if getattr(n, "op", None) == "gelu" else n
                 for n in exact.nodes)  # fmt: skip
    light = dataclasses.replace(exact, name="light", nodes=tanh)
    assert cfgs.heuristic(light, 8192, 3072, 768)[0].schedule == "pingpong"
    assert cfgs.heuristic(exact, 8192, 4096, 1024)[0].schedule == "pingpong"
    assert cfgs.heuristic(exact, 8192, 1024, 4096)[0].label == "128x256x64_c1x1_cooperative"
    # both load one [M, N] tensor; GELU's backward adds special functions (erf, exp)
    assert cfgs.epilogue_cost(specs.mlp_dgrad_gelu()) > cfgs.epilogue_cost(specs.mlp_fc2_residual())


def test_reductions_over_m_take_tall_tiles_where_the_epilogue_sets_the_pace():
    """A reduction over M costs partly per column of each tile, so its share per element
    shrinks in a 256-row tile. Measured on the H200 (session 55, `config_sweep_patchtst.json`
    and `config_sweep_reductions_over_m.json`): PatchTST's dgrad with the exact GELU's backward
    and its bias gradient (131072x256x128) ran in 76.9 us at 256x128 against 88.1 at 128x256,
    the tanh GELU's backward without the reduction level (56.0 against 56.2); at K = 4096 (an
    earlier H200 sweep) 256x128 ran the dgrad with its bias gradient 7% behind 128x256."""
    reduced, plain = specs.mlp_dgrad_gelu_bias(), specs.mlp_dgrad_gelu()
    tall = "256x128x64_c1x1_cooperative"
    assert cfgs.heuristic(reduced, 131072, 256, 128)[0].label.startswith(tall)
    assert not cfgs.heuristic(plain, 131072, 256, 128)[0].label.startswith("256x128")
    assert not cfgs.heuristic(reduced, 8192, 1024, 4096)[0].label.startswith("256x128")
    # without a config (the profitability model's unit tile) a reduction costs as any other
    reduction = cfgs.epilogue_parts(reduced)[1] - cfgs.epilogue_parts(plain)[1]
    assert reduction == cfgs._COST["reduction"]


def test_wide_tiles_of_192_fill_the_waves_where_n_is_768():
    """128x192 tiles (session 13): at N = 768 they make 4 tiles a row where 128x256 makes 3, and
    at 12608 x 768 exactly 3 waves of 132 SMs (128x256: 297 tiles, 2.25 waves). Measured on an
    H100 (`config_sweep_sfu_tiles.json`): dgrad + bias gradient at 12608x768x3072 0.97 of the
    bare GEMM against 0.87 (ping-pong) and 0.77 (128x256)."""
    spec = specs.mlp_dgrad_gelu_bias()
    wide, narrow = cfgs.TileConfig(128, 192, 64), cfgs.TileConfig(128, 256, 64)
    assert cfgs.estimate(spec, wide, 12608, 768, 3072) < cfgs.estimate(spec, narrow, 12608, 768, 3072)
    # where N is not a multiple of 192 the wider tile wins again
    assert cfgs.estimate(spec, narrow, 8192, 4096, 1024) < cfgs.estimate(spec, wide, 8192, 4096, 1024)


def test_tiles_left_two_mainloop_stages_rank_last():
    """Measured on an H100 (scripts/spec_ablation.py, session 10): LayerNorm's backward, whose
    fp32 aux tensor and fp32 D leave 128x256 and 256x128 two mainloop stages, ran there in
    148-163 us against 84-107 us at 128x128 and 128x64 (8192x768x3072)."""
    ln = specs.layer_norm_backward()  # two row and two column reductions
    for shape in [(8192, 768, 3072), (8192, 1024, 4096), (300, 200, 64), (8192, 768, 50304)]:
        ranked = cfgs.heuristic(ln, *shape)
        tiers = [cfgs.stage_tier(ln, c) for c in ranked]
        assert tiers == sorted(tiers) and tiers[0] == 0, (shape, tiers)
        assert cfgs.mainloop_stages(ln, ranked[0]) >= 3
    # CUTLASS's 4 aux stages leave 128x256 two (the heuristic's own configs take 3 aux stages
    # there since session 14, and 3 main-loop stages: test_aux_loads_take_fewer_stages...)
    assert cfgs.stage_tier(ln, cfgs.TileConfig(128, 256, 64)) == 1
    first = cfgs.heuristic(ln, 8192, 768, 3072)[0]
    assert (first.tile_m, first.tile_n) == (128, 128)
    assert cfgs.stage_tier(ln, cfgs.default_config(ln)) == 0
    # one row reduction no longer keeps 128x128 cooperative last (CUTLASS's tile reduction
    # used local memory there; evt's unrolled one does not)
    one = specs.mlp_dgrad_gelu_bias()
    ranked = [c.label for c in cfgs.heuristic(one, 8192, 768, 3072)]
    assert ranked.index("128x128x64_c1x1_cooperative") < len(ranked) // 2


def test_stream_k_ranks_first_only_where_the_last_wave_is_mostly_empty():
    """H100 sweep, session 11: stream-K ran 6-10% slower than the persistent kernel at the same
    tile over many waves and beat it only where the last wave was under about half full; a
    narrower persistent tile beat it at every swept shape."""
    spec = specs.mlp_fc1_forward()
    for shape in [(8192, 3072, 768), (12608, 3072, 768), (8192, 768, 3072), (8192, 1024, 4096)]:
        assert cfgs.heuristic(spec, *shape)[0].scheduler == "persistent", shape
    sk, whole = cfgs.TileConfig(128, 256, 64, scheduler="streamk"), cfgs.TileConfig(128, 256, 64)
    # whole waves: stream-K's scheduler falls back to data-parallel tiles, a bit slower
    assert cfgs.estimate(spec, whole, 16896, 256, 1024) < cfgs.estimate(spec, sk, 16896, 256, 1024)
    # 1.45 waves (192 tiles): about even, as measured (0.48 tiles of fixup)
    ratio = cfgs.estimate(spec, sk, 8192, 768, 3072) / cfgs.estimate(spec, whole, 8192, 768, 3072)
    assert 0.95 < ratio < 1.1
    # 2.25 waves (297 tiles): stream-K ahead of the same tile run whole (measured 96 vs 105 us)
    assert cfgs.estimate(spec, sk, 12608, 768, 3072) < cfgs.estimate(spec, whole, 12608, 768, 3072)


def test_ping_pong_ranks_last_for_special_statistics_only():
    """Softmax's and cross-entropy's statistics (exp) rank ping-pong last but for 128x128
    ping-pong with a 1x2 cluster, first at K <= 1024 (session 16's sweep: 0.86-0.91 of
    the bare GEMM, against 0.67-0.71 without the cluster at K >= 1024 and 0.78-0.84 cooperative),
    the estimate's cooperative tile at K = 4096; the exact GELU ranked ping-pong last until
    session 13 made its epilogue cheaper; LayerNorm's statistics (Welford) and its
    backward are ranked by the estimate: ping-pong won LayerNorm's statistics at 8192x768x3072
    (H100, sessions 11 and 13; 128x256 cooperative won at 8192x1024x4096 in session 13) and its
    backward at 8192x1024x4096 (126 us against 147 cooperative) and at the LM head's
    8192x768x50304 (929 against 985)."""
    from tests.graphs import explain_case

    def spec(case):
        return explain_case(case).regions[0].spec

    for case in ("softmax_stats/gpt2", "ce_forward/bert"):
        for shape in [(8192, 50304, 768), (8192, 30528, 1024), (4096, 32000, 4096)]:
            ranked = cfgs.heuristic(spec(case), *shape)
            last = [c.schedule == "pingpong" and (c.cluster_n == 1 or shape[2] > 1024)
                    for c in ranked if not wave_traffic.outruns(c, *shape, 1, cfgs.SM_COUNT)]  # fmt: skip
            assert last == sorted(last), (case, shape)  # all of them last but configs whose
            # waves outrun DRAM (128x64 tiles at LLaMA's head: `wave_traffic.outruns`)
            want = "128x128x64_c1x2_pingpong" if shape[2] <= 1024 else "128x256x64_c1x1_cooperative"
            assert ranked[0].label == want, (case, shape)
    stats = spec("layernorm_stats/bert")
    assert cfgs.heuristic(stats, 8192, 768, 3072)[0].schedule == "pingpong"
    ln = specs.layer_norm_backward()
    assert cfgs.heuristic(ln, 8192, 1024, 4096)[0].label == "128x128x64_c1x1_pingpong"


def test_shortlist_times_every_schedule(monkeypatch):
    """max-autotune times the heuristic's first few and the best of each schedule they leave
    out: statistics rank ping-pong last, where it won LayerNorm's statistics on the H100."""
    from evt.runtime import autotune

    spec, shape = specs.row_statistics(), (8192, 768, 3072)
    ranked = cfgs.heuristic(spec, *shape)
    assert all(c.schedule == "cooperative" for c in ranked[:3])
    short = autotune.shortlist(spec, shape + (1,))
    assert short[:3] == ranked[:3] and len(short) == 4
    assert short[3] == next(c for c in ranked if c.schedule == "pingpong")
    monkeypatch.setenv("EVT_AUTOTUNE_TOP", "1")
    assert [c.schedule for c in autotune.shortlist(spec, shape + (1,))] == ["cooperative", "pingpong"]
    monkeypatch.setenv("EVT_AUTOTUNE_TOP", "100")
    assert autotune.shortlist(spec, shape + (1,)) == ranked


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


def test_choose_takes_the_fastest_config_and_tile_order():
    timings = {"a": 1.0, "a@0:2": 0.7, "b": 0.8, "b@1:8": math.inf}
    d = autotune.choose(timings, 0.9)
    assert (d.fuse, d.config, d.tile_order, d.fused_ms) == (True, "a", "0:2", 0.7)
    assert autotune.order_of(d) == launch.TileOrder(0, 2)
    assert "fused with a in tile order 0:2" in autotune.describe(d)
    tie = autotune.choose({"a": 0.7, "a@0:2": 0.7}, None)  # evt's order, timed first, on a tie
    assert (tie.config, tie.tile_order, autotune.order_of(tie)) == ("a", "", launch.EVT_ORDER)
    assert autotune.split_key("128x128x64_c1x1_pingpong@2:4") == (
        "128x128x64_c1x1_pingpong", launch.TileOrder(2, 4))


def test_tile_orders_come_from_the_environment(monkeypatch):
    monkeypatch.delenv("EVT_AUTOTUNE_ORDERS", raising=False)
    assert [o.label for o in autotune.tile_orders()] == ["0:0", "0:1", "0:2", "0:4", "0:8"]
    monkeypatch.setenv("EVT_AUTOTUNE_ORDERS", "1:2, 0:0,2:0")
    assert [o.label for o in autotune.tile_orders()] == ["0:0", "1:2", "2:0"]  # evt's first
    monkeypatch.setenv("EVT_AUTOTUNE_ORDERS", "")
    assert autotune.tile_orders() == [launch.EVT_ORDER]
    monkeypatch.setenv("EVT_AUTOTUNE_ORDERS", "0:3")
    with pytest.raises(LaunchError, match="EVT_AUTOTUNE_ORDERS='0:3': tile order 0:3"):
        autotune.tile_orders()


class _OrderedFake:
    """Stands in for a built kernel in `time_candidates`: computes the reference path, except
    in tile order 0:8 of the config `wrong`, where it returns zeros; records every call."""

    calls: list = []
    wrong = ""

    def __init__(self, spec, label, order=launch.EVT_ORDER):
        self.spec, self.label, self.order = spec, label, order

    def ordered(self, order):
        return _OrderedFake(self.spec, self.label, order)

    def __call__(self, inputs):
        _OrderedFake.calls.append((self.label, self.order.label))
        out = reference.run(self.spec, inputs)
        bad = self.label == _OrderedFake.wrong and self.order == launch.TileOrder(0, 8)
        return [torch.zeros_like(o) for o in out] if bad else out


def _fake_candidates(monkeypatch, wrong: int | None, built=None):
    """`time_candidates` on the CPU: a Linear + GELU region (or `built`) whose shortlisted
    configs "build" at once into `_OrderedFake`s (the `wrong`-th computes zeros in tile order
    0:8); returns (built, problem, the shortlist's labels, the labels built, in order)."""
    if built is None:
        built = _first_region(LinearAct(act="gelu"), torch.randn(16, 32))[1]
    problem = _problem(built)
    labels = [c.label for c in autotune.shortlist(built.spec, problem)]
    built_for = []

    def prefetch(spec, cfg, compile_fn=None):
        built_for.append(cfg.label)
        done = Future()
        done.set_result(cfg.label)
        return done

    monkeypatch.setattr(build, "prefetch", prefetch)
    monkeypatch.setattr(launch, "load", lambda label: label)
    monkeypatch.setattr(launch, "Kernel", _OrderedFake)
    monkeypatch.setattr(_OrderedFake, "calls", [])
    monkeypatch.setattr(_OrderedFake, "wrong", None if wrong is None else labels[wrong])
    return built, problem, labels, built_for


def test_every_candidate_is_timed_in_every_tile_order(monkeypatch):
    """Each shortlisted config runs, checked, in each order (one binary: no build per order);
    an order whose outputs differ is rejected, not chosen; the fastest pair wins."""
    built, problem, labels, built_for = _fake_candidates(monkeypatch, wrong=0)
    monkeypatch.setenv("EVT_AUTOTUNE_ORDERS", "0:2,0:8")

    def timer(fn):  # 0:2 of the last config is the fastest; evt's own orders next
        fn()
        label, order = _OrderedFake.calls[-1]
        return 0.5 if (label, order) == (labels[-1], "0:2") else 1.0 + (order != "0:0")

    timings = autotune.time_candidates(built, problem, timer, device="cpu")
    assert built_for == labels  # one build per config
    assert set(timings) == {k for c in labels for k in (c, f"{c}@0:2", f"{c}@0:8")}
    assert math.isinf(timings[f"{labels[0]}@0:8"]) and math.isfinite(timings[f"{labels[1]}@0:8"])
    d = autotune.choose(timings, 0.9)
    assert (d.config, d.tile_order, d.fuse) == (labels[-1], "0:2", True)


def test_a_candidate_that_cannot_be_planned_is_rejected_not_the_region(monkeypatch, tmp_path):
    """A shortlisted config whose kernel cannot even be rendered (`build.plan` raises) is timed
    as failed; the others are timed as usual."""
    from evt.errors import CodegenError

    region, built = _first_region(LinearAct(act="gelu"), torch.randn(16, 32))
    built, problem, labels, built_for = _fake_candidates(monkeypatch, wrong=None, built=built)
    fake = build.prefetch

    def prefetch(spec, cfg, compile_fn=None):
        if cfg.label == labels[0]:
            raise CodegenError(f"evt: cannot render region {spec.name}: no")
        return fake(spec, cfg, compile_fn)

    monkeypatch.setattr(build, "prefetch", prefetch)
    monkeypatch.setenv("EVT_AUTOTUNE_ORDERS", "")
    timings = autotune.time_candidates(built, problem, lambda fn: fn() and 1.0, device="cpu")
    assert math.isinf(timings[labels[0]]) and all(math.isfinite(timings[c]) for c in labels[1:])
    # the prepare hook starts the others' builds and skips it too
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(dispatch, "sm90_available", lambda: True)
    monkeypatch.setattr(autotune.guards, "static_reason", lambda spec: None)
    built_for.clear()
    autotune.prefetch([(region, built)])
    assert built_for == labels[1:]


def test_candidates_are_timed_in_rounds_and_keep_their_median(monkeypatch):
    """`EVT_AUTOTUNE_ROUNDS` rounds, each timing every checked candidate once in the same order,
    so a clock that drifts over the timing falls on all alike; each keeps its median. A
    candidate whose timing raises in a later round is rejected (inf), not kept on its first."""
    built, problem, labels, _ = _fake_candidates(monkeypatch, wrong=None)
    monkeypatch.setenv("EVT_AUTOTUNE_ORDERS", "")
    monkeypatch.setenv("EVT_AUTOTUNE_ROUNDS", "3")
    timed = []

    def timer(fn):  # the clock slows as the timing goes on; the last config is the fastest
        fn()
        label = _OrderedFake.calls[-1][0]
        if label == labels[1] and len(timed) >= len(labels):
            raise RuntimeError("a launch failed in round 2")
        timed.append(label)
        return (0.5 if label == labels[-1] else 1.0) * (1 + 0.1 * len(timed))

    timings = autotune.time_candidates(built, problem, timer, device="cpu")
    n = len(labels)
    assert timed[:n] == labels and timed[n:] == [x for x in labels if x != labels[1]] * 2
    assert math.isinf(timings[labels[1]])
    assert timings[labels[0]] == 1.0 * (1 + 0.1 * (n + 1))  # its three: 1 + 0.1 * (1, n + 1, 2n)
    assert autotune.choose(timings, None).config == labels[-1]
    assert list(timings) == labels  # in the order timed: a tie goes to the heuristic's rank


class _Scores(torch.nn.Module):
    """ViT's attention scores in small: (q @ k^T) / sqrt(D), -inf above the diagonal, at S = 5
    (the bool mask's rows are 5 bytes: TMA cannot read them as they are). The mask is a buffer,
    as GPT-2's causal mask is in Hugging Face's model: one computed from `iota` in the graph the
    epilogue computes itself (`float_index_masks`)."""

    def __init__(self, s: int = 5):
        super().__init__()
        self.register_buffer("mask", torch.ones(s, s, dtype=torch.bool).triu(1))

    def forward(self, q, k):
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        return scores.masked_fill(self.mask, float("-inf"))


class _GuardedFake(_OrderedFake):
    """A built kernel that stores into padded rows (`TileConfig.pad_rows`): its launches pass
    the real guards first, as `launch.Kernel`'s do, then compute the reference path."""

    def ordered(self, order):
        return _GuardedFake(self.spec, self.label, order)

    def __call__(self, inputs):
        guards.check(self.spec, [guards.TensorInfo.of(t) for t in inputs], 0, pad_rows=True)
        return super().__call__(inputs)


def test_candidates_run_on_the_aux_copies_their_launches_make(monkeypatch):
    """A region whose mask TMA cannot read as it is (ViT's 197 x 197 bool mask; here 5 x 5)
    launches on a copy in padded rows (`guards.copy_into_rows`, in `dispatch.run`); its candidates
    are checked and timed on the same copy. Session 44: on the mask as it was, every candidate
    failed its guards and max-autotune left ViT's scores unfused ("no candidate config ran")."""
    q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    region, built = _first_region(_Scores(), q, k)
    assert any(isinstance(n, ir.AuxLoad) and n.major == "n" for n in built.spec.nodes)
    built, problem, labels, _ = _fake_candidates(monkeypatch, wrong=None, built=built)
    monkeypatch.setattr(launch, "Kernel", _GuardedFake)
    monkeypatch.setenv("EVT_AUTOTUNE_ORDERS", "")
    inputs = autotune.candidate_inputs(built, problem, "cpu")
    assert [t.shape[-1] for t in inputs if t.dtype == torch.bool] == [5]
    with pytest.raises(LaunchError):  # the launch's guards refuse the mask as it is
        guards.check(built.spec, [guards.TensorInfo.of(t) for t in inputs], 0, pad_rows=True)
    timings = autotune.time_candidates(built, problem, lambda fn: fn() and 1.0, device="cpu")
    assert all(math.isfinite(timings[c]) for c in labels)
    assert autotune.choose(timings, None).fuse


def test_a_region_whose_every_candidate_fails_warns_with_the_first_reason(monkeypatch):
    """Every candidate rejected: the region is left unfused with one warning naming it and the
    first candidate's error, which the decision (and so the bench's notes) keeps. Before, the
    errors went to `EVT_DEBUG=1` alone, and the reason read 'no candidate config ran'."""
    region, built = _first_region(LinearAct(act="gelu"), torch.randn(16, 32))
    built, problem, labels, _ = _fake_candidates(monkeypatch, wrong=None, built=built)

    def refused(self, inputs):
        raise LaunchError(f"input 2: rows of {self.label}")

    monkeypatch.setattr(_OrderedFake, "__call__", refused)
    monkeypatch.setenv("EVT_AUTOTUNE_ORDERS", "0:0,0:2")
    with pytest.warns(UserWarning) as caught:
        d = autotune.measure(region, built, problem, lambda fn: fn() and 0.5, device="cpu")
    caught = [w for w in caught if str(w.message).startswith("evt:")]  # not torch's own
    assert len(caught) == 1
    want = (f"no candidate config ran ({2 * len(labels)} rejected; the first, {labels[0]}: "
            f"LaunchError: input 2: rows of {labels[0]})")  # fmt: skip
    assert not d.fuse and d.reason == want
    assert str(caught[0].message) == (f"evt: max-autotune: region {built.spec.name} at {problem}: "
                                      f"{want}; it is left unfused")  # fmt: skip


def test_a_decided_tile_order_reaches_the_launch_plan(monkeypatch, tmp_path):
    """max-autotune's order applies to its config at its problem, in this process and from the
    disk cache in the next; anything else launches in evt's order."""
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path))
    dispatch.reset()
    autotune.reset()
    spec, problem = specs.mlp_fc1_forward(), (8192, 3072, 768, 1)
    label = cfgs.heuristic(spec, *problem[:3])[0].label
    at = guards.Problem(*problem, input_strides=())
    elsewhere = guards.Problem(4096, 3072, 768, 1, input_strides=())
    assert dispatch.tile_order(spec, label, at) == launch.EVT_ORDER
    dispatch.reset()
    decision = autotune.Decision(True, label, 1.0, 2.0, tile_order="0:4")
    autotune.store(autotune.decision_key(spec, problem), decision)
    assert dispatch.tile_order(spec, label, at) == launch.TileOrder(0, 4)
    assert dispatch.tile_order(spec, "64x64x64_c1x1_cooperative", at) == launch.EVT_ORDER
    assert dispatch.tile_order(spec, label, elsewhere) == launch.EVT_ORDER
    dispatch.set_tile_order(spec, problem[:3] + (2,), label, launch.TileOrder(1, 8))
    assert dispatch.tile_order(spec, label, dataclasses.replace(at, L=2)) == launch.TileOrder(1, 8)
    unfused_won = dataclasses.replace(decision, fuse=False)
    autotune.store(autotune.decision_key(spec, elsewhere.abi_shape), unfused_won)
    assert autotune.tuned_order(spec, elsewhere.abi_shape, label) is None
    back = autotune.load(autotune.decision_key(spec, problem))
    assert back == decision
    dispatch.reset()


def test_a_pruned_kernel_takes_max_autotunes_config_and_tile_order(monkeypatch, tmp_path):
    """A forward region's kernel less the stores the split left unread (`prune_unused_outputs`)
    runs with the config and tile order max-autotune chose for the region; in the default mode
    it keeps its own heuristic pick."""
    from evt.graph.prune_unused_outputs import without_stores

    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path))
    dispatch.reset()
    spec, problem = specs.mlp_fc1_forward(), (8192, 3072, 768, 1)
    store = next(n.name for n in spec.nodes if n.kind == "aux_store")
    pruned, _ = without_stores(spec, {store})
    at = guards.Problem(*problem, input_strides=())
    mine = dispatch.config_for(pruned, problem)
    dispatch.config_for(spec, problem)
    dispatch.inherit_tuning(spec, pruned)  # the heuristic's pick alone: nothing to inherit
    assert dispatch.config_for(pruned, problem) == mine
    dispatch.reset()
    tuned = cfgs.heuristic(spec, *problem[:3])[-1]  # not what the heuristic would pick
    dispatch.set_config(spec, tuned)
    dispatch.set_tile_order(spec, problem, tuned.label, launch.TileOrder(1, 4))
    dispatch.inherit_tuning(spec, pruned)
    assert tuned != mine and dispatch.config_for(pruned, problem) == tuned
    assert dispatch.tile_order(pruned, tuned.label, at) == launch.TileOrder(1, 4)
    dispatch.reset()


def test_decision_cache_round_trip(monkeypatch, tmp_path):
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path))
    d = autotune.Decision(False, "x", 2.0, 1.0, {"x": 2.0, "y": math.inf}, "slower than unfused")
    autotune.store("k", d)
    back = autotune.load("k")
    assert back.fuse is False and back.timings["x"] == 2.0 and math.isinf(back.timings["y"])
    (tmp_path / "autotune" / "bad.json").write_text("{truncated")
    assert autotune.load("bad") is None  # unreadable: measured again, never trusted
    assert "left unfused" in autotune.describe(back)


def test_a_measured_decision_records_the_seconds_of_its_phases(monkeypatch, tmp_path):
    """`measure` adds the wall seconds of each phase to the decision: the unfused path's compile,
    waiting for (and loading) the shortlist's kernels, checking each against the reference, the
    timed rounds with the unfused path's timings; they are cached with it, `describe` (the
    `EVT_DEBUG=1` line) says them, and a decision cached before them still loads."""
    built, problem, labels, _ = _fake_candidates(monkeypatch, wrong=None)
    region = _first_region(LinearAct(act="gelu"), torch.randn(16, 32))[0]
    monkeypatch.setenv("EVT_AUTOTUNE_ORDERS", "0:2")
    monkeypatch.setenv("EVT_AUTOTUNE_ROUNDS", "3")
    now = [0.0]  # a clock of autotune's own, moved by each phase's work by a distinct step
    monkeypatch.setattr(autotune, "time", types.SimpleNamespace(monotonic=lambda: now[0]))

    def step(seconds, fn):
        def stepped(*args, **kwargs):
            now[0] += seconds
            return fn(*args, **kwargs)
        return stepped

    monkeypatch.setattr(unfused, "runner", step(100.0, unfused.runner))  # Inductor compiles
    monkeypatch.setattr(launch, "load", step(10.0, launch.load))  # each config's build
    monkeypatch.setattr(_OrderedFake, "__call__", step(1.0, _OrderedFake.__call__))  # each run
    decision = autotune.measure(region, built, problem, step(0.5, lambda fn: (fn(), 1.0)[1]),
                                device="cpu")  # fmt: skip
    n = len(labels)  # each config: 2 orders, each checked once, then timed in 3 rounds
    assert decision.seconds == {"unfused_compile": 100.0, "builds": 10.0 * n, "checks": 2.0 * n,
                                "timing": 3 * 0.5 + 2 * n * 3 * 1.5}  # fmt: skip
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path))
    autotune.store("k", decision)
    assert autotune.load("k") == decision
    assert f"; took unfused compile 100.0 s, builds {10.0 * n:.1f} s, checks" in autotune.describe(decision)
    spec = built.spec
    assert autotune.outcome(spec, problem, decision, measured=True)["seconds"] == decision.seconds
    assert autotune.outcome(spec, problem, decision, measured=False)["seconds"] == {}
    old = json.loads((tmp_path / "autotune" / "k.json").read_text())
    del old["seconds"]  # cached before the phases were recorded
    (tmp_path / "autotune" / "k.json").write_text(json.dumps(old))
    back = autotune.load("k")
    assert back == dataclasses.replace(decision, seconds={}) and "took" not in autotune.describe(back)


def test_veto_leaves_region_in_graph_with_reason():
    graph = capture_joint(MLP(32, 64), torch.randn(16, 32, requires_grad=True))
    report = pipeline.fuse(graph, check=True, keep=lambda region, built: region.side == "backward")
    assert report.regions and all(r.side == "backward" for r in report.regions)
    whys = [why for _, side, why in report.unfused if side == "forward"]
    assert any("max-autotune" in w for w in whys), report.unfused
    assert any(n.target == torch.ops.aten.gelu.default for n in graph.nodes)


def test_region_module_computes_what_the_nodes_do():
    """The GraphModule Inductor compiles as a region's unfused path returns the region's outputs
    read outside it, as calling its nodes one by one does (softmax's evt::softmax_sum in aten)."""
    seen = []

    def check(region, built) -> bool:  # inside the pipeline: a vetoed region's nodes change later
        seen.append({n.target for n in region.nodes})
        gm = unfused.module(region)
        assert SOFTMAX_SUM not in {n.target for n in gm.graph.nodes}
        assert len(gm.graph.find_nodes(op="placeholder")) == len(region.inputs())
        inputs = unfused.random_inputs(region, "cpu")
        got, want = gm(*inputs), unfused.eager(region, inputs)()
        assert len(got) == len(want) == len(region.outputs())
        for g, w, out in zip(got, want, region.outputs()):
            assert g.shape == w.shape == out.meta["val"].shape and g.dtype == out.meta["val"].dtype
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        return True

    for model in (MLP(32, 64), LinearStatistics("softmax")):
        pipeline.fuse(capture_joint(model, torch.randn(16, 32, requires_grad=True)), keep=check)
    assert len(seen) >= 5 and any(SOFTMAX_SUM in targets for targets in seen)


def _made_up_kernel_timings(built, problem, timer, device, phases=None, others=None,
                            rejected=None, dense=()) -> dict[str, float]:
    """1.0 ms for each of the heuristic's first two configs (no kernel is built); `others` (the
    unfused path) timed by `timer` once, as one round would."""
    made_up = {c.label: 1.0 for c in cfgs.heuristic(built.spec, *problem)[:2]}
    return made_up | {key: timer(run) for key, run in (others or {}).items()}


def _measure_on_cpu(monkeypatch, region, built, baseline="inductor"):
    """`autotune.measure` on the CPU: the kernels' timings made up (1.0 ms each), the unfused
    path run for real and 'timed' as 0.5 ms; returns the decision and the unfused outputs."""
    monkeypatch.setattr(autotune, "time_candidates", _made_up_kernel_timings)
    outputs = []
    decision = autotune.measure(region, built, _problem(built), lambda fn: outputs.append(fn()) or 0.5,
                                baseline, device="cpu")  # fmt: skip
    return decision, outputs[0]


def _first_region(model, *args):
    """The first region of `model`'s graph and its built form (vetoed: its nodes stay as they
    are in the graph; `model` has no softmax, the one op put back after lowering)."""
    found = []
    pipeline.fuse(capture_joint(model, *args), keep=lambda r, b: found.append((r, b)) or False)
    return found[0]


def test_unfused_path_is_timed_compiled_by_inductor(monkeypatch):
    region, built = _first_region(LinearAct(act="gelu"), torch.randn(16, 32))
    torch.manual_seed(0)
    decision, outputs = _measure_on_cpu(monkeypatch, region, built)
    assert (decision.baseline, decision.unfused_by) == ("inductor", "inductor")
    assert not decision.fuse and decision.reason == "slower than unfused"
    assert "unfused (inductor) 0.5000 ms" in autotune.describe(decision)
    torch.manual_seed(0)  # the inputs the compiled path ran on
    want = unfused.eager(region, unfused.random_inputs(region, "cpu"))()
    assert len(outputs) == len(want) == len(region.outputs())
    for got, w in zip(outputs, want):
        torch.testing.assert_close(got, w, rtol=1e-5, atol=1e-5)


def _timed_by(monkeypatch, region, built, capturable: bool):
    """`autotune.measure` with its own timer choice, CUDA graphs and timers replaced by fakes that
    record what each timed: (decision, [(timer, what)])."""
    monkeypatch.setattr(autotune, "time_candidates",
                        lambda b, p, timer, device, phases, others, rejected, dense: {  # others first, as a round
                            **{k: timer(r) for k, r in others.items()}, "cfg": timer("kernel")})  # fmt: skip
    seen = []

    def replay_ms(fn):
        if not capturable and fn != "kernel":
            raise RuntimeError("operation not permitted when stream is capturing\nmore")
        seen.append(("replay", fn if fn == "kernel" else "unfused"))
        return 1.0 if fn == "kernel" else 2.0

    def gpu_ms(fn):
        seen.append(("calls", fn if fn == "kernel" else "unfused"))
        return 3.0 if fn == "kernel" else 2.0

    monkeypatch.setattr(autotune.timing, "replay_ms", replay_ms)
    monkeypatch.setattr(autotune.timing, "gpu_ms", gpu_ms)
    return autotune.measure(region, built, _problem(built), device="cpu"), seen


def test_both_sides_are_timed_from_cuda_graph_replays(monkeypatch):
    """The fused kernel and the unfused path are both timed from graph replays (the host's launch
    cost is not counted on either side); where the unfused path cannot be captured both are
    timed per call instead, and the decision says why."""
    region, built = _first_region(LinearAct(act="gelu"), torch.randn(16, 32))
    decision, seen = _timed_by(monkeypatch, region, built, capturable=True)
    # the unfused path once to see that it can be captured (not kept), then in the rounds
    assert seen == [("replay", "unfused"), ("replay", "unfused"), ("replay", "kernel")]
    assert decision.fuse and decision.timer == autotune.GRAPHS
    assert "timed as cuda graph replays" in autotune.describe(decision)
    decision, seen = _timed_by(monkeypatch, region, built, capturable=False)
    assert seen == [("calls", "unfused"), ("calls", "kernel")]
    assert not decision.fuse and (decision.fused_ms, decision.unfused_ms) == (3.0, 2.0)
    assert decision.timer == ("calls (the unfused path could not be captured: RuntimeError: "
                              "operation not permitted when stream is capturing)")  # fmt: skip


def test_the_unfused_path_is_timed_in_the_candidates_rounds_and_keeps_its_median(monkeypatch):
    """First in each round, so the first timing after the compile's idle seconds (perhaps on a
    GPU not yet at its power cap: session 43's SwiGLU read 4% fast unfused, not so in the
    bench) is one sample of three, not half of a mean; a failure of the unfused path is not a
    rejected candidate: it propagates."""
    built, problem, labels, _ = _fake_candidates(monkeypatch, wrong=None)
    monkeypatch.setenv("EVT_AUTOTUNE_ORDERS", "")
    monkeypatch.setenv("EVT_AUTOTUNE_ROUNDS", "3")
    timed, clock = [], iter([0.8, 1.2, 1.3])  # the unfused path's: the GPU slows after round 1

    def timer(fn):
        before = len(_OrderedFake.calls)
        fn()
        if len(_OrderedFake.calls) == before:  # not a candidate
            timed.append("unfused")
            return next(clock)
        timed.append(_OrderedFake.calls[-1][0])
        return 1.25

    timings = autotune.time_candidates(built, problem, timer, device="cpu",
                                       others={autotune.UNFUSED: lambda: None})  # fmt: skip
    assert timed == (["unfused"] + labels) * 3
    assert list(timings) == labels + [autotune.UNFUSED] and timings[autotune.UNFUSED] == 1.2
    assert autotune.choose({k: v for k, v in timings.items() if k in labels}, 1.2).fuse is False

    def broken():
        raise RuntimeError("the unfused path failed")

    with pytest.raises(RuntimeError, match="the unfused path failed"):
        autotune.time_candidates(built, problem, timer, device="cpu",
                                 others={autotune.UNFUSED: broken})  # fmt: skip


def test_candidates_are_checked_on_operands_scaled_to_unit_accumulators():
    """The GEMM's operands are scaled by K^-1/4 each (accumulators of unit variance, no exp()
    overflow for a config to differ from the reference on); other inputs are left as drawn."""
    region, built = _first_region(LinearAct(act="gelu"), torch.randn(16, 32))
    problem = _problem(built)
    torch.manual_seed(0)
    drawn = [autotune.random_like(n.meta["val"], "cpu") for n in built.inputs]
    torch.manual_seed(0)
    got = autotune.candidate_inputs(built, problem, "cpu")
    operands = {built.spec.gemm.a.input, built.spec.gemm.b.input}
    assert len(operands) == 2 and len(got) == len(drawn) > 2  # x, w and the bias
    for i, (g, d) in enumerate(zip(got, drawn)):
        scale = problem[2] ** -0.25 if i in operands else 1.0
        torch.testing.assert_close(g, d * scale)


def _no_compiler(gm, inputs):
    raise RuntimeError("no C++ compiler")


def _no_compiler_at_first_call(gm, inputs):
    def run(*args):
        raise RuntimeError("no C++ compiler")

    return run


@pytest.mark.parametrize("broken", [_no_compiler, _no_compiler_at_first_call])
def test_unfused_path_falls_back_to_eager_when_inductor_fails(monkeypatch, broken):
    region, built = _first_region(LinearAct(act="gelu"), torch.randn(16, 32))
    monkeypatch.setattr(unfused, "compile_inductor", broken)
    with pytest.warns(UserWarning, match="op by op in eager instead"):
        decision, outputs = _measure_on_cpu(monkeypatch, region, built)
    assert decision.baseline == "inductor"  # asked for; what ran:
    assert decision.unfused_by == "eager, Inductor failed: RuntimeError: no C++ compiler"
    assert "unfused (eager, Inductor failed: RuntimeError: no C" in autotune.describe(decision)
    assert [o.shape for o in outputs] == [o.meta["val"].shape for o in region.outputs()]
    decision, _ = _measure_on_cpu(monkeypatch, region, built, baseline="eager")  # rest="eager"
    assert decision.unfused_by == "eager"
    assert "unfused (eager) 0.5000 ms" in autotune.describe(decision)


def test_unfused_baseline_follows_the_inductor_mode():
    from torch._inductor import config

    assert unfused.baseline("inductor") == "inductor" and unfused.baseline("eager") == "eager"
    with config.patch(max_autotune=True, coordinate_descent_tuning=True):
        assert unfused.baseline("inductor") == "inductor max_autotune coordinate_descent_tuning"


def test_symbolic_inputs_are_not_timed():
    """With dynamic shapes the unfused path is not run on the sizes' hints."""
    x = torch.randn(16, 32)
    torch._dynamo.mark_dynamic(x, 0)
    region, _ = _first_region(LinearAct(act="gelu"), x)
    vals = [n.meta["val"] for n in region.inputs()]
    assert any(isinstance(d, torch.SymInt) for v in vals if isinstance(v, torch.Tensor) for d in v.shape)
    assert not unfused.timeable(region) and unfused.runner(region, "inductor", "cpu") is None


def _decide_on_cpu(monkeypatch, tmp_path):
    """`autotune.decide` as on an SM90 machine, measuring on the CPU (see `_measure_on_cpu`),
    with Inductor's compile counted (and replaced by the module itself: fast)."""
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(dispatch, "sm90_available", lambda: True)
    monkeypatch.setattr(autotune.guards, "static_reason", lambda spec: None)
    monkeypatch.setattr(autotune, "time_candidates", _made_up_kernel_timings)
    # no kernel is timed, so none is built (max-autotune's `prefetch` would queue real nvcc
    # builds in the process's pool, where later tests' builds wait behind them)
    monkeypatch.setattr(build, "prefetch", lambda *args, **kwargs: Future())
    real, compiles = autotune.measure, []
    monkeypatch.setattr(autotune, "measure", lambda *a, **k: real(
        *a, **k, timer=lambda fn: (fn(), 0.5)[1], device="cpu"))  # fmt: skip
    monkeypatch.setattr(unfused, "compile_inductor", lambda gm, inputs: compiles.append(gm) or gm)
    autotune.reset()
    return compiles


def test_identical_regions_compile_the_unfused_path_once(monkeypatch, tmp_path, capsys):
    """Two identical layers: one measurement, one compile, in this process and the next;
    `EVT_DEBUG=1` says how long a decision took, or that it came from the cache."""
    compiles = _decide_on_cpu(monkeypatch, tmp_path)
    monkeypatch.setenv("EVT_DEBUG", "1")
    layers = torch.nn.Sequential(LinearAct(32, 32), LinearAct(32, 32))
    regions = []
    with torch.no_grad():  # the inference graph: both regions are Linear + GELU on [16, 32]
        graph = capture_joint(layers, torch.randn(16, 32))

    def decide(region, built) -> bool:
        regions.append((region, built))
        return autotune.decide(region, built)

    report = pipeline.fuse(graph, keep=decide)
    assert len(regions) == 2 and not report.regions and len(compiles) == 1
    decided = [line for line in capsys.readouterr().err.splitlines() if "[evt] autotune" in line]
    assert len(decided) == 2 and "(decided in " in decided[0] and "(cached)" in decided[1], decided
    assert "; took unfused compile " in decided[0] and "took" not in decided[1]  # phases' seconds
    keys = {autotune.decision_key(b.spec, _problem(b)) for _, b in regions}
    (key,) = keys
    assert autotune.load(key).unfused_by == "inductor"
    region, built = regions[0]  # vetoed: its nodes are still in the graph
    (tmp_path / "autotune" / f"{key}.json").unlink()  # this process remembers without it
    assert autotune.decide(region, built) is False and len(compiles) == 1
    autotune.store(key, autotune._decided[key])
    autotune.reset()  # a later process: the disk cache
    assert autotune.decide(region, built) is False and len(compiles) == 1
    # another route's baseline, or an entry made before the unfused path had one: measured again
    assert autotune.decide(region, built, rest="eager") is False and len(compiles) == 1
    assert autotune.load(key).unfused_by == "eager"
    autotune.store(key, dataclasses.replace(autotune.load(key), baseline=""))
    autotune.reset()
    assert autotune.decide(region, built) is False and len(compiles) == 2
    assert autotune.load(key).baseline == "inductor"
    # one made where the unfused path was not timed (dynamic shapes, same hints): kept fused
    # there, measured again here, where it can be
    untimed = autotune.Decision(True, autotune.load(key).config, 1.0, None, baseline="inductor")
    autotune.store(key, untimed)
    autotune.reset()
    assert autotune.decide(region, built) is False and len(compiles) == 3
    autotune.reset()


def test_each_decision_reaches_the_benchmark_notes_once_measured_then_cached(monkeypatch, tmp_path):
    """`evt.bench.observe.evt_autotune` records what `decide` chose for every region: the
    heuristic's pick and its time, the chosen config's heuristic rank, the unfused path's time,
    and whether it was measured here or read from the cache (the second identical layer)."""
    from evt.bench import observe

    _decide_on_cpu(monkeypatch, tmp_path)
    layers = torch.nn.Sequential(LinearAct(32, 32), LinearAct(32, 32))
    with torch.no_grad():
        graph = capture_joint(layers, torch.randn(16, 32))
    notes: dict = {}
    with observe.evt_autotune(notes):
        pipeline.fuse(graph, keep=autotune.decide)
    first, second = notes["autotune"]
    assert first["measured"] and not second["measured"]
    assert first["problem"] == second["problem"] == [16, 32, 32, 1]
    assert first["heuristic"] == first["config"] and first["rank"] == 1  # a tie: the pick, timed first
    assert (first["heuristic_ms"], first["best_ms"], first["unfused_ms"]) == (1.0, 1.0, 0.5)
    assert not first["fuse"] and first["unfused_by"] == "inductor" and first["candidates"] == 2
    assert first["timer"] == "given timer"  # `_decide_on_cpu`'s; on a GPU autotune.GRAPHS
    assert list(first["seconds"]) == list(autotune.PHASES) and second["seconds"] == {}
    assert autotune._listeners == []  # removed on the way out
    with observe.evt_autotune(notes := {}):
        pass
    assert notes == {}  # evt's default mode decides nothing


def test_a_chosen_config_down_the_ranking_is_reported_with_its_rank():
    spec = specs.ALL["mlp_fc1_forward"]()
    problem = (8192, 3072, 768, 1)
    ranked = [c.label for c in cfgs.heuristic(spec, *problem[:3])]
    timings = {ranked[0]: 1.2, f"{ranked[0]}@0:2": 1.1, ranked[2]: 1.0, f"{ranked[2]}@0:4": 0.9}
    d = autotune.choose(timings, 1.5)
    got = autotune.outcome(spec, problem, d, measured=True)
    assert (got["config"], got["tile_order"], got["rank"], got["fuse"]) == (ranked[2], "0:4", 3, True)
    assert (got["heuristic"], got["heuristic_ms"], got["best_ms"]) == (ranked[0], 1.2, 0.9)
    assert got["timings"] == timings  # the whole shortlist, every order, for later ranking
    failed = autotune.outcome(spec, problem, autotune.choose({ranked[0]: math.inf}, 1.0), True)
    assert failed["heuristic_ms"] is None and failed["rank"] is None and not failed["fuse"]
    assert failed["timings"] == {ranked[0]: None}  # inf is not JSON: a failure reads None
    json.dumps(failed, allow_nan=False)


def _problem(built):
    return dispatch.problem_hint(built.spec, [n.meta["val"] for n in built.inputs])


def test_every_regions_candidates_start_building_before_the_first_is_timed(monkeypatch, tmp_path):
    """max-autotune's `prepare` hook submits the shortlists of all regions to the build pool at
    once (each decision then finds its kernels built or building), and none for a region whose
    decision is cached."""
    _decide_on_cpu(monkeypatch, tmp_path)
    events = []
    monkeypatch.setattr(build, "prefetch", lambda spec, cfg=None, compile_fn=None: events.append(
        ("build", spec.name, cfg.label)) or Future())  # fmt: skip

    def timed(built, problem, timer, device, phases=None, others=None, rejected=None, dense=()):
        events.append(("time", built.spec.name, None))
        return _made_up_kernel_timings(built, problem, timer, device, others=others)

    monkeypatch.setattr(autotune, "time_candidates", timed)
    model = torch.nn.Sequential(LinearAct(32, 64, "relu"), LinearAct(64, 32, "gelu"))
    with torch.no_grad():
        graph = capture_joint(model, torch.randn(16, 32))
    seen = []
    report = pipeline.fuse(graph, keep=lambda r, b: seen.append(b) or autotune.decide(r, b),
                           prepare=autotune.prefetch)  # fmt: skip
    assert len(seen) == 2 and not report.regions  # the unfused path (0.5 ms) wins on the CPU
    kinds = [kind for kind, _, _ in events]
    first_timed = kinds.index("time")
    assert kinds[first_timed:] == ["time", "time"]
    for b in seen:
        want = {c.label for c in autotune.shortlist(b.spec, _problem(b))}
        assert {label for kind, name, label in events if name == b.spec.name and kind == "build"} == want
    events.clear()  # decided: a later compile of the same graph builds nothing up front
    with torch.no_grad():
        graph = capture_joint(model, torch.randn(16, 32))
    pipeline.fuse(graph, keep=autotune.decide, prepare=autotune.prefetch)
    assert events == []
    autotune.reset()


def test_max_autotune_builds_and_times_nothing_for_a_region_evt_unfuse_names(monkeypatch, tmp_path):
    """`EVT_UNFUSE` leaves a region unfused before max-autotune's hooks see it: no candidate of
    it is built or timed, the other region's are."""
    _decide_on_cpu(monkeypatch, tmp_path)
    events = []
    monkeypatch.setattr(build, "prefetch", lambda spec, cfg=None, compile_fn=None: events.append(
        ("build", spec.name)) or Future())  # fmt: skip

    def timed(built, problem, timer, device, phases=None, others=None, rejected=None, dense=()):
        events.append(("time", built.spec.name))
        return _made_up_kernel_timings(built, problem, timer, device, others=others)

    monkeypatch.setattr(autotune, "time_candidates", timed)
    model = torch.nn.Sequential(LinearAct(32, 64, "relu"), LinearAct(64, 32, "gelu"))
    with torch.no_grad():
        graph = capture_joint(model, torch.randn(16, 32))
    monkeypatch.setenv("EVT_UNFUSE", "evt_f0_*")
    report = pipeline.fuse(graph, keep=autotune.decide, prepare=autotune.prefetch)
    names = {name for _, name in events}
    assert names and all(not n.startswith("evt_f0_") for n in names), events
    assert ("time", next(iter(names))) in events
    assert any("EVT_UNFUSE" in why for _, _, why in report.unfused), report.unfused
    autotune.reset()


def test_autotune_on_the_inductor_route_compiles_the_unfused_path_apart(monkeypatch, tmp_path):
    """Inside Inductor's compile (evt's pass runs in it), the unfused path compiles in a compile
    of its own: without evt's pass (it would fuse the region again) and CUDA graphs."""
    counted = _Counted(unfused.compile_inductor)
    _decide_on_cpu(monkeypatch, tmp_path)
    monkeypatch.setattr(unfused, "compile_inductor", counted)
    model, x = LinearAct(act="gelu"), torch.randn(16, 32)
    with torch.no_grad():
        got = torch.compile(model, backend="evt", options={"autotune": True})(x)
    torch.testing.assert_close(got, model(x))
    assert counted.calls == 1 and counted.passes == [None]
    (entry,) = (tmp_path / "autotune").glob("*.json")
    assert autotune.load(entry.stem).unfused_by == "inductor"
    autotune.reset()


class _Counted:
    def __init__(self, fn):
        self.fn, self.calls, self.passes = fn, 0, []

    def __call__(self, gm, inputs):
        from torch._inductor import config

        self.calls += 1
        self.passes.append(config.joint_custom_pre_pass)
        return self.fn(gm, inputs)


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
    assert min(fractions) > 0.92  # session 55's reductions over M: 0.806 before they took tile_m


def test_heuristic_score_counts_a_config_two_sweeps_timed_once():
    """Two sweeps of one results folder that both timed a config: it counts once, at its faster
    run, for the heuristic's pick as for the measured best."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import heuristic_score

    spec = specs.mlp_fc1_forward()
    first, other = (c.label for c in cfgs.heuristic(spec, 8192, 3072, 768)[:2])

    def row(config, tflops):
        return dict(pattern="p", region="r", shape="s", m=8192, n=3072, k=768, config=config,
                    tflops=tflops)  # fmt: skip

    groups = {("run", "p", "r", "s"): [row(first, 620), row(other, 600), row(first, 500)]}
    ((_, pick, best),) = heuristic_score.score(groups, {("p", "r"): spec})
    assert (pick["config"], pick["tflops"]) == (best["config"], best["tflops"]) == (first, 620)


def test_heuristic_score_skips_rows_timed_in_another_order_than_evt_launches_now(tmp_path, monkeypatch):
    """A sweep row records the order its kernel was launched in (`launched`: 0:0 made explicit);
    one whose order evt no longer launches at that config and shape no longer times evt's
    kernel and is left out, as are earlier sweeps' rows of grids that took swizzle 2 since
    (`PINGPONG_SWIZZLE_SINCE`); a row without the record counts."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import heuristic_score

    def row(config, launched=None, n=2048):
        r = dict(pattern="p", region="r", shape="s", m=8192, n=n, k=2048, config=config,
                 tile_order="0:0", tflops=500.0)  # fmt: skip
        return r if launched is None else {**r, "launched": launched}

    pp = "128x128x64_c1x1_pingpong"
    for folder, rows in {
        "2026-11-27-H100-session31": [row(pp, "0:0"), row(pp, "0:2"), row("128x256x64_c1x1_cooperative", "0:0"), row(pp)],
        "2026-11-26-H100-session20": [row(pp), row(pp, n=1024)],
    }.items():  # fmt: skip
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "config_sweep_x.json").write_text(json.dumps(rows))
    monkeypatch.setattr(heuristic_score, "RESULTS", tmp_path)
    kept = {k[0]: [(r["config"], r.get("launched"), r["n"]) for r in rows]
            for k, rows in heuristic_score.sweeps().items()}  # fmt: skip
    assert kept == {
        "2026-11-27-H100-session31": [(pp, "0:2", 2048), ("128x256x64_c1x1_cooperative", "0:0", 2048), (pp, None, 2048)],
        "2026-11-26-H100-session20": [(pp, None, 1024)],  # 8 tile columns: the compiled order still
    }  # fmt: skip


def test_aux_loads_take_fewer_stages_where_the_main_loop_needs_them():
    """CUTLASS gives the aux loads min(subtiles, 4) shared-memory stages; where that leaves the
    main loop under 5, the heuristic's configs take the most aux stages that reach the main
    loop's best count. H100, session 14 (`config_sweep_source_stages.json`): a bf16 residual at
    8192x1024x4096 with 128x256 tiles ran at 0.82 of the bare GEMM with 2 aux stages against
    0.77 with 4; an fp32 residual at 128x192 0.76-0.77 against 0.65-0.67."""
    bf16_residual = specs.mlp_fc2_residual()
    first = cfgs.heuristic(bf16_residual, 8192, 1024, 4096)[0]
    assert first.label == "128x256x64_c1x1_cooperative_sc2", first.label
    assert cfgs.mainloop_stages(bf16_residual, cfgs.TileConfig()) == 3
    assert cfgs.mainloop_stages(bf16_residual, first) == 4
    # a main loop already at 5 stages keeps CUTLASS's aux stages; no aux load, nothing to change
    pingpong = cfgs.TileConfig(128, 128, 64, schedule="pingpong")
    assert cfgs.source_stages(bf16_residual, pingpong) == pingpong
    assert cfgs.source_stages(specs.mlp_fc1_forward(), cfgs.TileConfig()) == cfgs.TileConfig()
    # the most aux stages that reach the best count: fp32 aux and fp32 D at 128x256 (2 main-loop
    # stages with CUTLASS's 4 aux stages) get 3 with 3 aux stages already
    ln = specs.layer_norm_backward()
    wide = cfgs.source_stages(ln, cfgs.TileConfig())
    assert (wide.epi_stages_c, cfgs.mainloop_stages(ln, wide)) == (3, 3)
    # the rendered kernel carries the policy: CUTLASS's builder, its stages replaced
    src = render(bf16_residual, first)
    assert "Sm90TmaWarpSpecialized<2," in src and "AuxLoadDescriptor<\n    EvtEpilogueDescriptor" in src
    assert "EvtEpilogueDescriptor" not in render(bf16_residual, cfgs.TileConfig())
    with pytest.raises(CodegenError, match="source stages"):
        cfgs.TileConfig(epi_stages_c=5)


def test_a_decision_of_other_sources_is_not_replayed(monkeypatch):
    """The decision key names the hash of evt's sources: after a change to evt's kernels or
    heuristic (one version string across a development install), regions are timed again."""
    spec, problem = specs.mlp_fc1_forward(), (8192, 3072, 768, 1)
    key = autotune.decision_key(spec, problem)
    assert autotune.decision_key(spec, problem) == key
    monkeypatch.setattr(autotune, "source_hash", lambda: "another-evt")
    assert autotune.decision_key(spec, problem) != key


def test_a_step_sweep_builds_each_region_as_the_heuristic_hands_it_out():
    """`config_sweep.py --steps step/llama`: the LLaMA step's regions at their own problems (the
    batched attention GEMMs left out), each candidate with the aux-load stages and epilogue
    subtile the heuristic gives it at that K, so a sweep's labels are the heuristic's and
    `heuristic_score.py` scores such a sweep as it does a pattern's. The sweep also builds the
    configs that fit only with those fewer stages (the heuristic asks whether CUTLASS's own
    leave the main loop 2 stages: the regions with fp32 aux tensors, whose wide tiles keep 2 or
    3 with 2 or 3 aux-load stages and 1 with 4)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import config_sweep

    regions = config_sweep.capture_step("step/llama")
    assert sorted(dims["step"] for _, dims in regions) == sorted(
        [(8192, 2048, 2048)] * 2 + [(8192, 5632, 2048)] * 2 + [(8192, 2048, 5632)] * 2)
    for spec, dims in regions:
        m, n, k = dims["step"]
        built = {c.label for c in (config_sweep.as_built(spec, c, k) for c in cfgs.CANDIDATES)
                 if cfgs.fits(spec, c)}  # fmt: skip
        ranked = {c.label for c in cfgs.heuristic(spec, m, n, k)}
        assert ranked <= built, spec.name
        own_stages = [dataclasses.replace(cfgs.TileConfig.from_label(label), epi_stages_c=0)
                      for label in built - ranked]  # fmt: skip
        assert not any(cfgs.fits(spec, c) for c in own_stages), spec.name
        assert any("_sc" in label for label in built), spec.name  # every region loads aux tensors
    with pytest.raises(SystemExit, match="not a training step"):
        config_sweep.capture_step("bias_relu")


def test_a_bare_sweep_times_each_regions_gemm_without_its_epilogue():
    """`config_sweep.py --bare`: each region's GEMM alone (D = acc in the operands' dtype, its
    operands renumbered 0 and 1, their layout kept) computes the product the region's GEMM
    does; regions of one layout share one kernel (one name, one cache key)."""
    import sys
    from pathlib import Path

    from evt.runtime import build, reference
    from evt.testing.inputs import make_inputs

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import config_sweep

    regions = [spec for spec, _ in config_sweep.capture_step("step/llama")]
    bares = {spec.name: config_sweep.bare(spec) for spec in regions}
    assert len({b.name for b in bares.values()}) == 2  # forward (x @ W.T) and dgrad (g @ W)
    for spec in regions:
        b = bares[spec.name]
        assert [type(n) for n in b.nodes] == [ir.AccFetch] and b.d_dtype == spec.gemm.dtype
        assert (b.gemm.a.input, b.gemm.b.input, b.num_inputs) == (0, 1, 2)
        assert (b.gemm.a.major, b.gemm.b.major) == (spec.gemm.a.major, spec.gemm.b.major)
        x = make_inputs(b, 96, 80, 64, seed=3)
        a = x[0].t() if b.gemm.a.transposed else x[0]
        w = x[1].t() if b.gemm.b.transposed else x[1]
        (d,) = reference.run(b, x)
        torch.testing.assert_close(d.float(), (a.float() @ w.float()).to(d.dtype).float())
    same = [bares[s.name] for s in regions if bares[s.name].name == bares[regions[0].name].name]
    cfg = cfgs.TileConfig(128, 128, 64, schedule="pingpong")
    assert len({build.plan(dataclasses.replace(b, name=f"r{i}"), cfg).key
                for i, b in enumerate(same)}) == 1  # fmt: skip


def test_an_l2_window_keeps_one_operand_while_inside_and_releases_it_after(monkeypatch):
    """`config_sweep.py --l2-window`: inside, the current stream's access-policy window covers
    the chosen operand (persisting hits, streaming misses), the device's persisting set-aside is
    what it can keep of it (the hit ratio the rest); after, even on an error, the window closes
    and the persisting lines and set-aside are released; '-' touches nothing."""
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    from cuda.bindings import runtime as rt

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import config_sweep

    calls = []
    ok = rt.cudaError_t.cudaSuccess
    props = SimpleNamespace(accessPolicyMaxWindowSize=1 << 20, persistingL2CacheMaxSize=1 << 19)
    monkeypatch.setattr(rt, "cudaGetDeviceProperties", lambda dev: (ok, props))
    monkeypatch.setattr(rt, "cudaDeviceSetLimit", lambda lim, v: calls.append(("limit", v)) or (ok,))

    def set_attr(stream, attr, value):
        w = value.accessPolicyWindow
        calls.append(("window", w.base_ptr, w.num_bytes, round(w.hitRatio, 3), w.hitProp, w.missProp))
        return (ok,)
    monkeypatch.setattr(rt, "cudaStreamSetAttribute", set_attr)
    monkeypatch.setattr(rt, "cudaCtxResetPersistingL2Cache", lambda: calls.append(("reset",)) or (ok,))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=7))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    spec = specs.layer_norm_backward()
    a_in, b_in = spec.gemm.a.input, spec.gemm.b.input
    x = {a_in: torch.zeros(1024, 256, dtype=torch.bfloat16), b_in: torch.zeros(256, 4096, dtype=torch.bfloat16)}
    x = [x.get(i) for i in range(max(x) + 1)]
    with config_sweep.l2_window(x, spec, "-"):
        pass
    assert calls == []
    persisting, streaming = rt.cudaAccessProperty.cudaAccessPropertyPersisting, rt.cudaAccessProperty.cudaAccessPropertyStreaming
    with pytest.raises(RuntimeError, match="a timing failed"), config_sweep.l2_window(x, spec, "b"):
        assert calls == [("limit", 1 << 19), ("window", x[b_in].data_ptr(), 1 << 20, 0.5, persisting, streaming)]
        raise RuntimeError("a timing failed")
    # B (2 MiB) is cut to the largest window (1 MiB), of which the set-aside keeps half
    assert calls[2:] == [("window", x[b_in].data_ptr(), 0, 0.5, persisting, streaming), ("reset",), ("limit", 0)]
    calls.clear()
    with config_sweep.l2_window(x, spec, "a"):  # A (512 KiB): whole window, whole set-aside
        assert calls == [("limit", 1 << 19), ("window", x[a_in].data_ptr(), 1 << 19, 1.0, persisting, streaming)]


def test_l2_window_option_takes_none_and_refuses_other_operands():
    """`config_sweep.py --l2-window none,a,b` parses (a leading '-' would read as an option),
    '-' still means no window, and an operand other than a or b is refused by name."""
    import argparse
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import config_sweep

    assert config_sweep.l2_windows("none,a,b") == ["-", "a", "b"]
    assert config_sweep.l2_windows("-") == ["-"]
    with pytest.raises(argparse.ArgumentTypeError, match="c: each window is a, b or none"):
        config_sweep.l2_windows("a,c")


def test_a_compile_that_measures_regions_says_so_region_by_region(monkeypatch, tmp_path, capsys):
    """max-autotune's measurements take minutes (Inductor compiles each region's unfused path):
    from the second distinct region of a compile on, each measured one gets a line on stderr
    (`progress.DECISIONS`), a cached one none; `EVT_PROGRESS=0` hides them, and one region shows
    none unless `EVT_PROGRESS=1`."""
    from evt.runtime import progress

    _decide_on_cpu(monkeypatch, tmp_path)
    monkeypatch.setattr(build, "prefetch", lambda *args, **kwargs: Future())
    monkeypatch.setattr(autotune, "time_candidates", _made_up_kernel_timings)

    def compile_(model, setting=None):
        if setting is None:
            monkeypatch.delenv("EVT_PROGRESS", raising=False)
        else:
            monkeypatch.setenv("EVT_PROGRESS", setting)
        with torch.no_grad():
            graph = capture_joint(model, torch.randn(16, 32))
        pipeline.fuse(graph, keep=autotune.decide, prepare=autotune.prefetch)
        return [line for line in capsys.readouterr().err.splitlines() if "evt: max-autotune" in line]

    # four layers, three distinct regions (the last two layers are the same)
    model = torch.nn.Sequential(LinearAct(32, 64, "relu"), LinearAct(64, 32, "gelu"),
                                LinearAct(32, 32, "gelu"), LinearAct(32, 32, "gelu"))  # fmt: skip
    lines = compile_(model)
    assert lines[0].startswith("evt: max-autotune: measuring 3 regions"), lines
    assert [line.split(":")[1] for line in lines[1:]] == [" max-autotune 1/3", " max-autotune 2/3",
                                                         " max-autotune 3/3"]  # fmt: skip
    assert all("left unfused (slower than unfused)" in line and "of it Inductor compiling" in line
               for line in lines[1:])  # fmt: skip
    assert compile_(model) == []  # decided: nothing measured, nothing said
    autotune.reset()
    (tmp_path / "autotune").rename(tmp_path / "decided")  # measure again, quietly
    assert compile_(model, "0") == []
    autotune.reset()
    (tmp_path / "autotune").rename(tmp_path / "decided-2")
    one = torch.nn.Sequential(LinearAct(32, 32, "gelu"))
    assert compile_(one) == []
    autotune.reset()
    (tmp_path / "autotune").rename(tmp_path / "decided-3")
    shown = compile_(one, "1")
    assert len(shown) == 2 and shown[1].startswith("evt: max-autotune 1/1: ")
    autotune.reset()
    assert progress.DECISIONS.total == 1


def test_a_measured_decisions_line_says_what_was_chosen_and_what_it_took():
    spec = specs.ALL["mlp_fc1_forward"]()
    fused = autotune.Decision(True, "128x128x64_c1x1_pingpong", 0.05, 0.08, tile_order="0:2",
                              seconds={"unfused_compile": 25.4, "builds": 0.1, "checks": 0.1,
                                       "timing": 3.0})  # fmt: skip
    assert autotune.summary(spec, (8192, 3072, 768, 1), fused) == (
        f"{spec.name} at 8192x3072x768x1: fused with 128x128x64_c1x1_pingpong in tile order 0:2, "
        "1.60x faster than unfused; 28.6 s, 25.4 s of it Inductor compiling the unfused path")
    slower = autotune.choose({"128x128x64_c1x1_pingpong": 0.09}, 0.08)
    assert autotune.summary(spec, (64, 64, 64, 1), slower) == (
        f"{spec.name} at 64x64x64x1: left unfused (slower than unfused)")


def test_a_region_whose_measurement_fails_is_lowered_as_the_default_mode_lowers_it(
    monkeypatch, tmp_path, capsys
):
    """An exception while measuring one region (out of memory for its candidates' inputs, say)
    warns once naming the region, lowers it with the heuristic's config as the default mode
    would, caches nothing, and leaves the other regions' decisions alone. Before, it reached the
    backend, which left the whole graph unfused."""
    from evt.bench import observe

    _decide_on_cpu(monkeypatch, tmp_path)
    real = autotune.measure  # `_decide_on_cpu`'s: on the CPU, 1.0 ms kernels, 0.5 ms unfused

    def measure(region, built, problem, **kwargs):
        if built.spec.name.startswith("evt_f1"):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(region, built, problem, **kwargs)

    monkeypatch.setattr(autotune, "measure", measure)
    model = torch.nn.Sequential(LinearAct(32, 64, "relu"), LinearAct(64, 32, "gelu"),
                                LinearAct(32, 64, "relu"), LinearAct(64, 32, "gelu"))  # fmt: skip
    with torch.no_grad():
        graph = capture_joint(model, torch.randn(16, 32))
    notes: dict = {}
    with pytest.warns(UserWarning) as caught, observe.evt_autotune(notes):
        report = pipeline.fuse(graph, keep=autotune.decide, prepare=autotune.prefetch)
    said = [str(w.message) for w in caught if "could not measure" in str(w.message)]
    assert len(said) == 1 and "region evt_f1_" in said[0] and "OutOfMemoryError" in said[0]
    # the failed one lowered (no config set: dispatch picks the heuristic's), and its twin in the
    # third and fourth layers with it (not measured again); the other measured and left unfused
    # (its made-up 1.0 ms kernels lose to the 0.5 ms unfused path)
    assert [r.spec.name[:6] for r in report.regions] == ["evt_f1", "evt_f3"]
    first, second, third, fourth = notes["autotune"]
    assert not third["measured"] and not fourth["measured"] and fourth["fuse"]
    assert first["fuse"] is False and second["fuse"] is True and second["config"] is None
    assert second["reason"].startswith("not measured: OutOfMemoryError")
    assert len(list((tmp_path / "autotune").glob("*.json"))) == 1  # only the measured one
    assert "lowered with the heuristic's config (not measured: OutOfMemoryError" in capsys.readouterr().err
    autotune.reset()


def test_a_decision_the_cache_cannot_keep_still_holds_in_this_process(monkeypatch, tmp_path):
    """A read-only or full cache folder loses the decision for later processes only."""
    _decide_on_cpu(monkeypatch, tmp_path)

    def full(key, decision):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(autotune, "store", full)
    region, built = _first_region(LinearAct(32, 32), torch.randn(16, 32))
    assert autotune.decide(region, built) is False  # measured: the unfused path (0.5 ms) wins
    key = autotune.decision_key(built.spec, _problem(built))
    assert autotune._decided[key].unfused_ms == 0.5 and autotune.load(key) is None
    autotune.reset()


def test_candidates_are_timed_with_the_dense_copies_the_graph_makes(monkeypatch):
    """A region output in padded rows (6 fp32 features: 24-byte rows, padded to 32) that the
    graph returns is copied to dense rows after each launch (`contain_padded_outputs`): every
    candidate is checked and timed with that copy (`dense_outputs`), and the decision's key and
    description say so. Read by a reduction, the padded rows stay and nothing is copied; a
    region with no copy keeps the key it had."""
    region, built = _first_region(LinearAct(n=6, act="relu"), torch.randn(16, 32))
    assert autotune.dense_outputs(region, built) == (0,)
    summed = _first_region(nn.Sequential(LinearAct(n=6, act="relu"), Sum1()), torch.randn(16, 32))
    assert autotune.dense_outputs(*summed) == ()
    built, problem, labels, _ = _fake_candidates(monkeypatch, wrong=None, built=built)
    monkeypatch.setenv("EVT_AUTOTUNE_ORDERS", "")
    layouts = []

    def timer(fn):
        layouts.append([o.is_contiguous() for o in fn()])
        return 1.0

    plain = [o.is_contiguous() for o in _OrderedFake(built.spec, labels[0])(
        autotune.candidate_inputs(built, problem, "cpu"))]  # fmt: skip
    assert plain == [False]  # the kernel's own output: padded rows
    timings = autotune.time_candidates(built, problem, timer, device="cpu", dense=(0,))
    assert all(math.isfinite(timings[c]) for c in labels) and layouts and all(x == [True] for x in layouts)
    monkeypatch.setattr(autotune, "time_candidates", _made_up_kernel_timings)
    monkeypatch.setattr(autotune.unfused, "runner", lambda *a, **k: None)
    decision = autotune.measure(region, built, problem, timer=lambda fn: 1.0, device="cpu", dense=(0,))
    assert decision.dense_copies == (0,) and "dense copies of outputs [0]" in autotune.describe(decision)
    keys = {autotune.decision_key(built.spec, problem, d) for d in ((), (0,))}
    assert len(keys) == 2 and autotune.decision_key(built.spec, problem) in keys


class Sum1(nn.Module):
    def forward(self, y):
        return y.sum(1)


@pytest.mark.parametrize("index_masks", ["1", "0"])
def test_the_unfused_path_computes_a_mask_the_graph_computes_from_iota(monkeypatch, index_masks):
    """Causal scores: the mask `triu(ones(S, S), 1)` is computed from `iota` alone. The region
    reads it as two index vectors (`float_index_masks`) or, with `EVT_INDEX_MASKS=0`, as a bool
    [S, S] tensor. Either way the unfused path computes those inputs (`constant_producers`), as
    Inductor does inside the whole graph, instead of taking them as loaded arguments; its
    outputs are the graph's, in the module Inductor compiles and op by op alike."""
    monkeypatch.setenv("EVT_INDEX_MASKS", index_masks)
    q, k = torch.randn(2, 2, 16, 8), torch.randn(2, 2, 16, 8)
    want = attention_scores(q, k)
    seen = []

    def check(region, built) -> bool:
        produced = unfused.constant_producers(region)
        assert {n.target for n in produced} >= {torch.ops.prims.iota.default}
        computed = [n for n in region.inputs() if n in produced]
        dtypes = [n.meta["val"].dtype for n in computed]
        assert dtypes == ([torch.float32] * 2 if index_masks == "1" else [torch.bool]), dtypes
        assert unfused.arguments(region) == [n for n in region.inputs() if n not in computed]
        gm = unfused.module(region)
        assert len(gm.graph.find_nodes(op="placeholder")) == len(region.inputs()) - len(computed) == 2
        given = [x.reshape(4, 16, 8) for x in (q, k)]  # the bmm's operands: q and k, batch flat
        given = [given[0], given[1].transpose(1, 2)]
        assert [tuple(v.shape) for v in given] == [tuple(n.meta["val"].shape) for n in unfused.arguments(region)]
        for got in (gm(*given), unfused.eager(region, given)()):
            torch.testing.assert_close(got[0].reshape(want.shape), want)
        seen.append(region)
        return True

    with torch.no_grad():
        pipeline.fuse(capture_joint(attention_scores, q, k), keep=check)
    assert len(seen) == 1


def test_a_random_or_input_read_producer_stays_an_argument():
    """Only deterministic chains from factory ops are computed: a dropout-like mask from
    `rand` and a value computed from a graph input stay arguments of the unfused path."""
    x = torch.randn(16, 32)

    def f(x, w):
        keep = torch.rand(16, 48) > 0.5
        scale = (x.sum() > 0).float()
        return torch.where(keep, x @ w, 0.0) * scale

    seen = []

    def check(region, built) -> bool:
        seen.append((unfused.constant_producers(region), unfused.arguments(region), region.inputs()))
        return True

    with torch.no_grad():
        pipeline.fuse(capture_joint(f, x, torch.randn(32, 48)), keep=check)
    assert seen and all(produced == [] and args == inputs for produced, args, inputs in seen)

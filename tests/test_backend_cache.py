"""The pass uuid that Inductor's FX graph cache and AOTAutograd's cache key on: it changes with
every EVT_* setting that steers the passes, so a cached graph rewritten under other settings is
never replayed (session 26: `EVT_RECOMPUTE_INSIDE=1` got the graph cached without it)."""

import pytest
import torch

import evt.backend
from evt.backend import JointPass, SplitPass


def uuids() -> tuple[str, ...]:
    return JointPass().uuid(), JointPass(autotune=True).uuid(), SplitPass().uuid()


@pytest.mark.parametrize("name", ["EVT_RECOMPUTE_INSIDE", "EVT_TRIM", "EVT_SAVED_BUDGET_MB", "EVT_DEBUG"])
def test_a_setting_that_steers_the_passes_changes_the_uuid(monkeypatch, name):
    monkeypatch.setenv(name, "0")
    before = uuids()
    monkeypatch.setenv(name, "1")
    after = uuids()
    assert all(a != b for a, b in zip(before, after)), (before, after)
    monkeypatch.setenv(name, "0")
    assert uuids() == before


@pytest.mark.parametrize("name", ["EVT_CACHE_DIR", "EVT_COMPILE_JOBS", "EVT_WAIT_KERNELS", "EVT_BENCH_CALL_S",
                                  "OTHER_VARIABLE"])
def test_where_kernels_build_leaves_the_uuid(monkeypatch, name):
    before = uuids()
    monkeypatch.setenv(name, "/elsewhere")
    assert uuids() == before


def test_inductors_caches_replay_a_graph_and_rerun_the_passes_when_a_setting_changes(monkeypatch, tmp_path):
    """Inductor on the CPU with both caches on: the same model compiled again under the same
    settings replays the cache (evt's pass does not run: the decomposition table evt hands
    Inductor has a stable key); under another EVT_* setting the pass runs again."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    ran = []
    original = evt.backend.fuse_graph
    monkeypatch.setattr(evt.backend, "fuse_graph", lambda *a, **k: ran.append(1) or original(*a, **k))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    x = torch.randn(16, 32)

    def compile_and_step() -> int:
        torch._dynamo.reset()
        torch.compile(model, backend="evt")(x).sum().backward()
        return len(ran)

    with torch._inductor.config.patch(fx_graph_cache=True), torch._functorch.config.patch(
        enable_autograd_cache=True
    ):
        monkeypatch.setenv("EVT_TRIM", "1")
        first = compile_and_step()
        assert first >= 1
        assert compile_and_step() == first  # replayed
        monkeypatch.setenv("EVT_TRIM", "0")
        assert compile_and_step() > first

"""The ctypes side of a launch, against a fake kernel library built with the host C compiler: it
records its arguments and fills output 0 with ones, so pointers, strides and sizes are checked
without CUDA (the tensors stay on the CPU; `check_device` is replaced)."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import shutil

import pytest
import torch

from evt import ir
from evt.codegen.config import TileConfig
from evt.errors import LaunchError
from evt.runtime import cache, launch
from tests.runtime_fakes import build_fake_library, fc1_inputs, fc1_spec

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no host C compiler")


@pytest.fixture(scope="module")
def fake_library(tmp_path_factory):
    return launch.load(build_fake_library(tmp_path_factory.mktemp("entry"), CC))


@pytest.fixture
def kernel(fake_library, monkeypatch):
    monkeypatch.setattr(launch, "check_device", lambda tensors: None)
    fake_library.handle.evt_test_set_rc(0)
    return launch.Kernel(fc1_spec(), fake_library)


def record(library: launch.Library) -> list[int]:
    fn = library.handle.evt_test_record
    fn.restype = ctypes.POINTER(ctypes.c_int64)
    return fn()[:40]


def test_arguments_reach_the_kernel(kernel):
    M, K, N = 64, 32, 48
    inputs = fc1_inputs(M, K, N)
    outs = kernel(inputs)
    rec = record(kernel.library)
    assert rec[:5] == [M, N, K, 1, 256] and rec[5] != 0 and rec[6] == 0
    assert rec[8:17] == [K, 1, 0, K, 1, 0, 0, 1, 0]
    assert rec[20:26] == [N, 1, 0, N, 1, 0]
    assert rec[30:33] == [t.data_ptr() for t in inputs]
    assert rec[33:35] == [o.data_ptr() for o in outs]
    assert [o.shape for o in outs] == [(M, N), (M, N)] and outs[0].dtype == torch.bfloat16
    assert torch.equal(outs[0], torch.ones(M, N, dtype=torch.bfloat16))


def test_a_row_reduction_output_is_an_n_vector(kernel):
    """Output 1 summed over M: allocated [N] and passed the strides (0, 1, 0)."""
    spec = fc1_spec()
    nodes = tuple(
        ir.RowReduction("sum", "add", 1, "f32") if isinstance(n, ir.AuxStore) else n
        for n in spec.nodes
    )
    reducing = launch.Kernel(dataclasses.replace(spec, nodes=nodes), kernel.library)
    M, K, N = 64, 32, 48
    outs = reducing(fc1_inputs(M, K, N))
    assert [tuple(o.shape) for o in outs] == [(M, N), (N,)] and outs[1].dtype == torch.float32
    assert record(kernel.library)[20:26] == [N, 1, 0, 0, 1, 0]


def test_preallocated_outputs_are_written(kernel):
    inputs = fc1_inputs()
    poisoned = [torch.full((64, 48), float("nan"), dtype=torch.bfloat16) for _ in range(2)]
    outs = kernel.launch(kernel.guard(inputs), inputs, poisoned)
    assert outs is poisoned and not outs[0].isnan().any()
    with pytest.raises(LaunchError, match=r"output 1 must be a 16-byte aligned \(64, 48\) torch.bfloat16 tensor with strides \(48, 1\)"):
        kernel.launch(kernel.guard(inputs), inputs, [poisoned[0], poisoned[1].t()])


def test_nonzero_return_code_is_a_launch_error(kernel):
    kernel.library.handle.evt_test_set_rc(-1)
    with pytest.raises(LaunchError, match="kfake.*can_implement"):
        kernel(fc1_inputs())


def test_library_is_loaded_once(fake_library):
    assert launch.load(fake_library.path) is fake_library


def test_signature_mismatch_and_missing_library(fake_library, tmp_path):
    shutil.copy(fake_library.path, tmp_path / cache.SO)
    (tmp_path / cache.META).write_text(json.dumps({"name": "kfake", "signature": "other"}))
    with pytest.raises(LaunchError, match="says it is 'kfake;sig'"):
        launch.load(tmp_path / cache.SO)
    (tmp_path / cache.META).write_text(json.dumps({"name": "knone"}))
    with pytest.raises(LaunchError, match="evt_knone_run"):
        launch._load(tmp_path / cache.SO)
    with pytest.raises(LaunchError, match="cannot load"):
        launch.load(tmp_path / "missing" / cache.SO)


def test_a_launch_passes_its_problems_tile_order(kernel):
    """The tile order is an argument of every launch (and of the workspace query): 0:0 unless the
    kernel's `tile_order` function names another for the problem; `ordered` fixes one."""
    M, K, N = 64, 32, 48
    kernel(fc1_inputs(M, K, N))
    assert record(kernel.library)[7] == 0 and record(kernel.library)[36] == 0
    asked = []

    def per_problem(p):
        asked.append((p.M, p.N, p.K, p.L))
        return launch.TileOrder(2, 8) if p.M == M else launch.TileOrder(0, 1)

    chosen = dataclasses.replace(kernel, tile_order=per_problem)
    for m in (M, 2 * M, M):
        chosen(fc1_inputs(m, K, N))
        assert record(kernel.library)[7] == (2 + 4 * 8 if m == M else 4), m
    assert asked == [(M, N, K, 1), (2 * M, N, K, 1)]  # once per problem: plans are remembered
    kernel.ordered(launch.TileOrder(1, 2))(fc1_inputs(M, K, N))
    assert record(kernel.library)[7] == record(kernel.library)[36] == 1 + 4 * 2
    kernel(fc1_inputs(M, K, N))  # the kernel it came from keeps its own plans
    assert record(kernel.library)[7] == 0


def test_a_plan_is_per_device(kernel, monkeypatch):
    """A launch plan is the current device's (its SM count sets the swizzle and the workspace,
    which differ between GPUs of different sizes): the same problem on another device is planned
    again, once per device."""
    M, K, N = 64, 32, 48
    asked = []

    def per_problem(p):
        asked.append(launch.current_device())
        return launch.TileOrder(0, 1)

    chosen = dataclasses.replace(kernel, tile_order=per_problem)
    for device in (0, 1, 0, 1):
        monkeypatch.setattr(launch, "current_device", lambda d=device: d)
        chosen(fc1_inputs(M, K, N))
    assert asked == [0, 1]
    problem = chosen.guard(fc1_inputs(M, K, N))
    assert [p for p, _ in chosen.plans()] == [problem, problem]


def test_a_library_says_how_it_stores_its_outputs():
    """The guards of a kernel that stores its outputs from registers take any N its vector
    divides: the library's signature names its config (`name;config;spec`)."""

    def stores(signature):
        lib = launch.Library(None, "k", None, None, None, config=launch._config(signature))
        return lib.store_align, lib.pad_rows, lib.any_row_length

    assert stores("k;128x128x64_c1x1_pingpong_sa1;{}") == (1, False, False)
    assert stores("k;128x256x64_c1x1_cooperative_sa4;{}") == (4, False, False)
    assert stores("k;128x256x64_c1x1_cooperative;{}") == (0, False, False)
    assert stores("k;128x256x64_c1x1_cooperative_pr;{}") == (0, True, True)
    assert stores("k;128x128x64_c1x1_pingpong_ss;{}") == (0, False, True)  # staged: any N
    assert stores("not a signature") == (0, False, False)
    assert launch._config("k;256x128x64_c2x1_cooperative;{}") == TileConfig(256, 128, 64, cluster_m=2)


def test_tile_orders_outside_the_range_are_refused():
    assert launch.TileOrder.from_label(" 2:8 ") == launch.TileOrder(2, 8)
    assert launch.TileOrder(1, 4).code == 17 and launch.TileOrder(1, 4).label == "1:4"
    assert all(launch.TileOrder.from_code(launch.TileOrder(r, s).code) == launch.TileOrder(r, s)
               for r in (0, 1, 2) for s in launch.SWIZZLES)  # fmt: skip
    for bad in ((3, 1), (0, 3), (-1, 2), (0, 16)):
        with pytest.raises(LaunchError, match="raster order is 0 .* the swizzle 0 .*, 1, 2, 4 or 8"):
            launch.TileOrder(*bad)
    for text in ("2", "a:b", "1:2:3"):
        with pytest.raises(LaunchError, match="write RASTER:SWIZZLE"):
            launch.TileOrder.from_label(text)

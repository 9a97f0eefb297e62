"""GPU tier of the differential fuzzer: 20 generated specs (3 with a nested batch), 8 more with a
nested batch (L = L1 x L2, operands read as strided views), and every minimized failure in
tests/fuzz_regressions/, run at each fuzz shape against the reference path with NaN-poisoned
outputs (`evt.testing.compare`). The full fuzz run is scripts/fuzz_gpu.py (`--nested-only` for
nested seeds only)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evt import ir
from evt.runtime import build, dispatch
from evt.testing import fuzz
from evt.testing.compare import SHAPES, run_case
from scripts.fuzz_gpu import pick

pytestmark = pytest.mark.gpu

SEEDS = [*range(1000, 1020), *pick(1020, 8, nested_only=True)]
REGRESSIONS = sorted((Path(__file__).parent / "fuzz_regressions").glob("*.json"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory, request) -> dict[int, ir.KernelSpec]:
    """The specs of the seeds this run selected (`-k`, node ids, xdist's share), their kernels
    built in parallel up front."""
    if not os.environ.get("EVT_CACHE_DIR"):
        os.environ["EVT_CACHE_DIR"] = str(tmp_path_factory.mktemp("evt-cache"))
    dispatch.reset()
    out = {s: fuzz.generate(s) for s in selected_seeds(request)}
    for future in [build.prefetch(s) for s in out.values()]:
        future.exception()  # a failed build shows as that seed's failure below
    return out


def prebuilt_specs() -> list[ir.KernelSpec]:
    """Every spec this module builds (`scripts/kernel_pack.py build --tests fuzz` builds them
    ahead of a device call)."""
    regressions = [ir.from_json(json.loads(p.read_text())["spec"]) for p in REGRESSIONS]
    return [*(fuzz.generate(s) for s in SEEDS), *regressions]


def selected_seeds(request) -> list[int]:
    """The seeds of this module's tests the session runs."""
    chosen = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if item.module is request.module and callspec is not None and "seed" in callspec.params:
            chosen.add(callspec.params["seed"])
    return [s for s in SEEDS if s in chosen]


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_spec_matches_the_reference(generated, seed):
    for shape in SHAPES:
        failure = run_case(generated[seed], shape, seed)
        assert failure is None, (f"fuzz seed {seed} at {shape}: {failure}\n"
                                 f"{ir.format_tree(generated[seed])}")  # fmt: skip


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_regression(path):
    body = json.loads(path.read_text())
    spec = ir.from_json(body["spec"])
    failure = run_case(spec, tuple(body["shape"]), body["seed"])
    assert failure is None, f"{path.name}: {failure}\n{ir.format_tree(spec)}"

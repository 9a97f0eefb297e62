"""Every tile config the heuristic (or max-autotune) can pick computes the same result: each
candidate of `evt.codegen.config.CANDIDATES` that fits a spec, with the aux-load stages
`config.source_stages` gives it, against the reference path, with NaN-poisoned outputs, on
whole tiles and on residues; every raster order and swizzle; the configs only sweeps build
(outputs and aux tensors through registers, the fence-free store loop); aux inputs TMA cannot
read, copied into padded rows; outputs staged through shared memory and copied out by the
threads; and max-autotune end to end."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

import pytest
import torch

from evt import ir
from evt.codegen import config as cfgs
from evt.runtime import build, guards, launch, reference, verify
from evt.testing.compare import tolerance
from evt.testing.inputs import make_inputs
from tests import specs

pytestmark = pytest.mark.gpu

SPECS = ("mlp_fc1_forward", "mlp_dgrad_gelu_bias", "layer_norm_backward", "batched_row_statistics",
         "batch_statistics")  # fmt: skip
SHAPES = ((1024, 1024, 512), (200, 144, 72))


@pytest.fixture(scope="module", autouse=True)
def build_selected_kernels_in_parallel(request, tmp_path_factory):
    """Start the kernel of every selected single-kernel test of this module (those with a
    `label` parameter) in the build pool, all at once, before the first test waits for its own:
    on a bare kernel cache they built one at a time (session 29: a 480 s device call ran out
    while building them)."""
    if not os.environ.get("EVT_CACHE_DIR"):
        os.environ["EVT_CACHE_DIR"] = str(tmp_path_factory.mktemp("evt-cache"))
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is request.module and "label" in params:
            spec = params["spec"]() if "spec" in params else specs.ALL[params["name"]]()
            build.prefetch(spec, cfgs.TileConfig.from_label(params["label"]))


def prebuilt_kernels() -> list[tuple[ir.KernelSpec, cfgs.TileConfig]]:
    """Every candidate config of each spec (with the aux-load stages `config.source_stages` gives
    it), the kernels most tests here share; `scripts/kernel_pack.py build --tests configs` builds
    them ahead of a device call."""
    return [(spec, cfg) for spec in (specs.ALL[name]() for name in SPECS)
            for cfg in cfgs.heuristic(spec, *SHAPES[0])]  # fmt: skip


class LazyKernels(Mapping):
    """(spec name, config label) -> its kernel, for every pair of `prebuilt_kernels()`; a spec's
    kernels start building together the first time one of them is asked for, so a run that
    selects one spec (`-k`) builds only its kernels."""

    def __init__(self):
        self._pairs = {(spec.name, cfg.label): (spec, cfg) for spec, cfg in prebuilt_kernels()}
        self._futures: dict = {}
        self._loaded: dict = {}

    def __iter__(self):
        return iter(self._pairs)

    def __len__(self):
        return len(self._pairs)

    def __getitem__(self, key) -> launch.Kernel:
        spec = self._pairs[key][0]
        if key not in self._loaded:
            for k, (s, cfg) in self._pairs.items():
                if k[0] == key[0] and k not in self._futures:
                    self._futures[k] = build.prefetch(s, cfg)
            self._loaded[key] = launch.Kernel(spec, launch.load(self._futures[key].result()))
        return self._loaded[key]


@pytest.fixture(scope="module")
def kernels():
    return LazyKernels()


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("shape", SHAPES, ids=["tiles", "residues"])
def test_every_candidate_config_matches_the_reference(kernels, name, shape):
    labels = [label for (n, label) in kernels if n == name]
    assert len(labels) >= 5, labels
    spec = specs.ALL[name]()
    inputs = make_inputs(spec, *shape, seed=3, device="cuda")
    want = reference.run(spec, inputs)
    for label in labels:
        check(kernels[(name, label)], inputs, want, label)


def check(kernel: launch.Kernel, inputs, want, what) -> None:
    """One launch into NaN-poisoned outputs, every output against the reference's."""
    spec = kernel.spec
    problem = kernel.guard(inputs)
    layouts = spec.output_layouts(problem.M, problem.N, problem.L)  # rows padded where needed
    empty = launch._empty_strided(torch.device("cuda"))
    outs = [
        launch.allocate(empty, s, st, ir.torch_dtype(d), ir.padded_storage(s, st)).fill_(math.nan)
        for (s, st), d in zip(layouts, spec.output_dtypes())
    ]
    kernel.launch(problem, inputs, outs)
    for i, (got, ref, dtype) in enumerate(zip(outs, want, spec.output_dtypes(), strict=True)):
        assert not got.float().isnan().any(), (what, i, "elements left unwritten")
        node = spec.d if i == 0 else spec.output_nodes()[i - 1].name
        err = verify.relative_error(got, ref)
        assert err <= tolerance(spec, node, dtype), (what, i, err)


# 9 x 6 tiles of 128x128 (K a k-block and a residue): swizzle 4 and 8 round the grid up to
# 12 x 8 and 16 x 8, so the scheduler hands out tiles outside the problem
PADDED = (1100, 704, 136)


@pytest.mark.parametrize("shape", [SHAPES[0], PADDED, SHAPES[1]], ids=["tiles", "padded", "residues"])
def test_every_tile_order_matches_the_reference(kernels, shape):
    """Raster order and swizzle are runtime arguments of one binary (`Kernel.ordered`): every
    order, evt's own (0, 0) included, gives the same result with each spec's first-ranked
    kernel, its 128x128 ping-pong and its stream-K kernels."""
    for name in SPECS:
        spec = specs.ALL[name]()
        inputs = make_inputs(spec, *shape, seed=5, device="cuda")
        want = reference.run(spec, inputs)
        first = cfgs.heuristic(spec, *shape)[0].label
        labels = {first} | {label for (n, label) in kernels if n == name
                            and label.startswith(("128x128x64_c1x1_pingpong", "128x128x64_c1x1_cooperative_sk"))}  # fmt: skip
        assert len(labels) >= 2, labels
        for label in sorted(labels):
            kernel = kernels[(name, label)]
            for raster in (0, 1, 2):
                for swizzle in launch.SWIZZLES:
                    ordered = kernel.ordered(launch.TileOrder(raster, swizzle))
                    check(ordered, inputs, want, (label, raster, swizzle))


# GPT-J's MLP up projection: 64 x 64 tiles of 128x256, which CUTLASS walks along N, one wave
# reading all of B (`evt.codegen.wave_traffic`): evt launches it with swizzle 8
WIDE_GRID = (8192, 16384, 4096)


def test_a_wide_grid_launches_with_the_wave_traffic_swizzle(kernels):
    """evt's order at a grid whose waves would outrun DRAM is 0:8, made explicit in the launch
    plan (the C++ launch path takes the same plan), and computes the reference's result."""
    spec = specs.ALL["mlp_fc1_forward"]()
    kernel = kernels[("mlp_fc1_forward", "128x256x64_c1x1_cooperative")]
    inputs = make_inputs(spec, *WIDE_GRID, seed=7, device="cuda")
    assert kernel.plan(kernel.guard(inputs)).tile_order == launch.TileOrder(0, 8).code
    check(kernel, inputs, reference.run(spec, inputs), "wide grid, evt's order")


# 32 x 32 tiles of 128x256 at K = 2048: CUTLASS walks them along N, each wave reading all of B;
# evt launches them along M, where its waves read 0.6 of that (`wave_traffic.raster_order`)
OTHER_RASTER_GRID = (4096, 8192, 2048)


def test_a_grid_whose_other_raster_order_reads_less_launches_in_it(kernels):
    """evt's order for a 128x256 cooperative kernel at that grid is 1:0, in the launch plan,
    and computes the reference's result."""
    spec = specs.ALL["mlp_fc1_forward"]()
    kernel = kernels[("mlp_fc1_forward", "128x256x64_c1x1_cooperative")]
    inputs = make_inputs(spec, *OTHER_RASTER_GRID, seed=8, device="cuda")
    assert kernel.plan(kernel.guard(inputs)).tile_order == launch.TileOrder(1, 0).code
    check(kernel, inputs, reference.run(spec, inputs), "along M, evt's order")


# The LLaMA step's attention-output grid: 64 x 16 tiles of 128x128 at K = 2048, which evt
# launches with swizzle 2 in ping-pong kernels (`wave_traffic.wide_pingpong`), under the DRAM limit
WIDE_PINGPONG_GRID = (8192, 2048, 2048)


def test_a_wide_ping_pong_grid_launches_with_swizzle_2(kernels):
    """evt's order for a 128x128 ping-pong kernel at a grid of 16 tile columns and K > 1024 is
    0:2, in the launch plan, and computes the reference's result; the cooperative 128x256
    kernel keeps the compiled order there."""
    spec = specs.ALL["mlp_fc1_forward"]()
    inputs = make_inputs(spec, *WIDE_PINGPONG_GRID, seed=9, device="cuda")
    pingpong = kernels[("mlp_fc1_forward", "128x128x64_c1x1_pingpong")]
    assert pingpong.plan(pingpong.guard(inputs)).tile_order == launch.TileOrder(0, 2).code
    wide = kernels[("mlp_fc1_forward", "128x256x64_c1x1_cooperative")]
    assert wide.plan(wide.guard(inputs)).tile_order == launch.EVT_ORDER.code
    check(pingpong, inputs, reference.run(spec, inputs), "wide ping-pong grid, evt's order")


@pytest.mark.parametrize("name, label", [
    ("mlp_fc1_forward", "128x128x64_c1x1_pingpong_da"),
    ("mlp_fc1_forward", "128x256x64_c1x1_cooperative_da"),
    ("mlp_dgrad_gelu_bias", "128x128x64_c1x1_pingpong_rl1"),
    ("mlp_dgrad_gelu_bias", "128x128x64_c1x1_pingpong_rl3"),
    ("layer_norm_backward", "128x128x64_c1x1_cooperative_rl2"),
    ("activations", "128x256x64_c1x1_cooperative_rl2"),
    ("mlp_fc1_forward", "128x128x64_c1x1_pingpong_sa2_ff"),
    ("mlp_dgrad_gelu", "128x128x64_c1x1_pingpong_sa2_rl2_ff"),
    ("activations", "128x256x64_c1x1_cooperative_sa2_rl2_ff"),
    ("mlp_dgrad_gelu_bias", "128x128x64_c1x1_pingpong_pf"),
    ("layer_norm_backward", "128x256x64_c1x1_cooperative_pf"),
])  # fmt: skip
def test_sweep_only_configs_match_the_reference(name, label):
    """The configs only the config sweep builds (none a candidate: each measured slower than
    the default on the H100) compute every element, residue tiles included (their bounds
    checks), as the reference path does: aux stores from registers (`_da`); aux loads straight
    into registers, 1-3 subtiles in flight (`_rlN`: bf16, f32 and bool aux tensors); evt's
    fence-free store loop (`_ff`: every output from registers, every aux tensor loaded into
    registers, no barrier between subtiles; ping-pong and cooperative, a broadcast bias row, aux
    stores, bf16 and bool aux loads); aux loads whose tiles are first prefetched into L2 (`_pf`:
    bf16 and f32 aux tensors)."""
    spec = specs.ALL[name]()
    kernel = launch.Kernel(spec, launch.load(build.prefetch(spec, cfgs.TileConfig.from_label(label)).result()))
    for shape in (*SHAPES, PADDED):
        inputs = make_inputs(spec, *shape, seed=7, device="cuda")
        check(kernel, inputs, reference.run(spec, inputs), (label, shape))


@pytest.mark.parametrize(
    "spec, label, shapes",
    [
        (specs.mlp_fc1_forward, "128x128x64_c1x1_pingpong_sa1", [(1024, 197, 512), (200, 197, 72)]),
        (specs.mlp_fc1_forward, "128x256x64_c1x1_cooperative_sa2", [(1024, 198, 512), (200, 1024, 72)]),
        (specs.scaled_scores, "128x256x64_c1x1_cooperative_sa1", [(197, 197, 64), (200, 131, 72)]),
        (specs.nested_scaled_scores, "128x128x64_c1x1_pingpong_sa1", [(197, 197, 64)]),
    ],
    ids=["fc1-pingpong-1", "fc1-cooperative-2", "scores-1", "scores-nested-1"],
)  # fmt: skip
def test_outputs_stored_from_registers_match_the_reference(spec, label, shapes):
    """Outputs from registers (`TileConfig.store_align`, not a candidate) write every element
    of D and of the aux stores, residue tiles included, as the reference path computes them,
    into rows padded to 16 bytes where N needs it."""
    spec = spec()
    config = cfgs.TileConfig.from_label(label)
    kernel = launch.Kernel(spec, launch.load(build.prefetch(spec, config).result()))
    assert kernel.library.store_align == config.store_align
    for m, n, k in shapes:
        assert n % config.store_align == 0, (n, label)
        inputs = make_inputs(spec, m, n, k, seed=11, device="cuda")
        check(kernel, inputs, reference.run(spec, inputs), (label, (m, n, k)))


@pytest.mark.parametrize(
    "spec, label, shapes",
    [
        (specs.mlp_fc1_forward, "128x256x64_c1x1_cooperative_pr", [(1024, 197, 512), (200, 100, 72)]),
        (specs.mlp_fc1_forward, "128x128x64_c1x1_pingpong_pr", [(1024, 197, 512), (300, 131, 72)]),
        (specs.scaled_scores, "128x256x64_c1x1_cooperative_pr", [(197, 197, 64), (200, 131, 72)]),
        (specs.nested_scaled_scores, "128x128x64_c1x1_pingpong_pr", [(197, 197, 64)]),
    ],
    ids=["fc1-cooperative", "fc1-pingpong", "scores", "scores-nested"],
)  # fmt: skip
def test_padded_rows_are_stored_through_tma(spec, label, shapes):
    """Outputs whose rows are not whole 16-byte vectors (ViT's 197 x 197 scores) get rows
    padded to one (`ir.row_pitch`) and TMA stores (`TileConfig.pad_rows`: CUTLASS's extent
    check takes the padded N): D and the aux stores written in full,
    residue tiles included, as the reference computes them, and nothing past the padded rows
    (the launcher allocates them whole)."""
    spec = spec()
    config = cfgs.TileConfig.from_label(label)
    kernel = launch.Kernel(spec, launch.load(build.prefetch(spec, config).result()))
    for m, n, k in shapes:
        inputs = make_inputs(spec, m, n, k, seed=13, device="cuda")
        want = reference.run(spec, inputs)
        fresh = kernel(inputs)
        for i, (got, w) in enumerate(zip(fresh, want)):
            assert got.stride() == w.stride(), (i, got.stride(), w.stride())
        check(kernel, inputs, want, (label, (m, n, k)))
        # the outputs' whole storage (`ir.padded_storage`) and 16 bytes past it, poisoned: a TMA
        # store writes the vector a row ends in pad and all, nothing past the padded rows
        sizes = [ir.padded_storage(o.shape, o.stride()) or o.numel() for o in fresh]
        flats = [torch.full((n + 16,), 7.0, dtype=o.dtype, device="cuda") for n, o in zip(sizes, fresh)]
        kernel.launch(kernel.guard(inputs), inputs,
                      [f.as_strided(o.shape, o.stride()) for f, o in zip(flats, fresh)])  # fmt: skip
        for f, size, o in zip(flats, sizes, fresh):
            assert bool((f[size:] == 7).all()), (label, (m, n, k), "written past the padded rows")
            assert ir.padded_storage(o.shape, o.stride()) or o.is_contiguous()
            assert o.untyped_storage().nbytes() >= size * o.element_size()  # the launcher's own


@pytest.mark.parametrize(
    "spec, label, shapes",
    [
        (specs.mlp_fc1_forward, "128x128x64_c1x1_pingpong_ss", [(1024, 197, 512), (300, 131, 72), (200, 1024, 72)]),
        (specs.mlp_fc1_forward, "128x256x64_c1x1_cooperative_ss", [(1024, 198, 512), (200, 100, 72)]),
        (specs.scaled_scores, "128x256x64_c1x1_cooperative_e64_ss", [(197, 197, 64), (200, 131, 72)]),
        (specs.mlp_dgrad_gelu_bias, "128x128x64_c1x1_pingpong_ss", [(1024, 200, 512), (200, 136, 72)]),
        (specs.activations, "128x256x64_c1x1_cooperative_ss", [(1024, 200, 512), (300, 131, 72)]),
        (specs.batched_row_statistics, "128x128x64_c1x1_pingpong_ss", [(1024, 197, 512), (200, 131, 72)]),
    ],
    ids=["fc1-pingpong", "fc1-cooperative", "scores", "dgrad-bias-pingpong", "activations-bool",
         "statistics-dag"],
)  # fmt: skip
def test_staged_stores_write_every_element_and_nothing_else(spec, label, shapes):
    """Outputs through shared memory, copied out by the epilogue's threads
    (`TileConfig.staged_stores`, evt_staged_store.inc; not a candidate): D and the aux stores
    written in full at any N, residue tiles included, as the reference computes them, beside
    a reduction over M, statistics over N (a DAG visitor) and bool aux loads and stores; and,
    unlike a TMA store, nothing in a padded row's pad and nothing past the storage (every
    element checked against its bounds). Aux loads TMA cannot read go through the launch's
    padded copies, as in `dispatch.run`."""
    from evt.runtime import guards

    spec = spec()
    config = cfgs.TileConfig.from_label(label)
    kernel = launch.Kernel(spec, launch.load(build.prefetch(spec, config).result()))
    assert kernel.library.any_row_length and not kernel.library.pad_rows
    for m, n, k in shapes:
        given = make_inputs(spec, m, n, k, seed=17, device="cuda")
        want = reference.run(spec, given)
        inputs = guards.copy_into_rows(spec, given) or given
        check(kernel, inputs, want, (label, (m, n, k)))
        fresh = kernel(inputs)
        sizes = [ir.padded_storage(o.shape, o.stride()) or o.numel() for o in fresh]
        # poisoned bytes (0x7B: no bool, a bf16 or fp32 of 1.3e36), the storage 16 elements longer
        flats = [torch.full(((size + 16) * o.element_size(),), POISON, dtype=torch.uint8, device="cuda")
                 for size, o in zip(sizes, fresh)]  # fmt: skip
        outs = [f.view(o.dtype).as_strided(o.shape, o.stride()) for f, o in zip(flats, fresh)]
        kernel.launch(kernel.guard(inputs), inputs, outs)
        torch.cuda.synchronize()
        for i, (f, size, o) in enumerate(zip(flats, sizes, outs)):
            each = f.view(-1, o.element_size())
            assert bool((each[size:] == POISON).all()), (label, (m, n, k), i, "written past the storage")
            written = torch.zeros(each.shape[0], dtype=torch.bool, device="cuda")
            written.as_strided(o.shape, o.stride()).fill_(True)
            assert bool((each[~written] == POISON).all()), (label, (m, n, k), i, "written into the pad")


POISON = 0x7B


def test_aux_tensors_tma_cannot_read_are_loaded_from_padded_copies():
    """Attention's scores at ViT's 197 tokens: the mask every batch reads and the per-batch bias
    have 394-byte rows, which TMA cannot read; the launch copies them into padded rows
    (`guards.copy_into_rows`) and the kernel reads the copies, no fallback: every element as the
    reference computes it, the padding's garbage never read into the problem."""
    from evt.runtime import dispatch

    spec = specs.attention_scores()
    inputs = make_inputs(spec, 197, 197, 64, seed=5, device="cuda", batch=(6,))
    padded = guards.copy_into_rows(spec, inputs)
    assert padded is not None and [i for i, (a, b) in enumerate(zip(inputs, padded)) if a is not b] == [2, 3]
    for i in (2, 3):
        padded[i].untyped_storage().fill_(0x7F)  # the pads: bf16 3.4e38, were they read
        padded[i].copy_(inputs[i])
    want = reference.run(spec, inputs)
    launch_without_fallback(spec, inputs, [t.clone() for t in inputs], want)
    check(dispatch.kernel_for(spec, (197, 197, 64, 6)), padded, want, "padded copies, poisoned pads")


def launch_without_fallback(spec: ir.KernelSpec, inputs, again, want) -> None:
    """`spec`'s kernel runs on `inputs` through `dispatch.run` (one launch, no fallback warning)
    and through the op twice, the second time on `again` (other storage, the same layout) from
    the C++ launch path (the first hands it its plan); each result as the reference's `want`."""
    import warnings

    import evt.runtime.ops  # noqa: F401 - defines evt::fused_gemm
    from evt.runtime import dispatch, fast

    dispatch.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback warns
        (got,) = dispatch.run(spec, inputs)
    assert dispatch.launches()[spec.name] == 1
    assert fast.ensure("cuda")
    text = ir.to_json(spec)
    first = torch.ops.evt.fused_gemm(text, inputs)
    before = fast.launches()[spec.name]
    second = torch.ops.evt.fused_gemm(text, again)
    assert fast.launches()[spec.name] == before + 1, "the repeated call did not launch from C++"
    for out in (got, first[0], second[0]):
        assert verify.relative_error(out, want[0]) <= tolerance(spec, spec.d, "bf16")


def test_an_operand_laid_out_against_the_kernel_is_copied_not_unfused():
    """Inductor may hand a region a value it computed in another order than the graph's
    (PatchTST's BatchNorm backward reached a dgrad GEMM's A column-major, session 53): the launch
    copies an operand whose last dimension is not unit-stride into rows (`guards.copy_into_rows`)
    and runs the kernel on the copy, no fallback, in Python and from the C++ launch path alike."""
    spec = specs.attention_scores()
    inputs = make_inputs(spec, 197, 197, 64, seed=6, device="cuda", batch=(6,))
    a = spec.gemm.a.input
    turned = [t.transpose(-1, -2).contiguous().transpose(-1, -2) if i == a else t for i, t in enumerate(inputs)]
    assert turned[a].stride(-1) != 1 and torch.equal(turned[a], inputs[a])  # K no longer unit-stride
    again = [t.transpose(-1, -2).contiguous().transpose(-1, -2) if i == a else t.clone() for i, t in enumerate(inputs)]
    launch_without_fallback(spec, turned, again, reference.run(spec, inputs))
    assert guards.RELAID == {(spec.name, a)}, guards.RELAID  # what EVT_DEBUG=1 reports


@pytest.mark.parametrize("rest", ["eager", "inductor"])
def test_max_autotune_training_matches_eager(tmp_path, monkeypatch, rest):
    """mode="max-autotune": every region is decided (cached on disk) against the unfused path as
    the route runs it (eager op by op, or compiled by Inductor: no fallback to eager) and the
    step is right."""
    from evt.examples import MLP
    from evt.runtime import autotune, dispatch

    monkeypatch.setenv("EVT_CACHE_DIR", os.environ.get("EVT_CACHE_DIR", str(tmp_path)))
    torch._dynamo.reset()
    dispatch.reset()
    autotune.reset()
    torch.manual_seed(0)
    model = MLP(1024, 4096).cuda().to(torch.bfloat16)
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    compiled = torch.compile(model, backend="evt", options={"rest": rest, "autotune": True})
    out = compiled(x)
    out.float().square().mean().backward()
    decisions = list((autotune.kernel_cache.root() / "autotune").glob("*.json"))
    assert decisions, "max-autotune recorded no decision"
    decided = list(autotune._decided.values())  # this process's, measured or loaded
    assert decided and all(d.unfused_by == rest and d.unfused_ms for d in decided), decided
    ref_model = MLP(1024, 4096).cuda()
    ref_model.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    xr = x.detach().float().requires_grad_()
    ref = ref_model(xr)
    ref.square().mean().backward()
    assert verify.relative_error(out, ref) < 2e-2
    assert verify.relative_error(x.grad, xr.grad) < 3e-2
    assert not dispatch.FALLBACKS, dispatch.FALLBACKS

"""Time regions' kernels under every candidate tile configuration, at the suite's shapes, next to
the bare cuBLAS GEMM: the exhaustive sweep the config heuristic is judged against.

Each pattern of the benchmark suite (`evt.bench.patterns`) is captured through the pipeline on CPU
(small shapes: a KernelSpec does not depend on them), every (region, config) is built in parallel,
checked against the reference path on exact (ternary) operands, then timed at the pattern's real
shapes with CUDA events on normally distributed ones, as the benchmark's (sweeps before session 20
timed the ternary ones, which draw less power: at GPT-J's sizes the H100 ran cuBLAS and some
configs up to 25% faster on them).
The output ranks the configs per (pattern, shape) and says where `evt.codegen.config.heuristic`
put the measured winner.

    python benchmarks/config_sweep.py [--patterns bias_relu,dgrad_gelu] [--json out.json]
        [--configs LABELS (any config's)] [--shapes 2048x768x3072,...]   (instead of each pattern's shapes)
        [--epilogue-tiles 64,128]   (epilogue subtile N: not a candidate)
        [--source-stages 2,3]   (aux loads' shared-memory stages, fewer than CUTLASS's)
        [--tile-orders 0:0,0:1,1:1,2:1,0:4,...]   (raster:swizzle, runtime arguments of one binary)
        [--rounds 5]   (cuBLAS's GEMM and a kernel's tile orders timed in turn 5 times at each
                        shape, medians kept)
        [--functor gelu=cutlass::epilogue::thread::GELU,...]   (another functor for an op: A/B;
                                    variants separated by ';', an empty one is evt's own)
        [--build-only]   (build the kernels and stop: no GPU needed; scripts/kernel_pack.py pack
                          then carries them to the device)
        [--steps step/llama,...]   (instead of --patterns: a training step's own regions, each at
                                    its problem, every config with the heuristic's aux-load
                                    stages and epilogue subtile, as evt would build it)
        [--bare]   (also each region's GEMM with no epilogue, D = acc stored in the operands'
                    dtype, in the same configs and orders: how much of a fused kernel's gap to
                    cuBLAS is its main loop's; rows marked epilogue="bare")
        [--regions b9,b4]   (only the regions whose name holds one of these)
        [--l2-window none,a,b]   (each kernel and cuBLAS's GEMM also timed with L2 keeping operand
                                  A's or B's lines (a CUDA access-policy window on the stream,
                                  persisting hits): whether the epilogue's traffic evicts them)
        [--ncu]   (no timing: each kernel, and cuBLAS's GEMM per problem, called once between
                   cudaProfilerStart and Stop, in the printed order, for
                   `ncu --profile-from-start off`)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import statistics
import time

import torch

from evt import ir
from evt.bench import ops
from evt.bench.measure import in_turn, profile_once
from evt.bench.workload import tiny
from evt.codegen import config as cfgs
from evt.runtime import build, launch, reference
from evt.testing.inputs import make_inputs

PATTERNS = (
    "bias_relu", "bias_gelu", "bias_gelu_tanh", "bias_gelu_aux", "dgrad_gelu", "dgrad_bias_grad",
    "residual_scale_cast",
)  # fmt: skip


def capture(pattern: str):
    """The region specs evt makes of `pattern` (CPU, tiny shapes)."""
    from evt.explain import explain

    p = ops.PATTERNS[pattern]
    dims = tiny(next(iter(p.shapes.values())))
    inputs = p.inputs(dims, torch.bfloat16, "cpu", torch.Generator().manual_seed(0))
    return [r.spec for r in explain(p.fn, *inputs).regions]


def capture_step(case_name: str):
    """[(region spec, {"step": its (M, N, K)})] of a training step
    (`evt.bench.steps`), captured on the meta device at its real sizes as the bench's prebuild
    does; regions with a batch (attention's) are left out (their inputs are heads of other
    tensors, which `make_inputs` does not lay out)."""
    import warnings

    from evt.bench import plan, steps
    from evt.explain import explain
    from evt.runtime import dispatch

    case = next((c for c in plan.all_cases() if c.name == case_name), None)
    if case is None or case.kind != "step":
        raise SystemExit(f"{case_name!r} is not a training step of the bench: see evt bench --list")
    w = steps.build(case, torch.bfloat16, "meta")
    with warnings.catch_warnings(), dispatch.reference_only():
        warnings.simplefilter("ignore")
        report = explain(w.target, *w.make_inputs(0))
    return [(r.spec, {"step": r.problem[:3]}) for r in report.regions
            if r.problem and r.problem[3] == 1 and not r.spec.gemm.batched]


def bare(spec: ir.KernelSpec) -> ir.KernelSpec:
    """`spec`'s GEMM alone, operands renumbered 0 and 1, D = acc in the operands' dtype; named
    by its layout, so regions of one layout share a kernel."""
    g = spec.gemm
    gemm = dataclasses.replace(g, a=dataclasses.replace(g.a, input=0),
                               b=dataclasses.replace(g.b, input=1))  # fmt: skip
    layout = f"{g.a.major}{int(g.a.transposed)}{g.b.major}{int(g.b.transposed)}"
    name = f"bare_{g.dtype}_{layout}" + ("_batched" if g.batched else "")
    return ir.KernelSpec(name, gemm, (ir.AccFetch("acc"),), "acc", g.dtype, 2)


def as_built(spec, cfg: cfgs.TileConfig, k: int) -> cfgs.TileConfig:
    """`cfg` as the heuristic hands it out for `spec` at K = `k` (its aux-load stages and
    epilogue subtile: `config.source_stages`, `config.epilogue_subtile`)."""
    return cfgs.source_stages(spec, cfgs.epilogue_subtile(spec, cfg, k))


def time_ms(fn) -> float:
    from evt.bench.measure import time_ms as harness_time_ms

    return harness_time_ms(fn, "cuda")


def bare_mm(spec, x):
    a, b = x[spec.gemm.a.input], x[spec.gemm.b.input]
    a = a.transpose(-1, -2) if spec.gemm.a.transposed else a
    b = b.transpose(-1, -2) if spec.gemm.b.transposed else b
    return lambda: torch.matmul(a, b)


def _error(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest difference relative to the largest finite value (equal infinities agree)."""
    diff = torch.where(got == want, 0.0, (got - want).abs())
    finite = want[torch.isfinite(want)]
    scale = finite.abs().max().clamp_min(1e-6) if finite.numel() else torch.tensor(1.0)
    return (diff.max() / scale).item()


def padded(spec, inputs: list) -> list:
    """`inputs` with the aux tensors TMA cannot read as they are in padded rows (`guards.copy_into_rows`)."""
    from evt.runtime import guards

    return guards.copy_into_rows(spec, inputs) or inputs


def checked(kernel, tile_order, x, want) -> tuple:
    """`kernel` in `tile_order` and its error on the exact operands `x` against `want`."""
    ordered = kernel.ordered(tile_order)
    return ordered, max(_error(g.float(), w.float()) for g, w in zip(ordered(x), want))


def problem(dims: tuple[int, ...]) -> tuple[int, int, int, tuple[int, ...] | None]:
    """(M, N, K, batch) of a suite shape: M x N x K, or attention's (B, H, S, D): B * H
    products of S x D by D x S (the scores)."""
    if len(dims) == 4:
        b, h, s, d = dims
        return s, s, d, (b * h,)
    m, n, k = dims
    return m, n, k, None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--patterns", default=",".join(PATTERNS))
    p.add_argument("--configs", help="comma-separated labels (default: every candidate; any "
                   "label, e.g. 128x128x64_c2x1_pingpong, also one that is not a candidate)")
    p.add_argument("--epilogue-tiles", default="",
                   help="comma-separated epilogue-tile N values (e.g. 64,128) also swept for "
                        "every chosen config (0 or empty: CUTLASS's automatic tile only)")
    p.add_argument("--source-stages", default="",
                   help="comma-separated aux-load stage counts (e.g. 2,3) also swept for every "
                        "config so far, where they differ from CUTLASS's")
    p.add_argument("--functor", default="",
                   help="comma-separated OP=FUNCTOR: render compute op OP with FUNCTOR instead "
                        "(e.g. gelu=cutlass::epilogue::thread::GELU, CUTLASS's erff form); "
                        "several variants separated by ';' are swept side by side (an empty "
                        "variant: evt's own functors)")
    p.add_argument("--tile-orders", default="0:0",
                   help="comma-separated RASTER:SWIZZLE timed for every kernel (raster 0: "
                        "CUTLASS's choice, 1: along M, 2: along N; swizzle 0: evt's choice, "
                        "1, 2, 4, 8); 0:0 is what evt launches")
    p.add_argument("--shapes", default="",
                   help="comma-separated MxNxK problems swept instead of each pattern's own")
    p.add_argument("--json")
    p.add_argument("--build-only", action="store_true",
                   help="build every kernel into the cache and stop (nvcc, no GPU)")
    p.add_argument("--steps", default="",
                   help="comma-separated training steps (e.g. step/llama) whose own regions are "
                        "swept at their problems, instead of --patterns")
    p.add_argument("--rounds", type=int, default=1,
                   help="time cuBLAS's GEMM and a kernel's tile orders in turn this many times, "
                        "keep each one's median")
    p.add_argument("--bare", action="store_true",
                   help="also each region's GEMM with no epilogue (D = acc), same configs")
    p.add_argument("--regions", default="",
                   help="comma-separated parts of region names (e.g. b9,b4): only those regions")
    p.add_argument("--l2-window", default="-", type=l2_windows,
                   help="comma-separated operands whose lines L2 keeps while each kernel and "
                        "cuBLAS's GEMM are timed (a, b; none), each a row of its own")
    p.add_argument("--ncu", action="store_true",
                   help="no timing: one call of each kernel (and of cuBLAS's GEMM per problem) "
                        "between cudaProfilerStart and Stop, for `ncu --profile-from-start off`")
    a = p.parse_args()
    shapes = {s: tuple(map(int, s.split("x"))) for s in filter(None, a.shapes.split(","))}
    orders = [launch.TileOrder.from_label(o) for o in a.tile_orders.split(",")]
    # any label: a candidate or a config the heuristic does not choose from (what a sweep may add)
    base = ([cfgs.TileConfig.from_label(x) for x in a.configs.split(",")] if a.configs
            else list(cfgs.CANDIDATES))  # fmt: skip
    configs = list(base)
    for n in (int(x) for x in a.epilogue_tiles.split(",") if x.strip() and int(x)):
        configs += [dataclasses.replace(c, epi_n=n) for c in base if c.tile_n % n == 0]
    for sc in (int(x) for x in a.source_stages.split(",") if x.strip()):
        configs += [dataclasses.replace(c, epi_stages_c=sc) for c in list(configs)
                    if not c.epi_stages_c and sc < min(cfgs.epilogue_subtiles(c), 4)]  # fmt: skip
    # (pattern or step) -> its region specs; (pattern or step, region) -> {shape name: dims}
    specs = {name: capture(name) for name in a.patterns.split(",")} if not a.steps else {}
    problems = {}
    for step in filter(None, a.steps.split(",")):
        regions = capture_step(step)
        specs[step] = [spec for spec, _ in regions]
        problems.update({(step, spec.name): dims for spec, dims in regions})
    wanted = [w for w in a.regions.split(",") if w]
    for name in specs if wanted else ():
        specs[name] = [s for s in specs[name] if any(w in s.name for w in wanted)]
    bares = set()  # the bare GEMMs' names: a region of its own, at its regions' problems
    for name in list(specs) if a.bare else ():
        for spec in list(specs[name]):
            g = bare(spec)
            if g.name not in {s.name for s in specs[name]}:
                specs[name].append(g)
            bares.add(g.name)
            if (name, spec.name) in problems:  # a step's: one shape per region, named by it
                problems.setdefault((name, g.name), {})[spec.name] = problems[(name, spec.name)]["step"]
    t0 = time.time()
    jobs = {}
    own = dict(ir.COMPUTE_OPS)
    for variant in a.functor.split(";"):
        ir.COMPUTE_OPS.update(own)
        for item in filter(None, variant.split(",")):
            op, _, functor = item.partition("=")
            ir.COMPUTE_OPS[op] = dataclasses.replace(own[op], functor=functor)
        # rendered now, so the variant's functors are in the source
        for name, regions in specs.items():
            for spec in regions:
                dims = problems.get((name, spec.name))
                step_k = next(iter(dims.values()))[2] if dims else None
                for cfg in configs:
                    cfg = as_built(spec, cfg, step_k) if step_k else cfg
                    if cfgs.fits(spec, cfg):
                        jobs[(name, spec.name, cfg, variant)] = (spec, build.prefetch(spec, cfg))
    ir.COMPUTE_OPS.update(own)
    print(f"{len(jobs)} kernels to build", flush=True)
    if a.build_only:
        failed = [k for k, (_, f) in jobs.items() if f.exception() is not None]
        for name, region, cfg, _ in failed:
            print(f"{name} {region} {cfg.label}: build failed", flush=True)
        print(f"built {len(jobs) - len(failed)} of {len(jobs)} in {time.time() - t0:.0f} s")
        return
    rows, profiled_mm = [], set()
    for (name, region, cfg, variant), (spec, fut) in jobs.items():
        try:
            kernel = launch.Kernel(spec, launch.load(fut.result()))
        except Exception as e:  # noqa: BLE001
            print(f"{name} {region} {cfg.label}: build failed: {str(e)[:300]}", flush=True)
            continue
        own = problems.get((name, region)) or ops.PATTERNS[name].shapes
        for shape, dims in (shapes or own).items():
            m, n, k, batch = problem(dims)
            if batch and (spec.gemm.nested or not spec.gemm.batched):
                print(f"{name} {region}: {shape} needs a flat batched spec", flush=True)
                continue
            # aux tensors TMA cannot read go in padded copies, made here once, as `dispatch.run`
            # makes them before each launch (ViT's 197 x 197 mask); the copy is not timed
            x = padded(spec, make_inputs(spec, m, n, k, seed=1, device="cuda", batch=batch))
            try:
                kernel(x)  # where the kernel's guards refuse the shape, this raises
                want = reference.run(spec, x)
            except Exception as e:  # noqa: BLE001 (a guard's refusal: this shape runs unfused)
                print(f"{name} {shape} {cfg.label}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            # timed on a layer's kind of operands, checked on exact ones (`make_inputs`)
            timed = padded(spec, make_inputs(spec, m, n, k, seed=1, device="cuda", batch=batch, normal=True))
            L = batch[0] if batch else 1
            # each order checked once, before it is profiled or timed (under every L2 window)
            checks = [(tile_order, *checked(kernel, tile_order, x, want)) for tile_order in orders]
            if a.ncu:
                if (m, n, k, L) not in profiled_mm:
                    profiled_mm.add((m, n, k, L))
                    profile_once(bare_mm(spec, timed))
                    print(f"{name:20} {region} ({shape}) cuBLAS {m}x{n}x{k}: profiled", flush=True)
                for tile_order, ordered, err in checks:
                    profile_once(lambda ordered=ordered, timed=timed: ordered(timed))
                    print(f"{name:20} {region} ({shape}) {cfg.label} {tile_order.label}: "
                          f"profiled  err {err:.1e}", flush=True)  # fmt: skip
                continue
            rank = [c.label for c in cfgs.heuristic(spec, m, n, k, L)]
            # per L2 window, cuBLAS's GEMM and each order timed in turn, `--rounds` times
            runs = {"mm": bare_mm(spec, timed)}
            runs.update({o.label: lambda ordered=ordered, timed=timed: ordered(timed) for o, ordered, _ in checks})
            medians = {}
            for window in a.l2_window:
                with l2_window(timed, spec, window):
                    times = in_turn(runs, a.rounds, "cuda")
                medians[window] = {label: statistics.median(t) for label, t in times.items()}
            for window, (tile_order, _, err) in itertools.product(a.l2_window, checks):
                mm = medians[window]["mm"]
                # the order as launched: evt's raster order and swizzle made explicit where its
                # launch plan picks them (`wave_traffic`); 0 left: CUTLASS's raster heuristic,
                # the kernel's compiled `auto_swizzle`
                launched = kernel.resolve(tile_order, kernel.guard(timed)).label
                ms = medians[window][tile_order.label]
                order = tile_order.label
                row = dict(pattern=name, region=region, shape=shape, m=m, n=n, k=k, l=L, config=cfg.label,
                           tile_order=order, launched=launched, functors=variant, ms=ms, mm_ms=mm,
                           l2_window=window,
                           epilogue="bare" if region in bares else "full",
                           tflops=2 * m * n * k * L / ms / 1e9, vs_mm=mm / ms, err=err,
                           heuristic_rank=rank.index(cfg.label) if cfg.label in rank else None)  # fmt: skip
                rows.append(row)
                # a step's regions share a pattern name and their shape is "step": name the region
                where = f"{region} ({shape})" if (name, region) in problems else shape
                print(f"{name:20} {where:9} {cfg.label:30} {order:4} {row['tflops']:6.1f} TFLOP/s "
                      f"{row['vs_mm']:.2f}x mm  err {err:.1e}  {variant}"
                      + (f"  L2 keeps {window.upper()}" if window != "-" else ""), flush=True)  # fmt: skip
    print(f"built and timed in {time.time() - t0:.0f} s")
    summarize(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


def l2_windows(text: str) -> list[str]:
    """`--l2-window`'s operands: 'a', 'b', and 'none' (also '-', how rows record it: `-,a,b`
    would read as an option, so the command line says none)."""
    windows = ["-" if w in ("none", "-") else w for w in text.split(",")]
    bad = [w for w in windows if w not in ("-", "a", "b")]
    if bad:
        raise argparse.ArgumentTypeError(f"{', '.join(bad)}: each window is a, b or none")
    return windows


@contextlib.contextmanager
def l2_window(x: list, spec: ir.KernelSpec, operand: str):
    """While inside: L2 keeps operand `operand` ('a' or 'b') of `spec` in `x` as persisting lines
    (an access-policy window on the current stream, hit ratio what the device's set-aside
    covers); '-': nothing. Afterwards the window closes and the persisting lines are released.
    The timer's L2 flush between calls does not evict persisting lines, so each call also finds
    the part of the operand the set-aside holds already in L2: compare a fused kernel with the
    bare GEMM and cuBLAS under the same window, not with its own time outside one."""
    if operand == "-":
        yield
        return
    from cuda.bindings import runtime as rt

    def check(result):
        err = result[0] if isinstance(result, tuple) else result
        if err != rt.cudaError_t.cudaSuccess:
            raise RuntimeError(f"--l2-window {operand}: {err}")
        return result

    t = x[{"a": spec.gemm.a, "b": spec.gemm.b}[operand].input]
    _, prop = check(rt.cudaGetDeviceProperties(t.device.index))
    size = min(t.numel() * t.element_size(), prop.accessPolicyMaxWindowSize)
    kept = min(size, prop.persistingL2CacheMaxSize)
    stream = torch.cuda.current_stream().cuda_stream
    ids = rt.cudaStreamAttrID  # the attribute's name in cuda-bindings 13, then in older ones
    attr = getattr(ids, "cudaLaunchAttributeAccessPolicyWindow", None)
    attr = attr if attr is not None else ids.cudaStreamAttributeAccessPolicyWindow
    value = rt.cudaStreamAttrValue()
    window = value.accessPolicyWindow
    window.base_ptr, window.num_bytes, window.hitRatio = t.data_ptr(), size, kept / size
    window.hitProp = rt.cudaAccessProperty.cudaAccessPropertyPersisting
    window.missProp = rt.cudaAccessProperty.cudaAccessPropertyStreaming
    check(rt.cudaDeviceSetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize, kept))
    check(rt.cudaStreamSetAttribute(stream, attr, value))
    try:
        yield
    finally:
        torch.cuda.synchronize()
        window.num_bytes = 0
        check(rt.cudaStreamSetAttribute(stream, attr, value))
        check(rt.cudaCtxResetPersistingL2Cache())
        check(rt.cudaDeviceSetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize, 0))


def summarize(rows: list[dict]) -> None:
    """Per (pattern, shape, functor variant): the winner, the heuristic's pick and where it ranks
    the winner."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        variant = r["functors"] + (f" L2 keeps {r['l2_window']}" if r.get("l2_window", "-") != "-" else "")
        groups.setdefault((r["pattern"], r["region"], r["shape"], variant), []).append(r)
    print("\npattern/shape               best config                    vs mm  heuristic pick"
          "                 vs mm  winner's rank")  # fmt: skip
    for (pattern, _, shape, variant), rs in groups.items():
        best = max(rs, key=lambda r: r["tflops"])
        pick = min((r for r in rs if r["heuristic_rank"] is not None
                    and r.get("tile_order", "0:0") == "0:0"),
                   key=lambda r: r["heuristic_rank"], default=None)  # fmt: skip
        label = best["config"] + ("" if best.get("tile_order", "0:0") == "0:0" else
                                  f" @{best['tile_order']}")  # fmt: skip
        print(f"{pattern + '/' + shape:27} {label:30} {best['vs_mm']:.2f}  "
              f"{pick['config'] if pick else '-':30} {pick['vs_mm'] if pick else 0:.2f}  "
              f"{best['heuristic_rank']}  {variant}")  # fmt: skip


if __name__ == "__main__":
    main()

"""Session 66 (CPU): for every bench case's and step's kernels at the GPU's sizes (meta capture,
the heuristic's pick, K > 1024), the other raster order's operand traffic, plain and at its best
swizzle, over what CUTLASS's order reads at evt's swizzle (`evt.codegen.wave_traffic`)."""

import warnings

import torch

import evt
from evt.bench import ops, steps
from evt.bench.plan import make_plan
from evt.codegen import config as cfgs
from evt.codegen import wave_traffic as wt
from evt.runtime import dispatch


def flips(cfg, M, N, K, L, size=2):
    if not wt._applies(cfg, M, N, K, L, cfgs.SM_COUNT):
        return None
    other = 1 if wt.cutlass_along_n(cfg, M, N) else 2
    cut = wt._launched_traffic(cfg, M, N, K, L, cfgs.SM_COUNT, 0, size)
    mine = wt.traffic(cfg, M, N, 1, cfgs.SM_COUNT, other, size)
    return other, mine / cut


seen = {}
for case in make_plan(only="*", baselines="evt", device="meta").cases:
    try:
        w = (ops if case.kind == "op" else steps).build(case, torch.bfloat16, "meta")
        dispatch.reset()
        with warnings.catch_warnings(), dispatch.reference_only():
            warnings.simplefilter("ignore")
            report = evt.explain(w.target, *w.make_inputs(0))
    except Exception as e:
        print(case.name, "ERR", e)
        continue
    for spec, p in report.kernels():
        if p is None or spec.gemm.nested:
            continue
        cfg = dispatch.config_for(spec, p)
        if cfg is None:
            continue
        f = flips(cfg, *p)
        if f is not None:
            other = f[0]
            cut = wt._launched_traffic(cfg, *p, cfgs.SM_COUNT, 0, 2)
            best = min(
                wt.traffic(cfg, p[0], p[1], s, cfgs.SM_COUNT, other, 2) for s in (1, 2, 4, 8)
            )
            f = (other, f[1], best / cut, cfg.schedule)
        key = (cfg.label, p)
        if key not in seen:
            seen[key] = (case.name, f)
for (label, p), (case, f) in sorted(seen.items(), key=lambda kv: (kv[1][1] or (0, 9))[1]):
    print(
        f"{case:28} {label:32} {'x'.join(map(str, p)):22} {'n/a (K <= 1024 or stream-K)' if f is None else f'{f[3]:11} other order {f[0]}: plain {f[1]:.3f}, best swizzle {f[2]:.3f} of CUTLASS traffic'}"
    )

"""Session 67 (CPU): for every bench case's and step's kernels at the GPU's sizes (meta capture,
the heuristic's pick, K > 1024), the swizzle evt launches and, for swizzles 1, 2, 4, 8 in the
same raster order, the waves' operand traffic (`evt.codegen.wave_traffic.traffic`) and the
grid's waves: where a larger swizzle than evt's reads less with no more waves."""

import warnings

import torch

import evt
from evt.bench import ops, steps
from evt.bench.plan import make_plan
from evt.codegen import config as cfgs
from evt.codegen import wave_traffic as wt
from evt.runtime import dispatch

SM = cfgs.SM_COUNT
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
        if cfg is None or not wt._applies(cfg, *p, SM):
            continue
        seen.setdefault((cfg.label, p), case.name)
for (label, p), case in sorted(seen.items(), key=lambda kv: kv[1]):
    cfg = cfgs.TileConfig.from_label(label)
    r, s, _ = wt.launch_order(cfg, *p, SM)
    M, N = p[0], p[1]
    row = []
    for z in (1, 2, 4, 8):
        row.append(f"s{z}: {wt.traffic(cfg, M, N, z, SM, r):.2e} {wt._swizzled_waves(cfg, M, N, z, SM):3d}w")
    print(f"{case:24} {label:32} {'x'.join(map(str, p)):20} launch {r}:{s or 1}  " + "  ".join(row))

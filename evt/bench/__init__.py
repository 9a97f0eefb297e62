"""evt's benchmark harness (`evt bench`, `benchmarks/run.py`; see `benchmarks/README.md`).

Pipeline of a run, one module each:
    ops, steps (+ patterns, models)   the workloads: GEMM+epilogue patterns, training steps
    baselines (+ inductor_cutlass)    what evt is compared with, grouped into stages
    plan                              (stage, case, baseline) items; quick subset; parts; resume
    runner (+ check, measure)         build, check against float64, then time; one stage
    isolate                           a stage in child processes under stage and item limits
    store, env, provenance            results.json, rewritten after every measurement; sessions
    report, markdown, charts          ratios and geomeans; report.md; PNG charts
    coverage                          what was measured, what not and why; stages; baselines
"""

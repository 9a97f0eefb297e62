"""evt's benchmark harness (`evt bench`, `benchmarks/run.py`; see `benchmarks/README.md`).

Pipeline of a run, one module each:
    ops, steps (+ patterns, models)   the workloads: GEMM+epilogue patterns, training steps
    baselines (+ inductor_cutlass)    what evt is compared with, grouped into stages
    plan                              (stage, case, baseline) items; quick subset; resume
    runner (+ check, measure)         build, check against float64, then time; one stage
    isolate                           a stage in a child process under a time limit
    store, env                        results.json, rewritten after every measurement
    report, markdown, charts          ratios and geomeans; report.md; PNG charts
"""

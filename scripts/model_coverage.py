"""How much of each model's training step evt fuses (CPU only: `evt.explain`, the reference path
runs the regions). Per model and side: GEMMs, how many anchor a kernel, how many ops those
kernels fuse; then every GEMM left unfused with the reason.

Models: the built-in examples (`evt.examples`: mlp, gpt2, bert, llama) at their CPU-test sizes and the
benchmark's training steps (`evt.bench.steps`) at their small sizes.

    python scripts/model_coverage.py [--dtype bf16|f16|f32] [--only GLOB[,GLOB...]]
"""

from __future__ import annotations

import argparse
import fnmatch
import warnings
from collections.abc import Callable

import torch

import evt
from evt import examples
from evt.bench import steps
from evt.report import SideCoverage, coverage

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def example_steps(dtype: torch.dtype) -> dict[str, Callable[[], tuple]]:
    """name -> () -> (training step, its args), built only when asked for."""
    small = examples.SMALL
    return {
        "examples/mlp": lambda: examples._mlp(dtype, "cpu", tokens=64, dim=32, hidden=64),
        "examples/gpt2": lambda: examples._gpt2(dtype, "cpu", small, tied=True),
        "examples/gpt2-untied": lambda: examples._gpt2(dtype, "cpu", small, tied=False),
        "examples/bert": lambda: examples._bert(dtype, "cpu", small, head="mlm"),
        "examples/bert-cls": lambda: examples._bert(dtype, "cpu", small, head="cls"),
        "examples/llama": lambda: examples._llama(dtype, "cpu", small),
    }


def bench_steps(dtype: torch.dtype) -> dict[str, Callable[[], tuple]]:
    def build(case):
        w = steps.build(case, dtype, "cpu")
        return lambda x, target: w.target(x, target).backward(), w.make_inputs(0)

    return {f"bench/{c.group}": (lambda c=c: build(c)) for c in steps.cases(small=True)}


def measure(make: Callable[[], tuple]) -> list[SideCoverage]:
    step, args = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = evt.explain(step, *args)
    return coverage(report.regions, report.unfused)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--only", default="*",
                   help="models to run: comma-separated globs (e.g. 'examples/*,bench/mlp')")  # fmt: skip
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    models = {**example_steps(dtype), **bench_steps(dtype)}
    globs = args.only.split(",")
    results = {n: measure(m) for n, m in models.items() if any(fnmatch.fnmatch(n, g) for g in globs)}

    head = ("model", "side", "GEMMs", "fused", "unfused", "ops fused")
    rows = [head] + [
        (name, c.side, str(c.gemms), str(len(c.fused)), str(len(c.unfused)), str(c.fused_ops))
        for name, sides in results.items() for c in sides
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    print(f"evt coverage, {args.dtype} training steps (forward + loss + backward)\n")
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("\nGEMMs left unfused, by reason:")
    for name, sides in results.items():
        for c in sides:
            reasons: dict[str, list[str]] = {}
            for gemm, why in c.unfused:
                reasons.setdefault(why, []).append(gemm)
            for why, gemms in reasons.items():
                print(f"  {name} {c.side}: {', '.join(gemms)}: {why}")


if __name__ == "__main__":
    main()

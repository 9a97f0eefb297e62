"""The `evt` command line.

    evt dump --example mlp|gpt2|bert --out DIR [--draw]
                                                capture a training step, fuse, write each
                                                kernel's C++ (and a picture of the partition) and
                                                a summary: per GEMM, what it fuses or why not
    evt bench [--quick] [--out DIR]             GEMM+epilogue suite and training steps against
                                                every peer (see benchmarks/README.md)
    evt cache [info [--verbose] | clear]        show the kernel cache or empty it
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import torch

from evt import ir

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def _dump(args: argparse.Namespace) -> int:
    from evt.codegen.config import default_config
    from evt.codegen.emit import render
    from evt.codegen.nvcc import nvcc_command
    from evt.errors import EvtError
    from evt.examples import EXAMPLES
    from evt.explain import explain
    from evt.runtime import dispatch

    step, inputs = EXAMPLES[args.example].build(DTYPES[args.dtype], args.device)
    dispatch.reset()  # each kernel's config chosen as in a fresh process (`dispatch.config_for`)
    report = explain(step, *inputs, draw=args.draw)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.draw:
        _draw(report, out)
    unrendered = []  # e.g. fp32 epilogues whose shared memory leaves no tile two stages
    launches = []
    for r, (spec, problem) in zip(report.regions, report.kernels(), strict=True):
        # the kernel the run launches: the region's, or its form less the stores the
        # forward/backward split left unread (`prune_unused_outputs`)
        (out / f"{r.name}.tree.txt").write_text(ir.format_tree(spec))
        try:
            # the config the backend builds at the example's shapes: the heuristic's first at
            # the problem of the first region sharing the kernel (one binary per signature)
            config = dispatch.config_for(spec, problem) or default_config(spec)
            source = render(spec, config)
        except EvtError as e:
            unrendered.append(f"no kernel source: {e}")
            continue
        launches.append(_launch_line(r, config))
        cu = out / f"{r.name}.cu"
        cu.write_text(source)
        cmd = shlex.join(nvcc_command(cu.name, f"{r.name}.so"))
        (out / f"{r.name}.nvcc.sh").write_text(f"#!/bin/sh\n# run in {out}\n{cmd}\n")
    header = "kernels at the example's shapes: tile config, and the tile order on an H100/H200's 132 SMs"
    table = "\n".join([str(report), *unrendered, *([header, *launches] if launches else [])])
    (out / "summary.txt").write_text(table + "\n")
    print(table)
    written = len(report.regions) - len(unrendered)
    print(f"wrote {written} kernels (.cu, .tree.txt, .nvcc.sh) to {out}")
    return 0


def _launch_line(region, config) -> str:
    """`region`'s kernel: its tile config and, where the example's shapes give its problem, the
    problem and the order evt launches it in there (`evt.codegen.wave_traffic`)."""
    from evt.codegen import config as cfgs
    from evt.codegen import wave_traffic

    if region.problem is None:
        return f"  {region.name:14} {config.label:34} (no static shape: chosen at its first call)"
    m, n, k, batch = region.problem
    size = ir.torch_dtype(region.spec.gemm.dtype).itemsize
    _, _, why = wave_traffic.launch_order(config, m, n, k, batch, cfgs.SM_COUNT, 0, size)
    order = why or "CUTLASS's raster, the kernel's own swizzle"
    return f"  {region.name:14} {config.label:34} {'x'.join(map(str, region.problem)):22} {order}"


def _draw(report, out: Path) -> None:
    from evt.partition.draw import write

    for i, g in enumerate(report.graphs):
        try:
            files = write(g.drawing, out / f"partition_{i}")
            print("drew " + ", ".join(str(f) for f in files))
        except FileNotFoundError as e:
            print(f"evt dump --draw: {e}", file=sys.stderr)


def parser() -> argparse.ArgumentParser:
    from evt.examples import EXAMPLES

    p = argparse.ArgumentParser(prog="evt", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="capture an example, fuse it, write the generated kernels")
    d.add_argument("--example", choices=sorted(EXAMPLES), default="mlp",
                   help="; ".join(f"{k}: {e.description}" for k, e in EXAMPLES.items()))
    d.add_argument("--out", default="evt-dump", help="output folder (default: evt-dump)")
    d.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    d.add_argument("--device", default="cpu", help="where to trace the example (default: cpu)")
    d.add_argument("--draw", action="store_true",
                   help="also draw each partition (.dot, and .svg/.png with Graphviz's dot)")
    d.set_defaults(fn=_dump)
    from evt.bench.cli import add_parser
    from evt.runtime import cache_cli

    add_parser(sub)
    cache_cli.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())

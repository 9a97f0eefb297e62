"""How long nvcc takes to build one generated kernel, per variant of the command line: wall time,
CPU time (user + system: steadier than wall time on a shared machine), peak RSS (`/usr/bin/time -v`), nvcc's own phase times (`--time`), ptxas C7510, and whether the
SASS is identical to the first variant's (a host-only change must not touch the device code).

    python -m benchmarks.compile_time [--spec mlp_fc1_forward] [--variants base,host_O1]
                                      [--repeat 1] [--out DIR] [--json out.json]

Builds run one at a time (a CUTLASS kernel takes about 3.5 GB and a core for a minute).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import time
from pathlib import Path

from evt.codegen import nvcc
from evt.codegen.emit import render
from tests import specs


def _host_opt(level: str):
    # nvcc's -O is the host compiler's level only: cicc and ptxas lines are the same without it
    return lambda flags: [f"-O{level}" if f == "-O3" else f for f in flags]


VARIANTS = {
    "base": lambda flags: flags,
    "host_O0": _host_opt("0"),
    "host_O1": _host_opt("1"),
    "host_O2": _host_opt("2"),
    "cxx20": lambda flags: ["-std=c++20" if f == "-std=c++17" else f for f in flags],
    "split2": lambda flags: [*flags, "--split-compile=2"],
    "extra_vec": lambda flags: [*flags, "--extra-device-vectorization"],
}


def build(cu: Path, out: Path, name: str, flags: list[str]) -> dict:
    so, phases = out / f"{name}.so", out / f"{name}.time.csv"
    cmd = ["/usr/bin/time", "-v", nvcc.nvcc_path(), *flags, "--time", str(phases), "-o", str(so),
           str(cu)]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    cpu = sum(
        float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", proc.stderr)
    )
    return {"variant": name, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "peak_rss_gb": round(int(rss[1]) / 2**20, 2) if rss else None,
            "load": round(os.getloadavg()[0], 1), "c7510": "C7510" in proc.stderr,
            "phases": _phases(phases), "sass": sass(so)}  # fmt: skip


def _phases(path: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    with open(path) as f:
        for row in csv.DictReader(f, skipinitialspace=True):
            row = {k.strip(): (v or "").strip() for k, v in row.items() if k}
            phase = row.get("phase name", "")
            out[phase] = out.get(phase, 0.0) + float(row.get("metric") or 0) / 1000
    return {k: round(v, 1) for k, v in out.items()}


def sass(binary: Path) -> list[str] | None:
    """The SASS instructions in `binary` (addresses, encodings and names dropped); None without
    cuobjdump and nvdisasm (the nvidia-cuda-cuobjdump and -nvdisasm wheels have them)."""
    functions = sass_functions(binary)
    return None if functions is None else [i for code in functions.values() for i in code]


def sass_functions(binary: Path) -> dict[str, list[str]] | None:
    """`sass(binary)` by kernel function (its mangled name, as cuobjdump prints it)."""
    from evt.codegen.op_costs import cuobjdump

    tool = cuobjdump()
    if tool is None:
        return None
    env = {**os.environ, "PATH": f"{os.environ.get('PATH', '')}:{Path(tool).parent}"}  # nvdisasm
    text = subprocess.run([tool, "-sass", str(binary)], capture_output=True, text=True, env=env)
    return parse_sass(text.stdout)


def parse_sass(text: str) -> dict[str, list[str]] | None:
    """cuobjdump -sass's listing by function: each instruction without address or encoding."""
    functions: dict[str, list[str]] = {}
    code: list[str] = []
    for ln in text.splitlines():
        if m := re.match(r"\s+Function : (\S+)", ln):
            code = functions.setdefault(m[1], [])
        elif re.match(r"\s+/\*[0-9a-f]{4,}\*/", ln):
            code.append(ln.split(";")[0].split("*/", 1)[-1].strip())
    return {name: c for name, c in functions.items() if c} or None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--spec", default="mlp_fc1_forward", choices=sorted(specs.ALL))
    p.add_argument("--variants", default="base,host_O1")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out", default="compile-time")
    p.add_argument("--json")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cu = out / f"{args.spec}.cu"
    cu.write_text(render(specs.ALL[args.spec]()))
    rows = []
    for _ in range(args.repeat):
        for name in args.variants.split(","):
            rows.append(build(cu, out, name, VARIANTS[name](nvcc.nvcc_flags())))
            r = rows[-1]
            same = "unknown" if r["sass"] is None else r["sass"] == rows[0]["sass"]
            print(f"{name:10s} wall {r['wall_s']:6.1f} s  cpu {r['cpu_s']:6.1f} s  "
                  f"{r['peak_rss_gb']:.2f} GB  load {r['load']}  C7510={r['c7510']}  "
                  f"same SASS as {rows[0]['variant']}: {same}  {r['phases']}", flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps([{**r, "sass": None} for r in rows], indent=1))


if __name__ == "__main__":
    main()

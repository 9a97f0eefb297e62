"""Count the SASS instructions of a suite pattern's kernel, by opcode, without a GPU: the region
is captured on the CPU, rendered at one tile config, compiled to a cubin with evt's flags and
disassembled. A CUTLASS epilogue is unrolled over the tile, so these static counts are what each
thread runs per output tile: where an epilogue does not hide behind the main loop (K <= 1024),
fewer instructions there is a faster kernel (session 13: benchmarks/results/
2026-11-23-H100-session13/README.md). A region with a deferred reduction (a bias gradient, the
row statistics) has a second kernel in its library, the finishing job run once after the GEMM:
its instructions are listed apart (until session 38 they were counted with the GEMM's).

    python scripts/sass_count.py bias_gelu dgrad_gelu [--config 128x256x64_c1x1_cooperative]
        [--headers DIR]   (evt's own headers from DIR instead: before/after a functor change)

Needs nvcc, and cuobjdump with nvdisasm beside it (`benchmarks/compile_time.py: sass` finds them:
on PATH or from the nvidia-cuda-cuobjdump and -nvdisasm wheels). About a minute per kernel.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from compile_time import sass_functions  # noqa: E402
from config_sweep import capture  # noqa: E402

from evt.codegen import config as cfgs  # noqa: E402
from evt.codegen import nvcc  # noqa: E402
from evt.errors import CodegenError  # noqa: E402
from evt.runtime import build  # noqa: E402

OPCODE = re.compile(r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]*)?")  # after the predicate


def count(pattern: str, label: str, headers: str | None, work: Path,
          defines: tuple[str, ...] = ()) -> dict[str, collections.Counter]:
    """Opcode counts by kernel function (`short_name`), the GEMM's first."""
    spec = capture(pattern)[0]
    try:
        config = cfgs.TileConfig.from_label(label)  # any config, aux-load stages (_scN) included
    except CodegenError as e:
        sys.exit(str(e))
    cu, cubin = work / f"{pattern}.cu", work / f"{pattern}.cubin"
    cu.write_text(build.plan(spec, config).source)
    flags = [f for f in nvcc.nvcc_flags() if f not in nvcc.SO_FLAGS]
    if headers:
        flags.insert(0, f"-I{headers}")
    flags += [f"-D{d}" for d in defines]
    subprocess.run([nvcc.nvcc_path(), *flags, "-cubin", "-o", str(cubin), str(cu)], check=True)
    functions = sass_functions(cubin)
    if functions is None:
        sys.exit("cuobjdump or nvdisasm not found: put them on PATH or "
                 "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")  # fmt: skip
    counts = {}
    for name, code in sorted(functions.items(), key=lambda f: -len(f[1])):  # the GEMM: the longest
        ops = counts.setdefault(short_name(name), collections.Counter())
        for instruction in code:
            m = OPCODE.match(instruction)
            if m:  # the SFU's functions apart: MUFU.EX2, MUFU.RCP, MUFU.TANH
                ops[m.group(1) + ((m.group(2) or "") if m.group(1) == "MUFU" else "")] += 1
    return counts


def short_name(mangled: str) -> str:
    """A kernel function's qualified name without its template arguments (c++filt's, when there
    is one), e.g. cutlass::device_kernel or evt::detail::finish_all_kernel."""
    if shutil.which("c++filt") is None:
        return mangled
    plain = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
    return (plain or mangled).split("<")[0].split()[-1]  # ("void " before a function template's)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("patterns", nargs="+", help="suite patterns (evt.bench.ops.PATTERNS)")
    p.add_argument("--config", default="128x256x64_c1x1_cooperative")
    p.add_argument("--headers", help="a folder with evt_functors.h etc. to compile against")
    p.add_argument("--fast-path", action="store_true",
                   help="statistics: count only what an interior tile of finite values runs")
    p.add_argument("--top", type=int, default=14, help="opcodes listed")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for pattern in a.patterns:
            defines = ("EVT_STATISTICS_CHECKED_PATHS=0",) if a.fast_path else ()
            counts = count(pattern, a.config, a.headers, Path(tmp), defines)
            for i, (name, ops) in enumerate(counts.items()):
                top = " ".join(f"{k}:{v}" for k, v in ops.most_common(a.top))
                head = f"{pattern} ({a.config})" if i == 0 else f"  and {name}"
                print(f"{head}: {sum(ops.values())} instructions; {top}", flush=True)


if __name__ == "__main__":
    main()

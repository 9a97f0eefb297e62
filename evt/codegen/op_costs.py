"""What each compute op costs an epilogue: SASS instructions an element, measured.

`INSTRUCTIONS[op]` is (ALU instructions, SFU instructions) one element of `op` takes in evt's
kernels: each functor of `evt.ir.COMPUTE_OPS` compiled alone, in float, with the kernels' nvcc
flags, its instructions counted from the cubin's SASS less those of the identity's (the loads, the
store, the index). MUFU.* (EX2, RCP, RSQ, TANH) are the SFU's, everything else the ALU's. The
counts are what an epilogue's arithmetic is weighed by, so that a function written out in ops
(the tanh GELU as 25 nodes, with libm's tanhf) costs what its nodes cost, not one "special
function" whatever its length: the default mode's profitability check
(`evt.codegen.profit`, through `config.estimate`'s `per_instruction`) and, for the ops that
are not special functions, the tile-config ranking (`config._COST["instruction"]`).

`measure()` recomputes the table (`python -m evt.codegen.op_costs` prints it;
tests/test_op_costs.py checks it against the committed one where nvcc and cuobjdump are here).
A functor's count moves only when evt_functors.h or CUTLASS changes, so the table is committed
rather than measured at run time: a kernel build must not wait on a second compile.
"""

from __future__ import annotations

import collections
import contextlib
import re
import subprocess
import tempfile
from pathlib import Path

from evt.ir import COMPUTE_OPS, Compute, KernelSpec

# (ALU, SFU) instructions an element, from `measure()` (nvcc 13.0, CUTLASS 4.2, sm_90a, -O3)
INSTRUCTIONS: dict[str, tuple[int, int]] = {
    "identity": (0, 0), "add": (1, 0), "sub": (1, 0), "mul": (1, 0), "div": (11, 1),
    "neg": (1, 0), "cube": (2, 0), "relu": (1, 0), "gelu": (15, 2), "gelu_for_bf16": (12, 1),
    "gelu_for_f16": (14, 1), "gelu_tanh": (5, 1), "gelu_backward": (17, 2),
    "gelu_tanh_backward": (12, 1), "silu": (3, 2), "silu_backward": (6, 2),
    "silu_backward_sigmoid": (4, 0), "sigmoid": (2, 2), "sigmoid_backward": (3, 0),
    "tanh": (15, 2), "tanh_backward": (2, 0), "threshold_backward": (2, 0), "maximum": (1, 0),
    "minimum": (1, 0), "exp": (1, 1), "log": (28, 0), "rsqrt": (3, 1), "gt": (1, 0),
    "ge": (1, 0), "lt": (1, 0), "le": (1, 0), "eq": (1, 0), "ne": (1, 0), "where": (1, 0),
}  # fmt: skip

# One SFU instruction in ALU instructions' time. The SFU takes a warp's instruction in 8 cycles
# (16 lanes an SM) where the FP32 pipes take 1 (128 lanes), but it runs beside them: fitted on
# `benchmarks/epilogue_arithmetic.py`'s timings (with `evt.codegen.profit`'s constants), 2.
SFU_WEIGHT = 2


def weighted(op: str) -> int:
    """`op`'s instructions an element in ALU instructions' time (an op this table lacks: 0,
    checked by tests/test_op_costs.py)."""
    alu, sfu = INSTRUCTIONS.get(op, (0, 0))
    return alu + SFU_WEIGHT * sfu


def epilogue_instructions(spec: KernelSpec) -> int:
    """The instructions an element `spec`'s compute nodes take, in ALU instructions' time: each
    op's (`weighted`), one more for a result rounded to 16 bits (F2F) and back."""
    return sum(weighted(n.op) + (n.dtype in ("bf16", "f16")) for n in spec.nodes if isinstance(n, Compute))


_OPCODE = re.compile(r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")  # after the predicate


def source() -> str:
    """One kernel per op: out[i] = op(a[i], b[i], c[i]) in float."""
    kernels = {name: f"{op.functor}<float>{{}}({', '.join(f'{x}[i]' for x in 'abc'[: op.arity])})"
               for name, op in COMPUTE_OPS.items()}  # fmt: skip
    kernels |= {"_sum2": "a[i] + b[i]", "_sum3": "a[i] + b[i] + c[i]"}  # the loads of 2 and 3 operands
    lines = ['#include "evt_functors.h"', (Path(__file__).parents[1] / "templates" / "evt_cube.inc").read_text()]
    lines += [f'extern "C" __global__ void op_{name}(float* out, const float* a, const float* b, const float* c) '
              f"{{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  out[i] = {expr};\n}}"
              for name, expr in kernels.items()]  # fmt: skip
    return "\n".join(lines) + "\n"


def measure() -> dict[str, tuple[int, int]]:
    """(ALU, SFU) instructions an element of every compute op, from SASS (needs nvcc and
    cuobjdump, `cuobjdump()`)."""
    from evt.codegen import nvcc

    tool = cuobjdump()
    if tool is None:
        raise FileNotFoundError("cuobjdump not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp) / "ops.cu", Path(tmp) / "ops.cubin"
        cu.write_text(source())
        flags = [f for f in nvcc.nvcc_flags() if f not in nvcc.SO_FLAGS]
        subprocess.run([nvcc.nvcc_path(), *flags, "-cubin", "-o", str(cubin), str(cu)],
                       check=True, capture_output=True, text=True)  # fmt: skip
        env_path = f"{Path(tool).parent}"  # nvdisasm beside cuobjdump
        listing = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True,
                                 env={"PATH": env_path}).stdout  # fmt: skip
    counts: dict[str, collections.Counter] = {}
    current = None
    for ln in listing.splitlines():
        if m := re.match(r"\s+Function : op_(\w+)", ln):
            current = counts.setdefault(m[1], collections.Counter())
        elif current is not None and re.match(r"\s+/\*[0-9a-f]{4,}\*/", ln):
            text = ln.split(";")[0].split("*/", 1)[-1].strip()
            m = _OPCODE.match(text)
            if m and m[1] == "EXIT" and not text.startswith("@"):
                current = None  # the rest: paths the fast one branches to (IEEE division's slow path)
            elif m and m[1] not in ("NOP", "BRA"):
                current["sfu" if m[1] == "MUFU" else "alu"] += 1
    # the loads of one, two and three operands: the identity's count, and the sums' less their FADDs
    base = {1: counts["identity"], 2: counts["_sum2"] - collections.Counter(alu=1),
            3: counts["_sum3"] - collections.Counter(alu=2)}  # fmt: skip
    return {name: (counts[name]["alu"] - base[op.arity]["alu"], counts[name]["sfu"] - base[op.arity]["sfu"])
            for name, op in COMPUTE_OPS.items()}  # fmt: skip


def cuobjdump() -> str | None:
    """cuobjdump's path (nvdisasm beside it): from the nvidia-cuda-cuobjdump wheel, else PATH."""
    import shutil

    with contextlib.suppress(ImportError):
        import cuda.pathfinder

        if found := cuda.pathfinder.find_nvidia_binary_utility("cuobjdump"):
            return found
    return shutil.which("cuobjdump")


if __name__ == "__main__":
    for op, (alu, sfu) in measure().items():
        print(f"{op:24s} alu {alu:3d}  sfu {sfu}")

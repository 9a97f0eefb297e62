"""Testing tools that ship with evt: the differential fuzzer of the EVT codegen.

- `evt.testing.facts`: what each epilogue value can hold (an interval) and whether the kernel and
  the reference compute it bit for bit alike; the rules that keep generated specs domain-safe.
- `evt.testing.fuzz`: seed -> a valid random `KernelSpec` (`fuzz.NESTED` of the seeds with a nested
  batch L = L1 x L2), and `check(spec)`, the spec verifier.
- `evt.testing.inputs`: seeded inputs laid out as a spec says, with an exact GEMM (a nested
  batch's operands as strided [L1, L2, rows, cols] views of larger tensors, as attention's heads).
- `evt.testing.minimize`: shrink a failing spec while a predicate still fails.

`scripts/fuzz_gpu.py` runs the fuzzer on an SM90 GPU against the reference path.
"""

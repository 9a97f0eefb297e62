"""Does an evt setting pay on a whole training step? evt built under several settings (EVT_*
variables) in one process, each checked against the float64 reference, then all timed in turn
with `torch.compile` as the reference: round after round, each variant as run, its host time and
its CUDA graphs' replay (`evt.bench.in_turn.alternate`, as the bench's in-turn stage times evt
against torch.compile).

The settings steer the passes at each compile (the backend's pass uuid hashes them, so no cache
replays a graph rewritten under another), so each variant is compiled under its own environment,
which is restored afterwards. Per step it prints the regions each variant formed, the medians
over the rounds, and each variant against the first: the ratio of medians and in how many rounds
it was faster, with a two-sided sign test's p-value. Why: a region that beats the unfused path
on its own (max-autotune's per-region timing) can still lose on the step, where Inductor fuses
the same ops into the kernels around it (session 42: LLaMA's step at parity with torch.compile
although each of its six regions beat the unfused path by 10-20%).

    python scripts/step_variants.py --steps step/llama,step/bert \\
        --variant "default:" --variant "nostats: EVT_STATISTICS=0" [--rounds 11] [--no-compile]
    CPU smoke run:  ... --device cpu --small --rounds 1

`--steps` takes any of the bench's cases, GEMM+epilogue ones too (`--steps attention_scores/vit
--variant "default:" --variant "staged: EVT_STAGED_STORES=1"`: ViT's scores stored into padded
rows and copied, against staged stores into dense rows).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evt.bench import check, in_turn, measure, observe  # noqa: E402
from evt.bench.baselines import BASELINES  # noqa: E402
from evt.bench.plan import make_plan  # noqa: E402
from evt.bench.runner import CaseState  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
MAX_VARIANTS = 6  # with torch.compile, within Dynamo's 8 compiled entries per code object


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """"label: VAR=value VAR=value" -> (label, {VAR: value}); "label:" is the environment as is."""
    label, sep, rest = text.partition(":")
    if not sep or not label.strip():
        raise SystemExit(f"step_variants: --variant {text!r}: expected 'label: VAR=value ...'")
    env = {}
    for word in rest.split():
        name, eq, value = word.partition("=")
        if not eq or not name.startswith("EVT_"):
            raise SystemExit(f"step_variants: --variant {text!r}: {word!r} is not EVT_NAME=value")
        env[name] = value
    return label.strip(), env


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """`env` set for the block, each variable put back as it was after it."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def build_variant(s: CaseState, env: dict[str, str], device: str):
    """evt compiled under `env` and checked on the first input set: (call, notes, error)."""
    from evt.runtime import dispatch

    notes: dict = {}
    with environment(env):
        dispatch.reset()
        built = BASELINES["evt"].build(s.workload, device)  # a compile of its own each time
        impl = measure.rotating(built, s.input_sets)
        with observe.evt_regions(notes):
            verdict = check.compare(impl(), *s.expected(BASELINES["evt"]))
    return built, impl, notes, None if verdict.ok else verdict.why


def sign_test(a: list[float], b: list[float]) -> tuple[int, int, float] | None:
    """(rounds where a < b, rounds compared, two-sided p): `in_turn.rounds_faster`'s test."""
    return in_turn.rounds_faster({"in_turn": {"a": {"f": a}, "b": {"f": b}}}, "f")


def run_step(name: str, variants: list[tuple[str, dict]], args) -> str:
    # Dynamo keeps at most 8 compiled entries per code object and the steps share theirs (the
    # models' forward): without a reset, the ninth compile on (the third step's torch.compile)
    # ran eager with no error
    torch._dynamo.reset()
    case = make_plan(only=name, baselines="evt", device=args.device, small=args.small).cases[0]
    s = CaseState.build(case, DTYPES[args.dtype], args.device)
    impls, built, regions, lines = {}, {}, {}, [f"## {name} ({case.shape})", ""]
    for label, env in variants:
        fn, impl, notes, wrong = build_variant(s, env, args.device)
        if wrong:
            lines.append(f"- {label}: wrong result, not timed: {wrong}")
            continue
        impls[label], built[label] = impl, fn
        regions[label] = notes.get("regions", [])
    if args.compile:
        fn = BASELINES["compile"].build(s.workload, args.device)
        impl = measure.rotating(fn, s.input_sets)
        verdict = check.compare(impl(), *s.expected(BASELINES["compile"]))
        if verdict.ok:
            impls["compile"], built["compile"] = impl, fn
        else:
            lines.append(f"- compile: wrong result, not timed: {verdict.why}")
    if not impls:
        return "\n".join(lines)
    replays = {}
    if args.device.startswith("cuda"):
        try:
            replays = {n: measure.graph_replay(built[n], s.input_sets) for n in impls}
        except Exception as e:  # noqa: BLE001 - the as-run rounds stand
            lines.append(f"- no CUDA graphs: {type(e).__name__}: {str(e)[:200]}")
    times = in_turn.alternate(impls, args.device, args.rounds, replays=replays)
    first = next(iter(impls))
    fields = [f for f in in_turn.FIELDS if f in times[first]]
    head = ["variant", "regions"] + [f"{f} (median)" for f in fields]
    head += [f"{f} ÷ {first} (rounds faster, p)" for f in fields]
    lines += ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for label in impls:
        med = {f: statistics.median(times[label][f]) for f in fields}
        cells = [label, str(len(regions[label])) if label in regions else "—"]
        cells += [f"{med[f]:.4f}" for f in fields]
        for f in fields:
            if label == first:
                cells.append("—")
                continue
            won = sign_test(times[label][f], times[first][f])
            rounds = f" ({won[0]} of {won[1]}, p {won[2]:.2g})" if won else ""
            cells.append(f"{med[f] / statistics.median(times[first][f]):.3f}{rounds}")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for label, rs in regions.items():
        lines.append(f"- {label}: " + ("; ".join(rs) if rs else "no region"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", default="step/llama")
    p.add_argument("--variant", action="append", default=[],
                   help="'label: EVT_X=v ...' (repeat; the first is what the others are compared "
                        "with; default: 'default:' and 'nostats: EVT_STATISTICS=0')")  # fmt: skip
    p.add_argument("--rounds", type=int, default=in_turn.ROUNDS)
    p.add_argument("--no-compile", dest="compile", action="store_false",
                   help="leave torch.compile out of the rounds")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--small", action="store_true", help="the bench's tiny shapes (CPU smoke runs)")
    args = p.parse_args(argv)
    variants = [parse_variant(v) for v in args.variant or ["default:", "nostats: EVT_STATISTICS=0"]]
    if len({label for label, _ in variants}) != len(variants) or "compile" in dict(variants):
        raise SystemExit("step_variants: variant labels must differ and not be 'compile'")
    if len(variants) > MAX_VARIANTS:  # each is one more compile of the step's code for Dynamo
        raise SystemExit(f"step_variants: at most {MAX_VARIANTS} variants (Dynamo's cache limit)")
    for name in args.steps.split(","):  # a recompile-limit hit raises (`baselines._compile`)
        print(run_step(name, variants, args), flush=True)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

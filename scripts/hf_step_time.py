"""Hugging Face models' training steps (`tests/hf_catalog.py`, two layers) under evt and under
torch.compile, timed in turn in one process on the GPU, bf16.

Each model is built once per compiler from the same seed; both compiles are checked against
eager first (the loss within 2% of eager's bf16 loss), then timed for `--rounds` rounds (evt,
compile, evt, ...; `evt.bench.in_turn.alternate`): as run, the host's time per step and the step
replayed from CUDA graphs. Prints per model the medians, the ratios evt / compile and in how
many rounds evt was faster, and with `--json` writes every round.

    python scripts/hf_step_time.py --models llama,gpt2 --dim 2048 --heads 16 --seq 1024 --batch 4
    python scripts/hf_step_time.py --models gpt2 --dynamic ...   # both compiled with dynamic=True
    python scripts/hf_step_time.py --models gpt2 --mode reduce-overhead ...   # both on CUDA graph trees
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evt.bench import in_turn, measure  # noqa: E402
from tests.hf_catalog import CASES, Sizes  # noqa: E402


def step_fn(model, fn, inputs, graphs_trees: bool = False, backward_with=None):
    """One training step (forward, loss, backward into fresh gradients, as the bench's steps) as
    a call of no arguments: accumulating into the last step's gradients fails a CUDA graph's
    capture (AccumulateGrad on another stream than the one captured). `graphs_trees`: `fn` was
    compiled with mode="reduce-overhead", each call begins a step of its CUDA graph trees.
    `backward_with`: a compiler the backward runs under, in compiled autograd (what DDP's
    `optimize_ddp="python_reducer"` needs, `ddp_step_time.py`)."""
    params = list(model.parameters())

    def call():
        if graphs_trees:
            torch.compiler.cudagraph_mark_step_begin()
        for p in params:
            p.grad = None
        loss = fn(*inputs)
        compiled = backward_with is not None
        with torch._dynamo.compiled_autograd._enable(backward_with) if compiled else nullcontext():
            loss.backward()
        return loss

    return call


def bf16_case(case, sizes: Sizes, device, input_seed: int | None = None):
    """The case's model (seed 0) in bf16 on `device`, train mode, its inputs (drawn after
    seeding `input_seed`, where given) and eager's loss on them."""
    torch.manual_seed(0)
    model = case.build(sizes).train().to(device, torch.bfloat16)
    if input_seed is not None:
        torch.manual_seed(input_seed)
    inputs = [t.to(device) for t in case.inputs(sizes)]
    inputs = [t.bfloat16() if t.is_floating_point() else t for t in inputs]
    return model, inputs, model(*inputs).float().item()


def check_loss(what: str, loss: torch.Tensor, want: float) -> None:
    """Stop unless a compiled step's first loss is within 2% of eager's."""
    got = loss.float().item()
    if abs(got - want) > 0.02 * abs(want):
        raise SystemExit(f"{what}: loss {got} against eager's {want}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="llama")
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=in_turn.ROUNDS)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test (no CUDA graphs)")
    ap.add_argument("--no-graphs", action="store_true",
                    help="time as run only: torch.compile's LLaMA and GPT-2 steps failed their "
                         "CUDA graph capture (AccumulateGrad on another stream), which left the "
                         "process out of memory (session 57)")  # fmt: skip
    ap.add_argument("--dynamic", action="store_true",
                    help="compile both with dynamic=True (sizes as symbols; Dynamo passes some "
                         "Python floats as 0-d CPU tensors)")  # fmt: skip
    ap.add_argument("--mode", default=None,
                    help="torch.compile's mode for both, e.g. reduce-overhead: Inductor's CUDA "
                         "graph trees replay each compiled graph, so the as-run time is theirs "
                         "(the whole step is not captured then)")  # fmt: skip
    args = ap.parse_args()
    trees = args.mode is not None and args.mode.startswith("reduce-overhead")
    sizes = Sizes(dim=args.dim, heads=args.heads, vocab=args.vocab, batch=args.batch, seq=args.seq)
    records = {}
    for name in args.models.split(","):
        case = CASES[name]
        model, inputs, want = bf16_case(case, sizes, args.device)
        calls, compile_s = {}, {}
        torch._dynamo.reset()  # once per model: a reset between the two would recompile the first
        for b in ("evt", "compile"):
            twin = copy.deepcopy(model)
            dynamic = True if args.dynamic else None
            fn = torch.compile(twin, backend="evt" if b == "evt" else "inductor", dynamic=dynamic,
                               mode=args.mode)  # fmt: skip
            call = step_fn(twin, fn, inputs, trees)
            t = time.perf_counter()
            loss = call()
            measure.sync(args.device)
            compile_s[b] = time.perf_counter() - t
            check_loss(f"{name} {b}", loss, want)
            calls[b] = call
            for _ in range(3):
                calls[b]()
        replays = {}
        for b, call in calls.items() if args.device == "cuda" and not (args.no_graphs or trees) else ():
            try:
                replays[b] = measure.graph_replay(lambda call=call: call(), [()])
            except Exception as e:  # noqa: BLE001 - then as run only
                print(f"{name} {b}: CUDA graph capture failed: {type(e).__name__}: {e}")
        rec = {"in_turn": in_turn.alternate(calls, args.device, args.rounds, replays=replays),
               "compile_s": compile_s}  # fmt: skip
        records[name] = rec
        stats = in_turn.summarize(rec)
        mode = (" dynamic=True" if args.dynamic else "") + (f" mode={args.mode}" if args.mode else "")
        print(f"\n== {name}{mode} (dim {args.dim}, {args.heads} heads, batch {args.batch} x seq "
              f"{args.seq}, vocab {args.vocab}; cold compile evt {compile_s['evt']:.1f} s, "
              f"torch.compile {compile_s['compile']:.1f} s): ms, median [min .. max]")  # fmt: skip
        for field in in_turn.FIELDS:
            if not all(field in s for s in stats.values()):
                continue
            parts = [f"{b} {s[field][0]:.3f} [{s[field][1]:.3f} .. {s[field][2]:.3f}]"
                     for b, s in stats.items()]  # fmt: skip
            faster = in_turn.rounds_faster(rec, field)
            won = (f"; evt faster in {faster[0]} of {faster[1]} rounds (p {faster[2]:.2g})"
                   if faster else "")  # fmt: skip
            ratio = in_turn.ratio(rec, field)
            print(f"  {field:9s} {'  '.join(parts)}; evt / compile {ratio:.3f}{won}")
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()

"""Hugging Face models' training steps (`tests/hf_catalog.py`, two layers) under
DistributedDataParallel on one GPU a rank, compiled by evt and by torch.compile (and eager),
timed in turn in one process a rank, bf16. Start it with `torch.distributed.run`:

    python -m torch.distributed.run --standalone --nproc-per-node 2 scripts/ddp_step_time.py \\
        --models gpt2 --dim 1024 --heads 16 --seq 1024 --batch 8 --json out.json

Each rank builds the model from the same seed and feeds its own batch. Each compile's first step
(the cold compile, the slowest rank's) is checked against eager's loss (within 2%), then the
baselines are timed for `--rounds` rounds (evt, compile, eager, evt, ...): per round and
baseline, `--steps` steps back to back between two synchronizations, after a barrier, so every
rank runs the same steps (a timer that picks its own repeat count would leave the ranks'
all-reduces unmatched). A step's time is the slowest rank's. Under DDP's default buckets Dynamo's
DDPOptimizer splits each compiled graph at the buckets (`--bucket-mb` sets their size), so a
region whose GEMM and epilogue land in different buckets' graphs is not fused.
Rank 0 prints the medians, the ratios against torch.compile and in how many rounds evt was
faster, and with `--json` writes every round.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evt.bench import in_turn  # noqa: E402
from evt.runtime import dispatch  # noqa: E402
from scripts.hf_step_time import bf16_case, check_loss, step_fn  # noqa: E402
from tests.hf_catalog import CASES, Sizes  # noqa: E402

BASELINES = ("evt", "compile", "eager")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def slowest(seconds: float, device: torch.device) -> float:
    """The largest of every rank's `seconds`."""
    t = torch.tensor([seconds], device=device, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def timed_ms(call, steps: int, device: torch.device) -> float:
    """Milliseconds per step over `steps` steps enqueued back to back, the slowest rank's."""
    dist.barrier()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        call()
    sync(device)
    return slowest((time.perf_counter() - t0) / steps * 1e3, device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2")
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--batch", type=int, default=8, help="sequences a rank")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=in_turn.ROUNDS)
    ap.add_argument("--steps", type=int, default=10, help="steps a round and baseline")
    ap.add_argument("--bucket-mb", type=float, default=None, help="DDP's bucket_cap_mb")
    ap.add_argument("--optimize-ddp", default="ddp_optimizer",
                    choices=["ddp_optimizer", "no_optimization", "python_reducer"],
                    help="torch._dynamo.config.optimize_ddp for both compiles: python_reducer "
                         "compiles each backward under compiled autograd with the same backend")  # fmt: skip
    ap.add_argument("--json", type=Path)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: a smoke test on gloo (evt's regions on their reference path)")
    args = ap.parse_args()

    from torch.nn.parallel import DistributedDataParallel

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if args.device == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    world = dist.get_world_size()
    torch._dynamo.config.optimize_ddp = args.optimize_ddp
    sizes = Sizes(dim=args.dim, heads=args.heads, vocab=args.vocab, batch=args.batch, seq=args.seq)
    buckets = {"bucket_cap_mb": args.bucket_mb} if args.bucket_mb else {}
    records = {}
    for name in args.models.split(","):
        case = CASES[name]
        model, inputs, want = bf16_case(case, sizes, device, input_seed=1 + rank)  # rank's batch
        calls, cold_s = {}, {}
        torch._dynamo.reset()
        for b in BASELINES:
            ids = [local] if device.type == "cuda" else None
            twin = DistributedDataParallel(copy.deepcopy(model), device_ids=ids, **buckets)
            backend = "evt" if b == "evt" else "inductor"
            fn = twin if b == "eager" else torch.compile(twin, backend=backend)
            reducer = args.optimize_ddp == "python_reducer" and b != "eager"
            call = step_fn(twin, fn, inputs, backward_with=torch.compile(backend=backend) if reducer else None)
            t = time.perf_counter()
            loss = call()
            sync(device)
            cold_s[b] = slowest(time.perf_counter() - t, device)
            check_loss(f"rank {rank}: {name} {b}", loss, want)
            for _ in range(3):
                call()
            calls[b] = call
        before = dispatch.launches()
        calls["evt"]()
        per_step = sum((dispatch.launches() - before).values())  # evt's kernel launches a step
        rounds: dict[str, list[float]] = {b: [] for b in BASELINES}
        for _ in range(args.rounds):
            for b, call in calls.items():
                rounds[b].append(timed_ms(call, args.steps, device))
        records[name] = {"rounds_ms": rounds, "cold_s": cold_s, "world": world,
                         "evt_launches_a_step": per_step,
                         "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}  # fmt: skip
        if rank == 0:
            med = {b: statistics.median(v) for b, v in rounds.items()}
            won = sum(e < c for e, c in zip(rounds["evt"], rounds["compile"], strict=True))
            print(f"\n== {name} on {world} ranks ({device.type}), DDP (dim {args.dim}, {args.heads} heads, "
                  f"{args.optimize_ddp}; {args.batch} x {args.seq} tokens a rank, vocab {args.vocab}; first step "
                  + ", ".join(f"{b} {s:.1f} s" for b, s in cold_s.items()) + ")")  # fmt: skip
            print("  ms per step, median [min .. max]: " + "  ".join(
                f"{b} {med[b]:.3f} [{min(v):.3f} .. {max(v):.3f}]" for b, v in rounds.items()))
            print(f"  evt / compile {med['evt'] / med['compile']:.3f} (evt faster in {won} of "
                  f"{args.rounds} rounds), evt / eager {med['evt'] / med['eager']:.3f}; evt "
                  f"launched {per_step} fused kernels a step on rank 0")  # fmt: skip
    if rank == 0 and args.json:
        args.json.write_text(json.dumps(records, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

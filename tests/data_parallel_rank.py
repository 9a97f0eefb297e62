"""One rank of data- or tensor-parallel training through evt, started by `torch.distributed.run`:

    python -m torch.distributed.run --nproc-per-node 2 tests/data_parallel_rank.py \\
        --wrap ddp --device cuda --out DIR

`tests/test_data_parallel.py` runs it on the CPU (gloo: the regions run their reference path),
`tests/test_gpu_data_parallel.py` on one GPU a rank (NCCL: real kernels, bf16).

Every rank builds the same two pre-norm MLP blocks (`blocks`) and the same global batch. Under
data parallelism it keeps its shard of the batch and trains the blocks wrapped in
DistributedDataParallel (compiled whole; Dynamo's DDPOptimizer splits the graph at DDP's buckets
unless `--optimize-ddp` says otherwise) or in FSDP2 (`fully_shard` on each block and the root,
each block compiled); under tensor parallelism (`--wrap tp`) it trains its share of each block's
Linears on the whole batch. All through evt, for `--steps` SGD steps, in bf16 on GPUs (float32
parameters with `--mixed`). Each step's gradients (DTensors gathered whole) are compared with the
float32 eager gradients of the whole global batch's mean loss, on one device, and so are those
of eager in the rank's precision: the error the dtype alone makes. After the last step the
parameters are compared with float32 eager's trained the same way.

Each rank writes DIR/rank<R>.json: per step the loss and each gradient's relative error (evt's and
eager's in the same precision), the parameters' errors at the end, the regions' runs (kernel
launches on CUDA, reference-path runs on the CPU), the regions that fell back and why, and the
kernels this process compiled (cache key -> compiler runs: ranks that share a cache compile each
kernel once between them, `evt.runtime.cache.get_or_build`'s lock).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import evt  # noqa: E402, F401  (the backend by name)
from evt.runtime import build, dispatch, reference  # noqa: E402
from evt.testing.models import PreNormMLP  # noqa: E402
from tests.graphs import rel_err  # noqa: E402


def blocks(d: int = 64, h: int = 256) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(PreNormMLP(d, h), PreNormMLP(d, h))


def loss_of(out: torch.Tensor) -> torch.Tensor:
    return out.float().pow(2).mean()


def whole(t: torch.Tensor) -> torch.Tensor:
    """A gradient or parameter as one plain tensor (FSDP2's DTensors gathered: a collective)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def wrap(model: nn.Module, how: str, device: torch.device, bucket_mb: float | None,
         mixed: bool = False):  # fmt: skip
    """The callable a step calls: the model wrapped (DDP, FSDP2) or parallelized (TP) as the rank
    trains it (`mixed`: FSDP2 casts the parameters to bf16 for the compute and reduces the
    gradients in float32)."""
    if how == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        kwargs = {"bucket_cap_mb": bucket_mb} if bucket_mb else {}
        return torch.compile(DistributedDataParallel(model, device_ids=ids, **kwargs), backend="evt")
    if how == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import parallel

        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for block in model:  # fc1's columns and fc2's rows split: fc2's partial sums all-reduced
            plan = {"fc1": parallel.ColwiseParallel(), "fc2": parallel.RowwiseParallel()}
            parallel.parallelize_module(block, mesh, plan)
        return torch.compile(model, backend="evt")
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(torch.bfloat16, torch.float32) if mixed else MixedPrecisionPolicy()
    for block in model:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    for block in model:
        block.compile(backend="evt")
    return model


def backward_compiled(on: bool):
    """Compiled autograd through evt around a backward (what `optimize_ddp="python_reducer"`
    needs), or nothing."""
    if not on:
        return contextlib.nullcontext()
    return torch._dynamo.compiled_autograd._enable(torch.compile(backend="evt"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wrap", choices=["ddp", "fsdp2", "tp"], required=True,
                    help="tp: tensor parallelism (each rank trains the whole batch on its share "
                         "of each block's Linears)")  # fmt: skip
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=256, help="rows of each rank's shard")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--bucket-mb", type=float, default=None)
    ap.add_argument("--optimize-ddp", default="ddp_optimizer",
                    choices=["ddp_optimizer", "no_optimization", "python_reducer"],
                    help="torch._dynamo.config.optimize_ddp: the default splits the graph at "
                         "DDP's buckets; python_reducer traces the backward's all-reduces under "
                         "compiled autograd (compiled by evt too) in one graph")  # fmt: skip
    ap.add_argument("--mixed", action="store_true",
                    help="float32 parameters, bf16 compute: DDP's and TP's forward under "
                         "autocast, FSDP2 with a MixedPrecisionPolicy (bf16 parameters, float32 "
                         "reductions)")  # fmt: skip
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch._dynamo.config.optimize_ddp = args.optimize_ddp
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    # the parameters' dtype: bf16 on GPUs, float32 on the CPU and for mixed precision
    dtype = torch.bfloat16 if device.type == "cuda" and not args.mixed else torch.float32

    def precision():  # DDP's and TP's mixed precision, and eager's (FSDP2 casts by itself)
        return torch.autocast(device.type, torch.bfloat16) if args.mixed else contextlib.nullcontext()

    runs: collections.Counter = collections.Counter()  # region -> reference-path runs

    def counted(spec, tensors, original=reference.run):
        runs[spec.name] += 1
        return original(spec, tensors)

    reference.run = counted
    dispatch.reset()

    model = blocks(args.dim, args.hidden).to(device, dtype)
    ref32 = copy.deepcopy(model).float()
    ref16 = copy.deepcopy(model)  # eager in the same precision: the error the dtype alone makes
    trained = wrap(model, args.wrap, device, args.bucket_mb, args.mixed)
    torch.manual_seed(1)
    batch = torch.randn(world * args.tokens, args.dim, device=device)
    # data parallelism: each rank its shard of the global batch; tensor parallelism: all of it
    mine = batch if args.wrap == "tp" else batch[rank * args.tokens:(rank + 1) * args.tokens]
    shard = mine.to(dtype)

    def sgd(params) -> None:
        with torch.no_grad():
            for p in params:
                p -= args.lr * p.grad
                p.grad = None

    steps = []
    for _ in range(args.steps):
        with precision() if args.wrap != "fsdp2" else contextlib.nullcontext():
            loss = loss_of(trained(shard))
        with backward_compiled(args.optimize_ddp == "python_reducer"):
            loss.backward()
        got = {n: whole(p.grad) for n, p in model.named_parameters()}
        loss_of(ref32(batch)).backward()
        with precision():
            loss_of(ref16(batch.to(dtype))).backward()
        want = {n: p.grad for n, p in ref32.named_parameters()}
        eager = {n: p.grad for n, p in ref16.named_parameters()}
        steps.append({
            "loss": loss.item(),
            "grad_err": {n: rel_err(got[n], want[n]) for n in want},
            "eager_grad_err": {n: rel_err(eager[n], want[n]) for n in want},
            "finite": all(bool(torch.isfinite(g).all()) for g in got.values()),
        })  # fmt: skip
        for m in (model, ref32, ref16):
            sgd(list(m.parameters()))
    params = {n: whole(p.detach()) for n, p in model.named_parameters()}
    ref_params = dict(ref32.named_parameters())
    eager_params = dict(ref16.named_parameters())
    record = {
        "rank": rank, "world": world, "wrap": args.wrap, "device": str(device), "mixed": args.mixed,
        "steps": steps,
        "param_err": {n: rel_err(params[n], ref_params[n].detach()) for n in ref_params},
        "eager_param_err": {n: rel_err(eager_params[n].detach(), ref_params[n].detach())
                            for n in ref_params},
        "launches": dict(dispatch.launches()),
        "reference_runs": dict(runs),
        "fallbacks": dict(dispatch.FALLBACKS),
        "compiled": dict(build.BUILDS),
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{rank}.json").write_text(json.dumps(record, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

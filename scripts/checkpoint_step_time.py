"""Time a training step of a stack of pre-LayerNorm MLP blocks (bf16) without activation
checkpointing, with every block checkpointed (`torch.utils.checkpoint`), and with selective
checkpointing (a policy that saves the GEMMs, recomputes the rest): for eager, torch.compile
and evt, the ms a step takes, the bytes autograd saves for the backward and the largest
relative error of the loss and gradients against fp32 eager's unchecked step.

    python scripts/checkpoint_step_time.py [--tokens 8192 --dim 1024 --hidden 4096 --blocks 4]
                                           [--modes none,full,selective] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import math
import time

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from evt.testing.models import PreNormMLP, saving_gemms


class Stack(nn.Module):
    def __init__(self, blocks: int, d: int, h: int, mode: str):
        super().__init__()
        self.blocks, self.mode = nn.ModuleList(PreNormMLP(d, h) for _ in range(blocks)), mode

    def forward(self, x):
        for b in self.blocks:
            if self.mode == "none":
                x = b(x)
            elif self.mode == "full":
                x = checkpoint(b, x, use_reentrant=False)
            else:
                x = checkpoint(b, x, use_reentrant=False, context_fn=saving_gemms)
        return x.float().pow(2).mean()


def step(fn, model, x) -> tuple[collections.Counter, dict[str, torch.Tensor]]:
    """The tensors autograd saves ("shape dtype" -> count) and {loss, gradients} of one step."""
    for p in model.parameters():
        p.grad = None
    saved = collections.Counter()

    def pack(t):
        saved[f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')}"] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(x)
    loss.backward()
    return saved, {"loss": loss.detach().float(), **{n: p.grad.float() for n, p in model.named_parameters()}}


def mib(saved: collections.Counter) -> float:
    size = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "bool": 1}
    total = 0
    for key, count in saved.items():
        shape, dtype = key.rsplit(" ", 1)
        total += count * math.prod(json.loads(shape)) * size.get(dtype, 4)
    return total / 2**20


def main() -> None:
    from evt.bench.measure import time_ms
    from evt.runtime import dispatch
    from evt.runtime.timing import replay_ms

    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--modes", default="none,full,selective")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script (evt's reference path)")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.manual_seed(0)
    base = Stack(a.blocks, a.dim, a.hidden, "none").to(a.device, torch.bfloat16)
    x = torch.randn(a.tokens, a.dim, device=a.device, dtype=torch.bfloat16)
    ref = copy.deepcopy(base).float()
    _, want = step(ref, ref, x.float())
    rows = []
    for mode in a.modes.split(","):
        for route in ("eager", "torch.compile", "evt"):
            model = copy.deepcopy(base)
            model.mode = mode
            torch._dynamo.reset()
            dispatch.reset()
            fn = model if route == "eager" else torch.compile(model, **({"backend": "evt"} if route == "evt" else {}))
            t0 = time.perf_counter()
            saved, got = step(fn, model, x)
            if a.device == "cuda":
                torch.cuda.synchronize()
            first = time.perf_counter() - t0
            err = max(((got[n] - want[n]).norm() / want[n].norm()).item() for n in want)
            ms = time_ms(lambda fn=fn, model=model: step(fn, model, x), a.device)
            graph_ms = None
            if a.device == "cuda":
                try:
                    graph_ms = replay_ms(lambda fn=fn, model=model: step(fn, model, x))
                except Exception as e:  # noqa: BLE001 - eager checkpointing may refuse capture
                    print(f"{mode:>9} {route:>13}: no CUDA graph: {type(e).__name__}: {str(e)[:120]}")
                    torch.cuda.synchronize()
            row = {"mode": mode, "route": route, "ms": ms, "graph_ms": graph_ms, "saved_MiB": mib(saved), "rel_err": err,
                   "first_call_s": first, "saved": dict(saved)}
            if route == "evt":
                row["launches"], row["fallbacks"] = dict(dispatch.launches()), dict(dispatch.FALLBACKS)
            rows.append(row)
            graphed = f"{graph_ms:7.3f}" if graph_ms is not None else "    n/a"
            print(f"{mode:>9} {route:>13}: {ms:8.3f} ms/step ({graphed} graphed)  saved {row['saved_MiB']:8.1f} MiB  "
                  f"rel err {err:.2e}  first call {first:5.1f} s", flush=True)
            if route == "evt":
                print(f"{'':>24}launches {row['launches']} fallbacks {row['fallbacks']}", flush=True)
                compiled = collections.Counter(rows[-2]["saved"])
                more, fewer = saved - compiled, compiled - saved
                if more or fewer:
                    print(f"{'':>24}saved beyond torch.compile's: {dict(more)}; fewer: {dict(fewer)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"shape": vars(a), "gpu": torch.cuda.get_device_name() if a.device == "cuda" else "cpu", "torch": torch.__version__,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

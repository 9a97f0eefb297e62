"""How far evt's bf16 training step is from fp32 eager, against bf16 eager's own distance, per
tensor, over seeds and settings: the quantity `tests/test_gpu_models.py` bounds (2x eager's error,
per tensor, one seed), seen over several seeds to tell a systematic loss of precision from one
unlucky draw. Real kernels on a GPU (`--device cuda`), the reference path on the CPU.

    python scripts/bf16_error_ratios.py --model bert --seeds 5,6,7 --env EVT_NESTED_BATCH=0,1
    [--rest eager|inductor] [--worst 5]

Prints, per setting and seed, the worst tensors' (evt error, eager error, ratio), and per
setting each tensor's geomean ratio over the seeds (the worst ones).
"""

from __future__ import annotations

import argparse
import math
import os
import warnings

import torch

import evt.backend
from evt.runtime import dispatch
from tests.test_gpu_models import MODELS, against_fp32, make_model, step


def errors(name: str, device: str, seed: int, rest: str) -> dict[str, tuple[float, float]]:
    """tensor -> (evt's error, bf16 eager's error) against fp32 eager, one step."""
    torch._dynamo.reset()
    dispatch.reset()
    model = make_model(name, device)
    inputs = MODELS[name][1](device, seed)
    options = {"rest": "eager"} if rest == "eager" else {}
    got = step(model, torch.compile(model, backend=evt.backend.evt_backend, options=options), inputs)
    if dispatch.FALLBACKS:
        print(f"    fallbacks: {dispatch.FALLBACKS}")
    bf16, err_of = against_fp32(model, inputs)
    return {n: (err_of(got, n), err_of(bf16, n)) for n in bf16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert", choices=sorted(MODELS))
    ap.add_argument("--seeds", default="5,6,7")
    ap.add_argument("--env", default="", help="VAR=v1,v2: run each setting")
    ap.add_argument("--rest", default="eager", choices=("eager", "inductor"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--worst", type=int, default=5)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    var, _, values = a.env.partition("=")
    for value in values.split(",") if var else [None]:
        if var:
            os.environ[var] = value
        label = f"{var}={value}" if var else "default"
        logs: dict[str, list[float]] = {}
        for seed in (int(s) for s in a.seeds.split(",")):
            errs = errors(a.model, a.device, seed, a.rest)
            ratios = {n: e / max(b, 1e-12) for n, (e, b) in errs.items()}
            for n, r in ratios.items():
                logs.setdefault(n, []).append(r)
            worst = sorted(ratios, key=ratios.get, reverse=True)[: a.worst]
            print(f"{label} seed {seed}: " + "; ".join(
                f"{n} {errs[n][0]:.4f}/{errs[n][1]:.4f}={ratios[n]:.2f}" for n in worst), flush=True)  # fmt: skip
        geo = {n: math.exp(sum(map(math.log, rs)) / len(rs)) for n, rs in logs.items()}
        worst = sorted(geo, key=geo.get, reverse=True)[: a.worst]
        print(f"{label} geomean ratio over seeds: " + "; ".join(f"{n} {geo[n]:.2f}" for n in worst), flush=True)


if __name__ == "__main__":
    main()

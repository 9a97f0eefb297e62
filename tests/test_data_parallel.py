"""Data-parallel training through evt on two ranks (`tests/data_parallel_rank.py` under
`torch.distributed.run`), on the CPU with gloo: the regions run their reference path, and the
gradients are all-reduced (DDP) or reduce-scattered (FSDP2) between two processes for real.
DDP compiled whole, as one graph, split at its buckets by Dynamo's DDPOptimizer (each bucket's
graph compiled apart: only the regions inside one; here every Linear is a bucket of its own, and
no backward region is left) and with `optimize_ddp="python_reducer"` (one graph, its backward
under compiled autograd, all-reduces and all, through evt too), and FSDP2 with each block
compiled, and both in mixed precision (float32 parameters; DDP's forward under bf16 autocast,
FSDP2 with a bf16 MixedPrecisionPolicy): every step's gradients and the trained parameters match
float32 eager on the whole global batch (in mixed precision, within what eager in the same
precision is off by). And tensor parallelism (each block's fc1 split by columns, fc2 by rows,
its partial sums all-reduced before the residual add), each rank on the whole batch.
`tests/test_gpu_data_parallel.py` runs the same on two GPUs with real kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RANK_SCRIPT = Path(__file__).with_name("data_parallel_rank.py")


def run_ranks(tmp_path: Path, *args: str, ranks: int = 2, env: dict | None = None,
              timeout: float = 600) -> list[dict]:  # fmt: skip
    """Run `data_parallel_rank.py args` on `ranks` processes; each rank's record."""
    out = tmp_path / "ranks"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={ranks}", str(RANK_SCRIPT), *args, "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})  # fmt: skip
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise AssertionError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{tail}")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


def worst(record: dict, field: str) -> float:
    return max(max(step[field].values()) for step in record["steps"])


def within_bf16(got: dict[str, float], eager: dict[str, float]) -> dict[str, tuple[float, float]]:
    """The tensors whose error is over max(2e-2, 2x that of eager in bf16): name -> (evt's,
    eager's)."""
    return {n: (e, eager[n]) for n, e in got.items() if not e < max(2e-2, 2 * eager[n])}


def compiled_once(records: list[dict]) -> dict[str, int]:
    """Cache key -> compiler runs over all ranks, for the keys any rank compiled more than once
    between them (ranks that share a cache should compile each kernel once)."""
    total: dict[str, int] = {}
    for r in records:
        for key, n in r["compiled"].items():
            total[key] = total.get(key, 0) + n
    return {k: n for k, n in total.items() if n > 1}


# every Linear's 1 MB of parameters a bucket of its own
BUCKETED = ("--dim", "256", "--hidden", "1024", "--bucket-mb", "1")


@pytest.mark.parametrize(("wrap", "args"), [
    ("ddp", ()),  # one bucket: one graph
    ("ddp", BUCKETED),  # a graph per bucket
    ("ddp", (*BUCKETED, "--optimize-ddp", "python_reducer")),
    ("fsdp2", ()),
    ("ddp", ("--mixed",)),
    ("fsdp2", ("--mixed",)),
    ("tp", ()),
], ids=["ddp", "ddp_buckets", "ddp_python_reducer", "fsdp2", "ddp_mixed", "fsdp2_mixed",
        "tp"])  # fmt: skip
def test_two_ranks_train_like_eager(tmp_path, wrap, args):
    records = run_ranks(tmp_path, "--wrap", wrap, *args, env={"EVT_CACHE_DIR": str(tmp_path / "cache")})
    for r in records:
        assert r["world"] == 2 and r["fallbacks"] == {}, r
        runs = r["reference_runs"]
        assert any(n.startswith("evt_f") for n in runs), runs
        # one graph a rank: the backward's regions too (a bucket's graph holds none here)
        assert any(n.startswith("evt_b") for n in runs) == (args != BUCKETED), runs
        assert all(s["finite"] for s in r["steps"])
        if r["mixed"]:
            for i, step in enumerate(r["steps"]):
                assert within_bf16(step["grad_err"], step["eager_grad_err"]) == {}, (i, step)
            assert within_bf16(r["param_err"], r["eager_param_err"]) == {}, r["param_err"]
        else:
            assert worst(r, "grad_err") < 1e-5, r["steps"]
            assert max(r["param_err"].values()) < 1e-5, r["param_err"]
    # data parallelism: the two ranks' losses are their own shards' (their gradients the global
    # batch's); tensor parallelism: both ranks compute the whole batch's
    losses = [r["steps"][0]["loss"] for r in records]
    assert (losses[0] == losses[1]) == (wrap == "tp"), losses


def test_ddp_step_time_runs_on_two_cpu_ranks(tmp_path):
    """`scripts/ddp_step_time.py` end to end on two gloo ranks (a tiny GPT-2): every baseline
    timed each round, its first step checked against eager's loss."""
    pytest.importorskip("transformers")
    out = tmp_path / "ddp.json"
    script = Path(__file__).resolve().parent.parent / "scripts" / "ddp_step_time.py"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(script), "--device", "cpu", "--models", "gpt2", "--dim", "64", "--heads", "4",
           "--vocab", "128", "--batch", "2", "--seq", "16", "--rounds", "2", "--steps", "1",
           "--json", str(out)]  # fmt: skip
    env = {**os.environ, "EVT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    record = json.loads(out.read_text())["gpt2"]
    assert record["world"] == 2
    assert {b: len(v) for b, v in record["rounds_ms"].items()} == {"evt": 2, "compile": 2, "eager": 2}
    assert all(t > 0 for v in record["rounds_ms"].values() for t in v)
    assert "evt / compile" in proc.stdout

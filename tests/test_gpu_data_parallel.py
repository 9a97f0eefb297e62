"""evt on more than one GPU (SM90, bf16, real kernels; skipped below two GPUs).

- Data parallelism on two GPUs, one process each, NCCL (`tests/data_parallel_rank.py` under
  `torch.distributed.run`): DDP compiled whole, at its default buckets (Dynamo's DDPOptimizer
  splits the graph at them: at the first 1 MB too, so always here), as one graph
  (`optimize_ddp="no_optimization"`: all-reduces after the backward) and with
  `optimize_ddp="python_reducer"` (one graph, the backward and its all-reduces under compiled
  autograd, through evt), and FSDP2 with each block compiled; with bf16 parameters, and with
  float32 ones in mixed precision (DDP's forward under bf16 autocast, FSDP2 with a bf16
  MixedPrecisionPolicy); and tensor parallelism (fc1 by columns, fc2 by rows, its partial sums
  all-reduced before the residual add). Each step's gradients and the trained parameters are within what eager
  in the same precision is off by from float32 eager on the whole global batch (per tensor: at
  most 2x that, or 2e-2); the
  regions launch kernels on both ranks and none falls back. The ranks share one kernel cache and
  build their kernels at the same time: each kernel is compiled once between them.
- A model on the second GPU of one process whose current device stays the first (no
  `torch.cuda.set_device`): the kernels launch on the inputs' device and stream, from Python
  and from the C++ launch path."""

from __future__ import annotations

import copy

import pytest
import torch

from evt.runtime import dispatch, fast
from tests.data_parallel_rank import blocks, loss_of
from tests.graphs import rel_err
from tests.test_data_parallel import compiled_once, run_ranks, within_bf16
from tests.test_gpu_mlp import fresh_dispatch  # noqa: F401  (autouse: env and dispatch reset per test)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                       reason="needs two CUDA GPUs"),  # fmt: skip
]

# NVLink multicast stays off (the GPU hosts' rule), also in the ranks' own environment
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}  # fmt: skip
SIZES = ("--device", "cuda", "--dim", "1024", "--hidden", "4096", "--tokens", "2048",
         "--steps", "3", "--lr", "0.05")  # fmt: skip


@pytest.mark.parametrize(("wrap", "args"), [
    ("ddp", ()),
    ("ddp", ("--optimize-ddp", "no_optimization")),
    ("ddp", ("--optimize-ddp", "python_reducer")),
    ("fsdp2", ()),
    ("ddp", ("--mixed",)),
    ("fsdp2", ("--mixed",)),
    ("tp", ()),
], ids=["ddp_buckets", "ddp_one_graph", "ddp_python_reducer", "fsdp2", "ddp_mixed",
        "fsdp2_mixed", "tp"])  # fmt: skip
def test_two_gpus_train_like_eager(tmp_path, wrap, args):
    records = run_ranks(tmp_path, "--wrap", wrap, *SIZES, *args, env=NCCL_ENV)
    assert sorted(r["device"] for r in records) == ["cuda:0", "cuda:1"]
    for r in records:
        print(f"rank {r['rank']}: launches {r['launches']}, compiled {len(r['compiled'])}")
        assert r["fallbacks"] == {} and r["reference_runs"] == {}, r
        assert any(n.startswith("evt_f") for n in r["launches"]), r["launches"]
        assert any(n.startswith("evt_b") for n in r["launches"]), r["launches"]
        for i, step in enumerate(r["steps"]):
            assert step["finite"], i
            assert within_bf16(step["grad_err"], step["eager_grad_err"]) == {}, (i, step)
        assert within_bf16(r["param_err"], r["eager_param_err"]) == {}, r["param_err"]
    assert compiled_once(records) == {}


def grads(fn, model, x) -> dict[str, torch.Tensor]:
    for p in model.parameters():
        p.grad = None
    loss = loss_of(fn(x))
    loss.backward()
    return {"loss": loss.detach(), **{n: p.grad for n, p in model.named_parameters()}}


def test_second_gpu_while_the_first_is_current():
    torch.cuda.set_device(0)
    device = torch.device("cuda", 1)
    model = blocks(1024, 4096).to(device, torch.bfloat16)
    model32 = copy.deepcopy(model).float()
    compiled = torch.compile(model, backend="evt")
    for step in range(3):  # the first launches from Python, later ones from C++ where it loaded
        x = torch.randn(2048, 1024, device=device)
        got = grads(compiled, model, x.bfloat16())
        eager = grads(model, model, x.bfloat16())
        want = grads(model32, model32, x)
        errs = {n: rel_err(got[n], want[n]) for n in want}
        eager_errs = {n: rel_err(eager[n], want[n]) for n in want}
        assert all(g.device == device for g in got.values()), step
        assert within_bf16(errs, eager_errs) == {}, (step, errs, eager_errs)
    assert torch.cuda.current_device() == 0
    assert dispatch.FALLBACKS == {}, dispatch.FALLBACKS
    assert sum(dispatch.LAUNCHES.values()) > 0, dispatch.LAUNCHES
    if fast.loaded() == "cuda":
        assert sum(fast.launches().values()) > 0, fast.launches()

"""Why torch.compile's ViT scores read 0.186-0.203 ms in the bench's compile stage and 0.097 in
step_variants: does Inductor's pad_mm pad the 197-token bmm, and what decides it?"""
import sys

import torch
from torch._dynamo.utils import counters
from torch._inductor import config, utils
from torch._inductor.fx_passes import pad_mm
from torch._inductor.utils import run_and_get_code
from triton.testing import do_bench

sys.path.insert(0, ".")
from evt.bench.patterns import attention_scores

print(torch.__version__, "tflops", utils.get_device_tflops(torch.bfloat16), "dram", utils.get_gpu_dram_gbps())
print("compute bound (197, 64, 197):", pad_mm.is_mm_compute_bound(197, 64, 197, torch.bfloat16))
print("shape_padding", config.shape_padding, "force_shape_pad", config.force_shape_pad,
      "deterministic", config.deterministic, "pad_mm_heuristic", getattr(config, "pad_mm_heuristic", None))
q, k = (torch.randn(64, 12, 197, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
mode = sys.argv[1] if len(sys.argv) > 1 else "plain"
if mode == "after_evt":  # step_variants' order: evt built and run first in the process
    from evt.backend import evt_backend
    e = torch.compile(attention_scores, dynamic=False, backend=evt_backend)
    e(q, k)
    torch.cuda.synchronize()
    print("after evt: counters", dict(counters["inductor"]))
fn = torch.compile(attention_scores, dynamic=False)
if mode == "fresh":  # as the bench's compile stage: in a fresh Inductor cache
    fresh_cache = getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache
    with fresh_cache():
        out, code = run_and_get_code(fn, q, k)
else:
    out, code = run_and_get_code(fn, q, k)
print(mode, "padded:", any("constant_pad_nd" in c for c in code), "counters:", dict(counters["inductor"]))
print(mode, "ms:", do_bench(lambda: fn(q, k), return_mode="median"))

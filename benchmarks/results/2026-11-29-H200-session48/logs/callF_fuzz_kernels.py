"""Session 48 call F: build the kernels of the first 3 seeds from 63 whose bf16 smooth program
computes SwiGLU's shared sigmoid (`model_fuzz.py --op silu_backward_sigmoid --seed 63 --count 3`)."""

import sys
import warnings

sys.path.insert(0, ".")
warnings.simplefilter("ignore")

from evt.runtime import dispatch  # noqa: E402
from evt.testing.models import kernels_of, seeds  # noqa: E402

chosen = seeds(63, 3, smooth=True, op="silu_backward_sigmoid")
print(chosen)
ks = [k for s in chosen for k in kernels_of(s)]
jobs = [j for j in (dispatch.build_for(spec, problem) for spec, problem in ks) if j is not None]
print(len(ks), "regions", len(jobs), "jobs", sum(j.exception() is not None for j in jobs), "failed")

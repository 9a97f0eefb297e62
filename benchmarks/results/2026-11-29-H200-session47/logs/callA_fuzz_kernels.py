"""Session 47 call A: capture the 14 causal-mask fuzz seeds' regions (EVT_SDPA=0) and, with
--build, build their kernels (run in the background while the call's tests ran)."""

import sys
import warnings

sys.path.insert(0, ".")
warnings.simplefilter("ignore")

from evt.runtime import dispatch  # noqa: E402
from evt.testing.models import kernels_of, seeds  # noqa: E402

build = "--build" in sys.argv
chosen = seeds(72000, 6, "causal", smooth=True) + seeds(72200, 8, "causal", smooth=True)
print(chosen)
ks = [k for s in chosen for k in kernels_of(s)]
print(len(ks), "regions", len({s.name for s, p in ks}), "distinct names")
if build:
    jobs = [dispatch.prefetch(spec, problem) for spec, problem in ks]
    jobs = [j for j in jobs if j is not None]
    print(len(jobs), "jobs", len(set(map(id, jobs))), "distinct")
    bad = [j for j in jobs if j.exception() is not None]
    print(len(bad), "failed")

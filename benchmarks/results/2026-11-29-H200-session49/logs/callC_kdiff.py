"""Session 49 call C: every kernel of two chrome traces of one step (scripts/step_trace.py
--trace), summed per name per step, side by side: where two builds of a step differ on the GPU."""
import json
import sys
from collections import defaultdict

STEPS = 10


def kernels(path):
    per = defaultdict(lambda: [0, 0.0])
    for e in json.load(open(path)).get("traceEvents", []):
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            per[e["name"]][0] += 1
            per[e["name"]][1] += float(e.get("dur", 0))
    return {k: (c / STEPS, t / STEPS) for k, (c, t) in per.items()}


a_label, a_path, b_label, b_path = sys.argv[1:5]
a, b = kernels(a_path), kernels(b_path)
print(f"total us/step: {a_label} {sum(t for _, t in a.values()):.1f}, "
      f"{b_label} {sum(t for _, t in b.values()):.1f}")
rows = sorted(set(a) | set(b), key=lambda k: -max(a.get(k, (0, 0))[1], b.get(k, (0, 0))[1]))
print(f"{'kernel':90s} {a_label + ' n':>8s} {a_label + ' us':>10s} {b_label + ' n':>8s} {b_label + ' us':>10s} {'delta':>8s}")
for k in rows:
    (na, ta), (nb, tb) = a.get(k, (0, 0.0)), b.get(k, (0, 0.0))
    print(f"{k[:90]:90s} {na:8.1f} {ta:10.1f} {nb:8.1f} {tb:10.1f} {tb - ta:8.1f}")

"""Is evt's host time per training step above torch.compile's? Interleaved rounds in one process.

One host-time reading per baseline (`measure.host_ms`: steps enqueued back to back) swings by
tens of percent between readings and between hosts (session 28: the MLP step's evt reading went
from 1878 to 761 us in two passes a second apart), so a single pair says little. This warms every
baseline of a step, then measures them in turn for R rounds (A B A B ..., `in_turn.alternate`,
as the bench's in-turn stage does), and prints per baseline the median, min and max over the
rounds and each baseline's median against the last one's; the same for the step's as-run time
(`measure.time_ms`: the GPU-side time of one step, paced by whichever of host and GPU is
slower).

    python scripts/host_ab.py [--steps step/mlp,step/gpt2] [--baselines evt,compile] [--rounds 9]
"""

from __future__ import annotations

import argparse

from step_host import warmed_calls  # scripts/, beside this file

from evt.bench import in_turn


def spread(stats: tuple[float, float, float]) -> str:
    """(median, min, max) in ms, as us."""
    mid, lo, hi = (v * 1e3 for v in stats)
    return f"{mid:8.1f} [{lo:7.1f} .. {hi:7.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="step/mlp,step/gpt2")
    ap.add_argument("--baselines", default="evt,compile")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--n", type=int, default=30, help="steps enqueued per host-time reading")
    args = ap.parse_args()
    names = args.baselines.split(",")
    calls: dict[str, dict[str, object]] = {}
    for step, b, call in warmed_calls(args.steps.split(","), names):
        calls.setdefault(step, {})[b] = call
    for step, by_baseline in calls.items():
        stats = in_turn.summarize({"in_turn": in_turn.alternate(by_baseline, "cuda", args.rounds,
                                                                args.n)})  # fmt: skip
        last = names[-1]
        print(f"\n== {step}: us per step over {args.rounds} interleaved rounds, "
              f"median [min .. max]; ratio: median / {last}'s")  # fmt: skip
        print(f"{'baseline':<10} {'host':>27} {'ratio':>6}   {'as run':>27} {'ratio':>6}")
        for b, s in stats.items():
            h = s["host_ms"][0] / stats[last]["host_ms"][0]
            r = s["time_ms"][0] / stats[last]["time_ms"][0]
            print(f"{b:<10} {spread(s['host_ms']):>27} {h:6.2f}   {spread(s['time_ms']):>27} {r:6.2f}")


if __name__ == "__main__":
    main()

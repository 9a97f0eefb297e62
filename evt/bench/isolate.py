"""Run one stage in child processes (`python -m evt.bench ... --stage NAME`), under time limits.

A stage in its own process cannot hang the run, cannot poison the next stage's CUDA context after
a fatal kernel error, and leaves no Inductor configuration behind. The child appends its results
to the shared results file as it goes and says what it is doing in a heartbeat file
(`running.json`: phase prebuild, case or item, and since when). The parent watches both limits:

    stage limit   the stage's share of the run: at the limit the child is killed, and what it was
                  measuring and everything after it is recorded "skipped" (stage time limit);
                  --resume measures them. The item it stopped keeps how long it had run
                  (`outlasted_s`): a later call's child (told when its stage ends) runs such
                  items after the rest and does not start one with less time left than that,
                  so a step Inductor's max-autotune compiles for minutes neither holds up the
                  items behind it nor spends a call's last minutes only to be stopped again
    item limit    --item-timeout: one item (compile, check, timing) running longer is killed and
                  recorded "timeout"; a fresh child goes on with the next item

A child that crashes costs the item it was measuring (n/a, with its stderr); a fresh child goes on
with the rest while the stage has time. A child's stderr is echoed when it ends: its last
`STDERR_TAIL` characters, or all of it under `EVT_DEBUG` (the region decisions the stage logged).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evt import debug
from evt.bench.plan import Item, Plan, pending
from evt.bench.store import Store

HEARTBEAT = "running.json"
STDERR_TAIL = 3000
POLL_S = 0.5


def beat(out: Path, stage: str, phase: str, case: str | None = None, baseline: str | None = None):
    """Write the heartbeat (atomically): this process is now in `phase` of `case`/`baseline`."""
    path = Path(out) / HEARTBEAT
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    info = dict(stage=stage, phase=phase, case=case, baseline=baseline, since=time.time())
    tmp.write_text(json.dumps(info))
    os.replace(tmp, path)


def read_beat(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Outcome:
    kind: str  # done | crash | item-timeout | stage-time
    why: str
    beat: dict | None  # the child's last heartbeat


def child_command(argv: list[str]) -> tuple[list[str], dict]:
    """`python -m evt.bench *argv` with this evt first on the path (installed or not)."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return [sys.executable, "-m", "evt.bench", *argv], {**os.environ, "PYTHONPATH": path}


@dataclass(frozen=True)
class ItemLimits:
    """How long one item may take: `item_s` (--item-timeout), or `step_item_s`
    (--step-item-timeout) for the training steps named in `steps`; None: no limit."""

    item_s: float | None = None
    step_item_s: float | None = None
    steps: frozenset[str] = frozenset()

    def of(self, case: str | None) -> tuple[float | None, str]:
        """(the limit of `case`'s items, the option that sets it)."""
        if self.step_item_s and case in self.steps:
            return self.step_item_s, "--step-item-timeout"
        return self.item_s, "--item-timeout"


def watch(proc: subprocess.Popen, limit_s: float, limits: ItemLimits, hb: Path) -> str | None:
    """Wait for the child; kill it (and the compilers it started) at a limit: which one."""
    end = time.monotonic() + limit_s
    while True:
        try:
            proc.wait(timeout=POLL_S)
            return None
        except subprocess.TimeoutExpired:
            pass
        b = read_beat(hb)
        item_s = limits.of(b.get("case"))[0] if b else None
        over_item = item_s and b["phase"] == "item" and time.time() - b["since"] > item_s
        if over_item or time.monotonic() >= end:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "item-timeout" if over_item else "stage-time"


def run_child(
    cmd: list[str], env: dict | None, limit_s: float, limits: ItemLimits, hb: Path
) -> Outcome:
    hb.unlink(missing_ok=True)
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stderr=err, env=env, start_new_session=True)
        killed = watch(proc, limit_s, limits, hb)
        err.seek(0)
        text = err.read()
    tail = text[-STDERR_TAIL:]
    # with EVT_DEBUG on, all of it: its lines (regions' configs, autotune decisions) are the point
    sys.stderr.write(text if debug.level() >= 1 else tail)
    last = read_beat(hb)
    hb.unlink(missing_ok=True)
    if killed == "item-timeout":
        item_s, option = limits.of((last or {}).get("case"))
        why = f"ran past {option} {item_s:g} s (compile, check and timing) and was killed"
    elif killed:
        why = f"the stage's time limit ({limit_s:.0f} s left) ran out while this was measured"
    elif proc.returncode:
        why = f"the stage's process exited with code {proc.returncode}"
        why += f"; its stderr ended with:\n{tail}" if tail else ""
    else:
        why = "the stage's process finished without measuring this"
    kind = killed or ("crash" if proc.returncode else "done")
    return Outcome(kind, why, last)


def blamed(outcome: Outcome, left: list[Item]) -> list[Item]:
    """The items the child was busy with: the heartbeat's item or case (none if it had just
    finished it), else (building kernels, or not started) all that is left."""
    b = outcome.beat or {}
    if b.get("phase") == "item":
        return [i for i in left if i.key == (b["case"], b["baseline"])]
    if b.get("phase") == "case":
        return [i for i in left if i.case.name == b["case"]]
    return list(left)


def settle(outcome: Outcome, left: list[Item], store: Store, measured: bool = False) -> bool:
    """Record what the child left unmeasured; True when the stage may go on in a fresh child.
    A crash with no item in flight costs the next item only when the child measured nothing
    (else a child crashing as it starts would be restarted forever): one after an item finished
    (session 47: Inductor's CUTLASS backend left an illegal memory access that surfaced in the
    case's cleanup) costs nothing, and a fresh child goes on with the next item."""
    who = blamed(outcome, left)
    if outcome.kind == "stage-time":
        rest = [i for i in left if i not in who]
        store.mark(rest, "skipped", "not reached before the stage's time limit", skip="time")
        b = outcome.beat or {}
        ran = time.time() - b["since"] if b.get("phase") == "item" and who else None
        # the limit counts from the child's start: say how much of it the item itself had
        store.mark(who, "skipped", outcome.why + (f", after {ran:.0f} s of it" if ran else ""),
                   skip="time")  # fmt: skip
        if ran is not None:
            store.outlasted(who[0], ran)
        return False
    if outcome.kind == "item-timeout":
        store.mark(who, "timeout", outcome.why)
    elif outcome.kind == "crash":  # it costs what it was measuring, or the next item
        store.mark(who or ([] if measured else left[:1]), "n/a", outcome.why)
    else:  # the child stopped early without saying why
        store.mark(left, "n/a", outcome.why)
    return True


def run_stage(
    stage: str,
    argv: list[str],
    limit_s: float,
    item_s: float | None,
    plan: Plan,
    store: Store,
    log: Callable[[str], None] = print,
    command: Callable[[list[str]], tuple[list[str], dict]] = child_command,
    step_item_s: float | None = None,
) -> None:
    """Run the stage's pending items in child processes until done or out of time; an item may
    take `item_s`, a training step's `step_item_s` where given."""
    steps = frozenset(c.name for c in plan.cases if c.kind == "step")
    limits = ItemLimits(item_s, step_item_s, steps)
    end = time.monotonic() + limit_s
    hb = store.path.parent / HEARTBEAT

    def todo() -> list[Item]:  # what a child may still measure in this run
        return [i for i in pending(plan, store.results, stage) if not store.skipped_now(i)]

    while left := todo():
        remaining = end - time.monotonic()
        if remaining <= 0:
            store.mark(left, "skipped", f"stage {stage}'s time limit ran out first", skip="time")
            break
        # the child's time left, rounded down to the 0.1 s written: rounded to nearest, the
        # child could be told an end up to 50 ms after the stage's own (a test caught it)
        ends = ["--stage-ends", f"{math.floor((time.time() + remaining) * 10) / 10:.1f}"]
        outcome = run_child(*command([*argv, *ends]), remaining, limits, hb)
        store.reload()
        before, left = left, todo()
        measured = len(left) < len(before)
        if outcome.kind == "done" and not left:
            break
        at = "; ".join("/".join(i.key) for i in blamed(outcome, left)[:3]) or "between items"
        log(f"[{stage}] {outcome.kind} ({outcome.why.splitlines()[0]}) at {at}")
        if not left or not settle(outcome, left, store, measured):
            break
    mine = {i.key for i in plan.items if i.stage == stage}  # not the ones --only left out
    n = sum(r["status"] == "skipped" and (r["case"], r["baseline"]) in mine for r in store.results)
    if n:
        log(f"[{stage}] {n} not measured (stage time limit): rerun with --resume")

"""Run one stage in a child process (`python -m evt.bench ... --stage NAME`), under a time limit.

A stage in its own process cannot hang the run (it is killed at `--stage-timeout`), cannot poison
the next stage's CUDA context after a fatal kernel error, and leaves no Inductor configuration
behind. The child appends its results to the shared results file as it goes; afterwards the
parent records what cut the stage short: the case that was running is n/a with the reason, and the
cases never reached are "skipped" (a rerun with --resume retries them).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from evt.bench.env import now
from evt.bench.plan import Plan, pending
from evt.bench.store import Store, new_record

STDERR_TAIL = 3000


def run_child(argv: list[str], timeout: float | None) -> str | None:
    """Run `python -m evt.bench *argv`; None when it finished cleanly, else why it did not."""
    cmd = [sys.executable, "-m", "evt.bench", *argv]
    root = str(Path(__file__).resolve().parents[2])  # this evt, installed or not
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stderr=err, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
            why = None if code == 0 else f"the stage's process exited with code {code}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child and the compilers it started
            proc.wait()
            why = f"the stage ran past --stage-timeout {timeout:g} s and was killed"
        err.seek(0)
        tail = err.read()[-STDERR_TAIL:]
    sys.stderr.write(tail)
    return None if why is None else why + (f"; its stderr ended with:\n{tail}" if tail else "")


def run_stage(
    stage: str,
    argv: list[str],
    timeout: float | None,
    plan: Plan,
    store: Store,
    log: Callable[[str], None] = print,
) -> None:
    why = run_child(argv, timeout)
    store.reload()
    left = pending(plan, store.results, stage)
    if why is None and not left:
        return
    why = why or "the stage's process finished without measuring these cases"
    for n, item in enumerate(left):
        status = "n/a" if n == 0 else "skipped"
        error = why if n == 0 else f"not reached: {why.splitlines()[0]}; rerun with --resume"
        dtype = store.data["config"]["dtype"]
        store.add(new_record(item, dtype, status=status, error=error, finished=now()))
    log(f"[{stage}] cut short ({why.splitlines()[0]}): {left[0].key} n/a, {len(left) - 1} skipped")

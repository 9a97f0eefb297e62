"""The results file, `<out>/results.json`: rewritten atomically after every measurement, so a
run that dies keeps everything measured before it, and a rerun with `--resume` continues.

Schema (`"schema": "evt-bench/1"`):
    config    dtype, device, gpu, small: what every record was measured with (checked on resume)
    env       GPU (name, SMs, L2, clocks, driver via nvidia-smi), torch/CUDA/triton/CUTLASS/evt
              versions, git commit, when the file was created
    sessions  one entry per invocation (`evt.bench.provenance.session`): time, argv, git commit,
              a fingerprint of evt's sources, host, GPU clocks and driver, time limits
    stages    per stage: `runs`, one entry per session that ran it (limits, wall time, left)
    results   one record per (case, baseline), see `RECORD_FIELDS`; each names the session
              (index into `sessions`) and the git commit it was measured at

Files written before `session`, `commit`, `skip_reason` and the clock fields existed read the
same (missing fields are None).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from evt.bench import env

SCHEMA = "evt-bench/1"
FILE = "results.json"
CONFIG_KEYS = ("dtype", "device", "gpu", "small")
RECORD_FIELDS = (
    "case",
    "kind",
    "group",
    "shape",
    "dims",
    "dtype",
    "baseline",
    "stage",
    "status",  # see STATUSES
    "skip_reason",  # why a skipped record was not measured (SKIP_REASONS)
    "error",
    "rel_err",
    "tolerance",
    "time_ms",
    "tflops",
    "gbps",
    "flops",
    "bytes",
    "input_sets",
    "graph_ms",  # on CUDA: the same calls replayed from CUDA graphs (GEMM cases and steps)
    "graph_tflops",
    "host_ms",  # on CUDA: the host's time per call, calls enqueued back to back
    "graph_error",  # why the capture failed (the time_ms still stands)
    "sm_mhz",  # on CUDA: the median SM clock while time_ms was measured (evt.bench.clocks)
    "graph_sm_mhz",  # ... while graph_ms was measured
    "graph_power_w",  # the mean board power then
    "clock_events",  # the clock-event reasons active then (sw-power-cap: at the power limit)
    "timer",
    "compile_cold_s",
    "compile_warm_s",
    "peak_mem_bytes",
    "in_turn",  # the "in-turn" baseline: {baseline: {time_ms: [per round], host_ms: [...]}}
    "notes",
    "finished",
    "session",  # index into the file's sessions: who measured it
    "commit",  # the git commit of evt it was measured at (that session's)
    "replaced",  # a record --redo queued again: the one it held, back if it is not measured
    # an item a stage's time limit stopped while it ran: how long it had run (the most any call
    # gave it); a later stage runs it after the rest, and only with more time left than that
    "outlasted_s",
)
STATUSES = {
    "ok": "checked right, then timed",
    "wrong": "checked, wrong: not timed",
    "n/a": "raised (the exception's text is in error), or its process crashed",
    "timeout": "ran past --item-timeout (compile, check and timing of one item): killed",
    "fallback": "evt regions ran unfused (the reference path): not timed as evt",
    "skipped": "not measured in any session yet (skip_reason says why); --resume retries it",
}
FINAL = ("ok", "wrong", "n/a", "timeout", "fallback")
SKIP_REASONS = {
    "time": "stage time limit",  # its stage (or the run's --time-budget) ran out first
    "retry": "queued by --retry",
    "redo": "queued by --redo",
    "outlasts": "needs more time than was left",  # an earlier call ran it longer: not started
}


def new_record(item, dtype: str, **fields) -> dict:
    """A record of every field (None until known) for a plan item and the run's dtype name."""
    c = item.case
    return {
        **dict.fromkeys(RECORD_FIELDS),
        **dict(case=c.name, kind=c.kind, group=c.group, shape=c.shape, dims=list(c.dims)),
        **dict(dtype=dtype, baseline=item.baseline, stage=item.stage),
        **fields,
    }


class ResumeError(RuntimeError):
    """The results directory holds a run that this one cannot continue."""


class Store:
    def __init__(self, path: Path, data: dict):
        self.path, self.data = path, data

    @property
    def results(self) -> list[dict]:
        return self.data["results"]

    @classmethod
    def open(cls, out: Path, config: dict, resume: bool) -> Store:
        path = Path(out) / FILE
        if not path.exists():
            device = config["device"]
            data = {
                "schema": SCHEMA,
                "config": config,
                "env": env.environment(device),
                "sessions": [],
                "stages": {},
                "results": [],
            }
            store = cls(path, data)
            store.save()
            return store
        if not resume:
            raise ResumeError(f"{path} exists: pass --resume to continue it, or another --out")
        data = json.loads(path.read_text())
        old = {k: data.get("config", {}).get(k) for k in CONFIG_KEYS}
        new = {k: config[k] for k in CONFIG_KEYS}
        if data.get("schema") != SCHEMA or old != new:
            raise ResumeError(
                f"{path} was measured with {old} ({data.get('schema')}); "
                f"this run is {new} ({SCHEMA}): use another --out"
            )
        return cls(path, data)

    def reload(self) -> None:
        self.data = json.loads(self.path.read_text())

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.data, indent=1, default=str) + "\n")
        os.replace(tmp, self.path)

    @property
    def session(self) -> int | None:
        """The index of the session now running (the last one), None before any."""
        sessions = self.data.get("sessions")
        return len(sessions) - 1 if sessions else None

    def add(self, record: dict, save: bool = True) -> None:
        """Append a record stamped with this session and its commit, replacing an earlier one
        of the same case and baseline."""
        if self.session is not None and record.get("session") is None:
            git = self.data["sessions"][-1].get("git") or {}
            record.update(session=self.session, commit=git.get("commit"))
        key = (record["case"], record["baseline"])
        self.data["results"] = [r for r in self.results if (r["case"], r["baseline"]) != key]
        self.results.append(record)
        if save:
            self.save()

    def mark(self, items, status: str, error: str, skip: str | None = None) -> None:
        """Record plan items that were not measured: `status` with the reason in `error`, and
        for "skipped" the `SKIP_REASONS` key `skip`."""
        dtype = self.data["config"]["dtype"]
        reason = SKIP_REASONS[skip] if skip else None
        for item in items:
            old = self.record(item.case.name, item.baseline)
            if skip == "time" and old is not None and old.get("replaced"):
                self.add(old["replaced"], save=False)  # a --redo not reached keeps what it had
                continue
            fields = dict(status=status, error=error, skip_reason=reason, finished=env.now())
            fields["outlasted_s"] = (old or {}).get("outlasted_s")  # what it needs stays known
            self.add(new_record(item, dtype, **fields), save=False)
        self.save()

    def outlasted(self, item, seconds: float) -> None:
        """`item` ran `seconds` before a time limit stopped it: keep the longest such run on
        its record (`outlasted_s`)."""
        record = self.record(item.case.name, item.baseline)
        if record is not None:
            record["outlasted_s"] = round(max(record.get("outlasted_s") or 0.0, seconds), 1)
            self.save()

    def skipped_now(self, item) -> bool:
        """Whether this session already recorded `item` not measured for lack of time (a stage
        that ran out, or an item that needs more than was left): not to be retried until the
        next run."""
        r = self.record(item.case.name, item.baseline)
        return (r is not None and r["status"] == "skipped" and r.get("session") == self.session
                and r.get("skip_reason") in (SKIP_REASONS["time"], SKIP_REASONS["outlasts"]))

    def record(self, case: str, baseline: str) -> dict | None:
        return next((r for r in self.results if (r["case"], r["baseline"]) == (case, baseline)), None)

    def requeue(self, keys: set[tuple[str, str]], redo: bool = False) -> int:
        """Mark the records among `keys` that failed (n/a, timeout, fallback), or with `redo`
        every final one (ok and wrong too), skipped, so the run measures them again; the error
        field says what each was. A record queued by `redo` keeps the one it held (`replaced`):
        marked not measured for lack of time, it gets that back, so a --redo that runs out of
        time loses nothing."""
        statuses = FINAL if redo else ("n/a", "timeout", "fallback")
        n = 0
        for r in self.results:
            if (r["case"], r["baseline"]) in keys and r["status"] in statuses:
                was = f"{r['status']}: {r.get('error')}"
                if r["status"] == "ok":
                    was = f"ok: {r.get('time_ms')} ms as run, {r.get('graph_ms')} ms under CUDA graphs"
                reason = SKIP_REASONS["redo" if redo else "retry"]
                if redo:
                    r["replaced"] = {k: v for k, v in r.items() if k != "replaced"}
                r.update(status="skipped", skip_reason=reason, error=f"was {was}")
                n += 1
        self.save()
        return n

    def add_session(self, session: dict) -> None:
        self.data["sessions"].append(session)
        self.save()

    def stage_run(self, stage: str, **info) -> None:
        """Start (or, called again in the same session, update) this session's run of a stage."""
        runs = self.data.setdefault("stages", {}).setdefault(stage, {}).setdefault("runs", [])
        if not runs or runs[-1].get("session") != self.session:
            runs.append({"session": self.session})
        runs[-1].update(info)
        self.save()

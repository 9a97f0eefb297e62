"""The results file, `<out>/results.json`: rewritten atomically after every measurement, so a
run that dies keeps everything measured before it, and a rerun with `--resume` continues.

Schema (`"schema": "evt-bench/1"`):
    config    dtype, device, gpu, small: what every record was measured with (checked on resume)
    env       GPU (name, SMs, L2, clocks, driver via nvidia-smi), torch/CUDA/triton/CUTLASS/evt
              versions, git commit, when the file was created
    sessions  one entry per invocation: time, argv, git commit
    stages    per stage: started, finished, wall_s, outcome
    results   one record per (case, baseline), see `RECORD_FIELDS`
"""

from __future__ import annotations

import json
import os
import sys
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
    "status",  # ok | wrong (checked, not timed) | n/a (raised; see error) | skipped (stage cut short)
    "error",
    "rel_err",
    "tolerance",
    "time_ms",
    "tflops",
    "gbps",
    "flops",
    "bytes",
    "input_sets",
    "timer",
    "compile_cold_s",
    "compile_warm_s",
    "peak_mem_bytes",
    "notes",
    "finished",
)


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

    def add(self, record: dict) -> None:
        """Append a record, replacing an earlier one of the same case and baseline."""
        key = (record["case"], record["baseline"])
        self.data["results"] = [r for r in self.results if (r["case"], r["baseline"]) != key]
        self.results.append(record)
        self.save()

    def requeue(self, keys: set[tuple[str, str]]) -> int:
        """Mark the n/a records among `keys` skipped, so the run measures them again."""
        n = 0
        for r in self.results:
            if (r["case"], r["baseline"]) in keys and r["status"] == "n/a":
                r.update(status="skipped", error=f"queued again by --retry; was: {r['error']}")
                n += 1
        self.save()
        return n

    def add_session(self) -> None:
        git = env.git_info()
        self.data["sessions"].append({"time": env.now(), "argv": sys.argv, "git": git})
        self.save()

    def mark_stage(self, stage: str, **info) -> None:
        self.data["stages"].setdefault(stage, {}).update(info)
        self.save()

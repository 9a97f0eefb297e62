"""Where each result came from: one session per invocation, and the warning a merged report needs.

A results folder is continued across invocations (`--resume`, the device machine's calls), each
possibly on a fresh machine, at another commit, with other limits. Every invocation appends a
session (`session`), every record names its session and commit, and the report says when the
records come from more than one session or commit (`merged_note`, `sessions_table`).
"""

from __future__ import annotations

import argparse
import platform
import sys

import torch

from evt.bench import env

LIMITS = ("part", "time_budget", "stage_timeout", "item_timeout", "step_item_timeout", "baselines",
          "only", "quick")


def session(args: argparse.Namespace) -> dict:
    """This invocation: when, what it was asked, which code, which machine and clocks."""
    gpu = env.gpu_info(args.device) or {}
    smi = gpu.get("nvidia_smi") or {}
    return {
        "time": env.now(),
        "argv": sys.argv,
        "git": env.git_info(),
        "evt_source": env.source_fingerprint(),
        "host": platform.node(),
        "gpu": gpu.get("name"),
        "driver": smi.get("driver_version"),
        "clocks": {k: smi.get(k) for k in ("clocks.sm", "clocks.max.sm", "clocks.mem")},
        "torch": torch.__version__,
        "cutlass": env.version("nvidia-cutlass"),
        "limits": {k: getattr(args, k, None) for k in LIMITS},
    }


def commit_of(s: dict) -> str:
    commit = (s.get("git") or {}).get("commit") or "unknown"
    return commit[:12] + ("+changes" if (s.get("git") or {}).get("dirty") else "")


def measuring(data: dict) -> list[int]:
    """Indices of the sessions whose records are in the file (all of them for files written
    before records named their session)."""
    used = {r.get("session") for r in data["results"]}
    if None in used:
        return list(range(len(data.get("sessions", []))))
    return sorted(used)


def merged_note(data: dict) -> str:
    """'' for one session; else which sessions and commits the records come from."""
    sessions = data.get("sessions", [])
    idx = [i for i in measuring(data) if i < len(sessions)]
    if len(idx) <= 1:
        return ""
    commits = sorted({commit_of(sessions[i]) for i in idx})
    sources = {sessions[i].get("evt_source") for i in idx} - {None}
    text = f"These results were measured in {len(idx)} sessions"
    if len(commits) > 1 or len(sources) > 1:
        what = f"{len(commits)} commits ({', '.join(commits)})" if len(commits) > 1 else ""
        what = what or f"{len(sources)} versions of evt's sources"
        return (
            f"**Warning: merged results.** {text} at {what}: a ratio between baselines "
            "measured in different sessions compares different code (and possibly machines "
            "and clocks). See the sessions table at the end."
        )
    return f"**Merged results.** {text}, all at commit {commits[0]}; see the sessions table."


def sessions_table(data: dict, table) -> str:
    sessions = data.get("sessions", [])
    if len(sessions) <= 1:
        return ""
    count = {i: 0 for i in range(len(sessions))}
    for r in data["results"]:
        if r.get("session") in count:
            count[r["session"]] += 1
    rows = [
        [
            str(i),
            s.get("time", "?"),
            commit_of(s),
            s.get("evt_source") or "?",
            s.get("host") or "?",
            f"{s.get('gpu') or '?'}, driver {s.get('driver') or '?'}, SM clock "
            f"{(s.get('clocks') or {}).get('clocks.sm') or '?'}",
            " ".join(a for a in (s.get("argv") or [])[1:]),
            str(count[i]) if any(r.get("session") is not None for r in data["results"]) else "?",
        ]
        for i, s in enumerate(sessions)
    ]
    head = ["#", "time", "commit", "evt sources", "host", "GPU", "options", "records"]
    return "## Sessions\n\n" + table(head, rows)

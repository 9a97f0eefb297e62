"""`evt cache`: show the kernel cache (`evt cache`, `evt cache info [--verbose]`) or empty it
(`evt cache clear`). The layout and its locking are in `evt.runtime.cache`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from evt.runtime import cache


@dataclass(frozen=True)
class Entry:
    key: str
    name: str  # the kernel's C name, k<16 hex>
    region: str  # the region it was first built for
    bytes: int
    age_s: float
    intact: bool  # meta.json matches kernel.so (a damaged entry is rebuilt on next use)


def entries(root: Path | None = None) -> list[Entry]:
    """The finished entries under the cache root, newest first."""
    root = root or cache.root()
    out = []
    for d in root.iterdir():
        if not cache.is_entry(d):
            continue
        try:
            meta = json.loads((d / cache.META).read_text())
            built = (d / cache.META).stat().st_mtime
        except (OSError, ValueError):
            meta, built = {}, d.stat().st_mtime
        intact = cache.read_meta(d.name) is not None
        out.append(Entry(d.name, meta.get("name", "?"), meta.get("region", "?"),
                         cache.tree_bytes(d), time.time() - built, intact))  # fmt: skip
    return sorted(out, key=lambda e: e.age_s)


def info(verbose: bool = False) -> str:
    root = cache.root()
    found = entries(root)
    failed = root / cache.FAILED
    n_failed = len(list(failed.iterdir())) if failed.is_dir() else 0
    partial = [p for p in root.iterdir() if p.name.startswith((".tmp-", ".trash-"))]
    total = cache.tree_bytes(root)
    lines = [
        f"evt kernel cache: {root}",
        f"  {len(found)} kernel{'s' * (len(found) != 1)}, {human_bytes(total)} in all"
        f" ({n_failed} failed build{'s' * (n_failed != 1)} kept under failed/,"
        f" {len(partial)} build{'s' * (len(partial) != 1)} in progress or left over)",
    ]
    if verbose and found:
        lines.append(f"  {'kernel':<18} {'region':<28} {'size':>9} {'age':>8}")
        for e in found:
            flag = "" if e.intact else "  damaged: rebuilt on next use"
            lines.append(f"  {e.name:<18} {e.region:<28} {human_bytes(e.bytes):>9} "
                         f"{human_age(e.age_s):>8}{flag}")  # fmt: skip
    return "\n".join(lines)


def clear() -> str:
    root, n = cache.root(), len(entries())

    def waiting() -> None:
        print("evt cache clear: waiting for builds in progress in other processes...",
              file=sys.stderr, flush=True)  # fmt: skip

    freed = cache.clear(wait=waiting)
    return f"evt cache: removed {n} kernel{'s' * (n != 1)} ({human_bytes(freed)}) from {root}"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def human_age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _run(args: argparse.Namespace) -> int:
    print(clear() if args.action == "clear" else info(args.verbose))
    return 0


def add_parser(sub) -> None:
    """The `evt cache` subcommand, on the `evt` command's subparsers."""
    c = sub.add_parser("cache", help="show the kernel cache (size, entries) or clear it")
    c.add_argument("action", nargs="?", choices=("info", "clear"), default="info",
                   help="info (default): root, kernels, size; clear: remove everything")  # fmt: skip
    c.add_argument("-v", "--verbose", action="store_true",
                   help="info: one line per kernel (name, region, size, age)")  # fmt: skip
    c.set_defaults(fn=_run)

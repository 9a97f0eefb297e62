"""The one levelled debug switch, `EVT_DEBUG`.

| level | shows |
|---|---|
| 1 | region summary per graph, partitioner statistics, fallbacks |
| 2 | the graph after each pass |
| 3 | the partitioner's model file (issue: ILP) |
| 4 | generated source paths |
| 5 | compiler command lines |
"""

from __future__ import annotations

import os
import sys


def level() -> int:
    try:
        return int(os.environ.get("EVT_DEBUG", "0"))
    except ValueError:
        return 0


def log(at: int, msg: str) -> None:
    """Print `msg` to stderr when EVT_DEBUG >= at."""
    if level() >= at:
        print(f"[evt] {msg}", file=sys.stderr, flush=True)

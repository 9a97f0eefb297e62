#!/usr/bin/env python3
"""Run evt's benchmark harness from a checkout: `python benchmarks/run.py [evt bench options]`.

The same as `evt bench` and `python -m evt.bench`; see benchmarks/README.md.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evt.bench.cli import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run())

"""`python -m evt.bench [options]`: the same as `evt bench` (each stage's child process runs this)."""

import sys

from evt.bench.cli import run

sys.exit(run())

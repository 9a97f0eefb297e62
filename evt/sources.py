"""The hash of evt's own sources (Python, templates, headers): part of every key under which a
result of evt's code is cached outside the kernel cache (whose entries are keyed by the kernel
source itself): Inductor's FX graph and AOTAutograd caches (the pass uuid, `evt.backend`) and
max-autotune's decisions (`evt.runtime.autotune.decision_key`), so neither replays what an older
evt produced (a development install keeps one version string across every change)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import evt


@functools.cache
def source_hash() -> str:
    h = hashlib.sha256(evt.__version__.encode())
    root = Path(evt.__file__).parent
    for f in sorted(root.rglob("*")):
        if f.suffix in (".py", ".j2", ".h", ".inc", ".cpp"):
            h.update(f.read_bytes())
    return h.hexdigest()[:16]

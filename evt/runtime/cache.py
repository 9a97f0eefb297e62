"""The persistent kernel cache: one directory per content key, written atomically, built once.

Layout under the root (`$EVT_CACHE_DIR`, else `$XDG_CACHE_HOME/evt`, else `~/.cache/evt`):

    <key>/kernel.cu, kernel.so, build.log, meta.json   a finished entry
    failed/<key>/kernel.cu, build.log                   the last failed build of <key>
    locks/<key>.lock                                    one builder per key (`fcntl.flock`)
    .tmp-*/                                             builds in progress

An entry is built in a temporary directory and published with one `os.rename`, so a reader sees
either no entry or a whole one. `meta.json` (written last) holds the sha256 of `kernel.so`; an
entry whose library does not match it is rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from evt import debug

SO, CU, LOG, META = "kernel.so", "kernel.cu", "build.log", "meta.json"


def root() -> Path:
    env = os.environ.get("EVT_CACHE_DIR")
    if env:
        path = Path(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
        path = Path(base) / "evt"
    path.mkdir(parents=True, exist_ok=True)
    return path


def entry_dir(key: str) -> Path:
    return root() / key


def failed_dir(key: str) -> Path:
    return root() / "failed" / key


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_meta(key: str) -> dict | None:
    """The entry's integrity record, or None when the entry is missing or broken."""
    try:
        meta = json.loads((entry_dir(key) / META).read_text())
        ok = meta["key"] == key and file_sha256(entry_dir(key) / SO) == meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return meta if ok else None


def lookup(key: str) -> Path | None:
    """The library of a finished, intact entry."""
    return entry_dir(key) / SO if read_meta(key) is not None else None


@contextlib.contextmanager
def locked(key: str) -> Iterator[None]:
    """Hold the key's build lock (processes and threads alike: one open file each)."""
    locks = root() / "locks"
    locks.mkdir(exist_ok=True)
    with open(locks / f"{key}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def get_or_build(key: str, produce: Callable[[Path], None], meta: dict | None = None) -> Path:
    """The library for `key`, building it at most once across processes.

    `produce(tmp)` writes `kernel.so` (and whatever else it likes) into the empty directory `tmp`;
    if it raises, `tmp` is kept as `failed_dir(key)` and the error propagates."""
    found = lookup(key)
    if found is not None:
        return found
    with locked(key):
        found = lookup(key)  # another process may have built it while we waited
        if found is not None:
            return found
        return _build(key, produce, meta or {})


def _build(key: str, produce: Callable[[Path], None], meta: dict) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:16]}-", dir=root()))
    try:
        produce(tmp)
        record = {**meta, "key": key, "sha256": file_sha256(tmp / SO)}
        (tmp / META).write_text(json.dumps(record, indent=1, sort_keys=True))
    except BaseException:
        _move_aside(tmp, failed_dir(key))
        raise
    _discard(entry_dir(key))  # a corrupted entry; we hold the lock, so nobody is building it
    os.rename(tmp, entry_dir(key))
    debug.log(4, f"cached kernel {entry_dir(key)}")
    return entry_dir(key) / SO


def _move_aside(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    _discard(dst)
    os.rename(src, dst)


def _discard(path: Path) -> None:
    """Remove a directory without ever exposing it half-deleted under its own name."""
    if not path.exists():
        return
    trash = Path(tempfile.mkdtemp(prefix=".trash-", dir=root()))
    os.rename(path, trash / "old")
    shutil.rmtree(trash, ignore_errors=True)

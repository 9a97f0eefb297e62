"""The persistent kernel cache: one directory per content key, written atomically, built once.

Layout under the root (`$EVT_CACHE_DIR`, else `$XDG_CACHE_HOME/evt`, else `~/.cache/evt`):

    <key>/kernel.cu, kernel.so, build.log, meta.json   a finished entry
    failed/<key>/kernel.cu, build.log                   the last failed build of <key>
    locks/<key>.lock                                    one builder per key (`fcntl.flock`)
    .lock                                               builders share it, `clear` takes it alone
    .tmp-*/                                             builds in progress (or left by a killed one)
    .trash-*/                                           directories being removed

An entry is built in a temporary directory and published with one `os.rename`, so a reader sees
either no entry or a whole one; it is removed the same way (renamed away, then deleted).
`meta.json` (written last) holds the sha256 of `kernel.so`; an entry whose library does not match
it is rebuilt. `.tmp-*` and `.trash-*` directories older than `STALE_S` belong to no live build
(nvcc is stopped after 30 minutes) and are swept once per process before its first build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from evt import debug

SO, CU, LOG, META = "kernel.so", "kernel.cu", "build.log", "meta.json"
ROOT_LOCK = ".lock"
STALE_S = 3600.0
_swept: set[Path] = set()  # roots this process has swept


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


FAILED = "failed"  # the folder of failed builds, beside the entries


def is_entry(path: Path) -> bool:
    """Whether `path`, in a cache root or an archive unpacked elsewhere, is an entry: a folder
    named by its sha256 key (not failed/, locks/, nor a build in progress or being removed)."""
    name = path.name
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name) and path.is_dir()


def failed_dir(key: str) -> Path:
    return root() / FAILED / key


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
def _flock(path: Path, mode: int, wait: Callable[[], object] = lambda: None) -> Iterator[None]:
    """`fcntl.flock` on `path` (one open file each: processes and threads alike); `wait()` is
    called first when the lock is taken."""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            wait()
            fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def locked(key: str) -> Iterator[None]:
    """Hold the key's build lock, inside the cache's shared lock (so `clear` waits for us)."""
    with _flock(root() / ROOT_LOCK, fcntl.LOCK_SH):
        locks = root() / "locks"
        locks.mkdir(exist_ok=True)
        with _flock(locks / f"{key}.lock", fcntl.LOCK_EX):
            yield


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
    if root() not in _swept:
        _swept.add(root())
        sweep()
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


def sweep(max_age: float = STALE_S) -> list[Path]:
    """Remove `.tmp-*` and `.trash-*` directories older than `max_age` seconds (killed builds)."""
    now, gone = time.time(), []
    for p in list(root().iterdir()):
        try:
            stale = p.name.startswith((".tmp-", ".trash-")) and now - p.stat().st_mtime > max_age
        except OSError:  # removed meanwhile
            continue
        if stale:
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p)
    return gone


def clear(wait: Callable[[], object] = lambda: None) -> int:
    """Remove every entry, failed build and leftover directory, once no other process is building
    (`wait()` is called if one is); the bytes freed."""
    with _flock(root() / ROOT_LOCK, fcntl.LOCK_EX, wait):
        doomed = [p for p in root().iterdir() if p.name != ROOT_LOCK]
        freed = sum(tree_bytes(p) for p in doomed)
        for p in doomed:
            _discard(p) if p.is_dir() else p.unlink()
    return freed


def tree_bytes(path: Path) -> int:
    files = path.rglob("*") if path.is_dir() else [path]
    return sum(f.stat().st_size for f in files if f.is_file() and not f.is_symlink())

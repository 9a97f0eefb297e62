"""Progress of background kernel builds, and of max-autotune's measurements (`Decisions`), on
stderr.

A batch is the kernels that compile at the same time (it ends when none is left). A batch of one
shows nothing; from the second kernel on, the batch is shown: on a terminal as one line that
updates in place (tqdm's bar when tqdm is installed), elsewhere (logs, CI, pytest) as one line per
finished kernel. `EVT_PROGRESS=0` hides it, `EVT_PROGRESS=1` shows a batch of one too.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any, TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None):
        self._stream = stream
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.total = self.done = self.failed = 0
        self.start = time.monotonic()
        self._bar: Any = None  # a tqdm bar, when one is shown
        self._shown = False

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr

    def add(self) -> None:
        """A kernel was queued for compiling."""
        with self._lock:
            if self.total == self.done:
                self._reset()
            self.total += 1
            if self._show():
                self._safely(self._draw, "")

    def finish(self, label: str, seconds: float | None, ok: bool) -> None:
        """A queued kernel finished (built, failed, or found built by another process)."""
        with self._lock:
            self.done += 1
            self.failed += not ok
            if self._show():
                took = "" if seconds is None else f" in {seconds:.1f} s"
                self._safely(self._draw, f"{label}{took}{'' if ok else ' FAILED'}")
            if self.done == self.total and self._shown:
                self._safely(self._end)

    @staticmethod
    def _safely(fn, *args) -> None:
        """A closed or broken stderr must never fail a build."""
        with contextlib.suppress(OSError, ValueError):
            fn(*args)

    def _show(self) -> bool:
        return self._shown or _shown_for(self.total)

    def _draw(self, last: str) -> None:
        self._shown = True
        if not _is_tty(self.stream):
            if last:  # one line per finished kernel
                print(f"evt: compiled kernel {self.done}/{self.total}: {last}", file=self.stream,
                      flush=True)  # fmt: skip
            return
        if self._bar is None:
            self._bar = _tqdm(self.stream)
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.n = self.done
            self._bar.set_postfix_str(last, refresh=True)
            return
        width, frac = 20, self.done / self.total
        bar = "#" * round(width * frac) + "-" * (width - round(width * frac))
        line = f"evt: compiling kernels [{bar}] {self.done}/{self.total} {self._elapsed()}  {last}"
        print(f"\r{line[:119]:<119}", end="", file=self.stream, flush=True)

    def _end(self) -> None:
        failed = f", {self.failed} failed" if self.failed else ""
        summary = f"evt: compiled {self.total} kernels in {self._elapsed()}{failed}"
        if self._bar is not None:
            self._bar.close()
        elif _is_tty(self.stream):
            print(file=self.stream)
        print(summary, file=self.stream, flush=True)

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self.start)
        return f"{s // 60}m{s % 60:02d}s"


def _shown_for(count: int) -> bool:
    """Whether a batch of `count` (kernels, or measured regions) is shown: `EVT_PROGRESS=0`
    never, `EVT_PROGRESS=1` always, else from the second on."""
    setting = os.environ.get("EVT_PROGRESS", "")
    return setting != "0" and (count >= 2 or setting == "1")


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def _tqdm(stream: TextIO) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=0, desc="evt: compiling kernels", unit="kernel", file=stream, leave=False)


PROGRESS = Progress()


class Decisions:
    """max-autotune's measured decisions (`evt.runtime.autotune`), one line each on stderr. Each
    measured region waits for Inductor to compile its unfused path (9-32 s a region under
    Inductor's max-autotune on the H200, session 36) and times its candidates, so a training step
    otherwise sits silent for minutes (GPT-2's: 248 s). Shown as kernel builds are: a batch (the
    regions one compile measures, counted by `begin`) of one shows nothing unless `EVT_PROGRESS=1`;
    `EVT_PROGRESS=0` hides it."""

    def __init__(self, stream: TextIO | None = None):
        self._stream = stream
        self.total = self.done = 0

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr

    def begin(self, total: int) -> None:
        """A compile is about to measure `total` distinct regions."""
        self.total, self.done = total, 0
        if total and self._show():
            self._print(f"evt: max-autotune: measuring {total} region{'s' * (total != 1)} (each: its "
                        "unfused path compiled by Inductor, its candidate kernels timed)")  # fmt: skip

    def step(self, text: str) -> None:
        """One region was measured: `text` says what was chosen and what it took."""
        self.done += 1
        self.total = max(self.total, self.done)  # measured without `begin` (no prepare hook)
        if self._show():
            self._print(f"evt: max-autotune {self.done}/{self.total}: {text}")

    def _show(self) -> bool:
        return _shown_for(self.total)

    def _print(self, line: str) -> None:
        Progress._safely(lambda: print(line, file=self.stream, flush=True))


DECISIONS = Decisions()

"""What a command draws on a terminal besides its result: a progress bar, a spinner.

Both are one status line on standard error (``service.logs.live_line``: log lines are written above
it, never into it) and only when standard error is a terminal and the command was not asked for
``--json``: a script or a log collector sees log lines only. ``progress_bar`` is the
``progress(done, total)`` callback of a Spark job (``SparkRunner``), ``iter_progress`` walks a list
(``hoodied read``'s file slices), ``spinner`` turns while something of unknown length runs (a Spark
session's start).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TypeVar

from hoodied.hoodie.human import format_age
from hoodied.service.logs import LiveLine, live_line
from hoodied.service.spark_jobs import Progress

__all__ = ["interactive", "iter_progress", "progress_bar", "spinner"]

T = TypeVar("T")

_BAR_WIDTH = 30
_FRAMES = "|/-\\"
_SPIN_S = 0.125


def interactive(as_json: bool = False) -> bool:
    """Whether a status line may be drawn: standard error is a terminal and no ``--json`` was asked."""
    return not as_json and sys.stderr.isatty()


def _bar_text(label: str, done: int, total: int) -> str:
    total = max(total, 1)
    filled = min(_BAR_WIDTH, _BAR_WIDTH * done // total)
    return f"{label}  [{'#' * filled}{'-' * (_BAR_WIDTH - filled)}]  {done}/{total}"


@contextlib.contextmanager
def progress_bar(label: str, enabled: bool) -> Iterator[Progress | None]:
    """A bar of operations done / total while the block runs (``None`` when not ``enabled``)."""
    if not enabled:
        yield None
        return
    with live_line() as line:
        line.show(_bar_text(label, 0, 1))

        def update(done: int, total: int) -> None:
            line.show(_bar_text(label, done, total))

        yield update


def iter_progress(items: list[T], label: str, enabled: bool) -> Iterator[T]:
    """``items`` one by one, with a bar of how many were taken (when ``enabled``)."""
    if not enabled:
        yield from items
        return
    with live_line() as line:
        for done, item in enumerate(items):
            line.show(_bar_text(label, done, len(items)))
            yield item
        line.show(_bar_text(label, len(items), len(items)))


def _spin(line: LiveLine, text: str, started: float, stop: threading.Event) -> None:
    frame = 1
    while not stop.wait(_SPIN_S):
        line.show(f"{_FRAMES[frame % len(_FRAMES)]} {text} {format_age(time.monotonic() - started)}")
        frame += 1


@contextlib.contextmanager
def spinner(text: str, enabled: bool) -> Iterator[None]:
    """A turning ``text`` with the seconds elapsed while the block runs (nothing when not ``enabled``)."""
    if not enabled:
        yield
        return
    stop = threading.Event()
    with live_line() as line:
        started = time.monotonic()
        line.show(f"{_FRAMES[0]} {text}")  # at once: a start that takes no time still says what it did
        turning = threading.Thread(target=_spin, args=(line, text, started, stop), name="hoodied-spinner",
                                   daemon=True)
        turning.start()
        try:
            yield
        finally:
            stop.set()
            turning.join()

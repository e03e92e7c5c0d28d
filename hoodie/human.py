"""How byte counts and durations read to a person: the one size and age formatter of every summary.

``format_size`` picks the largest binary unit that keeps the number at 1 or more (``41.8 KB``,
``1.5 GB``; bytes as a whole number), so a small size never reads ``0.0 MB`` beside another
written in KB. ``format_age`` writes a duration with the two largest units that matter
(``45 s``, ``3 min 20 s``, ``5 h 12 min``, ``339 d``), never a raw count of seconds. Both are pure
and sit at the bottom layer so the planners', the executors' and the commands' lines agree.
"""

from __future__ import annotations

import math

__all__ = ["format_age", "format_size"]

_SIZE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")

# (unit, seconds in it), largest first
_AGE_UNITS = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))


def format_size(num_bytes: float) -> str:
    """``num_bytes`` in binary units (1 KB = 1024 B): ``512 B``, ``41.8 KB``, ``3.0 MB``."""
    if num_bytes < 0 or math.isnan(num_bytes):
        raise ValueError(f"a size cannot be {num_bytes}")
    value = float(num_bytes)
    for unit in _SIZE_UNITS:
        if unit == "B" and value < 1024:
            return f"{value:.0f} B"
        # rounding to one decimal must not print "1024.0 KB" for what is 1.0 MB
        if round(value, 1) < 1024 or unit == _SIZE_UNITS[-1]:
            return f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable: the last unit returns")  # pragma: no cover


def format_age(seconds: float) -> str:
    """A duration for a person: under a minute in seconds (``0.4 s`` below 10 s, whole seconds
    above), then the two largest units (``3 min 20 s``, ``5 h 12 min``), days alone from 10 days
    on (``339 d``). A negative duration (a clock ahead of ours) reads as ``0 s``."""
    if math.isnan(seconds):
        raise ValueError("a duration cannot be NaN")
    if seconds < 10:
        return f"{seconds:.1f} s" if seconds >= 0.05 else "0 s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole >= 10 * 86_400:
        return f"{whole // 86_400} d"
    parts: list[str] = []
    for unit, size in _AGE_UNITS:
        if whole >= size or parts:
            parts.append(f"{whole // size} {unit}")
            whole %= size
        if len(parts) == 2:
            break
    if parts[-1].startswith("0 "):
        parts.pop()
    return " ".join(parts)

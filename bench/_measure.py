"""CPU seconds, repeats and medians shared by the benchmarks.

Wall time on a shared machine moves with whatever else runs; CPU seconds move far less, and a
ratio against a reference measured in the same run (alternately with it) moves less still. So
every benchmark reports, for each measured step, the median and the range (lowest, highest) of
wall seconds, CPU seconds and both ratios over its repeats.

Two CPU clocks:

* ``self_cpu``: this process (user + system, ``getrusage(RUSAGE_SELF)``), every thread of it
  (pyarrow's and hudi-rs's native threads included). For work done in this process.
* ``tree_cpu``: this process and every live descendant (Spark's JVM and its Python workers),
  read from ``/proc/<pid>/stat``; each process also counts the children it has reaped
  (``cutime``/``cstime``), so a Spark Python worker that ended during the step is still
  counted, by the process that waited for it. For work handed to other processes.
  ``getrusage(RUSAGE_CHILDREN)`` would not do: it sees only children that have ended and
  been waited for, and Spark's JVM lives until this process exits.

``phase_shares`` splits a profiled run (``cProfile`` with ``time.process_time`` as its clock,
so native threads count) into named phases by the cumulative time of the functions that own
them.
"""

from __future__ import annotations

import os
import pstats
import resource
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK")


def self_cpu() -> float:
    """CPU seconds of this process so far (every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _proc_stats() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, CPU ticks of the process and of its reaped children, command name)."""
    out: dict[int, tuple[int, int, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                raw = f.read()
        except OSError:  # ended while we looked
            continue
        # the command name (field 2) may hold spaces and parentheses: split after its last ')'
        comm = raw[raw.index(b"(") + 1 : raw.rindex(b")")].decode(errors="replace")
        fields = raw[raw.rindex(b")") + 2 :].split()
        ppid = int(fields[1])
        utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
        out[int(entry.name)] = (ppid, utime + stime + cutime + cstime, comm)
    return out


def descendants(root: int | None = None) -> dict[int, str]:
    """pid -> command name of every live descendant of ``root`` (default: this process)."""
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, str] = {}
    todo = [root if root is not None else os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out[child] = stats[child][2]
                todo.append(child)
    return out


def tree_cpu_by_command(root: int | None = None, exclude: Collection[int] = ()) -> dict[str, float]:
    """``tree_cpu`` split by command name (``java``, ``python``...): where a step's CPU went."""
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    todo = [root if root is not None else os.getpid()]
    ticks: dict[str, int] = {}
    while todo:
        pid = todo.pop()
        if pid in stats and pid not in exclude:
            _, used, comm = stats[pid]
            ticks[comm] = ticks.get(comm, 0) + used
            todo.extend(children.get(pid, ()))
    return {comm: n / _TICKS for comm, n in ticks.items()}


def tree_cpu(root: int | None = None, exclude: Collection[int] = ()) -> float:
    """CPU seconds of ``root`` (default: this process) and all its live descendants so far.

    The processes in ``exclude`` and their descendants are left out (a server the step talks to).
    """
    return sum(tree_cpu_by_command(root, exclude).values())


@dataclass
class Runs:
    """Wall and CPU seconds of the timed runs of one step."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @contextmanager
    def measure(self, clock: Callable[[], float] = self_cpu) -> Iterator[None]:
        """Time the body: wall seconds and CPU seconds by ``clock``."""
        cpu0, wall0 = clock(), time.perf_counter()
        yield
        self.wall.append(time.perf_counter() - wall0)
        self.cpu.append(clock() - cpu0)


def median_range(out: dict[str, Any], key: str, values: Sequence[float], digits: int = 3) -> None:
    """``out[key]`` = the median of ``values``, ``out[key + "_range"]`` = [lowest, highest]."""
    out[key] = round(statistics.median(values), digits)
    out[f"{key}_range"] = [round(min(values), digits), round(max(values), digits)]


def figures(out: dict[str, Any], prefix: str, mine: Runs, theirs: Runs) -> None:
    """Medians and ranges of both steps and of the per-repeat ratios mine / theirs."""
    median_range(out, f"{prefix}seconds", mine.wall)
    median_range(out, f"{prefix}cpu_seconds", mine.cpu)
    median_range(out, f"{prefix}reference_seconds", theirs.wall)
    median_range(out, f"{prefix}reference_cpu_seconds", theirs.cpu)
    for name, a, b in (("ratio", mine.wall, theirs.wall), ("cpu_ratio", mine.cpu, theirs.cpu)):
        if b and all(x > 0 for x in b):
            median_range(out, f"{prefix}{name}", [x / y for x, y in zip(a, b, strict=True)])
        else:
            out[f"{prefix}{name}"] = None


def _code_key(fn: Callable[..., Any]) -> tuple[str, int, str]:
    code = fn.__code__
    return code.co_filename, code.co_firstlineno, code.co_name


def phase_shares(
    stats: pstats.Stats, phases: Mapping[str, Sequence[Callable[..., Any]]], total: float
) -> dict[str, float]:
    """Share of ``total`` spent in each phase: the cumulative time of its functions, summed.

    The functions of one phase must not call each other (their times would be counted twice);
    what no phase claims is reported as ``other``.
    """
    table: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    shares: dict[str, float] = {}
    for name, functions in phases.items():
        seconds = sum(table[key][3] for key in map(_code_key, functions) if key in table)
        shares[name] = round(seconds / total, 3) if total > 0 else 0.0
    shares["other"] = round(max(0.0, 1.0 - sum(shares.values())), 3)
    return shares

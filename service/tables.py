"""Finding tables and polling one table: the blocking half of the loop, run in worker threads.

Discovery walks a root folder (``os.scandir``, local file systems) and reports every folder
holding ``.hoodie/hoodie.properties`` (or its ``.backup``) without descending into tables
(their sub-folders are partitions) or hidden folders.

A poll is cheap by construction: one names-only listing of the timeline folder; only when
the names differ from the last poll is the timeline loaded again (``Timeline.load``: one
listing with sizes and times, file names parsed) and ``hoodie.properties`` re-read. Then one
listing of ``.hoodie/.heartbeat`` when an inflight table service needs its heartbeat
checked. Plans and commit metadata are not read here, except the requested file of a
pending v6 replacecommit (to tell a clustering from an insert-overwrite). Planner triggers
(``PlannerSpec.due``) look at the timeline only.

Why the names-only listing: measured on this machine, ``Timeline.load`` of a 200-instant
timeline (600 files) takes about 4.6 ms, a third of it in one ``stat`` per file and a third
in parsing names; listing the names alone takes a small fraction of that, so an unchanged
table costs little more than one ``listdir``, and cost grows with new instants, not with
history. ``Storage`` has no names-only listing yet, so local tables use ``os.listdir`` on the
timeline folder (read-only, names only); other storages fall back to ``Storage.list``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import tzinfo
from urllib.parse import unquote, urlparse

from hoodie.heartbeat import HEARTBEAT_FOLDER
from hoodie.instant import Action, Instant, State
from hoodie.properties import TableConfig, load_table_config
from hoodie.storage import Storage
from hoodie.timeline import Timeline, instant_time_to_datetime
from service.config import HeartbeatConfig, Policy
from service.executors import Registry, service_of

__all__ = ["PendingItem", "PollResult", "discover_tables", "instant_epoch", "poll_table"]


@dataclass(frozen=True, slots=True)
class PendingItem:
    """A pending table-service instant as the poll saw it."""

    instant: Instant
    service: str | None
    heartbeat_alive: bool
    """Inflight only: its Hudi heartbeat is fresh, so another executor is working on it."""
    requested_epoch: float


@dataclass(slots=True)
class PollResult:
    config: TableConfig
    timeline: Timeline
    signature: int
    """Changes whenever an instant appears, moves state or goes."""
    names: frozenset[str] = frozenset()
    """The timeline folder's names at this poll (an unchanged folder reuses the timeline)."""
    pending: list[PendingItem] = field(default_factory=list)
    due: dict[str, str] = field(default_factory=dict)
    """service -> why planning should be tried now."""
    delta_commits_since_compaction: int | None = None
    seconds: float = 0.0


def instant_epoch(requested_time: str, tz: tzinfo) -> float:
    try:
        return instant_time_to_datetime(requested_time, tz).timestamp()
    except Exception:  # an odd MDT-style time: age unknown rather than a failed poll
        return time.time()


def _names(storage: Storage, folder: str) -> frozenset[str]:
    local = storage.local_path(folder)
    if local is not None:
        try:
            return frozenset(os.listdir(local))
        except FileNotFoundError:
            return frozenset()
    return frozenset(info.name for info in storage.list(folder))


def _heartbeats(storage: Storage) -> dict[str, int]:
    prefix = HEARTBEAT_FOLDER + "/"
    return {
        info.path[len(prefix):]: info.mtime_ms for info in storage.list(HEARTBEAT_FOLDER) if not info.is_dir
    }


def _delta_commits(timeline: Timeline, config: TableConfig) -> int | None:
    if not config.is_mor:
        return None
    last = timeline.latest_completed((Action.COMPACTION,))
    since = last.requested_time if last is not None else ""
    return sum(
        1 for i in timeline.instants
        if i.is_completed and i.action is Action.DELTA_COMMIT and i.requested_time > since
    )


def poll_table(
    storage: Storage,
    cached: PollResult | None,
    policy: Policy,
    registry: Registry,
    heartbeat: HeartbeatConfig,
    *,
    now_ms: int | None = None,
) -> PollResult:
    """Load the table's timeline and find its pending services and due plans (errors propagate)."""
    started = time.monotonic()
    if cached is not None:
        names = _names(storage, cached.config.timeline_path)
        if names == cached.names:
            config, timeline, signature = cached.config, cached.timeline, cached.signature
        else:
            # the timeline moved: re-read the table config too (an upgrade, or a file gone bad)
            config = load_table_config(storage)
            names = _names(storage, config.timeline_path)
            timeline = Timeline.load(storage, config)
            signature = hash(names)
    else:
        config = load_table_config(storage)
        names = _names(storage, config.timeline_path)
        timeline = Timeline.load(storage, config)
        signature = hash(names)
    result = PollResult(config, timeline, signature, names)
    services = timeline.pending_table_services()
    beats: dict[str, int] | None = None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    expiry = heartbeat.interval_ms * heartbeat.tolerable_misses
    tz = config.tzinfo
    for inst in services:
        alive = False
        if inst.state is State.INFLIGHT:
            if beats is None:
                beats = _heartbeats(storage)
            alive = now - beats.get(inst.requested_time, 0) <= expiry
        result.pending.append(
            PendingItem(inst, service_of(timeline, inst), alive, instant_epoch(inst.requested_time, tz))
        )
    if not policy.paused:
        for service, spec in registry.planners.items():
            if policy.services.get(service).schedule:
                reason = spec.due(timeline, policy)
                if reason:
                    result.due[service] = reason
    result.delta_commits_since_compaction = _delta_commits(timeline, config)
    result.seconds = time.monotonic() - started
    return result


def _local_root(root: str) -> str:
    parsed = urlparse(root)
    return unquote(parsed.path) if parsed.scheme == "file" else root


def _is_table(path: str) -> bool:
    hoodie = os.path.join(path, ".hoodie")
    return os.path.isfile(os.path.join(hoodie, "hoodie.properties")) or os.path.isfile(
        os.path.join(hoodie, "hoodie.properties.backup")
    )


def discover_tables(root: str, max_depth: int) -> list[str]:
    """Base paths of the tables under ``root`` (``root`` itself included), sorted."""
    start = _local_root(root)
    found: list[str] = []
    stack = [(start, 0)]
    while stack:
        folder, depth = stack.pop()
        if _is_table(folder):
            found.append(folder)
            continue
        if depth >= max_depth:
            continue
        try:
            with os.scandir(folder) as entries:
                for e in entries:
                    if e.name.startswith(".") or not e.is_dir(follow_symlinks=False):
                        continue
                    stack.append((e.path, depth + 1))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue  # a root that is gone or unreadable holds no tables this time
    return sorted(found)

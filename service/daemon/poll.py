"""Finding tables and polling one table: the blocking half of the loop, run in worker threads.

Discovery walks a root folder and reports every folder holding ``.hoodie/hoodie.properties``
(or its ``.backup``) without descending into tables (their sub-folders are partitions) or
hidden folders: ``os.scandir`` on local file systems; on an object store one delimiter
listing per folder above ``max_depth``, and one listing bounded to ``hoodie.properties*`` per
folder that holds a ``.hoodie`` folder (and per folder at ``max_depth``, which is not listed).

A poll is cheap by construction: one names-only listing of the timeline folder; only when
the names differ from the last poll (their hash, ``PollResult.signature``) are they read again
and ``hoodie.properties`` re-read. The first poll of a table is the same names-only pass. On a
table of timeline layout 2 (version 8+) whose policy asks only triggers that answer from counts
(``PlannerSpec.due_counts``: every built-in one), the names are counted, not built into a
timeline (``hoodie.timeline.compact.scan_names``: the requested times of each action, the pending
instants; no ``Instant`` but the pending ones); otherwise, and when a name needs more than itself
(a pending replacecommit's plan, a completed file without a completion time), the timeline is
built from them (``timeline_from_names``: a ``stat`` only for completed files without a
completion time in their name) and the triggers asked on it. Both give the same pending
services, counts and reasons (tests/service/daemon/test_poll_names_only.py). Then one
listing of ``.hoodie/.heartbeat`` when an inflight table service needs its heartbeat
checked. Plans and commit metadata are not read here, except the requested file of a
pending v6 replacecommit (to tell a clustering from an insert-overwrite). Planner triggers
(``PlannerSpec.due``) look at the timeline only (the clustering trigger of a v6 table also
reads the plans of its completed replacecommits since the last clustering).

Why the names-only listing: measured on this machine, ``Timeline.load`` of a 200-instant
timeline (600 files) takes about 4.6 ms, a third of it in one ``stat`` per file and a third
in parsing names; listing the names takes about 0.3 ms, building the timeline from them
0.6-1.2 ms and the triggers on it 0.5 ms more, where counting them takes about 0.2 ms and the
triggers on the counts under 0.1 ms (bench/poll.py: the first cycle of 10,000 tables).
``Storage`` has no names-only listing yet, so local tables use ``os.listdir`` on the
timeline folder (read-only, names only); other storages fall back to ``Storage.list``.

What a poll keeps is what decisions need, not the timeline: the pending table services, the
planners' reasons (``due``), the delta commits since the last compaction, the names' hash, and
the timeline as a ``CompactTimeline`` (one text line per instant and the file names of pending
instants and replacecommits, about 12 KB for 200 instants; after a names-only pass the names
that make the timeline, those of completed instants' redundant state files left out, about
10 KB; the ``Timeline`` with its parsed files took about 0.3 MB). ``PollResult.timeline`` builds a
``Timeline`` from it when one is needed (a planning job, the triggers evaluated again); local
tables keep no listing of their names (``signature`` stands for it).

An unchanged local table costs one ``stat`` of the timeline folder: every file created,
removed or renamed in a folder moves the folder's mtime, so an mtime equal to the one of the
last listing means the same names. File-system timestamps are coarse (a clock tick), so the
mtime is trusted only when the folder had been quiet for ``QUIET_NS`` before that listing
(two changes in one tick, one before and one after the listing, would otherwise look like
none), and the names are listed again about every ``RELIST_S`` whatever the mtime says.
Everything derived from the timeline alone (pending instants, delta commits, the planners'
triggers) is reused while the names are unchanged; heartbeats of inflight instants are
checked on every poll, and the triggers that move with the clock alone (a time-based compaction
trigger: ``PlannerSpec.reads_clock``) again every ``RECHECK_DUE_S``; the others change only with
the timeline. bench/poll.py measures it.

Object stores (S3, GCS, Azure) have no folder mtime; what costs there is requests. A poll lists
the timeline folder from an offset (``Storage.list_after``: S3 ``start-after``), bounded
before ``:``, the first character after the digits every instant file name starts with, so
``history/`` (v8+), ``hoodie.properties``, ``archived/`` and ``metadata/`` (v6) are never
walked: an unchanged table costs ONE list request, no read (one per 1,000 names after the
offset: a pending instant early in a long timeline, such as a failed write not yet rolled back,
makes it several). The offset is the earliest of

- the requested time of the oldest pending instant: all the files of a pending instant start
  with its requested time (``T.action.requested``, ``T.action.inflight``, ``T.action`` in
  layout 1, ``T_C.action`` in layout 2, Hudi's ``InstantFileNameGenerator``), so every state
  change of a pending instant, and its removal by a rollback, is seen by the next poll;
- the last timeline file name: a new instant;
- the instant time ``LATE_S`` ago (table time zone): a writer creates its requested file just
  after taking its instant time, so concurrent writers' instants may arrive slightly out of
  order; those within the window are seen by the next poll.

The names at or before the offset are kept from the last listing (compressed, with their
mtimes). Files removed there (archival, a cleaner of completed instants) and instants that
arrive later than ``LATE_S`` out of order are noticed by the full re-listing (a delimiter
listing of the folder), done on the first poll and then about every ``RELIST_S`` as for local
tables; the table config is read again with each full re-listing only (executors and planners
read it again themselves under the table lock, so the poll's copy only steers what is tried),
so a poll that finds a new instant reads nothing but what that instant needs (the plan of a
pending v6 replacecommit, once). Heartbeats of inflight instants cost one more listing of
``.hoodie/.heartbeat``, as on a local file system.

Leftovers of completed instants (``hoodie.leftovers``: the markers, heartbeat and attempt
identity of a writer killed right after its completed file): the daemon's poll (``tidy``) looks
for them when it has listed the names afresh (the first poll, a changed timeline, the periodic
re-listing), at the cost of three listings (``.hoodie/.temp``, ``.hoodie/.heartbeat``,
``.hoodie/.locks/attempts``) and, only when one of them names an instant, one more of the
timeline folder to tell completed instants from pending ones. It removes those of completed
instants whose heartbeat expired, never a pending instant's, and reports them
(``PollResult.leftovers_removed``); a failure there is logged and leaves them for the next pass.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from hoodied.hoodie.actions.services import TableService, service_of
from hoodied.hoodie.heartbeat import HEARTBEAT_FOLDER
from hoodied.hoodie.leftovers import Leftovers, find_leftovers, remove_leftovers
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import OBJECT_STORE_SCHEMES, FileInfo, Storage
from hoodied.hoodie.timeline.active import Timeline, instant_time_to_datetime, parse_timeline_file_name
from hoodied.hoodie.timeline.compact import CompactTimeline, NameScan, scan_names, timeline_from_names
from hoodied.hoodie.timeline.instant import (
    Action,
    Instant,
    State,
    epoch_to_instant_time,
    parse_instant_file_name,
)
from hoodied.service.config import HeartbeatConfig, Policy
from hoodied.service.daemon.registry import PlannerSpec, Registry

if TYPE_CHECKING:
    from hoodied.hoodie.object_storage import ObjectStorage, ObjectStoreSettings

__all__ = ["PendingItem", "PollResult", "discover_tables", "instant_epoch", "poll_table"]

log = logging.getLogger("hoodied.poll")

#: The timeline folder's mtime is trusted when it is at least this much older than its listing.
QUIET_NS = 2_000_000_000
#: The timeline folder is listed again after this long (times a per-listing factor in [0.5, 1) so
#: the tables of one daemon do not all come due in the same cycle), whatever its mtime says.
RELIST_S = 300.0
#: The planners' triggers are evaluated again at least this often on an unchanged timeline.
RECHECK_DUE_S = 30.0
#: Object stores: how far back (seconds) the offset listing reaches for out-of-order new instants.
LATE_S = 60.0
#: Object stores: timeline file names start with a digit, so they sort after this name (after
#: every name that starts with ``.``; ``/``, the one character between ``.`` and ``0``, is in no
#: name) and before ``TIMELINE_NAMES_END`` (the character after ``9``).
TIMELINE_NAMES_START = ".\U0010ffff"
TIMELINE_NAMES_END = ":"


@dataclass(frozen=True, slots=True)
class PendingItem:
    """A pending table-service instant as the poll saw it."""

    instant: Instant
    service: TableService | None
    heartbeat_alive: bool
    """Inflight only: its Hudi heartbeat is fresh, so another executor is working on it."""
    requested_epoch: float


@dataclass(slots=True)
class PollResult:
    """What one poll found, kept until the next: no ``Timeline`` and no file names are held
    (``view`` is the timeline in a few kilobytes; see the module docstring)."""

    config: TableConfig
    view: CompactTimeline
    signature: int
    """The hash of the timeline folder's names: changes whenever an instant appears, moves state or goes."""
    storage: Storage | None = None
    """The table's storage (shared with the loop's books), for ``timeline``."""
    packed_names: bytes | None = None
    """Object stores: the names of the last listing with their mtimes (ms), compressed: the
    offset listing keeps those before its offset (see the module docstring)."""
    pending: list[PendingItem] = field(default_factory=list)
    due: dict[TableService, str] = field(default_factory=dict)
    """service -> why planning should be tried now."""
    delta_commits_since_compaction: int | None = None
    seconds: float = 0.0
    folder_mtime_ns: int | None = None
    """The timeline folder's mtime read just before ``names`` was listed (local tables only)."""
    listed_ns: int = 0
    """When ``names`` was listed (wall clock, ns)."""
    relist_at: float = 0.0
    """When the names are listed again whatever the folder's mtime says (monotonic)."""
    due_at: float = 0.0
    """When ``due`` was evaluated (monotonic)."""
    offset: str | None = None
    """Object stores: the next poll lists the names after this one (see the module docstring)."""
    services: dict[tuple[str, Action], TableService | None] = field(default_factory=dict)
    """The service of each pending instant seen, by (requested time, action): a pending v6
    replacecommit's plan is read once, not on every change of the timeline."""
    leftovers_removed: list[tuple[Leftovers, TableService | None]] = field(default_factory=list)
    """Completed instants whose writer's leftovers this poll removed, with the table service the
    instant was (``None``: a data write, or a service not told by its names)."""

    @property
    def timeline(self) -> Timeline:
        """The timeline as of this poll, built again from ``view`` on each access (not held)."""
        assert self.storage is not None
        return self.view.timeline(self.storage, self.config)

    @property
    def names(self) -> frozenset[str]:
        """Object stores: the timeline folder's names at this poll (empty for local tables, whose
        names are not kept: ``signature`` stands for them)."""
        return frozenset(_unpack(self.packed_names))

    @property
    def files(self) -> dict[str, tuple[Instant, int]]:
        """Object stores: the timeline files of ``names``, parsed again: (instant, mtime ms)."""
        folder = self.config.timeline_path
        out: dict[str, tuple[Instant, int]] = {}
        for name, mtime in _unpack(self.packed_names).items():
            inst = parse_timeline_file_name(folder, name)
            if inst is not None:
                out[name] = (inst, mtime)
        return out


def _pack(names: dict[str, int]) -> bytes:
    return zlib.compress("\n".join(f"{n}\t{m}" for n, m in sorted(names.items())).encode(), 1)


def _unpack(packed: bytes | None) -> dict[str, int]:
    if not packed:
        return {}
    out: dict[str, int] = {}
    for line in zlib.decompress(packed).decode().split("\n"):
        name, _, mtime = line.rpartition("\t")
        out[name] = int(mtime)
    return out


def _signature(names: Iterable[str]) -> int:
    return hash(frozenset(names))


def instant_epoch(requested_time: str, tz: tzinfo) -> float:
    try:
        return instant_time_to_datetime(requested_time, tz).timestamp()
    except Exception:  # an odd MDT-style time: age unknown rather than a failed poll
        return time.time()


def _names(storage: Storage, folder: str) -> list[str]:
    local = storage.local_path(folder)
    if local is not None:
        try:
            return os.listdir(local)
        except FileNotFoundError:
            return []
    return [info.name for info in storage.list(folder)]


def _folder_mtime_ns(storage: Storage, folder: str) -> int | None:
    local = storage.local_path(folder)
    if local is None:
        return None
    try:
        return os.stat(local).st_mtime_ns
    except FileNotFoundError:
        return None


def _next_relist(mono: float) -> float:
    return mono + RELIST_S * random.uniform(0.5, 1.0)  # noqa: S311 - spreading work, not security


def _unchanged_by_mtime(storage: Storage, cached: PollResult, mono: float) -> tuple[bool, int | None, int]:
    """(names certainly unchanged, the folder's mtime now, the wall clock now) without listing."""
    now_ns = time.time_ns()
    mtime = _folder_mtime_ns(storage, cached.config.timeline_path)
    trusted = (
        mtime is not None
        and mtime == cached.folder_mtime_ns
        and cached.listed_ns - mtime >= QUIET_NS
        and mono < cached.relist_at
    )
    return trusted, mtime, now_ns


def _local_mtimes(storage: Storage, folder: str) -> Callable[[list[str]], dict[str, int]]:
    """The mtimes (ms) of the named timeline files, one ``stat`` each (a file gone is left out)."""
    local = storage.local_path(folder)
    assert local is not None

    def mtimes(names: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in names:
            try:
                out[name] = os.stat(os.path.join(local, name)).st_mtime_ns // 1_000_000
            except FileNotFoundError:
                continue  # gone since the listing: the next poll sees the folder moved
        return out

    return mtimes


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
    tidy: bool = False,
) -> PollResult:
    """Load the table's timeline and find its pending services and due plans (errors propagate);
    with ``tidy``, remove completed instants' leftovers after a fresh listing (module docstring)."""
    result = _poll(storage, cached, policy, registry, heartbeat, now_ms)
    fresh = cached is None or result.signature != cached.signature or result.relist_at != cached.relist_at
    if tidy and fresh:
        try:
            pending = {t for t, _ in result.services}
            result.leftovers_removed = _tidy(storage, result.config, pending,
                                             heartbeat.interval_ms * heartbeat.tolerable_misses, now_ms)
        except Exception as exc:  # noqa: BLE001 - the leftovers wait for the next pass; the poll stands
            log.warning("%s: completed instants' leftovers not removed: %s", storage.base_uri, exc)
    return result


def _tidy(
    storage: Storage, config: TableConfig, pending: set[str], expiry_ms: int, now_ms: int | None
) -> list[tuple[Leftovers, TableService | None]]:
    """Remove the leftovers of completed instants; each with the service its names tell.
    ``pending``: the requested times of the instants the poll found pending."""
    files: dict[str, list[Instant]] = {}

    def completed(times: set[str]) -> set[str]:
        if not times - pending:  # the usual case: only running instants' heartbeats, no listing
            return set()
        for name in _names(storage, config.timeline_path):
            t = name.split(".", 1)[0].split("_", 1)[0]
            inst = parse_instant_file_name(name) if t in times else None
            if inst is not None:
                files.setdefault(t, []).append(inst)
        return {t for t, insts in files.items() if any(i.is_completed for i in insts)}

    removed = []
    for left in find_leftovers(storage, completed, expiry_ms=expiry_ms, now_ms=now_ms):
        remove_leftovers(storage, left)
        actions = {i.action for i in files[left.instant_time] if not i.is_completed}
        service = next((s for s in map(TableService.of_action, sorted(actions)) if s is not None), None)
        if service is None and left.attempt and Action.REPLACE_COMMIT in actions:
            # a v6 clustering: the one replacecommit a hoodied attempt runs
            service = TableService.CLUSTERING
        removed.append((left, service))
    return removed


def _poll(storage: Storage, cached: PollResult | None, policy: Policy, registry: Registry,
          heartbeat: HeartbeatConfig, now_ms: int | None) -> PollResult:
    """``poll_table`` without the tidying."""
    started = time.monotonic()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    expiry = heartbeat.interval_ms * heartbeat.tolerable_misses
    if storage.local_path() is None:
        return _poll_object_store(storage, cached, policy, registry, now, expiry, started)
    if cached is not None:
        trusted, mtime, now_ns = _unchanged_by_mtime(storage, cached, started)
        if trusted:
            return _reuse(storage, cached, None, mtime, cached.listed_ns, cached.relist_at,
                          policy, registry, now, expiry, started)
        if _signature(_names(storage, cached.config.timeline_path)) == cached.signature:
            return _reuse(storage, cached, None, mtime, now_ns, _next_relist(started), policy, registry,
                          now, expiry, started)
    # new or moved timeline: re-read the table config too (an upgrade, or a file gone bad)
    config = load_table_config(storage)
    now_ns = time.time_ns()
    mtime = _folder_mtime_ns(storage, config.timeline_path)
    names = _names(storage, config.timeline_path)
    triggers = _count_triggers(policy, registry)
    listed = frozenset(names)  # hashed once: the signature and the scan's set
    scan = scan_names(config, listed) if triggers is not None else None
    if triggers is not None and scan is not None:
        result = PollResult(config, scan.view, hash(listed), storage, folder_mtime_ns=mtime,
                            listed_ns=now_ns, relist_at=_next_relist(started))
        return _complete_from_counts(storage, result, scan, triggers, policy, now, expiry, started)
    timeline = timeline_from_names(storage, config, names, _local_mtimes(storage, config.timeline_path))
    result = PollResult(config, _EMPTY, hash(listed), storage, folder_mtime_ns=mtime, listed_ns=now_ns,
                        relist_at=_next_relist(started))
    return _complete(storage, result, timeline, cached, policy, registry, now, expiry, started)


def _count_triggers(policy: Policy, registry: Registry) -> list[PlannerSpec] | None:
    """The planners whose triggers the policy asks, when every one of them answers from counts
    (``PlannerSpec.due_counts``): then the names-only pass (``scan_names``) can decide."""
    if policy.paused:
        return []
    services = policy.services
    asked = [spec for service, spec in registry.planners.items() if services.schedules(service)]
    return None if any(spec.due_counts is None for spec in asked) else asked


def _complete_from_counts(
    storage: Storage, result: PollResult, scan: NameScan, triggers: list[PlannerSpec], policy: Policy,
    now: int, expiry: int, started: float,
) -> PollResult:
    """``_complete`` of a names-only pass: the same pending services, counts and reasons, from the
    counts of the names (no ``Timeline`` built; ``scan_names`` leaves out pending replacecommits,
    the one pending instant whose service needs its plan read)."""
    config = result.config
    _add_pending(storage, result, ((i, TableService.of_action(i.action)) for i in scan.pending), now, expiry)
    counts = scan.counts
    if config.is_mor:
        since = counts.latest_completed((Action.COMPACTION,)) or ""
        result.delta_commits_since_compaction = counts.completed_after((Action.DELTA_COMMIT,), since)
    result.due_at = started
    for spec in triggers:
        assert spec.due_counts is not None
        reason = spec.due_counts(counts, policy)
        if reason:
            result.due[spec.service] = reason
    result.seconds = time.monotonic() - started
    return result


def _add_pending(storage: Storage, result: PollResult,
                 pending: Iterable[tuple[Instant, TableService | None]], now: int, expiry: int) -> None:
    """Each pending instant's service into ``result.services`` and, for a table service, a
    ``PendingItem`` with whether its heartbeat is alive (the heartbeats listed once, when needed)."""
    beats: dict[str, int] | None = None
    tz = result.config.tzinfo
    for inst, service in pending:
        result.services[(inst.requested_time, inst.action)] = service
        if service is None:
            continue
        alive = False
        if inst.state is State.INFLIGHT:
            if beats is None:
                beats = _heartbeats(storage)
            alive = now - beats.get(inst.requested_time, 0) <= expiry
        result.pending.append(PendingItem(inst, service, alive, instant_epoch(inst.requested_time, tz)))


#: The view of a result under construction (``_complete`` sets the real one).
_EMPTY = CompactTimeline(0, "", (), ())


def _complete(
    storage: Storage, result: PollResult, timeline: Timeline, cached: PollResult | None, policy: Policy,
    registry: Registry, now: int, expiry: int, started: float,
) -> PollResult:
    """Pending services (with their heartbeats), due plans and counts of a freshly built timeline;
    then the timeline is kept as its compact ``view`` only."""
    config = result.config
    known = cached.services if cached is not None else {}

    def services() -> Iterator[tuple[Instant, TableService | None]]:
        for inst in timeline.pending():
            key = (inst.requested_time, inst.action)
            yield inst, known[key] if key in known else service_of(timeline, inst)

    _add_pending(storage, result, services(), now, expiry)
    result.delta_commits_since_compaction = _delta_commits(timeline, config)
    _evaluate_due(result, timeline, policy, registry, started)  # sets the view
    result.seconds = time.monotonic() - started
    return result


def _list_offset(names: Iterable[str], timeline: Timeline, now: int) -> str:
    """Where the next offset listing starts (see the module docstring)."""
    names = [n for n in names if TIMELINE_NAMES_START < n < TIMELINE_NAMES_END]
    if not names:
        return TIMELINE_NAMES_START
    marks = [max(names), epoch_to_instant_time(now / 1000 - LATE_S, timeline.config.tzinfo)]
    marks.extend(inst.requested_time for inst in timeline.pending())
    return min(marks)


def _poll_object_store(
    storage: Storage, cached: PollResult | None, policy: Policy, registry: Registry, now: int, expiry: int,
    started: float,
) -> PollResult:
    """``poll_table`` on an object store: an offset listing, or a full one when due (module docstring)."""
    if cached is not None and started < cached.relist_at:
        config = cached.config
        folder = config.timeline_path
        offset = cached.offset or TIMELINE_NAMES_START
        listed = storage.list_after(folder, offset, TIMELINE_NAMES_END)
        before = _unpack(cached.packed_names)
        names = {n: m for n, m in before.items() if n <= offset or n >= TIMELINE_NAMES_END}
        names.update(_mtimes(listed))
        if _signature(names) == cached.signature:
            return _reuse(storage, cached, cached.packed_names, None, cached.listed_ns, cached.relist_at,
                          policy, registry, now, expiry, started)
        relist_at = cached.relist_at
    else:
        # first poll, or time for the full re-listing: the table config is read again too
        config = load_table_config(storage)
        folder = config.timeline_path
        names = _mtimes([i for i in storage.list(folder) if not i.is_dir])
        relist_at = _next_relist(started)
    same_folder = cached is not None and cached.config.timeline_path == folder
    timeline = timeline_from_names(storage, config, names, functools.partial(_known_mtimes, names))
    result = PollResult(config, _EMPTY, _signature(names), storage, _pack(names), listed_ns=time.time_ns(),
                        relist_at=relist_at)
    previous = cached if same_folder else None
    result = _complete(storage, result, timeline, previous, policy, registry, now, expiry, started)
    result.offset = _list_offset(names, timeline, now)
    return result


def _known_mtimes(names: dict[str, int], want: list[str]) -> dict[str, int]:
    return {n: names[n] for n in want if n in names}


def _mtimes(listed: list[FileInfo]) -> dict[str, int]:
    return {i.name: i.mtime_ms for i in listed}


def _evaluate_due(
    result: PollResult, timeline: Timeline, policy: Policy, registry: Registry, mono: float
) -> None:
    """The planners' triggers on ``timeline``; ``result.view`` is set from it afterwards (with the
    clustering verdicts the triggers read, so a v6 plan is read once per instant)."""
    result.due = {}
    result.due_at = mono
    if not policy.paused:
        for service, spec in registry.planners.items():
            if policy.services.schedules(service):
                reason = spec.due(timeline, policy)
                if reason:
                    result.due[service] = reason
    fresh = result.view is _EMPTY
    result.view = CompactTimeline.of(timeline) if fresh else result.view.with_verdicts(timeline)


def _reuse(
    storage: Storage, cached: PollResult, packed_names: bytes | None, mtime: int | None, listed_ns: int,
    relist_at: float, policy: Policy, registry: Registry, now: int, expiry: int, started: float,
) -> PollResult:
    """The cached poll for an unchanged timeline, with fresh heartbeats (and triggers when due)."""
    pending = cached.pending
    if any(item.instant.state is State.INFLIGHT for item in pending):
        beats = _heartbeats(storage)
        pending = [
            PendingItem(item.instant, item.service,
                        now - beats.get(item.instant.requested_time, 0) <= expiry, item.requested_epoch)
            if item.instant.state is State.INFLIGHT else item
            for item in pending
        ]
    result = PollResult(
        cached.config, cached.view, cached.signature, storage, packed_names, pending, cached.due,
        cached.delta_commits_since_compaction, folder_mtime_ns=mtime, listed_ns=listed_ns,
        relist_at=relist_at, due_at=cached.due_at, offset=cached.offset, services=cached.services,
    )
    if started - cached.due_at >= RECHECK_DUE_S:
        if any(policy.services.schedules(service) and spec.reads_clock(policy)
               for service, spec in registry.planners.items()):
            _evaluate_due(result, result.timeline, policy, registry, started)
        else:
            result.due_at = started  # nothing the clock can change: the reasons stand
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


#: ``hoodie.properties`` and its ``.backup`` are the names between these two (one bounded listing).
_PROPERTIES_RANGE = ("hoodie.propertie", "hoodie.propertiet")


def _is_object_table(storage: ObjectStorage, folder: str) -> bool:
    hoodie = f"{folder}/.hoodie" if folder else ".hoodie"
    names = {i.name for i in storage.list_after(hoodie, *_PROPERTIES_RANGE)}
    return bool(names & {"hoodie.properties", "hoodie.properties.backup"})


def _discover_object_store(root: str, max_depth: int, settings: ObjectStoreSettings | None) -> list[str]:
    # imported here: obstore loads only for roots on an object store
    from hoodied.hoodie.object_storage import ObjectStorage

    base = ObjectStorage.connect(root, settings)
    found: list[str] = []
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        folder, depth = stack.pop()
        if depth >= max_depth:
            if _is_object_table(base, folder):
                found.append(base.child(folder).base_uri if folder else base.base_uri)
            continue
        subs = [i for i in base.list(folder) if i.is_dir]  # an absent folder lists as empty
        if any(i.name == ".hoodie" for i in subs) and _is_object_table(base, folder):
            found.append(base.child(folder).base_uri if folder else base.base_uri)
            continue
        stack.extend((i.path, depth + 1) for i in subs if not i.name.startswith("."))
    return sorted(found)


def discover_tables(root: str, max_depth: int, settings: ObjectStoreSettings | None = None) -> list[str]:
    """Base paths (or URIs) of the tables under ``root`` (``root`` itself included), sorted.
    ``settings``: the object-store client settings when ``root`` is on one; an object store that
    cannot be listed raises ``StorageError`` (a local root that is gone holds no tables)."""
    if "://" in root and root.split("://", 1)[0].lower() in OBJECT_STORE_SCHEMES:
        return _discover_object_store(root, max_depth, settings)
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

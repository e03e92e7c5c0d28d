"""Archiving the active timeline of a data table: into its LSM timeline history (versions 8 and
9) or its ``.hoodie/archived`` log files (version 6).

Hudi writers archive after each commit only while they run their table services; with the
services handed to hoodied, this executor does it, as ``TimelineArchiverV2.archiveIfRequired``:

1. under the table lock, load the active timeline and call the planner the caller gives
   (``planners.archival.archival_planner``, which also reads the metadata table's latest
   compaction; executors do not import planners, the service layer joins the two);
2. write the history first (``hoodie.timeline.archive_writer``): one level-0 parquet layer of
   the archived instants, a new manifest, then ``_version_``; left-over marker folders of the
   archived instants are deleted (``deleteAnyLeftOverMarkers``);
3. delete the archived instants' active files in Hudi's order (``deleteArchivedActions``): every
   requested and inflight file first, then the completed files in ascending requested time.
   Removing a completed file first would make its instant look pending again (a compaction
   would be re-run); removing them in order never leaves a hole before a kept instant;
4. compact full LSM levels and clean old snapshots (``LSMTimelineWriter.compactAndClean``).

Re-running after a crash converges: the history is committed before any active file goes,
and an active completed instant that the history already holds can only be the leftover of an
interrupted deletion, so its files are deleted (in the same order) before planning. The layer
of a re-run with the same instants is recognised as committed and not written twice; one with
other instants may repeat rows, which readers (Hudi's and ``History``) read once.

Table version 6 (timeline layout 1) is archived as Hudi 0.14 / 0.15's ``HoodieTimelineArchiver``
does on storage without append (``hoodie.timeline.archived_v6``): under the lock, one new
``.hoodie/archived/.commits_.archive.<N+1>_1-0-1`` log file holding a ``HoodieArchivedMetaEntry``
for every timeline file of the archived instants is written once (the commit point), left-over
markers are deleted, then the active files in the same order as above. An instant counts as
archived when the newest archive file holds a completed record of it (same requested time, trimmed
to 17 digits as hoodied parses a 0.x MDT's ``<T>001``, and action family); a re-run first
deletes the files of such instants still on the active timeline, and the planner never sees them
again, so nothing is archived twice (``HoodieArchivedTimeline`` would list a duplicate record
twice). Merging small archive files (``hoodie.archive.merge.enable``,
default off) is not done. Crash points: ``PAUSE_POINTS`` (layout 2), ``PAUSE_POINTS_V6``.

The metadata table's own timeline (``MdtArchival``) is archived right after the data table's,
in the same lock hold, exactly as above but on ``.hoodie/metadata`` (its history in
``.hoodie/metadata/.hoodie/timeline/history``; on table version 6 a new
``.hoodie/metadata/.hoodie/archived/.commits_.archive.<N+1>_1-0-1``): Hudi's MDT writer archives it in
``performTableServices``, after the data table's archival of the previous commit. Its planner
(``planners.archival.mdt_archival_planner``) is given the data instants this run archived, so a
dry run plans the MDT as the real run would. Its own leftovers are finished the same way; a crash
between the two steps leaves a consistent data table, and the next run has nothing to do there
and archives the MDT. Crash points: ``PAUSE_POINTS_MDT`` (``PAUSE_POINTS`` prefixed ``mdt-``),
``PAUSE_POINTS_MDT_V6`` (``PAUSE_POINTS_V6`` prefixed ``mdt-``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.markers import MARKER_FOLDER
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.archive_writer import (
    DEFAULT_COMPACTION_BATCH,
    HistoryWriter,
    LsmRow,
    lsm_row,
    require_lsm_history,
)
from hoodied.hoodie.timeline.archived_v6 import (
    DEFAULT_ARCHIVAL_BATCH,
    ArchivedTimelineV6,
    meta_entries,
    write_archive_file,
)
from hoodied.hoodie.timeline.history import History
from hoodied.hoodie.timeline.instant import COMPLETED_ACTION, Instant, State, normalize_time

__all__ = [
    "PAUSE_POINTS",
    "PAUSE_POINTS_MDT",
    "PAUSE_POINTS_MDT_V6",
    "PAUSE_POINTS_V6",
    "ArchivalDecision",
    "ArchivalResult",
    "MdtArchival",
    "execute_archival",
]

log = logging.getLogger(__name__)


class ArchivalDecision(Protocol):
    """What a planner (``planners.archival.plan_archival``) decided: the instants to archive."""

    @property
    def instants(self) -> Sequence[Instant]: ...

    def summary(self) -> str: ...


P = TypeVar("P", bound=ArchivalDecision)

#: Where a test can stop the archival (``HOODIED_TEST_PAUSE_AT``), in the order they are met.
PAUSE_POINTS = (
    "archive-layer-written",
    "archive-manifest-written",
    "archive-history-committed",
    "archive-pending-deleted",
    "archive-completed-half",
    "archive-active-deleted",
    "archive-compacted-written",
    "archive-clean-manifests-deleted",
)
#: The crash points of the metadata table's archival (after the data table's), in order.
PAUSE_POINTS_MDT = tuple(f"mdt-{p}" for p in PAUSE_POINTS)
#: The crash points of a version-6 archival, in order.
PAUSE_POINTS_V6 = (
    "archive-log-written",
    "archive-pending-deleted",
    "archive-completed-half",
    "archive-active-deleted",
)
#: The crash points of a version-6 metadata table's archival (after the data table's), in order.
PAUSE_POINTS_MDT_V6 = tuple(f"mdt-{p}" for p in PAUSE_POINTS_V6)


@dataclass(slots=True)
class ArchivalResult(Generic[P]):
    """What one archival did (``dry_run``: what it would do)."""

    plan: P
    dry_run: bool = False
    layer: str | None = None
    """The level-0 history file (version 6: the archive log file) written (``None``: nothing
    written, or already there)."""
    deleted: list[str] = field(default_factory=list)
    """Active timeline files deleted (relative paths)."""
    recovered: list[str] = field(default_factory=list)
    """Requested times whose deletion an interrupted run had left unfinished."""
    compacted: list[str] = field(default_factory=list)
    """History files written by the LSM compaction."""
    mdt: ArchivalResult[P] | None = None
    """The metadata table's archival, run after this one (``None``: no MDT archived)."""

    def summary(self) -> str:
        head = "dry run: " if self.dry_run else ""
        text = head + self.plan.summary()
        if self.recovered:
            verb = "would finish" if self.dry_run else "finished"
            text += f"; {verb} {len(self.recovered)} instants of an interrupted archival"
        if self.layer:
            text += f"; wrote {self.layer}"
        if self.deleted:
            text += f", deleted {len(self.deleted)} timeline files"
        if self.compacted:
            text += f", compacted into {', '.join(self.compacted)}"
        if self.mdt is not None:
            text += "\nmetadata table: " + self.mdt.summary()
        return text


@dataclass(frozen=True, slots=True)
class MdtArchival(Generic[P]):
    """The metadata table whose timeline is archived after the data table's."""

    storage: Storage
    """The MDT's storage (``.hoodie/metadata``)."""
    config: TableConfig
    planner: Callable[[Timeline, Sequence[Instant]], P]
    """``planners.archival.mdt_archival_planner``: the MDT timeline and the data instants archived."""
    compaction_batch_size: int = DEFAULT_COMPACTION_BATCH
    """``hoodie.timeline.compaction.batch.size`` of the MDT writer (never set by Hudi: 10)."""
    archival_batch_size: int = DEFAULT_ARCHIVAL_BATCH
    """``hoodie.commits.archival.batch.size`` of a version-6 MDT writer (never set by Hudi: 10)."""


def _row(storage: Storage, timeline: Timeline, inst: Instant) -> LsmRow:
    files = timeline.state_files(inst)
    contents = {state: storage.read(path) for state, path in files.items()}
    completed_action = COMPLETED_ACTION.get(inst.action, inst.action)
    return lsm_row(inst.requested_time, inst.action, completed_action, inst.completion_time, contents)


def _delete_files(
    storage: Storage, lock: TableLock, timeline: Timeline, instants: Iterable[Instant], prefix: str = ""
) -> list[str]:
    """Hudi's order: all requested/inflight files, then completed files in ascending requested time.

    ``prefix``: of the crash points (``mdt-`` for the metadata table)."""
    ordered = sorted(instants, key=lambda i: i.requested_time)
    deleted: list[str] = []
    for inst in ordered:
        for state in (State.REQUESTED, State.INFLIGHT):
            path = timeline.state_files(inst).get(state)
            if path is not None:
                lock.ensure_held()
                if storage.delete(path):
                    deleted.append(path)
    crash_point(prefix + "archive-pending-deleted")
    half = len(ordered) // 2
    for n, inst in enumerate(ordered):
        if n == half:
            crash_point(prefix + "archive-completed-half")
        path = timeline.state_files(inst).get(State.COMPLETED)
        if path is not None:
            lock.ensure_held()
            if storage.delete(path):
                deleted.append(path)
    return deleted


def _delete_markers(storage: Storage, lock: TableLock, requested_time: str) -> None:
    """Left-over marker folder of an archived instant (``deleteAnyLeftOverMarkers``)."""
    folder = f"{MARKER_FOLDER}/{requested_time}"
    files = [i.path for i in storage.walk(folder) if not i.is_dir]
    for path in files:
        lock.ensure_held()
        storage.delete(path)
    if files:
        log.info("%s: deleted %d left-over markers", folder, len(files))


def execute_archival(
    storage: Storage,
    config: TableConfig,
    lock: TableLock,
    planner: Callable[[Timeline], P],
    *,
    compaction_batch_size: int = DEFAULT_COMPACTION_BATCH,
    archival_batch_size: int = DEFAULT_ARCHIVAL_BATCH,
    dry_run: bool = False,
    mdt: MdtArchival[P] | None = None,
) -> ArchivalResult[P]:
    """Archive what ``planner`` decides on the active timeline read under ``lock`` (taken once).

    ``planner`` is ``planners.archival.archival_planner(settings)`` (the service layer joins
    them); ``compaction_batch_size`` is ``hoodie.timeline.compaction.batch.size`` (LSM history),
    ``archival_batch_size`` ``hoodie.commits.archival.batch.size`` (version-6 archive blocks).
    ``mdt``: the metadata table archived next, in the same lock hold (the result's ``mdt``).
    Raises ``ArchivalUnsupportedError`` for a layout-2 table below version 8, before anything is
    read, and ``ValueError`` for a metadata table whose timeline layout is not the data table's.
    """
    if config.timeline_layout < 2:
        if mdt is not None and mdt.config.timeline_layout >= 2:
            raise ValueError(
                f"{mdt.storage.base_uri}: timeline layout {mdt.config.timeline_layout}, the data table's is "
                f"{config.timeline_layout}"
            )
        return _execute_v6(storage, config, lock, planner, archival_batch_size, dry_run, mdt)
    require_lsm_history(config, storage.base_uri)
    if mdt is not None:
        require_lsm_history(mdt.config, mdt.storage.base_uri)
    with lock:
        result = _archive_lsm(storage, config, lock, planner, compaction_batch_size, dry_run, "")
        if mdt is not None:
            archived = list(result.plan.instants)

            def mdt_planner(timeline: Timeline) -> P:
                return mdt.planner(timeline, archived)

            result.mdt = _archive_lsm(
                mdt.storage, mdt.config, lock, mdt_planner, mdt.compaction_batch_size, dry_run, "mdt-"
            )
    return result


def _archive_lsm(
    storage: Storage,
    config: TableConfig,
    lock: TableLock,
    planner: Callable[[Timeline], P],
    compaction_batch_size: int,
    dry_run: bool,
    prefix: str,
) -> ArchivalResult[P]:
    """One table's archival into its LSM history (module docstring); ``lock`` is held."""
    timeline = Timeline.load(storage, config)
    history = History.load(storage, config)
    leftovers = [i for i in timeline.completed() if history.get(i.requested_time) is not None]
    result = ArchivalResult(planner(timeline), dry_run)
    if dry_run:
        result.recovered = [i.requested_time for i in leftovers]
        return result
    timeline = _delete_leftovers(storage, config, lock, planner, timeline, leftovers, result, prefix)
    plan = result.plan
    writer = HistoryWriter(storage, config.history_path, lock.ensure_held, crash_prefix=prefix)
    if not plan.instants:
        if result.recovered:  # the interrupted run stopped before its LSM compaction
            result.compacted = writer.compact_and_clean(compaction_batch_size)
        log.info("%s: %s", storage.base_uri, result.summary())
        return result
    rows = [_row(storage, timeline, i) for i in plan.instants]
    result.layer = writer.write_layer(rows)
    crash_point(prefix + "archive-history-committed")
    for inst in plan.instants:
        _delete_markers(storage, lock, inst.requested_time)
    result.deleted += _delete_files(storage, lock, timeline, plan.instants, prefix)
    crash_point(prefix + "archive-active-deleted")
    result.compacted = writer.compact_and_clean(compaction_batch_size)
    log.info("%s: %s", storage.base_uri, result.summary())
    return result


def _delete_leftovers(
    storage: Storage,
    config: TableConfig,
    lock: TableLock,
    planner: Callable[[Timeline], P],
    timeline: Timeline,
    leftovers: list[Instant],
    result: ArchivalResult[P],
    prefix: str = "",
) -> Timeline:
    """Finish an interrupted archival: the files of instants already archived but still active go
    first, then the plan is made again on what is left (the timeline returned)."""
    if not leftovers:
        return timeline
    log.warning(
        "%d archived instants still on the active timeline (an interrupted archival): deleting their files",
        len(leftovers),
    )
    result.deleted += _delete_files(storage, lock, timeline, leftovers, prefix)
    result.recovered = [i.requested_time for i in leftovers]
    timeline = Timeline.load(storage, config)
    result.plan = planner(timeline)
    return timeline


def _execute_v6(
    storage: Storage,
    config: TableConfig,
    lock: TableLock,
    planner: Callable[[Timeline], P],
    batch_size: int,
    dry_run: bool,
    mdt: MdtArchival[P] | None,
) -> ArchivalResult[P]:
    """Version 6: the data table, then its metadata table, in one hold of ``lock``."""
    if batch_size < 1 or (mdt is not None and mdt.archival_batch_size < 1):
        raise ValueError("hoodie.commits.archival.batch.size must be at least 1")
    with lock:
        result, leftovers = _archive_v6(storage, config, lock, planner, batch_size, dry_run, "")
        if mdt is not None:
            # in a dry run the data table's leftovers are still active; the real run deletes them first
            gone = [*result.plan.instants, *leftovers]

            def mdt_planner(timeline: Timeline) -> P:
                return mdt.planner(timeline, gone)

            result.mdt, _ = _archive_v6(
                mdt.storage, mdt.config, lock, mdt_planner, mdt.archival_batch_size, dry_run, "mdt-"
            )
    return result


def _archive_v6(
    storage: Storage,
    config: TableConfig,
    lock: TableLock,
    planner: Callable[[Timeline], P],
    batch_size: int,
    dry_run: bool,
    prefix: str,
) -> tuple[ArchivalResult[P], list[Instant]]:
    """One table's version-6 archival: one new ``.commits_.archive`` file, then the active files
    (module docstring); ``lock`` is held. Also returns the leftovers of an interrupted run found."""
    timeline = Timeline.load(storage, config)
    # an interrupted run's instants are all in the newest archive file: each run writes one
    # file, and the next run deletes the leftovers before it writes another (so the whole
    # archive, which may be large, is never read here)
    archived = ArchivedTimelineV6.load(storage, config, latest_only=True)
    # keyed by the parsed (17-digit) time: a 0.x MDT's suffixed instants (``<T>001``) are archived
    # under their full name (``file_instant_time``) but parse trimmed on the active timeline
    done = {
        (normalize_time(r.requested_time), r.family) for r in archived.records if r.state is State.COMPLETED
    }
    leftovers = [i for i in timeline.completed() if (i.requested_time, i.file_action.value) in done]
    result = ArchivalResult(planner(timeline), dry_run)
    if dry_run:
        result.recovered = [i.requested_time for i in leftovers]
        return result, leftovers
    timeline = _delete_leftovers(storage, config, lock, planner, timeline, leftovers, result, prefix)
    plan = result.plan
    if plan.instants:
        records = meta_entries(storage, config, plan.instants, timeline.state_files)
        result.layer = write_archive_file(
            storage, config.history_path, records, batch_size=batch_size, check=lock.ensure_held
        )
        crash_point(prefix + "archive-log-written")
        for inst in plan.instants:
            _delete_markers(storage, lock, inst.requested_time)
        result.deleted += _delete_files(storage, lock, timeline, plan.instants, prefix)
        crash_point(prefix + "archive-active-deleted")
    log.info("%s: %s", storage.base_uri, result.summary())
    return result, leftovers

"""Undoing a failed ``indexing`` attempt, so that it can be executed again from its plan.

Hudi has no rollback instant for ``indexing``: ``RunIndexActionExecutor.abort`` (and
``dropMetadataPartitions`` / ``deletePendingIndexingInstant`` for a dropped index) undo it:

1. the planned partitions leave ``hoodie.table.metadata.partitions`` and ``...partitions.inflight``
   (``HoodieTableConfig.update``);
2. the MDT partition folders are deleted (``deleteMetadataPartition``);
3. the ``indexing.inflight`` file is deleted: the instant is requested again.

hoodied does the same, in that order, and also rolls back the MDT delta commit that initialized
the partition (an MDT rollback instant, ``hoodie.metadata.rollback``; Hudi's
``rollbackFailedIndexingCommits`` does this for a pending one), so the MDT timeline keeps no
completed instant whose files are gone. Only MDT delta commits that are not data-table writes
(initialization instants ``0000000000000000x`` and indexing instants) are rolled back: a
regular delta commit that also logged into the partition keeps its other partitions. Every
step is idempotent, so an abort interrupted by a crash is finished by running it again. The
caller holds the table lock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from hoodied.hoodie.errors import HeartbeatAliveError, InstantStateError
from hoodied.hoodie.fence import AttemptFence
from hoodied.hoodie.filenames import BaseFileName, LogFileName
from hoodied.hoodie.heartbeat import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_TOLERABLE_MISSES,
    delete_heartbeat,
    is_heartbeat_expired,
    last_heartbeat_ms,
)
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.markers import WriteMarkers
from hoodied.hoodie.metadata.index_build import read_index_plan
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.metadata.rollback import open_mdt_timeline, rollback_mdt_deltacommit
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.table_config_update import set_metadata_partition_state
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = ["IndexingAbort", "abort_indexing", "init_instants_of", "rollback_failed_indexing"]


@dataclass(slots=True)
class IndexingAbort:
    """What undoing one failed indexing attempt did."""

    instant_time: str
    partitions: list[str] = field(default_factory=list)
    mdt_rollbacks: list[str] = field(default_factory=list)
    files_deleted: int = 0

    def summary(self) -> str:
        return (f"{self.instant_time} indexing: failed attempt undone ({', '.join(self.partitions)}; "
                f"{len(self.mdt_rollbacks)} MDT delta commits rolled back, {self.files_deleted} files "
                "deleted); requested again")


def init_instants_of(mdt_storage: Storage, partition: str, data: Timeline) -> list[str]:
    """MDT instants that wrote files into ``partition`` and are not data-table writes."""
    instants = set()
    for info in mdt_storage.list(partition):
        if info.is_dir:
            continue
        name = BaseFileName.parse(info.name) or LogFileName.parse(info.name)
        if name is not None:
            instants.add(name.instant_time)
    out = []
    for t in sorted(instants):
        twin = data.get(t)
        if twin is None or twin.action is Action.INDEXING:
            out.append(t)
    return out


def abort_indexing(
    writer: TimelineWriter,
    mdt: TimelineWriter,
    instant_time: str,
    *,
    heartbeat_interval_ms: int,
    tolerable_misses: int,
    force: bool = False,
) -> IndexingAbort | None:
    """Undo the failed attempt of pending ``indexing`` ``instant_time`` (``None``: it is only requested).

    Refused (``InstantStateError``) while the attempt's heartbeat is alive, unless ``force``.
    """
    storage = writer.storage
    timeline = Timeline.load(storage, writer.config)
    inst = timeline.get(instant_time)
    if inst is None or inst.action is not Action.INDEXING:
        raise InstantStateError(
            f"{storage.base_uri}: no indexing instant {instant_time} on the active timeline")
    if inst.is_completed:
        raise InstantStateError(f"{instant_time}: indexing is completed, nothing to undo")
    if inst.state is State.REQUESTED:
        return None
    if not force and not is_heartbeat_expired(storage, instant_time, interval_ms=heartbeat_interval_ms,
                                              tolerable_misses=tolerable_misses):
        raise HeartbeatAliveError(
            f"{instant_time}: indexing has a live heartbeat (last beat at "
            f"{last_heartbeat_ms(storage, instant_time)} ms since the epoch); another executor is "
            "working on it")
    partitions = [i.partition for i in read_index_plan(timeline, inst)]
    # take the instant from the failed attempt before deleting anything (``hoodie.fence``): if it
    # is only paused, it can neither write nor complete once it resumes
    fence = AttemptFence.claim(storage, instant_time, "rollback")
    result = IndexingAbort(instant_time, partitions)
    set_metadata_partition_state(storage, writer.lock, partitions, state="absent")
    mdt_timeline = Timeline.load(mdt.storage, mdt.config)
    # pending MDT-only delta commits too (Hudi's rollbackFailedIndexingCommits), files or not
    orphans = {i.requested_time for i in mdt_timeline.pending((Action.DELTA_COMMIT,))
               if (twin := timeline.get(i.requested_time)) is None or twin.action is Action.INDEXING}
    for n, partition in enumerate(partitions):
        targets = set(init_instants_of(mdt.storage, partition, timeline)) | (orphans if n == 0 else set())
        for t in sorted(targets):
            if rollback_mdt_deltacommit(mdt, t) is not None:
                result.mdt_rollbacks.append(t)
            WriteMarkers(mdt.storage, t).delete_all()
        for info in list(mdt.storage.walk(partition)):
            writer.lock.ensure_held()
            if mdt.storage.delete(info.path):
                result.files_deleted += 1
        log.info("%s/%s: MDT partition deleted (failed indexing %s)", METADATA_FOLDER, partition,
                 instant_time)
    writer.revert_inflight_to_requested(instant_time, Action.INDEXING)
    delete_heartbeat(storage, instant_time)
    fence.release()  # nobody may write for the instant until its next attempt claims it
    log.info("%s", result.summary())
    return result


def rollback_failed_indexing(
    storage: Storage,
    lock: TableLock,
    instant_time: str,
    *,
    force: bool = False,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    time_settings: TimeSettings | None = None,
) -> IndexingAbort | None:
    """Undo the failed attempt of ``indexing`` ``instant_time`` (``None``: it is only requested).

    Takes ``lock``. The signature is ``service.cli.services.rollback_failed_attempt``'s.
    """
    config = load_table_config(storage)
    with lock:
        writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
        mdt = open_mdt_timeline(storage, lock, truetime=writer.truetime)
        return abort_indexing(writer, mdt, instant_time, heartbeat_interval_ms=heartbeat_interval_ms,
                              tolerable_misses=tolerable_misses, force=force)

"""Executing a clean: delete the files of a pending ``HoodieCleanerPlan`` and complete the instant.

Runs any pending clean on the timeline, whoever requested it: hoodied's planner or Apache
Hudi. Plans of version 1 name files per partition in ``filesToBeDeletedPerPartition`` (file
names); version 2 in ``filePathsToBeDeletedPerPartition`` (full paths, ``HoodieCleanFileInfo``).
A full path written on another machine (``s3a://bucket/t/p/f``, ``hdfs://nn/t/p/f``) is
resolved by its partition and file name under this table's base path; a path that does not
end in ``<partition>/<file name>``, a file that is not a Hudi data file, a partition inside
``.hoodie`` or a path with ``..`` is an error, and so are plans whose paths name more than one
foreign base path. The whole plan is checked before anything is written.

Steps (``execute_clean``), each safe to repeat after a crash at any point:

1. Under the table lock: read and check the plan, make sure no live executor owns the
   instant (its heartbeat), start this process's heartbeat, write ``<T>.clean.inflight``
   (a no-op when it is there). The lock is released: deleting files needs no lock, as in
   Hudi, and must not block other writers.
2. Delete the plan's files in parallel; a file already gone is no error (an earlier
   attempt, or the plan named a file that was never there) and is recorded, as Hudi's
   ``CleanActionExecutor`` records it, under ``failedDeleteFiles``. Then the partitions in
   ``partitionsToBeDeleted``: their partition metadata file and folder go once nothing but
   that (and checksum files) is left; a partition still holding other files is kept.
   A delete that fails (permission denied, I/O error) stops the clean before completion;
   the instant stays inflight and a re-run retries it.
3. Under the table lock again, ``ensure_held()`` right before the write: the completed file
   with ``HoodieCleanMetadata`` (version 2): per partition the policy, ``deletePathPatterns``
   (file names), ``successDeleteFiles`` (deleted by this run), ``failedDeleteFiles`` (already gone;
   a real failure stops the clean before this point) and ``isPartitionDeleted``; ``earliestCommitToRetain``,
   ``lastCompletedCommitTimestamp`` and ``extraMetadata`` (savepointed times, which the next
   incremental clean needs) come from the plan. Layout 2 names it ``<T>_<completion>.clean``
   with a TrueTime completion time; layout 1 ``<T>.clean``. Then the heartbeat goes (a kill
   right after the completed file, crash point ``completed``, leaves it and the attempt's identity
   to the daemon's poll: ``hoodie.leftovers``).

Leftover temp files: under the lock of step 3, after the clean's own deletes and before its
completion, ``hoodie.temp_files.remove_leftover_temps`` removes the temp files of hoodied writes killed
in the middle (``.<name>.<uuid4 hex>.tmp`` beside their target, older than ``temp_file_age_s``,
default one hour; local tables only). Their count is in the summary line; a sweep that fails
logs one line and the clean completes all the same (the temps are only wasted space).

Tables with a metadata table (table version 8 and 9): between steps 2 and 3, under the lock,
the MDT delta commit with the clean's instant time T is written and completed
(``hoodie.metadata.writer.MetadataWriter``, records from ``hoodie.metadata.clean.clean_records``), so
it completes before the clean does, as in Hudi. Its records are a function of the plan
(``deletePathPatterns``), so a re-run writes the same ones: a completed MDT delta commit T is
kept, a partial one (a crash in the middle of its log write) has its uncommitted log files
removed and is written again. A table with an MDT partition a clean cannot keep exact is
refused before anything is written (``hoodie.metadata.clean.require_clean_maintainable``, the
same rule the planner applies).

Who runs what: the clean itself (its deletes, its MDT delta commit, its completion) always runs in
the calling process; it never starts an engine. The MDT upkeep that comes with its MDT delta
commit may compact the metadata table (``hoodie.metadata.compact.max.delta.commits``); that
compaction's per-file-group operations go to ``mdt_runner`` (``hoodie.tasks``): in this process,
one file group after the other, by default (``hoodied execute``), or one Spark task per MDT file
group when the caller hands the runner of a Spark session already running
(``executors.engine.SparkOperations``: the daemon, ``service.daemon.registry``), as compaction,
log compaction and clustering do. Memory is bounded either way: each slice's merge streams.

Test hook: with ``HOODIED_TEST_PAUSE_AT`` set to one of ``PAUSE_POINTS`` the executor
writes the file named by ``HOODIED_TEST_PAUSE_READY`` when it reaches that point and sleeps
(``HOODIED_TEST_PAUSE_S``, default 60 s), so a test can kill it there with SIGKILL.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import (
    HeartbeatAliveError,
    HoodieFormatError,
    InstantStateError,
    StorageError,
    UnsupportedTableError,
)
from hoodied.hoodie.fence import start_attempt
from hoodied.hoodie.filenames import PARTITION_METAFILE, BaseFileName, LogFileName
from hoodied.hoodie.heartbeat import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_TOLERABLE_MISSES,
    is_heartbeat_expired,
    last_heartbeat_ms,
)
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.metadata.clean import clean_records, require_clean_maintainable
from hoodied.hoodie.metadata.reader import metadata_table_in_use
from hoodied.hoodie.metadata.writer import MetadataWriter
from hoodied.hoodie.plan_files import check_partition, locate
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.tasks import OperationRunner, run_in_process
from hoodied.hoodie.temp_files import DEFAULT_MIN_AGE_S, remove_leftover_temps
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "CLEAN_METADATA_VERSION",
    "DEFAULT_PARALLELISM",
    "PAUSE_POINTS",
    "CleanResult",
    "PlannedDelete",
    "execute_clean",
    "resolve_plan",
]

#: ``CleanerUtils.LATEST_CLEAN_METADATA_VERSION``.
CLEAN_METADATA_VERSION = 2
DEFAULT_PARALLELISM = 8
#: Where the test hook can stop the executor (in this order).
PAUSE_POINTS = ("requested", "inflight", "deletes-half", "deletes-done", "mdt-log-written", "mdt-done")


@dataclass(frozen=True, slots=True)
class PlannedDelete:
    """One file of a plan: its partition, its path relative to the table, and as the plan wrote it."""

    partition: str
    relative: str
    planned_as: str

    @property
    def file_name(self) -> str:
        return self.relative.rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True)
class ResolvedPlan:
    """A checked clean plan: files per partition, partitions to drop, and what the metadata copies."""

    files: dict[str, list[PlannedDelete]]
    partitions_to_delete: list[str]
    policy: str
    earliest_commit_to_retain: str
    last_completed_commit: str
    extra_metadata: dict[str, str]

    @property
    def file_count(self) -> int:
        return sum(len(v) for v in self.files.values())


@dataclass(slots=True)
class CleanResult:
    """What one run of ``execute_clean`` did."""

    instant: Instant
    deleted: list[str] = field(default_factory=list)
    already_gone: list[str] = field(default_factory=list)
    partitions_deleted: list[str] = field(default_factory=list)
    partitions_kept: list[str] = field(default_factory=list)
    temp_files_removed: list[str] = field(default_factory=list)
    """Leftover temp files of killed hoodied writes the clean removed (``hoodie.temp_files``)."""
    was_completed: bool = False
    """The clean was already completed when this run started (nothing was done)."""

    @property
    def planned(self) -> int:
        return len(self.deleted) + len(self.already_gone)

    def summary(self) -> str:
        t = self.instant.requested_time
        if self.was_completed:
            return f"{t} clean: already completed, nothing to do"
        gone = f" ({len(self.already_gone)} already gone)" if self.already_gone else ""
        parts = ""
        if self.partitions_deleted or self.partitions_kept:
            parts = f"; {len(self.partitions_deleted)} partitions deleted"
            if self.partitions_kept:
                parts += f", {len(self.partitions_kept)} kept (still hold files)"
        if self.temp_files_removed:
            n = len(self.temp_files_removed)
            parts += f"; {n} leftover temp file{'s' if n > 1 else ''} removed"
        done = f"completed at {self.instant.completion_time}" if self.instant.completion_time else "completed"
        return f"{t} clean: {len(self.deleted)} files deleted{gone}{parts}; {done}"


# ---------------------------------------------------------------------------- plan checking


def _is_data_file(name: str) -> bool:
    if BaseFileName.parse(name) is not None:
        return True
    parsed = LogFileName.parse(name)
    return parsed is not None


class _Resolver:
    """Plan paths -> paths relative to the table, with the rules of the module docstring."""

    def __init__(self, storage: Storage, where: str) -> None:
        self.storage = storage
        self.base = storage.base_uri.rstrip("/")
        local = storage.local_path("")
        self.real_base = os.path.realpath(local) if local is not None else None
        self.where = where
        self.foreign_bases: set[str] = set()

    def resolve(self, partition: str, planned: str) -> PlannedDelete:
        if not planned:
            raise HoodieFormatError(f"{self.where}: partition {partition!r} lists an empty file path")
        name = planned.rstrip("/").rsplit("/", 1)[-1]
        rel = f"{partition}/{name}" if partition else name
        if ".." in planned.split("/") or not _is_data_file(name):
            raise HoodieFormatError(
                f"{self.where}: plan names {planned}, which is not a data file of the table"
            )
        if "/" not in planned and ":" not in planned:
            return PlannedDelete(partition, rel, planned)  # v1 plans: a file name in its partition
        loc = locate(self.storage, planned)
        path = loc.path
        if not loc.is_location:  # relative to the base path
            if path != rel:
                raise HoodieFormatError(f"{self.where}: plan names {planned} under partition {partition!r}")
            return PlannedDelete(partition, rel, planned)
        if loc.relative is not None:  # under our base path
            if loc.relative != rel:
                raise HoodieFormatError(
                    f"{self.where}: plan names {planned} under partition {partition!r}, "
                    f"but the file is not in that partition"
                )
            return PlannedDelete(partition, rel, planned)
        suffix = "/" + rel
        if not path.endswith(suffix) or len(path) == len(suffix):
            raise HoodieFormatError(
                f"{self.where}: plan names {planned}, which is outside the table {self.base} "
                f"(expected .../{rel})"
            )
        foreign = path[: -len(suffix)]
        if foreign.startswith("/") and os.path.realpath(foreign) == self.real_base:
            return PlannedDelete(partition, rel, planned)  # our base path, spelled through a link
        self.foreign_bases.add(planned[: len(planned) - len(suffix)])
        if len(self.foreign_bases) > 1:
            bases = ", ".join(sorted(self.foreign_bases))
            raise HoodieFormatError(
                f"{self.where}: plan names files under several base paths ({bases}); "
                "they cannot all be this table"
            )
        return PlannedDelete(partition, rel, planned)


def resolve_plan(storage: Storage, plan: Mapping[str, Any], where: str) -> ResolvedPlan:
    """Check a ``HoodieCleanerPlan`` record and resolve its files (``HoodieFormatError`` if unusable)."""
    version = plan.get("version")
    version = 1 if version is None else version
    if version not in (1, 2):
        raise UnsupportedTableError(f"{where}: clean plan version {version} is not supported (1 and 2 are)")
    if not plan.get("policy"):
        raise HoodieFormatError(f"{where}: clean plan has no policy")
    v1 = plan.get("filesToBeDeletedPerPartition") or {}
    v2 = plan.get("filePathsToBeDeletedPerPartition") or {}
    resolver = _Resolver(storage, where)
    files: dict[str, list[PlannedDelete]] = {}
    if version == 1:
        for partition, names in v1.items():
            p = check_partition(str(partition), where)
            files[p] = [resolver.resolve(p, str(n)) for n in names or ()]
    else:
        if not v2 and any(v1.values()):
            raise HoodieFormatError(
                f"{where}: version 2 clean plan names files only in the deprecated "
                "filesToBeDeletedPerPartition field"
            )
        for partition, infos in v2.items():
            p = check_partition(str(partition), where)
            out: list[PlannedDelete] = []
            for info in infos or ():
                if info.get("isBootstrapBaseFile"):
                    raise UnsupportedTableError(
                        f"{where}: the plan deletes bootstrap base file {info.get('filePath')}; "
                        "hoodied does not support bootstrapped tables"
                    )
                out.append(resolver.resolve(p, str(info.get("filePath") or "")))
            files[p] = out
    seen: set[str] = set()
    for entries in files.values():
        for f in entries:
            if f.relative in seen:
                raise HoodieFormatError(f"{where}: plan names {f.relative} twice")
            seen.add(f.relative)
    partitions = [check_partition(str(p), where) for p in plan.get("partitionsToBeDeleted") or ()]
    if "" in partitions:
        raise HoodieFormatError(f"{where}: plan deletes the table's root as a partition")
    eitr = plan.get("earliestInstantToRetain") or {}
    return ResolvedPlan(
        files=files,
        partitions_to_delete=partitions,
        policy=str(plan["policy"]),
        earliest_commit_to_retain=str(eitr.get("timestamp") or ""),
        last_completed_commit=str(plan.get("lastCompletedCommitTimestamp") or ""),
        extra_metadata={str(k): str(v) for k, v in (plan.get("extraMetadata") or {}).items()},
    )


def _read_plan(storage: Storage, timeline: Timeline, inst: Instant, where: str) -> ResolvedPlan:
    plan = timeline.read_plan(inst)  # HoodieFormatError when the file is corrupt
    if not plan:
        raise HoodieFormatError(f"{where}: clean plan is empty")
    return resolve_plan(storage, plan, where)


# ---------------------------------------------------------------------------- deleting




def _delete_files(
    storage: Storage, todo: Sequence[PlannedDelete], parallelism: int, result: CleanResult
) -> None:
    if not todo:
        return
    errors: list[str] = []

    def one(f: PlannedDelete) -> tuple[PlannedDelete, bool | None]:
        try:
            return f, storage.delete(f.relative)
        except StorageError as exc:
            errors.append(str(exc))
            return f, None

    with ThreadPoolExecutor(max_workers=max(1, min(parallelism, len(todo))),
                            thread_name_prefix="hoodied-clean") as pool:
        for f, deleted in pool.map(one, todo):
            if deleted:
                result.deleted.append(f.relative)
            elif deleted is False:
                result.already_gone.append(f.relative)
    if errors:
        raise StorageError(f"{len(errors)} of the clean's files could not be deleted; first: {errors[0]}")


def _delete_partition(storage: Storage, partition: str) -> bool:
    """Drop a partition folder once only its metadata (and checksum) files are left; True when gone."""
    entries = storage.list(partition)
    leftover = [
        e for e in entries
        if e.is_dir or not (e.name.startswith(PARTITION_METAFILE) or e.name.endswith(".crc"))
    ]
    if leftover:
        log.warning("%s: partition still holds %s (and %d more); not deleted",
                    partition, leftover[0].name, len(leftover) - 1)
        return False
    for e in entries:
        storage.delete(e.path)
    local = storage.local_path(partition)
    if local is not None:
        try:
            os.rmdir(local)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"{local}: partition folder not removed: {exc.strerror or exc}") from None
    return True


def _metadata(plan: ResolvedPlan, clean_time: str, result: CleanResult, took_ms: int) -> dict[str, Any]:
    done = set(result.deleted)
    partitions: dict[str, dict[str, Any]] = {}
    for partition in sorted(set(plan.files) | set(plan.partitions_to_delete)):
        entries = plan.files.get(partition, [])
        partitions[partition] = {
            "partitionPath": partition,
            "policy": plan.policy,
            "deletePathPatterns": [f.file_name for f in entries],
            "successDeleteFiles": [f.file_name for f in entries if f.relative in done],
            "failedDeleteFiles": [f.file_name for f in entries if f.relative not in done],
            "isPartitionDeleted": partition in result.partitions_deleted,
        }
    return {
        "startCleanTime": clean_time,
        "timeTakenInMillis": took_ms,
        "totalFilesDeleted": sum(len(p["successDeleteFiles"]) for p in partitions.values()),
        "earliestCommitToRetain": plan.earliest_commit_to_retain,
        "lastCompletedCommitTimestamp": plan.last_completed_commit,
        "partitionMetadata": partitions,
        "version": CLEAN_METADATA_VERSION,
        "bootstrapPartitionMetadata": {},
        "extraMetadata": dict(plan.extra_metadata),
    }


# ---------------------------------------------------------------------------- the executor


def execute_clean(
    storage: Storage,
    config: TableConfig,
    lock: TableLock,
    clean_time: str,
    *,
    time_settings: TimeSettings | None = None,
    parallelism: int = DEFAULT_PARALLELISM,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    force: bool = False,
    temp_file_age_s: float = DEFAULT_MIN_AGE_S,
    mdt_runner: OperationRunner = run_in_process,
) -> CleanResult:
    """Run the pending clean ``clean_time`` to completion (takes ``lock`` itself, twice).
    ``temp_file_age_s``: leftover temp files older than this go too (see the module docstring).
    ``mdt_runner`` runs the operations of an MDT compaction the clean's MDT delta commit triggers:
    this process by default (``hoodied execute`` keeps it so: a clean never starts Spark), the
    daemon's running Spark session when it has one (``SparkOperations``, one task per MDT file
    group); everything else of the clean runs here either way.

    Raises ``InstantStateError`` when there is no such clean or a live executor owns it
    (its heartbeat is fresh; ``force`` overrides), ``HoodieFormatError`` for a plan that
    cannot be executed, ``UnsupportedTableError`` for a table whose metadata table a clean
    cannot keep exact; in all these cases nothing was changed.
    """
    require_clean_maintainable(storage, config, "executing a clean")
    if parallelism < 1:
        raise ValueError("clean parallelism must be at least 1")
    started = time.monotonic()
    writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
    with lock:
        timeline = Timeline.load(storage, config)
        inst = timeline.get(clean_time)
        if inst is None or inst.action is not Action.CLEAN:
            raise InstantStateError(
                f"{storage.base_uri}: no clean instant {clean_time} on the active timeline"
            )
        if inst.is_completed:
            log.info("%s clean: already completed", clean_time)
            return CleanResult(inst, was_completed=True)
        where = timeline.state_files(inst).get(State.REQUESTED) or timeline.state_file(inst)
        plan = _read_plan(storage, timeline, inst, where)
        require_clean_maintainable(storage, config, "executing a clean", plan.partitions_to_delete)
        alive = not is_heartbeat_expired(storage, clean_time, interval_ms=heartbeat_interval_ms,
                                         tolerable_misses=tolerable_misses)
        if alive and not force:
            raise HeartbeatAliveError(
                f"{clean_time}: clean has a live heartbeat (last beat at "
                f"{last_heartbeat_ms(storage, clean_time)} ms since the epoch); "
                "another executor is working on it"
            )
        # a superseded (paused) earlier attempt can delete nothing more, nor complete (hoodie.fence)
        attempt = start_attempt(storage, writer, clean_time, Action.CLEAN, heartbeat_interval_ms,
                                tolerable_misses)
    storage = attempt.storage
    with attempt:  # a failure after a takeover is the other attempt's (AttemptSupersededError)
        crash_point("inflight")
        result = CleanResult(inst)
        todo = [f for entries in plan.files.values() for f in entries]
        half = len(todo) // 2
        _delete_files(storage, todo[:half], parallelism, result)
        crash_point("deletes-half")
        _delete_files(storage, todo[half:], parallelism, result)
        for partition in plan.partitions_to_delete:
            (result.partitions_deleted if _delete_partition(storage, partition)
             else result.partitions_kept).append(partition)
        crash_point("deletes-done")
        metadata = _metadata(plan, clean_time, result, int((time.monotonic() - started) * 1000))
        with lock:
            result.temp_files_removed = remove_leftover_temps(storage, min_age_s=temp_file_age_s)
            if metadata_table_in_use(storage, config) is not None:
                _write_metadata_table(storage, config, lock, clean_time, plan, time_settings, mdt_runner)
                crash_point("mdt-done")
            lock.ensure_held()
            attempt.fence.check()
            result.instant = writer.complete(clean_time, Action.CLEAN, metadata)
            crash_point("completed")
    log.info("%s", result.summary())
    return result


def _write_metadata_table(
    storage: Storage,
    config: TableConfig,
    lock: TableLock,
    clean_time: str,
    plan: ResolvedPlan,
    time_settings: TimeSettings | None,
    mdt_runner: OperationRunner,
) -> None:
    """The MDT delta commit of the clean (the caller holds the lock; see the module docstring);
    an MDT compaction its upkeep runs has its per-file-group operations run by ``mdt_runner``."""
    deleted = {p: [f.file_name for f in entries] for p, entries in plan.files.items()}
    records = clean_records(storage, config, clean_time, deleted)
    mdt = MetadataWriter(storage, config, lock, time_settings=time_settings, runner=mdt_runner)
    mdt.write_deltacommit(clean_time, records, after_log=lambda: crash_point("mdt-log-written"))

"""The steps every Spark table-service attempt shares: find its plan, start it, run its job, commit it.

An attempt of instant T (compaction, log compaction, clustering) finds its instant under the table
lock (``pending_instant``: a completed T only has its leftover markers deleted), checks its plan
and inputs with the same function that ``service.spark_jobs`` runs before any rollback of a
failed attempt (each executor's ``check_*``, built on ``read_plan``), claims the instant
(``hoodie.fence``: the attempt's job and commit write only through a ``FencedStorage``), starts
its heartbeat, then the inflight transition (``start_attempt``: a failure there ends the
attempt: nothing ran); its Spark job then runs outside the lock (``run_attempt``,
``executors.engine.run_operations``) and must return at least one row for every operation.
``commit_attempt`` completes it under the lock, if the attempt was not taken over: files with
markers but no write stat (failed or duplicate task attempts) are deleted, the MDT delta commit
T is written and completed (``hoodie.metadata.commit.write_commit_to_metadata_table``), then T;
the markers go afterwards, and ``Attempt.end`` stops the heartbeat and releases the claim.

The crash points ``requested``, ``inflight``, ``written`` and ``completed`` (right after the
completed file, before the markers, heartbeat and identity go: ``hoodie.leftovers``) mark the steps
for the kill -9 tests; ``mdt-log-written`` and ``mdt-done`` are those of the MDT delta
commit. The environment that names the point reaches the Spark tasks too (in local mode they
are processes started by the driver's JVM, which inherits the driver's environment): each
executor's task calls ``crash_point(f"task:{k}")`` for its operation ``k``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import pyarrow as pa
from pyspark.sql import SparkSession

from hoodied.executors.engine import OperationTask, Progress, run_operations
from hoodied.hoodie.actions.write_schema import require_meta_fields
from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError
from hoodied.hoodie.fence import Attempt, start_attempt
from hoodied.hoodie.heartbeat import require_startable
from hoodied.hoodie.human import format_size
from hoodied.hoodie.leftovers import Leftovers, remove_leftovers
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.markers import WriteMarkers
from hoodied.hoodie.metadata.commit import require_commit_maintainable, write_commit_to_metadata_table
from hoodied.hoodie.metadata.encode import MetadataRecord
from hoodied.hoodie.metadata.writer import ShardedRecords
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.tasks import OperationRunner, run_in_process
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

__all__ = [
    "require_rewritable",
    "Attempt",
    "AttemptResult",
    "by_partition",
    "commit_attempt",
    "pending_instant",
    "read_plan",
    "run_attempt",
    "start_attempt",
]

P = TypeVar("P")


@dataclass(slots=True)
class AttemptResult:
    """What one attempt did; ``summary()`` is the line logged at its end."""

    instant: Instant
    write_stats: list[dict[str, Any]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    """Files of failed or duplicate task attempts removed before the commit (markers reconciliation)."""
    was_completed: bool = False
    seconds: float = 0.0

    #: The service's name in the summary.
    SERVICE: ClassVar[str] = ""

    @property
    def bytes_written(self) -> int:
        return sum(int(s.get("fileSizeInBytes") or 0) for s in self.write_stats)

    @property
    def rows_written(self) -> int:
        return sum(int(s.get("numWrites") or 0) for s in self.write_stats)

    def work(self) -> str:
        """What the attempt wrote, in words (the middle of the summary)."""
        raise NotImplementedError

    def summary(self) -> str:
        t = self.instant.requested_time
        if self.was_completed:
            return f"{t} {self.SERVICE}: already completed, nothing to do"
        done = f"completed at {self.instant.completion_time}" if self.instant.completion_time else "completed"
        return (
            f"{t} {self.SERVICE}: {self.work()}, {format_size(self.bytes_written)} written in "
            f"{self.seconds:.1f} s; {done}"
        )


def pending_instant(
    storage: Storage,
    timeline: Timeline,
    instant_time: str,
    name: str,
    is_kind: Callable[[Instant], bool],
    heartbeat_interval_ms: int,
    tolerable_misses: int,
) -> Instant:
    """Instant ``instant_time`` (a ``name`` instant by ``is_kind``), read under the lock.

    A completed instant's markers, heartbeat and attempt identity, left by a crash right after
    completing, are deleted (``hoodie.leftovers``). A pending instant must be startable (no live or
    failed attempt).
    """
    inst = timeline.get(instant_time)
    if inst is None or not is_kind(inst):
        raise InstantStateError(
            f"{storage.base_uri}: no {name} instant {instant_time} on the active timeline"
        )
    if inst.is_completed:  # leftovers of a crash right after completing
        remove_leftovers(storage, Leftovers(instant_time, markers=True, heartbeat=True, attempt=True))
        return inst
    require_startable(storage, inst, name, heartbeat_interval_ms, tolerable_misses)
    return inst


def read_plan(timeline: Timeline, inst: Instant, name: str, plan_type: type[P]) -> P:
    """The decoded plan of the pending ``inst``; ``HoodieFormatError`` when it is missing or not a ``name``
    plan. Reads only: the executors' ``check_*`` functions call it before anything is changed."""
    plan = timeline.plan(inst)
    if not isinstance(plan, plan_type):
        raise HoodieFormatError(f"{timeline.state_file(inst, State.REQUESTED)}: {name} plan is empty")
    return plan


def run_attempt(
    session: SparkSession,
    count: int,
    task: OperationTask,
    schema: pa.Schema,
    *,
    description: str,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """The rows of the attempt's job: one operation per task, every operation answered."""
    crash_point("inflight")
    table = run_operations(session, count, task, schema, progress=progress, description=description)
    rows = table.to_pylist()
    crash_point("written")
    answered = len({r["op"] for r in rows})
    if answered != count:
        raise InstantStateError(f"{description}: task results for {answered} of {count} operations")
    return rows


def by_partition(write_stats: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The write stats by partition path, in their order (``partitionToWriteStats``)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for stat in write_stats:
        out.setdefault(stat["partitionPath"], []).append(stat)
    return out


def commit_attempt(
    result: AttemptResult,
    attempt: Attempt,
    config: TableConfig,
    lock: TableLock,
    writer: TimelineWriter,
    action: Action,
    metadata: Mapping[str, Any],
    encode: Callable[[Mapping[str, Any], int], bytes],
    *,
    time_settings: TimeSettings | None = None,
    record_index: Sequence[MetadataRecord] = (),
    check: Callable[[], None] | None = None,
    mdt_runner: OperationRunner = run_in_process,
    mdt_sharded: Mapping[str, ShardedRecords] | None = None,
) -> None:
    """Complete ``attempt`` of ``result.instant`` with ``metadata`` (encoded by ``encode``; takes ``lock``).

    Under the lock, first of all, the attempt must still be the instant's current one
    (``AttemptSupersededError`` otherwise: nothing is changed); then the files with markers but
    not in ``result.write_stats`` are deleted (``result.removed``), ``check()`` runs (a refusal
    leaves the attempt inflight), the MDT delta commit T completes before T does, as in Hudi
    (readers ignore it until then), and ``result.instant`` becomes the completed T. The markers
    go afterwards. ``mdt_runner`` runs the operations of an MDT compaction the MDT upkeep runs
    first (``SparkOperations`` of the attempt's session: one Spark task per MDT file group), and
    those of the ``mdt_sharded`` MDT partitions (records built per MDT file group in the tasks).
    """
    instant_time = result.instant.requested_time
    storage = attempt.storage  # every write and delete below is admitted by the fence
    with lock:
        attempt.fence.check()
        written = {s["path"] for s in result.write_stats}
        result.removed = WriteMarkers(storage, instant_time).reconcile(written)
        if check is not None:
            check()
        write_commit_to_metadata_table(storage, config, lock, instant_time, metadata,
                                       time_settings=time_settings, record_index=record_index,
                                       runner=mdt_runner, sharded=mdt_sharded)
        lock.ensure_held()
        attempt.fence.check()
        result.instant = writer.complete(instant_time, action, encode(metadata, config.version))
        crash_point("completed")
    WriteMarkers(storage, instant_time).delete_all()


def require_rewritable(storage: Storage, config: TableConfig, operation: str, service: str) -> None:
    """The table's support for a service that rewrites data files, whatever the plan (reads only):
    the metadata-table partitions its commit keeps exact (``operation``: Hudi's operation type),
    and the meta fields the rewritten files carry over."""
    require_commit_maintainable(storage, config, operation, service)
    require_meta_fields(config, storage.base_uri, service)

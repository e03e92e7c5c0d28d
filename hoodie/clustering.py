"""The Spark-free rules of executing a clustering: output layout, commit metadata, conflicts, record index.

As Apache Hudi's ``SparkSortAndSizeExecutionStrategy`` (a ``MultipleSparkJobExecutionStrategy``)
executes a ``HoodieClusteringPlan``:

- each group's records (latest file slices, base + logs merged) are sorted by the strategy
  param ``hoodie.clustering.plan.strategy.sort.columns`` when it is set (row writer:
  ``RowCustomColumnsSortPartitioner``, a global ascending sort, nulls first, then
  ``coalesce(numOutputFileGroups)``: every output holds a contiguous range of the order);
  without sort columns they keep their read order (bulk-insert sort mode ``NONE``);
- the records are split into ``numOutputFileGroups`` contiguous parts (``split_points``), one
  new file group each (``<UUID>-0``); a file that reaches the target size
  (``hoodie.clustering.plan.strategy.target.file.max.bytes``, set as ``hoodie.parquet.max.file.size``
  for the bulk insert) is closed and the part goes on in ``<same UUID>-1``, ``-2``...
  (the row writer's file-id prefix + counter);
- the commit is a ``HoodieReplaceCommitMetadata``: the new files' write stats (``prevCommit``
  "null", every record an insert), ``partitionToReplaceFileIds`` = the plan's input file
  groups, ``operationType`` ``CLUSTER``, ``compacted`` false, ``extraMetadata.schema``.

Conflict rule (``SimpleConcurrentFileWritesConflictResolutionStrategy`` with
``ConcurrentOperation``): a write that completed after the clustering was planned and
mutated one of the plan's file groups (its write stats, or for a replacecommit also its
replaced file groups) conflicts; the clustering must not complete (Hudi throws
``HoodieWriteConflictException``). A compaction requested before the clustering does not
conflict (``resolveConflict`` lets it pass). Hudi's writers reject updates to file groups
under pending clustering (``SparkRejectUpdateStrategy``), so a conflict means a writer that
did not honour that.

Record index: clustering moves every record to a new file group; ``record_index_updates``
gives the ``record_index`` entries (``HoodieMetadataPayload.createRecordIndexUpdate``) of the
moved keys, pointing at the new file groups with the clustering instant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hoodie.errors import InstantStateError
from hoodie.instant import Action, Instant
from hoodie.mdt_encode import MetadataRecord
from hoodie.mdt_index_records import record_index_record
from hoodie.plans import ClusteringPlan
from hoodie.properties import TableConfig
from hoodie.timeline import Timeline, instant_time_to_datetime

__all__ = [
    "CLUSTER_OPERATION",
    "SORT_COLUMNS_KEY",
    "TARGET_FILE_MAX_BYTES_KEY",
    "WriteConflictError",
    "conflicting_writes",
    "output_file_id",
    "record_index_updates",
    "replace_commit_metadata",
    "require_no_conflict",
    "sort_columns",
    "split_points",
    "target_file_max_bytes",
]

CLUSTER_OPERATION = "CLUSTER"
SORT_COLUMNS_KEY = "hoodie.clustering.plan.strategy.sort.columns"
TARGET_FILE_MAX_BYTES_KEY = "hoodie.clustering.plan.strategy.target.file.max.bytes"
DEFAULT_TARGET_FILE_MAX_BYTES = 1024 * 1024 * 1024

#: Actions whose completed instants are writes a clustering can conflict with (the commits timeline).
_WRITE_ACTIONS = (Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT, Action.COMPACTION,
                  Action.LOG_COMPACTION, Action.CLUSTERING)


class WriteConflictError(InstantStateError):
    """A write completed since planning touched a file group the service rewrites; nothing was completed.

    Next step: roll back the attempt and plan again (the plan's file groups changed).
    """


def sort_columns(plan: ClusteringPlan) -> tuple[str, ...]:
    """The plan's sort columns (strategy param), in order; empty when the plan does not sort."""
    raw = plan.strategy_params.get(SORT_COLUMNS_KEY) or ""
    return tuple(c.strip() for c in raw.split(",") if c.strip())


def target_file_max_bytes(plan: ClusteringPlan, default: int = DEFAULT_TARGET_FILE_MAX_BYTES) -> int:
    """The size at which an output file is closed: the plan's strategy param, else Hudi's default (1 GB)."""
    raw = plan.strategy_params.get(TARGET_FILE_MAX_BYTES_KEY)
    try:
        value = int(raw) if raw else default
    except ValueError:
        value = default
    return value if value > 0 else default


def split_points(num_rows: int, num_outputs: int) -> list[int]:
    """Row offsets where the ``num_outputs`` contiguous parts start, plus ``num_rows`` at the end.

    Parts differ by at most one row (Spark's coalesce of a range-partitioned sort gives about
    equal parts); never more parts than rows, and no part for no rows.
    """
    parts = max(1, min(num_outputs, num_rows))
    if num_rows == 0:
        return [0]
    return [num_rows * i // parts for i in range(parts)] + [num_rows]


def output_file_id(prefix: str, index: int) -> str:
    """The ``index``-th file id of one output part (``FSUtils.createNewFileId``: ``<prefix>-<n>``)."""
    return f"{prefix}-{index}"


def replace_commit_metadata(
    write_stats: Mapping[str, list[dict[str, Any]]],
    replaced: Mapping[str, Iterable[str]],
    schema: str | None,
) -> dict[str, Any]:
    """A ``HoodieReplaceCommitMetadata`` of a clustering (field order of Hudi's v6 JSON)."""
    return {
        "partitionToWriteStats": {p: list(s) for p, s in write_stats.items()},
        "compacted": False,
        "extraMetadata": {"schema": schema} if schema is not None else {},
        "version": None,
        "operationType": CLUSTER_OPERATION,
        "partitionToReplaceFileIds": {p: list(ids) for p, ids in replaced.items()},
    }


def _mutated(timeline: Timeline, inst: Instant) -> set[tuple[str, str]]:
    """The (partition, file id) pairs a completed write mutated (``ConcurrentOperation.init``)."""
    meta = timeline.read_commit_metadata(inst)
    out = {
        (str(partition), str(stat.get("fileId")))
        for partition, stats in (meta.get("partitionToWriteStats") or {}).items()
        for stat in stats or ()
        if stat.get("fileId")
    }
    for partition, ids in (meta.get("partitionToReplaceFileIds") or {}).items():
        out.update((str(partition), str(f)) for f in ids or ())
    return out


def conflicting_writes(
    timeline: Timeline, clustering: Instant, file_groups: Iterable[tuple[str, str]]
) -> list[tuple[Instant, list[tuple[str, str]]]]:
    """Completed writes that conflict with completing ``clustering``, with the file groups they touched.

    Candidates are the completed writes of the commits timeline that completed after the
    clustering's requested time (layout 1: completion time from the file's modification
    time, as Hudi backfills it); a compaction requested before the clustering is let pass.
    """
    planned = set(file_groups)
    t = clustering.requested_time
    out = []
    for inst in timeline.completed(_WRITE_ACTIONS):
        if inst.requested_time == t or not inst.completion_time or inst.completion_time <= t:
            continue
        if inst.action is Action.COMPACTION and inst.requested_time < t:
            continue
        touched = sorted(planned & _mutated(timeline, inst))
        if touched:
            out.append((inst, touched))
    return out


def require_no_conflict(
    timeline: Timeline, clustering: Instant, file_groups: Iterable[tuple[str, str]]
) -> None:
    """Raise ``WriteConflictError`` naming the first conflicting write, if there is one."""
    found = conflicting_writes(timeline, clustering, file_groups)
    if not found:
        return
    inst, touched = found[0]
    more = f" (and {len(found) - 1} more writes)" if len(found) > 1 else ""
    part, fid = touched[0]
    raise WriteConflictError(
        f"clustering {clustering.requested_time}: {inst.file_action.value} {inst.requested_time} "
        f"completed at {inst.completion_time}, after the clustering was planned, and changed file group "
        f"{fid} in partition {part!r}{more}; the clustering cannot complete (roll it back and plan again)"
    )


def record_index_updates(
    moved: Iterable[tuple[str, str, Iterable[str]]], instant_time: str, config: TableConfig
) -> list[MetadataRecord]:
    """``record_index`` records (key, record) of the records a clustering moved.

    ``moved``: (partition, new file id, record keys written to it). Every record points at the
    new file group, with the clustering instant (epoch ms in the timeline's time zone) as its
    instant, as Hudi's record index update of a new file group does.
    """
    millis = int(instant_time_to_datetime(instant_time, config.tzinfo).timestamp() * 1000)
    return [
        (key, record_index_record(key, partition, file_id, millis))
        for partition, file_id, keys in moved
        for key in keys
    ]

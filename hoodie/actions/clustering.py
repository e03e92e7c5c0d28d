"""The Spark-free rules of executing a clustering: output layout, commit metadata, conflicts, record index.

As Apache Hudi's ``SparkSortAndSizeExecutionStrategy`` (a ``MultipleSparkJobExecutionStrategy``)
executes a ``HoodieClusteringPlan``:

- each group's records (latest file slices, base + logs merged) are sorted by the strategy
  param ``hoodie.clustering.plan.strategy.sort.columns`` when it is set (row writer:
  ``RowCustomColumnsSortPartitioner``, a global ascending sort, nulls first, then
  ``coalesce(numOutputFileGroups)``: every output holds a contiguous range of the order, here
  parts of equal rows cut by ``split_points``); without sort columns they keep their read
  order (bulk-insert sort mode ``NONE``: ``coalesce`` of the read partitions, here the slices
  dealt to the outputs in contiguous runs, again by ``split_points``);
- each part becomes a new file group (``<UUID>-0``); a file that reaches the target size
  (``hoodie.clustering.plan.strategy.target.file.max.bytes`` when the plan carries it, else its
  default, 1 GB; Hudi's executor takes it from its write config and sets it as
  ``hoodie.parquet.max.file.size`` for the bulk insert) is closed and the part goes on in
  ``<same UUID>-1``, ``-2``... (the row writer's file-id prefix + counter). The size is checked
  after each row group, so a file ends at most one row group past the target;
- the commit is a ``HoodieReplaceCommitMetadata``: the new files' write stats (``prevCommit``
  "null", every record an insert), ``partitionToReplaceFileIds`` = the plan's input file
  groups, ``operationType`` ``CLUSTER``, ``compacted`` false, ``extraMetadata.schema``.

Conflict rule (``SimpleConcurrentFileWritesConflictResolutionStrategy`` with
``ConcurrentOperation``): a write that completed after the clustering was planned and
mutated one of the plan's file groups (its write stats, or for a replacecommit also its
replaced file groups) conflicts; the clustering must not complete (Hudi throws
``HoodieWriteConflictException``). A compaction requested before the clustering does not
conflict (``resolveConflict`` lets it pass). File groups are compared by (partition, file id).
Hudi's writers reject updates to file groups under pending clustering
(``SparkRejectUpdateStrategy``), so a conflict means a writer that did not honour that.
Which writes completed after the clustering was planned is read from the timeline's order first,
as Hudi 0.x does (``getCandidateInstants``: completed instants after a given instant *time*): a
write requested after the clustering's instant started after the plan, so it completed after it,
whatever completion time it carries. Only a write requested before the clustering (in flight while
it was planned) needs its completion time. Layout 1 has none but the completed file's modification
time, which is no order: a copy of the table resets it (there a base file no newer than the
planned one is known to predate the plan), and a writer host whose clock is behind, or a storage
that keeps whole seconds, dates a later write at or before the plan.

Record index: clustering moves every record to a new file group; ``record_index_updates``
gives the ``record_index`` entries (``HoodieMetadataPayload.createRecordIndexUpdate``) of the
moved keys, pointing at the new file groups with the clustering instant. ``MovedKeys`` gives
them per MDT file group (``metadata.writer.ShardedRecords``): the operation of one record-index
file group reads the key column of every new base file batch by batch and keeps the keys that
route to it, so no driver holds the moved keys (Hudi builds these records in the executors too,
``BaseFileRecordParsingUtils.generateRLIMetadataHoodieRecordsForBaseFile`` in a ``flatMap``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from hoodied.hoodie.basefile import RECORD_KEY
from hoodied.hoodie.errors import InstantStateError, UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName
from hoodied.hoodie.metadata.encode import RECORD_INDEX, MetadataRow, file_group_indexes
from hoodied.hoodie.metadata.index_records import record_index_record
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, instant_time_to_epoch_ms
from hoodied.hoodie.timeline.plans import ClusteringPlan

__all__ = [
    "CLUSTER_OPERATION",
    "SORT_COLUMNS_KEY",
    "TARGET_FILE_MAX_BYTES_KEY",
    "MovedKeys",
    "WriteConflictError",
    "check_sort_columns",
    "conflicting_writes",
    "moved_keys",
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


def check_sort_columns(columns: tuple[str, ...], schema: pa.Schema, where: str) -> None:
    """``UnsupportedTableError`` unless every sort column is a sortable top-level column of ``schema``
    (the table's columns): the planner checks the columns it is given before it writes a plan, the
    executor the columns of a plan someone else wrote."""
    for c in columns:
        if c not in schema.names:
            raise UnsupportedTableError(
                f"{where}: sort column {c!r} is not a top-level column of the table (nested sort "
                "columns are not supported)"
            )
        t = schema.field(c).type
        if pa.types.is_nested(t) or pa.types.is_dictionary(t):
            raise UnsupportedTableError(f"{where}: sort column {c!r} has type {t}, which cannot be sorted")


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


def _planned_base_instants(plan: ClusteringPlan) -> dict[tuple[str, str], str]:
    """(partition, file id) of every planned file group -> the instant of the base file the plan
    reads ("" for a slice without one)."""
    out: dict[tuple[str, str], str] = {}
    for group in plan.input_groups:
        for s in group.slices:
            parsed = BaseFileName.parse(s.base_file_name) if s.base_file_name else None
            out[(s.partition_path, s.file_id)] = parsed.instant_time if parsed is not None else ""
    return out


def _touched(
    timeline: Timeline, inst: Instant, planned: Mapping[tuple[str, str], str], layout: int
) -> set[tuple[str, str]]:
    """The planned file groups a completed write mutated (``ConcurrentOperation.init``: its write
    stats, and the file groups it replaced).

    Layout 1 only: a write stat of a base file no newer than the one the plan reads was written
    before planning (a later write of the group makes a newer base file; Hudi's writers never
    commit an older one over it), whatever the completion time backfilled from the file's
    modification time says (a copied timeline looks completed just now). Log-file stats always
    count there: a table-version-6 log file is named after its slice, not its write.
    """
    meta = timeline.read_commit_metadata(inst)
    out: set[tuple[str, str]] = set()
    for partition, stats in (meta.get("partitionToWriteStats") or {}).items():
        for stat in stats or ():
            key = (str(partition), str(stat.get("fileId") or ""))
            if key not in planned:
                continue
            base = BaseFileName.parse(str(stat.get("path") or "").rsplit("/", 1)[-1])
            if layout < 2 and base is not None and planned[key] and base.instant_time <= planned[key]:
                continue
            out.add(key)
    for partition, ids in (meta.get("partitionToReplaceFileIds") or {}).items():
        out.update(k for k in ((str(partition), str(f)) for f in ids or ()) if k in planned)
    return out


def conflicting_writes(
    timeline: Timeline, clustering: Instant, plan: ClusteringPlan
) -> list[tuple[Instant, list[tuple[str, str]]]]:
    """Completed writes that conflict with completing ``clustering``, with the file groups they touched.

    Candidates are the completed writes of the commits timeline that completed after the
    clustering's requested time: every write requested after it (the timeline's order; its
    completion time is not consulted), and a write requested before it whose completion time
    (layout 1: the file's modification time, as Hudi backfills it) is later; a compaction
    requested before the clustering is let pass.
    """
    planned = _planned_base_instants(plan)
    layout = timeline.config.timeline_layout
    t = clustering.requested_time
    out = []
    for inst in timeline.completed(_WRITE_ACTIONS):
        if inst.requested_time == t:
            continue
        if inst.requested_time < t and (not inst.completion_time or inst.completion_time <= t):
            continue
        if inst.action is Action.COMPACTION and inst.requested_time < t:
            continue
        touched = sorted(_touched(timeline, inst, planned, layout))
        if touched:
            out.append((inst, touched))
    return out


def require_no_conflict(timeline: Timeline, clustering: Instant, plan: ClusteringPlan) -> None:
    """Raise ``WriteConflictError`` naming the first conflicting write, if there is one."""
    found = conflicting_writes(timeline, clustering, plan)
    if not found:
        return
    inst, touched = found[0]
    more = f" (and {len(found) - 1} more writes)" if len(found) > 1 else ""
    part, fid = touched[0]
    t = clustering.requested_time
    # a layout-1 time that is not after the plan is a file's time, not the order (conflicting_writes)
    at = f" at {inst.completion_time}" if inst.completion_time and inst.completion_time > t else ""
    raise WriteConflictError(
        f"clustering {t}: {inst.file_action.value} {inst.requested_time} "
        f"completed{at}, after the clustering was planned, and changed file group "
        f"{fid} in partition {part!r}{more}; the clustering cannot complete (roll it back and plan again)"
    )


def record_index_updates(
    moved: Iterable[tuple[str, str, Iterable[str]]], instant_time: str, config: TableConfig
) -> list[MetadataRow]:
    """``record_index`` records (key, record) of the records a clustering moved.

    ``moved``: (partition, new file id, record keys written to it). Every record points at the
    new file group, with the clustering instant (epoch ms in the timeline's time zone) as its
    instant, as Hudi's record index update of a new file group does.

    A key may sit in several of the clustered file groups (inserts under a non-global index
    write one key to a new file group each time). Hudi reads a new base file's keys as a set
    (``BaseFileRecordParsingUtils.generateRLIMetadataHoodieRecordsForBaseFile``), so copies that
    land in one output file give one entry. Copies that land in two different output files
    would need two entries for one key: Hudi refuses that commit (its ``reduceByKeys`` fails on
    two record-index updates of one key), and so does this; the attempt stays inflight, to be
    rolled back. (Through ``MovedKeys`` the refusal comes from the operation of the key's
    record-index file group, after the MDT delta commit went inflight: the rollback of the
    attempt rolls that back too.)
    """
    return _record_index_rows(moved, instant_time_to_epoch_ms(instant_time, config.tzinfo))


def _record_index_rows(moved: Iterable[tuple[str, str, Iterable[str]]], millis: int) -> list[MetadataRow]:
    return list(_rows(_new_files(moved), millis))


def _new_files(moved: Iterable[tuple[str, str, Iterable[str]]]) -> dict[str, tuple[str, str]]:
    """Each moved key -> (partition, new file id), once, in the order the keys come; a key written
    to two new file groups is refused."""
    written_to: dict[str, tuple[str, str]] = {}
    for partition, file_id, keys in moved:
        target = (partition, file_id)  # one tuple per file, shared by its keys
        for key in keys:
            other = written_to.setdefault(key, target)[1]
            if other != file_id:
                raise UnsupportedTableError(
                    f"record key {key!r} was written to two new file groups ({other} and {file_id}): "
                    "the record index cannot point at both, and Hudi refuses such a commit too; "
                    "roll the clustering back"
                )
    return written_to


def _rows(written_to: Mapping[str, tuple[str, str]], millis: int) -> Iterator[MetadataRow]:
    for key, (partition, file_id) in written_to.items():
        yield key, record_index_record(key, partition, file_id, millis)


#: Keys read per batch of a new base file's key column.
_KEY_BATCH_ROWS = 65536


@dataclass(frozen=True, slots=True)
class MovedKeys:
    """The ``record_index`` records of a clustering, per MDT file group (``metadata.writer.ShardedRecords``).

    Holds the new base files (partition, file id, path relative to ``storage``), never their
    keys: ``records(index, count)`` reads every file's key column batch by batch, keeps the keys
    that ``file_group_index`` routes to file group ``index`` and builds their records as
    ``record_index_updates`` does, with its duplicate rule: every copy of a key routes to the
    same file group, so the operation of that group sees them all and refuses a key written to
    two new file groups there. The keys are all read and checked when ``records`` is called, the
    records built one by one as they are taken (``metadata.writer.MdtShardTask`` keeps them encoded,
    a record's dicts being several times its cell). Memory: the keys of one MDT file group plus one
    key batch, and what the caller keeps of the records.
    """

    storage: Storage
    files: tuple[tuple[str, str, str], ...]
    instant_millis: int

    def records(self, index: int, count: int) -> Iterator[MetadataRow]:
        moved = ((partition, file_id, self._keys(path, index, count))
                 for partition, file_id, path in self.files)
        return _rows(_new_files(moved), self.instant_millis)

    def _keys(self, path: str, index: int, count: int) -> Iterator[str]:
        with self.storage.open(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=_KEY_BATCH_ROWS, columns=[RECORD_KEY]):
                keys = batch.column(0)
                # routed in numpy, a batch at once: only this group's keys become Python strings
                yield from keys.filter(pa.array(file_group_indexes(keys, count) == index)).to_pylist()


def moved_keys(
    storage: Storage, config: TableConfig, instant_time: str, write_stats: Iterable[Mapping[str, Any]]
) -> MovedKeys | None:
    """The ``MovedKeys`` of a clustering's new base files (its write stats); ``None`` without a
    record index."""
    if RECORD_INDEX not in config.metadata_partitions:
        return None
    files = tuple((str(s["partitionPath"]), str(s["fileId"]), str(s["path"])) for s in write_stats)
    return MovedKeys(storage, files, instant_time_to_epoch_ms(instant_time, config.tzinfo))

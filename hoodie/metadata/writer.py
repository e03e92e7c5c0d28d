"""Metadata-table delta commits: the MDT side of a data-table instant.

For a data-table instant T that adds or removes files, Hudi writes an MDT delta commit with the
same requested time T and completes it *before* T completes on the data timeline
(``HoodieBackedTableMetadataWriter``). Readers only honour MDT instants whose data instant is
completed, so a crash between the two leaves readers on the old state, and a re-run finishes
the job. This module writes that delta commit:

1. ``T.deltacommit.requested`` (empty) and ``T.deltacommit.inflight`` (HoodieCommitMetadata,
   no write stats, ``UPSERT_PREPPED``) on the MDT timeline, through ``TimelineWriter``;
2. per MDT partition, records routed to file groups by ``file_group_index`` (file groups =
   the partition's existing file ids, sorted); every file group that receives records gets a
   new log file ``.<fileId>_<T>.log.1_<writeToken>`` holding one HFILE_DATA block
   (``metadata.encode.encode_hfile_data_block``) of its records and, after it, one DELETE block
   (header ``INSTANT_TIME`` and ``SCHEMA``) of its deletes (records of None):
   ``HoodieDeleteRecord{key, partitionPath = MDT partition, orderingVal IntWrapper 0}``, as
   Hudi's append handle writes record-index and secondary-index deletes; written once;
3. ``T_<completion>.deltacommit``: one write stat per log file (path
   ``<partition>/<log file>``, ``prevCommit`` T, ``numWrites`` = ``numUpdateWrites`` = records,
   ``numDeletes`` = deletes, sizes, ``logVersion`` 1) and ``extraMetadata.schema`` = the record
   schema without meta fields.

Re-running T, as Hudi's ``commitInternal`` does: when the MDT timeline already holds T (pending
after a crash in the middle, or completed while the data instant T failed afterwards), T is
first rolled back with an MDT rollback instant at a new instant time
(``hoodie.metadata.rollback.rollback_mdt_deltacommit``: its files and timeline files are deleted),
then written again; a pending MDT rollback of T is finished first. Only when the data instant T
is completed too is a completed MDT T left as it is (nothing to redo).

MDT upkeep (``hoodie.metadata.upkeep.maintain``): before the delta commit T is written, pending MDT
compactions are finished, then an MDT clean and an MDT compaction run when due (Hudi runs
``performTableServices`` at the same point: when the data writer of T sets up its MDT writer).
``upkeep=False`` turns that off; ``max_delta_commits`` overrides
``hoodie.metadata.compact.max.delta.commits`` (else the data table's property, else 10);
``runner`` runs an MDT compaction's per-file-group operations (``hoodie.tasks``: in this process
by default; the executors pass their Spark session's, one task per MDT file group).

An MDT partition whose records a driver should not hold (a clustering's ``record_index``: one
record per moved key) comes as ``ShardedRecords`` instead: after the inflight transition the
writer runs one operation per file group of that partition through ``runner``
(``MdtShardTask``), which builds the records of its file group where it runs, encodes its
blocks and writes its log file write-once (write token ``<file group>-1-0``, never one of the
driver's ``<n>-0-0``), and returns one small row; the driver adds the write stats. A shard that
fails (a refused record) fails the attempt after the delta commit went inflight: it stays
inflight and is rolled back before the retry, like any failed attempt.

Which MDT partitions get which records is the caller's business (``metadata.encode``,
``metadata.colstats``, ``metadata.clean``, ``metadata.commit``); ``unmaintained_partitions`` tells which MDT
partitions of a table a caller cannot keep exact, and ``require_mdt_maintainable`` refuses such a
table (and every other MDT a caller cannot write) before anything is written.
The caller holds the data table's lock throughout.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from hoodied.hoodie.errors import FileAlreadyExistsError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName, LogFileName, make_write_token
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.log import (
    BlockType,
    DeleteRecord,
    HeaderKey,
    encode_block,
    encode_delete_block,
    write_log_file,
)
from hoodied.hoodie.metadata.colstats import column_stats_columns
from hoodied.hoodie.metadata.encode import (
    COLUMN_STATS,
    FILES,
    MetadataRecord,
    encode_cell,
    encode_hfile_cells_block,
    file_group_index,
    metadata_payload_schema_json,
    metadata_schema_json,
)
from hoodied.hoodie.metadata.reader import METADATA_FOLDER, metadata_table_in_use
from hoodied.hoodie.metadata.rollback import rollback_mdt_deltacommit
from hoodied.hoodie.metadata.upkeep import UpkeepResult, maintain
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.tasks import OperationRunner, run_in_process
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.commit_metadata import write_stat
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.truetime import TimeSettings, TrueTime
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "SHARD_RESULT_SCHEMA",
    "MdtLogFile",
    "MdtShardTask",
    "MetadataWriter",
    "ShardedRecords",
    "require_mdt_maintainable",
    "unmaintained_partitions",
]

UPSERT_PREPPED = "UPSERT_PREPPED"


@dataclass(frozen=True, slots=True)
class MdtLogFile:
    """One log file written by an MDT delta commit."""

    partition: str  # MDT partition, e.g. "files"
    file_id: str  # e.g. "files-0000-0"
    name: str  # log file name
    size: int
    records: int
    deletes: int = 0

    @property
    def path(self) -> str:
        return f"{self.partition}/{self.name}"


class ShardedRecords(Protocol):
    """The records of one MDT partition, built per file group where the operation runs.

    Picklable (a module-level class of plain values and a ``Storage``): it goes to the engine's
    tasks. ``records(index, count)`` gives the records (deletes as ``(key, None)``) whose key
    ``file_group_index`` routes to file group ``index`` of ``count``; it may raise to refuse
    them (the attempt then fails after the MDT delta commit went inflight).
    """

    def records(self, index: int, count: int) -> Iterable[MetadataRecord]: ...


#: What the operation of one sharded MDT file group returns: the log file it wrote (``name``
#: empty when the file group received no record), its size and counts.
SHARD_RESULT_SCHEMA = pa.schema([
    ("op", pa.int64()),
    ("partition", pa.string()),
    ("file_id", pa.string()),
    ("name", pa.string()),
    ("size", pa.int64()),
    ("records", pa.int64()),
    ("deletes", pa.int64()),
])


@dataclass(frozen=True, slots=True)
class MdtShardTask:
    """The per-file-group work of a sharded MDT partition (``hoodie.tasks``): build the records
    of file group ``index``, encode them as the driver encodes its blocks and write the log file.
    Pickled to the engine's tasks with the MDT's ``Storage`` (fenced when the data attempt is)."""

    storage: Storage
    partition: str
    file_ids: tuple[str, ...]
    instant_time: str
    table_version: int
    source: ShardedRecords

    def __call__(self, index: int, write_token: str) -> pa.RecordBatch:
        # The name does not take the engine's write token: a retried or duplicate task attempt
        # must collide with the file of the first (write-once) instead of adding a second log
        # file of the same records to the file group.
        del write_token
        file_id = self.file_ids[index]
        cells: list[tuple[str, bytes]] = []
        deletes: list[str] = []
        for key, record in self.source.records(index, len(self.file_ids)):
            if record is None:
                deletes.append(key)
            else:  # encoded as it comes: a file group's records are kept as cells, several times smaller
                cells.append(encode_cell(key, record, self.table_version))
        name, size = "", 0
        if cells or deletes:
            encoded = _encode_blocks(self.partition, cells, deletes, self.instant_time, self.table_version)
            name = LogFileName(file_id, self.instant_time, 1, shard_write_token(index)).format()
            path = f"{self.partition}/{name}"
            try:
                size = write_log_file(self.storage, path, encoded)
            except FileAlreadyExistsError:  # another attempt of this operation wrote it whole
                size = self.storage.size(path)
            log.info("%s/%s: written (%d records, %d deletes, %d bytes)",
                     self.storage.base_uri, path, len(cells), len(deletes), size)
        return pa.RecordBatch.from_pylist(
            [{"op": index, "partition": self.partition, "file_id": file_id, "name": name, "size": size,
              "records": len(cells), "deletes": len(deletes)}],
            schema=SHARD_RESULT_SCHEMA,
        )


def shard_write_token(index: int) -> str:
    """The write token of a sharded file group's log file (stage 1: the driver's are stage 0)."""
    return make_write_token(index, 1, 0)


def _encode_blocks(partition: str, cells: list[tuple[str, bytes]], deletes: list[str], instant_time: str,
                   table_version: int) -> list[bytes]:
    """One file group's blocks: an HFILE_DATA block of ``cells`` (``encode_cell``), then a DELETE block of
    ``deletes``."""
    encoded = [encode_hfile_cells_block(cells, instant_time, table_version)] if cells else []
    if deletes:
        encoded.append(_delete_block(partition, deletes, instant_time, table_version))
    return encoded


def _delete_block(partition: str, keys: list[str], instant_time: str, table_version: int) -> bytes:
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: metadata_schema_json(table_version)}
    deletes = [DeleteRecord(key, partition, 0, "IntWrapper") for key in keys]
    return encode_block(BlockType.DELETE, header, encode_delete_block(deletes))


class MetadataWriter:
    """Writes MDT delta commits of one data table (table version 8 or 9)."""

    def __init__(
        self,
        data_storage: Storage,
        data_config: TableConfig,
        lock: TableLock,
        *,
        truetime: TrueTime | None = None,
        time_settings: TimeSettings | None = None,
        upkeep: bool = True,
        max_delta_commits: int | None = None,
        runner: OperationRunner = run_in_process,
    ) -> None:
        if data_config.version not in (8, 9):
            raise UnsupportedTableError(
                "metadata table writes need table version 8 or 9; "
                f"this table is version {data_config.version}"
            )
        if not data_config.metadata_table_available:
            raise UnsupportedTableError(f"{METADATA_FOLDER}: the table has no metadata table to write")
        self.data_config = data_config
        self.data_storage = data_storage
        self.lock = lock
        self.storage = data_storage.child(METADATA_FOLDER)
        self.config = load_table_config(self.storage, metadata_table=True)
        self.timeline = TimelineWriter(
            self.storage, self.config, lock, truetime=truetime, time_settings=time_settings
        )
        self.upkeep = upkeep
        self.max_delta_commits = max_delta_commits
        self.runner = runner
        self.last_upkeep: UpkeepResult | None = None

    @property
    def partitions(self) -> tuple[str, ...]:
        """The MDT partitions the data table declares complete (``hoodie.table.metadata.partitions``)."""
        return tuple(self.data_config.metadata_partitions)

    def file_groups(self, mdt_partition: str) -> list[str]:
        """The file ids of an MDT partition, sorted (index i is file group i)."""
        ids = set()
        for info in self.storage.list(mdt_partition):
            name = BaseFileName.parse(info.name) or LogFileName.parse(info.name)
            if name is not None and not info.is_dir:
                ids.add(name.file_id)
        if not ids:
            raise UnsupportedTableError(
                f"{METADATA_FOLDER}/{mdt_partition}: MDT partition has no file groups"
            )
        return sorted(ids)

    # ------------------------------------------------------------------ the delta commit

    def write_deltacommit(
        self,
        instant_time: str,
        records: Mapping[str, Iterable[MetadataRecord]],
        *,
        operation: str = UPSERT_PREPPED,
        after_log: Callable[[], None] | None = None,
        sharded: Mapping[str, ShardedRecords] | None = None,
    ) -> Instant:
        """Write and complete MDT delta commit ``instant_time`` holding ``records`` per MDT partition.

        ``sharded``: MDT partitions whose records are built per file group by the operations of
        ``runner`` (see the module docstring), never held here; a partition is in ``records`` or
        in ``sharded``, not both. An operation that fails fails this call after the delta commit
        went inflight (rolled back before the retry, as any failed attempt).
        Returns the completed MDT instant. Idempotent: see the module docstring. ``after_log``
        is called after each log file the driver writes (a test hook for crashes mid-write).
        """
        sharded = dict(sharded or {})
        both = sorted(set(records) & set(sharded))
        if both:
            raise ValueError(f"MDT partition {', '.join(both)} has both in-memory and sharded records")
        unknown = sorted((set(records) | set(sharded)) - set(self.partitions))
        if unknown:
            raise UnsupportedTableError(
                f"{METADATA_FOLDER}: MDT partition {', '.join(unknown)} is not among the table's "
                f"metadata partitions ({', '.join(self.partitions)})"
            )
        existing = self.timeline.files(instant_time, Action.DELTA_COMMIT)
        if existing.latest_state is State.COMPLETED and self._data_completed(instant_time):
            done = existing.instant()
            assert done is not None
            log.info("%s: MDT delta commit %s already completed", METADATA_FOLDER, instant_time)
            return done
        # Route and encode everything before touching the timeline: a bad record fails here.
        blocks: list[tuple[str, str, int, int, list[bytes]]] = []  # partition, file id, counts, blocks
        for partition in sorted(records):
            groups = self.file_groups(partition)
            routed: dict[int, list[MetadataRecord]] = {}
            for record in records[partition]:
                routed.setdefault(file_group_index(record[0], len(groups)), []).append(record)
            for index in sorted(routed):
                version = self.data_config.version
                data = [encode_cell(key, r, version) for key, r in routed[index] if r is not None]
                deletes = [key for key, r in routed[index] if r is None]
                encoded = _encode_blocks(partition, data, deletes, instant_time, version)
                blocks.append((partition, groups[index], len(data), len(deletes), encoded))
        shard_groups = {partition: self.file_groups(partition) for partition in sorted(sharded)}
        # the MDT's own services first, as Hudi runs them when the data writer sets up its MDT writer
        if self.upkeep:
            self.last_upkeep = maintain(self.timeline, self.data_storage, self.data_config,
                                        max_deltas=self.max_delta_commits, runner=self.runner)
        # a retry: roll back what an earlier attempt left (Hudi: writeClient.rollback(T), new time)
        rollback_mdt_deltacommit(self.timeline, instant_time)
        self.timeline.create_requested(Action.DELTA_COMMIT, instant_time, None)
        self.timeline.transition_to_inflight(
            instant_time, Action.DELTA_COMMIT, self._commit_metadata({}, operation, with_schema=False)
        )
        stats: dict[str, list[dict[str, Any]]] = {}
        for token, (partition, file_id, count, deleted, encoded) in enumerate(blocks):
            name = LogFileName(file_id, instant_time, 1, make_write_token(token, 0, 0)).format()
            self.lock.ensure_held()
            size = write_log_file(self.storage, f"{partition}/{name}", encoded)
            log.info("%s/%s/%s: written (%d records, %d deletes, %d bytes)",
                     METADATA_FOLDER, partition, name, count, deleted, size)
            lf = MdtLogFile(partition, file_id, name, size, count, deleted)
            stats.setdefault(partition, []).append(_write_stat(lf, instant_time))
            if after_log is not None:
                after_log()
        for partition, groups in shard_groups.items():
            self._write_shards(instant_time, partition, groups, sharded[partition], stats)
        self.lock.ensure_held()  # the operations wrote without the lock: nothing refers to their files yet
        stats = {p: stats[p] for p in sorted(stats)}  # partition order, as the driver's blocks
        return self.timeline.complete(
            instant_time, Action.DELTA_COMMIT, self._commit_metadata(stats, operation, with_schema=True)
        )

    def _write_shards(self, instant_time: str, partition: str, groups: list[str], source: ShardedRecords,
                      stats: dict[str, list[dict[str, Any]]]) -> None:
        """One ``runner`` operation per file group of ``partition``; their log files' write stats
        go to ``stats`` in file group order."""
        self.lock.ensure_held()
        task = MdtShardTask(self.storage, partition, tuple(groups), instant_time, self.data_config.version,
                            source)
        rows = self.runner(len(groups), task, SHARD_RESULT_SCHEMA,
                           description=f"MDT {partition} of delta commit {instant_time}").to_pylist()
        by_op = {int(r["op"]): r for r in rows}
        if sorted(by_op) != list(range(len(groups))):
            raise InstantStateError(
                f"{METADATA_FOLDER}/{partition}: delta commit {instant_time}: results for {len(by_op)} "
                f"of {len(groups)} file groups")
        for index in range(len(groups)):
            row = by_op[index]
            if not row["name"]:
                continue
            lf = MdtLogFile(partition, str(row["file_id"]), str(row["name"]), int(row["size"]),
                            int(row["records"]), int(row["deletes"]))
            stats.setdefault(partition, []).append(_write_stat(lf, instant_time))

    def _data_completed(self, instant_time: str) -> bool:
        """Whether the data instant ``instant_time`` is completed on the data timeline."""
        return Timeline.load(self.data_storage, self.data_config).is_completed(instant_time)

    def _commit_metadata(
        self, stats: Mapping[str, list[dict[str, Any]]], operation: str, *, with_schema: bool
    ) -> dict[str, Any]:
        extra = {"schema": metadata_payload_schema_json(self.data_config.version)} if with_schema else {}
        return {
            "partitionToWriteStats": dict(stats),
            "compacted": False,
            "extraMetadata": extra,
            "version": None,
            "operationType": operation,
        }


def require_mdt_maintainable(
    storage: Storage, config: TableConfig, what: str, maintained: Iterable[str]
) -> None:
    """Refuse ``what`` (an ``UnsupportedTableError``, nothing written) when its MDT delta commit
    could not keep this table's metadata table exact: table version other than 8 or 9, an MDT
    partition being built, no ``files`` partition, a declared partition not in ``maintained``,
    or ``column_stats`` without an index definition naming its columns. A table without a
    metadata table always passes."""
    why = metadata_table_in_use(storage, config)
    if why is None:
        return
    base = storage.base_uri
    if config.version not in (8, 9):
        raise UnsupportedTableError(
            f"{base}: the table has a metadata table ({why}); {what} writes metadata tables of "
            f"table version 8 and 9 only, this table is version {config.version} (nothing was changed)"
        )
    if config.metadata_partitions_inflight:
        raise UnsupportedTableError(
            f"{base}: MDT partition {', '.join(config.metadata_partitions_inflight)} is being built "
            f"(hoodie.table.metadata.partitions.inflight); {what} cannot keep it exact (nothing was changed)"
        )
    if FILES not in config.metadata_partitions:
        raise UnsupportedTableError(
            f"{base}: the table has a metadata table ({why}) without a files partition; "
            f"{what} cannot keep it exact (nothing was changed)"
        )
    unknown = unmaintained_partitions(config, maintained)
    if unknown:
        raise UnsupportedTableError(
            f"{base}: MDT partition {', '.join(unknown)} is not maintained by hoodied; {what} "
            "would leave it stale (nothing was changed)"
        )
    if COLUMN_STATS in config.metadata_partitions and not column_stats_columns(storage, config.props):
        raise UnsupportedTableError(
            f"{base}: MDT partition column_stats has no index definition with source fields; "
            f"{what} cannot tell which column statistics to write (nothing was changed)"
        )


def unmaintained_partitions(data_config: TableConfig, maintained: Iterable[str]) -> list[str]:
    """MDT partitions of the table (complete or being built) that are not in ``maintained``.

    A service that changes files must refuse to run while this is non-empty: writing only some
    MDT partitions would leave the others silently stale.
    """
    declared = [*data_config.metadata_partitions, *data_config.metadata_partitions_inflight]
    keep = set(maintained)
    return sorted({p for p in declared if p and p not in keep})


def _write_stat(lf: MdtLogFile, instant_time: str) -> dict[str, Any]:
    """A ``HoodieWriteStat`` of an MDT log file, as Hudi's append handle reports it."""
    return write_stat(
        file_id=lf.file_id,
        path=lf.path,
        partition_path=lf.partition,
        prev_commit=instant_time,
        num_writes=lf.records,
        num_updates=lf.records,
        num_deletes=lf.deletes,
        file_size=lf.size,
        log_version=1,
        base_file="",
        log_files=[lf.name],
    )

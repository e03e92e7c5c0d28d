"""A small but real Hudi table writer: create tables, write commits and delta commits.

Used by ``hoodied demo``, the tests and the benchmarks to produce tables that Apache Hudi and
hudi-rs read. What it writes, per table version (6, 8 or 9; COW or MOR):

- ``create_table``: ``.hoodie/hoodie.properties`` (the keys Hudi writes for that version, with
  checksum; timezone UTC; no metadata table, so readers list storage), the ``.hoodie`` folders
  and the timeline folder (layout 2 ``.hoodie/timeline`` for v8/v9, layout 1 ``.hoodie`` for v6);
- ``upsert`` / ``insert`` / ``delete``: one instant each. Rows are deduplicated by key (the
  largest ordering value wins under EVENT_TIME_ORDERING, the last row otherwise), routed by
  partition and by the file group that holds the key:
    * new keys: new file groups with a base file each (at most ``max_file_rows`` rows);
    * COW: every file group with updates or deletes is rewritten into a new base file of the
      same file group (carried-over rows keep their commit time and sequence number; under
      event-time ordering an incoming row with a smaller ordering value loses);
    * MOR: one new log file per touched file group with an Avro data block (updates) and a
      v3 delete block (deletes, ordering value 0 = delete regardless of ordering). v8/v9 name
      the log after the delta commit (version 1); v6 after the slice's base instant with the
      next version.
  Timeline files are created write-once: ``requested`` (empty), ``inflight`` (the workload
  profile), then the completed ``commit``/``deltacommit`` with ``HoodieCommitMetadata`` (Avro in
  v8/v9, JSON in v6; ``extraMetadata.schema`` = the table schema without meta fields).

The writer keeps the table state (file groups and their live keys) in memory; it is meant to
write tables it created. Keys are looked up with Arrow kernels, so million-row commits stay
vectorised; only log records are converted to Python dicts (Avro encoding).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hoodied.hoodie.basefile import (
    RECORD_KEY,
    arrow_to_avro_schema,
    avro_schema_json,
    repeat_string,
    seqno_array,
    with_meta_columns,
    write_base_file,
)
from hoodied.hoodie.demo import table_files as ws
from hoodied.hoodie.errors import FileAlreadyExistsError, HoodieServiceError
from hoodied.hoodie.filenames import PARTITION_METAFILE, BaseFileName, LogFileName
from hoodied.hoodie.log import (
    BlockType,
    DeleteRecord,
    HeaderKey,
    encode_avro_data_block,
    encode_block,
    encode_delete_block,
    write_log_file,
)
from hoodied.hoodie.properties import MergeMode, TableType, partition_metadata_text, properties_text
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline import commit_metadata as cm
from hoodied.hoodie.timeline.instant import Action, Instant, State

__all__ = ["DEFAULT_MAX_FILE_ROWS", "CommitResult", "TableSpec", "TableWriter", "create_table"]

log = logging.getLogger(__name__)

DEFAULT_MAX_FILE_ROWS = 250_000


@dataclass(frozen=True)
class TableSpec:
    """What a new table looks like. ``schema`` holds the record columns (no meta fields)."""

    name: str
    schema: pa.Schema
    record_key: str
    partition_field: str | None = None
    ordering_field: str | None = None
    table_type: TableType = TableType.MERGE_ON_READ
    version: int = 9
    merge_mode: MergeMode | None = None  # default: EVENT_TIME if ordering_field else COMMIT_TIME
    hive_style: bool = True
    database: str = "default"

    @property
    def resolved_merge_mode(self) -> MergeMode:
        if self.merge_mode is not None:
            return self.merge_mode
        return MergeMode.EVENT_TIME_ORDERING if self.ordering_field else MergeMode.COMMIT_TIME_ORDERING


@dataclass
class _FileGroup:
    partition: str
    file_id: str
    base_file: str  # latest base file name
    base_instant: str
    keys: pa.Array  # live record keys (MOR: keys whose latest state is not a delete)
    log_version: int = 0  # v6: highest log version in the current slice


@dataclass(frozen=True)
class CommitResult:
    """One written instant."""

    instant_time: str
    completion_time: str
    action: Action
    operation: str
    stats: dict[str, list[dict[str, Any]]]
    num_inserts: int
    num_updates: int
    num_deletes: int

    @property
    def files(self) -> list[str]:
        return [s["path"] for stats in self.stats.values() for s in stats]


@dataclass
class _Work:
    """Per-commit accumulators."""

    instant: str
    stats: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    files_written: int = 0


class TableWriter:
    """Writes instants into a table created by ``create_table`` (state held in memory)."""

    def __init__(
        self, storage: Storage, spec: TableSpec, *, max_file_rows: int = DEFAULT_MAX_FILE_ROWS
    ) -> None:
        if spec.version not in (6, 8, 9):
            raise ValueError(f"table version {spec.version} cannot be written (6, 8 or 9)")
        if spec.record_key not in spec.schema.names:
            raise ValueError(f"record key {spec.record_key!r} is not a column of the schema")
        self.storage = storage
        self.spec = spec
        self.max_file_rows = max_file_rows
        self.clock = ws.InstantClock()
        self._groups: dict[str, list[_FileGroup]] = {}
        self._partitions: set[str] = set()
        self._stage = 0
        self._schema_json = avro_schema_json(spec.schema, spec.name, meta_fields=False)
        self._log_schema_json = avro_schema_json(spec.schema, spec.name, meta_fields=True)
        self._instants: list[str] = []

    # ------------------------------------------------------------ layout

    @property
    def timeline_dir(self) -> str:
        return ".hoodie/timeline" if self.spec.version >= 8 else ".hoodie"

    @property
    def is_mor(self) -> bool:
        return self.spec.table_type is TableType.MERGE_ON_READ

    @property
    def instants(self) -> list[str]:
        """Requested times of the instants written so far, oldest first."""
        return list(self._instants)

    def file_groups(self) -> Iterator[tuple[str, str, str]]:
        """(partition, file id, latest base file name) of every file group."""
        for groups in self._groups.values():
            for g in groups:
                yield g.partition, g.file_id, g.base_file

    # ------------------------------------------------------------ public writes

    def upsert(
        self, data: pa.Table, *, deletes: pa.Table | None = None, instant_time: str | None = None
    ) -> CommitResult:
        """Insert new keys, update existing ones and (optionally) delete keys, in one instant."""
        return self._commit(data, deletes, instant_time, "UPSERT")

    def insert(self, data: pa.Table, *, instant_time: str | None = None) -> CommitResult:
        """Write rows as new records (operation INSERT); keys must not exist yet."""
        return self._commit(data, None, instant_time, "INSERT")

    def delete(self, keys: pa.Table, *, instant_time: str | None = None) -> CommitResult:
        """Delete records; ``keys`` holds the record key column (and the partition column)."""
        empty = self.spec.schema.empty_table()
        return self._commit(empty, keys, instant_time, "DELETE")

    # ------------------------------------------------------------ commit flow

    def _commit(
        self, data: pa.Table, deletes: pa.Table | None, instant_time: str | None, operation: str
    ) -> CommitResult:
        instant = self._new_instant(instant_time)
        action = Action.DELTA_COMMIT if self.is_mor else Action.COMMIT
        data = self._dedupe(self._conform(data))
        by_part = self._split_partitions(data)
        del_by_part = self._split_partitions(self._conform_keys(deletes)) if deletes is not None else {}
        work = _Work(instant)

        self._put_timeline(Instant(instant, action, State.REQUESTED), b"")
        profile = self._workload_profile(by_part, del_by_part)
        self._put_timeline(
            Instant(instant, action, State.INFLIGHT),
            cm.encode_commit_metadata(cm.commit_metadata(profile, operation, None), self.spec.version),
        )
        for partition in sorted(set(by_part) | set(del_by_part)):
            self._ensure_partition(partition, instant)
            rows = by_part.get(partition, data.slice(0, 0))
            dels = del_by_part.get(partition)
            self._write_partition(work, partition, rows, dels, insert_only=operation == "INSERT")

        completion = self.clock.next()
        meta = cm.commit_metadata(work.stats, operation, self._schema_json)
        self._put_timeline(
            Instant(instant, action, State.COMPLETED, completion),
            cm.encode_commit_metadata(meta, self.spec.version),
        )
        self._instants.append(instant)
        log.debug(
            "%s %s: %d inserts, %d updates, %d deletes",
            action.value,
            instant,
            work.inserts,
            work.updates,
            work.deletes,
        )
        return CommitResult(
            instant, completion, action, operation, work.stats, work.inserts, work.updates, work.deletes
        )

    def _new_instant(self, instant_time: str | None) -> str:
        if instant_time is None:
            return self.clock.next()
        if len(instant_time) != 17 or not instant_time.isdigit():
            raise ValueError(f"{instant_time!r}: instant times have 17 digits")
        if self._instants and instant_time <= self._instants[-1]:
            raise ValueError(f"{instant_time}: must be later than the last instant {self._instants[-1]}")
        self.clock.observe(instant_time)
        return instant_time

    def _put_timeline(self, instant: Instant, data: bytes) -> None:
        layout = 2 if self.spec.version >= 8 else 1
        self.storage.put_if_absent(f"{self.timeline_dir}/{instant.file_name(layout)}", data)

    def _ensure_partition(self, partition: str, instant: str) -> None:
        if partition in self._partitions:
            return
        depth = 0 if partition == "" else partition.count("/") + 1
        path = f"{partition}/{PARTITION_METAFILE}" if partition else PARTITION_METAFILE
        text = partition_metadata_text(instant, depth, datetime.now(UTC))
        try:
            self.storage.put_if_absent(path, text.encode("utf-8"))
        except FileAlreadyExistsError:
            pass
        self._partitions.add(partition)

    # ------------------------------------------------------------ input shaping

    def _conform(self, data: pa.Table) -> pa.Table:
        missing = [n for n in self.spec.schema.names if n not in data.column_names]
        if missing:
            raise ValueError(f"rows lack the columns {missing}")
        return data.select(self.spec.schema.names).cast(self.spec.schema)

    def _conform_keys(self, keys: pa.Table) -> pa.Table:
        cols = [self.spec.record_key] + ([self.spec.partition_field] if self.spec.partition_field else [])
        missing = [c for c in cols if c not in keys.column_names]
        if missing:
            raise ValueError(f"deletes lack the columns {missing}")
        out = keys.select(cols)
        return out.cast(pa.schema([self.spec.schema.field(c) for c in cols]))

    def _dedupe(self, data: pa.Table) -> pa.Table:
        """One row per key: the largest ordering value (event time) or the last row."""
        n = data.num_rows
        if n < 2:
            return data
        key = self.spec.record_key
        t = data.append_column("__pos", pa.array(range(n), pa.int64()))
        sort = [(key, "ascending")]
        if self.spec.resolved_merge_mode is MergeMode.EVENT_TIME_ORDERING and self.spec.ordering_field:
            sort.append((self.spec.ordering_field, "ascending"))
        sort.append(("__pos", "ascending"))
        t = t.sort_by(sort)
        keys = t.column(key).combine_chunks()
        if pc.count_distinct(keys).as_py() == n:
            return data
        last = pc.not_equal(keys.slice(0, n - 1), keys.slice(1))
        mask = pa.concat_arrays([last.cast(pa.bool_()), pa.array([True])])
        return t.filter(mask).drop_columns(["__pos"])

    def partition_paths(self, table: pa.Table) -> pa.Array:
        """The partition path of every row (``field=value`` when hive-style; "" if unpartitioned)."""
        if not self.spec.partition_field:
            return repeat_string("", table.num_rows)
        values = pc.cast(table.column(self.spec.partition_field), pa.string())
        if pc.any(pc.is_null(values)).as_py():
            values = pc.fill_null(values, "__HIVE_DEFAULT_PARTITION__")
        if self.spec.hive_style:
            values = pc.binary_join_element_wise(pa.scalar(f"{self.spec.partition_field}="), values, "")
        return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values

    def _split_partitions(self, table: pa.Table) -> dict[str, pa.Table]:
        if table.num_rows == 0:
            return {}
        paths = self.partition_paths(table)
        out = {}
        for p in pc.unique(paths).to_pylist():
            out[p] = table.filter(pc.equal(paths, p))
        return out

    def _workload_profile(
        self, by_part: dict[str, pa.Table], del_by_part: dict[str, pa.Table]
    ) -> dict[str, list[dict[str, Any]]]:
        """The inflight file's content: per partition, insert count and touched file groups."""
        out: dict[str, list[dict[str, Any]]] = {}
        for p in sorted(set(by_part) | set(del_by_part)):
            rows = by_part.get(p)
            keys = rows.column(self.spec.record_key) if rows is not None else pa.array([], pa.string())
            stats = []
            known = 0
            for g in self._groups.get(p, []):
                hit = int(pc.sum(pc.is_in(keys, value_set=g.keys)).as_py() or 0) if len(keys) else 0
                known += hit
                if hit:
                    stats.append(
                        cm.write_stat(
                            file_id=g.file_id,
                            path=None,
                            partition_path=None,
                            prev_commit=g.base_instant,
                            num_updates=hit,
                        )
                    )
            stats.insert(
                0, cm.write_stat(file_id="", path=None, partition_path=None, num_inserts=len(keys) - known)
            )
            out[p] = stats
        return out

    # ------------------------------------------------------------ the data path

    def _token(self, work: _Work) -> str:
        work.files_written += 1
        self._stage += 1
        return f"{work.files_written - 1}-{len(self._instants) + 1}-{self._stage}"

    def _write_partition(
        self, work: _Work, partition: str, rows: pa.Table, dels: pa.Table | None, *, insert_only: bool
    ) -> None:
        key = self.spec.record_key
        keys = rows.column(key).combine_chunks() if rows.num_rows else pa.array([], pa.string())
        del_keys = dels.column(key).combine_chunks() if dels is not None else pa.array([], keys.type)
        if len(del_keys) and rows.num_rows:
            # A key both upserted and deleted in one instant ends up deleted.
            rows = rows.filter(pc.invert(pc.is_in(keys, value_set=del_keys)))
            keys = rows.column(key).combine_chunks()
        is_new = pa.array([True] * rows.num_rows, pa.bool_())
        for group in list(self._groups.get(partition, [])):
            upd_mask = pc.is_in(keys, value_set=group.keys) if not insert_only else None
            if upd_mask is not None and rows.num_rows:
                is_new = pc.and_(is_new, pc.invert(upd_mask))
                updates = rows.filter(upd_mask)
            else:
                updates = rows.slice(0, 0)
            gone = del_keys.filter(pc.is_in(del_keys, value_set=group.keys)) if len(del_keys) else del_keys
            if updates.num_rows == 0 and len(gone) == 0:
                continue
            if self.is_mor:
                self._append_log(work, group, updates, gone)
            else:
                self._rewrite_base(work, group, updates, gone)
        new_rows = rows.filter(is_new) if rows.num_rows else rows
        for start in range(0, new_rows.num_rows, self.max_file_rows):
            self._new_file_group(work, partition, new_rows.slice(start, self.max_file_rows))

    def _new_file_group(self, work: _Work, partition: str, rows: pa.Table) -> None:
        file_id = f"{uuid.uuid4()}-0"
        name = BaseFileName(file_id, self._token(work), work.instant, "parquet").format()
        path = f"{partition}/{name}" if partition else name
        keys = pc.cast(rows.column(self.spec.record_key), pa.string()).combine_chunks()
        table = with_meta_columns(
            rows, record_keys=keys, partition_path=partition, file_name=name, commit_time=work.instant
        )
        st = write_base_file(self.storage, path, table, avro_schema=self._parquet_schema(table))
        self._groups.setdefault(partition, []).append(
            _FileGroup(partition, file_id, name, work.instant, keys)
        )
        work.inserts += rows.num_rows
        work.stats.setdefault(partition, []).append(
            cm.write_stat(
                file_id=file_id,
                path=path,
                partition_path=partition,
                num_writes=rows.num_rows,
                num_inserts=rows.num_rows,
                file_size=st.file_size,
            )
        )

    def _parquet_schema(self, table: pa.Table) -> str:
        return json.dumps(arrow_to_avro_schema(table.schema, self.spec.name), separators=(",", ":"))

    def _read_base(self, group: _FileGroup) -> pa.Table:
        path = f"{group.partition}/{group.base_file}" if group.partition else group.base_file
        with self.storage.open(path) as f:  # ranged reads on an object store, not one whole download
            return pq.read_table(f)

    def _winning_updates(self, old: pa.Table, updates: pa.Table) -> pa.Table:
        """Under event-time ordering, drop incoming rows whose ordering value is below the stored one."""
        of = self.spec.ordering_field
        if (
            self.spec.resolved_merge_mode is not MergeMode.EVENT_TIME_ORDERING
            or not of
            or updates.num_rows == 0
        ):
            return updates
        idx = pc.index_in(updates.column(self.spec.record_key), value_set=old.column(RECORD_KEY))
        stored = old.column(of).take(pc.fill_null(idx, 0))
        keep = pc.fill_null(pc.greater_equal(updates.column(of), stored), True)
        keep = pc.or_(keep, pc.is_null(idx))
        return updates.filter(keep)

    def _rewrite_base(self, work: _Work, group: _FileGroup, updates: pa.Table, gone: pa.Array) -> None:
        old = self._read_base(group)
        updates = self._winning_updates(old, updates)
        upd_keys = pc.cast(updates.column(self.spec.record_key), pa.string()).combine_chunks()
        drop = pa.concat_arrays([upd_keys, pc.cast(gone, pa.string())])
        old_keys = old.column(RECORD_KEY)
        kept = old.filter(pc.invert(pc.is_in(old_keys, value_set=drop))) if len(drop) else old
        gone_s = pc.cast(gone, pa.string())
        deleted = int(pc.sum(pc.is_in(old_keys, value_set=gone_s)).as_py() or 0) if len(gone) else 0
        name = BaseFileName(group.file_id, self._token(work), work.instant, "parquet").format()
        path = f"{group.partition}/{name}" if group.partition else name
        fresh = with_meta_columns(
            updates,
            record_keys=upd_keys,
            partition_path=group.partition,
            file_name=name,
            commit_time=work.instant,
        )
        table = pa.concat_tables([kept.select(fresh.column_names).cast(fresh.schema), fresh])
        st = write_base_file(self.storage, path, table, avro_schema=self._parquet_schema(table))
        work.updates += updates.num_rows
        work.deletes += deleted
        work.stats.setdefault(group.partition, []).append(
            cm.write_stat(
                file_id=group.file_id,
                path=path,
                partition_path=group.partition,
                prev_commit=group.base_instant,
                num_writes=table.num_rows,
                num_updates=updates.num_rows,
                num_deletes=deleted,
                file_size=st.file_size,
                prev_base_file=group.base_file,
            )
        )
        group.base_file, group.base_instant = name, work.instant
        group.keys = pc.cast(table.column(RECORD_KEY), pa.string()).combine_chunks()

    def _append_log(self, work: _Work, group: _FileGroup, updates: pa.Table, gone: pa.Array) -> None:
        header = {HeaderKey.INSTANT_TIME: work.instant, HeaderKey.SCHEMA: self._log_schema_json}
        blocks: list[bytes] = []
        if updates.num_rows:
            keys = pc.cast(updates.column(self.spec.record_key), pa.string()).combine_chunks()
            seq = seqno_array(work.instant, 0, work.updates, updates.num_rows)
            recs = with_meta_columns(
                updates,
                record_keys=keys,
                partition_path=group.partition,
                file_name=group.file_id,
                commit_time=repeat_string(work.instant, updates.num_rows),
                seqno=seq,
            )
            if recs.num_rows:
                content = encode_avro_data_block(recs.to_pylist(), self._log_schema_json)
                blocks.append(encode_block(BlockType.AVRO_DATA, header, content))
        if len(gone):
            dels = [DeleteRecord(k, group.partition, 0) for k in pc.cast(gone, pa.string()).to_pylist()]
            blocks.append(encode_block(BlockType.DELETE, header, encode_delete_block(dels)))
        if not blocks:
            return
        token = self._token(work)
        if self.spec.version >= 8:
            lf = LogFileName(group.file_id, work.instant, 1, token)
        else:
            group.log_version += 1
            lf = LogFileName(group.file_id, group.base_instant, group.log_version, token)
        path = f"{group.partition}/{lf.format()}" if group.partition else lf.format()
        size = write_log_file(self.storage, path, blocks)
        n_upd = updates.num_rows
        work.updates += n_upd
        work.deletes += len(gone)
        if len(gone):
            group.keys = group.keys.filter(
                pc.invert(pc.is_in(group.keys, value_set=pc.cast(gone, pa.string())))
            )
        work.stats.setdefault(group.partition, []).append(
            cm.write_stat(
                file_id=group.file_id,
                path=path,
                partition_path=group.partition,
                prev_commit=work.instant if self.spec.version >= 8 else group.base_instant,
                num_writes=n_upd,
                num_updates=n_upd,
                num_deletes=len(gone),
                file_size=size,
                log_version=lf.version,
                base_file="" if self.spec.version >= 8 else group.base_file,
                log_files=[lf.format()],
            )
        )


_FOLDERS = (
    ".hoodie/.aux/.bootstrap/.fileids",
    ".hoodie/.aux/.bootstrap/.partitions",
    ".hoodie/.schema",
    ".hoodie/.temp",
)


def create_table(
    storage: Storage, spec: TableSpec, *, max_file_rows: int = DEFAULT_MAX_FILE_ROWS
) -> TableWriter:
    """Create an empty table (``hoodie.properties`` and folders) and return its writer.

    Fails with ``HoodieServiceError`` if the storage already holds a table.
    """
    if spec.version not in (6, 8, 9):
        raise ValueError(f"table version {spec.version} cannot be written (6, 8 or 9)")
    if spec.partition_field and spec.partition_field not in spec.schema.names:
        raise ValueError(f"partition field {spec.partition_field!r} is not a column of the schema")
    if spec.ordering_field and spec.ordering_field not in spec.schema.names:
        raise ValueError(f"ordering field {spec.ordering_field!r} is not a column of the schema")
    if storage.exists(".hoodie/hoodie.properties"):
        raise HoodieServiceError(f"{storage.base_uri}: a Hudi table already exists here")
    create_schema = arrow_to_avro_schema(spec.schema, spec.name, meta_fields=False, null_first=False)

    props = ws.table_properties(
        name=spec.name,
        database=spec.database,
        table_type=spec.table_type,
        version=spec.version,
        record_key=spec.record_key,
        partition_field=spec.partition_field,
        ordering_field=spec.ordering_field,
        merge_mode=spec.resolved_merge_mode,
        hive_style=spec.hive_style,
        create_schema=json.dumps(create_schema, separators=(",", ":")),
    )
    # Object stores have no folders; on a local file system create the ones Hudi creates.
    root = storage.local_path("")
    if root is not None:
        folders = list(_FOLDERS) + (
            [".hoodie/timeline/history"] if spec.version >= 8 else [".hoodie/archived"]
        )
        for folder in folders:
            os.makedirs(os.path.join(root, *folder.split("/")), exist_ok=True)
    now = datetime.now(UTC)
    storage.put_if_absent(".hoodie/hoodie.properties", properties_text(props, now).encode("utf-8"))
    return TableWriter(storage, spec, max_file_rows=max_file_rows)

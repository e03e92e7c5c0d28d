"""Helpers of ``hoodie.writer``: table properties, partition metadata, commit metadata, instant clock.

Kept apart from the writer's data path so each stays short. Everything here produces the
bytes Hudi itself writes for these files:

- ``hoodie.properties`` per table version (keys as in Hudi-written v6/v8/v9 tables, with the
  CRC32 checksum) in ``java.util.Properties.store`` form;
- ``.hoodie_partition_metadata`` (``commitTime``, ``partitionDepth``);
- ``HoodieCommitMetadata``: Avro object container for table versions 8/9, Jackson
  pretty-printed JSON (the POJO field order) for version 6;
- strictly increasing 17-digit instant times in UTC.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from hoodie.avro import write_single_record
from hoodie.properties import MergeMode, TableType, format_java_properties, table_checksum

# Record-merge strategy ids of Hudi 1.x (``HoodieRecordMerger``).
EVENT_TIME_STRATEGY_ID = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
COMMIT_TIME_STRATEGY_ID = "ce9acb64-bde0-424c-9b91-f6ebba25356d"
DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
OVERWRITE_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"


# ---------------------------------------------------------------- time


class InstantClock:
    """Hands out strictly increasing 17-digit instant times (UTC), like Hudi's time generator."""

    def __init__(self) -> None:
        self._last: datetime | None = None
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            now = datetime.now(UTC)
            now = now.replace(microsecond=now.microsecond // 1000 * 1000)
            if self._last is not None and now <= self._last:
                now = self._last + timedelta(milliseconds=1)
            self._last = now
            return format_instant(now)

    def observe(self, instant: str) -> None:
        """Make later times exceed ``instant`` (an explicitly chosen or pre-existing instant)."""
        dt = parse_instant(instant)
        with self._lock:
            if self._last is None or dt > self._last:
                self._last = dt


def format_instant(dt: datetime) -> str:
    dt = dt.astimezone(UTC)
    return dt.strftime("%Y%m%d%H%M%S") + f"{dt.microsecond // 1000:03d}"


def parse_instant(value: str) -> datetime:
    return datetime.strptime(value[:14], "%Y%m%d%H%M%S").replace(
        microsecond=int(value[14:17] or 0) * 1000, tzinfo=UTC
    )


def java_date(dt: datetime) -> str:
    """``java.util.Date.toString()`` of ``dt`` in UTC, e.g. ``Sat Mar 07 19:58:26 UTC 2026``."""
    dt = dt.astimezone(UTC)
    days = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    months = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
    return f"{days[dt.weekday()]} {months[dt.month - 1]} {dt:%d %H:%M:%S} UTC {dt.year}"


# ---------------------------------------------------------------- hoodie.properties


def table_properties(
    *,
    name: str,
    database: str,
    table_type: TableType,
    version: int,
    record_key: str,
    partition_field: str | None,
    ordering_field: str | None,
    merge_mode: MergeMode,
    hive_style: bool,
    create_schema: str,
) -> dict[str, str]:
    """The keys Hudi writes into ``hoodie.properties`` for a new table of ``version`` (6, 8, 9)."""
    p: dict[str, str] = {
        "hoodie.table.name": name,
        "hoodie.database.name": database,
        "hoodie.table.type": table_type.value,
        "hoodie.table.version": str(version),
        "hoodie.table.recordkey.fields": record_key,
    }
    if partition_field:
        p["hoodie.table.partition.fields"] = partition_field
    p["hoodie.archivelog.folder"] = "archived"
    p["hoodie.table.create.schema"] = create_schema
    p["hoodie.datasource.write.drop.partition.columns"] = "false"
    p["hoodie.datasource.write.hive_style_partitioning"] = "true" if hive_style else "false"
    p["hoodie.datasource.write.partitionpath.urlencode"] = "false"
    p["hoodie.table.timeline.timezone"] = "UTC"
    p["hoodie.table.base.file.format"] = "PARQUET"
    event = merge_mode is MergeMode.EVENT_TIME_ORDERING
    if version >= 8:
        p["hoodie.table.initial.version"] = str(version)
        p["hoodie.timeline.layout.version"] = "2"
        p["hoodie.timeline.path"] = "timeline"
        p["hoodie.timeline.history.path"] = "history"
        p["hoodie.table.keygenerator.type"] = "SIMPLE" if partition_field else "NON_PARTITION"
        p["hoodie.record.merge.mode"] = merge_mode.value
    else:
        p["hoodie.timeline.layout.version"] = "1"
        keygen = "SimpleKeyGenerator" if partition_field else "NonpartitionedKeyGenerator"
        p["hoodie.table.keygenerator.class"] = f"org.apache.hudi.keygen.{keygen}"
        p["hoodie.compaction.record.merger.strategy"] = EVENT_TIME_STRATEGY_ID
    if version == 9:
        if ordering_field:
            p["hoodie.table.ordering.fields"] = ordering_field
        p["hoodie.table.format"] = "native"
    else:
        if ordering_field:
            p["hoodie.table.precombine.field"] = ordering_field
        p["hoodie.compaction.payload.class"] = DEFAULT_PAYLOAD if event else OVERWRITE_PAYLOAD
    if version == 8:
        p["hoodie.record.merge.strategy.id"] = EVENT_TIME_STRATEGY_ID if event else COMMIT_TIME_STRATEGY_ID
    p["hoodie.table.checksum"] = str(table_checksum(p))
    return p


def properties_text(props: Mapping[str, str], now: datetime) -> str:
    """``hoodie.properties`` text with the two comment lines ``Properties.store`` writes."""
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
    return format_java_properties(props, [f"Updated at {stamp}", java_date(now)])


def partition_metadata_text(commit_time: str, depth: int, now: datetime) -> str:
    props = {"commitTime": commit_time, "partitionDepth": str(depth)}
    return format_java_properties(props, ["partition metadata", java_date(now)])


# ---------------------------------------------------------------- commit metadata

# HoodieWriteStat fields in the Jackson (POJO) order of v6 JSON files.
_STAT_FIELDS = (
    "fileId",
    "path",
    "cdcStats",
    "prevCommit",
    "numWrites",
    "numDeletes",
    "numUpdateWrites",
    "numInserts",
    "totalWriteBytes",
    "totalWriteErrors",
    "tempPath",
    "partitionPath",
    "totalLogRecords",
    "totalLogFilesCompacted",
    "totalLogSizeCompacted",
    "totalUpdatedRecordsCompacted",
    "totalLogBlocks",
    "totalCorruptLogBlock",
    "totalRollbackBlocks",
    "fileSizeInBytes",
    "minEventTime",
    "maxEventTime",
    "runtimeStats",
)
_DELTA_FIELDS = ("logVersion", "logOffset", "baseFile", "logFiles")
# Avro-only fields (not in the v6 POJO JSON).
_AVRO_ONLY = ("totalLogFiles", "prevBaseFile", "totalLogReadTimeMs", "numUpdates")


def write_stat(
    *,
    file_id: str,
    path: str | None,
    partition_path: str | None,
    prev_commit: str = "null",
    num_writes: int = 0,
    num_inserts: int = 0,
    num_updates: int = 0,
    num_deletes: int = 0,
    file_size: int = 0,
    log_version: int | None = None,
    base_file: str | None = None,
    log_files: list[str] | None = None,
    prev_base_file: str | None = None,
) -> dict[str, Any]:
    """One ``HoodieWriteStat`` with every field set (zeros and nulls where Hudi leaves them)."""
    stat: dict[str, Any] = {
        "fileId": file_id,
        "path": path,
        "cdcStats": None,
        "prevCommit": prev_commit,
        "numWrites": num_writes,
        "numDeletes": num_deletes,
        "numUpdateWrites": num_updates,
        "numInserts": num_inserts,
        "totalWriteBytes": file_size,
        "totalWriteErrors": 0,
        "tempPath": None,
        "partitionPath": partition_path,
        "totalLogRecords": 0,
        "totalLogFilesCompacted": 0,
        "totalLogSizeCompacted": 0,
        "totalUpdatedRecordsCompacted": 0,
        "totalLogBlocks": 0,
        "totalCorruptLogBlock": 0,
        "totalRollbackBlocks": 0,
        "fileSizeInBytes": file_size,
        "minEventTime": None,
        "maxEventTime": None,
        "runtimeStats": {"totalScanTime": 0, "totalUpsertTime": 0, "totalCreateTime": 0}
        if path is not None
        else None,
        "logVersion": log_version,
        "logOffset": 0 if log_files else None,
        "baseFile": base_file,
        "logFiles": log_files,
        "totalLogFiles": None,
        "prevBaseFile": prev_base_file,
        "totalLogReadTimeMs": 0,
        "numUpdates": 0,
    }
    return stat


def commit_metadata(
    stats: Mapping[str, list[dict[str, Any]]],
    operation: str,
    schema: str | None,
    *,
    compacted: bool = False,
) -> dict[str, Any]:
    """A ``HoodieCommitMetadata`` record (``schema`` = table Avro schema without meta fields)."""
    return {
        "partitionToWriteStats": {p: list(s) for p, s in stats.items()},
        "compacted": compacted,
        "extraMetadata": {"schema": schema} if schema is not None else {},
        "version": None,
        "operationType": operation,
    }


def encode_commit_metadata(meta: Mapping[str, Any], table_version: int) -> bytes:
    """Bytes of a commit/deltacommit (or its inflight) file: Avro for v8/v9, Jackson JSON for v6."""
    if table_version >= 8:
        return write_single_record(dict(meta), "HoodieCommitMetadata")
    return jackson_pretty(_pojo(meta)).encode("utf-8")


def _pojo(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The v6 JSON shape: POJO field order, delta fields only on log-file stats."""
    parts: dict[str, list[dict[str, Any]]] = {}
    for partition, stats in meta["partitionToWriteStats"].items():
        out = []
        for s in stats:
            d = {k: s.get(k) for k in _STAT_FIELDS}
            if s.get("logFiles") is not None:
                d.update({k: s.get(k) for k in _DELTA_FIELDS})
            out.append(d)
        parts[partition] = out
    return {
        "partitionToWriteStats": parts,
        "compacted": bool(meta.get("compacted")),
        "extraMetadata": dict(meta.get("extraMetadata") or {}),
        "operationType": meta.get("operationType"),
    }


def jackson_pretty(value: Any, indent: int = 0) -> str:
    """JSON as Jackson's ``DefaultPrettyPrinter`` writes it (``"k" : v``, ``[ {`` arrays)."""
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return "{ }"
        items = [f"{pad}  {json.dumps(k)} : {jackson_pretty(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list):
        if not value:
            return "[ ]"
        return "[ " + ", ".join(jackson_pretty(v, indent) for v in value) + " ]"
    return json.dumps(value)


def encode_replace_commit_metadata(meta: Mapping[str, Any], table_version: int) -> bytes:
    """Bytes of a completed replacecommit: ``HoodieReplaceCommitMetadata`` Avro for v8/v9, and for
    v6 Jackson JSON of the POJO (the commit fields, then ``partitionToReplaceFileIds``)."""
    if table_version >= 8:
        return write_single_record(dict(meta), "HoodieReplaceCommitMetadata")
    doc = _pojo(meta)
    doc["partitionToReplaceFileIds"] = {
        p: list(ids) for p, ids in (meta.get("partitionToReplaceFileIds") or {}).items()
    }
    return jackson_pretty(doc).encode("utf-8")

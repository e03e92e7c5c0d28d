"""Commit metadata of the instants hoodied completes: ``HoodieCommitMetadata`` and its write stats.

The bytes Hudi itself writes (``HoodieCommitMetadata``, ``HoodieReplaceCommitMetadata``,
``HoodieWriteStat``): an Avro object container for table versions 8 and 9, Jackson
pretty-printed JSON in the POJO field order for version 6.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hoodied.hoodie.avro.container import write_single_record

__all__ = [
    "commit_metadata",
    "encode_commit_metadata",
    "encode_replace_commit_metadata",
    "jackson_pretty",
    "write_stat",
]


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

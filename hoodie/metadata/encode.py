"""Metadata-table write side: HoodieMetadataRecord rows, their keys, and their encoding.

This module owns what a writer must produce for the MDT, byte for byte as Hudi does
(``HoodieMetadataPayload``, ``HoodieTableMetadataUtil``, ``HashID``):

- the writer schema Hudi embeds (``avro/schemas/HoodieMetadataRecord.v8.avsc`` / ``.v9.avsc``, copied
  verbatim from the ``schema`` file info of Hudi-written MDT files: table version 9 adds
  ``valueType`` and ``ArrayWrapper`` to the column stats);
- row keys: ``files`` (``__all_partitions__``, partition path or ``.``), column stats
  ``b64(XXH64(column)) + b64(XXH64(partition)) + b64(MD5(file name))``, partition stats
  ``b64(XXH64(column)) + b64(XXH64(partition))``, bloom filters ``b64(XXH64(partition)) +
  b64(MD5(file name))``; XXH64 with seed ``0xdabadaba`` sign-extended, digests big-endian,
  standard padded Base64, partition ``.`` for a non-partitioned table;
- key -> file group (``mapRecordKeyToFileGroupIndex``: Java ``String.hashCode``, ``|h| % n``)
  and file group ids (``files-0000-0``, ``col-stats-0001-0``, ...);
- the ``files`` partition records (type 1 partition list, type 2 file list, tombstones);
- encoding: schemaless Avro with the ``key`` field blanked (the HFile row is the key) and the
  ``filesystemMetadata`` map in ``java.util.HashMap`` order, cells sorted in an HFile
  (``hoodie.hfile.writer``), framed as an HFILE_DATA log block with INSTANT_TIME and SCHEMA.

Column and partition statistics of parquet base files live in ``hoodie.metadata.colstats``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import struct
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fastavro.types import Schema

from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.hfile.writer import encode_base_hfile, encode_log_block_hfile, java_hashmap_order
from hoodied.hoodie.log import BlockType, HeaderKey, encode_block
from hoodied.hoodie.metadata.records import ALL_PARTITIONS_KEY, RecordType, partition_to_key

__all__ = [
    "BLOOM_FILTERS",
    "COLUMN_STATS",
    "FILES",
    "FILE_ID_PREFIXES",
    "HASH_SEED",
    "PARTITION_STATS",
    "RECORD_INDEX",
    "MetadataRecord",
    "MetadataRow",
    "bloom_filter_key",
    "column_stats_key",
    "empty_record",
    "encode_cell",
    "encode_hfile_cells_block",
    "encode_hfile_data_block",
    "encode_mdt_base_file",
    "encode_value",
    "file_group_id",
    "file_group_index",
    "file_group_indexes",
    "files_record",
    "hash_id_128",
    "hash_id_64",
    "metadata_payload_schema_json",
    "metadata_schema",
    "metadata_schema_json",
    "partition_list_record",
    "partition_stats_key",
    "xxh64",
]

#: One MDT row: (row key, HoodieMetadataRecord as a dict, ``key`` field included); a record of
#: None is a delete of the key (record and secondary index deletes: a DELETE block entry).
MetadataRecord = tuple[str, dict[str, Any] | None]
#: An MDT row that is never a delete (what most record builders return).
MetadataRow = tuple[str, dict[str, Any]]

FILES = "files"
COLUMN_STATS = "column_stats"
PARTITION_STATS = "partition_stats"
BLOOM_FILTERS = "bloom_filters"
RECORD_INDEX = "record_index"

#: File-group id prefixes (``MetadataPartitionType.getFileIdPrefix``); secondary and
#: expression indexes use their partition name with ``_`` -> ``-`` plus ``-``.
FILE_ID_PREFIXES = {
    FILES: "files-",
    COLUMN_STATS: "col-stats-",
    PARTITION_STATS: "partition-stats-",
    BLOOM_FILTERS: "bloom-filters-",
    RECORD_INDEX: "record-index-",
}

#: ``HashID`` seed: the int 0xdabadaba, sign-extended to a long by Java.
HASH_SEED = 0xFFFFFFFFDABADABA

_META_FIELDS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)
_PAYLOAD_FIELDS = (
    "filesystemMetadata",
    "BloomFilterMetadata",
    "ColumnStatsMetadata",
    "recordIndexMetadata",
    "SecondaryIndexMetadata",
)


# --- schema -------------------------------------------------------------------------------------


def _schema_version(table_version: int) -> int:
    if table_version == 8:
        return 8
    if table_version == 9:
        return 9
    raise UnsupportedTableError(
        f"metadata table writes need table version 8 or 9, this table is version {table_version}"
    )


@cache
def metadata_schema_json(table_version: int) -> str:
    """The HoodieMetadataRecord writer schema Hudi embeds for tables of ``table_version``."""
    name = f"HoodieMetadataRecord.v{_schema_version(table_version)}.avsc"
    schemas = resources.files("hoodied.hoodie.avro").joinpath("schemas")
    return schemas.joinpath(name).read_text(encoding="utf-8").strip()


@cache
def metadata_payload_schema_json(table_version: int) -> str:
    """The same schema without the ``_hoodie_*`` meta fields: ``extraMetadata.schema`` of MDT
    delta commits (the MDT does not populate meta fields)."""
    full = metadata_schema_json(table_version)
    start, end = full.index('{"name":"_hoodie_commit_time"'), full.index('{"name":"key"')
    return full[:start] + full[end:]


@cache
def metadata_schema(table_version: int) -> Schema:
    return fastavro.parse_schema(json.loads(metadata_schema_json(table_version)))


# --- hashing and keys ---------------------------------------------------------------------------

_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
_M64 = (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _xxh_round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M64, 31) * _P1) & _M64


def xxh64(data: bytes, seed: int = HASH_SEED) -> int:
    """XXH64 (as lz4-java's ``XXHashFactory``); pure Python: keys are short strings."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed & _M64, (seed - _P1) & _M64]
        while i + 32 <= n:
            lanes = struct.unpack_from("<4Q", data, i)
            v = [_xxh_round(a, b) for a, b in zip(v, lanes, strict=True)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M64
        for lane in v:
            h = ((h ^ _xxh_round(0, lane)) * _P1 + _P4) & _M64
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _xxh_round(0, struct.unpack_from("<Q", data, i)[0])
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


def hash_id_64(text: str) -> str:
    """``HashID`` 64-bit: Base64 of the big-endian XXH64 of the UTF-8 text (12 characters)."""
    return base64.b64encode(xxh64(text.encode("utf-8")).to_bytes(8, "big")).decode("ascii")


def hash_id_128(text: str) -> str:
    """``HashID`` 128-bit: Base64 of the MD5 of the UTF-8 text (24 characters)."""
    return base64.b64encode(hashlib.md5(text.encode("utf-8")).digest()).decode("ascii")


def column_stats_key(column: str, partition: str, file_name: str) -> str:
    return hash_id_64(column) + hash_id_64(partition_to_key(partition)) + hash_id_128(file_name)


def partition_stats_key(column: str, partition: str) -> str:
    return hash_id_64(column) + hash_id_64(partition_to_key(partition))


def bloom_filter_key(partition: str, file_name: str) -> str:
    return hash_id_64(partition_to_key(partition)) + hash_id_128(file_name)


def _java_string_hash(text: str) -> int:
    """Java ``String.hashCode`` as a signed int32 (over UTF-16 code units)."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def file_group_index(record_key: str, num_file_groups: int) -> int:
    """``mapRecordKeyToFileGroupIndex``: which of an MDT partition's file groups holds a key."""
    if num_file_groups <= 0:
        raise ValueError(f"an MDT partition has at least one file group, not {num_file_groups}")
    # Java: Math.abs(Math.abs(h) % n). For h = Integer.MIN_VALUE the inner abs stays negative,
    # the truncating % keeps the sign and the outer abs removes it: |h| mod n in every case.
    return abs(_java_string_hash(record_key)) % num_file_groups


def file_group_indexes(record_keys: pa.Array, num_file_groups: int) -> np.ndarray:
    """``file_group_index`` of every key of a string array at once (int64), for a task that routes
    many keys: ASCII keys (one UTF-16 unit per byte) are hashed in numpy, as ``String.hashCode``'s
    polynomial of the units in base 31 modulo 2^32; an array holding other keys goes key by key."""
    if num_file_groups <= 0:
        raise ValueError(f"an MDT partition has at least one file group, not {num_file_groups}")
    keys = record_keys.cast(pa.large_string())
    if keys.null_count or not pc.all(pc.string_is_ascii(keys)).as_py():
        return np.array([file_group_index(k, num_file_groups) for k in keys.to_pylist()], dtype=np.int64)
    _, offsets_buffer, data_buffer = keys.buffers()
    if offsets_buffer is None or data_buffer is None:  # no key, or only empty keys (hash 0)
        return np.zeros(len(keys), dtype=np.int64)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[keys.offset : keys.offset + len(keys) + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    hashes = np.zeros(len(keys), dtype=np.uint32)
    # Horner's rule a column at a time over the keys of one length; uint32 wraps as Java's int does
    for length in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == length)
        units = data[starts[rows, None] + np.arange(length)]
        h = np.zeros(len(rows), dtype=np.uint32)
        for column in range(length):
            h = h * np.uint32(31) + units[:, column]
        hashes[rows] = h
    signed = hashes.view(np.int32).astype(np.int64)
    return np.abs(signed) % num_file_groups


def file_group_id(mdt_partition: str, index: int) -> str:
    """``getFileIDForFileGroup``: ``files-0000-0``, ``secondary-index-rider-idx-0003-0``..."""
    prefix = FILE_ID_PREFIXES.get(mdt_partition) or mdt_partition.replace("_", "-") + "-"
    return f"{prefix}{index:04d}-0"


# --- records ------------------------------------------------------------------------------------


def empty_record(key: str, record_type: RecordType) -> dict[str, Any]:
    """A HoodieMetadataRecord with every meta field and payload null."""
    record: dict[str, Any] = dict.fromkeys(_META_FIELDS)
    record["key"] = key
    record["type"] = int(record_type)
    record.update(dict.fromkeys(_PAYLOAD_FIELDS))
    return record


def partition_list_record(added: Iterable[str] = (), deleted: Iterable[str] = ()) -> MetadataRow:
    """Type 1 ``__all_partitions__``: partitions that appeared (size 0) or disappeared (tombstone)."""
    info = {partition_to_key(p): {"size": 0, "isDeleted": False} for p in added}
    info.update({partition_to_key(p): {"size": 0, "isDeleted": True} for p in deleted})
    record = empty_record(ALL_PARTITIONS_KEY, RecordType.PARTITION_LIST)
    record["filesystemMetadata"] = info
    return ALL_PARTITIONS_KEY, record


def files_record(partition: str, added: Mapping[str, int], deleted: Iterable[str] = ()) -> MetadataRow:
    """Type 2 record of one data partition: files added with their sizes, deleted files as tombstones.

    Sizes must be positive (``HoodieMetadataPayload.validatePayload``); a name both added and
    deleted is an error.
    """
    info: dict[str, dict[str, Any]] = {}
    for name, size in added.items():
        if size <= 0:
            raise ValueError(f"{partition or '.'}/{name}: MDT file sizes must be positive, got {size}")
        info[name] = {"size": int(size), "isDeleted": False}
    for name in deleted:
        if name in info:
            raise ValueError(f"{partition or '.'}/{name}: a file cannot be both added and deleted")
        info[name] = {"size": 0, "isDeleted": True}
    key = partition_to_key(partition)
    record = empty_record(key, RecordType.FILE_LIST)
    record["filesystemMetadata"] = info
    return key, record


# --- encoding -----------------------------------------------------------------------------------


def encode_value(record: Mapping[str, Any], table_version: int) -> bytes:
    """A cell value: schemaless Avro with ``key`` blanked and maps in Java HashMap order."""
    out = dict(record)
    out["key"] = ""
    files = out.get("filesystemMetadata")
    if files is not None:
        out["filesystemMetadata"] = {name: files[name] for name in java_hashmap_order(files)}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, metadata_schema(table_version), out)
    return buf.getvalue()


def encode_cell(key: str, record: Mapping[str, Any] | None, table_version: int) -> tuple[str, bytes]:
    """The HFile cell (row key, ``encode_value``) of one MDT record; a delete has none."""
    if record is None:
        raise ValueError(f"MDT delete of {key!r} has no HFile cell (it goes to a DELETE block)")
    if record.get("key") not in (key, "", None):
        raise ValueError(f"MDT record {key!r} carries a different key field {record.get('key')!r}")
    return key, encode_value(record, table_version)


def _cells(records: Iterable[MetadataRecord], table_version: int) -> list[tuple[str, bytes]]:
    return [encode_cell(key, record, table_version) for key, record in records]


def encode_hfile_data_block(
    records: Iterable[MetadataRecord],
    instant_time: str,
    table_version: int,
    *,
    create_time_ms: int | None = None,
) -> bytes:
    """One framed HFILE_DATA log block for an MDT log file (header INSTANT_TIME and SCHEMA)."""
    return encode_hfile_cells_block(_cells(records, table_version), instant_time, table_version,
                                    create_time_ms=create_time_ms)


def encode_hfile_cells_block(
    cells: Iterable[tuple[str, bytes]],
    instant_time: str,
    table_version: int,
    *,
    create_time_ms: int | None = None,
) -> bytes:
    """``encode_hfile_data_block`` of records already encoded by ``encode_cell`` (a caller that keeps
    many records keeps their cells: a record's dicts take several times the bytes of its cell)."""
    schema_json = metadata_schema_json(table_version)
    content = encode_log_block_hfile(cells, schema_json, create_time_ms=create_time_ms)
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: schema_json}
    return encode_block(BlockType.HFILE_DATA, header, content)


def encode_mdt_base_file(
    records: Iterable[MetadataRecord],
    table_version: int,
    *,
    create_time_ms: int | None = None,
) -> bytes:
    """An MDT base HFile (with the bloom filter over its keys) holding ``records``."""
    return encode_base_hfile(
        _cells(records, table_version), metadata_schema_json(table_version), create_time_ms=create_time_ms
    )

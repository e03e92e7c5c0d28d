"""Avro timeline files: hoodied's own schema copies and single-record object containers.

Hudi serializes every plan and most completed metadata as an Avro object container file
holding exactly one record, with the null codec. Reading uses the writer schema embedded in
the file (Hudi 1.x embeds its generated-class schemas, so older and newer files both decode);
writing uses the project's copies in ``hoodie/avro/schemas/`` (self-contained: nested named types
are defined inline, fully qualified under ``org.apache.hudi.avro.model`` as Java expects).
"""

from __future__ import annotations

import io
import json
from functools import cache
from importlib import resources
from typing import Any

import fastavro
from fastavro.types import Schema

from hoodied.hoodie.errors import HoodieFormatError

__all__ = [
    "AVRO_MAGIC",
    "SCHEMA_NAMES",
    "is_avro_container",
    "read_single_record",
    "schema",
    "schema_json",
    "write_single_record",
    "writer_schema_name",
]

AVRO_MAGIC = b"Obj\x01"

#: Schemas shipped in ``hoodie/avro/schemas`` (file name = record name).
SCHEMA_NAMES = (
    "HoodieCommitMetadata",
    "HoodieReplaceCommitMetadata",
    "HoodieRequestedReplaceMetadata",
    "HoodieCompactionPlan",
    "HoodieCleanerPlan",
    "HoodieCleanMetadata",
    "HoodieRollbackPlan",
    "HoodieRollbackMetadata",
    "HoodieRestorePlan",
    "HoodieRestoreMetadata",
    "HoodieSavepointMetadata",
    "HoodieIndexPlan",
    "HoodieIndexCommitMetadata",
    "HoodieLSMTimelineInstant",
    "HoodieDeleteRecordList",
)


@cache
def schema_json(name: str) -> str:
    """The schema text of ``name`` (compact JSON), e.g. to embed in a log block header."""
    if name not in SCHEMA_NAMES:
        raise KeyError(f"no Avro schema named {name!r} in hoodie/avro/schemas")
    schema_file = resources.files("hoodied.hoodie.avro").joinpath("schemas", f"{name}.avsc")
    text = schema_file.read_text(encoding="utf-8")
    return json.dumps(json.loads(text), separators=(",", ":"))


@cache
def schema(name: str) -> Schema:
    """The parsed (fastavro) schema of ``name``; cached."""
    return fastavro.parse_schema(json.loads(schema_json(name)))


def is_avro_container(data: bytes) -> bool:
    return data[:4] == AVRO_MAGIC


def read_single_record(data: bytes, where: str) -> dict[str, Any]:
    """Decode an object container holding exactly one record, with its embedded writer schema.

    Empty, truncated or non-Avro input raises ``HoodieFormatError`` naming ``where``.
    """
    if not data:
        raise HoodieFormatError(f"{where}: empty file, expected an Avro object container with one record")
    if not is_avro_container(data):
        raise HoodieFormatError(
            f"{where}: not an Avro object container (starts with {data[:8]!r}, expected b'Obj\\x01')"
        )
    try:
        reader = fastavro.reader(io.BytesIO(data))
        records = list(reader)
    except Exception as exc:  # fastavro raises many types on garbage (ValueError, EOFError, ...)
        problem = f"{type(exc).__name__}: {exc}"
        raise HoodieFormatError(f"{where}: corrupt Avro object container ({problem})") from None
    if len(records) != 1:
        raise HoodieFormatError(f"{where}: Avro object container holds {len(records)} records, expected 1")
    record = records[0]
    if not isinstance(record, dict):
        raise HoodieFormatError(f"{where}: Avro record is a {type(record).__name__}, expected a record")
    return record


def writer_schema_name(data: bytes, where: str) -> str:
    """Full name of the record schema embedded in a container (e.g. ``...HoodieCompactionPlan``)."""
    if not is_avro_container(data):
        raise HoodieFormatError(f"{where}: not an Avro object container")
    try:
        reader = fastavro.reader(io.BytesIO(data))
    except Exception as exc:
        raise HoodieFormatError(f"{where}: corrupt Avro object container ({exc})") from None
    ws = reader.writer_schema
    return str(ws.get("name", "")) if isinstance(ws, dict) else ""


def write_single_record(record: dict[str, Any], schema_name: str) -> bytes:
    """An object container (null codec) with one record, as Hudi writes timeline files."""
    out = io.BytesIO()
    fastavro.writer(out, schema(schema_name), [record], codec="null")
    return out.getvalue()

"""The schemas a data-rewriting service writes with: Arrow columns, the footer's Avro schema, the commit's.

A rewritten base file (compaction, clustering) carries the table's Avro schema with Hudi's five
meta fields first (``HoodieAvroUtils.addMetadataFields``) in its parquet footer; the commit's
``extraMetadata.schema`` is the table's Avro schema as the timeline has it (without meta
fields). A table whose timeline names no Avro schema gets one derived from its Arrow schema.

``require_meta_fields``: hoodied rewrites only tables that populate the meta fields. Apache Hudi
also rewrites tables without them (``hoodie.populate.meta.fields=false``: its execution strategies
build each record's key with the table's key generator instead of reading ``_hoodie_record_key``);
hoodied does not, so its planners refuse such a table before a plan is written and its executors
refuse a plan someone else wrote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

from hoodied.hoodie.basefile import META_FIELDS, avro_schema_json
from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.table import HoodieTable

__all__ = ["WriteSchemas", "require_meta_fields", "with_meta_fields", "write_schemas"]


@dataclass(frozen=True, slots=True)
class WriteSchemas:
    arrow: pa.Schema
    """The table's columns, meta fields first (``HoodieTable.schema``)."""
    footer: str
    """The Avro schema for the parquet footer (meta fields included)."""
    table: str | None
    """The table's Avro schema for ``extraMetadata.schema`` (``None`` when the timeline has none)."""


def with_meta_fields(avro_schema: str, where: str) -> str:
    """The table's Avro schema with Hudi's five meta fields first (``HoodieAvroUtils.addMetadataFields``)."""
    try:
        record = json.loads(avro_schema)
    except json.JSONDecodeError as exc:
        raise HoodieFormatError(f"{where}: the table's Avro schema is not JSON ({exc})") from None
    fields = [f for f in record.get("fields") or [] if f.get("name") not in META_FIELDS]
    meta = [{"name": n, "type": ["null", "string"], "doc": "", "default": None} for n in META_FIELDS]
    return json.dumps({**record, "fields": meta + fields}, separators=(",", ":"))


def write_schemas(table: HoodieTable, where: str) -> WriteSchemas:
    """The schemas a service rewriting ``table``'s files writes with (``where`` names the plan in errors)."""
    schema = table.schema()
    avro = table.avro_schema()
    footer = with_meta_fields(avro, where) if avro else avro_schema_json(schema, table.config.name)
    return WriteSchemas(schema, footer, avro)


def require_meta_fields(config: TableConfig, base_uri: str, service: str) -> None:
    """``UnsupportedTableError`` for a table without meta fields (the module docstring says why)."""
    if not config.populate_meta_fields:
        raise UnsupportedTableError(
            f"{base_uri}: {service} of tables without meta fields (hoodie.populate.meta.fields="
            "false) is not supported: hoodied takes each record's key from its _hoodie_record_key field"
        )

"""Avro as Hudi uses it: single-record containers (plans, commit metadata), the bundled schemas
(``schemas/``), and the Avro-to-Arrow mapping of log-block records.

The face holds the container and schema functions (Hudi's ``TimelineMetadataUtils``) and the
Arrow mapping; the record encoder is ``hoodie.avro.encode``.
"""

from hoodied.hoodie.avro.arrow import AvroDecodeError, avro_schema_to_arrow, decode_avro_records
from hoodied.hoodie.avro.container import (
    is_avro_container,
    read_single_record,
    schema,
    schema_json,
    write_single_record,
)

__all__ = [
    "AvroDecodeError",
    "avro_schema_to_arrow",
    "decode_avro_records",
    "is_avro_container",
    "read_single_record",
    "schema",
    "schema_json",
    "write_single_record",
]

"""Apache Hudi's own Avro schemas (``../shared/reference/hudi-avro``), parsed for fastavro.

Tests decode what hoodied writes with these, not with hoodied's copies in ``hoodie/schemas``,
so a drift between the two shows up. The ``.avsc`` files are byte copies of Hudi's sources:
they carry a license comment and ``/** */`` comments, and records defined in other files are
referenced by name; ``hudi_schema`` strips the comments and parses the referenced files first.
Where the reference folder is absent (``HOODIED_REFERENCE``), the tests that need it are skipped.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import UnknownType

PROJECT = Path(__file__).resolve().parents[2]
REFERENCE = Path(os.environ.get("HOODIED_REFERENCE", PROJECT.parent / "shared" / "reference")) / "hudi-avro"

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)


def _load_json(name: str) -> Any:
    path = REFERENCE / f"{name}.avsc"
    if not path.is_file():
        pytest.skip(f"Hudi's schema {name}.avsc not found under {REFERENCE} (set HOODIED_REFERENCE)")
    text = _BLOCK_COMMENT.sub("", path.read_text(encoding="utf-8"))
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    return json.loads(text)


def hudi_schema(name: str) -> Any:
    """The parsed schema of Hudi's ``<name>.avsc``, with every named type it references."""
    named: dict[str, Any] = {}
    for _ in range(20):  # each round parses one missing referenced file
        try:
            return fastavro.parse_schema(_load_json(name), named_schemas=dict(named))
        except UnknownType as exc:
            missing = str(exc.name).rsplit(".", 1)[-1]
            fastavro.parse_schema(_load_json(missing), named_schemas=named)
    raise AssertionError(f"{name}: too many unresolved references")


def decode_with_hudi_schema(data: bytes, name: str) -> dict[str, Any]:
    """The one record of an object container, resolved against Hudi's ``name`` schema."""
    records = list(fastavro.reader(io.BytesIO(data), reader_schema=hudi_schema(name)))
    assert len(records) == 1, f"{len(records)} records in a timeline file"
    record = records[0]
    assert isinstance(record, dict)
    return record


def encode_with_hudi_schema(record: dict[str, Any], name: str) -> bytes:
    """A timeline file as Apache Hudi writes it: object container, null codec, one record."""
    out = io.BytesIO()
    fastavro.writer(out, hudi_schema(name), [record], codec="null")
    return out.getvalue()

"""A rich Avro schema and records for the log-format tests: every type Hudi data blocks may hold."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import numpy as np

RICH_SCHEMA = {
    "type": "record",
    "name": "rich_record",
    "namespace": "hoodie.rich",
    "fields": [
        {"name": "_hoodie_record_key", "type": ["null", "string"], "default": None},
        {"name": "id", "type": "long"},
        {"name": "small", "type": ["null", "int"], "default": None},
        {"name": "flag", "type": ["boolean", "null"]},
        {"name": "f32", "type": "float"},
        {"name": "f64", "type": ["null", "double"], "default": None},
        {"name": "blob", "type": ["null", "bytes"], "default": None},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
        {
            "name": "ts",
            "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
            "default": None,
        },
        {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "local_ts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "tod", "type": {"type": "long", "logicalType": "time-micros"}},
        {
            "name": "amount",
            "type": [
                "null",
                {
                    "type": "fixed",
                    "name": "amt",
                    "size": 7,
                    "logicalType": "decimal",
                    "precision": 15,
                    "scale": 2,
                },
            ],
            "default": None,
        },
        {"name": "big", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 3}},
        {
            "name": "dec_bytes",
            "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 4}],
        },
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "same_digest", "type": ["null", "Digest"], "default": None},
        {"name": "tags", "type": ["null", {"type": "array", "items": ["null", "string"]}], "default": None},
        {"name": "scores", "type": {"type": "map", "values": ["null", "long"]}},
        {
            "name": "inner",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Inner",
                    "fields": [
                        {"name": "a", "type": ["null", "string"]},
                        {
                            "name": "points",
                            "type": {
                                "type": "array",
                                "items": {
                                    "type": "record",
                                    "name": "Point",
                                    "fields": [
                                        {"name": "x", "type": "double"},
                                        {"name": "label", "type": ["null", "string"]},
                                    ],
                                },
                            },
                        },
                    ],
                },
            ],
            "default": None,
        },
        {"name": "nothing", "type": "null"},
    ],
}
RICH_JSON = json.dumps(RICH_SCHEMA)
UTC = dt.UTC


def rich_record(i: int) -> dict[str, Any]:
    rng = np.random.default_rng(i)
    some = bool(i % 3)
    return {
        "_hoodie_record_key": f"key-{i}" if i % 7 else None,
        "id": int(rng.integers(-(2**62), 2**62)),
        "small": int(rng.integers(-(2**31), 2**31)) if some else None,
        "flag": [True, False, None][i % 3],
        "f32": float(np.float32(rng.normal())),
        "f64": float(rng.normal()) if some else None,
        "blob": bytes(rng.integers(0, 256, i % 5, dtype=np.uint8)) if i % 4 else None,
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=i) if some else None,
        "ts": dt.datetime(2024, 5, 6, 7, 8, 9, i, tzinfo=UTC) if i % 5 else None,
        "ts_ms": dt.datetime(2000, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=i * 1001),
        "local_ts": dt.datetime(2001, 2, 3, 4, 5, 6, i),
        "tod": dt.time(12, 34, 56, i),
        "amount": Decimal(i * 137 - 5000).scaleb(-2) if some else None,
        "big": Decimal(10**38 + i).scaleb(-3) * (-1 if i % 2 else 1),
        "dec_bytes": Decimal(-i * 3).scaleb(-4) if i % 6 else None,
        "color": ["RED", "GREEN", "BLUE"][i % 3],
        "digest": bytes([i % 256, 1, 2, 3]),
        "same_digest": bytes([0, 0, 0, i % 256]) if some else None,
        "tags": [f"t{j}" if j % 2 else None for j in range(i % 4)] if i % 5 else None,
        "scores": {f"k{j}": (j if j % 3 else None) for j in range(i % 3)},
        "inner": {"a": "é" * (i % 3) or None, "points": [{"x": j / 2, "label": None} for j in range(i % 3)]}
        if i % 2
        else None,
        "nothing": None,
    }


def arrowish(record: dict[str, Any]) -> dict[str, Any]:
    """fastavro gives maps as dicts; pyarrow builds maps from lists of pairs."""
    out = dict(record)
    out["scores"] = list(record["scores"].items())
    return out

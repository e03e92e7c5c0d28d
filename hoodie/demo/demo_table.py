"""The demo table behind ``hoodied demo``: a small, real merge-on-read table to try commands on.

Table version 9, partitioned by ``city`` (hive style), record key ``trip_id``, ordering field
``ts`` (event-time ordering), timezone UTC, no metadata table. Six delta commits:

1. 300 trips inserted (base files, one file group per city);
2. 30 fares corrected (Avro log blocks) and 20 new trips (new file groups);
3. 30 more fares corrected;
4. 15 trips cancelled (delete blocks);
5. 20 more corrections;
6. 20 more corrections and 5 deletions in the same delta commit.

Six delta commits is more than Hudi's default compaction trigger (5,
``hoodie.compact.inline.max.delta.commits``), so the daemon has work to do on the demo table:
``hoodied run --demo PATH --once`` plans and executes its compaction, then the clean of the
file slices the compaction replaced.

Everything is deterministic except instant times and file ids. Nothing outside the project is
needed, so the README's commands work on a fresh machine.
"""

from __future__ import annotations

import os
import random
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa

from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.errors import HoodieServiceError, UnsupportedTableError
from hoodied.hoodie.properties import TableType
from hoodied.hoodie.storage import OBJECT_STORE_SCHEMES, LocalStorage, Storage

__all__ = ["CITIES", "SCHEMA", "create_demo_table", "demo_location"]

SCHEMA = pa.schema(
    [
        ("trip_id", pa.string()),
        ("ts", pa.int64()),
        ("rider", pa.string()),
        ("driver", pa.string()),
        ("fare", pa.float64()),
        ("city", pa.string()),
    ]
)
CITIES = ("san_francisco", "sao_paulo", "chennai", "amsterdam")
_START_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z


def _trips(rng: random.Random, ids: range, ts: int) -> list[dict[str, Any]]:
    return [
        {
            "trip_id": f"trip-{i:05d}",
            "ts": ts + i,
            "rider": f"rider-{rng.randrange(50):02d}",
            "driver": f"driver-{rng.randrange(20):02d}",
            "fare": round(rng.uniform(5, 80), 2),
            "city": CITIES[i % len(CITIES)],
        }
        for i in ids
    ]


def _corrected(rows: list[dict[str, Any]], ts: int, rng: random.Random) -> list[dict[str, Any]]:
    return [
        {**r, "ts": ts + n, "fare": round(r["fare"] * rng.uniform(0.8, 1.2), 2)} for n, r in enumerate(rows)
    ]


def _new_table_storage(path: str) -> Storage:
    """Where the new table goes: a local folder (created), a ``file://`` URI, or an object store
    prefix (``s3://``, ``gs://``, ``az://``...: nothing to create, and ``storage_for`` would
    refuse a prefix that holds no object yet)."""
    parsed = urlparse(path)
    if parsed.scheme in OBJECT_STORE_SCHEMES:
        # imported here: obstore loads only for a table on an object store
        from hoodied.hoodie.object_storage import ObjectStorage

        return ObjectStorage.connect(path)
    if parsed.scheme == "file":
        path = unquote(parsed.path)
    elif "://" in path:  # never a local folder named after the scheme
        raise UnsupportedTableError(
            f"{path}: the demo table is created in a local folder (a path or file://) or on an object "
            f"store ({', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)})"
        )
    os.makedirs(path, exist_ok=True)
    return LocalStorage(path)


def demo_location(path: str) -> tuple[str, bool]:
    """``path`` as a table location (local paths made absolute, URIs kept) and whether a table is there."""
    if urlparse(path).scheme in OBJECT_STORE_SCHEMES:
        from hoodied.hoodie.object_storage import ObjectStorage

        return path.rstrip("/"), ObjectStorage.connect(path).exists(".hoodie/hoodie.properties")
    local = unquote(urlparse(path).path) if path.startswith("file://") else path
    return os.path.abspath(local), os.path.exists(os.path.join(local, ".hoodie", "hoodie.properties"))


def create_demo_table(path: str) -> dict[str, Any]:
    """Create the demo table at ``path`` (a new or empty folder, or an object-store prefix holding no
    table); returns a summary of what was written."""
    storage = _new_table_storage(path)
    if storage.exists(".hoodie"):
        raise HoodieServiceError(f"{storage.base_uri}: already holds a Hudi table; choose an empty folder")
    spec = TableSpec("demo_trips", SCHEMA, "trip_id", "city", "ts", TableType.MERGE_ON_READ, 9)
    writer = create_table(storage, spec)
    rng = random.Random(20250101)
    live: dict[str, dict[str, Any]] = {}

    def table(rows: list[dict[str, Any]]) -> pa.Table:
        return pa.Table.from_pylist(rows, schema=SCHEMA)

    results = []
    first = _trips(rng, range(300), _START_MS)
    results.append(writer.upsert(table(first)))
    live.update({r["trip_id"]: r for r in first})

    def correct(count: int, ts: int, extra: list[dict[str, Any]] | None = None, deleted: int = 0) -> None:
        """One delta commit: ``count`` fares corrected, ``extra`` new trips, ``deleted`` other trips gone."""
        fixes = _corrected(rng.sample(sorted(live.values(), key=lambda r: r["trip_id"]), count), ts, rng)
        rows = fixes + (extra or [])
        gone = rng.sample(sorted(set(live) - {r["trip_id"] for r in fixes}), deleted)
        deletes = table([live[k] for k in gone]).select(["trip_id", "city"]) if gone else None
        results.append(writer.upsert(table(rows), deletes=deletes))
        live.update({r["trip_id"]: r for r in rows})
        for k in gone:
            del live[k]

    correct(30, _START_MS + 10**6, extra=_trips(rng, range(300, 320), _START_MS + 2 * 10**6))
    correct(30, _START_MS + 2 * 10**6 + 10**5)

    cancelled = rng.sample(sorted(live), 15)
    results.append(writer.delete(table([live[k] for k in cancelled]).select(["trip_id", "city"])))
    for k in cancelled:
        del live[k]

    correct(20, _START_MS + 3 * 10**6)
    correct(20, _START_MS + 4 * 10**6, deleted=5)

    return {
        "path": storage.base_uri,
        "table_type": spec.table_type.value,
        "table_version": spec.version,
        "partitions": [f"city={c}" for c in sorted(CITIES)],
        "instants": [r.instant_time for r in results],
        "rows": len(live),
        "inserts": sum(r.num_inserts for r in results),
        "updates": sum(r.num_updates for r in results),
        "deletes": sum(r.num_deletes for r in results),
        "base_files": sum(1 for f in (p for r in results for p in r.files) if f.endswith(".parquet")),
        "log_files": sum(1 for r in results for p in r.files if ".log." in p),
    }

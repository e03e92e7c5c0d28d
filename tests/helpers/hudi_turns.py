"""Turns of a real Apache Hudi writer and hoodied on one table, and the checks after each.

``Writer`` is the Hudi Spark writer of the lane's tests (``tests.helpers.hudi_peer``): rounds of
upserts and deletes with the settings of a writer beside an external table-service process, followed
by an oracle. ``daemon_pass`` is one ``hoodied run --once`` with the writer's lock keys as its
``hudi_lock``. ``check`` asks Hudi's readers (snapshot through the metadata table and through storage
listing, read-optimized, point and range queries with data skipping on the column stats and the
record index, an incremental query, time travel), Hudi's ``validate_metadata_table_files`` and hudi-rs,
and all must give the oracle's rows.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import yaml

from hoodied.hoodie.timeline.instant import Action, Instant, State
from tests.helpers.daemon_procs import hoodied, service_instants
from tests.helpers.hudi_peer import (
    COLUMNS,
    FS_LOCK,
    HudiPeer,
    Oracle,
    metadata_partitions,
    row_order,
    writer_options,
)

_names = itertools.count()
#: every table planner off: a pass turns on the one it runs
PLANNERS_OFF = {name: {"schedule": False} for name in ("clean", "compaction", "log_compaction", "clustering")}


def daemon_pass(
    tmp_path: Path, table: Path, services: dict[str, Any], *, expected: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """One ``hoodied run --once`` on ``table`` with Hudi's file-system lock and ``services`` as the
    table's policy (every other planner off); returns the table's job history of that pass, in which
    every job succeeded, planned or found nothing due, unless its outcome is ``expected``."""
    settings = tmp_path / "hoodied.yaml"
    settings.write_text(yaml.safe_dump({
        "tables": [{"path": str(table), "policy": {
            "hudi_lock": {"hoodie.write.lock.provider": FS_LOCK, "hoodie.write.lock.filesystem.expire": 1},
            "services": {**PLANNERS_OFF, **services},
        }}],
        "clock_skew_ms": 5,
        "spark": {"master": "local[2]"},
        "http": "off",
        "log": {"format": "json"},
    }))
    proc = hoodied("run", "--config", str(settings), "--once", "--json")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]
    status = json.loads(out)
    history: list[dict[str, Any]] = status["tables"][0]["history"]
    failed = [h for h in history if h["outcome"] not in {"success", "planned", "nothing_due", *expected}]
    assert not failed, failed
    return history


def completed(table: Path, action: Action) -> list[Instant]:
    return [i for i in service_instants(table, action) if i.state is State.COMPLETED]


class Writer:
    """The writer's rounds: each a batch of upserts or deletes, applied to the oracle once Hudi
    committed it; ``after[n]`` is the oracle and the commit after round ``n``."""

    def __init__(self, hudi_peer: HudiPeer, table: Path, *, metadata: bool | None = None) -> None:
        self.peer = hudi_peer
        self.table = table
        self.options = writer_options(hudi_peer.release, "trips", "MERGE_ON_READ", metadata=metadata)
        self.oracle = Oracle()
        self.rng = random.Random(hudi_peer.release)
        self.n = 0
        #: the round incremental queries and time travel start from: one still on the active timeline
        #: and not cleaned (Hudi refuses time travel to before a clean's earliest retained commit)
        self.since = 2
        self.keys = itertools.count()
        self.after: dict[int, tuple[Oracle, Instant]] = {}
        self._name: str | None = None

    def register(self) -> str:
        """The table's name in the peer's catalog (Hudi's procedures take a name), registered once."""
        if self._name is None:
            self._name = f"t{next(_names)}"
            self.peer.register(self._name, self.table)
        return self._name

    def _commit(self) -> None:
        self.n += 1
        commits = completed(self.table, Action.DELTA_COMMIT)
        self.after[self.n] = (self.oracle.copy(), commits[-1])

    def upsert(self, new: int, updated: int, **options: str) -> None:
        keys = self.rng.sample(sorted(self.oracle.rows), updated) if updated else []
        keys += [f"k{next(self.keys):05d}" for _ in range(new)]
        ts = self.n + 1
        records = [{"id": k, "part": self.oracle.rows.get(k, {}).get("part") or f"p{int(k[1:]) % 3}",
                    "ts": ts, "v": self.rng.randrange(1000), "note": f"round {ts}"} for k in keys]
        self.peer.write(self.table, records, {**self.options, **options}, "upsert")
        self.oracle.upsert(records)
        self._commit()

    def delete(self, count: int) -> None:
        keys = self.rng.sample(sorted(self.oracle.rows), count)
        records = [dict(self.oracle.rows[k]) for k in keys]
        self.peer.write(self.table, records, self.options, "delete")
        self.oracle.delete(records)
        self._commit()


def hudi_rs_snapshot(table: Path) -> list[list[Any]]:
    batches = hudi.HudiTableBuilder.from_base_uri(str(table)).build().read(hudi.HudiReadOptions())
    rows = pa.Table.from_batches(batches).select(COLUMNS).to_pylist() if batches else []
    return sorted(([r[c] for c in COLUMNS] for r in rows), key=row_order)


def _changed_since(w: Writer, n: int) -> list[list[Any]]:
    """The oracle's rows last written after round ``n`` (what an incremental query from round ``n``
    returns: the latest value of each changed row that still exists)."""
    before = w.after[n][0].rows if n in w.after else {}
    return sorted(([r[c] for c in COLUMNS] for k, r in w.oracle.rows.items() if before.get(k) != r),
                  key=row_order)


def _instant_option(w: Writer, instant: Instant) -> str:
    """How the release names an instant in its read options: by completion time from table version 8
    on (its incremental and time-travel queries run on completion time), else by instant time."""
    if w.peer.table_version >= 8 and instant.completion_time is not None:
        return instant.completion_time
    return instant.requested_time


def check(w: Writer, label: str, *, read_optimized: bool = False) -> None:
    """Hudi's readers, Hudi's metadata validation and hudi-rs all see the oracle's rows; the
    incremental query and time travel start from round ``w.since``."""
    p, table, expected = w.peer, w.table, w.oracle.snapshot()
    metadata = w.options["hoodie.metadata.enable"] == "true"
    if metadata:
        indexes = {"files", "column_stats", "record_index"}
        if p.table_version >= 8:
            indexes.add("partition_stats")
        assert indexes <= metadata_partitions(table), f"{label}: the metadata table's indexes"
    assert p.read(table) == expected, f"{label}: Hudi snapshot (metadata table listing)"
    assert p.read(table, {"hoodie.metadata.enable": "false"}) == expected, f"{label}: Hudi snapshot (storage)"
    if read_optimized:
        ro = p.read(table, {"hoodie.datasource.query.type": "read_optimized"})
        assert ro == expected, f"{label}: Hudi read-optimized after a full compaction"
    skipping = {"hoodie.metadata.enable": "true", "hoodie.enable.data.skipping": "true",
                "hoodie.metadata.index.column.stats.enable": "true",
                "hoodie.metadata.record.index.enable": "true",
                "hoodie.metadata.global.record.level.index.enable": "true"}
    key = sorted(w.oracle.rows)[len(w.oracle.rows) // 2]
    assert p.read(table, skipping, where=f"id = '{key}'") == [r for r in expected if r[0] == key], \
        f"{label}: Hudi point query with data skipping"
    assert p.read(table, skipping, where="v >= 500") == [r for r in expected if r[3] >= 500], \
        f"{label}: Hudi range query with data skipping"
    first = w.since
    incremental = {"hoodie.datasource.query.type": "incremental",
                   "hoodie.datasource.read.begin.instanttime": _instant_option(w, w.after[first][1])}
    # Hudi 1.0 reads from the start instant inclusively, 0.15 and 1.1 exclusively (as each release's
    # own incremental reader does on tables it wrote, before hoodied touched them)
    since = first - 1 if p.release.startswith("1.0.") else first
    assert p.read(table, incremental) == _changed_since(w, since), f"{label}: Hudi incremental query"
    then, instant = w.after[first]
    as_of = {"as.of.instant": _instant_option(w, instant)}
    assert p.read(table, as_of) == then.snapshot(), f"{label}: Hudi time travel to round {first}"
    if metadata:
        assert p.sql(f"call validate_metadata_table_files(table => '{w.register()}')") == [], \
            f"{label}: Hudi's metadata table file validation"
    assert hudi_rs_snapshot(table) == expected, f"{label}: hudi-rs snapshot"

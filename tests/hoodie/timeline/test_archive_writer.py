"""The LSM history writer: layers, manifests, compaction and cleaning, read back by ``History``.

Rows come from the timeline files of a real Hudi v9 table (compaction, clustering,
insert-overwrite, delta commits). The files must have Hudi's parquet schema for
``HoodieLSMTimelineInstant`` (checked against the Avro schema Hudi ships), the manifests Jackson's
pretty JSON, and ``History`` (the reader the rest of hoodied uses) must return every byte.
No fixture holds an archived timeline, so the reader side is the project's ``History``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hoodied.hoodie.errors import LockLostError
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.archive_writer import (
    LSM_SCHEMA,
    HistoryWriter,
    LsmRow,
    jackson_manifest,
    lsm_row,
)
from hoodied.hoodie.timeline.history import History, HistoryFileName, latest_version, read_manifest
from hoodied.hoodie.timeline.instant import COMPLETED_ACTION, Action, State

V9_MOR = "mor/avro/v9_txns_simple_nometa"
REFERENCE_AVSC = Path(__file__).resolve().parents[3] / "hoodie" / "avro" / "schemas"


def _rows(table: Path) -> tuple[Timeline, list[LsmRow]]:
    storage = LocalStorage(str(table))
    timeline = Timeline.load(storage, load_table_config(storage))
    rows = []
    for inst in timeline.completed():
        contents = {s: (table / p).read_bytes() for s, p in timeline.state_files(inst).items()}
        done = COMPLETED_ACTION.get(inst.action, inst.action)
        rows.append(lsm_row(inst.requested_time, inst.action, done, inst.completion_time, contents))
    return timeline, rows


def _writer(table: Path) -> HistoryWriter:
    storage = LocalStorage(str(table))
    return HistoryWriter(storage, load_table_config(storage).history_path, lambda: None)


def test_layer_has_hudis_schema_and_reads_back(hudi_table) -> None:
    table = hudi_table(V9_MOR)
    timeline, rows = _rows(table)
    name = _writer(table).write_layer(rows)
    assert name == HistoryFileName(rows[0].instant_time, rows[-1].instant_time, 0).format()
    history_dir = table / ".hoodie/timeline/history"
    assert (history_dir / "_version_").read_text() == "1"

    pf = pq.ParquetFile(history_dir / name)
    # parquet-avro: nullable union -> OPTIONAL, string -> BYTE_ARRAY (String), int -> REQUIRED INT32
    columns = {pf.schema.column(i).name: pf.schema.column(i) for i in range(len(pf.schema))}
    assert list(columns) == ["instantTime", "completionTime", "action", "metadata", "plan", "version"]
    for col in ("instantTime", "completionTime", "action"):
        assert columns[col].physical_type == "BYTE_ARRAY" and str(columns[col].logical_type) == "String"
        assert columns[col].max_definition_level == 1
    for col in ("metadata", "plan"):
        assert columns[col].physical_type == "BYTE_ARRAY" and columns[col].max_definition_level == 1
    assert columns["version"].physical_type == "INT32" and columns["version"].max_definition_level == 0
    footer = pf.schema_arrow.metadata
    shipped = json.loads((REFERENCE_AVSC / "HoodieLSMTimelineInstant.avsc").read_text())
    assert json.loads(footer[b"parquet.avro.schema"])["fields"] == shipped["fields"]
    assert pf.metadata.row_group(0).column(0).compression == "GZIP"

    # every byte comes back through the project's reader
    storage = LocalStorage(str(table))
    history = History.load(storage, load_table_config(storage))
    assert [e.instant.requested_time for e in history.entries] == [r.instant_time for r in rows]
    for row, entry in zip(rows, history.entries, strict=True):
        assert history.metadata_bytes(row.instant_time) == row.metadata
        assert history.plan_bytes(row.instant_time) == row.plan
        assert entry.instant.completion_time == row.completion_time
        # the reader resolves the table-service action back from the completed one + plan
        assert entry.instant.action is timeline.get(row.instant_time).action  # type: ignore[union-attr]
    actions = {e.instant.action for e in history.entries}
    assert {Action.COMPACTION, Action.CLUSTERING, Action.REPLACE_COMMIT, Action.DELTA_COMMIT} <= actions


def test_row_contents_follow_hudis_conversion() -> None:
    """``createLSMTimelineInstant``: plan = requested bytes for compaction/clean; for replacecommit
    the inflight bytes when not empty; empty files are stored as no value."""
    contents = {State.REQUESTED: b"plan", State.INFLIGHT: b"", State.COMPLETED: b"meta"}
    compaction = lsm_row("1", Action.COMPACTION, Action.COMMIT, "2", contents)
    assert (compaction.action, compaction.metadata, compaction.plan) == ("commit", b"meta", b"plan")
    replace = lsm_row(
        "1", Action.REPLACE_COMMIT, Action.REPLACE_COMMIT, "2", {**contents, State.INFLIGHT: b"inflight"}
    )
    assert replace.plan == b"inflight"
    replace_empty = lsm_row("1", Action.REPLACE_COMMIT, Action.REPLACE_COMMIT, "2", contents)
    assert replace_empty.plan == b"plan"
    commit = lsm_row("1", Action.COMMIT, Action.COMMIT, "2", {**contents, State.COMPLETED: b""})
    assert (commit.metadata, commit.plan, commit.version) == (None, None, 1)


def test_manifest_is_jacksons_pretty_json() -> None:
    text = jackson_manifest([("a_b_0.parquet", 10), ("c_d_1.parquet", 20)])
    assert text == (
        '{\n  "files" : [ {\n    "fileName" : "a_b_0.parquet",\n    "fileLen" : 10\n  }, '
        '{\n    "fileName" : "c_d_1.parquet",\n    "fileLen" : 20\n  } ]\n}'
    )
    assert jackson_manifest([]) == '{\n  "files" : [ ]\n}'


def test_rerun_and_leftovers(hudi_table) -> None:
    table = hudi_table(V9_MOR)
    _, rows = _rows(table)
    writer = _writer(table)
    history_dir = table / ".hoodie/timeline/history"
    first = writer.write_layer(rows[:4])
    assert first is not None
    # the same layer again (a re-run after a crash past the commit): nothing written
    assert writer.write_layer(rows[:4]) is None
    assert writer.latest_version() == 1
    # a crash left a half-written layer and a manifest that _version_ never named: both replaced
    second_name = HistoryFileName(rows[4].instant_time, rows[7].instant_time, 0).format()
    (history_dir / second_name).write_bytes(b"PAR1 torn")
    (history_dir / "manifest_2").write_text("{ torn")
    assert writer.write_layer(rows[4:8]) == second_name
    storage = LocalStorage(str(table))
    files = read_manifest(storage, ".hoodie/timeline/history", 2)
    assert [n for n, _ in files] == [first, second_name]
    assert all((history_dir / n).stat().st_size == size for n, size in files)
    assert len(History.load(storage, load_table_config(storage)).entries) == 8


def test_compaction_merges_a_full_level(hudi_table) -> None:
    table = hudi_table(V9_MOR)
    _, rows = _rows(table)
    writer = _writer(table)
    names = [writer.write_layer(rows[i : i + 2]) for i in range(0, 6, 2)]
    storage = LocalStorage(str(table))
    assert writer.compact_and_clean(batch_size=4) == []  # 3 L0 files < batch size 4
    assert writer.compact_and_clean(batch_size=3) == [
        HistoryFileName(rows[0].instant_time, rows[5].instant_time, 1).format()
    ]
    history_dir = table / ".hoodie/timeline/history"
    version = latest_version(storage, ".hoodie/timeline/history")
    assert version == 4
    listed = [n for n, _ in read_manifest(storage, ".hoodie/timeline/history", version)]
    assert listed == [HistoryFileName(rows[0].instant_time, rows[5].instant_time, 1).format()]
    compacted = pq.read_table(history_dir / listed[0])
    originals = pa.concat_tables([pq.read_table(history_dir / n) for n in names if n])
    assert compacted.equals(originals)
    assert compacted.schema.equals(LSM_SCHEMA, check_metadata=True)
    # 4 versions, keep 3 + 1 compacted level: nothing cleaned yet; the L0 files are still there
    assert all((history_dir / n).exists() for n in names if n)
    history = History.load(storage, load_table_config(storage))
    assert [e.instant.requested_time for e in history.entries] == [r.instant_time for r in rows[:6]]
    assert {e.file for e in history.entries} == {f".hoodie/timeline/history/{listed[0]}"}


def test_cleaning_drops_old_snapshots_and_unlisted_files(hudi_table) -> None:
    table = hudi_table(V9_MOR)
    _, rows = _rows(table)
    writer = _writer(table)
    history_dir = table / ".hoodie/timeline/history"
    for i in range(5):
        writer.write_layer(rows[i : i + 1])
    writer.compact_and_clean(batch_size=10)  # no compaction: keep the 3 newest of 5 versions
    assert sorted(p.name for p in history_dir.glob("manifest_*")) == [
        "manifest_3",
        "manifest_4",
        "manifest_5",
    ]
    assert len(list(history_dir.glob("*.parquet"))) == 5  # manifest_3 still lists the first 3 layers
    writer.compact_and_clean(batch_size=5)  # 5 L0 -> 1 L1 (v6); keep 3 + 1 of 6 versions
    assert sorted(p.name for p in history_dir.glob("manifest_*")) == [
        "manifest_3",
        "manifest_4",
        "manifest_5",
        "manifest_6",
    ]
    writer.write_layer(rows[5:6])  # v7
    writer.write_layer(rows[6:7])  # v8
    deleted = writer.clean(0)  # keep v6..v8: the five L0 files are no longer listed
    assert sorted(deleted) == sorted(
        ["manifest_3", "manifest_4", "manifest_5"]
        + [HistoryFileName(r.instant_time, r.instant_time, 0).format() for r in rows[:5]]
    )
    storage = LocalStorage(str(table))
    assert len(History.load(storage, load_table_config(storage)).entries) == 7


def test_a_lost_lock_stops_before_the_next_file(hudi_table) -> None:
    table = hudi_table(V9_MOR)
    _, rows = _rows(table)
    calls: list[int] = []

    def ensure_held() -> None:
        calls.append(1)
        if len(calls) > 1:
            raise LockLostError("lost")

    storage = LocalStorage(str(table))
    writer = HistoryWriter(storage, ".hoodie/timeline/history", ensure_held)
    with pytest.raises(LockLostError):
        writer.write_layer(rows[:3])
    history_dir = table / ".hoodie/timeline/history"
    # the layer was written, no manifest: the history is still empty for readers
    assert not list(history_dir.glob("manifest_*")) and not (history_dir / "_version_").exists()
    assert History.load(storage, load_table_config(storage)).entries == []

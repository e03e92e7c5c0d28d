"""LSM timeline history: a history folder built the way Hudi 1.x's archiver lays it out, read back.

No fixture has archived instants, so ``archive()`` below plays Hudi's ``LSMTimelineWriter``:
it turns completed instants of a real v9 table into ``HoodieLSMTimelineInstant`` rows
(``MetadataConversionUtils.createLSMTimelineInstant``: action = completed action, metadata =
completed file bytes, plan = requested file bytes, for a replacecommit the inflight bytes when
not empty), writes them as L0 parquet files ``<min>_<max>_0.parquet``, compacts them into an
L1 file, writes a Jackson-style ``manifest_<N>`` per snapshot and ``_version_``, and deletes
the archived instants from the active timeline.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hoodied.hoodie.avro.container import schema_json
from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.history import History, HistoryFileName, manifest_name, parse_manifest_name
from hoodied.hoodie.timeline.instant import Action, Instant, State

V9_MOR = "mor/avro/v9_txns_simple_nometa"

# parquet-avro's mapping of the HoodieLSMTimelineInstant record
LSM_SCHEMA = pa.schema(
    [
        pa.field("instantTime", pa.string()),
        pa.field("completionTime", pa.string()),
        pa.field("action", pa.string()),
        pa.field("metadata", pa.binary()),
        pa.field("plan", pa.binary()),
        pa.field("version", pa.int32(), nullable=False),
    ],
    metadata={"parquet.avro.schema": schema_json("HoodieLSMTimelineInstant"), "writer.model.name": "avro"},
)


def load(table: Path, *, include_history: bool) -> Timeline:
    storage = LocalStorage(str(table))
    return Timeline.load(storage, load_table_config(storage), include_history=include_history)


def lsm_row(table: Path, timeline: Timeline, inst: Instant) -> dict[str, object]:
    files = {state: table / path for state, path in timeline.state_files(inst).items()}

    def content(state: State) -> bytes | None:
        data = files[state].read_bytes() if state in files else b""
        return data or None

    plan = None
    if inst.action in (Action.COMPACTION, Action.LOG_COMPACTION, Action.CLEAN):
        plan = content(State.REQUESTED)
    elif inst.action in (Action.REPLACE_COMMIT, Action.CLUSTERING):
        plan = content(State.INFLIGHT) or content(State.REQUESTED)
    return {
        "instantTime": inst.requested_time,
        "completionTime": inst.completion_time,
        "action": inst.file_action.value,
        "metadata": content(State.COMPLETED),
        "plan": plan,
        "version": 1,
    }


def jackson_manifest(files: list[tuple[str, int]]) -> str:
    """``HoodieLSMTimelineManifest.toJsonString()``: Jackson's default pretty printer."""
    entries = ", ".join(f'{{\n    "fileName" : "{n}",\n    "fileLen" : {size}\n  }}' for n, size in files)
    return f'{{\n  "files" : [ {entries} ]\n}}'


def write_parquet(path: Path, rows: list[dict[str, object]]) -> tuple[str, int]:
    pq.write_table(pa.Table.from_pylist(rows, schema=LSM_SCHEMA), path)
    return path.name, path.stat().st_size


def archive(table: Path, count: int) -> Path:
    """Archive the first ``count`` instants as two L0 files compacted into one L1 file."""
    timeline = load(table, include_history=False)
    archived = timeline.instants[:count]
    rows = [lsm_row(table, timeline, inst) for inst in archived]
    history = table / ".hoodie" / "timeline" / "history"
    half = count // 2

    def name(part: list[dict[str, object]], level: int) -> str:
        return HistoryFileName(str(part[0]["instantTime"]), str(part[-1]["instantTime"]), level).format()

    first = write_parquet(history / name(rows[:half], 0), rows[:half])
    (history / "manifest_1").write_text(jackson_manifest([first]))
    (history / "_version_").write_text("1")
    second = write_parquet(history / name(rows[half:], 0), rows[half:])
    (history / "manifest_2").write_text(jackson_manifest([first, second]))
    (history / "_version_").write_text("2")
    # compaction into L1; the L0 files stay on storage until Hudi's LSM cleaning removes them
    compacted = write_parquet(history / name(rows, 1), rows)
    (history / "manifest_3").write_text(jackson_manifest([compacted]))
    (history / "_version_").write_text("3")
    for inst in archived:
        for path in timeline.state_files(inst).values():
            (table / path).unlink()
    return history / compacted[0]


def test_history_round_trip(hudi_table) -> None:
    table = hudi_table(V9_MOR)
    original = load(table, include_history=False)
    assert len(original) == 13
    before = {
        i.requested_time: (
            original.read_commit_metadata(i),
            original.read_plan(i),
            original.plan(i),
            original.is_clustering(i),
        )
        for i in original.instants
    }
    replaced = original.replaced_file_groups()
    replaced_before_clustering = original.replaced_file_groups(as_of="20260307135840453")
    l1_file = archive(table, 12)

    active = load(table, include_history=False)
    assert [i.requested_time for i in active.instants] == ["20260307135840975"]

    merged = load(table, include_history=True)
    assert merged.instants == original.instants  # actions (compaction, clustering) and completion times
    assert merged.replaced_file_groups() == replaced
    assert merged.replaced_file_groups(as_of="20260307135840453") == replaced_before_clustering
    for inst in merged.instants[:12]:
        metadata, raw_plan, plan, is_clustering = before[inst.requested_time]
        assert merged.is_archived(inst)
        assert merged.state_file(inst) == str(l1_file.relative_to(table))
        assert merged.read_commit_metadata(inst) == metadata
        assert merged.plan(inst) == plan
        assert merged.is_clustering(inst) == is_clustering
        if inst.action in (Action.COMPACTION, Action.CLUSTERING):
            assert raw_plan is not None and merged.read_plan(inst) == raw_plan
    assert not merged.is_archived(merged.instants[12])
    compaction = merged.get("20260307135839895")
    assert compaction is not None and compaction.action is Action.COMPACTION
    clustering = merged.get("20260307135840454")
    assert clustering is not None and clustering.action is Action.CLUSTERING
    # the insert-overwrite's "plan" in the history is its inflight commit metadata: no plan
    overwrite = merged.get("20260307135837782")
    assert overwrite is not None and overwrite.action is Action.REPLACE_COMMIT
    assert merged.read_plan(overwrite) is None and not merged.is_clustering(overwrite)


def test_history_reader_details(hudi_table) -> None:
    table = hudi_table(V9_MOR)
    archive(table, 12)
    storage = LocalStorage(str(table))
    config = load_table_config(storage)
    history = History.load(storage, config)
    assert len(history.entries) == 12
    assert {e.file for e in history.entries} == {history.entries[0].file}  # only the L1 file is live
    entry = history.get("20260307135839895")
    assert entry is not None and entry.instant.action is Action.COMPACTION
    plan = history.plan_bytes("20260307135839895")
    assert plan is not None and plan.startswith(b"Obj\x01")
    assert history.get("20260307135840975") is None and history.metadata_bytes("20260307135840975") is None


def test_version_file_fallbacks(hudi_table, caplog: pytest.LogCaptureFixture) -> None:
    table = hudi_table(V9_MOR)
    archive(table, 12)
    history = table / ".hoodie/timeline/history"
    (history / "_version_").unlink()  # readers then take the highest manifest
    assert len(load(table, include_history=True)) == 13
    (history / "_version_").write_text("garbage")
    with caplog.at_level(logging.WARNING, logger="hoodie.history"):
        assert len(load(table, include_history=True)) == 13
    assert any("unreadable version" in r.getMessage() for r in caplog.records)
    # an older snapshot: the two L0 files
    (history / "_version_").write_text("2")
    merged = load(table, include_history=True)
    assert len(merged) == 13
    names = sorted({Path(merged.state_file(i)).name for i in merged.instants[:12]})
    first, last = merged.instants[0].requested_time, merged.instants[11].requested_time
    assert len(names) == 2 and names[0].startswith(first) and names[1].endswith(f"{last}_0.parquet")


def test_corrupt_history_files_name_the_file(hudi_table) -> None:
    table = hudi_table(V9_MOR)
    l1_file = archive(table, 12)
    l1_file.write_bytes(b"PAR1 not really parquet PAR1")
    with pytest.raises(HoodieFormatError) as err:
        load(table, include_history=True)
    assert str(err.value).startswith(f".hoodie/timeline/history/{l1_file.name}: not a readable LSM timeline")
    (table / ".hoodie/timeline/history/manifest_3").write_text("{ broken")
    with pytest.raises(HoodieFormatError, match=r"history/manifest_3: not a valid LSM timeline manifest"):
        load(table, include_history=True)
    # without include_history the active timeline still loads
    assert len(load(table, include_history=False)) == 1


def test_no_history_and_layout1(shared_table, hudi_table) -> None:
    # every fixture has an empty history folder
    timeline = load(shared_table(V9_MOR), include_history=True)
    assert len(timeline) == 13 and not any(timeline.is_archived(i) for i in timeline.instants)
    v6 = hudi_table("cow/v6_nonpartitioned")
    assert len(load(v6, include_history=True)) == 2  # an empty .hoodie/archived
    # layout 1 reads .hoodie/archived: a torn archive file is a format error naming it
    (v6 / ".hoodie/archived/.commits_.archive.1_1-0-1").write_bytes(b"#HUDI#")
    with pytest.raises(HoodieFormatError, match=r"\.commits_\.archive\.1_1-0-1"):
        load(v6, include_history=True)


def test_history_names_round_trip() -> None:
    name = HistoryFileName("20260307135827749", "20260307135840454", 1)
    assert HistoryFileName.parse(name.format()) == name
    assert name.format() == "20260307135827749_20260307135840454_1.parquet"
    assert HistoryFileName.parse("manifest_3") is None
    assert parse_manifest_name(manifest_name(12)) == 12
    assert parse_manifest_name("_version_") is None

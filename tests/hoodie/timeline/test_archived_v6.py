"""The version-6 archived timeline (``.hoodie/archived``): file names, records, writing, reading.

Records are built from the timeline files of real tables Hudi 0.x wrote (commits, delta commits,
an insert-overwrite replacecommit, a rollback), written into an archive log file, and read back
three ways: by ``ArchivedTimelineV6``, by fastavro with the writer schema of each block, and by
fastavro resolving that writer schema against Hudi's own ``HoodieArchivedMetaEntry`` schema (as
Hudi's reader does with its generated class). The Avro commit metadata is compared field by
field with the JSON file it came from.
"""

from __future__ import annotations

import io
import json
import re
import struct
from pathlib import Path
from typing import Any

import fastavro
import pytest

from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.log.frame import BlockType, HeaderKey, read_log_blocks
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.archived_v6 import (
    ARCHIVE_WRITE_TOKEN,
    ROLLING_STAT_KEY,
    ArchivedTimelineV6,
    ArchiveFileName,
    archive_file_names,
    archived_meta_schema_json,
    convert_commit_metadata,
    meta_entries,
    meta_entry,
    write_archive_file,
)
from hoodied.hoodie.timeline.instant import Action, Instant, State
from tests.helpers.hudi_schemas import REFERENCE

FIXTURES = [
    "cow/v6_simplekeygen_nonhivestyle_overwritetable",
    "mor/parquet/v6_nonpartitioned_rollback",
    "mor/avro/v6_trips_8i1u",
    "mor/parquet/v6_nonpartitioned",
]


# ---------------------------------------------------------------------------- helpers


def hudi_entry_schema() -> Any:
    """Hudi's own ``HoodieArchivedMetaEntry`` (the .avsc files, comments stripped, parsed together)."""
    if not (REFERENCE / "HoodieArchivedMetaEntry.avsc").exists():
        pytest.skip(f"Hudi's Avro schemas not found under {REFERENCE} (set HOODIED_REFERENCE)")
    texts = {}
    for f in sorted(REFERENCE.glob("*.avsc")):
        text = re.sub(r"/\*.*?\*/", "", f.read_text(), flags=re.S)
        texts[f.stem] = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))
    named: dict[str, Any] = {}
    pending = dict(texts)
    while pending:
        progress = False
        for name, schema in list(pending.items()):
            trial = dict(named)
            try:
                fastavro.parse_schema(schema, named_schemas=trial)
            except fastavro.schema.UnknownType:
                continue
            named, progress = trial, True
            del pending[name]
        assert progress, f"unresolvable Hudi schemas: {sorted(pending)}"
    return _inline(named["org.apache.hudi.avro.model.HoodieArchivedMetaEntry"], named, set())


def _inline(node: Any, named: dict[str, Any], seen: set[str]) -> Any:
    """A self-contained copy of a parsed schema: each named type defined at its first use."""
    if isinstance(node, str):
        if node in named and node not in seen:
            return _inline(named[node], named, seen)
        return node
    if isinstance(node, list):
        return [_inline(n, named, seen) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: v for k, v in node.items() if not k.startswith("__")}
    if out.get("type") in ("record", "enum", "fixed"):
        seen.add(out["name"])
    if out.get("type") == "record":
        out["fields"] = [{**f, "type": _inline(f["type"], named, seen)} for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = _inline(out[key], named, seen)
    if out.get("type") not in ("record", "enum", "fixed"):
        out["type"] = _inline(out["type"], named, seen)
    return out


def block_records(content: bytes) -> list[bytes]:
    version, count = struct.unpack_from(">ii", content, 0)
    assert version == 3
    out, pos = [], 8
    for _ in range(count):
        (size,) = struct.unpack_from(">i", content, pos)
        out.append(content[pos + 4 : pos + 4 + size])
        pos += 4 + size
    assert pos == len(content)
    return out


def assert_commit_metadata(avro: dict[str, Any], raw: bytes, *, replace: bool = False) -> None:
    """Every Avro field equals the JSON field of the same name (absent in the JSON: null)."""
    data = json.loads(raw) if raw.strip() else {}
    for partition, stats in (data.get("partitionToWriteStats") or {}).items():
        got = avro["partitionToWriteStats"][partition]
        assert len(got) == len(stats)
        for a, j in zip(got, stats, strict=True):
            for key, value in a.items():
                if key == "runtimeStats" and value is not None:
                    assert value == {k: j[key].get(k) for k in value}
                else:
                    assert value == j.get(key), (partition, key)
    assert avro["extraMetadata"] == {**data.get("extraMetadata", {}), ROLLING_STAT_KEY: ""}
    expected_op = "COMPACT" if data.get("compacted") else data.get("operationType", "UNKNOWN")
    assert avro["operationType"] == expected_op
    assert avro["compacted"] == data.get("compacted", False)
    assert avro["version"] is None
    if replace:
        assert avro["partitionToReplaceFileIds"] == data["partitionToReplaceFileIds"]


def assert_details(rec: dict[str, Any], action: str, state: State, raw: bytes) -> None:
    """The record's details hold what the timeline file holds."""
    if action in ("commit", "deltacommit"):
        assert_commit_metadata(rec["hoodieCommitMetadata"], raw)
    elif action == "replacecommit" and state is State.COMPLETED:
        assert_commit_metadata(rec["hoodieReplaceCommitMetadata"], raw, replace=True)
    elif action == "rollback" and state is State.COMPLETED:
        expected = next(iter(fastavro.reader(io.BytesIO(raw))))
        assert isinstance(expected, dict)
        got = rec["hoodieRollbackMetadata"]
        assert {k: got[k] for k in expected} == expected
    elif action == "rollback":
        assert rec["hoodieRollbackMetadata"] is None


# ---------------------------------------------------------------------------- names and schema


def test_archive_file_names_round_trip() -> None:
    for name in (".commits_.archive.1_1-0-1", ".commits_.archive.12_0-7-33", ".commits_.archive.3"):
        parsed = ArchiveFileName.parse(name)
        assert parsed is not None and parsed.format() == name
    for other in (
        "commits_.archive.1_1-0-1",
        ".commits_.archive.x_1-0-1",
        ".commits_.log.1_1-0-1",
        "hoodie.properties",
    ):
        assert ArchiveFileName.parse(other) is None
    assert sorted([ArchiveFileName(10, "1-0-1"), ArchiveFileName(2, "1-0-1")])[0].version == 2
    assert ArchiveFileName(1, ARCHIVE_WRITE_TOKEN).format() == ".commits_.archive.1_1-0-1"


def test_schema_is_hudis_archived_meta_entry() -> None:
    ours = json.loads(archived_meta_schema_json())
    fastavro.parse_schema(ours)
    hudi = hudi_entry_schema()
    assert ours["name"] == "HoodieArchivedMetaEntry" and ours["namespace"] == "org.apache.hudi.avro.model"
    # the same fields, in the same order (Hudi resolves by name; the order keeps it byte-identical)
    assert [f["name"] for f in ours["fields"]] == [f["name"] for f in hudi["fields"]]


# ---------------------------------------------------------------------------- records of real tables


@pytest.mark.parametrize("fid", FIXTURES)
def test_records_of_hudi_tables_write_and_read_back(hudi_table, fid: str) -> None:
    root = hudi_table(fid)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    instants = list(timeline.instants)
    records = meta_entries(storage, config, instants, timeline.state_files)
    files = [
        (i, s, p)
        for i in instants
        for s, p in sorted(timeline.state_files(i).items(), key=lambda x: x[0].value)
    ]
    assert len(records) == len(files)

    name = write_archive_file(storage, config.history_path, records, batch_size=4)
    assert name == ".commits_.archive.1_1-0-1"
    path = f"{config.history_path}/{name}"
    blocks = list(read_log_blocks(storage, path))
    assert [len(block_records(b.content())) for b in blocks] == [
        min(4, len(records) - i) for i in range(0, len(records), 4)
    ]
    hudi = hudi_entry_schema()
    resolved: list[dict[str, Any]] = []
    for block in blocks:
        assert block.block_type is BlockType.AVRO_DATA
        assert dict(block.header) == {HeaderKey.SCHEMA: archived_meta_schema_json()}
        writer = fastavro.parse_schema(json.loads(block.header[HeaderKey.SCHEMA]))
        for raw in block_records(block.content()):
            # Hudi's reader: the block's writer schema resolved against its own class schema
            entry = fastavro.schemaless_reader(io.BytesIO(raw), writer, hudi)
            assert isinstance(entry, dict)
            resolved.append(entry)

    archived = ArchivedTimelineV6.load(storage, config)
    by_key = {(r.requested_time, r.action, r.state): r.record for r in archived.records}
    assert len(by_key) == len(records)
    for entry in resolved:  # what Hudi's reader gets is what was written
        mine = by_key[(entry["commitTime"], entry["actionType"], State[entry["actionState"]])]
        for key in ("hoodieCommitMetadata", "hoodieReplaceCommitMetadata", "hoodieRollbackMetadata"):
            if mine[key] is None:
                assert entry[key] is None
            else:
                assert {k: v for k, v in entry[key].items() if k in mine[key]} == {
                    k: v for k, v in mine[key].items() if k in entry[key]
                }, key
    for inst in instants:
        for state, p in timeline.state_files(inst).items():
            action = (inst.action if state is not State.COMPLETED else inst.file_action).value
            rec = by_key[(inst.requested_time, action, state)]
            assert rec["actionState"] == state.name and rec["version"] is None
            if state is State.COMPLETED:
                assert rec["stateTransitionTime"] == inst.completion_time
            assert_details(rec, action, state, (root / p).read_bytes())
    # the completed instants, as the active timeline has them
    assert archived.instants() == [i for i in instants if i.is_completed]
    replace = next((i for i in instants if i.action is Action.REPLACE_COMMIT), None)
    if replace is not None:
        assert archived.metadata(replace)["operationType"] == "INSERT_OVERWRITE_TABLE"  # type: ignore[index]


def test_new_archival_writes_the_next_version_write_once(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    inst = Instant("20250101000000000", Action.COMMIT, State.COMPLETED, "20250101000000100")
    rec = meta_entry(inst, State.COMPLETED, b"", "20250101000000100", "x")
    # an empty completed file: only the identity (createMetaWrapperForEmptyInstant)
    assert rec == {
        "commitTime": "20250101000000000",
        "actionType": "commit",
        "actionState": "COMPLETED",
        "stateTransitionTime": "20250101000000100",
        "version": None,
    }
    assert write_archive_file(storage, ".hoodie/archived", [rec]) == ".commits_.archive.1_1-0-1"
    (tmp_path / ".hoodie/archived/.commits_.archive.7_0-1-2").write_bytes(b"")
    assert write_archive_file(storage, ".hoodie/archived", [rec]) == ".commits_.archive.8_1-0-1"
    assert [n.version for n in archive_file_names(storage, ".hoodie/archived")] == [1, 7, 8]
    with pytest.raises(ValueError, match="no records"):
        write_archive_file(storage, ".hoodie/archived", [])


def test_conversion_rules() -> None:
    compacted = json.dumps(
        {
            "partitionToWriteStats": {"p": [], "null": []},
            "compacted": True,
            "extraMetadata": {"a": "b"},
            "operationType": "UPSERT",
        }
    ).encode()
    avro = convert_commit_metadata(compacted, "x")
    assert avro["operationType"] == "COMPACT" and avro["partitionToWriteStats"] == {"p": []}
    assert avro["extraMetadata"] == {"a": "b", ROLLING_STAT_KEY: ""}
    empty = convert_commit_metadata(b"", "x")
    assert empty["operationType"] == "UNKNOWN" and empty["partitionToWriteStats"] == {}
    with pytest.raises(HoodieFormatError, match="not JSON"):
        convert_commit_metadata(b"\x00garbage", "x")
    # pending compactions archive their plan only when requested; savepoints... are never archived
    # by 0.x (restore and indexing make createMetaWrapper fail)
    restore = Instant("20250101000000000", Action.RESTORE, State.COMPLETED, "20250101000000001")
    with pytest.raises(HoodieFormatError, match="does not archive restore"):
        meta_entry(restore, State.COMPLETED, b"x", None, "x")
    inflight = Instant("20250101000000000", Action.COMPACTION, State.INFLIGHT)
    assert "hoodieCompactionPlan" not in meta_entry(inflight, State.INFLIGHT, b"", None, "x")


def test_reader_rejects_foreign_blocks(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    from hoodied.hoodie.log.frame import encode_command_block, write_log_file

    write_log_file(storage, ".hoodie/archived/.commits_.archive.1_1-0-1", [encode_command_block("1", "0")])
    (tmp_path / ".hoodie/hoodie.properties").write_text(
        "hoodie.table.name=t\nhoodie.table.version=6\nhoodie.table.type=COPY_ON_WRITE\n"
        "hoodie.timeline.layout.version=1\n"
    )
    config = load_table_config(storage)
    with pytest.raises(HoodieFormatError, match="COMMAND block in an archive file"):
        ArchivedTimelineV6.load(storage, config)


def _same(got: Any, expected: Any) -> None:
    """``got`` (an archived record part) holds ``expected`` (the timeline file's Avro record)."""
    if isinstance(expected, dict):
        assert isinstance(got, dict)
        for key, value in expected.items():
            if key in got:
                _same(got[key], value)
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            _same(g, e)
    else:
        assert got == expected


def test_records_of_hoodied_table_services(tmp_path: Path) -> None:
    """A clean (plan and metadata), a savepoint and a compaction plan, as hoodied wrote them."""
    from hoodied.hoodie.properties import TableType
    from tests.executors.test_archival import (
        add_clean,
        add_pending_compaction,
        add_savepoint,
        new_table,
        write_commits,
    )

    cow = new_table(tmp_path / "cow", 6, TableType.COPY_ON_WRITE)
    write_commits(cow, 6)
    add_clean(cow)
    add_savepoint(cow, cow.commits[-1])
    mor = new_table(tmp_path / "mor", 6, TableType.MERGE_ON_READ)
    write_commits(mor, 3)
    add_pending_compaction(mor)
    hudi = hudi_entry_schema()
    seen: set[tuple[str, State]] = set()
    for built in (cow, mor):
        storage = LocalStorage(str(built.root))
        config = load_table_config(storage)
        timeline = Timeline.load(storage, config)
        services = [i for i in timeline.instants if i.action not in (Action.COMMIT, Action.DELTA_COMMIT)]
        write_archive_file(
            storage, config.history_path, meta_entries(storage, config, services, timeline.state_files)
        )
        archived = ArchivedTimelineV6.load(storage, config)
        paths = {
            (i.requested_time, (i.file_action if st is State.COMPLETED else i.action).value, st): p
            for i in services
            for st, p in timeline.state_files(i).items()
        }
        assert len(archived.records) == len(paths)
        for r in archived.records:
            raw = (built.root / paths[(r.requested_time, r.action, r.state)]).read_bytes()
            field_name = {
                ("clean", State.COMPLETED): "hoodieCleanMetadata",
                ("clean", State.REQUESTED): "hoodieCleanerPlan",
                ("clean", State.INFLIGHT): "hoodieCleanerPlan",
                ("savepoint", State.COMPLETED): "hoodieSavePointMetadata",
                ("compaction", State.REQUESTED): "hoodieCompactionPlan",
            }.get((r.action, r.state))
            if field_name is None or not raw:
                assert all(r.record[k] is None for k in _METADATA_FIELDS), (r.action, r.state)
                continue
            _same(r.record[field_name], next(iter(fastavro.reader(io.BytesIO(raw)))))
            seen.add((r.action, r.state))
        # and Hudi's reader schema takes every record
        for block in read_log_blocks(storage, f"{config.history_path}/.commits_.archive.1_1-0-1"):
            writer = fastavro.parse_schema(json.loads(block.header[HeaderKey.SCHEMA]))
            for raw in block_records(block.content()):
                assert isinstance(fastavro.schemaless_reader(io.BytesIO(raw), writer, hudi), dict)
    assert {
        ("clean", State.COMPLETED),
        ("clean", State.REQUESTED),
        ("savepoint", State.COMPLETED),
        ("compaction", State.REQUESTED),
    } <= seen


_METADATA_FIELDS = (
    "hoodieCommitMetadata",
    "hoodieCleanMetadata",
    "hoodieRollbackMetadata",
    "hoodieSavePointMetadata",
    "hoodieCompactionPlan",
    "hoodieCleanerPlan",
    "hoodieReplaceCommitMetadata",
    "hoodieRequestedReplaceMetadata",
    "HoodieInflightReplaceMetadata",
)

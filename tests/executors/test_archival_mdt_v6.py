"""Archival of a version-6 metadata table's own timeline, after the data table's, as Hudi 0.15 does it.

No fixture has a version-6 table with a metadata table, so one is built: a version-6 COW data
table of 40 commits c0..c39 (hoodied's demo writer, real parquet files), with a pending clean P
requested between c24 and c25, and beside it the timeline of its metadata table as Hudi 0.15's MDT
writer leaves it (``.hoodie/metadata/.hoodie``, layout 1, JSON commit metadata):

- the MDT's ``hoodie.properties`` (version 6, MOR, HFILE, ``hoodie.archivelog.folder=archived``),
  and ``hoodie.table.metadata.partitions=files`` in the data table's;
- its initialising delta commit ``00000000000000010``, then one delta commit per data commit, at
  the data commit's time;
- compactions ``c9 + 001``, ``c19 + 001``, ``c29 + 001`` (requested plan, empty inflight, completed
  as ``commit``); cleans ``cj + 002`` after every 4th delta commit (j = 3, 7, ..., 39: 10 cleans);
- a rollback R (1 ms after c13, before c14) of a first, failed attempt of delta commit c13.

The data table's settings: keep 5..8 commits, ``hoodie.clean.commits.retained=1``. The rules
(``planners.archival`` module docstring) give, computed by hand:

- data table (0.15, version 6): 40 commits > 8, so 40 - 5 = 35 oldest qualify; the MDT's latest
  compaction is c29 + 001, so only instants requested before it go: c0..c29 (``MDT_COMPACTION``).
  The pending clean P is no write and holds nothing back on the data table;
- metadata table (0.x MDT writer config): keep 5..8 (the data table's, no "+ 1"), MDT cleaner
  keeps min(1, 20) = 1 commit, so min/max are not raised; 44 completed commits (init, 40 delta
  commits, 3 compactions) > 8, at most 44 - 5 = 39 go; the MDT compaction trigger (10 delta
  commits) keeps c30 on (10 delta commits after c29 + 001), so init, c0..c29 and the three
  compactions qualify (34); cleans on their own: 10 > 8, the oldest 10 - 5 = 5 (c3, c7, c11, c15,
  c19 + 002); the single rollback R stays (1 <= 8), however old;
- then the data-table boundary: the data table's first pending instant P (earlier than its first
  active commit c30), so only MDT instants requested before P go: init, c0..c24, c9 + 001,
  c19 + 001 and the five cleans. c25..c29 and c29 + 001 stay (``DATA_TABLE_TIMELINE``).
"""

from __future__ import annotations

import io
import json
import shutil
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
import pytest
from click.testing import CliRunner

from hoodied.executors.archival import PAUSE_POINTS_MDT_V6, ArchivalResult, MdtArchival, execute_archival
from hoodied.executors.clean import execute_clean
from hoodied.hoodie.avro.container import write_single_record
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log.frame import HeaderKey, read_log_blocks
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.properties import (
    TableConfig,
    TableType,
    load_table_config,
    properties_text,
    read_table_properties,
    table_checksum,
)
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline import commit_metadata as cm
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.archived_v6 import (
    ArchivedTimelineV6,
    archived_meta_schema_json,
    file_instant_time,
)
from hoodied.hoodie.timeline.instant import (
    Action,
    State,
    datetime_to_instant_time,
    instant_time_to_datetime,
)
from hoodied.planners.archival import (
    ArchivalPlan,
    ArchivalSettings,
    StopReason,
    archival_planner,
    mdt_archival_planner,
    mdt_archival_target,
)
from hoodied.planners.clean import CleanSettings, schedule_clean
from hoodied.service.cli.main import cli
from tests.executors.test_archival import FAST, hudi_rs, new_table, write_commits
from tests.helpers.crash_driver import kill_group, start_paused
from tests.hoodie.timeline.test_archived_v6 import assert_commit_metadata, block_records, hudi_entry_schema

OPTIONS = {
    "hoodie.keep.min.commits": "5",
    "hoodie.keep.max.commits": "8",
    "hoodie.clean.commits.retained": "1",
}
SETTINGS = ArchivalSettings.from_options(OPTIONS)
INIT = "00000000000000010"  # 0.x: the MDT's initialising delta commit (files partition)
FILE_ID = "files-0000-0"
ARCHIVE = f"{METADATA_FOLDER}/.hoodie/archived"

Files = dict[tuple[str, str, State], bytes]


# ---------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class V6Table:
    root: Path
    commits: list[str]  # c0..c39
    pending_clean: str  # P, between c24 and c25
    rollback: str  # R, between c13 and c14
    compactions: list[str]  # c9, c19, c29 + 001
    cleans: list[str]  # cj + 002, j = 3, 7, ..., 39

    @property
    def mdt_completed(self) -> set[str]:
        return {INIT, *self.commits, *self.compactions, *self.cleans, self.rollback}

    @property
    def expected_mdt_archived(self) -> set[str]:
        """By the times the files name (0.x MDT compactions and cleans carry a suffix)."""
        c = self.commits
        return {INIT, *c[:25], c[9] + "001", c[19] + "001", *(c[j] + "002" for j in (3, 7, 11, 15, 19))}

    @property
    def expected_mdt_plan(self) -> set[tuple[str, Action]]:
        """The same as hoodied's timeline parses them (instant times trimmed to 17 digits)."""
        c = self.commits
        return {
            (INIT, Action.DELTA_COMMIT),
            *((t, Action.DELTA_COMMIT) for t in c[:25]),
            (c[9], Action.COMPACTION),
            (c[19], Action.COMPACTION),
            *((c[j], Action.CLEAN) for j in (3, 7, 11, 15, 19)),
        }


def _plus_ms(t: str) -> str:
    return datetime_to_instant_time(instant_time_to_datetime(t, UTC) + timedelta(milliseconds=1), UTC)


def _deltacommit_metadata(t: str, base: str, version: int) -> bytes:
    log = f".{FILE_ID}_{base}.log.{version}_0-1-0"
    stat = cm.write_stat(
        file_id=FILE_ID, path=f"files/{log}", partition_path="files", prev_commit=base, num_writes=2,
        num_updates=2, file_size=812, log_version=version, base_file=f"{FILE_ID}_0-1-0_{base}.hfile",
        log_files=[log],
    )
    return cm.encode_commit_metadata(cm.commit_metadata({"files": [stat]}, "UPSERT_PREPPED", None), 6)


class MdtTimeline:
    """Writes a 0.x MDT's timeline files by name: hoodied's ``TimelineWriter`` takes 17-digit
    instant times only, and 0.x names MDT compactions and cleans ``<T>001`` / ``<T>002``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def put(self, t: str, action: str, state: State, data: bytes) -> None:
        suffix = {State.REQUESTED: ".requested", State.INFLIGHT: ".inflight", State.COMPLETED: ""}[state]
        path = self.folder / f"{t}.{action}{suffix}"
        assert not path.exists(), path
        path.write_bytes(data)

    def deltacommit(self, t: str, base: str, version: int) -> None:
        self.put(t, "deltacommit", State.REQUESTED, b"")
        self.put(t, "deltacommit", State.INFLIGHT, b"")
        self.put(t, "deltacommit", State.COMPLETED, _deltacommit_metadata(t, base, version))

    def compaction(self, t: str, base: str, logs: list[str]) -> None:
        plan = {
            "operations": [{
                "baseInstantTime": base, "deltaFilePaths": logs,
                "dataFilePath": f"{FILE_ID}_0-1-0_{base}.hfile", "fileId": FILE_ID, "partitionPath": "files",
                "metrics": {"TOTAL_LOG_FILES": float(len(logs))}, "bootstrapFilePath": None,
            }],
            "extraMetadata": None, "version": 2, "strategy": None, "preserveHoodieMetadata": False,
            "missingSchedulePartitions": None,
        }
        stat = cm.write_stat(
            file_id=FILE_ID, path=f"files/{FILE_ID}_0-1-0_{t}.hfile", partition_path="files",
            prev_commit=base, num_writes=40, file_size=9000,
        )
        done = cm.commit_metadata({"files": [stat]}, "COMPACT", None, compacted=True)
        self.put(t, "compaction", State.REQUESTED, write_single_record(plan, "HoodieCompactionPlan"))
        self.put(t, "compaction", State.INFLIGHT, b"")
        self.put(t, "commit", State.COMPLETED, cm.encode_commit_metadata(done, 6))

    def clean(self, t: str, ectr: str, last: str, old: str) -> None:
        plan = write_single_record({
            "earliestInstantToRetain": {"timestamp": ectr, "action": "deltacommit", "state": "COMPLETED"},
            "lastCompletedCommitTimestamp": last, "policy": "KEEP_LATEST_COMMITS",
            "filesToBeDeletedPerPartition": {}, "version": 2,
            "filePathsToBeDeletedPerPartition": {"files": [{"filePath": old, "isBootstrapBaseFile": False}]},
            "partitionsToBeDeleted": [], "extraMetadata": None,
        }, "HoodieCleanerPlan")
        name = old.rsplit("/", 1)[-1]
        metadata = {
            "startCleanTime": t, "timeTakenInMillis": 12, "totalFilesDeleted": 1,
            "earliestCommitToRetain": ectr, "lastCompletedCommitTimestamp": last,
            "partitionMetadata": {"files": {
                "partitionPath": "files", "policy": "KEEP_LATEST_COMMITS", "deletePathPatterns": [name],
                "successDeleteFiles": [name], "failedDeleteFiles": [], "isPartitionDeleted": False,
            }},
            "version": 2, "bootstrapPartitionMetadata": {}, "extraMetadata": None,
        }
        self.put(t, "clean", State.REQUESTED, plan)
        self.put(t, "clean", State.INFLIGHT, plan)  # 0.x copies the plan into the inflight file
        self.put(t, "clean", State.COMPLETED, write_single_record(metadata, "HoodieCleanMetadata"))

    def rollback(self, t: str, target: str, log: str) -> None:
        plan = {
            "instantToRollback": {"commitTime": target, "action": "deltacommit"},
            "RollbackRequests": [{
                "partitionPath": "files", "fileId": FILE_ID, "latestBaseInstant": INIT,
                "filesToBeDeleted": [], "logBlocksToBeDeleted": {log: 812},
            }],
            "version": 1,
        }
        metadata = {
            "startRollbackTime": t, "timeTakenInMillis": 7, "totalFilesDeleted": 0,
            "commitsRollback": [target],
            "partitionMetadata": {"files": {
                "partitionPath": "files", "successDeleteFiles": [], "failedDeleteFiles": [],
                "rollbackLogFiles": {log: 812}, "logFilesFromFailedCommit": {},
            }},
            "version": 1, "instantsRollback": [{"commitTime": target, "action": "deltacommit"}],
        }
        self.put(t, "rollback", State.REQUESTED, write_single_record(plan, "HoodieRollbackPlan"))
        self.put(t, "rollback", State.INFLIGHT, b"")
        self.put(t, "rollback", State.COMPLETED, write_single_record(metadata, "HoodieRollbackMetadata"))


def _write_mdt(root: Path, commits: list[str], rollback: str) -> tuple[list[str], list[str]]:
    """The MDT's properties and timeline (module docstring); returns (compactions, cleans)."""
    data = LocalStorage(str(root))
    props, _ = read_table_properties(data)
    props["hoodie.table.metadata.partitions"] = "files"
    (root / ".hoodie" / "hoodie.properties").write_text(properties_text(props, datetime.now(UTC)))
    mdt_props = {
        "hoodie.table.name": f"{props['hoodie.table.name']}_metadata",
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.table.version": "6",
        "hoodie.table.base.file.format": "HFILE",
        "hoodie.table.recordkey.fields": "key",
        "hoodie.table.keygenerator.class": "org.apache.hudi.metadata.HoodieTableMetadataKeyGenerator",
        "hoodie.compaction.payload.class": "org.apache.hudi.metadata.HoodieMetadataPayload",
        "hoodie.populate.meta.fields": "false",
        "hoodie.timeline.layout.version": "1",
        "hoodie.archivelog.folder": "archived",
        "hoodie.datasource.write.drop.partition.columns": "false",
        "hoodie.partition.metafile.use.base.format": "false",
        "hoodie.table.timeline.timezone": props.get("hoodie.table.timeline.timezone", "LOCAL"),
    }
    mdt_props["hoodie.table.checksum"] = str(table_checksum(mdt_props))
    meta = root / METADATA_FOLDER / ".hoodie"
    meta.mkdir(parents=True)
    (meta / "hoodie.properties").write_text(properties_text(mdt_props, datetime.now(UTC)))
    tl = MdtTimeline(meta)
    compactions: list[str] = []
    cleans: list[str] = []
    tl.deltacommit(INIT, INIT, 1)
    base, logs = INIT, [f".{FILE_ID}_{INIT}.log.1_0-1-0"]
    for j, t in enumerate(commits):
        tl.deltacommit(t, base, len(logs) + 1)
        logs.append(f".{FILE_ID}_{base}.log.{len(logs) + 1}_0-1-0")
        if j == 13:
            tl.rollback(rollback, t, f"files/{logs[-1]}")
        if j % 4 == 3:
            cleans.append(t + "002")
            tl.clean(t + "002", commits[j - 1], t, f"files/{FILE_ID}_0-1-0_{base}.hfile")
        if j in (9, 19, 29):
            compactions.append(t + "001")
            tl.compaction(t + "001", base, logs)
            base, logs = t + "001", []
    return compactions, cleans


def build(root: Path) -> V6Table:
    built = new_table(root, 6, TableType.COPY_ON_WRITE)
    write_commits(built, 14)  # c0..c13
    rollback = _plus_ms(built.commits[13])
    built.writer.clock.observe(rollback)
    write_commits(built, 11)  # c14..c24
    storage = built.storage
    pending, result = schedule_clean(
        storage, InProcessLock(storage.base_uri), CleanSettings(commits_retained=2), time_settings=FAST
    )
    assert pending is not None, result.reason
    built.writer.clock.observe(pending.requested_time)
    write_commits(built, 15)  # c25..c39
    c = built.commits
    assert c[13] < rollback < c[14] and c[24] < pending.requested_time < c[25]
    compactions, cleans = _write_mdt(root, c, rollback)
    return V6Table(root, c, pending.requested_time, rollback, compactions, cleans)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> V6Table:
    return build(tmp_path_factory.mktemp("v6mdt") / "t")


def copy_of(template: V6Table, dest: Path) -> V6Table:
    shutil.copytree(template.root, dest)
    return replace(template, root=dest)


# ---------------------------------------------------------------------------- helpers


def mdt_config(root: Path) -> tuple[LocalStorage, TableConfig]:
    storage = LocalStorage(str(root / METADATA_FOLDER))
    return storage, load_table_config(storage, metadata_table=True)


def data_config(root: Path) -> tuple[LocalStorage, TableConfig]:
    storage = LocalStorage(str(root))
    return storage, load_table_config(storage)


def completed(storage: LocalStorage, config: TableConfig) -> set[str]:
    """The completed instants, by the time their file names (all its digits)."""
    timeline = Timeline.load(storage, config)
    return {file_instant_time(timeline.state_files(i)[State.COMPLETED]) for i in timeline.completed()}


def snapshot(storage: LocalStorage, config: TableConfig) -> Files:
    """The bytes of every timeline file, by (the time the file names, file action, state)."""
    timeline = Timeline.load(storage, config)
    out: Files = {}
    for inst in timeline.instants:
        for state, path in timeline.state_files(inst).items():
            action = inst.file_action if state is State.COMPLETED else inst.action
            out[(file_instant_time(path), action.value, state)] = storage.read(path)
    return out


def planned(plan: ArchivalPlan) -> set[tuple[str, Action]]:
    return {(i.requested_time, i.action) for i in plan.instants}


def archive(root: Path, *, dry_run: bool = False) -> ArchivalResult[ArchivalPlan]:
    """The archival as ``hoodied archive`` runs it: the data table, then its MDT, one lock hold."""
    storage, config = data_config(root)
    target = mdt_archival_target(storage, config, SETTINGS)
    assert target is not None
    return execute_archival(
        storage, config, InProcessLock(storage.base_uri), archival_planner(SETTINGS),
        archival_batch_size=SETTINGS.archival_batch_size, dry_run=dry_run,
        mdt=MdtArchival(target[0], target[1], mdt_archival_planner(SETTINGS, storage, config)),
    )


_AVRO_FIELD = {
    ("clean", State.REQUESTED): "hoodieCleanerPlan",
    ("clean", State.INFLIGHT): "hoodieCleanerPlan",
    ("clean", State.COMPLETED): "hoodieCleanMetadata",
    ("compaction", State.REQUESTED): "hoodieCompactionPlan",
    ("rollback", State.COMPLETED): "hoodieRollbackMetadata",
}


def _holds(got: Any, expected: Any) -> None:
    """``got`` (an archived record part) holds ``expected`` (the timeline file's Avro record)."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and set(expected) <= set(got), (sorted(expected), got)
        for key, value in expected.items():
            _holds(got[key], value)
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            _holds(g, e)
    else:
        assert got == expected


def assert_archive(storage: LocalStorage, config: TableConfig, written: Files) -> set[str]:
    """Each record once, holding what its timeline file held; returns the archived requested times."""
    archived = ArchivedTimelineV6.load(storage, config)
    keys = [(r.requested_time, r.action, r.state) for r in archived.records]
    assert len(keys) == len(set(keys)), "an instant was archived twice"
    for r in archived.records:
        raw = written[(r.requested_time, r.action, r.state)]
        if r.action in ("commit", "deltacommit"):
            assert_commit_metadata(r.record["hoodieCommitMetadata"], raw)
        elif raw and (r.action, r.state) in _AVRO_FIELD:
            _holds(r.record[_AVRO_FIELD[(r.action, r.state)]], next(iter(fastavro.reader(io.BytesIO(raw)))))
    return {r.requested_time for r in archived.records if r.state is State.COMPLETED}


# ---------------------------------------------------------------------------- archival as Hudi 0.15 does it


def test_mdt_archive_holds_what_hudi_0_15_moves(template: V6Table, tmp_path: Path) -> None:
    t = copy_of(template, tmp_path / "t")
    c = t.commits
    storage, config = mdt_config(t.root)
    before = Timeline.load(storage, config)
    written = snapshot(storage, config)
    data_before = completed(*data_config(t.root))
    rows = hudi_rs(t.root)
    as_of = {x: hudi_rs(t.root, x) for x in (c[30], c[35], c[39])}
    assert completed(storage, config) == t.mdt_completed

    result = archive(t.root)

    # the data table first: requested before the MDT's latest compaction c29 + 001
    assert [i.requested_time for i in result.plan.instants] == c[:30]
    assert result.plan.stop.reason is StopReason.MDT_COMPACTION
    assert completed(*data_config(t.root)) == data_before - set(c[:30])
    # then its MDT: the expected set (module docstring), stopped by the data table's pending clean
    mdt = result.mdt
    assert mdt is not None and mdt.layer == ".commits_.archive.1_1-0-1"
    assert planned(mdt.plan) == t.expected_mdt_plan and len(mdt.plan.instants) == len(t.expected_mdt_plan)
    assert mdt.plan.stop.reason is StopReason.DATA_TABLE_TIMELINE
    assert mdt.plan.stop.instant == t.pending_clean
    assert (mdt.plan.min_to_keep, mdt.plan.max_to_keep) == (5, 8)
    reasons = {(b.reason, b.instant) for b in mdt.plan.boundaries}
    assert (StopReason.COMPACTION_DELTA_COMMITS, c[30]) in reasons
    assert all(i.requested_time < t.pending_clean for i in mdt.plan.instants)
    assert completed(storage, config) == t.mdt_completed - t.expected_mdt_archived
    assert sorted(p.name for p in (t.root / ARCHIVE).iterdir()) == [mdt.layer]
    # every timeline file of the archived instants is gone, and only those
    left = snapshot(storage, config)
    assert set(left) == {k for k in written if k[0] not in t.expected_mdt_archived}

    # one record per timeline file, 10 a block, SCHEMA the only header; each holds its file
    blocks = list(read_log_blocks(storage, f".hoodie/archived/{mdt.layer}"))
    count = sum(1 for k in written if k[0] in t.expected_mdt_archived)
    assert count == 26 * 3 + 2 * 3 + 5 * 3
    assert [len(block_records(b.content())) for b in blocks] == [10] * (count // 10) + [count % 10]
    assert all(dict(b.header) == {HeaderKey.SCHEMA: archived_meta_schema_json()} for b in blocks)
    assert assert_archive(storage, config, written) == t.expected_mdt_archived
    archived = ArchivedTimelineV6.load(storage, config)
    assert {(r.requested_time, r.action, r.state) for r in archived.records} == {
        k for k in written if k[0] in t.expected_mdt_archived
    }
    assert {(i.requested_time, i.action) for i in archived.instants()} == {
        (file_instant_time(before.state_files(i)[State.COMPLETED]), i.action) for i in before.completed()
        if file_instant_time(before.state_files(i)[State.COMPLETED]) in t.expected_mdt_archived
    }
    assert len(archived.instants()) == len(t.expected_mdt_archived)
    assert {i.action for i in archived.instants()} == {Action.DELTA_COMMIT, Action.COMPACTION, Action.CLEAN}
    hudi = hudi_entry_schema()  # Hudi's reader resolves each record against its own schema
    writer_schema = fastavro.parse_schema(json.loads(archived_meta_schema_json()))
    for b in blocks:
        for raw in block_records(b.content()):
            assert isinstance(fastavro.schemaless_reader(io.BytesIO(raw), writer_schema, hudi), dict)

    # the data rows are the same, now and as of retained instants
    assert hudi_rs(t.root) == rows
    for x, expected in as_of.items():
        assert hudi_rs(t.root, x) == expected, x
    # re-runs find nothing more on either table and write nothing
    again = archive(t.root)
    assert again.plan.instants == [] and again.mdt is not None and again.mdt.plan.instants == []
    assert again.layer is None and again.mdt.layer is None and not again.mdt.recovered
    assert sorted(p.name for p in (t.root / ARCHIVE).iterdir()) == [mdt.layer]


def test_mdt_waits_for_the_data_tables_pending_instant(template: V6Table, tmp_path: Path) -> None:
    """Once P completes, the next archival moves the MDT up to the data table's first commit c30."""
    t = copy_of(template, tmp_path / "t")
    archive(t.root)
    # complete the data table's clean P as a 0.15 writer does: its MDT delta commit at P, then the
    # clean (hoodied's cleaner writes MDTs of versions 8 and 9 only, so it runs on the data table
    # alone and the delta commit is written here)
    MdtTimeline(t.root / METADATA_FOLDER / ".hoodie").deltacommit(t.pending_clean, t.compactions[-1], 11)
    props_file = t.root / ".hoodie" / "hoodie.properties"
    with_mdt = props_file.read_text()
    storage, _ = data_config(t.root)
    props, _ = read_table_properties(storage)
    del props["hoodie.table.metadata.partitions"]
    props_file.write_text(properties_text(props, datetime.now(UTC)))
    aside = tmp_path / "mdt-aside"
    (t.root / METADATA_FOLDER).rename(aside)
    execute_clean(storage, load_table_config(storage), InProcessLock(storage.base_uri), t.pending_clean,
                  time_settings=FAST)
    aside.rename(t.root / METADATA_FOLDER)
    props_file.write_text(with_mdt)

    result = archive(t.root)
    mdt = result.mdt
    assert mdt is not None
    # the data table: its 10 commits c30..c39 > 8, but the MDT compaction c29 + 001 holds them;
    # its clean is one of one. The MDT: 17 commits (P, c25..c39, c29 + 001) > 8; the compaction
    # trigger keeps c30 on, and the data-table boundary is now c30 as well: P, c25..c29 and
    # c29 + 001 go; the 5 cleans left stay (5 <= 8)
    assert result.plan.instants == []
    c = t.commits
    assert planned(mdt.plan) == {
        (t.pending_clean, Action.DELTA_COMMIT),
        *((x, Action.DELTA_COMMIT) for x in c[25:30]),
        (c[29], Action.COMPACTION),
    }
    assert mdt.layer == ".commits_.archive.2_1-0-1"
    boundary = next(b for b in mdt.plan.boundaries if b.reason is StopReason.DATA_TABLE_TIMELINE)
    assert boundary.instant == c[30]


def test_cli_dry_run_shows_the_mdt_boundary(template: V6Table, tmp_path: Path) -> None:
    t = copy_of(template, tmp_path / "t")
    storage, config = mdt_config(t.root)
    files = sorted(p.name for p in (t.root / METADATA_FOLDER / ".hoodie").iterdir())
    opts = [a for k, v in OPTIONS.items() for a in ("-o", f"{k}={v}")]
    run = CliRunner().invoke
    dry = run(cli, ["archive", str(t.root), *opts, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    head, mdt_part = dry.output.split("\nmetadata table: ", 1)
    assert head.startswith("dry run: 30 instants to archive")
    assert mdt_part.startswith(f"dry run: {len(t.expected_mdt_archived)} instants to archive")
    assert f"stops at data-table-active-timeline at {t.pending_clean}" in mdt_part
    assert f"boundary data-table-active-timeline at {t.pending_clean}: data-table clean" in mdt_part
    assert sorted(p.name for p in (t.root / METADATA_FOLDER / ".hoodie").iterdir()) == files
    as_json = json.loads(run(cli, ["archive", str(t.root), *opts, "--dry-run", "--json"]).output)
    assert as_json["metadata_table"]["stops_at"] == {
        "reason": "data-table-active-timeline", "instant": t.pending_clean,
        "detail": f"data-table clean {t.pending_clean} (pending) and later stay",
    }
    done = run(cli, ["archive", str(t.root), *opts])
    assert done.exit_code == 0, done.output
    assert "metadata table: " in done.output and "wrote .commits_.archive.1_1-0-1" in done.output
    assert completed(storage, config) == t.mdt_completed - t.expected_mdt_archived


# ---------------------------------------------------------------------------- kill -9

DRIVER = """
import sys
from hoodied.executors.archival import MdtArchival, execute_archival
from hoodied.hoodie.avro.container import write_single_record
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.planners.archival import (ArchivalSettings, archival_planner, mdt_archival_planner,
                                       mdt_archival_target)
storage = LocalStorage(sys.argv[1])
config = load_table_config(storage)
settings = ArchivalSettings.from_options(dict(a.split("=", 1) for a in sys.argv[2:]))
target = mdt_archival_target(storage, config, settings)
mdt = MdtArchival(target[0], target[1], mdt_archival_planner(settings, storage, config))
execute_archival(storage, config, InProcessLock(storage.base_uri), archival_planner(settings), mdt=mdt)
"""


def _consistent(t: V6Table, written: Files) -> None:
    """Every MDT instant is on its active timeline or in its archive (once, with its bytes)."""
    storage, config = mdt_config(t.root)
    assert completed(storage, config) | assert_archive(storage, config, written) == t.mdt_completed


@pytest.mark.parametrize("point", PAUSE_POINTS_MDT_V6)
def test_kill_9_at_every_mdt_crash_point_converges(template: V6Table, tmp_path: Path, point: str) -> None:
    t = copy_of(template, tmp_path / "t")
    written = snapshot(*mdt_config(t.root))
    rows: Counter[Any] = hudi_rs(t.root)
    args = [str(t.root), *(f"{k}={v}" for k, v in OPTIONS.items())]
    proc = start_paused(DRIVER, args, point, tmp_path / "ready")
    kill_group(proc)

    # the data table's archival was done; the MDT is consistent and the data readable
    assert completed(*data_config(t.root)) == set(t.commits[30:])
    _consistent(t, written)
    assert hudi_rs(t.root) == rows
    # a re-run finishes the MDT's deletions and converges on the uninterrupted result
    result = archive(t.root)
    assert result.plan.instants == [] and result.layer is None
    mdt = result.mdt
    assert mdt is not None and mdt.layer is None and mdt.plan.instants == []
    # every crash point comes after the archive file: until the last completed file is gone, some
    # archived instant is still active and the re-run finishes its deletion
    assert bool(mdt.recovered) == (point != "mdt-archive-active-deleted")
    _consistent(t, written)
    storage, config = mdt_config(t.root)
    assert completed(storage, config) == t.mdt_completed - t.expected_mdt_archived
    assert set(snapshot(storage, config)) == {k for k in written if k[0] not in t.expected_mdt_archived}
    assert sorted(p.name for p in (t.root / ARCHIVE).iterdir()) == [".commits_.archive.1_1-0-1"]
    assert hudi_rs(t.root) == rows
    again = archive(t.root)
    assert again.mdt is not None and again.mdt.plan.instants == [] and not again.mdt.recovered


# ---------------------------------------------------------------------------- the daemon


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_file())


def _records(root: Path, *, mdt: bool = False) -> list[tuple[str, str, State]]:
    storage, config = mdt_config(root) if mdt else data_config(root)
    records = ArchivedTimelineV6.load(storage, config).records
    return sorted((r.requested_time, r.action, r.state) for r in records)


def test_daemon_archives_data_and_mdt_as_the_command_does(template: V6Table, tmp_path: Path) -> None:
    """``hoodied run --once`` with ``services.archival`` on, beside a twin archived by ``hoodied
    archive`` with the same keys: the same timelines and archives, data table and MDT.

    Without the pending clean P (its requested file removed: the daemon would execute it first,
    and hoodied cleans tables with a metadata table of versions 8 and 9 only)."""
    from tests.service.daemon.test_daemon_archival import archive_twin, policy, run_once, settings_file

    t = copy_of(template, tmp_path / "t")
    (t.root / ".hoodie" / f"{t.pending_clean}.clean.requested").unlink()
    twin = Path(shutil.copytree(t.root, tmp_path / "twin"))
    rows = hudi_rs(t.root)

    code, ended, err = run_once(settings_file(tmp_path / "hoodied.yaml", [t.root], policy(enabled=True)))
    assert code == 0, err[-3000:]
    # one archival moves what there is; 10 data commits (> 8) stay behind the MDT compaction, so
    # the trigger fires again and finds nothing due
    outcomes = [(e["kind"], e["action"], e["outcome"]) for e in ended]
    assert outcomes[0] == ("plan", "archival", "success")
    assert set(outcomes[1:]) <= {("plan", "archival", "nothing_due")}
    document = archive_twin(twin)
    assert document["archived"] and document["metadata_table"]["archived"]
    # without P the data table's first commit c30 is the MDT's boundary, as the compaction trigger's
    assert document["metadata_table"]["stops_at"]["instant"] == t.commits[30]
    for sub in (".hoodie", f"{METADATA_FOLDER}/.hoodie"):
        assert _files(t.root / sub) == _files(twin / sub), sub
        archives = _files(t.root / sub / "archived")
        assert archives == _files(twin / sub / "archived") == [".commits_.archive.1_1-0-1"]
    assert _records(t.root) == _records(twin)
    assert _records(t.root, mdt=True) == _records(twin, mdt=True)
    assert hudi_rs(t.root) == rows

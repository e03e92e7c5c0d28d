"""Archival of the active timeline into the LSM history, on real tables of versions 8 and 9.

Tables are written by ``hoodie.demo.writer`` (80 commits or delta commits), with a real clean
(COW), a savepoint, and a pending compaction (MOR). After archival the active timeline must hold
exactly what Hudi's ``TimelineArchiverV2`` keeps (the expected counts are derived below from
Hudi's rules), the history every archived instant with identical bytes (read back by
``History``), and hudi-rs must read the same rows, now and as of every retained instant.
Crash tests kill a real process with SIGKILL at every crash point and re-run.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import hudi
import obstore
import pyarrow as pa
import pytest
from click.testing import CliRunner
from obstore.store import S3Store

from hoodied.executors.archival import PAUSE_POINTS, PAUSE_POINTS_V6, ArchivalResult, execute_archival
from hoodied.executors.clean import execute_clean
from hoodied.hoodie.demo.writer import TableSpec, TableWriter, create_table
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log.frame import HeaderKey, read_log_blocks
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.archived_v6 import ArchivedTimelineV6, archived_meta_schema_json
from hoodied.hoodie.timeline.history import History, HistoryFileName, read_manifest
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.archival import ArchivalPlan, ArchivalSettings, StopReason, archival_planner
from hoodied.planners.clean import CleanSettings, schedule_clean
from hoodied.planners.compaction import CompactionSettings, schedule_compaction
from hoodied.service.cli.main import cli
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.mor_tables import multiset
from tests.helpers.object_servers import MotoServer, moto_server, s3_env  # noqa: F401  (fixtures)
from tests.hoodie.timeline.test_archived_v6 import assert_commit_metadata, block_records, hudi_entry_schema

FAST = TimeSettings(max_expected_clock_skew_ms=5)
SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.float64())])
CITIES = ("sf", "ny", "la")


# ---------------------------------------------------------------------------- tables


@dataclass
class Built:
    root: Path
    writer: TableWriter
    commits: list[str]
    clean: str | None = None
    savepoint: str | None = None
    compaction: str | None = None

    @property
    def storage(self) -> LocalStorage:
        return LocalStorage(str(self.root))


def _batch(n: int) -> pa.Table:
    rows = []
    for i in range(8):
        key = (n * 5 + i) % 60
        rows.append({"id": f"k{key:03d}", "ts": n, "city": CITIES[key % 3], "v": float(n)})
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def write_commits(built: Built, count: int) -> None:
    start = len(built.commits)
    for n in range(start, start + count):
        built.commits.append(built.writer.upsert(_batch(n)).instant_time)


def _observe(built: Built, inst: Instant) -> None:
    built.writer.clock.observe(inst.requested_time)
    if inst.completion_time:
        built.writer.clock.observe(inst.completion_time)


def add_clean(built: Built) -> str:
    storage = built.storage
    lock = InProcessLock(storage.base_uri)
    inst, result = schedule_clean(storage, lock, CleanSettings(commits_retained=2), time_settings=FAST)
    assert inst is not None, result.reason
    done = execute_clean(storage, load_table_config(storage), lock, inst.requested_time, time_settings=FAST)
    _observe(built, done.instant)
    return inst.requested_time


def add_savepoint(built: Built, commit: str) -> None:
    """A completed savepoint of ``commit`` (Hudi names it after the savepointed commit)."""
    storage = built.storage
    config = load_table_config(storage)
    lock = InProcessLock(storage.base_uri)
    metadata = {
        "savepointedBy": "test",
        "savepointedAt": 0,
        "comments": "",
        "partitionMetadata": {},
        "version": 1,
    }
    with lock:
        writer = TimelineWriter(storage, config, lock, time_settings=FAST)
        writer.transition_to_inflight(commit, Action.SAVEPOINT)
        done = writer.complete(commit, Action.SAVEPOINT, metadata)
    _observe(built, done)
    built.savepoint = commit


def add_pending_compaction(built: Built) -> str:
    storage = built.storage
    lock = InProcessLock(storage.base_uri)
    inst, result = schedule_compaction(
        storage, lock, CompactionSettings(max_delta_commits=1), time_settings=FAST
    )
    assert inst is not None, result.reason
    _observe(built, inst)
    return inst.requested_time


def new_table(root: Path, version: int, table_type: TableType) -> Built:
    spec = TableSpec("trips", SCHEMA, "id", "city", "ts", table_type, version)
    writer = create_table(LocalStorage(str(root)), spec, max_file_rows=20)
    return Built(root, writer, [])


def build_table(root: Path, version: int, table_type: TableType) -> Built:
    """80 writes; COW: a clean after the 10th; a savepoint of the 71st; MOR: a pending compaction last."""
    built = new_table(root, version, table_type)
    write_commits(built, 10)
    if table_type is TableType.COPY_ON_WRITE:
        built.clean = add_clean(built)
    write_commits(built, 70)
    add_savepoint(built, built.commits[70])
    if table_type is TableType.MERGE_ON_READ:
        built.compaction = add_pending_compaction(built)
    return built


# ---------------------------------------------------------------------------- readers


def hudi_rs(root: Path, as_of: str | None = None) -> Counter[Any]:
    options = hudi.HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    batches = hudi.HudiTableBuilder.from_base_uri(str(root)).build().read(options)
    return multiset(pa.Table.from_batches(batches)) if batches else Counter()


def timeline_files(root: Path) -> list[str]:
    folder = root / ".hoodie" / "timeline"
    return sorted(p.name for p in folder.iterdir() if p.is_file())


def instant_bytes(root: Path) -> dict[str, tuple[str, bytes | None, bytes | None]]:
    """(completed action, completed bytes, plan bytes as Hudi archives them) of every completed instant."""
    storage = LocalStorage(str(root))
    timeline = Timeline.load(storage, load_table_config(storage))
    out: dict[str, tuple[str, bytes | None, bytes | None]] = {}
    for inst in timeline.completed():
        files = {s: (root / p).read_bytes() for s, p in timeline.state_files(inst).items()}
        plan = None
        if inst.action in (Action.CLEAN, Action.COMPACTION, Action.LOG_COMPACTION):
            plan = files.get(State.REQUESTED) or None
        elif inst.action in (Action.REPLACE_COMMIT, Action.CLUSTERING):
            plan = files.get(State.INFLIGHT) or files.get(State.REQUESTED) or None
        out[inst.requested_time] = (inst.file_action.value, files[State.COMPLETED] or None, plan)
    return out


def history_of(root: Path) -> History:
    storage = LocalStorage(str(root))
    return History.load(storage, load_table_config(storage))


def assert_history_holds(root: Path, expected: dict[str, tuple[str, bytes | None, bytes | None]]) -> None:
    history = history_of(root)
    for t, (action, metadata, plan) in expected.items():
        entry = history.get(t)
        assert entry is not None, f"{t} is not in the history"
        assert entry.instant.file_action.value == action
        assert history.metadata_bytes(t) == metadata, t
        assert history.plan_bytes(t) == plan, t


def archive(root: Path, *, dry_run: bool = False, **options: Any) -> ArchivalResult[ArchivalPlan]:
    """The archival as the service layer runs it: ``plan_archival`` under the executor's lock."""
    storage = LocalStorage(str(root))
    settings = ArchivalSettings(**options)
    return execute_archival(
        storage,
        load_table_config(storage),
        InProcessLock(storage.base_uri),
        archival_planner(settings),
        compaction_batch_size=settings.compaction_batch_size,
        archival_batch_size=settings.archival_batch_size,
        dry_run=dry_run,
    )


# ---------------------------------------------------------------------------- archival as Hudi does it

CASES = [
    (8, TableType.COPY_ON_WRITE),
    (8, TableType.MERGE_ON_READ),
    (9, TableType.COPY_ON_WRITE),
    (9, TableType.MERGE_ON_READ),
]


@pytest.mark.parametrize("version,table_type", CASES, ids=[f"v{v}-{t.value}" for v, t in CASES])
def test_archival_keeps_what_hudi_keeps(tmp_path: Path, version: int, table_type: TableType) -> None:
    built = build_table(tmp_path / "t", version, table_type)
    root = built.root
    before_bytes = instant_bytes(root)
    before_rows = hudi_rs(root)
    retained = built.commits[60:]
    as_of_before = {t: hudi_rs(root, t) for t in retained}

    result = archive(root)

    # Hudi's rules with the defaults (keep.min 20, keep.max 30, clean.commits.retained 10):
    # 80 completed commits > 30, so archive 80 - 20 = 60 commits; no boundary comes earlier: the
    # cleaner's ECTR leaves 9 commits after it (9 + 2 < 20), the savepoint is on commit 71, the
    # pending compaction comes after the last commit, the compaction trigger (5 delta commits)
    # keeps the last 5. The completed clean (requested before the 60th commit) goes with them.
    archived_commits = built.commits[:60]
    expected_archived = archived_commits + ([built.clean] if built.clean else [])
    assert [i.requested_time for i in result.plan.instants] == sorted(expected_archived)
    assert result.plan.stop.reason is StopReason.MIN_COMMITS_TO_KEEP
    assert result.plan.stop.instant == built.commits[60]

    # the active timeline: 20 commits (3 files each), the savepoint (inflight + completed) and,
    # for MOR, the requested compaction
    files = timeline_files(root)
    expected_files = 20 * 3 + 2 + (1 if built.compaction else 0)
    assert len(files) == expected_files, files
    storage = built.storage
    active = Timeline.load(storage, load_table_config(storage))
    assert [i.requested_time for i in active.completed(WRITE_ONLY)] == retained
    assert [i.requested_time for i in active.completed([Action.SAVEPOINT])] == [built.savepoint]
    assert active.completed([Action.CLEAN]) == []
    if built.compaction:
        assert [i.requested_time for i in active.pending()] == [built.compaction]

    # the history: exactly the archived instants, bytes unchanged, in one level-0 file
    history = history_of(root)
    assert sorted(e.instant.requested_time for e in history.entries) == sorted(expected_archived)
    assert_history_holds(root, {t: before_bytes[t] for t in expected_archived})
    assert result.layer == HistoryFileName(min(expected_archived), max(expected_archived), 0).format()
    merged = Timeline.load(storage, load_table_config(storage), include_history=True)
    assert {i.requested_time for i in merged.completed()} == set(before_bytes)

    # the independent reader sees the same rows, now and as of every retained instant
    assert hudi_rs(root) == before_rows
    for t in retained:
        assert hudi_rs(root, t) == as_of_before[t], t

    # nothing more is due: a re-run archives nothing
    again = archive(root)
    assert again.plan.instants == [] and again.plan.stop.reason is StopReason.NOT_ENOUGH_COMMITS


WRITE_ONLY = (Action.COMMIT, Action.DELTA_COMMIT)


def test_later_archivals_add_layers_and_compact_them(tmp_path: Path) -> None:
    """With hoodie.timeline.compaction.batch.size=2, two L0 layers become one L1 file, two L1 one L2."""
    built = new_table(tmp_path / "t", 9, TableType.COPY_ON_WRITE)
    options: dict[str, Any] = {
        "min_commits": 5,
        "max_commits": 8,
        "compaction_batch_size": 2,
        "clean_commits_retained": 1,
    }
    history_path = built.root / ".hoodie" / "timeline" / "history"
    expected: dict[str, tuple[str, bytes | None, bytes | None]] = {}
    layers: list[list[str]] = []
    for round_ in range(4):
        write_commits(built, 10)
        snapshot = instant_bytes(built.root)
        result = archive(built.root, **options)
        # 10 (then 15) completed commits > keep.max 8: all but keep.min 5 go
        assert len(result.plan.instants) == (5 if round_ == 0 else 10)
        expected.update({i.requested_time: snapshot[i.requested_time] for i in result.plan.instants})
        storage = built.storage
        config = load_table_config(storage)
        version = int((history_path / "_version_").read_text())
        listed = [n for n, _ in read_manifest(storage, config.history_path, version)]
        layers.append(sorted(listed))
        assert_history_holds(built.root, expected)
    levels = [sorted(HistoryFileName.parse(n).level for n in files) for files in layers]  # type: ignore[union-attr]
    assert levels == [[0], [1], [0, 1], [2]]
    # the L2 file spans every archived instant
    top = HistoryFileName.parse(layers[-1][0])
    assert top is not None and (top.min_instant, top.max_instant) == (min(expected), max(expected))
    # snapshots: round 1 -> v1; round 2 -> v2 (new layer), v3 (L1); round 3 -> v4; round 4 -> v5, v6
    # (L1), v7 (L2). Cleaning keeps 3 + (levels compacted in that run) snapshots: round 3 drops
    # manifest_1, round 4 (two levels) manifest_2; files no kept manifest lists go with them
    names = sorted(p.name for p in history_path.iterdir())
    manifests = [n for n in names if n.startswith("manifest_")]
    assert manifests == ["manifest_3", "manifest_4", "manifest_5", "manifest_6", "manifest_7"]
    parquet = [n for n in names if n.endswith(".parquet")]
    assert {HistoryFileName.parse(n).level for n in parquet} == {0, 1, 2}  # type: ignore[union-attr]
    assert len(history_of(built.root).entries) == 35


# ---------------------------------------------------------------------------- the command


def test_cli_dry_run_then_archive(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 8, TableType.MERGE_ON_READ)
    write_commits(built, 12)
    before = timeline_files(built.root)
    opts = [
        "-o",
        "hoodie.keep.min.commits=3",
        "-o",
        "hoodie.keep.max.commits=4",
        "-o",
        "hoodie.clean.commits.retained=1",
        "-o",
        "hoodie.compact.inline.max.delta.commits=4",
    ]
    run = CliRunner().invoke
    dry = run(cli, ["archive", str(built.root), *opts, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    # MOR, no compaction yet: the compaction trigger keeps the last 4 delta commits (12 - 4 = 8
    # archived, fewer than 12 - 3 = 9 allowed by keep.min)
    assert dry.output.startswith("dry run: 8 instants to archive")
    assert f"stops at compaction-delta-commits at {built.commits[8]}" in dry.output
    assert f"  {built.commits[0]} deltacommit" in dry.output
    assert timeline_files(built.root) == before
    done = run(cli, ["archive", str(built.root), *opts])
    assert done.exit_code == 0, done.output
    assert "8 instants to archive" in done.output and "deleted 24 timeline files" in done.output
    assert len(timeline_files(built.root)) == 4 * 3
    bad = run(cli, ["archive", str(built.root), "-o", "hoodie.keep.max.commits=x"])
    assert bad.exit_code == 2 and "hoodie.keep.max.commits=x" in bad.output


def test_inspect_reports_what_archival_would_do(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 8, TableType.COPY_ON_WRITE)
    write_commits(built, 35)
    root = str(built.root)
    run = CliRunner().invoke
    dry = run(cli, ["archive", root, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    moved = re.match(r"dry run: (\d+) instants to archive", dry.output)
    assert moved is not None, dry.output
    report = run(cli, ["inspect", root, "--json"])
    assert report.exit_code == 0, report.output
    arch = json.loads(report.output)["archival"]
    assert arch["instants_to_archive"] == int(moved.group(1)) > 0
    assert arch["keep"] == [20, 30] and f"stops at {arch['reason']} at {arch['stops_at']}" in dry.output
    text = run(cli, ["inspect", root])
    assert f"archival       {moved.group(1)} of {arch['active_instants']} active instants" in text.output
    assert run(cli, ["archive", root]).exit_code == 0
    after = json.loads(run(cli, ["inspect", root, "--json"]).output)["archival"]
    assert after["instants_to_archive"] == 0 and after["active_instants"] < arch["active_instants"]


# ---------------------------------------------------------------------------- kill -9

DRIVER = """
import sys
from hoodied.executors.archival import execute_archival
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.storage_factory import storage_for
from hoodied.planners.archival import ArchivalSettings, archival_planner
storage = LocalStorage(sys.argv[1])
settings = ArchivalSettings.from_options(dict(a.split("=", 1) for a in sys.argv[2:]))
execute_archival(storage, load_table_config(storage), InProcessLock(storage.base_uri),
                 archival_planner(settings), compaction_batch_size=settings.compaction_batch_size)
"""
CRASH_OPTIONS = {
    "hoodie.keep.min.commits": "5",
    "hoodie.keep.max.commits": "8",
    "hoodie.timeline.compaction.batch.size": "2",
    "hoodie.clean.commits.retained": "1",
}
SETTINGS: dict[str, Any] = {
    "min_commits": 5,
    "max_commits": 8,
    "compaction_batch_size": 2,
    "clean_commits_retained": 1,
}


def _consistent(root: Path, written: dict[str, tuple[str, bytes | None, bytes | None]]) -> None:
    """Every instant is on the active timeline or in the history (with its bytes); readers work."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    active = {i.requested_time for i in Timeline.load(storage, config).completed()}
    history = history_of(root)
    in_history = {e.instant.requested_time for e in history.entries}
    assert active | in_history == set(written)
    assert_history_holds(root, {t: written[t] for t in in_history})
    version = int((root / ".hoodie/timeline/history/_version_").read_text())
    for name, size in read_manifest(storage, config.history_path, version):
        assert (root / ".hoodie/timeline/history" / name).stat().st_size == size


@pytest.mark.parametrize("point", PAUSE_POINTS)
def test_kill_9_at_every_crash_point_converges(tmp_path: Path, point: str) -> None:
    built = new_table(tmp_path / "t", 9, TableType.MERGE_ON_READ)
    # the cleaning of old snapshots happens once there are more than 3 (+ levels) versions
    prior_runs = 3 if point == "archive-clean-manifests-deleted" else 1
    written: dict[str, tuple[str, bytes | None, bytes | None]] = {}
    for _ in range(prior_runs):
        write_commits(built, 10)
        written.update(instant_bytes(built.root))
        archive(built.root, **SETTINGS, compaction_max_delta_commits=1)
    write_commits(built, 10)
    written.update(instant_bytes(built.root))
    rows = hudi_rs(built.root)
    args = [
        str(built.root),
        *(f"{k}={v}" for k, v in CRASH_OPTIONS.items()),
        "hoodie.compact.inline.max.delta.commits=1",
    ]
    proc = start_paused(DRIVER, args, point, tmp_path / "ready")
    kill_group(proc)

    # the state the crash left is consistent and readable
    _consistent(built.root, written)
    assert hudi_rs(built.root) == rows

    # a re-run converges on what an uninterrupted run leaves
    archive(built.root, **SETTINGS, compaction_max_delta_commits=1)
    _consistent(built.root, written)
    active = Timeline.load(built.storage, load_table_config(built.storage))
    assert [i.requested_time for i in active.completed()] == built.commits[-5:]
    assert len(timeline_files(built.root)) == 5 * 3
    assert hudi_rs(built.root) == rows
    again = archive(built.root, **SETTINGS, compaction_max_delta_commits=1)
    assert again.plan.instants == [] and not again.recovered


def test_interrupted_deletion_is_finished_by_the_next_run(tmp_path: Path) -> None:
    """Completed files left behind (their instant already in the history) are deleted first."""
    built = new_table(tmp_path / "t", 8, TableType.COPY_ON_WRITE)
    write_commits(built, 15)
    written = instant_bytes(built.root)
    archive(built.root, **SETTINGS)
    # put back the completed file of an archived instant, as a crash before its deletion leaves it
    storage = built.storage
    config = load_table_config(storage)
    t = built.commits[3]
    history = History.load(storage, config)
    completion = history.entries[3].instant.completion_time
    name = f"{t}_{completion}.commit"
    (built.root / ".hoodie/timeline" / name).write_bytes(written[t][1] or b"")
    assert Timeline.load(storage, config).get(t) is not None
    result = archive(built.root, **SETTINGS)
    assert result.recovered == [t]
    assert Timeline.load(storage, config).get(t) is None
    _consistent(built.root, written)


def test_copy_is_untouched_by_dry_run(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 9, TableType.COPY_ON_WRITE)
    write_commits(built, 12)
    copy = tmp_path / "copy"
    shutil.copytree(built.root, copy)
    result = archive(built.root, dry_run=True, **SETTINGS)
    assert len(result.plan.instants) == 7
    assert timeline_files(built.root) == timeline_files(copy)
    assert sorted(p.name for p in (built.root / ".hoodie/timeline/history").iterdir()) == []


# ---------------------------------------------------------------------------- table version 6

ARCHIVED = ".hoodie/archived"


def v6_timeline_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / ".hoodie").iterdir() if p.is_file() and p.name[0].isdigit())


def v6_snapshot(root: Path) -> dict[tuple[str, str, State], bytes]:
    """The bytes of every timeline file, by (requested time, file action, state)."""
    storage = LocalStorage(str(root))
    timeline = Timeline.load(storage, load_table_config(storage))
    out: dict[tuple[str, str, State], bytes] = {}
    for inst in timeline.instants:
        for state, path in timeline.state_files(inst).items():
            action = inst.file_action if state is State.COMPLETED else inst.action
            out[(inst.requested_time, action.value, state)] = (root / path).read_bytes()
    return out


def v6_archive(root: Path) -> ArchivedTimelineV6:
    storage = LocalStorage(str(root))
    return ArchivedTimelineV6.load(storage, load_table_config(storage))


def assert_v6_records(root: Path, written: dict[tuple[str, str, State], bytes]) -> set[str]:
    """Each record once, holding what its timeline file held; returns the archived requested times."""
    records = v6_archive(root).records
    keys = [(r.requested_time, r.action, r.state) for r in records]
    assert len(keys) == len(set(keys)), "an instant was archived twice"
    for r in records:
        raw = written[(r.requested_time, r.action, r.state)]
        if r.action in ("commit", "deltacommit"):
            assert_commit_metadata(r.record["hoodieCommitMetadata"], raw)
    return {r.requested_time for r in records if r.state is State.COMPLETED}


@pytest.mark.parametrize("table_type", [TableType.COPY_ON_WRITE, TableType.MERGE_ON_READ], ids=["cow", "mor"])
def test_v6_archival_keeps_what_hudi_0_15_keeps(tmp_path: Path, table_type: TableType) -> None:
    built = build_table(tmp_path / "t", 6, table_type)
    root = built.root
    storage = built.storage
    before = Timeline.load(storage, load_table_config(storage))
    written = v6_snapshot(root)
    rows = hudi_rs(root)
    retained = built.commits[60:]
    as_of_before = {t: hudi_rs(root, t) for t in retained[::5]}

    result = archive(root)

    # Hudi 0.15's rules with the defaults: 80 completed commits > keep.max 30, so 80 - 20 = 60 go;
    # no boundary comes earlier (as for version 9 above). Unlike 1.x, the clean stays: 0.x
    # archives cleans on their own, only once there are more than keep.max (30) of them.
    assert [i.requested_time for i in result.plan.instants] == built.commits[:60]
    assert result.plan.stop.reason is StopReason.MIN_COMMITS_TO_KEEP
    assert result.plan.stop.instant == built.commits[60]
    assert result.layer == ".commits_.archive.1_1-0-1"
    assert sorted(p.name for p in (root / ARCHIVED).iterdir()) == [result.layer]
    clean_files = 3 if built.clean else 0
    expected_files = 20 * 3 + 2 + clean_files + (1 if built.compaction else 0)
    assert len(v6_timeline_files(root)) == expected_files
    active = Timeline.load(storage, load_table_config(storage))
    assert [i.requested_time for i in active.completed(WRITE_ONLY)] == retained
    assert [i.requested_time for i in active.completed([Action.CLEAN])] == (
        [built.clean] if built.clean else []
    )

    # one record per timeline file (requested, inflight, completed) of the 60 commits, 10 a block,
    # SCHEMA the only header; each holds its file's metadata; the completed one its completion time
    blocks = list(read_log_blocks(storage, f"{ARCHIVED}/{result.layer}"))
    assert [len(block_records(b.content())) for b in blocks] == [10] * 18
    assert all(dict(b.header) == {HeaderKey.SCHEMA: archived_meta_schema_json()} for b in blocks)
    hudi_schema = hudi_entry_schema()  # Hudi's reader resolves each record against its own schema
    writer_schema = fastavro.parse_schema(json.loads(archived_meta_schema_json()))
    resolved: list[tuple[str, str]] = []
    for b in blocks:
        for raw in block_records(b.content()):
            entry = fastavro.schemaless_reader(io.BytesIO(raw), writer_schema, hudi_schema)
            assert isinstance(entry, dict)
            resolved.append((entry["commitTime"], entry["actionState"]))
    assert sorted(resolved) == sorted((t, s.name) for t in built.commits[:60] for s in State)
    assert assert_v6_records(root, written) == set(built.commits[:60])
    archived = v6_archive(root)
    assert archived.instants() == [i for i in before.completed() if i.requested_time in built.commits[:60]]
    assert {(r.requested_time, r.action, r.state) for r in archived.records} == {
        k for k in written if k[0] in built.commits[:60]
    }

    # the independent reader sees the same rows, now and as of retained instants
    assert hudi_rs(root) == rows
    for t, expected in as_of_before.items():
        assert hudi_rs(root, t) == expected, t
    again = archive(root)
    assert again.plan.instants == [] and again.plan.stop.reason is StopReason.NOT_ENOUGH_COMMITS
    assert again.layer is None and sorted(p.name for p in (root / ARCHIVED).iterdir()) == [result.layer]


def _stats(metadata: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        p: sorted((s["fileId"], s["path"], s["numWrites"], s["fileSizeInBytes"]) for s in stats)
        for p, stats in (metadata.get("partitionToWriteStats") or {}).items()
    }


def test_v6_history_reads_what_was_archived(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 6, TableType.COPY_ON_WRITE)
    cleans = []
    for _ in range(5):
        write_commits(built, 5)
        cleans.append(add_clean(built))
    write_commits(built, 5)
    storage = built.storage
    before = Timeline.load(storage, load_table_config(storage))
    completed = before.completed()
    metadata = {i.requested_time: before.read_commit_metadata(i) for i in completed}
    plans = {i.requested_time: before.read_plan(i) for i in completed}

    result = archive(built.root, min_commits=3, max_commits=4, clean_commits_retained=1)
    archived = {i.requested_time for i in result.plan.instants}
    # 0.x archives the cleans on their own: 5 > keep.max 4, so the oldest 5 - 3 leave
    assert set(cleans[:2]) <= archived and not set(cleans[2:]) & archived
    assert len(archived - set(cleans)) >= 10

    merged = Timeline.load(storage, load_table_config(storage), include_history=True)
    assert merged.completed() == completed
    for inst in merged.completed():
        t = inst.requested_time
        assert merged.is_archived(inst) == (t in archived), t
        got = merged.read_commit_metadata(inst)
        if inst.action is Action.CLEAN:
            assert got == metadata[t] and merged.read_plan(inst) == plans[t], t
        else:
            assert _stats(got) == _stats(metadata[t]) and _stats(got), t
        if t in archived:
            assert merged.state_file(inst) == f"{ARCHIVED}/{result.layer}"
    # without history the archived instants are gone from the timeline
    active = Timeline.load(storage, load_table_config(storage))
    assert {i.requested_time for i in active.completed()} == {i.requested_time for i in completed} - archived

    shown = CliRunner().invoke(cli, ["timeline", str(built.root), "--history", "--json"])
    assert shown.exit_code == 0, shown.output
    rows = json.loads(shown.output)
    assert {r["requested_time"] for r in rows if r["archived"]} == archived
    assert {r["requested_time"] for r in rows} == {i.requested_time for i in completed}
    text = CliRunner().invoke(cli, ["timeline", str(built.root), "--history"])
    assert sum(line.endswith(" archived") for line in text.output.splitlines()) == len(archived)


def test_v6_each_archival_writes_the_next_file_version(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 6, TableType.COPY_ON_WRITE)
    options: dict[str, Any] = {"min_commits": 5, "max_commits": 8, "clean_commits_retained": 1}
    written: dict[tuple[str, str, State], bytes] = {}
    archived: list[str] = []
    for round_ in range(4):
        write_commits(built, 10)
        written.update(v6_snapshot(built.root))
        result = archive(built.root, archival_batch_size=4, **options)
        assert len(result.plan.instants) == (5 if round_ == 0 else 10)
        assert result.layer == f".commits_.archive.{round_ + 1}_1-0-1"
        blocks = list(read_log_blocks(built.storage, f"{ARCHIVED}/{result.layer}"))
        count = 3 * len(result.plan.instants)
        assert [len(block_records(b.content())) for b in blocks] == [
            min(4, count - i) for i in range(0, count, 4)
        ]
        archived += [i.requested_time for i in result.plan.instants]
        newest = ArchivedTimelineV6.load(built.storage, load_table_config(built.storage), latest_only=True)
        assert {i.requested_time for i in newest.instants()} == {
            i.requested_time for i in result.plan.instants
        }
    assert assert_v6_records(built.root, written) == set(archived) == set(built.commits[:35])
    active = Timeline.load(built.storage, load_table_config(built.storage))
    assert [i.requested_time for i in active.completed()] == built.commits[35:]


def test_v6_cli_dry_run_then_archive(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 6, TableType.MERGE_ON_READ)
    write_commits(built, 12)
    before = v6_timeline_files(built.root)
    opts = [
        "-o",
        "hoodie.keep.min.commits=3",
        "-o",
        "hoodie.keep.max.commits=4",
        "-o",
        "hoodie.clean.commits.retained=1",
        "-o",
        "hoodie.compact.inline.max.delta.commits=4",
        "-o",
        "hoodie.commits.archival.batch.size=5",
    ]
    run = CliRunner().invoke
    dry = run(cli, ["archive", str(built.root), *opts, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.startswith("dry run: 8 instants to archive")
    assert f"stops at compaction-delta-commits at {built.commits[8]}" in dry.output
    assert v6_timeline_files(built.root) == before and list((built.root / ARCHIVED).iterdir()) == []
    done = run(cli, ["archive", str(built.root), *opts])
    assert done.exit_code == 0, done.output
    assert "wrote .commits_.archive.1_1-0-1, deleted 24 timeline files" in done.output
    blocks = list(read_log_blocks(built.storage, f"{ARCHIVED}/.commits_.archive.1_1-0-1"))
    assert [len(block_records(b.content())) for b in blocks] == [5, 5, 5, 5, 4]
    assert len(v6_timeline_files(built.root)) == 4 * 3
    merge = run(cli, ["archive", str(built.root), "-o", "hoodie.archive.merge.enable=true"])
    assert merge.exit_code == 2 and "merging small archive files is not supported" in merge.output


def _consistent_v6(root: Path, written: dict[tuple[str, str, State], bytes], commits: set[str]) -> None:
    """Every commit is on the active timeline or in the archive (once, with its bytes); readers work."""
    storage = LocalStorage(str(root))
    active = {i.requested_time for i in Timeline.load(storage, load_table_config(storage)).completed()}
    assert active | assert_v6_records(root, written) == commits


@pytest.mark.parametrize("point", PAUSE_POINTS_V6)
def test_v6_kill_9_at_every_crash_point_converges(tmp_path: Path, point: str) -> None:
    built = new_table(tmp_path / "t", 6, TableType.MERGE_ON_READ)
    write_commits(built, 10)
    written = v6_snapshot(built.root)
    archive(built.root, **SETTINGS, compaction_max_delta_commits=1)
    write_commits(built, 10)
    written.update(v6_snapshot(built.root))
    rows = hudi_rs(built.root)
    args = [
        str(built.root),
        *(f"{k}={v}" for k, v in CRASH_OPTIONS.items()),
        "hoodie.compact.inline.max.delta.commits=1",
    ]
    proc = start_paused(DRIVER, args, point, tmp_path / "ready")
    kill_group(proc)

    commits = set(built.commits)
    _consistent_v6(built.root, written, commits)
    assert hudi_rs(built.root) == rows
    result = archive(built.root, **SETTINGS, compaction_max_delta_commits=1)
    _consistent_v6(built.root, written, commits)
    active = Timeline.load(built.storage, load_table_config(built.storage))
    assert [i.requested_time for i in active.completed()] == built.commits[-5:]
    assert len(v6_timeline_files(built.root)) == 5 * 3
    assert hudi_rs(built.root) == rows
    # the crashed run's file, when written, was complete: the re-run only finished its deletions
    versions = sorted(p.name for p in (built.root / ARCHIVED).iterdir())
    assert versions == [".commits_.archive.1_1-0-1", ".commits_.archive.2_1-0-1"]
    assert result.layer is None
    # every crash point comes after the file: until the last completed file is gone, some
    # archived instant is still active and the re-run finishes its deletion
    assert bool(result.recovered) == (point != "archive-active-deleted")
    again = archive(built.root, **SETTINGS, compaction_max_delta_commits=1)
    assert again.plan.instants == [] and not again.recovered and again.layer is None


def test_v6_interrupted_deletion_is_finished_by_the_next_run(tmp_path: Path) -> None:
    """A completed file left behind (its instant already archived) is deleted, not archived again."""
    built = new_table(tmp_path / "t", 6, TableType.COPY_ON_WRITE)
    write_commits(built, 15)
    written = v6_snapshot(built.root)
    archive(built.root, **SETTINGS)
    t = built.commits[3]
    (built.root / ".hoodie" / f"{t}.commit").write_bytes(written[(t, "commit", State.COMPLETED)])
    storage = built.storage
    assert Timeline.load(storage, load_table_config(storage)).get(t) is not None
    result = archive(built.root, **SETTINGS)
    assert result.recovered == [t] and result.plan.instants == [] and result.layer is None
    assert Timeline.load(storage, load_table_config(storage)).get(t) is None
    _consistent_v6(built.root, written, set(built.commits))


def test_v6_archival_on_s3(s3_env: MotoServer, tmp_path: Path) -> None:  # noqa: F811
    """On an object store (no append) each archival is one new, complete archive object."""
    built = new_table(tmp_path / "t", 6, TableType.COPY_ON_WRITE)
    write_commits(built, 12)
    written = v6_snapshot(built.root)
    bucket = s3_env.new_bucket()
    store = S3Store.from_url(f"s3://{bucket}")
    for path in sorted(built.root.rglob("*")):
        if path.is_file():
            obstore.put(store, f"t/{path.relative_to(built.root).as_posix()}", path.read_bytes())
    uri = f"s3a://{bucket}/t"

    def rows() -> Counter[Any]:
        reader = hudi.HudiTableBuilder.from_base_uri(uri).with_options(s3_env.hudi_rs_options()).build()
        return multiset(pa.Table.from_batches(reader.read(hudi.HudiReadOptions())))

    before = rows()
    opts = [
        "-o",
        "hoodie.keep.min.commits=3",
        "-o",
        "hoodie.keep.max.commits=4",
        "-o",
        "hoodie.clean.commits.retained=1",
    ]
    done = CliRunner().invoke(cli, ["archive", uri, *opts])
    assert done.exit_code == 0, done.output
    # 12 commits > keep.max 4: all but keep.min 3 go
    assert "9 instants to archive" in done.output and "wrote .commits_.archive.1_1-0-1" in done.output
    keys = {o["path"] for batch in obstore.list(store, prefix="t/.hoodie/") for o in batch}
    assert {k for k in keys if "/archived/" in k} == {"t/.hoodie/archived/.commits_.archive.1_1-0-1"}
    assert len([k for k in keys if k.rsplit("/", 1)[-1][0].isdigit()]) == 3 * 3
    storage = storage_for(uri)
    archived = ArchivedTimelineV6.load(storage, load_table_config(storage))
    assert [i.requested_time for i in archived.instants()] == built.commits[:9]
    for r in archived.records:
        if r.action == "commit":
            assert_commit_metadata(
                r.record["hoodieCommitMetadata"], written[(r.requested_time, r.action, r.state)]
            )
    assert rows() == before
    again = CliRunner().invoke(cli, ["archive", uri, *opts])
    assert again.exit_code == 0 and "nothing to archive" in again.output, again.output

"""Executing cleans on real tables: hudi-rs and hoodied read the same rows, the right files go.

The files a clean must remove are computed here from the file-system view before the clean,
with Hudi's rules written out again (not with ``planners.clean``); plans and metadata are
decoded with Apache Hudi's own Avro schemas as well as with hoodied's timeline reader.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pytest
from click.testing import CliRunner, Result

from hoodied.executors.clean import execute_clean, resolve_plan
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.fsview import FileSystemView, list_storage
from hoodied.hoodie.heartbeat import Heartbeat
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, Action, State
from hoodied.hoodie.timeline.plans import CleanerPlan
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.service.cli.main import cli
from tests.helpers.hudi_schemas import decode_with_hudi_schema, encode_with_hudi_schema
from tests.helpers.mor_tables import norm_value

FAST = TimeSettings(max_expected_clock_skew_ms=5)
SKEW = ["--clock-skew-ms", "5"]


# ---------------------------------------------------------------------------- helpers


def _multiset(table: pa.Table) -> Counter[Any]:
    return Counter(tuple(sorted((k, norm_value(v)) for k, v in r.items())) for r in table.to_pylist())


def _hudi_rs(root: Path, as_of: str | None) -> Counter[Any]:
    options = hudi.HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    batches = hudi.HudiTableBuilder(str(root)).build().read(options)
    return _multiset(pa.Table.from_batches(batches)) if batches else Counter()


def _ours(root: Path, as_of: str | None) -> Counter[Any]:
    return _multiset(HoodieTable.open(str(root)).to_arrow(as_of=as_of))


def _open(root: Path) -> tuple[LocalStorage, Any, Timeline]:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    return storage, config, Timeline.load(storage, config)


def _files(root: Path) -> set[str]:
    """Every file of the table, but the local lock's own state (``.hoodie/.locks``)."""
    out = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    return {f for f in out if not f.startswith(".hoodie/.locks/")}


def _data_files(root: Path) -> set[str]:
    return {f for f in _files(root) if not f.startswith(".hoodie/")}


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _writes(timeline: Timeline) -> list[str]:
    return [i.requested_time for i in timeline.completed() if i.action in WRITE_ACTIONS]


def expected_deletions(root: Path, policy: str, n: int) -> tuple[set[str], str | None]:
    """Hudi's rules, written out from the file-system view: (files to delete, earliest commit to retain).

    KEEP_LATEST_COMMITS: the boundary is the n-th newest completed write; in every file group
    the slices older than it go, except the latest slice and the newest slice older than the
    boundary (a read as of the boundary needs it); a file group replaced before the boundary
    goes whole. KEEP_LATEST_FILE_VERSIONS: the newest n slices of each file group stay;
    replaced file groups go whole.
    """
    storage, config, timeline = _open(root)
    assert not timeline.pending() and not timeline.completed((Action.SAVEPOINT,)), "fixture must be quiet"
    view = FileSystemView.build(list_storage(storage, config), timeline, config)
    writes = _writes(timeline)
    doomed: set[str] = set()
    ectr = None
    if policy == "KEEP_LATEST_COMMITS":
        if len(writes) <= n:
            return set(), None
        ectr = writes[-n]
    for group in view.file_groups(include_replaced=True):
        slices = sorted((s for s in group.slices if not s.is_empty), key=lambda s: s.base_instant)
        if group.replaced_by is not None:
            if ectr is None or group.replaced_by < ectr:
                doomed.update(p for s in slices for p in s.paths())
            continue
        if ectr is None:
            for s in slices[: max(len(slices) - n, 0)]:
                doomed.update(s.paths())
            continue
        older = [s for s in slices if s.base_instant < ectr]
        keep = {slices[-1].base_instant} | ({older[-1].base_instant} if older else set())
        for s in older:
            if s.base_instant not in keep:
                doomed.update(s.paths())
    return doomed, ectr


def _compact_logless_group(root: Path, partition: str) -> str:
    """Add a completed compaction of a file group without log files (the new base file has the same rows).

    Table version 6 MOR fixtures have one slice per file group; two of these give one group
    three slices, so a clean has something to remove.
    """
    storage, config, timeline = _open(root)
    view = FileSystemView.build(list_storage(storage, config), timeline, config)
    group = next(g for g in view.file_groups(partition) if not g.latest_slice.log_files)  # type: ignore[union-attr]
    latest = group.latest_slice
    assert latest is not None and latest.base_file is not None
    last_write = timeline.completed()[-1]
    extra = timeline.read_commit_metadata(last_write).get("extraMetadata") or {}
    lock = InProcessLock(storage.base_uri)
    with lock:
        writer = TimelineWriter(storage, config, lock, time_settings=FAST)
        plan = {
            "operations": [{
                "baseInstantTime": latest.base_instant, "deltaFilePaths": [],
                "dataFilePath": latest.base_file.file_name, "fileId": group.file_id,
                "partitionPath": partition, "metrics": {}, "bootstrapFilePath": None,
            }],
            "extraMetadata": {}, "version": 2,
        }
        t = writer.schedule(Action.COMPACTION, plan).requested_time
        writer.transition_to_inflight(t, Action.COMPACTION)
        name = f"{group.file_id}_0-1-1_{t}.parquet"
        rel = f"{partition}/{name}" if partition else name
        shutil.copyfile(root / latest.base_file.path, root / rel)
        size = (root / rel).stat().st_size
        writer.complete(t, Action.COMPACTION, {
            "partitionToWriteStats": {partition: [{
                "fileId": group.file_id, "path": rel, "prevCommit": latest.base_instant, "numWrites": 0,
                "numDeletes": 0, "numUpdateWrites": 0, "numInserts": 0, "totalWriteBytes": size,
                "totalWriteErrors": 0, "partitionPath": partition, "totalLogRecords": 0,
                "totalLogFilesCompacted": 0, "totalLogSizeCompacted": 0, "totalUpdatedRecordsCompacted": 0,
                "totalLogBlocks": 0, "totalCorruptLogBlock": 0, "totalRollbackBlocks": 0,
                "fileSizeInBytes": size,
            }]},
            "compacted": True, "extraMetadata": dict(extra), "operationType": "UNKNOWN",
        })
    return t


# ---------------------------------------------------------------------------- correctness on fixtures

CASES = [
    ("cow/v9_txns_simple_nometa", "KEEP_LATEST_COMMITS", 1, 0),
    ("cow/v9_txns_simple_nometa", "KEEP_LATEST_COMMITS", 3, 0),
    ("mor/avro/v9_txns_simple_nometa", "KEEP_LATEST_COMMITS", 1, 0),
    ("mor/avro/v9_txns_simple_nometa", "KEEP_LATEST_FILE_VERSIONS", 1, 0),
    ("cow/v9_txns_complex_nometa", "KEEP_LATEST_COMMITS", 2, 0),
    ("cow/v8_simplekeygen_nonhivestyle", "KEEP_LATEST_FILE_VERSIONS", 1, 0),
    ("cow/v6_simplekeygen_nonhivestyle_overwritetable", "KEEP_LATEST_FILE_VERSIONS", 1, 0),
    ("cow/v6_simplekeygen_nonhivestyle", "KEEP_LATEST_FILE_VERSIONS", 1, 0),
    ("mor/avro/v6_trips_8i1u", "KEEP_LATEST_COMMITS", 1, 2),  # two compactions of a log-less group
    ("mor/parquet/v6_nonpartitioned", "KEEP_LATEST_COMMITS", 1, 0),  # one slice per group: nothing due
]


@pytest.mark.parametrize("fid,policy,n,compactions", CASES)
def test_schedule_and_execute_clean_on_real_tables(
    hudi_table, fid: str, policy: str, n: int, compactions: int
) -> None:
    root = hudi_table(fid)
    for _ in range(compactions):
        partition = "city=chennai"
        _compact_logless_group(root, partition)
    expected, ectr = expected_deletions(root, policy, n)
    assert bool(expected) == (fid != "mor/parquet/v6_nonpartitioned")
    storage, config, timeline = _open(root)
    points: list[str | None] = [None]
    if ectr is not None:
        points += [t for t in _writes(timeline) if t >= ectr]
    before_rs = {p: _hudi_rs(root, p) for p in points}
    before_ours = {p: _ours(root, p) for p in points}
    data_before = _data_files(root)

    scheduled = _run("schedule", "clean", str(root), "--policy", policy, "--retained", str(n), *SKEW)
    assert scheduled.exit_code == 0, scheduled.stdout
    executed = _run("execute", str(root), *SKEW)
    assert executed.exit_code == 0, executed.stdout
    if not expected:
        assert scheduled.stdout.startswith("nothing to clean: ")
        assert executed.stdout.strip() == "nothing pending"
        assert _data_files(root) == data_before
        return
    t = scheduled.stdout.split()[0]
    assert executed.stdout.startswith(f"{t} clean: {len(expected)} files deleted; completed")

    assert data_before - _data_files(root) == expected, "the clean removed other files than Hudi's rules say"
    assert _data_files(root) <= data_before
    for p in points:
        assert _hudi_rs(root, p) == before_rs[p], f"hudi-rs rows as of {p or 'latest'} changed"
        assert _ours(root, p) == before_ours[p], f"hoodied rows as of {p or 'latest'} changed"

    # the plan and the metadata: Hudi's schemas and our reader agree
    storage, config, timeline = _open(root)
    inst = timeline.get(t)
    assert inst is not None and inst.action is Action.CLEAN and inst.is_completed
    files = timeline.state_files(inst)
    if config.timeline_layout >= 2:
        assert inst.completion_time is not None and inst.completion_time > t
        assert Path(files[State.COMPLETED]).name == f"{t}_{inst.completion_time}.clean"
        assert (root / files[State.INFLIGHT]).read_bytes() == b""
    else:
        assert Path(files[State.COMPLETED]).name == f"{t}.clean"
    plan = decode_with_hudi_schema((root / files[State.REQUESTED]).read_bytes(), "HoodieCleanerPlan")
    assert plan["version"] == 2 and plan["policy"] == policy
    planned = {i["filePath"] for v in plan["filePathsToBeDeletedPerPartition"].values() for i in v}
    assert planned == {f"{storage.base_uri}/{rel}" for rel in expected}
    assert (plan["earliestInstantToRetain"] or {}).get("timestamp") == ectr
    md = decode_with_hudi_schema((root / files[State.COMPLETED]).read_bytes(), "HoodieCleanMetadata")
    assert md["version"] == 2 and md["startCleanTime"] == t
    assert md["totalFilesDeleted"] == len(expected)
    assert md["earliestCommitToRetain"] == (ectr or "")
    assert md["lastCompletedCommitTimestamp"] == _writes(timeline)[-1]
    by_partition = {p: set(m["successDeleteFiles"]) for p, m in md["partitionMetadata"].items()}
    want: dict[str, set[str]] = {}
    for rel in expected:
        partition, _, name = rel.rpartition("/")
        want.setdefault(partition, set()).add(name)
    assert by_partition == want
    for m in md["partitionMetadata"].values():
        assert m["policy"] == policy and m["failedDeleteFiles"] == [] and m["isPartitionDeleted"] is False
        assert sorted(m["deletePathPatterns"]) == sorted(m["successDeleteFiles"])
    ours = timeline.plan(inst)
    assert isinstance(ours, CleanerPlan) and ours.policy == policy
    assert timeline.read_commit_metadata(inst)["totalFilesDeleted"] == len(expected)
    assert not (root / ".hoodie" / ".heartbeat" / t).exists()
    # nothing is left to do, and executing again changes nothing
    snapshot = _files(root)
    again = _run("execute", str(root), *SKEW)
    assert again.exit_code == 0 and again.stdout.strip() == "nothing pending"
    assert _files(root) == snapshot


# ---------------------------------------------------------------------------- plans written by Apache Hudi


def _hudi_plan(root: Path, v1: bool = False, base: str | None = None) -> tuple[dict[str, Any], set[str]]:
    """A clean plan shaped as Apache Hudi writes it (for the files hoodied's planner would pick)."""
    expected, ectr = expected_deletions(root, "KEEP_LATEST_COMMITS", 1)
    assert expected and ectr
    storage, _, timeline = _open(root)
    by_partition: dict[str, list[str]] = {}
    for rel in sorted(expected):
        partition, _, name = rel.rpartition("/")
        by_partition.setdefault(partition, []).append(name)
    prefix = base if base is not None else storage.base_uri
    plan: dict[str, Any] = {
        "earliestInstantToRetain": {"timestamp": ectr, "action": "commit", "state": "COMPLETED"},
        "lastCompletedCommitTimestamp": _writes(timeline)[-1],
        "policy": "KEEP_LATEST_COMMITS",
        "version": 1 if v1 else 2,
        "filesToBeDeletedPerPartition": by_partition if v1 else {},
        "filePathsToBeDeletedPerPartition": None if v1 else {
            p: [{"filePath": f"{prefix}/{p}/{name}", "isBootstrapBaseFile": False} for name in names]
            for p, names in by_partition.items()
        },
        "partitionsToBeDeleted": [],
        "extraMetadata": {"written_by": "hudi"},
    }
    return plan, expected


def _request(root: Path, plan: dict[str, Any] | bytes) -> str:
    storage, config, _ = _open(root)
    data = plan if isinstance(plan, bytes) else encode_with_hudi_schema(plan, "HoodieCleanerPlan")
    lock = InProcessLock(storage.base_uri)
    with lock:
        writer = TimelineWriter(storage, config, lock, time_settings=FAST)
        return writer.create_requested(Action.CLEAN, writer.new_instant_time(), data).requested_time


@pytest.mark.parametrize("shape", ["v2-foreign-base", "v2-file-uri", "v1-names"])
def test_plans_written_by_hudi_elsewhere_are_executed(hudi_table, shape: str) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    base = {"v2-foreign-base": "s3a://lake/warehouse/db/v9_txns_simple_nometa",
            "v2-file-uri": f"file:{root}", "v1-names": None}[shape]
    plan, expected = _hudi_plan(root, v1=shape == "v1-names", base=base)
    t = _request(root, plan)
    rows = _hudi_rs(root, None)
    before = _data_files(root)
    out = _run("execute", str(root), "--instant", t, *SKEW)
    assert out.exit_code == 0, out.stdout
    assert out.stdout.startswith(f"{t} clean: {len(expected)} files deleted; completed at ")
    assert before - _data_files(root) == expected
    assert _hudi_rs(root, None) == rows
    _, _, timeline = _open(root)
    inst = timeline.get(t)
    assert inst is not None and inst.is_completed
    md = timeline.read_commit_metadata(inst)
    assert md["extraMetadata"] == {"written_by": "hudi"} and md["totalFilesDeleted"] == len(expected)


def test_files_already_gone_are_recorded_as_hudi_does(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    plan, expected = _hudi_plan(root)
    gone = sorted(expected)[:3]
    for rel in gone:
        (root / rel).unlink()
    t = _request(root, plan)
    storage, config, _ = _open(root)
    result = execute_clean(storage, config, InProcessLock(storage.base_uri), t, time_settings=FAST)
    assert sorted(result.already_gone) == gone
    assert set(result.deleted) == expected - set(gone)
    assert result.summary().startswith(f"{t} clean: {len(expected) - 3} files deleted (3 already gone)")
    md = _open(root)[2].read_commit_metadata(result.instant)
    # Hudi's CleanActionExecutor: a file already gone is a failed delete, not an error
    assert md["totalFilesDeleted"] == len(expected) - 3
    failed = {
        f"{p['partitionPath']}/{name}"
        for p in md["partitionMetadata"].values()
        for name in p["failedDeleteFiles"]
    }
    assert failed == set(gone)


def test_partitions_to_be_deleted(hudi_table) -> None:
    root = hudi_table("cow/v6_simplekeygen_nonhivestyle_overwritetable")
    expected, _ = expected_deletions(root, "KEEP_LATEST_FILE_VERSIONS", 1)
    storage, _, timeline = _open(root)
    # partition 20 only holds a file group replaced by the insert_overwrite_table: it can go
    assert {rel for rel in expected if rel.startswith("20/")} == {
        rel for rel in _data_files(root) if rel.startswith("20/") and not rel.endswith("metadata")
    }
    by_partition: dict[str, list[dict[str, Any]]] = {}
    for rel in sorted(expected):
        partition = rel.rpartition("/")[0]
        by_partition.setdefault(partition, []).append({"filePath": f"{storage.base_uri}/{rel}",
                                                       "isBootstrapBaseFile": False})
    plan = {"earliestInstantToRetain": None, "lastCompletedCommitTimestamp": _writes(timeline)[-1],
            "policy": "KEEP_LATEST_FILE_VERSIONS", "version": 2, "filesToBeDeletedPerPartition": {},
            "filePathsToBeDeletedPerPartition": by_partition, "partitionsToBeDeleted": ["20", "30"],
            "extraMetadata": {}}
    rows = _hudi_rs(root, None)
    t = _request(root, plan)
    out = _run("execute", str(root), *SKEW)
    assert out.exit_code == 0, out.stdout
    assert "1 partitions deleted, 1 kept (still hold files)" in out.stdout
    assert not (root / "20").exists()
    assert (root / "30" / ".hoodie_partition_metadata").exists()  # still holds a live file group
    assert _hudi_rs(root, None) == rows
    _, _, timeline = _open(root)
    md = decode_with_hudi_schema((root / ".hoodie" / f"{t}.clean").read_bytes(), "HoodieCleanMetadata")
    assert md["partitionMetadata"]["20"]["isPartitionDeleted"] is True
    assert md["partitionMetadata"]["30"]["isPartitionDeleted"] is False


# ---------------------------------------------------------------------------- bad input: nothing changes


def add_mdt_partition(root: Path, name: str) -> None:
    """Declare one more (complete) MDT partition in the data table's properties."""
    props = root / ".hoodie" / "hoodie.properties"
    lines = props.read_text().splitlines()
    key = "hoodie.table.metadata.partitions="
    lines = [f"{line},{name}" if line.startswith(key) else line for line in lines]
    props.write_text("\n".join(lines) + "\n")


def _unchanged(root: Path, before: set[str], *args: str, code: int, message: str) -> None:
    out = _run("execute", str(root), *args, *SKEW)
    assert out.exit_code == code, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("hoodied: error:")]
    assert len(lines) == 1, out.stderr
    assert message in lines[0]
    assert _files(root) == before


@pytest.mark.parametrize("bad", [
    "outside", "outside-partition", "not-a-data-file", "dot-dot", "two-bases", "metadata-folder", "bootstrap",
])
def test_a_plan_naming_files_outside_the_table_is_refused(hudi_table, bad: str) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    plan, expected = _hudi_plan(root, base="s3a://lake/t")
    partition, infos = next(iter(plan["filePathsToBeDeletedPerPartition"].items()))
    name = infos[0]["filePath"].rsplit("/", 1)[-1]
    other = next(p for p in plan["filePathsToBeDeletedPerPartition"] if p != partition)
    infos[-1]["filePath"] = {
        "outside": f"/tmp/elsewhere/{name}",
        "outside-partition": f"s3a://lake/t/{other}/{name}",
        "not-a-data-file": f"s3a://lake/t/{partition}/.hoodie_partition_metadata",
        "dot-dot": f"s3a://lake/t/{partition}/../../etc/{name}",
        "two-bases": f"s3a://lake/other/{partition}/{name}",
        "metadata-folder": f"s3a://lake/t/{partition}/{name}",
        "bootstrap": f"s3a://lake/t/{partition}/{name}",
    }[bad]
    if bad == "metadata-folder":
        plan["filePathsToBeDeletedPerPartition"][".hoodie"] = [{"filePath": "s3a://lake/t/.hoodie/hoodie.properties"}]
    if bad == "bootstrap":
        infos[-1]["isBootstrapBaseFile"] = True
    t = _request(root, plan)
    before = _files(root)
    message = {
        "outside": "which is outside the table", "outside-partition": "which is outside the table",
        "not-a-data-file": "which is not a data file", "dot-dot": "which is not a data file",
        "bootstrap": "bootstrapped tables", "two-bases": "several base paths",
        "metadata-folder": "'.hoodie' is not a partition",
    }[bad]
    code = 5 if bad == "bootstrap" else 4
    _unchanged(root, before, "--instant", t, code=code, message=message)
    assert _open(root)[2].get(t).state is State.REQUESTED  # type: ignore[union-attr]


def test_corrupt_or_empty_plan_is_refused(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    plan, _ = _hudi_plan(root)
    good = encode_with_hudi_schema(plan, "HoodieCleanerPlan")
    t = _request(root, good[: len(good) // 2])
    before = _files(root)
    _unchanged(root, before, code=4, message=f"{t}.clean.requested: corrupt Avro object container")
    (root / ".hoodie" / "timeline" / f"{t}.clean.requested").write_bytes(b"")
    _unchanged(root, before, code=4, message="clean plan is empty")


def test_unsupported_table_version_is_refused(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    plan, _ = _hudi_plan(root)
    t = _request(root, plan)
    props = root / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text().replace("hoodie.table.version=9", "hoodie.table.version=7"))
    before = _files(root)
    _unchanged(root, before, "--instant", t, code=5, message="table version 7 is not supported")


def test_table_with_an_unmaintained_mdt_partition_is_refused(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_meta")
    add_mdt_partition(root, "expr_index_city")
    storage, config, timeline = _open(root)
    view = FileSystemView.build(list_storage(storage, config), timeline, config)
    victim = view.file_groups()[0].slices[0]
    plan = {"policy": "KEEP_LATEST_COMMITS", "version": 2, "filePathsToBeDeletedPerPartition": {
        victim.partition: [{"filePath": f"{storage.base_uri}/{p}"} for p in victim.paths()]}}
    t = _request(root, plan)
    before = _files(root)
    _unchanged(root, before, code=5, message="MDT partition expr_index_city is not maintained")
    with pytest.raises(UnsupportedTableError, match="MDT partition expr_index_city is not maintained"):
        execute_clean(storage, load_table_config(storage), InProcessLock(storage.base_uri), t)
    # the planner refuses the same tables
    out = _run("schedule", "clean", str(root), "--retained", "1", *SKEW)
    assert out.exit_code == 5 and "expr_index_city" in out.stderr
    assert _files(root) == before


def test_resolve_plan_rules(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path / "t"))
    name = "abc-0_0-1-1_20250101000000000.parquet"
    ok = resolve_plan(storage, {"policy": "P", "version": 2, "filePathsToBeDeletedPerPartition": {
        "a/b": [{"filePath": f"hdfs://nn:8020/w/t/a/b/{name}"}],
        "": [{"filePath": f"hdfs://nn:8020/w/t/{name.replace('abc', 'xyz')}"}],
    }}, "w")
    assert [f.relative for f in ok.files["a/b"]] == [f"a/b/{name}"]
    assert [f.relative for f in ok.files[""]] == [name.replace("abc", "xyz")]
    with pytest.raises(HoodieFormatError, match="twice"):
        twice = {"p": [name, name]}
        resolve_plan(storage, {"policy": "P", "version": 1, "filesToBeDeletedPerPartition": twice}, "w")
    with pytest.raises(UnsupportedTableError, match="clean plan version 3"):
        resolve_plan(storage, {"policy": "P", "version": 3}, "w")
    with pytest.raises(HoodieFormatError, match="deprecated"):
        resolve_plan(storage, {"policy": "P", "version": 2, "filesToBeDeletedPerPartition": {"p": [name]}},
                     "w")
    with pytest.raises(HoodieFormatError, match="root as a partition"):
        resolve_plan(storage, {"policy": "P", "version": 2, "partitionsToBeDeleted": [""]}, "w")


# ---------------------------------------------------------------------------- execute: other pending instants


def _reopen_latest_write(root: Path, action: str) -> str:
    """The table's latest completed ``action`` becomes a data write still in progress."""
    done = sorted((root / ".hoodie" / "timeline").glob(f"*_*.{action}"))[-1]
    done.unlink()
    return done.name.split("_")[0]


def test_execute_reports_other_pending_actions_and_skips_live_cleans(hudi_table) -> None:
    root = hudi_table("mor/avro/v9_txns_simple_nometa")
    w = _reopen_latest_write(root, "deltacommit")  # a writer's delta commit: nothing for hoodied to run
    out = _run("schedule", "clean", str(root), "--retained", "1", *SKEW)
    assert out.exit_code == 0, out.stdout
    t = out.stdout.split()[0]
    storage = LocalStorage(str(root))
    before = _files(root)
    writing = f"{w} deltacommit (inflight): a data write, not a table service; left untouched"
    with Heartbeat(storage, t, interval_ms=60_000):  # another executor is on it
        live = _run("execute", str(root), *SKEW)
        assert live.exit_code == 0, live.stdout
        lines = live.stdout.splitlines()
        assert lines[0] == writing
        assert lines[1].startswith(f"{t} clean: skipped, {t}: clean has a live heartbeat (last beat at ")
        assert lines[1].endswith("another executor is working on it") and len(lines) == 2
        one = _run("execute", str(root), "--instant", t, *SKEW)
        assert one.exit_code == 1 and "another executor is working on it" in one.stderr
        assert _files(root) - {f".hoodie/.heartbeat/{t}"} == before - {f".hoodie/.heartbeat/{t}"}
    write = _run("execute", str(root), "--instant", w, *SKEW)
    assert write.exit_code == 5 and writing in write.stderr
    done = _run("execute", str(root), *SKEW)
    assert done.exit_code == 0, done.stdout
    assert done.stdout.splitlines()[0] == writing
    assert done.stdout.splitlines()[1].startswith(f"{t} clean: ")
    again = _run("execute", str(root), "--instant", t, *SKEW)
    assert again.exit_code == 0 and again.stdout.strip() == f"{t} clean: already completed, nothing to do"
    assert _open(root)[2].get(w).state is State.INFLIGHT  # type: ignore[union-attr]
    with pytest.raises(InstantStateError, match="no clean instant"):
        execute_clean(storage, load_table_config(storage), InProcessLock(storage.base_uri), w)


def test_execute_leaves_a_pending_rollback_of_a_data_write_to_the_writer(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    w = _reopen_latest_write(root, "commit")  # a failed data write its writer planned a rollback for
    storage, config, _ = _open(root)
    lock = InProcessLock(storage.base_uri)
    plan = {"instantToRollback": {"commitTime": w, "action": "commit"}, "RollbackRequests": [],
            "version": 1}
    with lock:
        r = TimelineWriter(storage, config, lock, time_settings=FAST).schedule(
            Action.ROLLBACK, plan).requested_time
    before = _files(root)
    out = _run("execute", str(root), *SKEW)
    assert out.exit_code == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"{w} commit (inflight): a data write, not a table service; left untouched",
        f"{r} rollback: pending rollback of the data write {w}; the table's writer finishes it (or "
        f"`hoodied rollback TABLE --instant {w}` on a LAZY table); left untouched",
    ]
    assert _files(root) == before


def test_failed_write_leftovers_are_cleaned(hudi_table) -> None:
    """A base file of an instant a completed rollback undid (the rollback could not delete it)
    is planned and deleted whatever the retention; nothing any reader counts changes."""
    from hoodied.hoodie.avro.container import write_single_record

    root = hudi_table("cow/v9_txns_simple_nometa")
    rows = _hudi_rs(root, None)
    source = sorted((root / "region=eu").glob("*.parquet"))[0]
    failed, rollback = "20260307135841000", "20260307135842000"
    file_id = source.name.split("_")[0]
    leftover = root / "region=eu" / f"{file_id}_0-99-99_{failed}.parquet"
    shutil.copy(source, leftover)
    metadata = {
        "startRollbackTime": rollback,
        "timeTakenInMillis": 1,
        "totalFilesDeleted": 0,
        "commitsRollback": [failed],
        "partitionMetadata": {},
        "version": 1,
        "instantsRollback": [{"commitTime": failed, "action": "commit"}],
    }
    timeline = root / ".hoodie" / "timeline"
    (timeline / f"{rollback}.rollback.inflight").write_bytes(b"")
    (timeline / f"{rollback}_20260307135842100.rollback").write_bytes(
        write_single_record(metadata, "HoodieRollbackMetadata")
    )
    assert _hudi_rs(root, None) == rows  # no reader counts the leftover
    before = _files(root)
    # 100 commits retained: nothing is due by retention, only the leftover
    scheduled = _run("schedule", "clean", str(root), "--retained", "100", "--clock-skew-ms", "0")
    assert scheduled.exit_code == 0, scheduled.output
    executed = _run("execute", str(root), "--clock-skew-ms", "0")
    assert executed.exit_code == 0, executed.output
    gone = before - _files(root)
    assert gone == {f"region=eu/{leftover.name}"}
    assert _hudi_rs(root, None) == rows == _ours(root, None)

"""Metadata-table upkeep on real Hudi tables: MDT compaction (when due, at which instant, how records
merge) and MDT clean, checked against Hudi's own compactions, hoodied's MDT reader and hudi-rs."""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest

from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.metadata.compaction import (
    deltas_since_last_compaction,
    execute_mdt_compaction,
    instant_minus_millis,
    max_delta_commits,
    schedule_mdt_compaction,
)
from hoodied.hoodie.metadata.encode import files_record, metadata_schema, partition_list_record
from hoodied.hoodie.metadata.merge import with_file_name
from hoodied.hoodie.metadata.reader import METADATA_FOLDER, MetadataTable
from hoodied.hoodie.metadata.writer import MetadataWriter
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from tests.helpers.mor_tables import hudi_rs_rows
from tests.hoodie.metadata.test_mdt_writer import (
    FAST,
    V8,
    V9_COW,
    V9_MOR,
    Table,
    _add_base_file,
    _commit_md,
    _drift,
    _hudi_rs,
    _without_mdt,
)

#: (fixture, Hudi's MDT compaction in it, base files it wrote, values byte-identical)
HUDI_COMPACTIONS = [
    (V9_MOR, "20260307162612567", 14, True),
    (V9_COW, "20260307162449278", 14, True),
    # Hudi 1.0: no base file for 7 of the 24 slices (logs without records); one files record
    # orders its map differently, so records are compared decoded
    (V8, "20251220210130942", 17, False),
]


def _mdt(root: Path) -> tuple[LocalStorage, Any, Timeline]:
    storage = LocalStorage(str(root / METADATA_FOLDER))
    config = load_table_config(storage, metadata_table=True)
    return storage, config, Timeline.load(storage, config)


def _cells(path: Path) -> list[tuple[bytes, bytes]]:
    return list(HFileReader(path.read_bytes(), str(path)).iter_cells())


def _decoded(value: bytes, table_version: int) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(value), metadata_schema(table_version), None)


def _listing(root: Path) -> dict[str, dict[str, int]]:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    mdt = MetadataTable.open(storage, config, Timeline.load(storage, config))
    assert mdt is not None
    return mdt.all_files()


def _check_readers(root: Path, tmp: Path) -> None:
    """hudi-rs through the MDT == hudi-rs by storage listing; hoodied's drift check finds nothing."""
    assert _hudi_rs(root) == _hudi_rs(_without_mdt(root, tmp))
    assert hudi_rs_rows(root) == hudi_rs_rows(_without_mdt(root, tmp))
    assert _drift(root) == 0


@pytest.mark.parametrize("fid,c,bases,exact", HUDI_COMPACTIONS)
def test_compaction_reproduces_hudis_own(
    fid: str, c: str, bases: int, exact: bool, hudi_table, tmp_path: Path
) -> None:
    """Undo Hudi's MDT compaction C (timeline files and base files) and run hoodied's at C: same plan,
    the same cells in every base HFile, and readers see what they saw."""
    root = hudi_table(fid)
    before_slices, before_rows = _hudi_rs(root)
    listing = _listing(root)
    mdt_root = root / METADATA_FOLDER
    storage, config, timeline = _mdt(root)
    hudi_compaction = timeline.get(c)
    assert hudi_compaction is not None, c
    hudi_plan = timeline.read_plan(hudi_compaction)
    hudi_bases = {p.relative_to(mdt_root).as_posix(): _cells(p) for p in mdt_root.glob(f"*/*_{c}.hfile")}
    assert len(hudi_bases) == bases
    for p in mdt_root.glob(f"*/*_{c}.hfile"):
        p.unlink()
    for p in (mdt_root / ".hoodie" / "timeline").glob(f"{c}*"):
        p.unlink()

    t = Table(root)
    with t.lock:
        writer = t.mdt()
        inst = schedule_mdt_compaction(writer.timeline, c)
        assert inst is not None and inst.state is State.REQUESTED
        plan = Timeline.load(storage, config).read_plan(inst)
        assert plan is not None and hudi_plan is not None
        assert sorted(plan["operations"], key=lambda o: o["fileId"]) == sorted(
            hudi_plan["operations"], key=lambda o: o["fileId"])  # metrics included
        result = execute_mdt_compaction(writer.timeline, c, t.config.version)
    assert result.instant.is_completed and result.instant.action is Action.COMPACTION
    mine = {p.relative_to(mdt_root).as_posix(): _cells(p) for p in mdt_root.glob(f"*/*_{c}.hfile")}
    # the same file groups, byte-identical values (``_hoodie_file_name`` names each file's own name)
    def group(rel: str) -> str:
        return Path(rel).name.split("_")[0]

    by_group = {group(k): (k, v) for k, v in mine.items()}
    assert {group(k) for k in hudi_bases} == set(by_group)
    for name, cells in hudi_bases.items():
        ours_name, ours = by_group[group(name)]
        def norm(cells: list[tuple[bytes, bytes]]) -> list[tuple[bytes, Any]]:
            if exact:
                return [(r, with_file_name(v, "x")) for r, v in cells]
            return [(r, _decoded(with_file_name(v, "x"), t.config.version)) for r, v in cells]

        assert norm(ours) == norm(cells), name
        assert all(Path(ours_name).name.encode() in v for _, v in ours)
    md = Timeline.load(storage, config).read_commit_metadata(result.instant)
    assert md["operationType"] == "COMPACT" and md["compacted"] is True
    assert sum(len(v) for v in md["partitionToWriteStats"].values()) == bases
    # readers: the same slices and rows through the MDT as before, no drift
    assert _hudi_rs(root) == (before_slices, before_rows)
    assert _listing(root) == listing
    _check_readers(root, tmp_path)


def _write_pending(t: Table, partition: str, source: str) -> str:
    """A data delta commit that wrote its file and its MDT delta commit, then failed (data pending)."""
    instant = t.timeline.new_instant_time()
    name = f"{uuid.uuid4()}-0_0-1-1_{instant}.parquet"
    data = (t.root / partition / source).read_bytes()
    t.timeline.create_requested(Action.DELTA_COMMIT, instant, None)
    t.timeline.transition_to_inflight(instant, Action.DELTA_COMMIT, _commit_md({}, "INSERT"))
    t.storage.put_if_absent(f"{partition}/{name}", data)
    t.mdt().write_deltacommit(
        instant, {"files": [partition_list_record([partition]), files_record(partition, {name: len(data)})]}
    )
    return instant


def _source(root: Path) -> str:
    return next(p.name for p in sorted((root / "region=eu").glob("*.parquet")))


def test_compaction_happens_at_the_threshold_and_not_before(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_MOR)
    t = Table(root)
    assert max_delta_commits(t.config) == 10
    src = _source(root)
    count, since = deltas_since_last_compaction(_mdt(root)[2])
    assert (count, since) == (7, "20260307162612567")
    written: list[str] = []
    with t.lock:
        for _ in range(10 - count):  # up to 10 delta commits since: not due before the next write
            written.append(_add_base_file(t, "region=eu", src)[0])
            assert [i.requested_time for i in _mdt(root)[2].completed((Action.COMPACTION,))] == [since]
        assert deltas_since_last_compaction(_mdt(root)[2])[0] == 10
        added = _add_base_file(t, "region=eu", src)  # its MDT writer compacts first
    _, _, mdt_tl = _mdt(root)
    compactions = [i for i in mdt_tl.completed((Action.COMPACTION,)) if i.requested_time != since]
    assert len(compactions) == 1
    c = compactions[0]
    # a fresh instant (no data instant was pending with its MDT delta commit completed), taken while
    # the 11th data instant was pending; its MDT delta commit completed after the compaction
    added_done = mdt_tl.completion_time(added[0])
    assert c.completion_time is not None and added_done is not None
    assert written[-1] < added[0] < c.requested_time < c.completion_time < added_done
    plan = mdt_tl.read_plan(c)
    assert plan is not None
    files_op = next(o for o in plan["operations"] if o["fileId"] == "files-0000-0")
    assert files_op["baseInstantTime"] == since and f".files-0000-0_{written[-1]}.log.1_0-0-0" in \
        files_op["deltaFilePaths"]
    bases = sorted((root / METADATA_FOLDER).glob(f"*/*_{c.requested_time}.hfile"))
    assert len(bases) == len(plan["operations"]) >= 14
    # the new base file holds every file the MDT lists, the later delta commit sits on top of it
    (files_base,) = [b for b in bases if b.name.startswith("files-0000-0")]
    rows = dict(HFileReader(files_base.read_bytes(), str(files_base)).records())
    eu = rows["region=eu"]["filesystemMetadata"]
    assert {w for w in written if any(w in n for n in eu)} == set(written)
    assert all(rows[k]["_hoodie_file_name"] == files_base.name for k in rows)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    mdt = MetadataTable.open(storage, config, Timeline.load(storage, config))
    assert mdt is not None
    (fs,) = mdt.file_slices("files")
    assert fs.base_file == f"files/{files_base.name}" and fs.log_files == (
        f"files/.files-0000-0_{added[0]}.log.1_0-0-0",)
    assert added[2] in mdt.files("region=eu")
    _check_readers(root, tmp_path)


def test_pending_data_instant_keeps_its_records_out_of_the_compaction(hudi_table, tmp_path: Path) -> None:
    """Hudi 1.x does not wait for a pending data instant P whose MDT delta commit completed: the MDT
    compaction is timed 1 ms before P, so P's records (and everything completed after) stay in
    log files, and P can still be rolled back."""
    root = hudi_table(V9_MOR)
    t = Table(root)
    src = _source(root)
    with t.lock:
        _add_base_file(t, "region=eu", src)
        pending = _write_pending(t, "region=eu", src)
        for _ in range(2):
            _add_base_file(t, "region=eu", src)
        later = _add_base_file(t, "region=eu", src)[0]  # 11th: the compaction runs before it
    _, _, mdt_tl = _mdt(root)
    (c,) = [i for i in mdt_tl.completed((Action.COMPACTION,)) if i.requested_time != "20260307162612567"]
    assert c.requested_time == instant_minus_millis(pending, 1, t.config)
    plan = mdt_tl.read_plan(c)
    assert plan is not None
    logs = [n for o in plan["operations"] for n in o["deltaFilePaths"]]
    assert not [n for n in logs if pending in n or later in n]
    (files_base,) = (root / METADATA_FOLDER / "files").glob(f"*_{c.requested_time}.hfile")
    eu = dict(HFileReader(files_base.read_bytes(), str(files_base)).records())["region=eu"]
    assert not [n for n in eu["filesystemMetadata"] if pending in n]
    # readers skip P (pending on the data timeline); the data snapshot is the same with and without MDT
    assert not [n for n in _listing(root)["region=eu"] if pending in n]
    assert hudi_rs_rows(root) == hudi_rs_rows(_without_mdt(root, tmp_path))
    # a later write does not compact again at the same instant
    with t.lock:
        _add_base_file(t, "region=eu", src)
    _, _, mdt_tl = _mdt(root)
    assert len(mdt_tl.completed((Action.COMPACTION,))) == 2


def test_pending_mdt_compaction_is_finished_first(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_COW)
    t = Table(root)
    with t.lock:
        writer = t.mdt()
        c = writer.timeline.new_instant_time()
        assert schedule_mdt_compaction(writer.timeline, c) is not None
        writer.timeline.transition_to_inflight(c, Action.COMPACTION)  # an attempt that died
        instant = _add_base_file(t, "region=eu", _source(root))[0]
        assert t.mdt().last_upkeep is None
    _, _, mdt_tl = _mdt(root)
    done = mdt_tl.get(c)
    assert done is not None and done.is_completed
    later = mdt_tl.completion_time(instant)
    assert done.completion_time is not None and later is not None and done.completion_time < later
    _check_readers(root, tmp_path)


def test_mdt_clean_removes_old_slices_only_as_allowed(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_MOR)
    t = Table(root)
    src = _source(root)
    mdt_root = root / METADATA_FOLDER
    first_base = mdt_root / "files" / "files-0000-0_0-5-4_00000000000000000.hfile"
    # the slice before Hudi's compaction C: log files whose delta commit completed before C (612542's
    # log completed after C and belongs to C's slice)
    mdt_tl = _mdt(root)[2]
    completed = {p.name: mdt_tl.completion_time(p.name.split("_")[1].split(".")[0])
                 for p in (mdt_root / "files").glob(".files-0000-0_*.log.*")}
    assert None not in completed.values()  # every log's delta commit is complete
    oldest_logs = sorted(name for name, c in completed.items() if c is not None and c < "20260307162612567")
    assert first_base.exists() and len(oldest_logs) == 7
    with t.lock:
        for _ in range(14):
            _add_base_file(t, "region=eu", src)
            if not _mdt(root)[2].completed((Action.CLEAN,)):  # retention still covers the oldest slice
                assert first_base.exists()
    cleans = [i.requested_time for i in _mdt(root)[2].completed((Action.CLEAN,))]
    storage, config, mdt_tl = _mdt(root)
    assert len(cleans) == 1
    clean = mdt_tl.get(cleans[0])
    assert clean is not None and clean.is_completed and clean.action is Action.CLEAN
    plan = mdt_tl.read_plan(clean)
    assert plan is not None and plan["policy"] == "KEEP_LATEST_COMMITS"
    ectr = plan["earliestInstantToRetain"]["timestamp"]
    writes = [i for i in mdt_tl.completed() if i.action in (Action.DELTA_COMMIT, Action.COMPACTION)]
    assert ectr > "20260307162612567"
    # the files group: the slice before Hudi's compaction went, the one a query as of the ECTR reads stayed
    gone = {Path(i["filePath"]).name for i in plan["filePathsToBeDeletedPerPartition"]["files"]}
    assert gone == {first_base.name, *oldest_logs}
    assert not first_base.exists() and not any((mdt_root / "files" / n).exists() for n in oldest_logs)
    assert (mdt_root / "files" / "files-0000-0_13-170-402_20260307162612567.hfile").exists()
    md = mdt_tl.read_commit_metadata(clean)
    assert md["totalFilesDeleted"] == sum(len(v) for v in plan["filePathsToBeDeletedPerPartition"].values())
    assert len(writes) > 20
    _check_readers(root, tmp_path)


def test_threshold_from_the_data_table_properties_and_upkeep_off(hudi_table) -> None:
    root = hudi_table(V9_COW)
    props = root / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text() + "hoodie.metadata.compact.max.delta.commits=7\n")
    t = Table(root)
    assert max_delta_commits(t.config) == 7 and max_delta_commits(t.config, 3) == 3
    assert deltas_since_last_compaction(_mdt(root)[2])[0] == 6
    src = _source(root)
    with t.lock:
        instant = t.timeline.new_instant_time()
        t.timeline.create_requested(Action.DELTA_COMMIT, instant, None)
        t.timeline.transition_to_inflight(instant, Action.DELTA_COMMIT, _commit_md({}, "INSERT"))
        off = MetadataWriter(t.storage, t.config, t.lock, time_settings=FAST, upkeep=False)
        off.write_deltacommit(instant, {"files": [partition_list_record(["region=eu"])]})
        t.timeline.complete(instant, Action.DELTA_COMMIT, _commit_md({}, "INSERT"))
        assert off.last_upkeep is None and len(_mdt(root)[2].completed((Action.COMPACTION,))) == 1
        _add_base_file(t, "region=eu", src)  # 7 delta commits since: due at 7
    assert len(_mdt(root)[2].completed((Action.COMPACTION,))) == 2

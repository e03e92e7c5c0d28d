"""Metadata-table read side: the ``files`` listing against storage, validity and slicing rules."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.filenames import PARTITION_METAFILE, BaseFileName, LogFileName
from hoodied.hoodie.metadata.reader import FilesByPartition, MetadataTable, listing_drift
from hoodied.hoodie.metadata.records import combine_listings, live_files
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline

MDT_TABLES = [
    "mor/avro/v8_trips_8i3u1d",
    "cow/v9_timebasedkeygen_nonhivestyle",
    "cow/v9_txns_nonpart_meta",
    "cow/v9_txns_simple_meta",
    "cow/v9_txns_simple_overwrite",
    "mor/avro/v9_txns_simple_meta",
    "mor/avro/v9_txns_simple_overwrite",
]

V8 = "mor/avro/v8_trips_8i3u1d"
V8_COMPACTION = "20251220210129235"
V8_MDT_COMPACTION = "20251220210130942"


def open_table(root: Path) -> tuple[LocalStorage, Timeline, MetadataTable | None]:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    return storage, timeline, MetadataTable.open(storage, config, timeline)


def committed_storage_files(storage: LocalStorage, timeline: Timeline) -> dict[str, dict[str, int]]:
    """Base and log files whose instant completed on the data timeline (simple rule, v8/v9 names)."""
    out: dict[str, dict[str, int]] = {}
    for info in storage.walk():
        if info.path.startswith(".hoodie/") or info.name == PARTITION_METAFILE:
            continue
        base, log_name = BaseFileName.parse(info.name), LogFileName.parse(info.name)
        instant = base.instant_time if base else log_name.instant_time if log_name else None
        if instant is not None and timeline.is_completed(instant):
            partition = info.path.rpartition("/")[0]
            out.setdefault(partition, {})[info.name] = info.size
    return out


@pytest.mark.parametrize("fid", MDT_TABLES)
def test_mdt_listing_equals_committed_storage_files(shared_table, fid: str) -> None:
    storage, timeline, mdt = open_table(shared_table(fid))
    assert mdt is not None
    expected = committed_storage_files(storage, timeline)
    listed = mdt.all_files()
    assert mdt.partitions() == sorted(expected)
    drift = listing_drift(expected, listed)
    assert not drift, drift.summary()
    assert drift.count == 0 and listed == expected


def test_non_partitioned_table_lists_root(shared_table) -> None:
    _, _, mdt = open_table(shared_table("cow/v9_txns_nonpart_meta"))
    assert mdt is not None
    assert mdt.partitions() == [""]
    assert mdt.files("") and all(n.endswith(".parquet") for n in mdt.files(""))
    assert mdt.files("no-such-partition") == {}


def test_tables_without_mdt_open_as_none(shared_table) -> None:
    for fid in ("cow/v9_txns_simple_nometa", "mor/avro/v6_trips_8i1u"):
        _, _, mdt = open_table(shared_table(fid))
        assert mdt is None


def test_missing_mdt_folder_is_a_format_error(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_meta")
    shutil.rmtree(root / ".hoodie" / "metadata")
    with pytest.raises(HoodieFormatError, match=r"^\.hoodie/metadata: .*metadata table is missing"):
        open_table(root)


def test_valid_instants_include_mdt_only_instants(shared_table) -> None:
    _, timeline, mdt = open_table(shared_table(V8))
    assert mdt is not None
    valid = mdt.valid_instants
    assert {f"0000000000000000{i}" for i in range(5)} <= valid  # MDT partition initialisations
    assert {i.requested_time for i in timeline.completed()} <= valid  # incl. the data indexing instant
    assert V8_MDT_COMPACTION not in valid  # MDT compaction commits are not delta commits


def test_completion_time_slicing_of_the_mdt(shared_table) -> None:
    # The MDT compaction (20251220210130942) was planned while delta commit 20251220210130911
    # was inflight; that log completed after the compaction instant, so it is in the new slice.
    _, _, mdt = open_table(shared_table(V8))
    assert mdt is not None
    (fs,) = mdt.file_slices("files")
    assert fs.file_id == "files-0000-0" and fs.base_instant == V8_MDT_COMPACTION
    assert fs.log_files == ("files/.files-0000-0_20251220210130911.log.1_3-1149-3338",)


def test_pending_data_compaction_drops_its_outputs(hudi_table, caplog) -> None:
    root = hudi_table(V8)
    (root / f".hoodie/timeline/{V8_COMPACTION}_20251220210129883.commit").unlink()
    caplog.set_level(logging.DEBUG, logger="hoodied.hoodie.metadata.reader")
    storage, timeline, mdt = open_table(root)
    assert mdt is not None
    assert V8_COMPACTION not in mdt.valid_instants  # its MDT delta commit no longer counts
    listed = mdt.all_files()
    outputs = [n for files in listed.values() for n in files if V8_COMPACTION in n]
    assert outputs == []
    assert not listing_drift(committed_storage_files(storage, timeline), listed)
    assert "pending on the data timeline" in caplog.text


def test_pending_data_deltacommit_block_is_skipped(hudi_table, caplog) -> None:
    # The valid-instant rule alone (no compaction folded it in): the MDT log block of the last
    # delta commit stops counting once the data instant is no longer complete.
    root = hudi_table(V8)
    (root / ".hoodie/timeline/20251220210130911_20251220210131755.deltacommit").unlink()
    storage, timeline, mdt = open_table(root)
    assert mdt is not None
    caplog.set_level(logging.WARNING, logger="hoodied.hoodie.metadata.reader")
    listed = mdt.all_files()
    assert not any("20251220210130911" in n for files in listed.values() for n in files)
    assert "pending on the data timeline" not in caplog.text
    assert not listing_drift(committed_storage_files(storage, timeline), listed)


def test_pending_mdt_compaction_falls_back_to_the_previous_slice(hudi_table) -> None:
    root = hudi_table(V8)
    (root / f".hoodie/metadata/.hoodie/timeline/{V8_MDT_COMPACTION}_20251220210131219.commit").unlink()
    storage, timeline, mdt = open_table(root)
    assert mdt is not None
    (fs,) = mdt.file_slices("files")
    assert fs.base_instant == "00000000000000000"
    assert len(fs.log_files) == 8  # every completed delta commit since the initialisation
    assert not listing_drift(committed_storage_files(storage, timeline), mdt.all_files())


def test_corrupt_mdt_base_file_names_the_file(hudi_table) -> None:
    root = hudi_table("mor/avro/v9_txns_simple_meta")
    base = sorted((root / ".hoodie/metadata/files").glob("*.hfile"))[-1]
    base.write_bytes(base.read_bytes()[:-100])
    _, _, mdt = open_table(root)
    assert mdt is not None
    with pytest.raises(HoodieFormatError, match=rf"^\.hoodie/metadata/files/{base.name}: "):
        mdt.all_files()


# --- merge rules and drift ----------------------------------------------------------------------


def test_combine_listings_rules() -> None:
    base = {"a": (10, False), "b": (5, False)}
    logs = combine_listings({"b": (0, True), "c": (7, False)}, {"c": (9, False), "d": (0, True)})
    assert logs == {"b": (0, True), "c": (9, False), "d": (0, True)}  # tombstones kept, size = max
    merged = combine_listings(base, logs)
    assert merged == {"a": (10, False), "c": (9, False), "d": (0, True)}
    assert live_files(merged) == {"a": 10, "c": 9}
    assert combine_listings({"a": (10, False)}, {"a": (4, False)}) == {"a": (10, False)}


def test_listing_drift_reports_each_kind() -> None:
    storage: FilesByPartition = {"p1": {"a": 1, "b": 2, "c": 3}, "p2": [("x", 1)]}
    mdt: FilesByPartition = {"p1": {"a": 1, "b": 20, "d": 4}, "p3": {"y": 5}}
    drift = listing_drift(storage, mdt)
    assert drift and drift.count == 5
    by = {p.partition: p for p in drift.partitions}
    assert by["p1"].missing_in_mdt == ("c",) and by["p1"].missing_in_storage == ("d",)
    assert by["p1"].size_mismatch == (("b", 2, 20),)
    assert by["p2"].missing_in_mdt == ("x",) and by["p3"].missing_in_storage == ("y",)
    assert "p1: 1 missing in MDT, 1 missing in storage, 1 size mismatches" in drift.summary()
    assert not listing_drift({"p": {"a": 1}}, {"p": [("a", 1)]})
    assert listing_drift({}, {}).summary() == "MDT listing matches storage"

"""Clustering a table whose record keys sit in more than one file group, with a record index.

Hudi allows the shape: ``insert`` under a non-global index writes a key that already exists to a
new file group, and the record index keeps one entry per key. Here a delta commit copies one of
the fixture's base files as a new file group (through the metadata-table writer, as the other MDT
tests do), so every key of that file lives in two file groups. Clustering both groups into one
output file keeps both copies of every row (clustering never merges records) and writes one
record-index entry per key, as Hudi does; copies split across two output files are refused
(``record_index_updates`` here; in a clustering, the record-index task of the key's MDT file group,
after the metadata-table delta commit went inflight, so the attempt is rolled back before a retry).
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hoodied.executors.clustering import ClusteringResult
from hoodied.hoodie.actions.clustering import record_index_updates
from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.planners.clustering import ClusteringSettings
from hoodied.service.cli.report import committed_listing_drift
from hoodied.service.spark_jobs import run_spark_service
from tests.executors.test_clustering import FAST, _schedule, spark  # noqa: F401  (module fixture)
from tests.executors.test_indexing import live_records
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows
from tests.hoodie.metadata.test_mdt_writer import V9_MOR, Table, _add_base_file, _hudi_rs, _without_mdt

PARTITION = "region=eu"


def _duplicate_a_file_group(root: Path) -> tuple[str, set[str]]:
    """Copy one base file of ``PARTITION`` as a new file group; its keys now live in two groups."""
    slices, _ = _hudi_rs(root)
    source = next(s for s in slices if s[0] == PARTITION)[2]
    keys = set(pq.read_table(root / PARTITION / source, columns=["_hoodie_record_key"]).column(0).to_pylist())
    t = Table(root)
    with t.lock:
        _add_base_file(t, PARTITION, source)
    return source, keys


def test_keys_in_two_file_groups_cluster_into_one_file_with_one_index_entry(
    tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setenv("TZ", "America/Chicago")  # the fixture's LOCAL timeline zone (index epoch ms)
    root = unzip_table(require_fixture(V9_MOR), tmp_path / "t")
    _, keys = _duplicate_a_file_group(root)
    assert keys
    before = hudi_rs_rows(root)
    per_key = Counter(dict(row)["_hoodie_record_key"] for row, n in before.items() for _ in range(n))
    assert all(per_key[k] == 2 for k in keys)  # the shape: every copied key in two file groups
    t, plan = _schedule(root, ClusteringSettings())
    groups = [g for g in plan.input_groups if any(s.partition_path == PARTITION for s in g.slices)]
    assert len(groups) == 1 and groups[0].num_output_file_groups == 1
    storage = LocalStorage(str(root))
    result = run_spark_service(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST)
    assert isinstance(result, ClusteringResult) and result.instant.is_completed
    # both copies of every row are still there, through the MDT and by storage listing
    assert hudi_rs_rows(root) == before == hudi_rs_rows(_without_mdt(root, tmp_path))
    assert committed_listing_drift(HoodieTable.open(str(root))).count == 0
    # one record-index entry per key, naming the clustering's new file group
    (new_group,) = {(s["partitionPath"], s["fileId"]) for s in result.write_stats
                    if s["partitionPath"] == PARTITION}
    index = live_records(root, "record_index")
    for key in keys:
        a = index[key]["recordIndexMetadata"]
        bits = (a["fileIdHighBits"] % 2**64) << 64 | a["fileIdLowBits"] % 2**64
        assert (a["partitionName"], f"{uuid.UUID(int=bits)}-{a['fileIndex']}") == new_group


def test_a_key_written_to_two_new_files_is_refused(tmp_path: Path) -> None:
    root = unzip_table(require_fixture(V9_MOR), tmp_path / "t")
    config = load_table_config(LocalStorage(str(root)))
    a, b = f"{uuid.uuid4()}-0", f"{uuid.uuid4()}-0"
    # the same key twice in one file: one entry
    (only,) = record_index_updates([(PARTITION, a, ["k1", "k1"])], "20260307135709297", config)
    assert only[0] == "k1"
    twice = [(PARTITION, a, ["k1"]), (PARTITION, b, ["k2", "k1"])]
    twice_msg = f"'k1' was written to two new file groups \\({a} and {b}\\)"
    with pytest.raises(UnsupportedTableError, match=twice_msg):
        record_index_updates(twice, "20260307135709297", config)

"""Building ``partition_stats`` with hoodied's indexing when the files of a partition disagree on a
column's type.

The table is the ``TimestampBasedKeyGenerator`` table of ``test_clustering_timestamp_keygen``
(table version 9, COW, ``ts`` a long in the first two writes, then a write that put the partition
path into ``ts``: a string column from then on, in the commit's schema too; MDT with ``files``,
``column_stats`` and ``partition_stats``). hoodied's clustering then rewrites the path-value file
of ``2024/01/01`` together with one of its long files; its MDT delta commit is written by the
commit path (``commit_mdt_records``), which types every file range of a column by the writer
schema before merging (``hoodie.metadata.range_types``): the partition keeps a file whose ``ts``
footer is INT64 and a new one where it is a string, and its ``partition_stats`` record is
STRING-typed with the long as its decimal text.

``partition_stats`` is then dropped as Hudi's ``DROP INDEX`` leaves it (the MDT partition folder
and its initializing delta commit gone, the partition out of ``hoodie.table.metadata.partitions``:
``test_indexing._drop_partition``), an ``indexing`` instant is requested for it and hoodied's
indexing builds it. Hudi's initialization types the ranges with the table schema
(``HoodieTableMetadataUtil.convertFilesToPartitionStatsRecords`` -> ``tryResolveSchemaForTable`` /
``TableSchemaResolver.getTableAvroSchema``, then ``collectAndProcessColumnMetadata`` ->
``FileFormatUtils.getColumnRangeInPartition``), the schema of the last commit here. The rebuilt
records must equal what was written before: in full for the partitions the clustering left alone
(their records come from the initialization), and for ``2024/01/01`` the value types, bounds, null
counts and tightness of the commit path's record (its counts and sizes are summed over the commits
by the MDT's merge, and ``_hoodie_file_name``'s range still spans the replaced files: an
initialization covers the latest base files only). hudi-rs must read the same rows. Without the
typing the merge of that partition is refused, as Hudi's merge refuses two value types.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hoodied.executors.clustering import ClusteringResult
from hoodied.executors.engine import Session
from hoodied.executors.indexing import IndexingResult
from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.fsview import list_storage
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.metadata.colstats import ValueType
from hoodied.hoodie.metadata.encode import PARTITION_STATS
from hoodied.hoodie.metadata.index_records import partition_stats_cells
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.clustering import ClusteringSettings, plan_clustering
from hoodied.service.spark_jobs import run_spark_service
from tests.executors.test_clustering_timestamp_keygen import (
    META,
    PATH_VALUE_PARTITION,
    SCHEMA,
    UNITS,
    timestamp_keygen_table,
)
from tests.executors.test_indexing import (  # noqa: F401  (spark: module fixture)
    FAST,
    _drop_partition,
    _execute,
    _instant_of,
    live_records,
    spark,
)
from tests.helpers.mor_tables import hudi_rs_rows


def _cluster_mixed_pair(root: Path, spark: Session) -> tuple[str, str]:  # noqa: F811
    """Cluster the path-value file of ``2024/01/01`` with one of its long files, through hoodied's
    clustering (its MDT delta commit is the commit path's); the other long file stays. Returns
    (the file left as it is, the clustered file)."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    lock = InProcessLock(storage.base_uri)
    listing = list_storage(storage, config)
    names = sorted(listing[PATH_VALUE_PARTITION], key=lambda f: _instant_of(f[0]) or "")
    assert len(names) == 3
    kept, picked = names[0], [names[1], names[2]]  # the second long write and the path-value write
    with lock:
        writer = TimelineWriter(storage, config, lock, time_settings=FAST)
        instant_time = writer.new_instant_time()
        planned = plan_clustering(
            config,
            Timeline.load(storage, config),
            {PATH_VALUE_PARTITION: picked},
            instant_time,
            storage.base_uri,
            ClusteringSettings(),
        )
        assert planned.plan is not None
        writer.create_requested(Action.CLUSTERING, instant_time, planned.plan)
    result = run_spark_service(storage, lock, instant_time, spark, time_settings=FAST)
    assert isinstance(result, ClusteringResult) and result.instant.is_completed
    (written,) = [s["path"].rsplit("/", 1)[1] for s in result.write_stats]
    return kept[0], written


def _request_partition_stats(root: Path) -> str:
    """``CREATE INDEX`` of partition stats: a requested ``indexing`` plan up to the latest commit."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    lock = InProcessLock(storage.base_uri)
    writer = TimelineWriter(storage, config, lock, time_settings=FAST)
    upto = Timeline.load(storage, config).completed()[-1].requested_time
    with lock:
        instant = writer.new_instant_time()
        info = {
            "version": 1,
            "metadataPartitionPath": PARTITION_STATS,
            "indexUptoInstant": upto,
            "extraMetadata": {},
        }
        writer.create_requested(Action.INDEXING, instant, {"version": 1, "indexPartitionInfos": [info]})
    return instant


SUMS = ("valueCount", "totalSize", "totalUncompressedSize")


def _ts_stats(records: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        r["ColumnStatsMetadata"]["fileName"]: r["ColumnStatsMetadata"]
        for r in records.values()
        if r["ColumnStatsMetadata"]["columnName"] == "ts"
    }


@pytest.mark.parametrize("timestamp_type", sorted(UNITS))
def test_partition_stats_built_with_the_table_schema_types(
    tmp_path: Path,
    spark: Session,  # noqa: F811
    timestamp_type: str,
) -> None:
    root = timestamp_keygen_table(tmp_path / "t", timestamp_type, path_values=True)
    kept, clustered = _cluster_mixed_pair(root, spark)
    storage = LocalStorage(str(root))
    columns = (*META, *SCHEMA.names)
    # the footers disagree on ts in that partition: an untyped merge is refused, as Hudi's merge is
    with pytest.raises(
        UnsupportedTableError,
        match="column ts has (LONG|STRING) statistics in .* and (STRING|LONG) in .*no writer schema",
    ):
        partition_stats_cells(storage, PATH_VALUE_PARTITION, sorted([kept, clustered]), columns, 9)
    committed = live_records(root, PARTITION_STATS)
    assert len(committed) == len(columns) * 3
    ts = _ts_stats(committed)
    assert {s["valueType"]["typeOrdinal"] for s in ts.values()} == {int(ValueType.STRING)}
    day = int(1_704_067_200 * UNITS[timestamp_type])
    mixed = ts[PATH_VALUE_PARTITION]
    assert (mixed["minValue"]["value"], mixed["maxValue"]["value"]) == (str(day), PATH_VALUE_PARTITION)
    rows = hudi_rs_rows(root)
    assert sum(rows.values()) == 28 and hudi_rs_rows(root, metadata=False) == rows

    _drop_partition(root, PARTITION_STATS)
    assert PARTITION_STATS not in load_table_config(storage).metadata_partitions
    assert not (root / ".hoodie/metadata" / PARTITION_STATS).exists()
    instant = _request_partition_stats(root)
    result = _execute(root, spark, instant)
    assert isinstance(result, IndexingResult) and result.file_groups == 1
    assert PARTITION_STATS in load_table_config(storage).metadata_partitions
    rebuilt = live_records(root, PARTITION_STATS)
    assert sorted(rebuilt) == sorted(committed)
    for key, record in rebuilt.items():
        ours, theirs = record["ColumnStatsMetadata"], committed[key]["ColumnStatsMetadata"]
        if ours["fileName"] != PATH_VALUE_PARTITION:  # untouched since the initialization: all equal
            assert record == committed[key]
            continue
        # The MDT merges a commit's partition stats record into the stored one (counts and sizes
        # summed, bounds widened: the replaced files' names stay in _hoodie_file_name's range); an
        # initialization (Hudi's or hoodied's) covers the latest base files only (as test_indexing).
        if ours["columnName"] == "_hoodie_file_name":
            latest = sorted([kept, clustered])
            assert (ours["minValue"]["value"], ours["maxValue"]["value"]) == (latest[0], latest[-1])
            assert theirs["minValue"]["value"] <= latest[0] and theirs["maxValue"]["value"] >= latest[-1]
            continue
        # every other column: value type, bounds, null count, tightness as the commit path wrote them
        assert {k: v for k, v in ours.items() if k not in SUMS} == {
            k: v for k, v in theirs.items() if k not in SUMS
        }
    mixed = _ts_stats(rebuilt)[PATH_VALUE_PARTITION]
    assert mixed["valueType"]["typeOrdinal"] == int(ValueType.STRING)
    assert mixed["valueCount"] == 4 + 4 + 4  # the long file kept, the clustered long and path-value rows
    assert hudi_rs_rows(root) == rows == hudi_rs_rows(root, metadata=False)

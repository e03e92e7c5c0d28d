"""A clean whose MDT delta commit triggers an MDT compaction: its operations on a Spark session.

Hudi's v9 fixture has 7 MDT delta commits since its last MDT compaction; with
``hoodie.metadata.compact.max.delta.commits=5`` the clean's MDT upkeep compacts every MDT file
group. The same clean runs on two copies of the table: with ``mdt_runner=SparkOperations`` (each
operation checks it runs inside the Spark task of its own index) and with the default, in this
process. Both MDT compactions plan the same file groups and write the same cells; hudi-rs reads the
same rows after the clean as before, with the metadata table and without it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import TaskContext

from hoodied.executors.clean import execute_clean
from hoodied.executors.engine import Session, SparkOperations, spark_session
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.tasks import OperationFunction, OperationRunner
from tests.executors.test_clean_executor import _hudi_rs
from tests.helpers.clean_mdt import FAST, compaction_due, last_mdt_compaction
from tests.hoodie.metadata.test_mdt_clean import V9_MOR, _check_consistent, _schedule


@pytest.fixture(scope="module")
def spark() -> Iterator[Session]:
    with spark_session("local[2]") as session:
        yield session


def in_spark_tasks(spark: Session, calls: list[tuple[int, str]]) -> OperationRunner:
    """``SparkOperations(spark)`` whose operations fail unless each runs in the Spark task of its index."""
    on_spark = SparkOperations(spark)

    def run(count: int, task: OperationFunction, schema: pa.Schema, *, description: str = "") -> pa.Table:
        calls.append((count, description))

        def checked(index: int, token: str) -> pa.RecordBatch:  # pickled by value into the tasks
            ctx = TaskContext.get()
            if ctx is None or ctx.partitionId() != index:
                raise RuntimeError(f"operation {index} ran outside its Spark task")
            return task(index, token)

        return on_spark(count, checked, schema, description=description)

    return run


def run_clean(root: Path, t: str, **kwargs: Any) -> None:
    storage = LocalStorage(str(root))
    result = execute_clean(storage, load_table_config(storage), InProcessLock(storage.base_uri), t,
                           time_settings=FAST, **kwargs)
    assert result.instant.is_completed and result.deleted


def test_a_cleans_mdt_compaction_runs_in_spark_tasks(hudi_table, tmp_path: Path, spark: Session) -> None:
    root = hudi_table(V9_MOR)
    compaction_due(root)
    rows = _hudi_rs(root, None)
    before, _ = last_mdt_compaction(root)
    t, planned = _schedule(root)
    twin = Path(shutil.copytree(root, tmp_path / "twin" / root.name, symlinks=True))

    calls: list[tuple[int, str]] = []
    run_clean(root, t, mdt_runner=in_spark_tasks(spark, calls))
    run_clean(twin, t)  # the default: in this process

    on_spark_t, on_spark = last_mdt_compaction(root)
    in_process_t, in_process = last_mdt_compaction(twin)
    assert on_spark_t > t > before and in_process_t > t  # compacted by the clean (a new MDT instant)
    # one Spark job, one task per MDT file group (14 on this fixture)
    assert calls == [(len(on_spark), f"MDT compaction {on_spark_t} of {root / METADATA_FOLDER}")]
    assert len(on_spark) >= 14 and sum(len(c) for c in on_spark.values()) > 0
    assert on_spark == in_process  # same file groups, same cells
    _check_consistent(root, tmp_path, t, planned, rows)
    _check_consistent(twin, tmp_path, t, planned, rows)

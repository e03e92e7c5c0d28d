"""Paths named in plans, resolved against the table: local schemes and the S3 connectors' schemes."""

from __future__ import annotations

from pathlib import Path

import pytest
from obstore.store import MemoryStore

from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.hoodie.plan_files import locate, plan_path, plan_relative_path
from hoodied.hoodie.storage import LocalStorage


def test_local_plan_paths_with_and_without_the_file_scheme(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path / "t"))
    for planned in (f"{tmp_path}/t/p/f.parquet", f"file:{tmp_path}/t/p/f.parquet", f"file://{tmp_path}/t/p/f.parquet"):
        where = locate(storage, planned)
        assert where.is_location and where.relative == "p/f.parquet"
    assert locate(storage, "p/f.parquet").relative == "p/f.parquet"
    assert locate(storage, f"{tmp_path}/elsewhere/p/f.parquet").relative is None
    assert locate(storage, plan_path(storage, "p/f.parquet")).relative == "p/f.parquet"


@pytest.mark.parametrize("opened", ["s3://lake/warehouse/t", "s3a://lake/warehouse/t"])
def test_s3_s3a_and_s3n_name_one_bucket(opened: str) -> None:
    """Spark writers name S3 tables ``s3a://`` (Hadoop's S3A connector), older ones ``s3n://``; a
    table opened as ``s3://`` is the same table, so their plans resolve inside it."""
    storage = ObjectStorage.over(MemoryStore(), opened)
    for scheme in ("s3", "s3a", "s3n"):
        planned = f"{scheme}://lake/warehouse/t/region=eu/f1_0-1-1_20250101000000000.parquet"
        assert locate(storage, planned).relative == "region=eu/f1_0-1-1_20250101000000000.parquet"
        assert plan_relative_path(storage, planned, "rollback") == locate(storage, planned).relative
    for outside in ("s3a://other/warehouse/t/p/f.parquet", "s3a://lake/warehouse/t2/p/f.parquet",
                    "gs://lake/warehouse/t/p/f.parquet"):
        assert locate(storage, outside).relative is None
        with pytest.raises(HoodieFormatError, match="outside the table"):
            plan_relative_path(storage, outside, "rollback")

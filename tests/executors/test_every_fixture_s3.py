"""Every fixture table Apache Hudi wrote, served from S3 (a real moto server): inspect, read, clean.

For each table of the local clean suite (``test_clean_every_fixture``), the table is uploaded
under its own prefix of one bucket and the command line runs in-process on the ``s3a://`` URI,
with the standard AWS variables as the only credentials and the default lock (``auto``: Apache
Hudi's storage-based lock file on an object store):

- ``inspect --json`` reports the same table, file groups and slices as on the local copy;
- ``read`` writes the rows hudi-rs reads from the same server (listing through the metadata
  table where there is one, and through storage), which are the rows ``read`` writes from the
  local copy and hudi-rs reads there;
- the clean the local suite plans (``KEEP_LATEST_FILE_VERSIONS``, one version) is planned and run
  on S3 and on a local copy: the same files go away in both, nothing under ``.hoodie/`` is
  deleted, and hudi-rs reads the same rows from S3 before and after, both ways. A table with
  nothing to clean is unchanged; the table hoodied refuses locally is refused on S3 with the
  same exit code and message, and nothing changes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import hudi
import obstore
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result
from obstore.store import S3Store

from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.service.cli.main import cli
from tests.executors.test_clean_every_fixture import REFUSED, SKEW
from tests.executors.test_clean_executor import _files
from tests.helpers.fixtures import ALL_FIXTURES, require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows, multiset
from tests.helpers.object_servers import MotoServer, moto_server, s3_env, upload_tree  # noqa: F401  (fixtures)

#: The local suite's clean: the most aggressive retention.
CLEAN = ["--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1"]


def hoodied(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def upload(root: Path, bucket: str, prefix: str) -> str:
    """The local table ``root`` copied to ``s3a://bucket/prefix``; returns that URI."""
    return upload_tree(root, bucket, prefix, scheme="s3a")


def objects(bucket: str, prefix: str) -> set[str]:
    """The table's object keys, relative to the table, but the lock's own state (``.hoodie/.locks``)."""
    store = S3Store.from_url(f"s3://{bucket}")
    keys = {o["path"] for batch in obstore.list(store, prefix=f"{prefix}/") for o in batch}
    rel = {k[len(prefix) + 1 :] for k in keys}
    return {k for k in rel if not k.startswith(".hoodie/.locks/")}


def lock_file(bucket: str, prefix: str) -> dict[str, Any]:
    """The storage-based lock file of the table (Hudi's ``StorageBasedLockProvider``)."""
    store = S3Store.from_url(f"s3://{bucket}")
    got = obstore.get(store, f"{prefix}/.hoodie/.locks/table_lock.json")
    data: dict[str, Any] = json.loads(bytes(got.bytes()))
    return data


def hudi_rs_s3(uri: str, server: MotoServer, *, metadata: bool) -> Counter[Any]:
    """The snapshot hudi-rs reads from S3, listing through the metadata table or through storage."""
    return hudi_rs_rows(uri, options=server.hudi_rs_options(), metadata=metadata)


def hudi_rs_slices_s3(uri: str, server: MotoServer) -> set[tuple[str, str]]:
    """The (partition, file id) of every latest file slice hudi-rs lists on S3."""
    table = hudi.HudiTableBuilder.from_base_uri(uri).with_options(server.hudi_rs_options()).build()
    return {(s.partition_path, s.file_id) for s in table.get_file_slices()}


def s3_rows(uri: str, server: MotoServer, has_mdt: bool) -> Counter[Any]:
    """hudi-rs's rows from S3 through storage listing, equal to those through the metadata table."""
    listed = hudi_rs_s3(uri, server, metadata=False)
    if has_mdt:
        assert hudi_rs_s3(uri, server, metadata=True) == listed
    return listed


def inspect_json(table: str) -> dict[str, Any]:
    done = hoodied("inspect", table, "--json")
    assert done.exit_code == 0, done.output
    report: dict[str, Any] = json.loads(done.stdout)
    # the differences between the copies: the base path, and the lock each storage takes by default
    assert report["table"].pop("base_path") == table
    lock = report.pop("lock")
    assert (lock["kind"], lock["state"]) == ("storage" if table.startswith("s3") else "local", "free"), lock
    return report


def hoodied_read(table: str, out: Path, *listing: str) -> Counter[Any]:
    done = hoodied("read", table, "--output", str(out), *listing)
    assert done.exit_code == 0, done.output
    return multiset(pq.read_table(out))


def clean(table: str) -> tuple[Result, str | None]:
    """``schedule clean`` then, when a clean is due, ``execute``; returns the schedule's result and the
    instant (None when nothing is due or the table is refused)."""
    scheduled = hoodied("schedule", "clean", table, *CLEAN, *SKEW)
    if scheduled.exit_code != 0 or "nothing to clean" in scheduled.stdout:
        return scheduled, None
    t = scheduled.stdout.split()[0]
    executed = hoodied("execute", table, "--instant", t, *SKEW)
    assert executed.exit_code == 0, executed.output
    assert f"{t} clean: " in executed.stdout and "completed" in executed.stdout, executed.stdout
    return scheduled, t


@pytest.mark.parametrize(
    "fid",
    sorted(ALL_FIXTURES)
    or [pytest.param("none", marks=pytest.mark.skip(reason="no Hudi fixtures found (set HOODIED_FIXTURES)"))],
)
def test_every_fixture_on_s3(fid: str, s3_env: MotoServer, tmp_path: Path) -> None:  # noqa: F811
    zipped = require_fixture(fid)
    local = unzip_table(zipped, tmp_path / "local")
    bucket, prefix = s3_env.new_bucket(), fid.replace("/", "_")
    uri = upload(local, bucket, prefix)
    assert objects(bucket, prefix) == _files(local)

    if fid in REFUSED:  # refused on S3 exactly as on the local copy, and nothing changes
        for command in (
            ["inspect", uri, "--json"],
            ["read", uri, "--output", str(tmp_path / "r.parquet")],
            ["schedule", "clean", uri, *CLEAN, *SKEW],
        ):
            there = hoodied(*command)
            here = hoodied(*[str(local) if c == uri else c for c in command])
            assert there.exit_code == here.exit_code, there.output + here.output
            assert there.stderr.replace(uri, "TABLE") == here.stderr.replace(str(local), "TABLE")
        assert there.exit_code == 5 and REFUSED[fid] in there.stderr, there.output
        assert objects(bucket, prefix) == _files(local)
        return

    # 1. inspect: the same report from S3 and from the local copy, and the latest file slices
    #    hudi-rs finds on S3
    report = inspect_json(uri)
    assert report == inspect_json(str(local))
    assert report["files"]["latest_file_slices"] == len(hudi_rs_slices_s3(uri, s3_env)), report["files"]

    # 2. read: hoodied from S3 = hudi-rs from S3 (both listings) = hoodied and hudi-rs on the copy
    has_mdt = load_table_config(LocalStorage(str(local))).metadata_table_available
    rows = s3_rows(uri, s3_env, has_mdt)
    assert hoodied_read(uri, tmp_path / "s3.parquet") == rows
    assert hoodied_read(uri, tmp_path / "s3-listed.parquet", "--listing", "storage") == rows
    assert hoodied_read(str(local), tmp_path / "local.parquet") == rows
    assert hudi_rs_rows(local) == rows

    # 3. clean: the local suite's clean on the local copy, then the same on S3 (the default lock,
    #    ``auto``, on both)
    local_before, s3_before = _files(local), objects(bucket, prefix)
    here, t_here = clean(str(local))
    assert here.exit_code == 0, here.output
    there, t_there = clean(uri)
    assert there.exit_code == 0, there.output
    local_deleted = local_before - _files(local)
    s3_deleted = s3_before - objects(bucket, prefix)
    if t_here is None:  # nothing to clean on S3 either, for the same reason
        assert t_there is None and there.stdout == here.stdout, there.stdout + here.stdout
        assert not local_deleted and objects(bucket, prefix) == s3_before
        return
    assert t_there is not None, there.stdout
    # the same plan summary (after the instant time)
    assert there.stdout.split(" ", 1)[1] == here.stdout.split(" ", 1)[1], there.stdout + here.stdout
    # the default lock on S3 is Hudi's storage-based lock file (StorageBasedLockProvider), which is
    # never deleted: released, it says expired
    assert lock_file(bucket, prefix)["expired"] is True
    assert local_deleted and all(not f.startswith(".hoodie/") for f in local_deleted)
    assert s3_deleted == local_deleted
    assert s3_rows(uri, s3_env, has_mdt) == rows
    assert hoodied_read(uri, tmp_path / "s3-after.parquet") == rows
    # inspect agrees after the clean too, but for the clean's own instant time
    after = json.dumps(inspect_json(uri), sort_keys=True)
    assert after.count(t_there) >= 1
    assert after.replace(t_there, t_here) == json.dumps(inspect_json(str(local)), sort_keys=True)

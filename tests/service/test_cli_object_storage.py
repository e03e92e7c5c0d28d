"""The commands on a table in S3 (a real moto server): ``timeline``, ``inspect``, ``read``, and a
clean planned and run by ``schedule`` and ``execute``.

The command runs as a real process with nothing but the standard AWS variables in its
environment (no config file), as a user would run it; its output equals the same command's
output on the local copy of the table, and ``read`` writes the rows hudi-rs reads from S3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import hudi
import obstore
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from obstore.store import S3Store

from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import multiset
from tests.helpers.object_servers import MotoServer, moto_server, s3_env, upload_tree  # noqa: F401  (fixtures)
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401  (fixture)


def _hoodied(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # s3_env put the standard AWS variables into os.environ for this test
    return subprocess.run([sys.executable, "-m", "hoodied.service.cli", *args], env=dict(os.environ),
                          capture_output=True, text=True, timeout=120, cwd=cwd)



@pytest.mark.parametrize("fid", ["cow/v8_nonpartitioned", "mor/avro/v8_trips_8i3u1d"])
def test_timeline_inspect_and_read_on_s3(fid: str, s3_env: MotoServer, tmp_path: Path) -> None:  # noqa: F811
    local = unzip_table(require_fixture(fid), tmp_path / "local")
    bucket = s3_env.new_bucket()
    upload_tree(local, bucket, "warehouse/t")
    for scheme in ("s3", "s3a"):  # Hudi's writers name tables s3a://
        uri = f"{scheme}://{bucket}/warehouse/t"
        for command in ("timeline", "inspect"):
            remote, here = _hoodied(command, uri, "--json"), _hoodied(command, str(local), "--json")
            assert remote.returncode == 0 == here.returncode, remote.stderr + here.stderr
            theirs, ours = json.loads(remote.stdout), json.loads(here.stdout)
            if command == "inspect":  # the base path and the default lock are the differences
                assert theirs["table"].pop("base_path") == uri
                assert ours["table"].pop("base_path") == str(local)
                assert (theirs.pop("lock")["kind"], ours.pop("lock")["kind"]) == ("storage", "local")
            assert theirs == ours
        out = tmp_path / f"{scheme}.parquet"
        done = _hoodied("read", uri, "--output", str(out))
        assert done.returncode == 0, done.stderr
        reader = hudi.HudiTableBuilder.from_base_uri(uri).with_options(s3_env.hudi_rs_options()).build()
        expected = multiset(pa.Table.from_batches(reader.read(hudi.HudiReadOptions())))
        assert multiset(pq.read_table(out)) == expected and sum(expected.values()) > 0


def test_a_missing_table_on_s3_is_exit_code_3(s3_env: MotoServer) -> None:  # noqa: F811
    done = _hoodied("inspect", f"s3://{s3_env.new_bucket()}/nothing-here")
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and "nothing-here" in done.stderr


def _objects(bucket: str) -> dict[str, str]:
    store = S3Store.from_url(f"s3://{bucket}")
    return {o["path"]: str(o["e_tag"]) for batch in obstore.list(store) for o in batch}


def test_commands_that_write_work_on_object_store_tables(
    s3_env: MotoServer, redis_server: RedisServer, tmp_path: Path  # noqa: F811
) -> None:
    """``schedule`` and ``execute`` as real processes with nothing but the AWS variables: a clean is
    planned and run on the ``s3a://`` table, hudi-rs reads the same rows, and no local folder named
    after the URI appears. (Every service on S3: ``tests/executors/test_services_s3.py``.)"""
    local = unzip_table(require_fixture("cow/v9_txns_simple_nometa"), tmp_path / "local")
    bucket = s3_env.new_bucket()
    upload_tree(local, bucket, "t")
    uri, before = f"s3a://{bucket}/t", _objects(bucket)
    reader = hudi.HudiTableBuilder.from_base_uri(uri).with_options(s3_env.hudi_rs_options()).build()
    rows = multiset(pa.Table.from_batches(reader.read(hudi.HudiReadOptions())))
    lock = ["--lock", redis_server.url, "--clock-skew-ms", "5"]
    planned = _hoodied("schedule", "clean", uri, "--retained", "1", *lock, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    t = planned.stdout.split(" ", 1)[0]
    done = _hoodied("execute", uri, *lock, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{t} clean: "), done.stdout
    after = _objects(bucket)
    deleted = set(before) - set(after)
    assert deleted and all(k.endswith(".parquet") for k in deleted)
    new = set(after) - set(before)
    assert any(k.startswith(f"t/.hoodie/timeline/{t}") and k.endswith(".clean") for k in new)
    reader = hudi.HudiTableBuilder.from_base_uri(uri).with_options(s3_env.hudi_rs_options()).build()
    assert multiset(pa.Table.from_batches(reader.read(hudi.HudiReadOptions()))) == rows
    assert not any(p.name.startswith("s3") for p in tmp_path.iterdir())  # no local folder named "s3a:"


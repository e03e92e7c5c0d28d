"""ObjectStorage: the Storage contract on real object-store servers, and Hudi tables read from S3.

S3 runs on moto's server, Azure Blob on Azurite, both on loopback ports. GCS has no local server
with generation preconditions, so its semantics are checked on obstore's in-memory store (the
same ``object_store`` code paths: conditional create, delimiter listings, ranged reads).
"""

from __future__ import annotations

import os
import pickle
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hudi
import obstore
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from obstore.store import MemoryStore, S3Store

from hoodied.hoodie.errors import (
    FileAlreadyExistsError,
    PreconditionFailedError,
    StorageError,
    TableNotFoundError,
)
from hoodied.hoodie.object_storage import ObjectStorage, ObjectStoreSettings, ObjectVersion
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.table import HoodieTable
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import multiset
from tests.helpers.object_servers import (  # noqa: F401  (fixtures)
    AZURITE_KEY,
    S3_SECRET,
    AzuriteServer,
    MotoServer,
    azure_env,
    azurite_server,
    moto_server,
    s3_env,
)
from tests.helpers.redis_server import free_port


@pytest.fixture(params=["s3", "azure", "gcs-memory"])
def storage(request: pytest.FixtureRequest) -> ObjectStorage:
    """An empty table folder on each store."""
    if request.param == "s3":
        server: MotoServer = request.getfixturevalue("s3_env")
        return ObjectStorage.connect(f"s3://{server.new_bucket()}/warehouse/t1")
    if request.param == "azure":
        azure: AzuriteServer = request.getfixturevalue("azure_env")
        return ObjectStorage.connect(f"az://{azure.new_container()}/warehouse/t1")
    return ObjectStorage.over(MemoryStore(), "gs://lake/warehouse/t1")


def _temp_files() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("hoodied-") and n.endswith(".tmp")}


# ---------------------------------------------------------------- the Storage contract


def test_put_if_absent_is_write_once(storage: ObjectStorage) -> None:
    storage.put_if_absent(".hoodie/timeline/1.commit", b"first")
    already = r"/warehouse/t1/\.hoodie/timeline/1\.commit: already exists"
    with pytest.raises(FileAlreadyExistsError, match=already):
        storage.put_if_absent(".hoodie/timeline/1.commit", b"second")
    assert storage.read(".hoodie/timeline/1.commit") == b"first"
    # the same bytes again: a create whose response was lost and that the client retried
    storage.put_if_absent(".hoodie/timeline/1.commit", b"first")
    assert [i.name for i in storage.list(".hoodie/timeline")] == ["1.commit"]


def test_racing_creates_exactly_one_wins(storage: ObjectStorage) -> None:
    writers = 8
    for round_ in range(10):
        path = f".hoodie/timeline/{round_}.compaction.requested"
        barrier = threading.Barrier(writers)

        def create(i: int, path: str = path, barrier: threading.Barrier = barrier) -> int | None:
            barrier.wait()
            try:
                storage.put_if_absent(path, f"plan of writer {i}".encode())
                return i
            except FileAlreadyExistsError:
                return None

        with ThreadPoolExecutor(writers) as pool:
            winners = [w for w in pool.map(create, range(writers)) if w is not None]
        assert len(winners) == 1, f"round {round_}: winners {winners}"
        assert storage.read(path) == f"plan of writer {winners[0]}".encode()


def test_put_replaces_and_ranged_reads(storage: ObjectStorage) -> None:
    storage.put("a/b", b"1")
    storage.put("a/b", b"0123456789")
    assert storage.read("a/b") == b"0123456789" and storage.size("a/b") == 10
    assert storage.read_range("a/b", 2, 3) == b"234"
    assert storage.read_range("a/b", 7, 100) == b"789"
    assert storage.read_range("a/b", 10, 5) == b"" and storage.read_range("a/b", 50, 5) == b""
    with pytest.raises(StorageError, match=r"/warehouse/t1/a/nope: file not found \(read\)"):
        storage.read("a/nope")
    with pytest.raises(StorageError, match="file not found"):
        storage.read_range("a/nope", 0, 1)


def test_open_reads_parquet_row_groups_by_range(storage: ObjectStorage) -> None:
    rows = 200_000
    ids = pa.array(range(rows), pa.int64())
    table = pa.table({"id": ids, "v": pa.array([f"v{i:08d}" for i in range(rows)])})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=rows // 4, compression="none")
    data = sink.getvalue().to_pybytes()
    storage.put("p/f.parquet", data)
    with storage.open("p/f.parquet") as f:
        pf = pq.ParquetFile(f)
        assert pf.metadata.num_row_groups == 4
        assert pf.read_row_group(2).column("id").to_pylist() == list(range(rows // 2, 3 * rows // 4))
        fetched = f.raw.fetched  # type: ignore[attr-defined]
    # the footer and one row group of four, not the whole file
    assert fetched < len(data) * 0.45, (fetched, len(data))
    with storage.open("p/f.parquet") as f:
        f.seek(-4, os.SEEK_END)
        assert f.read() == b"PAR1" and f.tell() == len(data)
        f.seek(0)
        assert f.read(4) == b"PAR1"
    with pytest.raises(StorageError, match=r"p/missing\.parquet: file not found \(open\)"):
        storage.open("p/missing.parquet")


def test_listing_walk_exists_delete(storage: ObjectStorage) -> None:
    storage.put("f0", b"z")
    storage.put("p1/f1", b"x")
    storage.put("p1/p2/f2", b"yy")
    assert {(i.path, i.is_dir) for i in storage.list()} == {("f0", False), ("p1", True)}
    listed = {i.path: i for i in storage.list("p1")}
    assert {p: i.is_dir for p, i in listed.items()} == {"p1/f1": False, "p1/p2": True}
    assert listed["p1/f1"].size == 1 and listed["p1/f1"].mtime_ms > 0
    assert storage.list("missing") == [] and storage.list("p1/f1") == []
    assert [i.path for i in storage.walk()] == ["f0", "p1/f1", "p1/p2/f2"]
    assert [(i.path, i.size) for i in storage.walk("p1/p2")] == [("p1/p2/f2", 2)]
    assert storage.exists("p1") and storage.exists("p1/f1") and not storage.exists("p1/f")
    assert storage.exists("") and not storage.child("nothing-here").exists("")
    with pytest.raises(StorageError, match="is not a file"):
        storage.put("", b"x")
    child = storage.child("p1")
    assert child.base_uri == storage.base_uri + "/p1" and child.read("p2/f2") == b"yy"
    assert child.local_path() is None
    assert storage.delete("p1/f1") is True
    assert storage.delete("p1/f1") is False  # gone: S3 would accept the DELETE all the same
    assert not storage.exists("p1/f1")
    with pytest.raises(StorageError, match="not a relative path"):
        storage.read("../other/x")


def test_streamed_create_is_write_once_and_leaves_no_temp_file(storage: ObjectStorage) -> None:
    before = _temp_files()
    with storage.create_if_absent("p/base.parquet") as w:
        Path(w.path).write_bytes(b"streamed")
        assert w.commit() == 8
    assert storage.read("p/base.parquet") == b"streamed"
    with storage.create_if_absent("p/base.parquet") as w:
        Path(w.path).write_bytes(b"another")
        with pytest.raises(FileAlreadyExistsError, match="already exists"):
            w.commit()
    assert storage.read("p/base.parquet") == b"streamed"
    with pytest.raises(RuntimeError), storage.create_if_absent("p/other.parquet") as w:
        Path(w.path).write_bytes(b"half")
        raise RuntimeError("the writer failed")
    assert not storage.exists("p/other.parquet")
    assert _temp_files() == before


def test_large_streamed_file_goes_up_in_parts(s3_env: MotoServer) -> None:  # noqa: F811
    settings = ObjectStoreSettings(conditional_put_limit=1 << 20)
    storage = ObjectStorage.connect(f"s3://{s3_env.new_bucket()}/t", settings)
    payload = os.urandom(12 << 20)
    with storage.create_if_absent("p/big.parquet") as w:
        Path(w.path).write_bytes(payload)
        assert w.commit() == len(payload)
    # a multipart upload's ETag ends in -<parts>
    etag = obstore.head(S3Store.from_url(storage.base_uri.rsplit("/", 1)[0]), "t/p/big.parquet")["e_tag"]
    assert etag is not None and "-" in etag
    assert storage.read_range("p/big.parquet", 5 << 20, 16) == payload[5 << 20:(5 << 20) + 16]
    with storage.create_if_absent("p/big.parquet") as w:
        Path(w.path).write_bytes(payload)
        with pytest.raises(FileAlreadyExistsError):
            w.commit()


def test_failed_upload_leaves_no_object_and_no_temp_file(s3_env: MotoServer) -> None:  # noqa: F811
    bucket = s3_env.new_bucket()
    storage = ObjectStorage.connect(f"s3://{bucket}/t", ObjectStoreSettings(max_retries=0))
    gone = ObjectStorage.connect(f"s3://{bucket}-missing/t", ObjectStoreSettings(max_retries=0))
    before = _temp_files()
    with gone.create_if_absent("p/f.parquet") as w:
        Path(w.path).write_bytes(b"data")
        with pytest.raises(StorageError) as err:
            w.commit()
    assert "\n" not in str(err.value) and f"{bucket}-missing" in str(err.value)
    assert _temp_files() == before
    assert not storage.exists("p/f.parquet")


# ---------------------------------------------------------------- versioned reads, conditional overwrites


def test_conditional_overwrite_follows_the_version(storage: ObjectStorage) -> None:
    path = ".hoodie/.locks/table_lock.json"
    assert storage.read_versioned(path) is None
    v1 = storage.put_if_version(path, b"one", None)  # a conditional create
    with pytest.raises(PreconditionFailedError, match=r"table_lock\.json: conditional write refused.*absent"):
        storage.put_if_version(path, b"other", None)
    assert storage.read_versioned(path) == (b"one", v1)
    v2 = storage.put_if_version(path, b"two", v1)
    assert v2 != v1
    # a writer still holding v1 is refused (S3 and Azure If-Match, GCS generation match): 412 everywhere
    with pytest.raises(PreconditionFailedError, match="no longer at version"):
        storage.put_if_version(path, b"stale", v1)
    assert storage.read_versioned(path) == (b"two", v2)
    # an If-Match on an object that is gone is refused too, not turned into a create
    assert storage.delete(path)
    with pytest.raises(PreconditionFailedError):
        storage.put_if_version(path, b"revived", v2)
    assert storage.read_versioned(path) is None


def test_a_retried_conditional_write_finds_its_own_bytes(storage: ObjectStorage) -> None:
    """A write whose response was lost is retried by the client and then fails its precondition
    on our own object: equal bytes count as ours, and the caller gets the object's version."""
    v1 = storage.put_if_version("f.json", b"a", None)
    v2 = storage.put_if_version("f.json", b"b-by-me", v1)
    assert storage.put_if_version("f.json", b"b-by-me", v1) == v2
    with pytest.raises(PreconditionFailedError):
        storage.put_if_version("f.json", b"b-by-someone-else", v1)


def test_racing_conditional_overwrites_exactly_one_wins(storage: ObjectStorage) -> None:
    writers = 8
    version = storage.put_if_version("counter", b"0", None)
    for round_ in range(1, 6):
        barrier = threading.Barrier(writers)

        def bump(
            i: int, base: ObjectVersion = version, barrier: threading.Barrier = barrier, round_: int = round_
        ) -> ObjectVersion | None:
            barrier.wait()
            try:
                return storage.put_if_version("counter", f"{round_} by {i}".encode(), base)
            except PreconditionFailedError:
                return None

        with ThreadPoolExecutor(writers) as pool:
            results = list(pool.map(bump, range(writers)))
        winners = [i for i, r in enumerate(results) if r is not None]
        assert len(winners) == 1, results
        found = storage.read_versioned("counter")
        assert found is not None
        data, version = found
        assert data == f"{round_} by {winners[0]}".encode() and version == results[winners[0]]


# ---------------------------------------------------------------- errors, URIs, pickling


def test_missing_bucket_is_one_clear_line(s3_env: MotoServer) -> None:  # noqa: F811
    with pytest.raises(StorageError) as err:
        storage_for("s3://no-such-bucket-hoodied/t", ObjectStoreSettings(max_retries=0))
    message = str(err.value)
    assert "\n" not in message and "no-such-bucket-hoodied" in message and "list" in message
    assert "NoSuchBucket" in message and S3_SECRET not in message


def test_wrong_azure_key_is_permission_denied(
    azure_env: AzuriteServer, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    container = azure_env.new_container()
    ObjectStorage.connect(f"az://{container}/t").put("x", b"1")
    wrong = "d3Jvbmcta2V5LW5vdC10aGUtYWNjb3VudHM="
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", wrong)
    storage = ObjectStorage.connect(f"az://{container}/t", ObjectStoreSettings(max_retries=0))
    with pytest.raises(StorageError, match="permission denied") as err:
        storage.read("x")
    message = str(err.value)
    assert "\n" not in message and container in message
    assert wrong not in message and AZURITE_KEY not in message


def test_unreachable_endpoint_is_a_retryable_storage_error(s3_env: MotoServer) -> None:  # noqa: F811
    nobody = f"http://127.0.0.1:{free_port()}"
    settings = ObjectStoreSettings(endpoint=nobody, max_retries=1, retry_timeout_s=5)
    storage = ObjectStorage.connect("s3://lake/t", settings)
    with pytest.raises(StorageError) as err:
        storage.read("x")
    assert err.value.retryable and type(err.value) is StorageError and "\n" not in str(err.value)


def test_storage_for_object_uris(s3_env: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    bucket = s3_env.new_bucket()
    ObjectStorage.connect(f"s3://{bucket}/t").put(".hoodie/hoodie.properties", b"x")
    for uri in (f"s3://{bucket}/t", f"s3a://{bucket}/t/"):
        s = storage_for(uri)
        assert isinstance(s, ObjectStorage) and s.base_uri == uri.rstrip("/")
        assert s.read(".hoodie/hoodie.properties") == b"x"
    with pytest.raises(TableNotFoundError, match=rf"s3://{bucket}/other: no such path"):
        storage_for(f"s3://{bucket}/other")
    with pytest.raises(StorageError, match="HDFS is not supported"):
        storage_for("hdfs://namenode:8020/warehouse/t")
    with pytest.raises(StorageError, match="'..' segments"):
        storage_for(f"s3://{bucket}/t/../u")
    # endpoint, region and plain http from the daemon's settings instead of the environment
    for key in ("AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP", "AWS_REGION"):
        monkeypatch.delenv(key)
    settings = ObjectStoreSettings(endpoint=s3_env.endpoint, region="us-east-1", allow_http=True)
    assert storage_for(f"s3://{bucket}/t", settings).read(".hoodie/hoodie.properties") == b"x"


def test_pickles_without_secrets(s3_env: MotoServer, azure_env: AzuriteServer) -> None:  # noqa: F811
    bucket, container = s3_env.new_bucket(), azure_env.new_container()
    for storage, secret in (
        (ObjectStorage.connect(f"s3://{bucket}/t"), S3_SECRET),
        (ObjectStorage.connect(f"abfss://{container}@devstoreaccount1.dfs.core.windows.net/t"), AZURITE_KEY),
    ):
        storage.put("p/f", b"1")
        blob = pickle.dumps(storage.child("p"))
        assert secret.encode() not in blob and b"secret" not in blob.lower()
        again = pickle.loads(blob)
        assert again.base_uri == storage.base_uri + "/p" and again.read("f") == b"1"
    with pytest.raises(TypeError, match="does not pickle"):
        pickle.dumps(ObjectStorage.over(MemoryStore(), "gs://lake/t"))


# ---------------------------------------------------------------- Hudi tables on S3


def _upload(root: Path, store: S3Store, prefix: str) -> int:
    count = 0
    for path in sorted(root.rglob("*")):
        if path.is_file():
            obstore.put(store, f"{prefix}/{path.relative_to(root).as_posix()}", path.read_bytes())
            count += 1
    return count


@pytest.mark.parametrize("fid", ["cow/v8_nonpartitioned", "mor/avro/v8_trips_8i3u1d"])
def test_hudi_table_reads_the_same_rows_from_s3(fid: str, s3_env: MotoServer, tmp_path: Path) -> None:  # noqa: F811
    local = unzip_table(require_fixture(fid), tmp_path)
    bucket = s3_env.new_bucket()
    assert _upload(local, S3Store.from_url(f"s3://{bucket}"), f"warehouse/{local.name}") > 0
    uri = f"s3://{bucket}/warehouse/{local.name}"

    on_s3 = HoodieTable.open(uri)
    assert isinstance(on_s3.storage, ObjectStorage) and on_s3.storage.base_uri == uri
    expected = multiset(HoodieTable.open(str(local)).to_arrow())
    assert expected, "the fixture has rows"
    for listing in ("storage", "auto"):
        assert multiset(on_s3.to_arrow(listing=listing)) == expected

    builder = hudi.HudiTableBuilder.from_base_uri(uri).with_options(s3_env.hudi_rs_options())
    batches = builder.build().read(hudi.HudiReadOptions())
    assert multiset(pa.Table.from_batches(batches)) == expected

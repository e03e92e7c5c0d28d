"""LocalStorage: write-once creates, atomic replaces, listing, and what it refuses."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from hoodied.hoodie.errors import FileAlreadyExistsError, StorageError, TableNotFoundError
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.storage_factory import storage_for


def test_put_if_absent_is_write_once_and_leaves_no_temp_files(tmp_path: Path) -> None:
    s = LocalStorage(str(tmp_path))
    s.put_if_absent(".hoodie/timeline/1.commit", b"first")
    with pytest.raises(FileAlreadyExistsError, match="already exists"):
        s.put_if_absent(".hoodie/timeline/1.commit", b"second")
    assert s.read(".hoodie/timeline/1.commit") == b"first"
    assert os.listdir(tmp_path / ".hoodie/timeline") == ["1.commit"]


_WRITE_PAST_THE_LIMIT = """
import os, resource, signal, sys
from hoodied.hoodie.errors import StorageError
from hoodied.hoodie.storage import LocalStorage
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
s = LocalStorage(sys.argv[1])
for call in (s.put_if_absent, s.put):
    try:
        call("t/1.commit", b"x" * 100_000)
    except StorageError as exc:
        print(type(exc).__name__, exc)
    else:
        sys.exit("the write went through")
print(sorted(os.listdir(os.path.join(sys.argv[1], "t"))))
"""


def test_a_write_the_disk_refuses_leaves_no_temp_file(tmp_path: Path) -> None:
    """A write that fails part-way (a full disk, here a file-size limit) removes its temp file."""
    done = subprocess.run([sys.executable, "-c", _WRITE_PAST_THE_LIMIT, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("StorageError ") for line in lines[:2]), lines
    assert lines[2] == "[]"  # neither the target nor a temp file


def test_put_replaces_atomically(tmp_path: Path) -> None:
    s = LocalStorage(str(tmp_path))
    s.put("a/b", b"1")
    s.put("a/b", b"22")
    assert s.read("a/b") == b"22" and s.size("a/b") == 2
    assert s.read_range("a/b", 1, 5) == b"2"
    assert os.listdir(tmp_path / "a") == ["b"]


def test_listing_walk_delete(tmp_path: Path) -> None:
    s = LocalStorage(str(tmp_path))
    s.put("p1/f1", b"x")
    s.put("p1/p2/f2", b"yy")
    assert sorted(i.path for i in s.walk()) == ["p1/f1", "p1/p2/f2"]
    assert {i.name: i.is_dir for i in s.list("p1")} == {"f1": False, "p2": True}
    assert s.list("missing") == []
    assert s.delete("p1/f1") is True and s.delete("p1/f1") is False
    assert not s.exists("p1/f1")


def test_refuses_paths_outside_the_root(tmp_path: Path) -> None:
    s = LocalStorage(str(tmp_path))
    for bad in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(StorageError, match="not a relative path"):
            s.read(bad)


def test_missing_file_is_a_one_line_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="file not found"):
        LocalStorage(str(tmp_path)).read("nope")


def test_storage_for_uris(tmp_path: Path) -> None:
    assert storage_for(f"file://{tmp_path}").base_uri == str(tmp_path)
    with pytest.raises(TableNotFoundError, match="no such path"):
        storage_for(str(tmp_path / "missing"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(TableNotFoundError, match="not a folder"):
        storage_for(str(tmp_path / "f"))
    with pytest.raises(StorageError, match="HDFS is not supported"):
        storage_for("hdfs://nn/t")


def test_pickles_for_spark_workers(tmp_path: Path) -> None:
    s = pickle.loads(pickle.dumps(LocalStorage(str(tmp_path))))
    s.put("x", b"1")
    assert s.read("x") == b"1"


def test_writer_instant_of_data_file_names() -> None:
    from hoodied.hoodie.filenames import writer_instant

    base = "3e93c8a9-1b2c-4d5e-8f90-123456789abc-0_0-236-590_20260307162618152.parquet"
    log = ".3e93c8a9-1b2c-4d5e-8f90-123456789abc-0_20260307162620000.log.1_0-1-2"
    assert writer_instant(base, 6) == writer_instant(base, 9) == "20260307162618152"
    assert writer_instant(log, 9) == "20260307162620000"
    assert writer_instant(log, 6) is None  # v6 log names carry the slice's base instant
    assert writer_instant(".hoodie_partition_metadata", 9) is None


def test_create_if_absent_streams_then_links_once(tmp_path: Path) -> None:
    s = LocalStorage(str(tmp_path))
    with s.create_if_absent("p/big.parquet") as out:
        with open(out.path, "wb") as f:
            f.write(b"x" * 1000)
        assert not (tmp_path / "p/big.parquet").exists()  # invisible until committed
        assert out.commit() == 1000
    assert s.read("p/big.parquet") == b"x" * 1000
    with s.create_if_absent("p/big.parquet") as out, open(out.path, "wb") as f:
        f.write(b"y")
        f.flush()
        with pytest.raises(FileAlreadyExistsError):
            out.commit()
    assert s.read("p/big.parquet") == b"x" * 1000
    with pytest.raises(RuntimeError), s.create_if_absent("p/other.parquet") as out:
        with open(out.path, "wb") as f:
            f.write(b"partial")
        raise RuntimeError("writer died")
    assert os.listdir(tmp_path / "p") == ["big.parquet"]  # no temp file, no partial file

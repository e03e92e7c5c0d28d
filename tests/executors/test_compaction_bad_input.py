"""Compaction on bad input: one clear error, the table untouched, and a retry that works.

Through the CLI (``hoodied execute``, local Spark in this process): a plan naming a missing log
file and a corrupt base file (truncated; garbage) exit 4 (``HoodieFormatError``) with one
line naming the file; a log file whose schema changed a column's type in a way Hudi rejects
(double -> long is no promotion) exits 5 (``UnsupportedTableError``). None completes the
instant, hudi-rs reads what it read before, and after the fix the re-run completes. A column
added by a later write (nullable) is accepted: the compacted base file has the wider schema
and the older rows hold nulls there.

A Spark Python worker killed with SIGKILL in the middle of its task (``HOODIED_TEST_PAUSE_AT
= task:0`` pauses it after its marker, before its file) fails the job: nothing a reader
counts changes, and the re-run rolls the attempt back and completes.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from hoodied.executors.engine import Session, spark_session
from hoodied.hoodie.basefile import avro_schema_json
from hoodied.hoodie.demo.writer import TableSpec, TableWriter, create_table
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction
from hoodied.service.cli.main import cli
from tests.helpers.mor_tables import SCHEMA, hudi_rs_rows, written_mor_table

PROJECT = Path(__file__).resolve().parents[2]
SKEW = ["--clock-skew-ms", "5"]
HEARTBEAT = ["--heartbeat-interval-ms", "100"]
EVERYTHING = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)


@pytest.fixture(scope="module")
def spark() -> Iterator[Session]:
    with spark_session("local[2]") as session:
        yield session


def _schedule(root: Path) -> tuple[str, list[dict[str, Any]]]:
    storage = LocalStorage(str(root))
    inst, result = schedule_compaction(storage, InProcessLock(storage.base_uri), EVERYTHING,
                                       time_settings=TimeSettings(max_expected_clock_skew_ms=5))
    assert inst is not None, result.reason
    timeline = Timeline.load(storage, load_table_config(storage))
    plan = timeline.read_plan(timeline.get(inst.requested_time))  # type: ignore[arg-type]
    assert plan is not None
    return inst.requested_time, plan["operations"]


def _state(root: Path, t: str) -> State:
    storage = LocalStorage(str(root))
    inst = Timeline.load(storage, load_table_config(storage)).get(t)
    assert inst is not None
    return inst.state


def _execute(root: Path) -> Any:
    return CliRunner().invoke(cli, ["execute", str(root), *HEARTBEAT, *SKEW])


def _fails(root: Path, t: str, code: int, message: str) -> None:
    out = _execute(root)
    assert out.exit_code == code, out.output
    errors = [line for line in out.stderr.splitlines() if line.startswith("hoodied: error: ")]
    assert len(errors) == 1 and message in errors[0], out.stderr
    assert _state(root, t) is not State.COMPLETED  # files of other tasks may be there, uncommitted


def _completes(root: Path, t: str, before: Any) -> None:
    time.sleep(0.3)  # the failed attempt's heartbeat (100 ms) expires
    out = _execute(root)
    assert out.exit_code == 0, out.output
    assert f"{t} compaction: " in out.stdout
    assert _state(root, t) is State.COMPLETED
    assert hudi_rs_rows(root) == before == hudi_rs_rows(root, read_optimized=True)


def test_missing_log_file(tmp_path: Path, spark: Session) -> None:
    root = tmp_path / "t"
    written_mor_table(root)
    before = hudi_rs_rows(root)
    t, ops = _schedule(root)
    log_file = root / ops[0]["partitionPath"] / ops[0]["deltaFilePaths"][0]
    moved = log_file.rename(tmp_path / "moved")
    _fails(root, t, 4, f"plan names log file {log_file.name}, which is missing")
    assert _state(root, t) is State.REQUESTED
    assert hudi_rs_rows(root) != before  # hudi-rs misses the log file too ...
    moved.rename(log_file)
    assert hudi_rs_rows(root) == before  # ... and nothing else changed
    _completes(root, t, before)


def test_a_bad_plan_is_refused_before_spark_starts(tmp_path: Path) -> None:
    """The inputs are checked before a Spark session is started: with an engine that cannot even
    be reached, the bad plan is what the command reports (exit 4), not the engine (exit 6)."""
    root = tmp_path / "t"
    written_mor_table(root)
    t, ops = _schedule(root)
    (root / ops[0]["partitionPath"] / ops[0]["deltaFilePaths"][0]).unlink()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = f"sc://127.0.0.1:{port}"
    out = CliRunner().invoke(cli, ["execute", str(root), "--spark", engine, *HEARTBEAT, *SKEW])
    assert out.exit_code == 4, out.output
    assert "which is missing" in out.stderr and "unavailable" not in out.stderr
    assert _state(root, t) is State.REQUESTED


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_corrupt_base_file(tmp_path: Path, spark: Session, damage: str) -> None:
    root = tmp_path / "t"
    written_mor_table(root)
    before = hudi_rs_rows(root)
    t, ops = _schedule(root)
    op = next(o for o in ops if o.get("dataFilePath"))
    base = root / op["partitionPath"] / op["dataFilePath"]
    good = base.read_bytes()
    base.write_bytes(good[: len(good) // 2] if damage == "truncated" else b"PAR1" + os.urandom(len(good)))
    _fails(root, t, 4, f"{op['dataFilePath']}: cannot read the base file")
    base.write_bytes(good)
    assert hudi_rs_rows(root) == before  # what other tasks wrote does not count
    _completes(root, t, before)


def _evolving_table(root: Path) -> TableWriter:
    spec = TableSpec("trips", SCHEMA, "id", "city", "ts", TableType.MERGE_ON_READ, 9)
    writer = create_table(LocalStorage(str(root)), spec, max_file_rows=25)
    rows = [{"id": f"k{i:03d}", "ts": 1, "city": ("sf", "ny")[i % 2], "v": i + 0.5} for i in range(60)]
    writer.insert(pa.Table.from_pylist(rows, schema=SCHEMA))
    return writer


def _evolve(writer: TableWriter, schema: pa.Schema) -> None:
    """The next writes of ``writer`` carry ``schema`` (as a Hudi writer with a new schema would)."""
    writer.spec = dataclasses.replace(writer.spec, schema=schema)
    writer._schema_json = avro_schema_json(schema, "trips", meta_fields=False)  # noqa: SLF001
    writer._log_schema_json = avro_schema_json(schema, "trips", meta_fields=True)  # noqa: SLF001


def test_added_nullable_column_is_accepted(tmp_path: Path, spark: Session) -> None:
    root = tmp_path / "t"
    writer = _evolving_table(root)
    wider = SCHEMA.append(pa.field("note", pa.string()))
    _evolve(writer, wider)
    updates = [{"id": f"k{i:03d}", "ts": 2, "city": ("sf", "ny")[i % 2], "v": 9.0, "note": f"n{i}"}
               for i in range(0, 60, 3)]
    writer.upsert(pa.Table.from_pylist(updates, schema=wider))
    before = hudi_rs_rows(root)
    t, ops = _schedule(root)
    out = _execute(root)
    assert out.exit_code == 0, out.output
    assert hudi_rs_rows(root) == before
    files = sorted(root.rglob(f"*_{t}.parquet"))
    assert len(files) == len(ops)
    data = pa.concat_tables([pq.read_table(f) for f in files])
    assert data.schema.names[-1] == "note" and data.num_rows == 60
    notes = dict(zip(data.column("id").to_pylist(), data.column("note").to_pylist(), strict=True))
    assert notes == {f"k{i:03d}": (f"n{i}" if i % 3 == 0 else None) for i in range(60)}


def test_type_change_that_is_no_promotion_is_refused(tmp_path: Path, spark: Session) -> None:
    root = tmp_path / "t"
    writer = _evolving_table(root)
    narrower = pa.schema([f if f.name != "v" else pa.field("v", pa.int64()) for f in SCHEMA])
    _evolve(writer, narrower)
    updates = [{"id": f"k{i:03d}", "ts": 2, "city": ("sf", "ny")[i % 2], "v": 7} for i in range(0, 60, 3)]
    writer.upsert(pa.Table.from_pylist(updates, schema=narrower))
    t, _ = _schedule(root)
    _fails(root, t, 5, "column 'v': type change double -> int64 is not a promotion Hudi allows")
    assert not Timeline.load(LocalStorage(str(root)), load_table_config(LocalStorage(str(root)))).completed(
        (Action.COMPACTION, Action.COMMIT)
    )


def test_python_worker_killed_mid_task(tmp_path: Path, spark: Session) -> None:
    root = tmp_path / "t"
    written_mor_table(root)
    before = hudi_rs_rows(root)
    t, ops = _schedule(root)
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=str(PROJECT), HOODIED_TEST_PAUSE_AT="task:0",
               HOODIED_TEST_PAUSE_READY=str(ready), HOODIED_TEST_PAUSE_S="60")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hoodied.service.cli", "execute", str(root),
         "--spark", "local[1]", *HEARTBEAT, *SKEW],
        env=env, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() or not ready.read_text().endswith("\n"):
            assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, "no task reached the pause point"
            time.sleep(0.05)
        worker = int(ready.read_text().split()[0])
        assert worker != proc.pid
        markers = list((root / ".hoodie" / ".temp" / t).rglob("*.marker.*"))
        assert markers  # the task is between its marker and its file
        os.kill(worker, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1, err.decode()[-3000:]
    errors = [line for line in err.decode().splitlines() if line.startswith("hoodied: error: ")]
    assert len(errors) == 1 and "compaction" in errors[0], err.decode()[-3000:]
    assert _state(root, t) is State.INFLIGHT
    assert hudi_rs_rows(root) == before  # nothing a reader counts
    _completes(root, t, before)
    assert len(list(root.rglob(f"*_{t}.parquet"))) == len(ops)


def test_the_table_codec_is_checked_before_spark_and_then_written(tmp_path: Path, spark: Session) -> None:
    """A codec the table's config names and hoodied cannot write is refused with one line before
    anything (exit 5); one it can write is the codec of every new base file."""
    root = tmp_path / "t"
    written_mor_table(root)
    before = hudi_rs_rows(root)
    t, _ = _schedule(root)
    props = root / ".hoodie" / "hoodie.properties"
    original = props.read_text()
    props.write_text(original + "hoodie.parquet.compression.codec=lzo\n")
    _fails(root, t, 5, "hoodie.parquet.compression.codec='lzo'")
    assert _state(root, t) is State.REQUESTED
    props.write_text(original + "hoodie.parquet.compression.codec=snappy\n")
    _completes(root, t, before)
    written = list(root.rglob(f"*_{t}.parquet"))
    assert written
    for path in written:
        meta = pq.ParquetFile(path).metadata
        assert {meta.row_group(0).column(c).compression for c in range(meta.num_columns)} == {"SNAPPY"}

"""Apache Hudi itself as the tests' peer: its released Spark bundles write, read and check tables
beside hoodied.

The lane's environment is installed by ``tests/hudi/setup.sh`` into ``HOODIED_HUDI_HOME`` (default
``~/.cache/hoodied/hudi-lane``): a Python environment with a pyspark that Hudi's bundles support and
one bundle jar per Hudi release. Where it is missing the lane's tests are skipped with one line,
and fail with that line under ``CI=true`` (CI must run them).

``HudiPeer`` is one long-lived process of that environment (``hudi_peer_main``: one Spark session with
one Hudi bundle), asked over its standard streams; ``writer_options`` are the settings of a Hudi
writer running beside an external table-service process (the writer settings the README gives);
``Oracle`` knows the rows the writer's upserts and deletes must leave.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parents[2]
HOME = Path(os.environ.get("HOODIED_HUDI_HOME", Path.home() / ".cache" / "hoodied" / "hudi-lane"))
PEER_MAIN = Path(__file__).with_name("hudi_peer_main.py")

#: The table version each Hudi release writes (and the lane pins with ``hoodie.write.table.version``);
#: the releases are those ``tests/hudi/setup.sh`` installs.
TABLE_VERSION = {"0.15.0": 6, "1.0.2": 8, "1.1.1": 9}
RELEASES = list(TABLE_VERSION)
FS_LOCK = "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"
COLUMNS = ["id", "part", "ts", "v", "note"]


class PeerError(AssertionError):
    """Hudi answered a request with an error (its first line; ``detail`` has the rest)."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


def lane_home() -> Path:
    """The installed lane, or a skip (a failure under ``CI=true``) with the one line that says why."""
    if not (HOME / "READY").is_file():
        reason = f"Apache Hudi lane not installed in {HOME}: run bash tests/hudi/setup.sh (or tests/run.sh)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return HOME


def _bundle(release: str) -> Path:
    jar = lane_home() / "jars" / f"hudi-spark3.5-bundle_2.12-{release}.jar"
    if not jar.is_file():
        pytest.fail(f"Apache Hudi lane: {jar.name} missing in {jar.parent}: run bash tests/hudi/setup.sh",
                    pytrace=False)
    return jar


def spark_conf(release: str, scratch: Path) -> dict[str, str]:
    """A small local session with Hudi's required Spark settings (serializer, extension, catalog)."""
    return {
        "spark.master": "local[2]",
        "spark.jars": str(_bundle(release)),
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
        "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.driver.memory": "1g",
        "spark.sql.warehouse.dir": str(scratch / "warehouse"),
        # C1 only: the peer's short jobs spend more on the C2 compiler than they gain from it
        "spark.driver.extraJavaOptions": f"-XX:TieredStopAtLevel=1 -Dderby.system.home={scratch / 'derby'}",
    }


class HudiPeer:
    """One Hudi release in its own Spark session, kept for many requests (one JVM start)."""

    def __init__(self, release: str, scratch: Path) -> None:
        self.release = release
        self.table_version = TABLE_VERSION[release]
        scratch.mkdir(parents=True, exist_ok=True)
        self.log_path = scratch / f"hudi-{release}.log"
        conf = spark_conf(release, scratch)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_", "HOODIED_"))}
        python = str(lane_home() / "venv" / "bin" / "python")
        env["PYSPARK_PYTHON"] = python
        self._log = self.log_path.open("w")
        self._proc = subprocess.Popen(
            [python, str(PEER_MAIN), json.dumps(conf)], cwd=scratch, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
        )
        ready = self._answer()
        assert "ready" in ready, ready

    def _answer(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise AssertionError(f"the Hudi {self.release} peer exited ({self._proc.wait()}); "
                                 f"its log: {self.log_path}\n{self.log_tail()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def log_tail(self) -> str:
        """The end of the peer's log without the JVM's stack frames."""
        self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(line for line in text if not line.lstrip().startswith("at "))[-6000:]

    def ask(self, request: str, **fields: Any) -> Any:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"request": request, **fields}) + "\n")
        self._proc.stdin.flush()
        answer = self._answer()
        if "error" in answer:
            raise PeerError(f"Hudi {self.release}: {answer['error']}", answer.get("detail", ""))
        return answer["ok"]

    def write(
        self, path: Path, records: list[dict[str, Any]], options: dict[str, str], operation: str
    ) -> None:
        self.ask("write", path=str(path), records=records,
                 options={**options, "hoodie.datasource.write.operation": operation})

    def read(self, path: Path, options: dict[str, str] | None = None, where: str | None = None,
             columns: list[str] | None = None) -> list[list[Any]]:
        rows: list[list[Any]] = self.ask("read", path=str(path), options=options or {}, where=where,
                                         columns=columns or COLUMNS)
        return rows

    def sql(self, statement: str) -> list[list[Any]]:
        rows: list[list[Any]] = self.ask("sql", sql=statement)
        return rows

    def register(self, name: str, path: Path) -> None:
        self.ask("register", name=name, path=str(path))

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self.ask("stop")
                self._proc.wait(timeout=60)
            except (AssertionError, OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout, self._log):
            if stream is not None:
                stream.close()


def peer(release: str, scratch: Path) -> Iterator[HudiPeer]:
    """For a module-scoped fixture: the peer for the module's tests, stopped after them."""
    p = HudiPeer(release, scratch)
    try:
        yield p
    finally:
        p.close()


def writes_metadata_table(release: str) -> bool:
    """Whether the lane's writer of ``release`` keeps a metadata table: hoodied writes metadata tables
    of table versions 8 and 9 only, and refuses to rewrite a version-6 table that has one."""
    return TABLE_VERSION[release] >= 8


def writer_options(
    release: str, name: str, table_type: str, *, metadata: bool | None = None, **extra: str
) -> dict[str, str]:
    """A Hudi Spark writer beside an external table-service process: optimistic concurrency with the
    file-system lock, failed writes rolled back lazily, its own table services off, the table version
    pinned to the release's, and (``metadata``, by default ``writes_metadata_table``) a metadata table
    with column stats, a record index and, from version 8, partition stats."""
    version = TABLE_VERSION[release]
    metadata = writes_metadata_table(release) if metadata is None else metadata
    options = {
        "hoodie.table.name": name,
        "hoodie.datasource.write.table.type": table_type,
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "part",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.metadata.enable": str(metadata).lower(),
        "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
        "hoodie.cleaner.policy.failed.writes": "LAZY",
        "hoodie.write.lock.provider": FS_LOCK,
        "hoodie.compact.inline": "false",
        "hoodie.compact.schedule.inline": "false",
        "hoodie.clustering.inline": "false",
        "hoodie.clustering.schedule.inline": "false",
        "hoodie.clustering.async.enabled": "false",
        "hoodie.clean.automatic": "false",
        "hoodie.archive.automatic": "false",
        "hoodie.upsert.shuffle.parallelism": "2",
        "hoodie.insert.shuffle.parallelism": "2",
        "hoodie.delete.shuffle.parallelism": "2",
        "hoodie.bulkinsert.shuffle.parallelism": "2",
    }
    if metadata:
        # 1.1 renamed the record index's keys, and their old names no longer turn the index on
        index = "hoodie.metadata." + ("global.record.level.index" if version >= 9 else "record.index")
        options.update({"hoodie.metadata.index.column.stats.enable": "true", f"{index}.enable": "true",
                        f"{index}.min.filegroup.count": "2", f"{index}.max.filegroup.count": "2"})
    if version >= 8:
        options["hoodie.write.table.version"] = str(version)
        options["hoodie.write.auto.upgrade"] = "false"
        options["hoodie.metadata.index.partition.stats.enable"] = str(metadata).lower()
    options.update(extra)
    return options


def row_order(row: list[Any]) -> list[str]:
    """The order rows are compared in (the peer sorts its answers the same way)."""
    return [str(v) for v in row]


@dataclass
class Oracle:
    """The rows a writer's upserts and deletes leave, by the precombine rule (the larger ``ts`` wins;
    on equal ``ts`` the later write, as Hudi's default event-time ordering of a later commit)."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)

    def upsert(self, records: Iterable[dict[str, Any]]) -> None:
        for r in records:
            old = self.rows.get(r["id"])
            if old is None or r["ts"] >= old["ts"]:
                self.rows[r["id"]] = dict(r)

    def delete(self, records: Iterable[dict[str, Any]]) -> None:
        for r in records:
            self.rows.pop(r["id"], None)

    def snapshot(self) -> list[list[Any]]:
        return sorted(([r[c] for c in COLUMNS] for r in self.rows.values()), key=row_order)

    def copy(self) -> Oracle:
        return Oracle({k: dict(v) for k, v in self.rows.items()})


def metadata_partitions(table: Path) -> set[str]:
    """The metadata-table partitions ``hoodie.properties`` lists as built."""
    for line in (table / ".hoodie" / "hoodie.properties").read_text().splitlines():
        if line.startswith("hoodie.table.metadata.partitions="):
            return set(filter(None, line.split("=", 1)[1].split(",")))
    return set()

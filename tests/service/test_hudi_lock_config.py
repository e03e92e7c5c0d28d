"""Hudi's lock keys in the daemon's settings: merged per table, checked at start-up, built into locks.

The keys are read by the lock backends' own ``from_hudi_keys`` (the code the ``--lock`` URLs go
through, pinned here to give the same lock); nothing here connects to a lock service.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hoodied.hoodie.errors import LockConfigError
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.storage import LocalStorage
from hoodied.service.config import ConfigError, load_config
from hoodied.service.dynamodb_lock import DynamoDBLock, DynamoDBLockConfig
from hoodied.service.fs_lock import FileSystemLock
from hoodied.service.hudi_lock import (
    HudiLockProvider,
    describe_hudi_lock,
    hudi_lock_problems,
    hudi_table_lock,
)
from hoodied.service.storage_lock import StorageLockSettings
from hoodied.service.zookeeper_lock import ZooKeeperLock, ZooKeeperLockConfig

PKG = "org.apache.hudi.client.transaction.lock."
PROVIDER = "hoodie.write.lock.provider"
LOCK_KEY = "hoodie.write.lock.zookeeper.lock_key"
ZK = {
    "hoodie.write.lock.provider": PKG + "ZookeeperBasedLockProvider",
    "hoodie.write.lock.zookeeper.url": "zk1:2181,zk2:2181",
    "hoodie.write.lock.zookeeper.base_path": "/hudi/locks",
}
BASE = LockSettings(wait_ms=10_000, retries=2, retry_interval_ms=1_000, lease_ms=60_000)


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HOODIED_* setting of the machine running the tests leaks into them."""
    for name in list(os.environ):
        if name.startswith("HOODIED_"):
            monkeypatch.delenv(name)


def _table(tmp_path: Path, name: str = "trips") -> LocalStorage:
    table = tmp_path / name
    (table / ".hoodie").mkdir(parents=True)
    (table / ".hoodie" / "hoodie.properties").write_text(
        f"hoodie.table.name={name}\nhoodie.table.type=COPY_ON_WRITE\n"
    )
    return LocalStorage(str(table))


def _problems(overrides: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    return info.value.problems


def test_defaults_and_table_entries_merge_key_by_key(tmp_path: Path) -> None:
    settings = load_config(overrides={
        "defaults": {"hudi_lock": {**ZK, "hoodie.write.lock.wait_time_ms": 5000}},
        "tables": [
            str(tmp_path / "a"),
            {"path": str(tmp_path / "b"), "policy": {"hudi_lock": {LOCK_KEY: "b"}}},
            {"path": str(tmp_path / "c"), "policy": {"hudi_lock": {PROVIDER: ""}}},
        ],
    })
    a, b, c = (t.policy.hudi_lock for t in settings.tables)
    assert a == {**ZK, "hoodie.write.lock.wait_time_ms": "5000"}  # YAML numbers read as Hudi's text
    assert b == {**a, LOCK_KEY: "b"}
    assert describe_hudi_lock(c) is None  # an empty provider: the daemon's own lock guards the table
    assert hudi_table_lock(c, _table(tmp_path), BASE) is None
    assert load_config(overrides={}).defaults.hudi_lock == {}


def test_start_up_names_what_is_missing_or_wrong(tmp_path: Path) -> None:
    zk_without_url = {k: v for k, v in ZK.items() if not k.endswith(".url")}
    hive = "org.apache.hudi.hive.transaction.lock.HiveMetastoreBasedLockProvider"
    entries = [
        (str(tmp_path / "a"), zk_without_url),
        (str(tmp_path / "b"), {PROVIDER: PKG + "InProcessLockProvider"}),
        (str(tmp_path / "c"), {**ZK, "hoodie.write.lock.zookeper.lock_key": "x"}),
        (str(tmp_path / "d"), {"hoodie.write.lock.zookeeper.url": "zk:2181"}),
        (str(tmp_path / "e"), {PROVIDER: hive}),
        ("s3://bucket/f", {PROVIDER: "FileSystemBasedLockProvider"}),
        (str(tmp_path / "g"), {PROVIDER: "StorageBasedLockProvider"}),
    ]
    problems = _problems({"tables": [{"path": p, "policy": {"hudi_lock": keys}} for p, keys in entries]})
    text = "\n".join(problems)
    assert len(problems) == 7, text
    assert "tables.0.policy.hudi_lock" in problems[0]
    assert "hoodie.write.lock.zookeeper.url is required by ZookeeperBasedLockProvider" in problems[0]
    assert "InProcessLockProvider excludes the threads of one JVM only" in problems[1]
    assert "hoodie.write.lock.zookeper.lock_key: not a Hudi lock key hoodied knows " \
           "(did you mean hoodie.write.lock.zookeeper.lock_key?)" in problems[2]
    assert "hoodie.write.lock.provider is required when other Hudi lock keys are given" in problems[3]
    assert "HiveMetastoreBasedLockProvider: not a lock provider hoodied speaks" in problems[4]
    assert "FileSystemBasedLockProvider needs a local table" in problems[5]
    assert "where StorageBasedLockProvider works" in problems[6]


def test_values_are_checked_by_the_providers_own_rules() -> None:
    def one(keys: dict[str, str]) -> str:
        problems = hudi_lock_problems(keys)
        assert len(problems) == 1, problems
        return problems[0]

    assert hudi_lock_problems(ZK) == []
    assert "session_timeout_ms='soon': timeouts must be whole milliseconds" in one(
        {**ZK, "hoodie.write.lock.zookeeper.session_timeout_ms": "soon"})
    assert "/hudi//<hoodie.table.name>' has an empty node name" in one(
        {**ZK, "hoodie.write.lock.zookeeper.base_path": "/hudi/"})
    # the provider connects to the url only: a port elsewhere would be a different server
    assert "put the port in the url" in one(
        {**ZK, "hoodie.write.lock.zookeeper.url": "zk1", "hoodie.write.lock.zookeeper.port": "2182"})
    assert hudi_lock_problems({**ZK, "hoodie.write.lock.zookeeper.url": "zk1",
                               "hoodie.write.lock.zookeeper.port": "2181"}) == []
    assert "hoodie.write.lock.num_retries='many' is not a whole number" in one(
        {**ZK, "hoodie.write.lock.num_retries": "many"})
    dynamo = {"hoodie.write.lock.provider": "org.apache.hudi.aws.transaction.lock.DynamoDBBasedLockProvider"}
    assert hudi_lock_problems(dynamo) == []  # table hudi_locks, partition key = the table name
    assert "billing mode 'FREE'" in one({**dynamo, "hoodie.write.lock.dynamodb.billing_mode": "free"})
    storage = {"hoodie.write.lock.provider": PKG + "StorageBasedLockProvider"}
    assert "at least 10 x the renew interval" in one(
        {**storage, "hoodie.write.lock.storage.validity.timeout.secs": "60"})
    fs = {"hoodie.write.lock.provider": PKG + "FileSystemBasedLockProvider"}
    assert "hoodie.write.lock.filesystem.expire='soon' must be a whole number of minutes" in one(
        {**fs, "hoodie.write.lock.filesystem.expire": "soon"})
    # keys of another provider (inherited from defaults) are not problems
    assert hudi_lock_problems({**ZK, **fs}) == []


def test_the_writers_clock_skew_must_not_exceed_the_daemons(tmp_path: Path) -> None:
    keys = {**ZK, "hoodie.time.generator.max_expected_clock_skew_ms": 500}
    problems = _problems({"tables": [{"path": str(tmp_path / "a"), "policy": {"hudi_lock": keys}}]})
    assert len(problems) == 1 and "raise clock_skew_ms to at least 500" in problems[0], problems
    ok = load_config(overrides={"clock_skew_ms": 500, "defaults": {"hudi_lock": keys}})
    assert ok.defaults.hudi_lock["hoodie.time.generator.max_expected_clock_skew_ms"] == "500"


@pytest.mark.parametrize("key", [
    "hoodie.write.lock.zookeeper.lock_key",
    "hoodie.write.lock.dynamodb.partition_key",
    "hoodie.write.lock.filesystem.path",
])
def test_a_key_naming_one_tables_lock_belongs_on_that_tables_entry(tmp_path: Path, key: str) -> None:
    """In defaults or on a discover root it would give every table one lock while each table's
    writers take their own: refused, with where it belongs."""
    for where in ({"defaults": {"hudi_lock": {**ZK, key: "trips"}}},
                  {"discover": [{"root": str(tmp_path), "policy": {"hudi_lock": {**ZK, key: "trips"}}}]}):
        problems = _problems({"tables": [str(tmp_path / "a")], **where})
        assert len(problems) == 1 and f"{key} names one table's lock" in problems[0], problems
    entry = {"path": str(tmp_path / "a"), "policy": {"hudi_lock": {LOCK_KEY: "trips"}}}
    ok = load_config(overrides={"tables": [entry], "defaults": {"hudi_lock": ZK}})
    assert ok.tables[0].policy.hudi_lock[LOCK_KEY] == "trips"


def test_the_keys_build_the_providers_lock(tmp_path: Path) -> None:
    storage = _table(tmp_path)
    lock = hudi_table_lock({**ZK, "hoodie.write.lock.wait_time_ms": "2500",
                            "hoodie.write.lock.num_retries": "7",
                            "hoodie.write.lock.wait_time_ms_between_retry": "300"}, storage, BASE)
    assert isinstance(lock, ZooKeeperLock) and not lock.is_held
    # Hudi infers the lock key from the table name; the URL form gives the same lock
    url = "zookeeper://zk1:2181,zk2:2181/hudi/locks"
    assert lock.config == ZooKeeperLockConfig.from_url(url, lambda: "trips")
    assert lock.config.lock_path == "/hudi/locks/trips"
    assert lock.settings == LockSettings(wait_ms=2500, retries=7, retry_interval_ms=300, lease_ms=60_000)
    assert hudi_table_lock(ZK, storage, BASE).settings == BASE  # type: ignore[union-attr]

    dynamo = {"hoodie.write.lock.provider": HudiLockProvider.DYNAMODB.value,
              "hoodie.write.lock.dynamodb.table": "locks", "hoodie.write.lock.dynamodb.region": "eu-west-1",
              "hoodie.write.lock.dynamodb.endpoint_url": "http://127.0.0.1:1",
              "hoodie.write.lock.wait_time_ms": "30000"}
    lock = hudi_table_lock(dynamo, storage, BASE)
    assert isinstance(lock, DynamoDBLock)
    assert lock.config == DynamoDBLockConfig.from_url(
        "dynamodb://locks?region=eu-west-1&endpoint_url=http://127.0.0.1:1", lambda: "trips")
    assert lock.lease_ms == 30_000  # DynamoDBBasedLockProviderBase: wait_time_ms is the item's lease

    fs = {PROVIDER: "FileSystemBasedLockProvider", "hoodie.write.lock.filesystem.expire": "2"}
    lock = hudi_table_lock(fs, storage, BASE)
    assert isinstance(lock, FileSystemLock) and lock.expire_s == 120
    assert lock.paths == (f"{storage.base_uri}/.hoodie/lock", f"{storage.base_uri}/.hoodie/.aux/lock")
    lock = hudi_table_lock({**fs, "hoodie.write.lock.filesystem.path": "/var/locks/trips"}, storage, BASE)
    assert isinstance(lock, FileSystemLock) and lock.paths == ("/var/locks/trips/lock",)

    with pytest.raises(LockConfigError, match="is not on an object store"):
        hudi_table_lock({"hoodie.write.lock.provider": "StorageBasedLockProvider"}, storage, BASE)
    nameless = _table(tmp_path, "")
    with pytest.raises(LockConfigError, match="lock_key is not set and the table has no hoodie.table.name"):
        hudi_table_lock(ZK, nameless, BASE)


def test_storage_lock_lease_keys() -> None:
    assert StorageLockSettings.from_hudi_keys({}) == StorageLockSettings()
    got = StorageLockSettings.from_hudi_keys({"hoodie.write.lock.storage.validity.timeout.secs": "120",
                                              "hoodie.write.lock.storage.renew.interval.secs": "10"})
    assert (got.validity_ms, got.renew_interval_ms) == (120_000, 10_000)
    # the 0.x backport's name of the renewal
    assert StorageLockSettings.from_hudi_keys(
        {"hoodie.write.lock.storage.heartbeat.poll.secs": "5"}).renew_interval_ms == 5_000


def test_status_names_the_lock_without_secrets() -> None:
    assert describe_hudi_lock({**ZK, "hoodie.write.lock.zookeeper.lock_key": "t"}) == (
        "ZookeeperBasedLockProvider zk1:2181,zk2:2181/hudi/locks/t"
    )
    dynamo = {"hoodie.write.lock.provider": "DynamoDBBasedLockProvider",
              "hoodie.write.lock.dynamodb.endpoint_url": "http://user:s3cret@dynamo:8000"}
    shown = describe_hudi_lock(dynamo)
    assert shown is not None and "s3cret" not in shown
    assert shown.startswith("DynamoDBBasedLockProvider hudi_locks/<hoodie.table.name> at http://user:")
    assert describe_hudi_lock({"hoodie.write.lock.provider": "StorageBasedLockProvider"}) == (
        "StorageBasedLockProvider .hoodie/.locks/table_lock.json"
    )

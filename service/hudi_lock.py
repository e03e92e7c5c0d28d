"""Which of Apache Hudi's lock providers guards a table, from the writers' own keys, verbatim.

Users paste their writers' lock settings (``hoodie.write.lock.provider`` and the provider's keys)
into the daemon's settings, per table or as a default (``service.config`` ``Policy.hudi_lock``);
this module checks them (``hudi_lock_problems``, for ``hoodied config check`` and start-up), builds
the table lock they describe (``hudi_table_lock``, for each planning and execution job) and names
it for ``/status`` (``describe_hudi_lock``). The keys of each provider are read by the backend that
speaks its protocol (``from_hudi_keys`` of ``service.zookeeper_lock``, ``service.dynamodb_lock``,
``service.storage_lock``, ``filesystem_lock_args`` of ``service.fs_lock``), the same code that
reads the ``--lock`` URL forms.

Providers (``hoodie.write.lock.provider``, the Java class name, or its simple name):

- ``org.apache.hudi.client.transaction.lock.StorageBasedLockProvider`` (tables on an object store),
- ``org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider``,
- ``org.apache.hudi.aws.transaction.lock.DynamoDBBasedLockProvider``,
- ``org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider`` (tables on a local file
  system).

``InProcessLockProvider`` is refused: it excludes the threads of one JVM, never another process,
so hoodied cannot take part in it. Any other class (Hive metastore, a custom provider) is refused
as unsupported. An empty provider means "no Hudi lock": a table entry can opt out of the
``defaults`` one, and hoodied's own table lock (``lock.url``) guards the table.

Keys every provider shares (``HoodieLockConfig``, ``LockConfiguration``):

- ``hoodie.write.lock.wait_time_ms`` (Hudi 60000): how long one attempt waits; for DynamoDB it is
  also the lease of the lock item (``DynamoDBBasedLockProviderBase``), so there it sets the lease.
- ``hoodie.write.lock.num_retries`` (Hudi 15) and ``hoodie.write.lock.wait_time_ms_between_retry``
  (Hudi 1000): further attempts and the pause between them.
  Unset, these three take the daemon's ``lock.wait_ms`` / ``lock.retries`` / 1000 ms: a daemon worker
  should not sit out Hudi's quarter of an hour for one busy table; the poll comes back anyway.
- ``hoodie.write.lock.max_wait_time_ms_between_retry``, ``hoodie.write.lock.client.num_retries`` and
  ``hoodie.write.lock.client.wait_time_ms_between_retry``: accepted (writers' configs carry them),
  not read: they shape Hudi's own retry loop, which hoodied does not run.
- ``hoodie.time.generator.max_expected_clock_skew_ms`` (Hudi 200): how long a new instant time waits
  under the lock. hoodied waits ``clock_skew_ms`` for every table, so ``service.config`` requires
  ``clock_skew_ms`` at least as large as every table's value.
"""

from __future__ import annotations

import difflib
import enum
import functools
from collections.abc import Mapping
from dataclasses import replace

from hoodied.hoodie.errors import LockConfigError
from hoodied.hoodie.locks import LockSettings, TableLockBase
from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.hoodie.properties import read_table_name
from hoodied.hoodie.secrets import mask_secrets
from hoodied.hoodie.storage import Storage
from hoodied.service import fs_lock, storage_lock, zookeeper_lock
from hoodied.service.fs_lock import filesystem_lock_args, filesystem_lock_from_keys
from hoodied.service.storage_lock import StorageBasedLock, StorageLockSettings
from hoodied.service.zookeeper_lock import ZooKeeperLock, ZooKeeperLockConfig

__all__ = [
    "COMMON_KEYS",
    "ONE_TABLE_KEYS",
    "PROVIDER_KEY",
    "SKEW_KEY",
    "HudiLockProvider",
    "describe_hudi_lock",
    "hudi_lock_problems",
    "hudi_lock_provider",
    "hudi_table_lock",
    "table_skew_ms",
]

PROVIDER_KEY = "hoodie.write.lock.provider"
WAIT_KEY = "hoodie.write.lock.wait_time_ms"
RETRIES_KEY = "hoodie.write.lock.num_retries"
RETRY_WAIT_KEY = "hoodie.write.lock.wait_time_ms_between_retry"
SKEW_KEY = "hoodie.time.generator.max_expected_clock_skew_ms"
#: Keys every provider shares; the last three are accepted and not read (see the module docstring).
COMMON_KEYS = (
    PROVIDER_KEY,
    WAIT_KEY,
    RETRIES_KEY,
    RETRY_WAIT_KEY,
    SKEW_KEY,
    "hoodie.write.lock.max_wait_time_ms_between_retry",
    "hoodie.write.lock.client.num_retries",
    "hoodie.write.lock.client.wait_time_ms_between_retry",
)
#: ``DynamoDBBasedLockProvider``'s keys, listed here so checking them needs no boto3 import.
_DYNAMODB_KEYS = (
    "hoodie.write.lock.dynamodb.table",
    "hoodie.write.lock.dynamodb.partition_key",
    "hoodie.write.lock.dynamodb.region",
    "hoodie.write.lock.dynamodb.endpoint_url",
    "hoodie.write.lock.dynamodb.billing_mode",
    "hoodie.write.lock.dynamodb.read_capacity",
    "hoodie.write.lock.dynamodb.write_capacity",
    "hoodie.write.lock.dynamodb.table_creation_timeout",
)
#: Keys that name one table's lock (its ZooKeeper node, DynamoDB item or lock file): valid on a table
#: entry only. In ``defaults`` or on a discover root they would give every table the same lock, while
#: each table's writers lock their own (by default named after ``hoodie.table.name``), and hoodied
#: would exclude none of them.
ONE_TABLE_KEYS = (
    "hoodie.write.lock.zookeeper.lock_key",
    "hoodie.write.lock.dynamodb.partition_key",
    "hoodie.write.lock.filesystem.path",
)
_IN_PROCESS = "org.apache.hudi.client.transaction.lock.InProcessLockProvider"


class HudiLockProvider(enum.Enum):
    """A lock provider of Hudi's that hoodied speaks; the value is the Java class name."""

    STORAGE = "org.apache.hudi.client.transaction.lock.StorageBasedLockProvider"
    ZOOKEEPER = "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"
    DYNAMODB = "org.apache.hudi.aws.transaction.lock.DynamoDBBasedLockProvider"
    FILESYSTEM = "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"

    @property
    def simple_name(self) -> str:
        return self.value.rsplit(".", 1)[1]

    @property
    def keys(self) -> tuple[str, ...]:
        """The provider's own keys (beside ``COMMON_KEYS``)."""
        return {
            HudiLockProvider.STORAGE: storage_lock.HUDI_KEYS,
            HudiLockProvider.ZOOKEEPER: zookeeper_lock.HUDI_KEYS,
            HudiLockProvider.DYNAMODB: _DYNAMODB_KEYS,
            HudiLockProvider.FILESYSTEM: fs_lock.HUDI_KEYS,
        }[self]

    @classmethod
    def parse(cls, name: str) -> HudiLockProvider:
        """The provider of a class name (full or simple); ``ValueError`` saying why not."""
        for provider in cls:
            if name in (provider.value, provider.simple_name):
                return provider
        if name in (_IN_PROCESS, _IN_PROCESS.rsplit(".", 1)[1]):
            raise ValueError(
                f"{PROVIDER_KEY}={name}: InProcessLockProvider excludes the threads of one JVM only; "
                "hoodied runs in its own process and cannot take it. Give the writers and hoodied a "
                "lock that works across processes: " + ", ".join(p.simple_name for p in cls)
            )
        raise ValueError(
            f"{PROVIDER_KEY}={name}: not a lock provider hoodied speaks "
            f"({', '.join(p.value for p in cls)})"
        )


def _known_keys() -> frozenset[str]:
    return frozenset(COMMON_KEYS).union(*(p.keys for p in HudiLockProvider))


def hudi_lock_provider(keys: Mapping[str, str]) -> HudiLockProvider | None:
    """The provider named by ``keys`` (``None`` when none is, or it is empty); ``ValueError`` when
    it is one hoodied cannot take."""
    name = keys.get(PROVIDER_KEY, "").strip()
    return HudiLockProvider.parse(name) if name else None


def _whole(keys: Mapping[str, str], key: str) -> int | None:
    text = keys.get(key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{key}={text!r} is not a whole number") from None
    if value < 0:
        raise ValueError(f"{key}={text!r} must not be negative")
    return value


def table_skew_ms(keys: Mapping[str, str]) -> int | None:
    """``hoodie.time.generator.max_expected_clock_skew_ms`` when given (``ValueError`` when bad)."""
    return _whole(keys, SKEW_KEY)


def _lock_settings(provider: HudiLockProvider, keys: Mapping[str, str], base: LockSettings) -> LockSettings:
    """``base`` (the daemon's lock settings) with the Hudi keys given laid over it."""
    wait, retries, between = _whole(keys, WAIT_KEY), _whole(keys, RETRIES_KEY), _whole(keys, RETRY_WAIT_KEY)
    out = base
    if wait is not None:
        out = replace(out, wait_ms=wait)
        if provider is HudiLockProvider.DYNAMODB:  # DynamoDBBasedLockProviderBase: the item's lease
            out = replace(out, lease_ms=wait)
    if retries is not None:
        out = replace(out, retries=retries)
    if between is not None:
        out = replace(out, retry_interval_ms=between)
    return out


def _placeholder_name() -> str:
    # checking keys has no table: a lock key inferred from hoodie.table.name is checked when built
    return "<hoodie.table.name>"


def _provider_problem(provider: HudiLockProvider, keys: Mapping[str, str]) -> None:
    """Raise ``ValueError`` (or ``LockConfigError``) for the first problem of the provider's keys."""
    if provider is HudiLockProvider.ZOOKEEPER:
        config = ZooKeeperLockConfig.from_hudi_keys(keys, _placeholder_name)
        port = keys.get(zookeeper_lock.PORT_KEY)
        if port is not None and port != "2181" and any(
            ":" not in host.rsplit("]", 1)[-1] for host in config.hosts.split(",")
        ):
            raise ValueError(
                f"{zookeeper_lock.PORT_KEY}={port} is not read by ZookeeperBasedLockProvider, which "
                f"connects to {zookeeper_lock.URL_KEY} (port 2181 when it names none): put the port "
                "in the url"
            )
    elif provider is HudiLockProvider.DYNAMODB:
        # boto3 takes 0.2 s to import: only settings that name DynamoDB pay it
        from hoodied.service.dynamodb_lock import DynamoDBLockConfig

        DynamoDBLockConfig.from_hudi_keys(keys, _placeholder_name)
    elif provider is HudiLockProvider.STORAGE:
        StorageLockSettings.from_hudi_keys(keys)
    else:
        filesystem_lock_args(keys)


def hudi_lock_problems(keys: Mapping[str, str]) -> list[str]:
    """Everything wrong with a table's Hudi lock keys, one line each (empty: fine or no provider).

    Keys of a provider other than the one named are not problems (a table may name another
    provider than ``defaults`` and inherit its keys); keys no provider has are.
    """
    known = _known_keys()
    problems = []
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            problems.append(f"{key}: not a Hudi lock key hoodied knows" + (f" (did you mean {close[0]}?)"
                                                                             if close else ""))
    try:
        provider = hudi_lock_provider(keys)
    except ValueError as exc:
        return [*problems, str(exc)]
    if provider is None:
        # an empty provider opts out (inherited keys stay unused); none at all is a forgotten one
        if PROVIDER_KEY not in keys and any(k in known for k in keys):
            problems.append(f"{PROVIDER_KEY} is required when other Hudi lock keys are given")
        return problems
    for check in (
        functools.partial(_lock_settings, provider, keys, LockSettings()),
        functools.partial(table_skew_ms, keys),
        functools.partial(_provider_problem, provider, keys),
    ):
        try:
            check()
        except (ValueError, LockConfigError) as exc:
            text = str(exc)
            problems.append(text if provider.simple_name in text else f"{text} ({provider.simple_name})")
    return problems


def hudi_table_lock(keys: Mapping[str, str], storage: Storage, base: LockSettings) -> TableLockBase | None:
    """The table lock ``keys`` name (not yet acquired), or ``None`` when they name no provider.

    ``base`` is the daemon's lock settings, overridden by the Hudi keys given. Keys that cannot
    work on this table (a file-system lock on an object store, a storage lock on a local file
    system, a bad key) raise ``LockConfigError``.
    """
    try:
        provider = hudi_lock_provider(keys)
        if provider is None:
            return None
        settings = _lock_settings(provider, keys, base)
        table_name = functools.partial(read_table_name, storage)
        if provider is HudiLockProvider.ZOOKEEPER:
            zk = ZooKeeperLockConfig.from_hudi_keys(keys, table_name)
            return ZooKeeperLock(storage.base_uri, zk, settings)
        if provider is HudiLockProvider.DYNAMODB:
            from hoodied.service.dynamodb_lock import DynamoDBLock, DynamoDBLockConfig

            dynamo = DynamoDBLockConfig.from_hudi_keys(keys, table_name)
            return DynamoDBLock(storage.base_uri, dynamo, settings)
        if provider is HudiLockProvider.STORAGE:
            if not isinstance(storage, ObjectStorage):
                raise LockConfigError(
                    f"{storage.base_uri} is not on an object store (s3://, gs://, az://), where "
                    "StorageBasedLockProvider works"
                )
            return StorageBasedLock(storage, settings, StorageLockSettings.from_hudi_keys(keys))
        return filesystem_lock_from_keys(keys, storage, settings)
    except LockConfigError as exc:
        raise LockConfigError(f"{storage.base_uri}: Hudi lock settings: {exc}") from None
    except ValueError as exc:
        raise LockConfigError(f"{storage.base_uri}: Hudi lock settings: {exc}") from None


def describe_hudi_lock(keys: Mapping[str, str]) -> str | None:
    """Which Hudi lock the keys name, in one line for ``/status`` (secrets masked), without I/O;
    ``None`` when they name none (or one hoodied cannot take)."""
    try:
        provider = hudi_lock_provider(keys)
    except ValueError:
        return None
    if provider is None:
        return None
    table = "<hoodie.table.name>"
    if provider is HudiLockProvider.ZOOKEEPER:
        key = keys.get("hoodie.write.lock.zookeeper.lock_key") or table
        where = f"{keys.get(zookeeper_lock.URL_KEY, '')}{keys.get(zookeeper_lock.BASE_PATH_KEY, '')}/{key}"
    elif provider is HudiLockProvider.DYNAMODB:
        where = (
            f"{keys.get('hoodie.write.lock.dynamodb.table') or 'hudi_locks'}"
            f"/{keys.get('hoodie.write.lock.dynamodb.partition_key') or table}"
        )
        if keys.get("hoodie.write.lock.dynamodb.endpoint_url"):
            where += f" at {keys['hoodie.write.lock.dynamodb.endpoint_url']}"
    elif provider is HudiLockProvider.STORAGE:
        where = storage_lock.LOCK_FILE
    else:
        path = keys.get(fs_lock.PATH_KEY)
        where = f"{path}/{fs_lock.LOCK_FILE_NAME}" if path else " + ".join(
            f"{d}/{fs_lock.LOCK_FILE_NAME}" for d in fs_lock.DEFAULT_LOCK_DIRS
        )
    return mask_secrets(f"{provider.simple_name} {where}")

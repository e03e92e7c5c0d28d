"""The table lock in DynamoDB, shared with Apache Hudi writers: Hudi's DynamoDB lock provider.

Mirrors ``org.apache.hudi.aws.transaction.lock.DynamoDBBasedLockProvider``, which takes the lock
with the AWS DynamoDB Lock Client (``com.amazonaws.services.dynamodbv2.AmazonDynamoDBLockClient``,
awslabs/amazon-dynamodb-lock-client), so a Hudi writer configured with
``hoodie.write.lock.provider=org.apache.hudi.aws.transaction.lock.DynamoDBBasedLockProvider`` and
hoodied exclude each other on the same table. hoodied speaks the lock client's item protocol itself,
with boto3 as the DynamoDB client. The facts it relies on, by class:

- Configuration (Hudi ``config.DynamoDbBasedLockConfig``): ``hoodie.write.lock.dynamodb.table``
  (the lock table; default ``hudi_locks`` in Hudi 1.x, required in 0.x), ``...partition_key``
  (the item's key; inferred from the writer's ``hoodie.table.name``, and ``DynamoDBBasedLockProvider
  .getDynamoDBPartitionKey`` refuses to start without one), ``...region`` (``AWS_REGION`` when set,
  else ``us-east-1``), ``...endpoint_url`` (optional; ``DynamoDBBasedLockProviderBase
  .getDynamoDBClient`` prefixes ``https://`` when it has no scheme; without it the region's
  endpoint), ``...billing_mode`` (``PAY_PER_REQUEST``, or ``PROVISIONED`` with ``...read_capacity``
  20 and ``...write_capacity`` 10), ``...table_creation_timeout`` (ms; 120000 in 1.x, 600000 in 0.x).
- Lock table (``DynamoDBBasedLockProviderBase.DYNAMODB_ATTRIBUTE_NAME``, ``createLockTableInDynamoDB``;
  lock client ``AmazonDynamoDBLockClientOptions.DEFAULT_PARTITION_KEY_NAME``): one HASH key attribute
  named ``key``, of type S, no sort key. When ``lockTableExists()`` is false (the table is missing,
  or not ACTIVE/UPDATING) Hudi creates it with that schema and the billing mode, and waits until it
  is ACTIVE for up to the creation timeout (``DynamoTableUtils.waitUntilActive``, polling every
  20 s). hoodied does the same (polling every second) and refuses a table whose key schema differs.
- Lease (``DynamoDBBasedLockProviderBase`` constructor): the lock client is built with
  ``withLeaseDuration(hoodie.write.lock.wait_time_ms)`` (default 60000), ``withHeartbeatPeriod(lease /
  3)``, ``withCreateHeartbeatBackgroundThread(true)``, time unit milliseconds. hoodied's lease is
  ``LockSettings.lease_ms`` (same default) and it heartbeats every third of it. Every contender reads
  the lease from the item, so the holders need not agree on it.
- Item (``AmazonDynamoDBLockClient`` constants ``OWNER_NAME``, ``LEASE_DURATION``,
  ``RECORD_VERSION_NUMBER``, ``IS_RELEASED``, ``DATA``; ``acquireLock`` builds it): ``key`` (S, the
  partition key), ``ownerName`` (S; ``AmazonDynamoDBLockClientOptions.generateOwnerNameFromLocalhost``:
  host name immediately followed by a random UUID), ``leaseDuration`` (S, decimal milliseconds),
  ``recordVersionNumber`` (S, ``UUID.randomUUID().toString()``, a new one on every write), optional
  ``data`` (B; Hudi passes none). ``isReleased`` (S ``"1"``, ``IS_RELEASED_VALUE``) marks a released
  item; a reader treats the item as released when the attribute is present (``createLockItem``).
  Other attributes are kept as "additional attributes" and otherwise ignored.
- Acquire (``acquireLock``, ``upsertAndMonitorNewLock``, ``upsertAndMonitorReleasedLock``,
  ``upsertAndMonitorExpiredLock``; Hudi ``tryLock`` passes ``withAdditionalTimeToWaitForLock(wait)``):
  read the item with a consistent GetItem, then PutItem the whole new item with a condition:
  ``attribute_not_exists(#pk)`` when there is no item; ``attribute_exists(#pk) AND #ir = :ir`` when it
  is released; when it is held, remember its ``recordVersionNumber`` and the taker's own monotonic
  time of the read (``LockItem.lookupTime``, ``LockClientUtils.millisecondTime`` = ``System.nanoTime``),
  add its ``leaseDuration`` once to the time this call may wait, and read again every refresh period
  (``DEFAULT_BUFFER_MS`` = 1000 ms; Hudi sets none); a changed version restarts the observation; once
  the version stayed the same for more than the item's lease on that clock (``LockItem.isExpired``),
  put with ``attribute_exists(#pk) AND #rvn = :rvn``. A failed condition means another contender won:
  keep waiting. The call gives up once its wait is over (``LockNotGrantedException``). No wall clock
  takes part anywhere.
- Heartbeat (``sendHeartbeat``, the background thread's ``run``): UpdateItem ``SET #ld = :ld, #rvn =
  :newRvn`` (a fresh UUID) with ``attribute_exists(#pk) AND #rvn = :rvn AND #on = :on``; the holder's
  lease restarts at its monotonic time just before the call. A failed condition means the lock was
  taken: heartbeats stop. Other errors are logged and retried at the next period; a holder whose own
  lease has run out stops (``isExpired`` check before sending).
- Release (Hudi ``unlock`` -> ``releaseLock(lockItem)``; ``AcquireLockOptions`` default
  ``deleteLockOnRelease = true``, which Hudi keeps): DeleteItem with ``attribute_exists(#pk) AND #rvn
  = :rvn AND #on = :on``; a failed condition means it was already taken ("stolen"). With
  ``deleteLockOnRelease = false`` the client would instead UpdateItem ``SET #ir = :ir`` under the same
  condition; hoodied deletes, as Hudi does.

hoodied's own additions (the lock client and Hudi writers neither read nor change them):

- Fencing token: the lock item is replaced by every Java acquire and deleted by every Java release,
  so a counter kept in it would restart. hoodied keeps its counter in a separate item of the same
  table, key ``<partition_key>.hoodied-fence``, attribute ``hoodiedFence`` (N), shaped like a released
  lock-client item (``ownerName``, ``leaseDuration`` 0, ``recordVersionNumber``, ``isReleased``) so a
  tool listing the table's locks reads it as a free lock. Taking the lock and raising the counter is
  one ``TransactWriteItems``: the conditional Put of the lock item (which also carries ``hoodiedFence``,
  for people reading it) and an Update of the counter item conditional on the value read just before.
  Both happen or neither, so tokens follow the order in which hoodied processes took the lock, each
  handed out once. A missing counter restarts at the wall clock in microseconds (as the storage
  lock's), so deleting it never hands out an old token.
- ``ensure_held()`` (right before each timeline write) refuses once this holder's lease, on its own
  monotonic clock from the last successful write of the item, is within a safety margin (a fifth of
  the lease) of its end: a contender takes over only after a whole lease on its own clock starting
  after it read our last version, which cannot start before we wrote it. Then it reads the item
  (consistent read) and checks the key, our ``ownerName``, our last ``recordVersionNumber`` and no
  ``isReleased``. A read that fails is logged and passes: the lease itself still excludes others.
- An item hoodied cannot read as a lock-client item is neither taken over nor overwritten:
  ``HoodieFormatError``.
- ``holder()`` (``hoodied inspect``) reads the item once (consistent GetItem) with a client of its
  own whose calls wait only a few seconds and are not retried; a missing table or item, or a
  released one, is free. One read cannot tell whether the lease ran out: the lock client's rule
  needs the record version seen unchanged for a whole lease on the reader's clock, so the item is
  never shown as expired and its lease and record version are shown instead.
- Locks still held at interpreter exit are released, so a command that ends does not keep Hudi
  writers out for a whole lease (Hudi's provider releases in ``close``).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

from hoodied.hoodie.errors import HoodieFormatError, LockConfigError
from hoodied.hoodie.locks import (
    DEFAULT_INSPECT_TIMEOUT_S,
    LockBackendError,
    LockHolder,
    LockLocation,
    LockSettings,
    TableLockBase,
    lock_key,
)
from hoodied.hoodie.properties import read_table_name
from hoodied.hoodie.storage import Storage

log = logging.getLogger(__name__)
# botocore reports at INFO where it found credentials, on every client a command makes; that would
# land in each command's output. Its warnings still show.
logging.getLogger("botocore.credentials").setLevel(logging.WARNING)

__all__ = [
    "DEFAULT_TABLE",
    "FENCE_ATTRIBUTE",
    "FENCE_SUFFIX",
    "HUDI_KEYS",
    "PARTITION_KEY_NAME",
    "TABLE_KEY",
    "DynamoDBLock",
    "DynamoDBLockConfig",
    "LockItem",
    "dynamodb_lock_from_url",
]

#: ``DynamoDBBasedLockProviderBase.DYNAMODB_ATTRIBUTE_NAME``: the lock table's HASH key attribute.
PARTITION_KEY_NAME = "key"
#: ``DynamoDbBasedLockConfig.DYNAMODB_LOCK_TABLE_NAME`` default (Hudi 1.x).
DEFAULT_TABLE = "hudi_locks"
#: hoodied's fencing counter: attribute name, and the suffix of its item's key.
FENCE_ATTRIBUTE = "hoodiedFence"
FENCE_SUFFIX = ".hoodied-fence"
#: ``AmazonDynamoDBLockClient.IS_RELEASED_VALUE``.
IS_RELEASED_VALUE = "1"
#: ``AmazonDynamoDBLockClient.DEFAULT_BUFFER_MS``: how often a waiting contender reads the item again.
DEFAULT_REFRESH_MS = 1_000

_BILLING_MODES = ("PAY_PER_REQUEST", "PROVISIONED")
_URL_FORM = "dynamodb://TABLE[?region=REGION&partition_key=KEY&endpoint_url=URL]"
#: ``DynamoDbBasedLockConfig.DYNAMODB_LOCK_TABLE_NAME``: the lock table (the URL's host part).
TABLE_KEY = "hoodie.write.lock.dynamodb.table"
# Query parameters of a dynamodb:// URL and Hudi's keys they stand for.
_URL_KEYS = {
    "partition_key": "hoodie.write.lock.dynamodb.partition_key",
    "region": "hoodie.write.lock.dynamodb.region",
    "endpoint_url": "hoodie.write.lock.dynamodb.endpoint_url",
    "billing_mode": "hoodie.write.lock.dynamodb.billing_mode",
    "read_capacity": "hoodie.write.lock.dynamodb.read_capacity",
    "write_capacity": "hoodie.write.lock.dynamodb.write_capacity",
    "table_creation_timeout": "hoodie.write.lock.dynamodb.table_creation_timeout",
}
#: Every key of ``DynamoDBBasedLockProvider`` hoodied reads.
HUDI_KEYS = (TABLE_KEY, *_URL_KEYS.values())

# What a condition expression names; the lock client's own placeholders.
_NAMES = {
    "#pk": PARTITION_KEY_NAME,
    "#rvn": "recordVersionNumber",
    "#on": "ownerName",
    "#ld": "leaseDuration",
    "#ir": "isReleased",
}


def _valid_table_name(name: str) -> bool:
    # DynamoDB's rule for table names: 3 to 255 of [A-Za-z0-9_.-]
    return 3 <= len(name) <= 255 and all(c.isascii() and (c.isalnum() or c in "_.-") for c in name)


@dataclass(frozen=True, slots=True)
class DynamoDBLockConfig:
    """Where the lock item lives; defaults are Hudi's (``DynamoDbBasedLockConfig``)."""

    table: str
    """``hoodie.write.lock.dynamodb.table``."""
    partition_key: str
    """``hoodie.write.lock.dynamodb.partition_key`` (Hudi's default: the table name)."""
    region: str = "us-east-1"
    """``hoodie.write.lock.dynamodb.region``."""
    endpoint_url: str | None = None
    """``hoodie.write.lock.dynamodb.endpoint_url``; ``None`` = the region's endpoint."""
    billing_mode: str = "PAY_PER_REQUEST"
    """``hoodie.write.lock.dynamodb.billing_mode``, used when the lock table has to be created."""
    read_capacity: int = 20
    write_capacity: int = 10
    table_creation_timeout_ms: int = 120_000
    """``hoodie.write.lock.dynamodb.table_creation_timeout``."""
    refresh_ms: int = DEFAULT_REFRESH_MS
    """How often a waiting attempt reads the item again."""

    def __post_init__(self) -> None:
        if not _valid_table_name(self.table):
            raise ValueError(f"DynamoDB table name {self.table!r}: expected 3-255 of A-Z a-z 0-9 _ . -")
        if not self.partition_key:
            raise ValueError("DynamoDB lock partition key is empty")
        if not self.region:
            raise ValueError("DynamoDB region is empty")
        if self.billing_mode not in _BILLING_MODES:
            raise ValueError(f"DynamoDB billing mode {self.billing_mode!r}: expected one of {_BILLING_MODES}")
        if self.read_capacity <= 0 or self.write_capacity <= 0 or self.table_creation_timeout_ms < 0:
            raise ValueError("DynamoDB capacities must be positive and the creation timeout not negative")
        if self.refresh_ms <= 0:
            raise ValueError("DynamoDB lock refresh period must be positive")

    @property
    def endpoint(self) -> str | None:
        """The endpoint as Hudi uses it: ``https://`` prefixed when the URL names no scheme."""
        if self.endpoint_url is None:
            return None
        if self.endpoint_url.startswith(("https://", "http://")):
            return self.endpoint_url
        return "https://" + self.endpoint_url

    @property
    def fence_key(self) -> str:
        return self.partition_key + FENCE_SUFFIX

    @classmethod
    def from_hudi_keys(
        cls, keys: Mapping[str, str], table_name: Callable[[], str | None]
    ) -> DynamoDBLockConfig:
        """The lock of Hudi's ``hoodie.write.lock.dynamodb.*`` keys (see ``_URL_KEYS``); defaults are Hudi's.

        ``table_name`` is asked for the partition key only when none is given (Hudi infers it from
        ``hoodie.table.name``). The region defaults to ``AWS_REGION``, then ``us-east-1``. A missing or
        bad key is a ``ValueError`` that names it.
        """
        partition_key = keys.get(_URL_KEYS["partition_key"]) or table_name()
        if not partition_key:
            raise ValueError(
                f"no partition_key and the table has no hoodie.table.name "
                f"({_URL_KEYS['partition_key']} is required)"
            )

        def number(name: str, default: int) -> int:
            text = keys.get(_URL_KEYS[name])
            if text is None:
                return default
            try:
                return int(text)
            except ValueError:
                raise ValueError(f"{_URL_KEYS[name]}={text!r} is not a whole number") from None

        return cls(
            table=keys.get(TABLE_KEY) or DEFAULT_TABLE,
            partition_key=partition_key,
            region=keys.get(_URL_KEYS["region"]) or os.environ.get("AWS_REGION") or "us-east-1",
            endpoint_url=keys.get(_URL_KEYS["endpoint_url"]) or None,
            billing_mode=keys.get(_URL_KEYS["billing_mode"], "PAY_PER_REQUEST").upper(),
            read_capacity=number("read_capacity", 20),
            write_capacity=number("write_capacity", 10),
            table_creation_timeout_ms=number("table_creation_timeout", 120_000),
        )

    @classmethod
    def from_url(cls, url: str, table_name: Callable[[], str | None]) -> DynamoDBLockConfig:
        """Parse ``dynamodb://TABLE?region=...&partition_key=...&endpoint_url=...`` (see ``_URL_KEYS``):
        the URL is read into Hudi's keys and built by ``from_hudi_keys``."""
        parts = urlsplit(url)
        if parts.scheme != "dynamodb":
            raise ValueError(f"{url!r}: expected {_URL_FORM}")
        if parts.path not in ("", "/") or parts.fragment:
            raise ValueError(f"{url!r}: expected {_URL_FORM} (no path)")
        keys = {TABLE_KEY: unquote(parts.netloc)}
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name not in _URL_KEYS:
                raise ValueError(f"{url!r}: unknown parameter {name!r} (known: {', '.join(_URL_KEYS)})")
            if _URL_KEYS[name] in keys:
                raise ValueError(f"{url!r}: parameter {name!r} given twice")
            keys[_URL_KEYS[name]] = value
        try:
            return cls.from_hudi_keys(keys, table_name)
        except ValueError as exc:
            raise ValueError(f"{url!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class LockItem:
    """One lock item as the lock client reads it (``AmazonDynamoDBLockClient.createLockItem``)."""

    owner: str
    lease_ms: int
    record_version: str
    released: bool

    @classmethod
    def parse(cls, item: dict[str, Any], where: str) -> LockItem:
        try:
            owner = item["ownerName"]["S"]
            lease_ms = int(item["leaseDuration"]["S"])
            record_version = item["recordVersionNumber"]["S"]
        except (KeyError, TypeError, ValueError):
            # the Java client fails on such an item too (it dereferences the three attributes); like
            # an unreadable storage lock file, it is neither taken over nor overwritten
            raise HoodieFormatError(f"{where}: not a lock-client item (attributes {sorted(item)})") from None
        return cls(owner, lease_ms, record_version, "isReleased" in item)


# Locks held by this process, released at interpreter exit (Hudi's provider releases in close()).
_HELD: weakref.WeakSet[DynamoDBLock] = weakref.WeakSet()


@atexit.register
def _release_held_locks() -> None:
    for lock in list(_HELD):
        lock.release()


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _s(text: str) -> dict[str, str]:
    return {"S": text}


class DynamoDBLock(TableLockBase):
    """Hudi's DynamoDB lock of one table (see the module docstring).

    ``settings`` decide how long and how often to try and the lease this holder writes into the
    item (``lease_ms``, heartbeat every third of it); a waiting attempt reads the item every
    ``config.refresh_ms``, not ``settings.poll_ms``, as the lock client does.
    """

    def __init__(
        self,
        base_uri: str,
        config: DynamoDBLockConfig,
        settings: LockSettings | None = None,
        *,
        safety_margin_ms: int | None = None,
    ) -> None:
        super().__init__(lock_key(base_uri), settings)
        self.config = config
        self.lease_ms = self.settings.lease_ms
        self.heartbeat_ms = self.lease_ms // 3
        self.margin_ms = self.lease_ms // 5 if safety_margin_ms is None else safety_margin_ms
        if not 0 <= self.margin_ms < self.lease_ms - self.heartbeat_ms:
            raise ValueError(
                f"DynamoDB lock safety margin {self.margin_ms} ms must leave more than one heartbeat period "
                f"of the {self.lease_ms} ms lease"
            )
        # one call may take at most a fifth of the lease, so a slow call cannot outlive the margin
        call_s = max(self.lease_ms / 5000, 1.0)
        self._client = boto3.session.Session().client(
            "dynamodb",
            region_name=config.region,
            endpoint_url=config.endpoint,
            config=Config(
                connect_timeout=call_s,
                read_timeout=call_s,
                retries={"total_max_attempts": 2, "mode": "standard"},
            ),
        )
        self._where = f"dynamodb://{config.table}/{config.partition_key}"
        self._table_ready = False
        self.owner = ""
        # what this holder last wrote; guarded by _io, which also keeps heartbeat and release apart
        self._io = threading.Lock()
        self._record_version: str | None = None
        self._lease_end = 0.0  # time.monotonic() at which our lease may have ended
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def _describe(self) -> str:
        return f"DynamoDB lock {self._where}"

    def location(self) -> LockLocation:
        return LockLocation("dynamodb", self._where)

    def holder(self, timeout_s: float = DEFAULT_INSPECT_TIMEOUT_S) -> LockHolder | None:
        """The lock item's owner, from one read (see the module docstring); creates nothing."""
        cfg = self.config
        client = boto3.session.Session().client(
            "dynamodb",
            region_name=cfg.region,
            endpoint_url=cfg.endpoint,
            config=Config(
                connect_timeout=timeout_s,
                read_timeout=timeout_s,
                retries={"total_max_attempts": 1, "mode": "standard"},
            ),
        )
        try:
            found = client.get_item(
                TableName=cfg.table, Key={PARTITION_KEY_NAME: _s(cfg.partition_key)}, ConsistentRead=True
            )
        except ClientError as exc:
            if _error_code(exc) == "ResourceNotFoundException":
                return None  # no lock table yet: nobody ever took the lock
            raise LockBackendError(f"GetItem {cfg.table}: {_error_code(exc)}: {exc}") from None
        except BotoCoreError as exc:
            raise LockBackendError(f"GetItem {cfg.table}: {exc}") from None
        finally:
            client.close()
        raw = found.get("Item")
        if not raw:
            return None
        item = LockItem.parse(raw, self._describe())
        if item.released:
            return None
        return LockHolder(
            owner=item.owner,
            location=self.location(),
            lease_ms=item.lease_ms,
            detail=f"record version {item.record_version}; expired once unchanged for a whole lease",
        )

    # ------------------------------------------------------------ calls

    def _call(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """One DynamoDB call; an unreachable or failing service becomes ``LockBackendError``."""
        try:
            return fn(**kwargs)
        except ClientError as exc:
            if _error_code(exc) in ("ConditionalCheckFailedException", "TransactionCanceledException"):
                raise
            raise LockBackendError(f"{what}: {_error_code(exc)}: {exc}") from None
        except BotoCoreError as exc:
            raise LockBackendError(f"{what}: {exc}") from None

    def _get(self, key: str) -> dict[str, Any] | None:
        found = self._call(
            "GetItem",
            self._client.get_item,
            TableName=self.config.table,
            Key={PARTITION_KEY_NAME: _s(key)},
            ConsistentRead=True,
        )
        item = found.get("Item")
        return item if item else None

    def _ensure_table(self) -> None:
        """Create the lock table when missing, as Hudi does; refuse one with another key schema."""
        if self._table_ready:
            return
        cfg = self.config
        try:
            table = self._client.describe_table(TableName=cfg.table)["Table"]
        except ClientError as exc:
            if _error_code(exc) != "ResourceNotFoundException":
                raise LockBackendError(f"DescribeTable {cfg.table}: {_error_code(exc)}: {exc}") from None
            table = self._create_table()
        except BotoCoreError as exc:
            raise LockBackendError(f"DescribeTable {cfg.table}: {exc}") from None
        schema = [(k["AttributeName"], k["KeyType"]) for k in table.get("KeySchema", [])]
        types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
        if schema != [(PARTITION_KEY_NAME, "HASH")] or types.get(PARTITION_KEY_NAME) != "S":
            raise LockConfigError(
                f"--lock dynamodb: table {cfg.table} has key schema {schema} ({types}); "
                f"Hudi's lock table has one HASH key {PARTITION_KEY_NAME!r} of type S"
            )
        self._wait_active(table.get("TableStatus", ""))
        self._table_ready = True

    def _create_table(self) -> dict[str, Any]:
        cfg = self.config
        request: dict[str, Any] = {
            "TableName": cfg.table,
            "KeySchema": [{"AttributeName": PARTITION_KEY_NAME, "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": PARTITION_KEY_NAME, "AttributeType": "S"}],
            "BillingMode": cfg.billing_mode,
        }
        if cfg.billing_mode == "PROVISIONED":
            request["ProvisionedThroughput"] = {
                "ReadCapacityUnits": cfg.read_capacity,
                "WriteCapacityUnits": cfg.write_capacity,
            }
        log.info("%s: creating the lock table %s (%s)", self._describe(), cfg.table, cfg.billing_mode)
        try:
            return dict(self._client.create_table(**request)["TableDescription"])
        except ClientError as exc:
            code = _error_code(exc)
            if code == "ResourceInUseException":  # created meanwhile by another writer
                return dict(
                    self._call("DescribeTable", self._client.describe_table, TableName=cfg.table)["Table"]
                )
            if code in ("AccessDeniedException", "ValidationException", "LimitExceededException"):
                raise LockConfigError(
                    f"--lock dynamodb: lock table {cfg.table} does not exist and cannot be created ({code})"
                ) from None
            raise LockBackendError(f"CreateTable {cfg.table}: {code}: {exc}") from None
        except BotoCoreError as exc:
            raise LockBackendError(f"CreateTable {cfg.table}: {exc}") from None

    def _wait_active(self, status: str) -> None:
        deadline = time.monotonic() + self.config.table_creation_timeout_ms / 1000
        # lockTableExists() accepts ACTIVE and UPDATING
        while status not in ("ACTIVE", "UPDATING"):
            if time.monotonic() >= deadline:
                raise LockBackendError(
                    f"lock table {self.config.table} is {status} after "
                    f"{self.config.table_creation_timeout_ms} ms (table_creation_timeout)"
                )
            time.sleep(1.0)
            table = self._call("DescribeTable", self._client.describe_table, TableName=self.config.table)
            status = table["Table"].get("TableStatus", "")

    # ------------------------------------------------------------ acquire

    def _try_acquire(self, wait_s: float) -> int | None:
        self._ensure_table()
        start = time.monotonic()
        wait = wait_s
        lease_added = False
        observed: tuple[str, float, int] | None = None  # (recordVersionNumber, lookup time, lease ms)
        owner = f"{socket.gethostname()}{uuid.uuid4()}"  # generateOwnerNameFromLocalhost
        while True:
            raw = self._get(self.config.partition_key)
            looked_up = time.monotonic()
            condition: str | None
            values: dict[str, Any] = {}
            if raw is None:
                condition = "attribute_not_exists(#pk)"
            else:
                item = LockItem.parse(raw, self._describe())
                if item.released:
                    condition = "attribute_exists(#pk) AND #ir = :ir"
                    values[":ir"] = _s(IS_RELEASED_VALUE)
                elif observed is None or observed[0] != item.record_version:
                    # a new holder, or the holder heartbeated: watch this version for a whole lease
                    if not lease_added:
                        wait += item.lease_ms / 1000
                        lease_added = True
                    observed = (item.record_version, looked_up, item.lease_ms)
                    condition = None
                elif (time.monotonic() - observed[1]) * 1000 > observed[2]:
                    condition = "attribute_exists(#pk) AND #rvn = :rvn"
                    values[":rvn"] = _s(observed[0])
                else:
                    condition = None
            if condition is not None:
                token = self._put_lock(owner, condition, values)
                if token is not None:
                    return token
                # lost the race (ConditionalCheckFailed): keep waiting, as the lock client does
            elapsed = time.monotonic() - start
            if elapsed > wait:
                return None
            time.sleep(max(0.0, min(self.config.refresh_ms / 1000, wait - elapsed + 0.001)))

    def _put_lock(self, owner: str, condition: str, values: dict[str, Any]) -> int | None:
        """The conditional Put of our item and the fence bump in one transaction; token or ``None``."""
        cfg = self.config
        for _ in range(10):
            fence = self._get(cfg.fence_key)
            previous: int | None = None
            token = time.time_ns() // 1_000
            if fence is not None and FENCE_ATTRIBUTE in fence:
                previous = int(fence[FENCE_ATTRIBUTE]["N"])
                token = previous + 1
            record_version = str(uuid.uuid4())
            item = {
                PARTITION_KEY_NAME: _s(cfg.partition_key),
                "ownerName": _s(owner),
                "leaseDuration": _s(str(self.lease_ms)),
                "recordVersionNumber": _s(record_version),
                FENCE_ATTRIBUTE: {"N": str(token)},
            }
            put: dict[str, Any] = {
                "TableName": cfg.table,
                "Item": item,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {n: _NAMES[n] for n in _NAMES if n in condition},
            }
            if values:
                put["ExpressionAttributeValues"] = values
            fence_values: dict[str, Any] = {
                ":next": {"N": str(token)},
                ":fon": _s("hoodied-fence"),
                ":zero": _s("0"),
                ":frvn": _s(str(uuid.uuid4())),
                ":ir": _s(IS_RELEASED_VALUE),
            }
            if previous is None:
                fence_condition = "attribute_not_exists(#f)"
            else:
                fence_condition = "#f = :prev"
                fence_values[":prev"] = {"N": str(previous)}
            update = {
                "TableName": cfg.table,
                "Key": {PARTITION_KEY_NAME: _s(cfg.fence_key)},
                "UpdateExpression": "SET #f = :next, #on = :fon, #ld = :zero, #rvn = :frvn, #ir = :ir",
                "ConditionExpression": fence_condition,
                "ExpressionAttributeNames": {
                    "#f": FENCE_ATTRIBUTE,
                    "#on": "ownerName",
                    "#ld": "leaseDuration",
                    "#rvn": "recordVersionNumber",
                    "#ir": "isReleased",
                },
                "ExpressionAttributeValues": fence_values,
            }
            sent = time.monotonic()
            try:
                self._call(
                    "TransactWriteItems",
                    self._client.transact_write_items,
                    TransactItems=[{"Put": put}, {"Update": update}],
                )
            except ClientError as exc:
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
                if reasons and reasons[0] == "ConditionalCheckFailed":
                    return None  # another contender took the lock
                if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
                    continue  # the counter moved since we read it: read again, go above it
                raise LockBackendError(f"TransactWriteItems: {_error_code(exc)} {reasons}") from None
            with self._io:
                self.owner, self._record_version = owner, record_version
                self._lease_end = sent + self.lease_ms / 1000
            self._start_heartbeat()
            return token
        raise LockBackendError(f"{cfg.fence_key}: fencing counter changed by others on 10 attempts in a row")

    def _start_heartbeat(self) -> None:
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(
            target=self._heartbeat_forever,
            args=(self._stop,),
            name=f"hoodied-dynamodb-lock {self._where}",
            daemon=True,
        )
        self._heartbeat.start()
        _HELD.add(self)

    def _holder(self) -> str | None:
        try:
            raw = self._get(self.config.partition_key)
        except (LockBackendError, ClientError):
            return None
        if raw is None:
            return None
        try:
            item = LockItem.parse(raw, self._describe())
        except HoodieFormatError:
            return None
        state = "released" if item.released else f"lease {item.lease_ms} ms"
        return f"owner {item.owner} ({state}, record version {item.record_version})"

    # ------------------------------------------------------------ keep and check

    def _heartbeat_once(self) -> str | None:
        """One conditional heartbeat; why the lock is lost, or ``None`` (sent, or to be retried)."""
        with self._io:
            if self._record_version is None:
                return "not held"
            if time.monotonic() >= self._lease_end:
                return "lease ran out before a heartbeat could be sent (paused, or service unreachable)"
            new_version = str(uuid.uuid4())
            sent = time.monotonic()
            try:
                self._call(
                    "UpdateItem",
                    self._client.update_item,
                    TableName=self.config.table,
                    Key={PARTITION_KEY_NAME: _s(self.config.partition_key)},
                    UpdateExpression="SET #ld = :ld, #rvn = :newRvn",
                    ConditionExpression="attribute_exists(#pk) AND #rvn = :rvn AND #on = :on",
                    ExpressionAttributeNames={n: _NAMES[n] for n in ("#pk", "#ld", "#rvn", "#on")},
                    ExpressionAttributeValues={
                        ":ld": _s(str(self.lease_ms)),
                        ":newRvn": _s(new_version),
                        ":rvn": _s(self._record_version),
                        ":on": _s(self.owner),
                    },
                )
            except ClientError:
                return "the lock item was changed by another writer (lock taken over)"
            except LockBackendError as exc:
                log.warning("%s: heartbeat failed (%s), will retry", self._describe(), exc)
                return None
            self._record_version, self._lease_end = new_version, sent + self.lease_ms / 1000
            return None

    def _heartbeat_forever(self, stop: threading.Event) -> None:
        while not stop.wait(self.heartbeat_ms / 1000):
            if self._lost is not None:
                return
            why = self._heartbeat_once()
            if why is not None:
                if not stop.is_set():
                    self._mark_lost(why)
                return

    def _check_held(self) -> str | None:
        with self._io:
            left_ms = int((self._lease_end - time.monotonic()) * 1000)
            if left_ms < self.margin_ms:
                return f"lease not renewed in time ({left_ms} ms left by this host's monotonic clock)"
            try:
                raw = self._get(self.config.partition_key)
            except LockBackendError as exc:
                # the lease itself excludes every other writer until it ends, and the check above holds
                log.warning("%s: cannot read the lock item to confirm ownership (%s)", self._describe(), exc)
                return None
            if raw is None:
                return "the lock item is gone"
            try:
                item = LockItem.parse(raw, self._describe())
            except HoodieFormatError as exc:
                return str(exc)
            if item.owner != self.owner or item.record_version != self._record_version or item.released:
                return f"the lock item now names owner {item.owner} (released={str(item.released).lower()})"
            return None

    # ------------------------------------------------------------ release

    def _release(self) -> None:
        _HELD.discard(self)
        self._stop.set()
        thread, self._heartbeat = self._heartbeat, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.lease_ms / 1000)
        with self._io:
            version, self._record_version = self._record_version, None
            if version is None:
                return
            try:
                self._call(
                    "DeleteItem",
                    self._client.delete_item,
                    TableName=self.config.table,
                    Key={PARTITION_KEY_NAME: _s(self.config.partition_key)},
                    ConditionExpression="attribute_exists(#pk) AND #rvn = :rvn AND #on = :on",
                    ExpressionAttributeNames={n: _NAMES[n] for n in ("#pk", "#rvn", "#on")},
                    ExpressionAttributeValues={":rvn": _s(version), ":on": _s(self.owner)},
                )
            except ClientError:
                log.warning("%s: released a lock that was no longer ours (taken over)", self._describe())


def dynamodb_lock_from_url(url: str, storage: Storage, settings: LockSettings | None = None) -> DynamoDBLock:
    """``--lock dynamodb://...`` -> the table's DynamoDB lock (not yet acquired).

    Without ``partition_key`` in the URL the key is the table's ``hoodie.table.name``, as Hudi infers it.
    """

    try:
        config = DynamoDBLockConfig.from_url(url, functools.partial(read_table_name, storage))
    except ValueError as exc:
        raise ValueError(f"--lock {exc}") from None
    return DynamoDBLock(storage.base_uri, config, settings)

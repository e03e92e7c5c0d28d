"""The table lock in ZooKeeper, shared with Apache Hudi writers: Hudi's ZooKeeper lock provider.

Mirrors ``org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider``, which takes the
lock with Apache Curator's ``InterProcessMutex``, so a Hudi writer configured with
``hoodie.write.lock.provider=org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider``
and hoodied exclude each other on the same table. A plain kazoo ``Lock`` recipe does not: its
nodes are named ``<uuid>__lock__<seq>``, which Curator sorts apart from its own (see "Order"), so
both would hold the lock at once. hoodied speaks Curator's recipe itself, with kazoo as the
ZooKeeper client. The facts it relies on, by class:

- Lock path (Hudi ``BaseZookeeperBasedLockProvider.getLockPath``,
  ``ZookeeperBasedLockProvider.getZkBasePath`` / ``getLockKey``): ``<base_path> + "/" + <lock_key>``,
  from ``hoodie.write.lock.zookeeper.base_path`` and ``hoodie.write.lock.zookeeper.lock_key``;
  both are required by the provider (``ValidationUtils.checkArgument``), and ``HoodieLockConfig``
  infers a missing ``lock_key`` from the writer's table name (``hoodie.table.name``). hoodied
  takes that name from the table's ``hoodie.properties``, where Hudi writers store it.
- Path rules (Curator ``LockInternals`` constructor -> ``utils.PathUtils.validatePath``): the lock
  path must start with ``/``, must not end with ``/``, has no empty, ``.`` or ``..`` segment and
  no NUL or control character; otherwise Curator refuses it before taking anything, and hoodied
  refuses it too (so ``base_path`` must start with ``/`` and have no trailing ``/``).
- Path creation (Hudi ``BaseZookeeperBasedLockProvider.createPathIfNotExists`` /
  ``createNodeIfNotExists``): every component of the lock path is created as a persistent node
  with empty data when missing, a ``NODEEXISTS`` race ignored. hoodied does the same.
- Connection (Hudi ``BaseZookeeperBasedLockProvider`` constructor, ``LockConfiguration``,
  ``HoodieLockConfig``): connect string ``hoodie.write.lock.zookeeper.url`` (``host:port[,...]``;
  the provider never reads ``hoodie.write.lock.zookeeper.port``, so ports belong in the url),
  session timeout ``hoodie.write.lock.zookeeper.session_timeout_ms`` (default 60000), connection
  timeout ``hoodie.write.lock.zookeeper.connection_timeout_ms`` (default 15000); Curator retries
  an operation on connection loss with ``BoundedExponentialBackoffRetry(wait_time_ms_between_retry
  = 1000, max_wait_time_ms_between_retry = 5000, num_retries = 15)``. A lock attempt waits
  ``hoodie.write.lock.wait_time_ms`` (60000). hoodied takes the same timeouts; its retries are
  ``LockSettings``' (each failed attempt closes its session, the next one opens a fresh one).
- Nodes (Curator ``InterProcessMutex.LOCK_NAME = "lock-"``, ``LockInternals`` constructor
  ``ZKPaths.makePath(path, lockName)``, ``StandardLockInternalsDriver.createsTheLock``): each
  contender creates one ``EPHEMERAL_SEQUENTIAL`` child of the lock path with protection
  (``CreateBuilderImpl.withProtection``, ``ProtectedUtils.getProtectedPrefix``): the name is
  ``"_c_" + UUID.randomUUID().toString() + "-" + "lock-"``, to which ZooKeeper appends a 10-digit
  zero-padded sequence, e.g. ``_c_0f8e...-lock-0000000007``. The UUID is a fresh random one per
  create (``ProtectedMode.resetProtectedId``), lower-case canonical text.
- Node data (Hudi ``HoodieInterProcessMutex.getLockNodeBytes``): ``application_id=<id>`` in UTF-8
  (``LockConfiguration.LOCK_HOLDER_APP_ID_KEY``, ``Unknown`` when unset); only for people reading
  the node. hoodied writes ``application_id=hoodied@<host>:<pid>``.
- Protected create (``CreateBuilderImpl.pathInForeground`` / ``findProtectedNodeInForeground``):
  when a create fails with connection loss, the retry first lists the children and takes a child
  starting with ``_c_<uuid>-`` as the node it already created. hoodied does the same.
- Order (``LockInternals.getSortedChildren``, ``StandardLockInternalsDriver.fixForSorting``): the
  children are sorted by the text after the last ``"lock-"`` in their name (the whole name when it
  has none), compared as strings (``String.compareTo``). Every child takes part, whatever its name.
- Holder (``StandardLockInternalsDriver.getsTheLock``, ``maxLeases = 1``): the first child in that
  order holds the lock; every other contender watches the child just before its own
  (``LockInternals.internalLockLoop``, ``getData().usingWatcher``; a ``NoNode`` there means it went:
  look again). When its wait runs out it deletes its own node and gives up; on any error it deletes
  its node too (``deleteOurPath``, guaranteed delete).
- Release (``LockInternals.releaseLock``): delete the holder's own node. Hudi does not delete the
  lock path (``InterProcessMutex`` leaves it, Hudi's provider created it persistent).
- Loss: the node is ephemeral: ZooKeeper removes it when the holder's session expires (no
  heartbeat for the session timeout) or is closed. Curator reports SUSPENDED when the connection
  drops and LOST when the session is gone (``framework.state.ConnectionState``); a holder cannot be
  sure it still holds the lock while SUSPENDED. Hudi's provider does not watch these states: a
  Hudi writer whose session expired keeps writing until its next lock call.

hoodied's own rules (Hudi writers neither see nor need them):

- One ZooKeeper session per holding: ``acquire`` opens it, ``release`` deletes the node and closes
  the session (which would remove the node anyway), so no session outlives its lock. Locks still
  held at interpreter exit are released then: a process that just exits would otherwise leave its
  node until the session times out, keeping Hudi writers out that long.
- ``ensure_held()`` (right before each timeline write) asks the server: the session must be
  connected (not SUSPENDED, LOST or read-only), our node must exist, be owned by our session
  (``ephemeralOwner``) and still sort first among the children. Anything else, or an error while
  asking, is a loss. A LOST session seen by the connection listener marks the lock lost at once.
- ``holder()`` (``hoodied inspect``) opens its own short session, lists the lock path's children
  and reads the first in Curator's order: its data (Hudi's ``application_id=...``) is the owner,
  its ``ctime`` (server clock) when the holding began. It creates nothing, not even the lock path.
  An ephemeral node never looks expired: ZooKeeper removes it with its session.
- Fencing token: the ``czxid`` of our node (the ZooKeeper transaction id that created it). Holders
  take the lock in node order and each node was created after the ones before it, and zxids only
  grow on an ensemble, so each new holder's token is larger than every earlier holder's. The
  sequence number would not do: it restarts at 0 when the lock path is deleted and created again
  (Curator makes missing parents as container nodes, which the server removes once empty), and it
  wraps at 2^31.
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

from kazoo.client import KazooClient, KazooState  # type: ignore[import-untyped]
from kazoo.exceptions import (  # type: ignore[import-untyped]
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError  # type: ignore[import-untyped]
from kazoo.protocol.states import KeeperState  # type: ignore[import-untyped]

from hoodied.hoodie.errors import LockConfigError
from hoodied.hoodie.locks import (
    DEFAULT_INSPECT_TIMEOUT_S,
    LockBackendError,
    LockHolder,
    LockLocation,
    LockSettings,
    TableLockBase,
    lock_key,
    utc_from_ms,
)
from hoodied.hoodie.properties import read_table_name
from hoodied.hoodie.storage import Storage

log = logging.getLogger(__name__)
# kazoo reports every connect and close at INFO; one session per holding would fill a command's
# output with them. Its warnings (connection dropped, session expired) still show.
_KAZOO_LOG = logging.getLogger(f"{__name__}.kazoo")
_KAZOO_LOG.setLevel(logging.WARNING)
# holder() reports an unreachable server itself, in one line: kazoo's own retry warnings would repeat it
_KAZOO_INSPECT_LOG = logging.getLogger(f"{__name__}.kazoo.inspect")
_KAZOO_INSPECT_LOG.setLevel(logging.ERROR)

__all__ = [
    "BASE_PATH_KEY",
    "HUDI_KEYS",
    "LOCK_NAME",
    "PORT_KEY",
    "PROTECTED_PREFIX",
    "URL_KEY",
    "ZooKeeperLock",
    "ZooKeeperLockConfig",
    "curator_sort_key",
    "validate_znode_path",
    "zookeeper_lock_from_url",
]

#: ``InterProcessMutex.LOCK_NAME``: the part of every lock node's name before its sequence.
LOCK_NAME = "lock-"
#: ``ProtectedUtils.PROTECTED_PREFIX``: protected nodes are named ``_c_<uuid>-<name>``.
PROTECTED_PREFIX = "_c_"
#: ``LockConfiguration.DEFAULT_ZK_SESSION_TIMEOUT_MS`` / ``DEFAULT_ZK_CONNECTION_TIMEOUT_MS``.
DEFAULT_SESSION_TIMEOUT_MS = 60_000
DEFAULT_CONNECTION_TIMEOUT_MS = 15_000

#: Hudi's keys of the connect string and the base path (``LockConfiguration.ZK_CONNECT_URL_PROP_KEY``,
#: ``ZK_BASE_PATH_PROP_KEY``); ``ZK_PORT_PROP_KEY`` is ``PORT_KEY``, which the provider never reads.
URL_KEY = "hoodie.write.lock.zookeeper.url"
BASE_PATH_KEY = "hoodie.write.lock.zookeeper.base_path"
PORT_KEY = "hoodie.write.lock.zookeeper.port"

# Query parameters of a zookeeper:// URL and Hudi's keys they stand for.
_URL_KEYS = {
    "lock_key": "hoodie.write.lock.zookeeper.lock_key",
    "session_timeout_ms": "hoodie.write.lock.zookeeper.session_timeout_ms",
    "connection_timeout_ms": "hoodie.write.lock.zookeeper.connection_timeout_ms",
}
#: Every key of ``ZookeeperBasedLockProvider``.
HUDI_KEYS = (URL_KEY, PORT_KEY, BASE_PATH_KEY, *_URL_KEYS.values())
_URL_FORM = "zookeeper://HOST:PORT[,HOST:PORT...]/BASE_PATH[?lock_key=KEY]"
_ERRORS = (KazooException, KazooTimeoutError, OSError)


def validate_znode_path(path: str) -> str:
    """``path`` if ZooKeeper and Curator accept it as a node path (``PathUtils.validatePath``)."""
    if not path.startswith("/"):
        raise ValueError(f"ZooKeeper path {path!r} must start with /")
    if path == "/":
        return path
    if path.endswith("/"):
        raise ValueError(f"ZooKeeper path {path!r} must not end with /")
    for segment in path[1:].split("/"):
        if not segment:
            raise ValueError(f"ZooKeeper path {path!r} has an empty node name")
        if segment in (".", ".."):
            raise ValueError(f"ZooKeeper path {path!r} has a relative segment {segment!r}")
        for c in segment:
            o = ord(c)
            # the UTF-16 ranges PathUtils refuses, as written there (bounds exclusive); a character
            # beyond U+FFFF is a surrogate pair in Java, whose low half falls in the refused range
            if (
                o == 0
                or 0 < o < 0x1F
                or 0x7F < o < 0x9F
                or 0xD800 < o < 0xF8FF
                or 0xFFF0 < o < 0xFFFF
                or o > 0xFFFF
            ):
                raise ValueError(f"ZooKeeper path {path!r} has an invalid character {c!r}")
    return path


def curator_sort_key(child: str) -> str:
    """The text Curator orders lock nodes by: what follows the last ``lock-`` (``fixForSorting``)."""
    index = child.rfind(LOCK_NAME)
    return child[index + len(LOCK_NAME) :] if index >= 0 else child


@dataclass(frozen=True, slots=True)
class ZooKeeperLockConfig:
    """Where the lock lives and the session's timeouts; defaults are Hudi's."""

    hosts: str
    """Connect string, ``host:port[,host:port...]`` (``hoodie.write.lock.zookeeper.url``)."""
    base_path: str
    """``hoodie.write.lock.zookeeper.base_path``."""
    lock_key: str
    """``hoodie.write.lock.zookeeper.lock_key`` (Hudi's default: the table name)."""
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    connection_timeout_ms: int = DEFAULT_CONNECTION_TIMEOUT_MS

    def __post_init__(self) -> None:
        if not self.hosts or "/" in self.hosts:
            raise ValueError(f"ZooKeeper connect string {self.hosts!r}: expected host:port[,host:port...]")
        if self.session_timeout_ms <= 0 or self.connection_timeout_ms <= 0:
            raise ValueError("ZooKeeper session and connection timeouts must be positive")
        if not self.lock_key:
            raise ValueError("ZooKeeper lock key is empty")
        validate_znode_path(self.lock_path)

    @property
    def lock_path(self) -> str:
        """``base_path + "/" + lock_key``, exactly as Hudi builds it (no normalization)."""
        return self.base_path + "/" + self.lock_key

    @classmethod
    def from_hudi_keys(
        cls, keys: Mapping[str, str], table_name: Callable[[], str | None]
    ) -> ZooKeeperLockConfig:
        """The lock of Hudi's ``hoodie.write.lock.zookeeper.*`` keys (``url`` and ``base_path`` required).

        ``table_name`` is called only when ``lock_key`` is unset (Hudi's inference); ``port`` is
        accepted and not read, as Hudi's provider does not read it (see the module docstring).
        A missing or bad key is a ``ValueError`` that names it.
        """
        for required in (URL_KEY, BASE_PATH_KEY):
            if not keys.get(required):
                raise ValueError(f"{required} is required by ZookeeperBasedLockProvider")
        name = keys.get(_URL_KEYS["lock_key"]) or table_name()
        if not name:
            raise LockConfigError(
                f"{_URL_KEYS['lock_key']} is not set and the table has no hoodie.table.name to infer it from"
            )
        timeouts = {}
        for field_name in ("session_timeout_ms", "connection_timeout_ms"):
            text = keys.get(_URL_KEYS[field_name])
            if text is None:
                continue
            try:
                timeouts[field_name] = int(text)
            except ValueError:
                key = _URL_KEYS[field_name]
                raise ValueError(f"{key}={text!r}: timeouts must be whole milliseconds") from None
        return cls(hosts=keys[URL_KEY], base_path=keys[BASE_PATH_KEY], lock_key=name, **timeouts)

    @classmethod
    def from_url(cls, url: str, table_name: Callable[[], str | None]) -> ZooKeeperLockConfig:
        """Parse ``zookeeper://HOSTS/BASE_PATH?lock_key=KEY&session_timeout_ms=..&connection_timeout_ms=..``.

        The URL is read into Hudi's keys (``_URL_KEYS``) and built by ``from_hudi_keys``;
        ``table_name`` is called only when the URL has no ``lock_key`` (Hudi's inference).
        """
        parts = urlsplit(url)
        if parts.scheme != "zookeeper" or not parts.netloc:
            raise ValueError(f"{url!r}: expected {_URL_FORM}")
        if not parts.path or parts.path == "/":
            raise ValueError(f"{url!r}: no base path ({BASE_PATH_KEY}); expected {_URL_FORM}")
        keys = {URL_KEY: parts.netloc, BASE_PATH_KEY: unquote(parts.path)}
        for key, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)):
            if key not in _URL_KEYS:
                raise ValueError(f"{url!r}: unknown parameter {key!r} (known: {', '.join(_URL_KEYS)})")
            keys[_URL_KEYS[key]] = value
        if not keys.get(_URL_KEYS["lock_key"]) and not table_name():
            raise LockConfigError(
                f"{url}: no lock_key given and the table has no hoodie.table.name to infer it from "
                f"({_URL_KEYS['lock_key']})"
            )
        try:
            return cls.from_hudi_keys(keys, table_name)
        except LockConfigError:
            raise
        except ValueError as exc:
            raise ValueError(f"{url!r}: {exc}") from None


# Locks held by this process, released at interpreter exit (see the module docstring).
_HELD: weakref.WeakSet[ZooKeeperLock] = weakref.WeakSet()


@atexit.register
def _release_held_locks() -> None:
    for lock in list(_HELD):
        lock.release()


class ZooKeeperLock(TableLockBase):
    """Hudi's ZooKeeper lock (Curator ``InterProcessMutex``) of one table; see the module docstring.

    ``settings`` decide how long one attempt waits, how often it is retried and the pause between
    attempts; ``lease_ms`` and ``poll_ms`` are not used (the session timeout is the lease, and a
    waiting attempt is woken by a watch on its predecessor, not by polling).
    """

    def __init__(
        self, base_uri: str, config: ZooKeeperLockConfig, settings: LockSettings | None = None
    ) -> None:
        super().__init__(lock_key(base_uri), settings)
        self.config = config
        self.node: str | None = None
        """Our node's name (a child of the lock path) while held."""
        self._client: KazooClient | None = None
        self._session: int | None = None
        self._wake: threading.Event | None = None
        self._last_holder: str | None = None
        self._data = f"application_id=hoodied@{socket.gethostname()}:{os.getpid()}".encode()

    def _describe(self) -> str:
        return f"zookeeper lock {self.config.hosts}{self.config.lock_path}"

    def _holder(self) -> str | None:
        return self._last_holder

    def location(self) -> LockLocation:
        return LockLocation("zookeeper", f"zookeeper://{self.config.hosts}{self.config.lock_path}")

    def holder(self, timeout_s: float = DEFAULT_INSPECT_TIMEOUT_S) -> LockHolder | None:
        """The first lock node and its data, read in a session of its own (see the module docstring)."""
        cfg = self.config
        client = KazooClient(
            hosts=cfg.hosts,
            timeout=cfg.session_timeout_ms / 1000,
            # retried until start() gives up after timeout_s (a first connect may be dropped at once)
            connection_retry={"max_tries": -1, "max_delay": 0.5},
            logger=_KAZOO_INSPECT_LOG,
        )
        try:
            try:
                client.start(timeout=timeout_s)
            except _ERRORS as exc:
                why = exc or type(exc).__name__
                raise LockBackendError(
                    f"{cfg.hosts}: no ZooKeeper connection within {timeout_s:g} s ({why})"
                ) from None
            for _ in range(5):  # the first node may go between listing and reading it: look again
                try:
                    children = client.get_children_async(cfg.lock_path).get(timeout=timeout_s)
                except NoNodeError:
                    return None
                if not children:
                    return None
                first = min(children, key=curator_sort_key)
                try:
                    data, stat = client.get_async(f"{cfg.lock_path}/{first}").get(timeout=timeout_s)
                except NoNodeError:
                    continue
                waiting = len(children) - 1
                return LockHolder(
                    owner=data.decode(errors="replace") or first,
                    location=self.location(),
                    since=utc_from_ms(stat.ctime),
                    detail=f"node {first}, session {stat.ephemeralOwner:#x}, {waiting} waiting",
                )
            raise LockBackendError(f"{cfg.hosts}{cfg.lock_path}: lock nodes kept changing while being read")
        except _ERRORS as exc:
            raise LockBackendError(f"{cfg.hosts}: {type(exc).__name__}: {exc}".rstrip(": ")) from None
        finally:
            self._close(client)

    # ------------------------------------------------------------ session

    def _connect(self) -> KazooClient:
        cfg = self.config
        client = KazooClient(
            hosts=cfg.hosts,
            timeout=cfg.session_timeout_ms / 1000,
            # reconnect within a session as long as it lives; LOST then ends the holding
            connection_retry={"max_tries": -1, "max_delay": 1.0},
            randomize_hosts=True,
            logger=_KAZOO_LOG,
        )
        client.add_listener(self._on_state)
        try:
            client.start(timeout=cfg.connection_timeout_ms / 1000)
        except _ERRORS as exc:
            self._close(client)
            raise LockBackendError(
                f"{cfg.hosts}: no ZooKeeper connection within {cfg.connection_timeout_ms} ms "
                f"({exc or type(exc).__name__})"
            ) from None
        return client

    def _op(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One ZooKeeper request, waited for at most the connection timeout.

        kazoo's own wait has no bound: a request made while the connection is down waits for the
        next connection, which never comes when the server is gone.
        """
        return call(*args, **kwargs).get(timeout=self.config.connection_timeout_ms / 1000)

    def _on_state(self, state: str) -> None:
        # called on kazoo's connection thread: never block here
        wake = self._wake
        if wake is not None:
            wake.set()
        if state == KazooState.LOST and self.node is not None:
            self._mark_lost("ZooKeeper session expired: the server removed our lock node")

    @staticmethod
    def _close(client: KazooClient) -> None:
        try:
            client.stop()  # closes the session: the server removes our ephemeral node at once
            client.close()
        except _ERRORS as exc:  # a dead connection may fail to close; the session then times out
            log.debug("closing ZooKeeper client: %r", exc)

    # ------------------------------------------------------------ acquire

    def _ensure_lock_path(self, client: KazooClient) -> None:
        """Create each missing component as a persistent node (``createPathIfNotExists``)."""
        current = ""
        for part in self.config.lock_path.split("/"):
            if not part:
                continue
            current += "/" + part
            if self._op(client.exists_async, current) is None:
                try:
                    self._op(client.create_async, current, b"")
                except NodeExistsError:
                    pass  # another writer created it meanwhile

    def _create_node(self, client: KazooClient, deadline: float) -> str:
        """Our protected ephemeral sequential node; its name. Retried on connection loss as Curator does."""
        prefix = f"{PROTECTED_PREFIX}{uuid.uuid4()}-"
        path = self.config.lock_path
        first = True
        while True:
            try:
                if not first:
                    # the create may have reached the server before the connection dropped
                    mine = [c for c in self._op(client.get_children_async, path) if c.startswith(prefix)]
                    if mine:
                        return str(mine[0])
                first = False
                created = self._op(
                    client.create_async,
                    f"{path}/{prefix}{LOCK_NAME}",
                    self._data,
                    ephemeral=True,
                    sequence=True,
                )
                return str(created).rsplit("/", 1)[1]
            except ConnectionLoss:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(self.settings.retry_interval_ms / 1000, 0.5) or 0.05)

    def _try_acquire(self, wait_s: float) -> int | None:
        deadline = time.monotonic() + wait_s
        self._last_holder = None
        client = self._connect()
        node: str | None = None
        try:
            self._ensure_lock_path(client)
            # connection losses while creating are retried at least for a second, however short the wait
            node = self._create_node(client, max(deadline, time.monotonic() + 1))
            token = self._wait_until_first(client, node, deadline)
        except _ERRORS as exc:
            # Curator deletes its node on any error; closing the session does that here
            self._close(client)
            raise LockBackendError(f"{self.config.hosts}: {type(exc).__name__}: {exc}".rstrip(": ")) from None
        finally:
            self._wake = None
        if token is None:
            try:
                self._op(client.delete_async, f"{self.config.lock_path}/{node}")
            except _ERRORS as exc:
                log.debug("%s: deleting our node after the wait: %r", self._describe(), exc)
            self._close(client)
            return None
        self._client, self._session, self.node = client, int(client.client_id[0]), node
        _HELD.add(self)
        return token

    def _wait_until_first(self, client: KazooClient, node: str, deadline: float) -> int | None:
        """Curator's ``internalLockLoop``: the fencing token once our node is first, else ``None``."""
        path = self.config.lock_path
        while True:
            children = sorted(self._op(client.get_children_async, path), key=curator_sort_key)
            if node not in children:
                raise NoNodeError(f"our lock node {node} is gone (session expired?)")
            index = children.index(node)
            if index == 0:
                stat = self._op(client.exists_async, f"{path}/{node}")
                if stat is None:
                    raise NoNodeError(f"our lock node {node} is gone (session expired?)")
                return int(stat.czxid)
            previous = children[index - 1]
            wake = self._wake = threading.Event()
            try:
                data, _ = self._op(
                    client.get_async, f"{path}/{previous}", watch=lambda _event, w=wake: w.set()
                )
            except NoNodeError:
                continue  # it went between the listing and the watch: look again
            left = deadline - time.monotonic()
            if left <= 0:
                first = children[0]
                self._last_holder = (
                    first if first != previous else f"{first} ({data.decode(errors='replace')})"
                )
                return None
            wake.wait(left)

    # ------------------------------------------------------------ keep and check

    def _check_held(self) -> str | None:
        client, node = self._client, self.node
        if client is None or node is None:
            return "no ZooKeeper session"
        if client.client_state != KeeperState.CONNECTED:
            return f"ZooKeeper connection is {client.state} ({client.client_state})"
        path = self.config.lock_path
        try:
            stat = self._op(client.exists_async, f"{path}/{node}")
            if stat is None:
                return f"our lock node {node} is gone"
            if stat.ephemeralOwner != self._session:
                return f"our lock node {node} now belongs to session {stat.ephemeralOwner:#x}"
            first = min(self._op(client.get_children_async, path), key=curator_sort_key)
        except _ERRORS as exc:
            return f"ownership cannot be confirmed: {type(exc).__name__}: {exc}".rstrip(": ")
        if first != node:
            return f"node {first} now sorts before ours ({node})"
        return None

    # ------------------------------------------------------------ release

    def _release(self) -> None:
        _HELD.discard(self)
        client, node = self._client, self.node
        self._client, self._session, self.node = None, None, None
        if client is None:
            return
        try:
            if node is not None:
                self._op(client.delete_async, f"{self.config.lock_path}/{node}")
        except NoNodeError:
            log.warning("%s: our lock node %s was already gone", self._describe(), node)
        except _ERRORS as exc:
            log.warning(
                "%s: deleting our lock node failed (%r); closing the session removes it",
                self._describe(),
                exc,
            )
        finally:
            self._close(client)


def zookeeper_lock_from_url(
    url: str, storage: Storage, settings: LockSettings | None = None
) -> ZooKeeperLock:
    """``--lock zookeeper://...`` -> the table's ZooKeeper lock (not yet acquired).

    Without ``lock_key`` in the URL the lock key is the table's ``hoodie.table.name``, as Hudi infers it.
    """

    try:
        config = ZooKeeperLockConfig.from_url(url, functools.partial(read_table_name, storage))
    except ValueError as exc:
        raise ValueError(f"--lock {exc}") from None
    return ZooKeeperLock(storage.base_uri, config, settings)

"""Hudi's ZooKeeper lock (``service.zookeeper_lock``) against a real ZooKeeper and a real Curator client.

The server is Debian's ZooKeeper on loopback; the other writer is ``CuratorHolder``, a Java program
taking Apache Curator's ``InterProcessMutex`` exactly as Hudi's ``ZookeeperBasedLockProvider`` does.
Both directions are checked (Curator holds and hoodied waits, hoodied holds and Curator waits), a
Curator holder killed with SIGKILL, two hoodied processes racing, and the losses ``ensure_held``
must see. A plain ``kazoo`` client, never the code under test, looks at the nodes.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient  # type: ignore[import-untyped]

from hoodied.hoodie.errors import LockConfigError, LockLostError, LockServiceDownError, LockUnavailableError
from hoodied.hoodie.locks import LockSettings, TableLock
from hoodied.hoodie.storage import LocalStorage
from hoodied.service.cli.main import cli
from hoodied.service.locks import lock_from_option
from hoodied.service.zookeeper_lock import (
    ZooKeeperLock,
    ZooKeeperLockConfig,
    curator_sort_key,
    validate_znode_path,
)
from tests.helpers import zookeeper_server as zk_helpers
from tests.helpers.lock_race import race
from tests.helpers.redis_server import free_port
from tests.helpers.zookeeper_server import CuratorHolder, ZooKeeperServer

# the helper's fixtures, made visible to this module's tests
zookeeper_server = zk_helpers.zookeeper_server
curator_holder = zk_helpers.curator_holder

# A protected Curator lock node: "_c_" + UUID.toString() + "-" + "lock-" + 10-digit sequence.
CURATOR_NODE = re.compile(r"^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lock-\d{10}$")
NO_WAIT = LockSettings(wait_ms=0, retries=0, retry_interval_ms=0)
SHORT = LockSettings(wait_ms=1_000, retries=0, retry_interval_ms=0)
WAIT = LockSettings(wait_ms=20_000, retries=0, retry_interval_ms=0)


# ---------------------------------------------------------------- helpers


@pytest.fixture
def zk(zookeeper_server: ZooKeeperServer) -> Iterator[KazooClient]:
    """An observer client (plain kazoo) to look at and tamper with the nodes."""
    client = KazooClient(hosts=zookeeper_server.hosts, timeout=10)
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def base_path() -> str:
    """A fresh base path per test, so tests sharing the server never share a lock."""
    return f"/hudi/locks-{uuid.uuid4().hex[:8]}"


def _config(server: ZooKeeperServer, base: str, key: str = "trips", **kw: int) -> ZooKeeperLockConfig:
    return ZooKeeperLockConfig(hosts=server.hosts, base_path=base, lock_key=key, **kw)


class Lines:
    """The lines a child process prints, read on a thread so a test can wait with a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self._q: queue.Queue[tuple[float, str]] = queue.Queue()
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:  # closed here at its end, by the only thread reading it
            for line in self.proc.stdout:
                self._q.put((time.monotonic(), line.strip()))

    def next(self, timeout: float) -> tuple[float, str] | None:
        """(time it arrived, line), or ``None`` when nothing came within ``timeout``."""
        try:
            return self._q.get(timeout=timeout)
        except queue.Empty:
            return None


@pytest.fixture
def holders(curator_holder: CuratorHolder) -> Iterator[list[Lines]]:
    """Curator holders started by a test; killed at its end if still running."""
    started: list[Lines] = []
    yield started
    for lines in started:
        p = lines.proc
        if p.poll() is None:
            p.kill()
        p.wait(10)
        if p.stdin is not None:
            p.stdin.close()
        lines.pump.join(10)


def _start_holder(
    curator_holder: CuratorHolder, started: list[Lines], hosts: str, path: str, **kw: int
) -> Lines:
    lines = Lines(curator_holder.start(hosts, path, **kw))
    started.append(lines)
    return lines


def _close_stdin(lines: Lines) -> None:
    """The holder releases when its stdin closes."""
    assert lines.proc.stdin is not None
    lines.proc.stdin.close()


def _children(zk: KazooClient, path: str) -> list[str]:
    return sorted(zk.get_children(path), key=curator_sort_key)


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


# ---------------------------------------------------------------- the recipe, as Curator has it


def test_curator_order_and_path_rules() -> None:
    # StandardLockInternalsDriver.fixForSorting: the text after the last "lock-", else the whole name
    assert curator_sort_key("_c_0f8e6c5a-1b2c-4d3e-8f9a-0123456789ab-lock-0000000007") == "0000000007"
    assert curator_sort_key("x-lock-y-lock-0000000002") == "0000000002"
    assert curator_sort_key("__lock__0000000001") == "__lock__0000000001"  # a kazoo Lock node
    names = ["a-lock-0000000003", "_c_x-lock-0000000001", "b-lock-0000000002"]
    assert sorted(names, key=curator_sort_key) == [
        "_c_x-lock-0000000001",
        "b-lock-0000000002",
        "a-lock-0000000003",
    ]
    # kazoo's own Lock recipe names nodes "<uuid>__lock__<seq>": Curator sorts them by the whole name,
    # so a digit-led Curator sequence sorts first and both would think they hold the lock
    assert sorted(["0f8e__lock__0000000000", "_c_y-lock-0000000005"], key=curator_sort_key)[0] == (
        "_c_y-lock-0000000005"
    )
    # PathUtils.validatePath
    assert validate_znode_path("/hudi/locks/trips") == "/hudi/locks/trips"
    for bad, why in [
        ("hudi/x", "must start with /"),
        ("/hudi/", "must not end with /"),
        ("/hudi//x", "empty node name"),
        ("/hudi/./x", "relative"),
        ("/hudi/../x", "relative"),
        ("/hudi/a\x01b", "invalid character"),
        ("/hudi/a\U0001f600", "invalid character"),
    ]:
        with pytest.raises(ValueError, match=why):
            validate_znode_path(bad)


def test_lock_option_parses_the_url_and_infers_the_key_from_the_table(tmp_path: Path) -> None:
    table = tmp_path / "t"
    (table / ".hoodie").mkdir(parents=True)
    (table / ".hoodie" / "hoodie.properties").write_text(
        "hoodie.table.name=trips_cow\nhoodie.table.type=COPY_ON_WRITE\n"
    )
    storage = LocalStorage(str(table))

    lock, factory = lock_from_option("zookeeper://zk1:2181,zk2:2181/hudi/locks?lock_key=orders", storage)
    assert isinstance(lock, ZooKeeperLock) and factory is None
    assert lock.config == ZooKeeperLockConfig("zk1:2181,zk2:2181", "/hudi/locks", "orders", 60_000, 15_000)
    assert lock.config.lock_path == "/hudi/locks/orders"
    assert not lock.is_held

    # HoodieLockConfig.ZK_LOCK_KEY is inferred from the table name
    lock, _ = lock_from_option(
        "zookeeper://127.0.0.1:2181/hudi?session_timeout_ms=5000&connection_timeout_ms=700", storage, SHORT
    )
    assert isinstance(lock, ZooKeeperLock) and lock.settings == SHORT
    assert (lock.config.lock_path, lock.config.session_timeout_ms, lock.config.connection_timeout_ms) == (
        "/hudi/trips_cow",
        5000,
        700,
    )

    lock, _ = lock_from_option("zookeeper://[::1]:2181/hudi%20lake/locks?lock_key=db.trips%2Fv2", storage)
    assert isinstance(lock, ZooKeeperLock)
    assert (lock.config.hosts, lock.config.lock_path) == ("[::1]:2181", "/hudi lake/locks/db.trips/v2")

    for url, why in [
        ("zookeeper://127.0.0.1:2181", "no base path"),
        ("zookeeper://127.0.0.1:2181/", "no base path"),
        ("zookeeper://127.0.0.1:2181/hudi/?lock_key=t", "empty node name"),
        ("zookeeper://127.0.0.1:2181/hudi/../x?lock_key=t", "relative"),
        ("zookeeper://127.0.0.1:2181/hudi?lock_key=t&wait=1", "unknown parameter 'wait'"),
        ("zookeeper://127.0.0.1:2181/hudi?lock_key=t&session_timeout_ms=soon", "whole milliseconds"),
        ("zookeeper:///hudi?lock_key=t", "expected zookeeper://"),
    ]:
        with pytest.raises(ValueError, match=why) as info:
            lock_from_option(url, storage)
        assert str(info.value).startswith("--lock ")

    (table / ".hoodie" / "hoodie.properties").write_text(
        "hoodie.table.name=\nhoodie.table.type=COPY_ON_WRITE\n"
    )
    with pytest.raises(LockConfigError, match="no lock_key given"):
        lock_from_option("zookeeper://127.0.0.1:2181/hudi", storage)
    with pytest.raises(ValueError, match=r"zookeeper://HOST:PORT/BASE_PATH\?lock_key=KEY"):
        lock_from_option("zk://127.0.0.1:2181/hudi", storage)


def test_unreachable_server_is_a_service_down_error() -> None:
    port = free_port()  # nothing listens there
    cfg = ZooKeeperLockConfig(f"127.0.0.1:{port}", "/hudi", "t", connection_timeout_ms=300)
    lock = ZooKeeperLock("/tables/t", cfg, LockSettings(wait_ms=0, retries=1, retry_interval_ms=10))
    started = time.monotonic()
    with pytest.raises(LockServiceDownError, match="no ZooKeeper connection within 300 ms"):
        lock.acquire()
    assert time.monotonic() - started < 5
    assert not lock.is_held


# ---------------------------------------------------------------- hoodied alone


def test_nodes_are_named_and_placed_as_curator_does(
    zookeeper_server: ZooKeeperServer, zk: KazooClient, base_path: str
) -> None:
    lock = ZooKeeperLock("/tables/trips", _config(zookeeper_server, base_path))
    assert isinstance(lock, TableLock)
    token = lock.acquire()
    try:
        lock.ensure_held()
        path = f"{base_path}/trips"
        (node,) = zk.get_children(path)
        assert node == lock.node and CURATOR_NODE.match(node), node
        data, stat = zk.get(f"{path}/{node}")
        assert data == f"application_id=hoodied@{socket.gethostname()}:{os.getpid()}".encode()
        assert stat.ephemeralOwner != 0 and token == stat.czxid == lock.fencing_token
        # Hudi's createPathIfNotExists: every component persistent (Curator would make containers)
        for p in ("/hudi", base_path, path):
            assert zk.exists(p).ephemeralOwner == 0
    finally:
        lock.release()
    assert zk.get_children(f"{base_path}/trips") == []  # release deletes our node; the path stays
    assert not lock.is_held
    lock.release()  # a second release is a no-op


def test_fencing_tokens_grow_even_when_the_lock_path_is_recreated(
    zookeeper_server: ZooKeeperServer, zk: KazooClient, base_path: str
) -> None:
    lock = ZooKeeperLock("/tables/t", _config(zookeeper_server, base_path, "t"), NO_WAIT)
    tokens, sequences = [], []
    for round_ in range(4):
        if round_ == 2:
            # the path deleted and created again (a container node's fate): sequences restart at 0
            zk.delete(f"{base_path}/t")
        tokens.append(lock.acquire())
        assert lock.node is not None
        sequences.append(int(lock.node.rsplit("-", 1)[1]))
        lock.release()
    assert tokens == sorted(set(tokens)), tokens
    assert sequences[2] < sequences[1], sequences  # so the sequence would not do as a token


# ---------------------------------------------------------------- against a real Curator client


def test_curator_holds_hoodied_waits_then_acquires(
    zookeeper_server: ZooKeeperServer, zk: KazooClient, base_path: str, curator_holder: CuratorHolder, holders
) -> None:
    path = f"{base_path}/trips"
    curator = _start_holder(curator_holder, holders, zookeeper_server.hosts, path)
    got = curator.next(30)
    assert got is not None and got[1].startswith("held "), got
    curator_node = got[1].split()[1].rsplit("/", 1)[1]
    assert CURATOR_NODE.match(curator_node)

    lock = ZooKeeperLock("/tables/trips", _config(zookeeper_server, base_path), SHORT)
    started = time.monotonic()
    with pytest.raises(
        LockUnavailableError, match=f"held by {curator_node} \\(application_id=curator-holder-"
    ):
        lock.acquire()
    waited = time.monotonic() - started
    assert 1.0 <= waited < 10, waited  # the configured wait, bounded
    assert zk.get_children(path) == [curator_node]  # the waiter's node went with its attempt

    # Curator releases: hoodied, waiting on a watch, gets the lock
    result: dict[str, object] = {}
    waiter = ZooKeeperLock("/tables/trips", _config(zookeeper_server, base_path), WAIT)
    thread = threading.Thread(target=lambda: result.setdefault("token", waiter.acquire()))
    thread.start()
    _wait_for(lambda: len(zk.get_children(path)) == 2, 10, "hoodied's node behind Curator's")
    assert _children(zk, path)[0] == curator_node
    _close_stdin(curator)
    thread.join(15)
    assert not thread.is_alive() and waiter.is_held
    released = curator.next(10)
    assert released is not None and released[1] == "released"
    assert zk.get_children(path) == [waiter.node]
    waiter.ensure_held()
    waiter.release()


def test_hoodied_holds_curator_waits(
    zookeeper_server: ZooKeeperServer, zk: KazooClient, base_path: str, curator_holder: CuratorHolder, holders
) -> None:
    path = f"{base_path}/trips"
    lock = ZooKeeperLock("/tables/trips", _config(zookeeper_server, base_path), NO_WAIT)
    lock.acquire()
    curator = _start_holder(curator_holder, holders, zookeeper_server.hosts, path, wait_ms=30_000)
    _wait_for(lambda: len(zk.get_children(path)) == 2, 30, "Curator's node behind hoodied's")
    curator_node = _children(zk, path)[1]
    assert CURATOR_NODE.match(curator_node) and _children(zk, path)[0] == lock.node
    # Curator's node is in place and it waits: nothing printed while hoodied holds
    assert curator.next(1.5) is None
    lock.ensure_held()
    released_at = time.monotonic()
    lock.release()
    got = curator.next(15)
    assert got is not None and got[1] == f"held {path}/{curator_node}", got
    assert got[0] >= released_at
    _close_stdin(curator)
    done = curator.next(10)
    assert done is not None and done[1] == "released"


def test_killed_curator_holder_frees_the_lock_when_its_session_expires(
    zookeeper_server: ZooKeeperServer, zk: KazooClient, base_path: str, curator_holder: CuratorHolder, holders
) -> None:
    path = f"{base_path}/trips"
    curator = _start_holder(curator_holder, holders, zookeeper_server.hosts, path, session_ms=1_000)
    got = curator.next(30)
    assert got is not None and got[1].startswith("held "), got
    curator_node = got[1].split()[1].rsplit("/", 1)[1]

    curator.proc.send_signal(signal.SIGKILL)
    curator.proc.wait(10)
    assert zk.exists(f"{path}/{curator_node}") is not None  # the node outlives the process...
    lock = ZooKeeperLock("/tables/trips", _config(zookeeper_server, base_path), WAIT)
    started = time.monotonic()
    lock.acquire()  # ...until its session expires; the watch on it wakes hoodied
    waited = time.monotonic() - started
    try:
        assert waited < 10, waited
        assert zk.get_children(path) == [lock.node]
        lock.ensure_held()
    finally:
        lock.release()


# ---------------------------------------------------------------- hoodied processes racing

#: The lock each process of the race builds (``tests.helpers.lock_race`` runs the race).
_WORKER = """
import sys
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.storage import LocalStorage
from hoodied.service.locks import lock_from_option

url, table = sys.argv[1:3]
settings = LockSettings(wait_ms=30_000, retries=0, retry_interval_ms=0)
lock, _ = lock_from_option(url, LocalStorage(table), settings)
"""


def test_two_processes_never_hold_the_lock_together(
    zookeeper_server: ZooKeeperServer, base_path: str, tmp_path: Path
) -> None:
    (tmp_path / "table").mkdir()
    url = f"zookeeper://{zookeeper_server.hosts}{base_path}?lock_key=race"
    tokens = race(_WORKER, [url, str(tmp_path / "table")], tmp_path, 20, timeout=120)
    assert tokens == sorted(set(tokens))


# ---------------------------------------------------------------- losing the lock


def test_ensure_held_fails_once_our_node_is_deleted(
    zookeeper_server: ZooKeeperServer, zk: KazooClient, base_path: str
) -> None:
    lock = ZooKeeperLock("/tables/t", _config(zookeeper_server, base_path, "t"), NO_WAIT)
    lock.acquire()
    lock.ensure_held()
    zk.delete(f"{base_path}/t/{lock.node}")
    with pytest.raises(LockLostError, match="our lock node .* is gone"):
        lock.ensure_held()
    assert not lock.is_held
    with pytest.raises(LockLostError):  # stays lost
        lock.ensure_held()
    lock.release()
    assert zk.get_children(f"{base_path}/t") == []
    lock.acquire()  # and can be taken again
    lock.ensure_held()
    lock.release()


def test_ensure_held_fails_once_the_server_is_gone(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    try:
        cfg = ZooKeeperLockConfig(
            server.hosts, "/hudi", "t", session_timeout_ms=4_000, connection_timeout_ms=1_000
        )
        lock = ZooKeeperLock("/tables/t", cfg, NO_WAIT)
        lock.acquire()
        lock.ensure_held()
        server.stop()
        with pytest.raises(
            LockLostError, match="ZooKeeper connection is SUSPENDED|ownership cannot be confirmed"
        ):
            lock.ensure_held()
        started = time.monotonic()
        lock.release()  # bounded even with the server gone
        assert time.monotonic() - started < 15
        assert not lock.is_held
    finally:
        server.stop()


_HOLDER = """
import sys
from hoodied.hoodie.errors import LockLostError
from hoodied.hoodie.locks import LockSettings
from hoodied.service.zookeeper_lock import ZooKeeperLock, ZooKeeperLockConfig

hosts, base, session_ms, mode = sys.argv[1:5]
cfg = ZooKeeperLockConfig(hosts, base, "t", session_timeout_ms=int(session_ms), connection_timeout_ms=2_000)
lock = ZooKeeperLock("/tables/t", cfg, LockSettings(wait_ms=0, retries=0))
lock.acquire()
print("held", lock.node, flush=True)
if mode == "exit":
    sys.exit(0)  # without release: the interpreter's exit must give the lock back
sys.stdin.readline()
try:
    lock.ensure_held()
except LockLostError as exc:
    print("LOST", exc, flush=True)
else:
    print("HELD", flush=True)
lock.release()
"""


def _hoodied_holder(server: ZooKeeperServer, base: str, session_ms: int, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _HOLDER, server.hosts, base, str(session_ms), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def test_a_paused_holder_whose_session_expired_writes_nothing(
    zookeeper_server: ZooKeeperServer, zk: KazooClient, base_path: str, curator_holder: CuratorHolder, holders
) -> None:
    proc = _hoodied_holder(zookeeper_server, base_path, 1_000, "wait")
    try:
        out = Lines(proc)
        got = out.next(30)
        assert got is not None and got[1].startswith("held "), got
        node = got[1].split()[1]
        proc.send_signal(signal.SIGSTOP)  # a long GC pause, a frozen VM
        _wait_for(
            lambda: zk.exists(f"{base_path}/t/{node}") is None, 15, "the paused holder's session to expire"
        )
        curator = _start_holder(curator_holder, holders, zookeeper_server.hosts, f"{base_path}/t")
        taken = curator.next(30)
        assert taken is not None and taken[1].startswith("held "), taken
        proc.send_signal(signal.SIGCONT)
        assert proc.stdin is not None
        proc.stdin.write("write now\n")
        proc.stdin.flush()
        verdict = out.next(30)
        assert verdict is not None and verdict[1].startswith("LOST "), verdict
        _close_stdin(curator)
        proc.stdin.close()
        assert proc.wait(30) == 0
        out.pump.join(10)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(10)


def test_a_lock_still_held_at_exit_is_released(
    zookeeper_server: ZooKeeperServer, zk: KazooClient, base_path: str
) -> None:
    # a 30 s session: without the release at exit the node would stay that long after the process
    proc = _hoodied_holder(zookeeper_server, base_path, 30_000, "exit")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.startswith("held "), out
    ended = time.monotonic()
    assert zk.get_children(f"{base_path}/t") == []
    assert time.monotonic() - ended < 5


def test_cli_schedules_under_the_lock_a_curator_writer_takes(
    zookeeper_server: ZooKeeperServer,
    zk: KazooClient,
    base_path: str,
    curator_holder: CuratorHolder,
    holders,
    hudi_table,
) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    props = (table / ".hoodie" / "hoodie.properties").read_text()
    name = re.search(r"^hoodie\.table\.name=(.+)$", props, re.M)
    assert name is not None
    path = f"{base_path}/{name.group(1)}"  # lock_key inferred from the table name, as Hudi does
    timeline = sorted(p.name for p in (table / ".hoodie").rglob("*"))

    curator = _start_holder(curator_holder, holders, zookeeper_server.hosts, path)
    got = curator.next(30)
    assert got is not None and got[1].startswith("held "), got
    lock = ["--lock", f"zookeeper://{zookeeper_server.hosts}{base_path}", "--lock-retries", "0"]
    args = ["schedule", "clean", str(table), "--retained", "1", "--clock-skew-ms", "0", *lock]
    busy = CliRunner().invoke(cli, [*args, "--lock-wait-ms", "300"])
    assert busy.exit_code != 0 and "table lock not acquired" in busy.stderr, busy.output
    assert "kazoo" not in busy.stderr  # the client's connect/close chatter stays out of the output
    assert sorted(p.name for p in (table / ".hoodie").rglob("*")) == timeline  # nothing written

    _close_stdin(curator)
    done = curator.next(15)
    assert done is not None and done[1] == "released"
    ok = CliRunner().invoke(cli, [*args, "--lock-wait-ms", "10000"])
    assert ok.exit_code == 0, ok.output
    assert zk.get_children(path) == []  # released at the end of the command

"""Hudi's file-system lock (``service.fs_lock``) between real processes on a local table.

A "foreign holder" is a process that writes the lock file the way Apache Hudi's
``FileSystemBasedLockProvider`` does on ``file://``: an exclusive create of ``<folder>/lock`` with
``LockInfo``'s pretty-printed JSON, plus the ``.lock.crc`` Hadoop's checksummed local file system
keeps beside it; release deletes both. hoodied holders run as separate processes too (this
module's ``_worker_main``), and one end-to-end test runs the ``hoodied`` command itself.
Expiries are seconds long here (the option takes whole minutes, like Hudi's key), so the takeover
tests build the lock with ``expire_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from hoodied.hoodie.errors import LockConfigError, LockLostError, LockUnavailableError
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.storage import LocalStorage
from hoodied.service.fs_lock import FileSystemLock
from hoodied.service.locks import lock_from_option
from tests.helpers.fixtures import require_fixture, unzip_table

PROJECT = Path(__file__).resolve().parents[2]
QUICK = LockSettings(wait_ms=300, retries=1, retry_interval_ms=100, poll_ms=20)


# ---------------------------------------------------------------- the foreign (Hudi) holder


def _hudi_lock_info(thread: str = "pool-3-thread-1") -> bytes:
    """``LockInfo.toString()``: Jackson's default pretty printer, Java stack frames."""
    frames = [
        "java.lang.Thread.getStackTrace (Thread.java:1610)",
        "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider.initLockInfo "
        "(FileSystemBasedLockProvider.java:193)",
    ]
    return (
        "{\n"
        '  "lockCreateTime" : "2024-05-06 07:08:09.123",\n'
        f'  "lockThreadName" : "{thread}",\n'
        '  "lockStacksInfo" : [ ' + ", ".join(json.dumps(f) for f in frames) + " ]\n"
        "}"
    ).encode()


def _hadoop_crc(data: bytes) -> bytes:
    """A ChecksumFileSystem ``.crc`` file: ``crc\\0``, bytes per checksum, one CRC32 per chunk."""
    chunks = [data[i : i + 512] for i in range(0, len(data), 512)] or [b""]
    return b"crc\0" + struct.pack(">i", 512) + b"".join(struct.pack(">I", zlib.crc32(c)) for c in chunks)


def _foreign_create(lock: Path, data: bytes) -> None:
    """Hudi's ``acquireLock``: ``create(path, overwrite=false)`` (exists check + exclusive open), write."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    if lock.exists():
        raise FileExistsError(lock)
    fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    (lock.parent / ".lock.crc").write_bytes(_hadoop_crc(data))


def _foreign_delete(lock: Path) -> None:
    """Hudi's ``unlock``: delete the file when it exists (the checksum goes with it)."""
    for p in (lock, lock.parent / ".lock.crc"):
        if p.exists():
            p.unlink()


_FOREIGN = """
import os, sys
from pathlib import Path
from tests.service.test_fs_lock import _foreign_create, _foreign_delete, _hudi_lock_info
lock = Path(sys.argv[1])
_foreign_create(lock, _hudi_lock_info())
print("HELD", flush=True)
sys.stdin.readline()
_foreign_delete(lock)
print("RELEASED", flush=True)
"""


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(PROJECT))


_SPAWNED: list[subprocess.Popen[str]] = []


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=_env(),
        cwd=PROJECT,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _SPAWNED.append(proc)
    return proc


@pytest.fixture(autouse=True)
def _no_leftover_processes():
    """A failed test must not leave its helper processes (or their pipes) to the next one."""
    yield
    while _SPAWNED:
        proc = _SPAWNED.pop()
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.communicate(timeout=10)


def _expect(proc: subprocess.Popen[str], word: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(word):
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"expected {word}, got {line!r}; stderr: {err[-2000:]}")
    return line


def _finish(proc: subprocess.Popen[str], word: str | None = None) -> None:
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    if word is not None:
        _expect(proc, word)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]


@pytest.fixture
def table(tmp_path: Path) -> Path:
    root = tmp_path / "t"
    (root / ".hoodie" / ".aux").mkdir(parents=True)
    return root


# ---------------------------------------------------------------- the hoodied worker process

_WORKER = "from tests.service.test_fs_lock import _worker_main; _worker_main()"


def _worker_main() -> None:
    """``hold``: acquire, print ``ACQUIRED <token>``, wait for a line, ``ensure_held``, print
    ``OK``/``LOST``, release. ``loop``: ``--n`` acquisitions, ``enter``/``exit`` lines appended
    to ``--log`` (O_APPEND) inside each one."""
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["hold", "loop"])
    p.add_argument("--table", required=True)
    p.add_argument("--expire-s", type=float, default=0.0)
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--log", default="")
    p.add_argument("--start", default="")
    args = p.parse_args(sys.argv[1:])
    settings = LockSettings(wait_ms=30_000, retries=0, poll_ms=5)
    lock = FileSystemLock(LocalStorage(args.table), settings, expire_s=args.expire_s)
    if args.mode == "hold":
        print(f"ACQUIRED {lock.acquire()}", flush=True)
        sys.stdin.readline()
        try:
            lock.ensure_held()
            print("OK", flush=True)
        except LockLostError as exc:
            print(f"LOST {exc}", flush=True)
        finally:
            lock.release()
        return
    while not os.path.exists(args.start):
        time.sleep(0.005)
    fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for _ in range(args.n):
        with lock:
            os.write(fd, f"enter {os.getpid()} {lock.fencing_token}\n".encode())
            lock.ensure_held()
            time.sleep(0.002)
            os.write(fd, f"exit {os.getpid()}\n".encode())
        time.sleep(0.001 * (os.getpid() % 5))


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("folder", [".hoodie", ".hoodie/.aux"])
def test_foreign_holder_keeps_hoodied_out_until_it_releases(table: Path, folder: str) -> None:
    """Either default folder of Hudi's provider (0.x/1.x ``.hoodie``, newest ``.hoodie/.aux``)."""
    lock_file = table / folder / "lock"
    holder = _spawn(_FOREIGN, str(lock_file))
    _expect(holder, "HELD")
    lock, _ = lock_from_option("filesystem", LocalStorage(str(table)), QUICK)
    t0 = time.monotonic()
    with pytest.raises(LockUnavailableError, match="pool-3-thread-1"):
        lock.acquire()
    assert time.monotonic() - t0 >= 0.6  # two attempts of 300 ms, 100 ms apart
    assert lock_file.read_bytes() == _hudi_lock_info()  # untouched
    others = [p for p in (table / ".hoodie" / "lock", table / ".hoodie" / ".aux" / "lock") if p != lock_file]
    assert not any(p.exists() for p in others)  # the file taken meanwhile was given back
    _finish(holder, "RELEASED")
    token = lock.acquire()
    assert token >= 1 and lock.is_held
    lock.ensure_held()
    lock.release()
    assert not lock_file.exists() and not (lock_file.parent / ".lock.crc").exists()


def test_path_option_takes_only_that_folder(table: Path) -> None:
    holder = _spawn(_FOREIGN, str(table / ".hoodie" / "lock"))
    _expect(holder, "HELD")
    try:
        lock, _ = lock_from_option("filesystem?path=.hoodie/.aux", LocalStorage(str(table)), QUICK)
        with lock:
            assert (table / ".hoodie" / ".aux" / "lock").exists()
        assert not (table / ".hoodie" / ".aux" / "lock").exists()
    finally:
        _finish(holder, "RELEASED")


def test_hoodied_lock_file_has_hudis_name_and_shape(table: Path) -> None:
    holder = _spawn(_WORKER, "hold", "--table", str(table))
    token = int(_expect(holder, "ACQUIRED").split()[1])
    try:
        for lock_file in (table / ".hoodie" / "lock", table / ".hoodie" / ".aux" / "lock"):
            text = lock_file.read_text()
            # Jackson's default pretty printer: two-space indent, " : ", arrays on one line
            assert re.fullmatch(
                r'\{\n  "lockCreateTime" : "[^"]*",\n  "lockThreadName" : "[^"]*",\n'
                r'  "lockStacksInfo" : \[ .* \]\n\}',
                text,
                re.S,
            ), text
            info = json.loads(text)
            assert list(info) == ["lockCreateTime", "lockThreadName", "lockStacksInfo"]
            assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", info["lockCreateTime"])
            assert info["lockThreadName"].split()[2] == str(holder.pid)
            assert info["lockStacksInfo"] and all(
                re.fullmatch(r"\S+\.\S+ \(\S+:\d+\)", s) for s in info["lockStacksInfo"]
            )
            # a Hudi writer's create(path, overwrite=false) fails while hoodied holds
            with pytest.raises(FileExistsError):
                _foreign_create(lock_file, _hudi_lock_info())
            with pytest.raises(FileExistsError):
                os.open(lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        assert (table / ".hoodie" / ".locks" / "hoodied.fence").read_text().strip() == str(token)
    finally:
        _finish(holder, "OK")
    assert not (table / ".hoodie" / "lock").exists()
    assert not (table / ".hoodie" / ".aux" / "lock").exists()


def test_expired_foreign_lock_is_taken_over_as_hudi_would(table: Path) -> None:
    lock_file = table / ".hoodie" / "lock"
    _foreign_create(lock_file, _hudi_lock_info("dead-writer"))
    storage = LocalStorage(str(table))
    # not yet expired: 30 s old, expiry 1 minute
    os.utime(lock_file, (time.time() - 30, time.time() - 30))
    young, _ = lock_from_option("filesystem?expire_minutes=1", storage, QUICK)
    with pytest.raises(LockUnavailableError, match="dead-writer"):
        young.acquire()
    # expiry 0 (Hudi's default): never expires, however old
    os.utime(lock_file, (time.time() - 86_400 * 365, time.time() - 86_400 * 365))
    never, _ = lock_from_option("filesystem", storage, QUICK)
    with pytest.raises(LockUnavailableError):
        never.acquire()
    assert lock_file.read_bytes() == _hudi_lock_info("dead-writer")
    # past the expiry (now - mtime > expire): removed with its checksum and created anew
    os.utime(lock_file, (time.time() - 61, time.time() - 61))
    old, _ = lock_from_option("filesystem?expire_minutes=1", storage, QUICK)
    with old:
        info = json.loads(lock_file.read_text())
        assert info["lockThreadName"].startswith("hoodied-")
        assert not (lock_file.parent / ".lock.crc").exists()
        old.ensure_held()
    assert not lock_file.exists()


def test_two_hoodied_processes_never_overlap(table: Path, tmp_path: Path) -> None:
    log, start = tmp_path / "order.log", tmp_path / "go"
    common = ["loop", "--table", str(table), "--n", "50", "--log", str(log), "--start", str(start)]
    procs = [_spawn(_WORKER, *common), _spawn(_WORKER, *common)]
    time.sleep(1.0)
    start.touch()
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
    lines = [line.split() for line in log.read_text().splitlines()]
    assert len(lines) == 200
    holder: str | None = None
    tokens = []
    for line in lines:
        if line[0] == "enter":
            assert holder is None, f"{line[1]} entered while {holder} held the lock"
            holder = line[1]
            tokens.append(int(line[2]))
        else:
            assert holder == line[1], f"exit by {line[1]} while {holder} held"
            holder = None
    assert tokens == sorted(tokens) and len(set(tokens)) == 100  # fencing tokens strictly grow
    pids = [line[1] for line in lines if line[0] == "enter"]
    assert sum(1 for a, b in zip(pids, pids[1:], strict=False) if a != b) >= 2, "never interleaved"
    assert not (table / ".hoodie" / "lock").exists()


def test_killed_holder_is_taken_over_only_after_the_expiry(table: Path) -> None:
    expire_s = 3.0
    storage = LocalStorage(str(table))
    holder = _spawn(_WORKER, "hold", "--table", str(table), "--expire-s", str(expire_s))
    _expect(holder, "ACQUIRED")
    # a live holder renews: it is not taken over though it holds past the expiry
    live = FileSystemLock(
        storage, LockSettings(wait_ms=int(expire_s * 2000), retries=0, poll_ms=50), expire_s=expire_s
    )
    with pytest.raises(LockUnavailableError, match=str(holder.pid)):
        live.acquire()
    os.kill(holder.pid, signal.SIGKILL)
    holder.communicate(timeout=10)  # reaps it and closes the pipes
    killed_at = time.monotonic()
    lock_file = table / ".hoodie" / "lock"
    assert lock_file.exists()  # kill -9 leaves the file
    early = FileSystemLock(storage, LockSettings(wait_ms=500, retries=0, poll_ms=50), expire_s=expire_s)
    with pytest.raises(LockUnavailableError):
        early.acquire()
    taker = FileSystemLock(
        storage, LockSettings(wait_ms=int(expire_s * 3000), retries=0, poll_ms=50), expire_s=expire_s
    )
    taker.acquire()
    waited = time.monotonic() - killed_at
    assert waited >= expire_s - 1.0, waited  # the last renewal was at most ~0.5 s before the kill
    assert json.loads(lock_file.read_text())["lockThreadName"].startswith("hoodied-")
    taker.ensure_held()
    taker.release()


def test_killed_holder_is_never_taken_over_without_expiry(table: Path) -> None:
    storage = LocalStorage(str(table))
    holder = _spawn(_WORKER, "hold", "--table", str(table))
    _expect(holder, "ACQUIRED")
    os.kill(holder.pid, signal.SIGKILL)
    holder.communicate(timeout=10)  # reaps it and closes the pipes
    lock_file = table / ".hoodie" / "lock"
    os.utime(lock_file, (time.time() - 86_400, time.time() - 86_400))
    never = FileSystemLock(storage, LockSettings(wait_ms=2_000, retries=1, retry_interval_ms=100))
    with pytest.raises(LockUnavailableError, match=str(holder.pid)):
        never.acquire()
    assert lock_file.exists()  # stays until someone removes it by hand, as with Hudi


def test_ensure_held_raises_when_the_file_was_replaced(table: Path) -> None:
    storage = LocalStorage(str(table))
    lock = FileSystemLock(storage, QUICK)
    lock.acquire()
    lock.ensure_held()
    lock_file = table / ".hoodie" / ".aux" / "lock"
    lock_file.unlink()  # an operator (or a Hudi writer's unconditional unlock) removed it ...
    _foreign_create(lock_file, _hudi_lock_info("intruder"))  # ... and a Hudi writer took it
    with pytest.raises(LockLostError, match="removed or replaced"):
        lock.ensure_held()
    with pytest.raises(LockLostError):
        lock.ensure_held()  # stays lost
    lock.release()
    assert lock_file.read_bytes() == _hudi_lock_info("intruder")  # not ours: left in place
    assert not (table / ".hoodie" / "lock").exists()  # ours: removed


def test_paused_holder_past_the_expiry_loses_and_writes_nothing(table: Path) -> None:
    """SIGSTOP past the expiry: another hoodied takes the lock; the holder wakes up LOST."""
    expire_s = 2.0
    holder = _spawn(_WORKER, "hold", "--table", str(table), "--expire-s", str(expire_s))
    _expect(holder, "ACQUIRED")
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        taker = FileSystemLock(
            LocalStorage(str(table)), LockSettings(wait_ms=10_000, retries=0, poll_ms=50), expire_s=expire_s
        )
        taker.acquire()
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    _finish(holder, "LOST")
    taker.ensure_held()  # the woken holder's release removed nothing of ours
    taker.release()


def test_option_errors(table: Path) -> None:
    storage = LocalStorage(str(table))
    for bad in (
        "filesystem?expire_minutes=-1",
        "filesystem?expire_minutes=1.5",
        "filesystem?color=red",
        "filesystem?path=",
        "filesystem?nonsense",
    ):
        with pytest.raises(LockConfigError):
            lock_from_option(bad, storage, QUICK)
    lock, factory = lock_from_option("filesystem?expire_minutes=2&path=/elsewhere/locks", storage, QUICK)
    assert factory is None and isinstance(lock, FileSystemLock)
    assert lock.expire_s == 120 and lock.paths == ("/elsewhere/locks/lock",)
    with pytest.raises(ValueError, match="filesystem"):
        lock_from_option("filesys", storage, QUICK)


# ---------------------------------------------------------------- end to end


def _hoodied(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=PROJECT,
    )


def _timeline(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in (root / ".hoodie").rglob("*")
        if p.is_file() and p.name != "lock" and "/.locks/" not in str(p) and not p.name.endswith(".crc")
    }


def test_schedule_clean_waits_for_a_hudi_holder(tmp_path: Path) -> None:
    root = unzip_table(require_fixture("cow/v9_txns_simple_nometa"), tmp_path / "t")
    before = _timeline(root)
    holder = _spawn(_FOREIGN, str(root / ".hoodie" / "lock"))
    _expect(holder, "HELD")
    args = [
        "schedule",
        "clean",
        str(root),
        "--retained",
        "1",
        "--lock",
        "filesystem",
        "--lock-wait-ms",
        "700",
        "--lock-retries",
        "1",
        "--clock-skew-ms",
        "5",
    ]
    t0 = time.monotonic()
    busy = _hoodied(*args)
    assert busy.returncode == 1, busy.stderr  # LockUnavailableError: EXIT_ERROR, retryable
    assert time.monotonic() - t0 >= 1.4
    assert "not acquired" in busy.stderr and "pool-3-thread-1" in busy.stderr, busy.stderr
    assert _timeline(root) == before  # nothing written
    _finish(holder, "RELEASED")
    done = _hoodied(*args)
    assert done.returncode == 0, done.stderr
    t = done.stdout.split(" ", 1)[0]
    new = set(_timeline(root)) - set(before)
    assert any(n.startswith(f".hoodie/timeline/{t}") and n.endswith(".clean.requested") for n in new), new
    assert not (root / ".hoodie" / "lock").exists() and not (root / ".hoodie" / ".aux" / "lock").exists()

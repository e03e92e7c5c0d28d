"""Per-table controls shared by every replica of the daemon and kept across restarts.

What it holds per table (``TableControls``): a pause (who, when, why), a quarantine (reason, time,
the replica that set it, the instant at fault, retries so far and when the next is due) and a job
history (the last ``controls.history_size`` jobs: kind, action, instant, outcome, seconds, message,
replica, finish time). The daemon (``service.daemon.loop``) reads pauses and quarantines every poll
cycle and records each job's outcome; ``hoodied table ...`` and the daemon's HTTP write endpoints
change them. Two stores, picked from the settings by ``open_store``:

- ``RedisControlStore`` when ``lock.url`` is Redis (several replicas), through the lock factory's
  client (``service.locks.RedisLockFactory``)::

      hoodied:controls:pauses            hash: table -> pause (JSON)
      hoodied:controls:quarantines       hash: table -> quarantine (JSON); HSETNX: the first reason wins
      hoodied:history:{<base>}           list, newest first, LTRIM to history_size, expires after
                                         HISTORY_TTL_S without a new job
      hoodied:retry:{<base>}             SET NX PX: the replica that retries a quarantined table

  The two hashes are read whole each poll cycle (two commands, whatever the number of tables;
  only paused or quarantined tables are in them).
- ``SqliteControlStore`` otherwise (one replica): one SQLite file (``controls.local_store``), in WAL
  mode so ``hoodied table`` can write while the daemon reads; history rows past ``history_size`` are
  deleted on insert.

A quarantined table is retried by one replica at a time: the first whose poll finds the retry due
(``Quarantine.next_retry_at``) claims it with ``claim_retry``, which checks that the stored quarantine
is still due and takes the claim in one step (a Lua script: ``SET NX PX`` on the retry key, held for
``RETRY_CLAIM_S`` at most; a row with an expiry in SQLite). The winner stores the retry's count and
next time and drops the claim (``retried``), or releases the quarantine; the others find the claim
taken or the retry not due, and wait for the next one.

Errors: the store unreachable or unreadable is ``ControlStoreError`` (a ``StorageError``: retried by
the daemon, exit code 6 on the command line).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from hoodied.hoodie.errors import StorageError, TableNotFoundError
from hoodied.hoodie.locks import LockBackendError
from hoodied.service.config import DaemonConfig, TableEntry
from hoodied.service.locks import RedisLockFactory

__all__ = [
    "HISTORY_TTL_S",
    "RETRY_CLAIM_S",
    "AllControls",
    "ControlStore",
    "ControlStoreError",
    "JobRecord",
    "Pause",
    "Quarantine",
    "RedisControlStore",
    "SqliteControlStore",
    "TableControls",
    "UnknownTableError",
    "open_store",
    "resolve_table",
    "same_quarantine",
    "with_retry",
]

#: Longest a retry claim outlives a replica that died while retrying (a retry stores its result sooner).
RETRY_CLAIM_S = 120.0
#: A table's history key expires this long after its last job (a table no longer watched leaves no key).
HISTORY_TTL_S = 30 * 86400
PAUSES_KEY = "hoodied:controls:pauses"
QUARANTINES_KEY = "hoodied:controls:quarantines"


class ControlStoreError(StorageError):
    """The store of the per-table controls (Redis or the local SQLite file) cannot be read or written."""


class UnknownTableError(TableNotFoundError):
    """The table is not one the daemon's settings watch (``tables`` or under a ``discover`` root)."""


@dataclass(frozen=True, slots=True)
class Pause:
    """A table paused by a person: polled and reported, never planned or executed."""

    by: str
    at: float
    """Epoch seconds."""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Quarantine:
    """A table left untouched by every replica until its cause is gone or a person releases it."""

    reason: str
    at: float
    """Epoch seconds when it was quarantined."""
    replica: str
    """The replica that quarantined it."""
    instant: str | None = None
    """The instant at fault (a job's), ``None`` when the table itself could not be read or planned."""
    retries: int = 0
    """Retries that found the cause still there."""
    next_retry_at: float = 0.0
    """Epoch seconds when one replica retries it next."""
    last_retry_error: str | None = None


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One entry of a table's history."""

    kind: str
    """``execute``, ``plan`` or ``retry`` (a quarantine retry)."""
    action: str
    instant: str | None
    outcome: str
    seconds: float
    message: str
    replica: str
    finished_at: float
    """Epoch seconds."""

    @classmethod
    def parse(cls, raw: str | bytes) -> JobRecord:
        return cls(**json.loads(raw))


@dataclass(slots=True)
class TableControls:
    """The pause and quarantine of one table (``None``: not paused / not quarantined)."""

    pause: Pause | None = None
    quarantine: Quarantine | None = None


@dataclass(slots=True)
class AllControls:
    """Every paused and every quarantined table, by table."""

    pauses: dict[str, Pause] = field(default_factory=dict)
    quarantines: dict[str, Quarantine] = field(default_factory=dict)

    def of(self, table: str) -> TableControls:
        return TableControls(self.pauses.get(table), self.quarantines.get(table))


def _dump(value: Any) -> str:
    return json.dumps(asdict(value), separators=(",", ":"))


class ControlStore(Protocol):
    """What the daemon and the commands do with the controls (both stores implement it)."""

    where: str
    """For messages: ``redis://...`` (password masked) or the SQLite file."""

    def read_all(self) -> AllControls: ...
    def pause(self, table: str, pause: Pause) -> None: ...
    def resume(self, table: str) -> bool:
        """Unpause; whether the table was paused."""
        ...
    def quarantine(self, table: str, quarantine: Quarantine) -> Quarantine:
        """Quarantine unless it already is; the quarantine in force (the first reason wins)."""
        ...
    def release(self, table: str, expected: Quarantine | None = None) -> Quarantine | None:
        """Lift the quarantine (and drop a retry claim); the one lifted, if any. With ``expected`` (a
        retry that found the cause gone) only while the stored one is that quarantine (``same_quarantine``):
        one released by a person and set again since is a new cause and stays."""
        ...
    def claim_retry(self, table: str, replica: str, now: float, hold_s: float) -> Quarantine | None:
        """The table's quarantine when its retry is due at ``now`` and this replica is the one to run it
        (no other can claim it for ``hold_s``, or until ``retried``); ``None`` otherwise."""
        ...
    def retried(self, table: str, replica: str, quarantine: Quarantine) -> None:
        """A claimed retry found the cause still there: store its count and next time, drop the claim.
        Stored only while the table still holds the quarantine the retry claimed (``same_quarantine``):
        a stale retry never overwrites a newer quarantine."""
        ...
    def record(self, table: str, records: Sequence[JobRecord]) -> None:
        """Add jobs to the table's history (oldest first), keeping the newest ``history_size``."""
        ...
    def history(self, table: str, limit: int) -> list[JobRecord]:
        """The newest ``limit`` jobs of the table, newest first."""
        ...
    def histories(self, tables: Sequence[str], limit: int) -> dict[str, list[JobRecord]]: ...
    def close(self) -> None: ...


# ---------------------------------------------------------------------------- Redis


def same_quarantine(a: Quarantine, b: Quarantine) -> bool:
    """One quarantine, maybe at another retry: set at the same moment by the same replica."""
    return a.at == b.at and a.replica == b.replica


def _braced(prefix: str, table: str) -> str:
    """``<prefix>:{<base>}`` (the braces keep one table's keys in one cluster slot, as the leases do)."""
    return prefix + ":{" + (table.rstrip("/") or "/") + "}"


#: KEYS: quarantines, retry claim; ARGV: table, replica, now (epoch s), hold (ms). The quarantine, when
#: its retry is due and the claim was free (then taken); the check and the claim are one step, so a
#: replica that read the quarantine before another's retry was stored cannot run the same retry again.
_CLAIM = """
local q = redis.call('HGET', KEYS[1], ARGV[1])
if not q then return false end
if tonumber(cjson.decode(q)['next_retry_at']) > tonumber(ARGV[3]) then return false end
if not redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[4]) then return false end
return q
"""
#: KEYS: quarantines; ARGV: table, at (epoch s), replica of the quarantine. Whether the stored
#: quarantine is that one (``same_quarantine``; both times parse the same decimal text to one double).
_SAME = """
local function same(table, at, replica)
  local q = redis.call('HGET', KEYS[1], table)
  if not q then return false end
  local cur = cjson.decode(q)
  return tonumber(cur['at']) == tonumber(at) and cur['replica'] == replica
end
"""
#: KEYS: quarantines, retry claim; ARGV: table, replica, quarantine, its at, its replica. Replace the
#: quarantine only while it is the one the retry claimed (a release in between, or a release and a new
#: quarantine, wins), then drop the claim if it is still this replica's.
_RETRIED = _SAME + """
if same(ARGV[1], ARGV[4], ARGV[5]) then redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
return 1
"""
#: KEYS: quarantines, retry claim; ARGV: table, at, replica of the expected quarantine. Lift it (and the
#: claim) only while it is stored; returns the lifted quarantine.
_RELEASE_IF = _SAME + """
if not same(ARGV[1], ARGV[2], ARGV[3]) then return false end
local q = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return q
"""


class RedisControlStore:
    """The controls in Redis (see the module docstring for the keys)."""

    def __init__(self, factory: RedisLockFactory, history_size: int, *, own_factory: bool = False) -> None:
        self._factory = factory
        self._own = own_factory
        self.history_size = history_size
        self.where = factory.where

    def _call(self, fn: Any) -> Any:
        async def run() -> Any:
            client = await self._factory._get_client()
            return await fn(client)

        try:
            return self._factory.call(run())
        except LockBackendError as exc:
            raise ControlStoreError(f"table controls at {exc}") from None

    def read_all(self) -> AllControls:
        async def fn(c: Any) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
            async with c.pipeline(transaction=False) as p:
                p.hgetall(PAUSES_KEY)
                p.hgetall(QUARANTINES_KEY)
                pauses, quarantines = await p.execute()
            return pauses, quarantines

        pauses, quarantines = self._call(fn)
        return AllControls(
            {k.decode(): Pause(**json.loads(v)) for k, v in pauses.items()},
            {k.decode(): Quarantine(**json.loads(v)) for k, v in quarantines.items()},
        )

    def pause(self, table: str, pause: Pause) -> None:
        self._call(lambda c: c.hset(PAUSES_KEY, table, _dump(pause)))

    def resume(self, table: str) -> bool:
        return bool(self._call(lambda c: c.hdel(PAUSES_KEY, table)))

    def quarantine(self, table: str, quarantine: Quarantine) -> Quarantine:
        async def fn(c: Any) -> bytes | None:
            if await c.hsetnx(QUARANTINES_KEY, table, _dump(quarantine)):
                return None
            raw: bytes | None = await c.hget(QUARANTINES_KEY, table)
            return raw

        raw = self._call(fn)
        return quarantine if raw is None else Quarantine(**json.loads(raw))

    def release(self, table: str, expected: Quarantine | None = None) -> Quarantine | None:
        if expected is not None:
            key = _braced("hoodied:retry", table)
            raw = self._call(lambda c: c.eval(_RELEASE_IF, 2, QUARANTINES_KEY, key, table,
                                              repr(expected.at), expected.replica))
            return None if raw is None else Quarantine(**json.loads(raw))

        async def fn(c: Any) -> bytes | None:
            async with c.pipeline(transaction=True) as p:
                p.hget(QUARANTINES_KEY, table)
                p.hdel(QUARANTINES_KEY, table)
                p.delete(_braced("hoodied:retry", table))
                raw, _, _ = await p.execute()
            return raw

        raw = self._call(fn)
        return None if raw is None else Quarantine(**json.loads(raw))

    def claim_retry(self, table: str, replica: str, now: float, hold_s: float) -> Quarantine | None:
        key, hold = _braced("hoodied:retry", table), max(int(hold_s * 1000), 1)
        raw = self._call(lambda c: c.eval(_CLAIM, 2, QUARANTINES_KEY, key, table, replica, repr(now), hold))
        return None if raw is None else Quarantine(**json.loads(raw))

    def retried(self, table: str, replica: str, quarantine: Quarantine) -> None:
        key = _braced("hoodied:retry", table)
        self._call(lambda c: c.eval(_RETRIED, 2, QUARANTINES_KEY, key, table, replica, _dump(quarantine),
                                    repr(quarantine.at), quarantine.replica))

    def record(self, table: str, records: Sequence[JobRecord]) -> None:
        if not records:
            return
        key = _braced("hoodied:history", table)

        async def fn(c: Any) -> None:
            async with c.pipeline(transaction=True) as p:
                p.lpush(key, *[_dump(r) for r in records])
                p.ltrim(key, 0, self.history_size - 1)
                p.expire(key, HISTORY_TTL_S)
                await p.execute()

        self._call(fn)

    def history(self, table: str, limit: int) -> list[JobRecord]:
        return self.histories([table], limit)[table]

    def histories(self, tables: Sequence[str], limit: int) -> dict[str, list[JobRecord]]:
        if not tables:
            return {}

        async def fn(c: Any) -> list[list[bytes]]:
            async with c.pipeline(transaction=False) as p:
                for t in tables:
                    p.lrange(_braced("hoodied:history", t), 0, max(limit, 1) - 1)
                out: list[list[bytes]] = await p.execute()
            return out

        lists = self._call(fn)
        return {t: [JobRecord.parse(raw) for raw in got] for t, got in zip(tables, lists, strict=True)}

    def close(self) -> None:
        if self._own:
            self._factory.close()


# ---------------------------------------------------------------------------- SQLite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pauses (tbl TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS quarantines (tbl TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS retry_claims (tbl TEXT PRIMARY KEY, replica TEXT NOT NULL, until REAL NOT NULL);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT, tbl TEXT NOT NULL, body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS history_by_table ON history (tbl, id);
"""


class SqliteControlStore:
    """The controls in one SQLite file (one replica, and the commands run beside it)."""

    def __init__(self, path: str, history_size: int) -> None:
        self.path = path
        self.where = path
        self.history_size = history_size
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            db = sqlite3.connect(path, timeout=10, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")  # kept by the file: readers never wait for a writer
                db.executescript(_SCHEMA)
            finally:
                db.close()
        except OSError as exc:
            raise ControlStoreError(f"table controls at {path}: {exc.strerror or exc}") from None
        except sqlite3.Error as exc:
            raise ControlStoreError(f"table controls at {path}: {exc}") from None

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One connection per operation (callers are worker threads and other processes), one transaction."""
        try:
            db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        except sqlite3.Error as exc:
            raise ControlStoreError(f"table controls at {self.path}: {exc}") from None
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise ControlStoreError(f"table controls at {self.path}: {exc}") from None
        finally:
            db.close()

    def read_all(self) -> AllControls:
        with self._tx() as db:
            pauses = db.execute("SELECT tbl, body FROM pauses").fetchall()
            quarantines = db.execute("SELECT tbl, body FROM quarantines").fetchall()
        return AllControls({t: Pause(**json.loads(b)) for t, b in pauses},
                           {t: Quarantine(**json.loads(b)) for t, b in quarantines})

    def pause(self, table: str, pause: Pause) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO pauses VALUES (?, ?)", (table, _dump(pause)))

    def resume(self, table: str) -> bool:
        with self._tx() as db:
            return db.execute("DELETE FROM pauses WHERE tbl = ?", (table,)).rowcount > 0

    def quarantine(self, table: str, quarantine: Quarantine) -> Quarantine:
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO quarantines VALUES (?, ?)", (table, _dump(quarantine)))
            (body,) = db.execute("SELECT body FROM quarantines WHERE tbl = ?", (table,)).fetchone()
        return Quarantine(**json.loads(body))

    def release(self, table: str, expected: Quarantine | None = None) -> Quarantine | None:
        with self._tx() as db:
            row = db.execute("SELECT body FROM quarantines WHERE tbl = ?", (table,)).fetchone()
            if row is None or (expected is not None
                               and not same_quarantine(Quarantine(**json.loads(row[0])), expected)):
                return None
            db.execute("DELETE FROM quarantines WHERE tbl = ?", (table,))
            db.execute("DELETE FROM retry_claims WHERE tbl = ?", (table,))
        return None if row is None else Quarantine(**json.loads(row[0]))

    def claim_retry(self, table: str, replica: str, now: float, hold_s: float) -> Quarantine | None:
        with self._tx() as db:
            row = db.execute("SELECT body FROM quarantines WHERE tbl = ?", (table,)).fetchone()
            q = None if row is None else Quarantine(**json.loads(row[0]))
            if q is None or q.next_retry_at > now:
                return None
            claim = db.execute("SELECT until FROM retry_claims WHERE tbl = ?", (table,)).fetchone()
            if claim is not None and claim[0] > time.time():
                return None
            db.execute("INSERT OR REPLACE INTO retry_claims VALUES (?, ?, ?)",
                       (table, replica, time.time() + hold_s))
        return q

    def retried(self, table: str, replica: str, quarantine: Quarantine) -> None:
        with self._tx() as db:
            row = db.execute("SELECT body FROM quarantines WHERE tbl = ?", (table,)).fetchone()
            if row is not None and same_quarantine(Quarantine(**json.loads(row[0])), quarantine):
                db.execute("UPDATE quarantines SET body = ? WHERE tbl = ?", (_dump(quarantine), table))
            db.execute("DELETE FROM retry_claims WHERE tbl = ? AND replica = ?", (table, replica))

    def record(self, table: str, records: Sequence[JobRecord]) -> None:
        if not records:
            return
        with self._tx() as db:
            rows = [(table, _dump(r)) for r in records]
            db.executemany("INSERT INTO history (tbl, body) VALUES (?, ?)", rows)
            db.execute("DELETE FROM history WHERE tbl = ? AND id NOT IN "
                       "(SELECT id FROM history WHERE tbl = ? ORDER BY id DESC LIMIT ?)",
                       (table, table, self.history_size))

    def history(self, table: str, limit: int) -> list[JobRecord]:
        return self.histories([table], limit)[table]

    def histories(self, tables: Sequence[str], limit: int) -> dict[str, list[JobRecord]]:
        out: dict[str, list[JobRecord]] = {}
        with self._tx() as db:
            for t in tables:
                rows = db.execute("SELECT body FROM history WHERE tbl = ? ORDER BY id DESC LIMIT ?",
                                  (t, limit)).fetchall()
                out[t] = [JobRecord.parse(body) for (body,) in rows]
        return out

    def close(self) -> None:
        """Nothing held between operations."""


# ---------------------------------------------------------------------------- choosing and naming


def open_store(settings: DaemonConfig, factory: RedisLockFactory | None = None) -> ControlStore:
    """The store the settings name: Redis with a Redis lock (``factory``'s client when given, else a
    client of its own, closed with the store), else the local SQLite file."""
    if settings.lock.is_redis:
        if factory is not None:
            return RedisControlStore(factory, settings.controls.history_size)
        own = RedisLockFactory(settings.lock.url, settings.lock.table_lock_settings())
        return RedisControlStore(own, settings.controls.history_size, own_factory=True)
    return SqliteControlStore(settings.controls.local_store_path, settings.controls.history_size)


def _normalised(table: str) -> str:
    try:
        return TableEntry(path=table).path
    except ValueError as exc:
        raise UnknownTableError(f"{table}: {str(exc).splitlines()[-1].strip()}") from None


def resolve_table(settings: DaemonConfig, table: str, known: Iterable[str] = ()) -> str:
    """The table's URI as the daemon names it: a listed table, one under a discover root, or one of
    ``known`` (the tables a running daemon watches); ``UnknownTableError`` otherwise."""
    uri = _normalised(table)
    known = set(known)
    if uri in known or any(t.path == uri for t in settings.tables):
        return uri
    for root in settings.discover:
        base = root.root.rstrip("/")
        if uri.startswith(base + "/"):
            return uri
    raise UnknownTableError(f"{uri}: not a table of the settings (tables, or under a discover root)")


def with_retry(q: Quarantine, *, error: str | None, next_at: float) -> Quarantine:
    """``q`` after one more retry that found the cause still there."""
    return replace(q, retries=q.retries + 1, next_retry_at=next_at, last_retry_error=error)

"""Attempt fencing (``hoodie.fence``): claims, checks, the fenced storage and the one-job-per-table
rule, on a local file system and on the S3 server.

The real-process cases (an executor stopped with SIGSTOP, taken over, then resumed) are in
``tests/executors/test_paused_executor.py``.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from hoodied.hoodie.errors import (
    AttemptSupersededError,
    HeartbeatAliveError,
    HoodieServiceError,
    TableBusyError,
)
from hoodied.hoodie.fence import (
    AttemptFence,
    FencedStorage,
    attempt_path,
    current_attempt,
    require_table_idle,
    start_attempt,
)
from hoodied.hoodie.heartbeat import heartbeat_path, last_heartbeat_ms
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage, Storage
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction
from tests.helpers.mor_tables import written_mor_table
from tests.helpers.object_servers import MotoServer, moto_server, s3_env  # noqa: F401  (fixtures)

T = "20261125101010101"


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return LocalStorage(str(tmp_path))
    server: MotoServer = request.getfixturevalue("s3_env")
    return ObjectStorage.connect(f"s3://{server.new_bucket()}/t")


def test_a_claim_admits_its_attempt_until_another_claims(storage: Storage) -> None:
    first = AttemptFence.claim(storage, T, "compaction")
    first.check()
    assert current_attempt(storage, T) == first.identity
    second = AttemptFence.claim(storage, T, "rollback")
    assert second.identity != first.identity
    second.check()
    with pytest.raises(AttemptSupersededError, match=f"instant {T} was taken over"):
        first.check()
    first.release()  # not its claim any more: kept
    assert current_attempt(storage, T) == second.identity
    second.release()
    assert current_attempt(storage, T) is None
    with pytest.raises(AttemptSupersededError, match="no attempt"):  # a released claim admits nobody
        second.check()


def test_fenced_writes_and_deletes_stop_at_the_takeover(storage: Storage) -> None:
    fence = AttemptFence.claim(storage, T, "compaction")
    fenced = FencedStorage(storage, fence)
    fenced.put_if_absent("p/a.parquet", b"a")
    with fenced.create_if_absent("p/b.parquet") as f:
        Path(f.path).write_bytes(b"b")
        f.commit()
    fenced.child("p").put_if_absent("c.parquet", b"c")
    assert fenced.delete("p/c.parquet")
    AttemptFence.claim(storage, T, "rollback")  # taken over

    with pytest.raises(AttemptSupersededError):
        fenced.put_if_absent("p/x.parquet", b"x")
    with pytest.raises(AttemptSupersededError):
        fenced.child("p").put("y.parquet", b"y")
    with pytest.raises(AttemptSupersededError):
        fenced.create_if_absent("p/z.parquet")
    with pytest.raises(AttemptSupersededError):
        fenced.delete("p/a.parquet")
    assert {i.name for i in storage.list("p")} == {"a.parquet", "b.parquet"}
    assert fenced.read("p/a.parquet") == b"a"  # reads are not fenced


def test_a_file_written_while_the_claim_moved_is_taken_back(tmp_path: Path) -> None:
    """The check right after publishing: a takeover that lands between the check before the
    upload and the upload itself (a pause there) cannot leave the file behind."""
    base = LocalStorage(str(tmp_path))
    fence = AttemptFence.claim(base, T, "compaction")

    class TakenOverDuringUpload(LocalStorage):
        """A storage on which a takeover lands while the upload is under way (a fault that a real
        process shows only with an exactly timed pause)."""

        def put_if_absent(self, path: str, data: bytes) -> None:
            AttemptFence.claim(base, T, "rollback")
            super().put_if_absent(path, data)

    racing = FencedStorage(TakenOverDuringUpload(str(tmp_path)), fence)
    with pytest.raises(AttemptSupersededError):
        racing.put_if_absent("p/a.parquet", b"a")
    assert not (tmp_path / "p" / "a.parquet").exists()


def test_a_started_writer_is_refused_at_publication(tmp_path: Path) -> None:
    base = LocalStorage(str(tmp_path))
    fenced = FencedStorage(base, AttemptFence.claim(base, T, "compaction"))
    f = fenced.create_if_absent("p/a.parquet")  # admitted
    Path(f.path).write_bytes(b"a")
    AttemptFence.claim(base, T, "rollback")
    with pytest.raises(AttemptSupersededError):
        f.commit()
    assert not (tmp_path / "p" / "a.parquet").exists()
    assert not Path(f.path).exists()  # the temp file goes too


def test_the_fenced_storage_travels_to_tasks(tmp_path: Path) -> None:
    base = LocalStorage(str(tmp_path))
    fenced = FencedStorage(base, AttemptFence.claim(base, T, "compaction"))
    copy: FencedStorage = pickle.loads(pickle.dumps(fenced))
    copy.put_if_absent("a", b"a")
    AttemptFence.claim(base, T, "rollback")
    with pytest.raises(AttemptSupersededError):
        copy.put_if_absent("b", b"b")


def _pending_compaction(root: Path) -> tuple[LocalStorage, TimelineWriter, str]:
    written_mor_table(root, 9)
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    settings = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)
    fast = TimeSettings(max_expected_clock_skew_ms=5)
    inst, _ = schedule_compaction(storage, lock, settings, time_settings=fast)
    assert inst is not None
    writer = TimelineWriter(storage, load_table_config(storage), lock, time_settings=fast)
    return storage, writer, inst.requested_time


def test_a_superseded_attempt_neither_beats_nor_deletes_the_new_heartbeat(tmp_path: Path) -> None:
    storage, writer, t = _pending_compaction(tmp_path / "t")
    with writer.lock:
        old = start_attempt(storage, writer, t, Action.COMPACTION, 60_000)
    assert storage.exists(heartbeat_path(t))
    new = AttemptFence.claim(storage, t, "compaction")  # the takeover (its own heartbeat below)
    storage.put(heartbeat_path(t), b"")
    before = (tmp_path / "t" / heartbeat_path(t)).stat().st_mtime_ns
    with pytest.raises(AttemptSupersededError):
        old.heartbeat.beat()
    old.end()  # stops its thread; neither the new heartbeat nor the new claim is deleted
    assert (tmp_path / "t" / heartbeat_path(t)).stat().st_mtime_ns == before
    assert current_attempt(storage, t) == new.identity


def test_an_attempt_that_fails_after_a_takeover_ends_superseded(tmp_path: Path) -> None:
    """Whatever an attempt's error, once the instant is another's the attempt ends with
    ``AttemptSupersededError`` (from that error); while it is still its own the error is kept."""
    storage, writer, t = _pending_compaction(tmp_path / "t")
    gone = FileNotFoundError("an input cleaned after the takeover")
    with writer.lock:
        own = start_attempt(storage, writer, t, Action.COMPACTION, 60_000)
    with pytest.raises(FileNotFoundError), own:  # its own failure
        raise gone
    assert current_attempt(storage, t) is None and not storage.exists(heartbeat_path(t))
    with writer.lock:
        stale = start_attempt(storage, writer, t, Action.COMPACTION, 60_000)
    new = AttemptFence.claim(storage, t, "rollback")  # the takeover
    with pytest.raises(AttemptSupersededError, match="was taken over") as raised, stale:
        raise gone
    assert raised.value.__cause__ is gone
    assert current_attempt(storage, t) == new.identity  # the new claim is kept
    new.release()
    with pytest.raises(AttemptSupersededError, match="no attempt"), stale:  # released since: not its own
        raise gone


def test_a_failed_inflight_transition_ends_the_attempt(tmp_path: Path) -> None:
    storage, writer, t = _pending_compaction(tmp_path / "t")
    (tmp_path / "t" / ".hoodie" / "timeline" / f"{t}.compaction.requested").unlink()  # gone under it
    with writer.lock, pytest.raises(HoodieServiceError):
        start_attempt(storage, writer, t, Action.COMPACTION, 60_000)
    assert not storage.exists(heartbeat_path(t))
    assert not storage.exists(attempt_path(t))


# ---------------------------------------------------------------------------- one job per table

OTHER = "20261125090909090"


def test_a_live_attempt_of_another_instant_keeps_the_table_busy(storage: Storage) -> None:
    require_table_idle(storage, T, interval_ms=1000)  # nothing there
    other = AttemptFence.claim(storage, OTHER, "clean")
    storage.put(heartbeat_path(OTHER), b"")  # it beats
    with pytest.raises(TableBusyError, match=f"instant {OTHER} is being worked on .* so {T} waits"):
        require_table_idle(storage, T, interval_ms=1000)
    assert issubclass(TableBusyError, HeartbeatAliveError)  # the daemon holds the instant, no failure
    require_table_idle(storage, OTHER, interval_ms=1000)  # its own attempt is no obstacle
    other.release()
    require_table_idle(storage, T, interval_ms=1000)  # released: idle although the heartbeat is there


def test_a_dead_attempt_blocks_nothing(storage: Storage) -> None:
    AttemptFence.claim(storage, OTHER, "compaction")  # left behind by a killed executor
    require_table_idle(storage, T, interval_ms=1000)  # no heartbeat at all
    storage.put(heartbeat_path(OTHER), b"")
    later = last_heartbeat_ms(storage, OTHER) + 2 * 1000 + 1  # past Hudi's expiry: interval x misses
    require_table_idle(storage, T, interval_ms=1000, tolerable_misses=2, now_ms=later)
    with pytest.raises(TableBusyError):
        require_table_idle(storage, T, interval_ms=1000, tolerable_misses=2, now_ms=later - 1)


def test_an_attempt_does_not_start_beside_a_live_one_on_its_table(tmp_path: Path) -> None:
    storage, writer, t = _pending_compaction(tmp_path / "t")
    running = AttemptFence.claim(storage, OTHER, "clean")  # a clean of the table, alive
    storage.put(heartbeat_path(OTHER), b"")
    timeline_before = sorted(p.name for p in (tmp_path / "t" / ".hoodie" / "timeline").iterdir())
    with writer.lock, pytest.raises(TableBusyError):
        start_attempt(storage, writer, t, Action.COMPACTION, 60_000)
    # refused before anything: no claim, no heartbeat, no inflight file
    assert current_attempt(storage, t) is None
    assert not storage.exists(heartbeat_path(t))
    assert sorted(p.name for p in (tmp_path / "t" / ".hoodie" / "timeline").iterdir()) == timeline_before
    running.release()
    with writer.lock:
        start_attempt(storage, writer, t, Action.COMPACTION, 60_000).end()

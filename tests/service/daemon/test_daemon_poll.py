"""The daemon's cheap poll (``service.daemon.poll.poll_table``) on real tables.

An unchanged timeline folder costs one ``stat`` and reuses everything; a moved one is listed
and its timeline built again from the names alone; the result always equals a full ``Timeline.load``.
Folder mtimes are set with ``os.utime`` to stand for "quiet for a while" and for two changes
within one file-system clock tick.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import State
from hoodied.service.config import load_config
from hoodied.service.daemon.poll import PollResult, poll_table
from hoodied.service.daemon.registry import build_registry
from tests.helpers.fixtures import require_fixture, unzip_table


def _poll(root: Path, cached: PollResult | None) -> PollResult:
    settings = load_config(overrides={"tables": [str(root)], "http": "off"})
    return poll_table(LocalStorage(str(root)), cached, settings.tables[0].policy, build_registry(),
                      settings.heartbeat)


def _timeline_dir(root: Path) -> Path:
    storage = LocalStorage(str(root))
    local = storage.local_path(load_table_config(storage).timeline_path)
    assert local is not None
    return Path(local)


def _age(folder: Path, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(folder, (past, past))


def _summary(timeline: Timeline) -> list[tuple[str, str, str, str | None]]:
    return [(i.requested_time, i.action.value, i.state.value, i.completion_time) for i in timeline.instants]


@pytest.mark.parametrize("fid", ["cow/v9_txns_simple_nometa", "mor/parquet/v6_nonpartitioned"])
def test_an_unchanged_timeline_is_reused_and_a_new_file_is_seen(tmp_path: Path, fid: str) -> None:
    root = unzip_table(require_fixture(fid), tmp_path / "t")
    folder = _timeline_dir(root)
    _age(folder, 60)  # quiet for a minute: its mtime can be trusted
    first = _poll(root, None)
    second = _poll(root, first)
    assert second.view is first.view and second.timeline is first.timeline  # nothing listed or parsed

    t = "20991231235959000"
    (folder / f"{t}.clean.requested").write_bytes(b"")
    third = _poll(root, second)
    assert third.view is not first.view and third.signature != first.signature
    assert [(i.instant.requested_time, i.instant.state) for i in third.pending][-1] == (t, State.REQUESTED)
    # the timeline built from the names equals a full load, legacy (mtime-derived) completion times included
    storage = LocalStorage(str(root))
    assert _summary(third.timeline) == _summary(Timeline.load(storage, load_table_config(storage)))


def test_a_change_within_the_same_clock_tick_as_the_last_listing_is_not_missed(tmp_path: Path) -> None:
    root = unzip_table(require_fixture("cow/v9_txns_simple_nometa"), tmp_path / "t")
    folder = _timeline_dir(root)
    first = _poll(root, None)  # listed right after the unzip changed the folder: mtime not trusted yet
    stamp = os.stat(folder).st_mtime_ns
    t = "20991231235959000"
    (folder / f"{t}.clean.requested").write_bytes(b"")
    os.utime(folder, ns=(stamp, stamp))  # a coarse clock: the new file left the folder's mtime as it was
    second = _poll(root, first)
    assert t in {i.instant.requested_time for i in second.pending}


def test_the_names_are_listed_again_when_the_relist_time_comes(tmp_path: Path) -> None:
    root = unzip_table(require_fixture("cow/v9_txns_simple_nometa"), tmp_path / "t")
    folder = _timeline_dir(root)
    _age(folder, 60)
    first = _poll(root, None)
    stamp = os.stat(folder).st_mtime_ns
    t = "20991231235959000"
    (folder / f"{t}.clean.requested").write_bytes(b"")
    os.utime(folder, ns=(stamp, stamp))  # a change the mtime does not show (e.g. a network file system)
    second = _poll(root, first)
    assert second.timeline is first.timeline  # the mtime is trusted until the relist time ...
    second.relist_at = time.monotonic() - 1
    third = _poll(root, second)  # ... which has come
    assert t in {i.instant.requested_time for i in third.pending}

"""Hudi writes, hoodied serves, Hudi checks: a real Apache Hudi Spark writer and the hoodied daemon
take turns on one merge-on-read table, for each Hudi release the lane runs (0.15 writes table
version 6, 1.0 version 8, 1.1 version 9).

The writer (optimistic concurrency with Hudi's ``FileSystemBasedLockProvider``, failed writes rolled
back lazily, its own table services off, a metadata table with column stats, a record index and, from
version 8, partition stats) upserts and deletes rounds of rows that an oracle follows. Between rounds
the daemon (``hoodied run --once`` with the writer's lock keys as ``hudi_lock``) plans and executes
one table service at a time: compaction, log compaction (versions 8 and 9: hoodied refuses version
6's), clean, clustering, archival. After each, Hudi's own Spark reader must return the oracle's rows
(snapshot through the metadata table and through storage listing, read-optimized after a full
compaction, point and range queries with data skipping on the column stats and record index, an
incremental query, time travel), Hudi's ``validate_metadata_table_files`` must find no difference
between the metadata table's listing and storage, and hudi-rs must agree. At the end the writer turns
its inline compaction, clean and archival back on and writes again: Hudi carries on from what hoodied
left.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hoodied.hoodie.timeline.instant import Action
from tests.helpers.hudi_peer import HudiPeer
from tests.helpers.hudi_turns import Writer, check, completed, daemon_pass


@pytest.mark.timeout(1500)  # a dozen Hudi writes and reads and five daemon passes, on a small machine
def test_writer_and_daemon_take_turns(hudi_peer: HudiPeer, tmp_path: Path) -> None:
    table = tmp_path / "lake" / "trips"
    w = Writer(hudi_peer, table)
    w.upsert(new=60, updated=0)
    w.upsert(new=6, updated=15)
    w.delete(6)
    w.upsert(new=3, updated=15)
    check(w, "written by Hudi")

    history = daemon_pass(tmp_path, table, {"compaction": {"schedule": True, "delta_commits": 3}})
    assert [h["outcome"] for h in history if h["action"] == "compaction"] == ["success", "planned"]
    check(w, "after hoodied's compaction", read_optimized=True)

    w.upsert(new=2, updated=10)
    w.upsert(new=0, updated=10)
    if hudi_peer.table_version >= 8:  # hoodied refuses log compaction on table version 6
        history = daemon_pass(tmp_path, table, {"log_compaction": {"schedule": True, "blocks_threshold": 2}})
        assert [h["outcome"] for h in history if h["action"] == "logcompaction"] == ["success", "planned"]
        check(w, "after hoodied's log compaction")

    history = daemon_pass(tmp_path, table, {"clean": {"schedule": True, "commits_retained": 3}})
    assert [h["outcome"] for h in history if h["action"] == "clean"] == ["success", "planned"]
    w.since = w.n - 1  # the clean keeps the slices of the last 3 commits: round n-1, round n and one more
    check(w, "after hoodied's clean")

    history = daemon_pass(tmp_path, table, {"clustering": {
        "schedule": True, "trigger_commits": 1, "small_file_limit": 1 << 30, "max_bytes_per_group": 1 << 30}})
    assert [h["outcome"] for h in history if h["action"] == "clustering"] == ["success", "planned"]
    check(w, "after hoodied's clustering")

    w.upsert(new=4, updated=12)
    history = daemon_pass(tmp_path, table, {"archival": {
        "enabled": True, "keep_min_commits": 2, "keep_max_commits": 3}})
    assert completed(table, Action.DELTA_COMMIT)[0].requested_time > w.after[1][1].requested_time, \
        "archival archived nothing"
    check(w, "after hoodied's archival")

    # Hudi carries on, its own table services back on: an inline compaction, clean and archival.
    w.upsert(new=3, updated=8, **{
        "hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": "1",
        "hoodie.clean.automatic": "true", "hoodie.cleaner.commits.retained": "3",
        "hoodie.archive.automatic": "true", "hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3"})
    w.since = w.n - 1
    check(w, "after Hudi's own inline services")


def _files(table: Path) -> dict[str, bytes]:
    """Every file of the table with its content, hoodied's own lock folder left out."""
    return {str(f.relative_to(table)): f.read_bytes() for f in sorted(table.rglob("*"))
            if f.is_file() and ".locks" not in f.parts and f.name not in ("lock",)}


@pytest.mark.parametrize("hudi_peer", ["0.15.0"], indirect=True)
def test_a_version_6_metadata_table_is_refused_and_left_alone(hudi_peer: HudiPeer, tmp_path: Path) -> None:
    """hoodied writes metadata tables of table versions 8 and 9 only: on a version-6 table with a
    metadata table, written by Hudi 0.15, every planner refuses with one reason and writes nothing,
    and the Hudi writer carries on."""
    table = tmp_path / "lake" / "trips"
    w = Writer(hudi_peer, table, metadata=True)
    w.upsert(new=30, updated=0)
    w.upsert(new=2, updated=10)
    w.upsert(new=0, updated=10)
    before = _files(table)
    history = daemon_pass(tmp_path, table, {
        "compaction": {"schedule": True, "delta_commits": 1},
        "clean": {"schedule": True, "commits_retained": 1},
        "clustering": {"schedule": True, "trigger_commits": 1},
    }, expected=frozenset({"unsupported"}))
    refused = {h["action"]: h["message"] for h in history if h["outcome"] == "unsupported"}
    assert set(refused) == {"compaction", "clean", "clustering"}, history
    assert all("version 6" in message for message in refused.values()), refused
    assert _files(table) == before
    w.upsert(new=1, updated=5)
    check(w, "Hudi writes on after hoodied refused")

"""Plans cross between Apache Hudi and hoodied: Hudi schedules, hoodied executes; hoodied schedules,
Hudi executes. For compaction and clustering, on merge-on-read tables of each release the lane runs.

Hudi's side is its Spark SQL procedures (``run_compaction``, ``run_clustering``: what its
``HoodieCompactor`` and ``HoodieClusteringJob`` run, from the Spark bundle) with the writer's
settings; hoodied's side is ``hoodied schedule`` and the daemon (``run --once``) with the same lock.
After each execution Hudi's readers, its metadata table validation and hudi-rs give the oracle's
rows, and the writer writes on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hoodied.hoodie.timeline.instant import Action, State
from tests.helpers.daemon_procs import hoodied, service_instants
from tests.helpers.hudi_peer import HudiPeer
from tests.helpers.hudi_turns import Writer, check, daemon_pass


def _schedule_with_hoodied(w: Writer, service: str, *options: str) -> str:
    """``hoodied schedule SERVICE`` with the writers' lock and ``-o`` ``options``; the one instant it
    requested."""
    overrides = [arg for option in options for arg in ("-o", option)]
    proc = hoodied("schedule", service, str(w.table), "--lock", "filesystem?expire_minutes=1", *overrides,
                   "--json")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"hoodied schedule {service}: {err[-3000:]}"
    pending = _pending(w, Action.COMPACTION) if service == "compaction" else _pending_clusterings(w)
    assert len(pending) == 1, pending
    return pending[0]


def _pending(w: Writer, *actions: Action) -> list[str]:
    return [i.requested_time for action in actions for i in service_instants(w.table, action)
            if i.state is State.REQUESTED]


def _call(w: Writer, procedure: str, options: str = "", **args: str) -> None:
    """``call PROCEDURE(table => the table, ARGS, options => the writer's settings and OPTIONS)`` in
    Hudi (comma-separated ``key=value``). The writer's settings all go along: its lock, and its
    metadata-table indexes, which a Hudi 1.x client whose settings leave an index out deletes from the
    metadata table."""
    named = "".join(f", {k} => {v}" for k, v in args.items())
    settings = ",".join([*(f"{k}={v}" for k, v in w.options.items()), *filter(None, [options])])
    w.peer.sql(f"call {procedure}(table => '{w.register()}'{named}, options => '{settings}')")


def _written(hudi_peer: HudiPeer, tmp_path: Path) -> Writer:
    w = Writer(hudi_peer, tmp_path / "lake" / "trips")
    w.upsert(new=45, updated=0)
    w.upsert(new=3, updated=12)
    w.delete(4)
    w.upsert(new=0, updated=12)
    return w


def _pending_clusterings(w: Writer) -> list[str]:
    """Pending clusterings: ``replacecommit`` before table version 8, ``clustering`` from it."""
    return _pending(w, Action.CLUSTERING, Action.REPLACE_COMMIT)


@pytest.mark.timeout(1200)
def test_compaction_planned_by_one_executed_by_the_other(hudi_peer: HudiPeer, tmp_path: Path) -> None:
    w = _written(hudi_peer, tmp_path)
    # Hudi's trigger (hoodie.compact.inline.max.delta.commits, 5) would wait for a fifth delta commit
    _call(w, "run_compaction", op="'schedule'", options="hoodie.compact.inline.max.delta.commits=1")
    planned = _pending(w, Action.COMPACTION)
    assert len(planned) == 1, "Hudi scheduled no compaction"
    history = daemon_pass(tmp_path, w.table, {})
    assert [(h["action"], h["instant"], h["outcome"]) for h in history] == [
        ("compaction", planned[0], "success")]
    check(w, "Hudi's compaction plan executed by hoodied", read_optimized=True)

    w.upsert(new=2, updated=10)
    w.upsert(new=0, updated=8)
    instant = _schedule_with_hoodied(w, "compaction", "hoodie.compact.inline.max.delta.commits=1")
    _call(w, "run_compaction", op="'run'", timestamp=instant)
    done = [i for i in service_instants(w.table, Action.COMPACTION) if i.requested_time == instant]
    assert done and done[0].state is State.COMPLETED, "Hudi did not complete hoodied's compaction plan"
    check(w, "hoodied's compaction plan executed by Hudi", read_optimized=True)
    w.upsert(new=1, updated=5)
    check(w, "Hudi writes on")


@pytest.mark.timeout(1200)
def test_clustering_planned_by_one_executed_by_the_other(hudi_peer: HudiPeer, tmp_path: Path) -> None:
    w = _written(hudi_peer, tmp_path)
    _call(w, "run_clustering", op="'schedule'")
    planned = _pending_clusterings(w)
    assert len(planned) == 1, "Hudi scheduled no clustering"
    history = daemon_pass(tmp_path, w.table, {})
    assert [(h["action"], h["instant"], h["outcome"]) for h in history] == [
        ("clustering", planned[0], "success")]
    check(w, "Hudi's clustering plan executed by hoodied")

    w.upsert(new=2, updated=10)
    instant = _schedule_with_hoodied(w, "clustering")
    _call(w, "run_clustering", op="'execute'", instants=f"'{instant}'")
    assert instant not in _pending_clusterings(w), "Hudi did not complete hoodied's clustering plan"
    check(w, "hoodied's clustering plan executed by Hudi")
    w.upsert(new=1, updated=5)
    check(w, "Hudi writes on")

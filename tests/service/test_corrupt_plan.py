"""A pending plan that cannot be read: the diagnostic commands show the table, the writers refuse.

On Apache Hudi's own table (``mor/avro/v9_txns_simple_nometa``, its compaction and clustering
made pending again by removing their completed files), one plan is truncated or replaced by
garbage. ``timeline`` and ``inspect`` still exit 0 and mark that instant (``corrupt_plan`` in
``--json``; the file counts of ``inspect`` cannot be told, as Hudi's file-system view needs every
pending plan). Every ``schedule`` refuses with one line naming the instant, as Hudi's planners fail
when a pending plan cannot be read (its file groups are unknown), and ``execute`` of that instant
fails the same way; neither writes anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.service.test_cli import assert_one_line_error, run

COMPACTION = "20260307135839895"
CLUSTERING = "20260307135840454"


def _pending_table(hudi_table, damaged: str, damage: str) -> Path:
    table: Path = hudi_table("mor/avro/v9_txns_simple_nometa")
    timeline = table / ".hoodie" / "timeline"
    (timeline / f"{COMPACTION}_20260307135840408.commit").unlink()
    (timeline / f"{CLUSTERING}_20260307135840902.replacecommit").unlink()
    action = "compaction" if damaged == COMPACTION else "clustering"
    plan = timeline / f"{damaged}.{action}.requested"
    good = plan.read_bytes()
    plan.write_bytes(good[: len(good) // 2] if damage == "truncated" else b"Obj\x01" + bytes(range(200)))
    return table


def _table_files(table: Path) -> dict[str, bytes]:
    """Every file of the table but the lock's own (``.hoodie/.locks``, kept between holders)."""
    return {str(p.relative_to(table)): p.read_bytes() for p in sorted(table.rglob("*"))
            if p.is_file() and ".locks" not in p.parts}


CASES = [(COMPACTION, "truncated"), (CLUSTERING, "garbage"), (CLUSTERING, "truncated")]


@pytest.mark.parametrize(("damaged", "damage"), CASES)
def test_timeline_and_inspect_show_the_table_with_the_instant_marked(hudi_table, damaged: str,
                                                                    damage: str) -> None:
    table = _pending_table(hudi_table, damaged, damage)
    other = CLUSTERING if damaged == COMPACTION else COMPACTION

    code, out, err = run("timeline", str(table))
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert len(rows) == 13
    assert "corrupt plan: .hoodie/timeline/" in rows[damaged]
    assert "file groups" in rows[other]  # the readable plan keeps its summary

    code, out, err = run("timeline", str(table), "--json")
    assert code == 0, err
    by_time = {r["requested_time"]: r for r in json.loads(out)}
    assert by_time[damaged]["plan"] is None
    assert by_time[damaged]["corrupt_plan"].startswith(".hoodie/timeline/")
    assert by_time[other]["plan"] and by_time[other]["corrupt_plan"] is None

    code, out, err = run("inspect", str(table), "--json")
    assert code == 0, err
    report = json.loads(out)
    pending = {p["requested_time"]: p for p in report["pending_table_services"]}
    assert "plan" not in pending[damaged] and pending[damaged]["corrupt_plan"]
    assert pending[other]["plan"] and "corrupt_plan" not in pending[other]
    assert f"pending {pending[damaged]['action']} {damaged}: corrupt plan" in report["files"]["error"]
    assert report["table"]["name"] and report["timeline"]["pending"] == 2

    code, out, err = run("inspect", str(table))
    assert code == 0, err
    assert f"  {damaged} {pending[damaged]['action']} inflight: corrupt plan: .hoodie/timeline/" in out
    assert "files          cannot tell: pending " in out


@pytest.mark.parametrize(("damaged", "damage"), CASES[:2])
def test_schedule_and_execute_refuse_with_one_line_and_write_nothing(hudi_table, damaged: str,
                                                                     damage: str) -> None:
    table = _pending_table(hudi_table, damaged, damage)
    action = "compaction" if damaged == COMPACTION else "clustering"
    before = _table_files(table)
    for service in ("compaction", "log-compaction", "clustering", "clean"):
        code, _, err = run("schedule", service, str(table))
        assert code == 4, (service, err)
        assert_one_line_error(err, f"pending {action} {damaged}: corrupt plan, the file groups it holds")
        assert _table_files(table) == before, service
    code, _, err = run("execute", str(table), "--instant", damaged)
    assert code == 4, err
    assert_one_line_error(err, f"pending {action} {damaged}: corrupt plan")
    assert _table_files(table) == before

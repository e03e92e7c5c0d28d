"""Clustering plans the executor would refuse are refused when they are planned: no file written.

On Apache Hudi's tables without meta fields (``*_no_metafields``: v6 and v8, copy-on-write and
merge-on-read) and with a sort column that is not a column of the table, ``hoodied schedule
clustering`` exits 5 with one line (``--dry-run`` too) and writes nothing, where it used to write a
plan ``hoodied execute`` then refused. The daemon's own planning gets the same refusal: the plan
job ends ``unsupported`` once, the service is left waiting (a planning note) and is not planned
again at the next polls, and the table is not quarantined.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from hoodied.hoodie.actions.services import TableService
from hoodied.service.config import DaemonConfig, load_config
from hoodied.service.daemon.loop import Daemon
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.service.test_cli import assert_one_line_error, run

NO_META_FIELDS = [
    "cow/v6_simplekeygen_hivestyle_no_metafields",
    "cow/v8_simplekeygen_hivestyle_no_metafields",
    "mor/parquet/v6_simplekeygen_hivestyle_no_metafields",
]
SORT_KEY = "hoodie.clustering.plan.strategy.sort.columns"


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HOODIED_* setting of the machine running the tests leaks into them."""
    for name in list(os.environ):
        if name.startswith("HOODIED_") and name[8:].split("__")[0].lower() in DaemonConfig.model_fields:
            monkeypatch.delenv(name)


def _files(table: Path) -> dict[str, bytes]:
    """Every file of the table but the lock's own (``.hoodie/.locks``, kept between holders)."""
    return {str(p.relative_to(table)): p.read_bytes() for p in sorted(table.rglob("*"))
            if p.is_file() and ".locks" not in p.parts}


@pytest.mark.parametrize("fid", NO_META_FIELDS)
def test_a_table_without_meta_fields_is_refused_at_schedule_time(hudi_table, fid: str) -> None:
    table = hudi_table(fid)
    before = _files(table)
    for extra in ((), ("--dry-run",)):
        code, _, err = run("schedule", "clustering", str(table), *extra)
        assert code == 5, err
        assert_one_line_error(err, "clustering of tables without meta fields (hoodie.populate.meta."
                                   "fields=false) is not supported")
        assert _files(table) == before


@pytest.mark.parametrize("fid", ["cow/v8_nonpartitioned", "mor/avro/v9_txns_simple_nometa"])
def test_a_sort_column_not_in_the_schema_is_refused_at_schedule_time(hudi_table, fid: str) -> None:
    table = hudi_table(fid)
    before = _files(table)
    for extra in ((), ("--dry-run",)):
        code, _, err = run("schedule", "clustering", str(table), "-o", f"{SORT_KEY}=nope", *extra)
        assert code == 5, err
        assert_one_line_error(err, "sort column 'nope' is not a top-level column of the table")
        assert _files(table) == before
    code, out, err = run("schedule", "clustering", str(table), "-o", f"{SORT_KEY}=_hoodie_record_key",
                         "--dry-run")
    assert code == 0, err  # a column the table has is planned as before
    assert out.startswith("dry run: ")


def test_the_daemon_notes_the_refusal_once_and_does_not_plan_again(tmp_path: Path) -> None:
    no_meta = unzip_table(require_fixture(NO_META_FIELDS[1]), tmp_path / "no-meta")
    bad_sort = unzip_table(require_fixture("cow/v8_nonpartitioned"), tmp_path / "bad-sort")
    before = {t: _files(t) for t in (no_meta, bad_sort)}
    settings = load_config(overrides={
        "tables": [str(no_meta),
                   {"path": str(bad_sort), "policy": {"services": {"clustering": {"sort_columns": "nope"}}}}],
        "defaults": {"services": {"clustering": {"schedule": True, "trigger_commits": 1}}},
        "clock_skew_ms": 5, "poll_interval_seconds": 0.05, "http": "off", "log": {"format": "json"},
        "spark": {"start_at_startup": False},
    })
    daemon = Daemon(settings)

    def refused(root: Path) -> list[dict[str, Any]]:
        ts = daemon.tables.get(str(root))
        return [o for o in (ts.outcomes if ts else ()) if o["kind"] == "plan" and o["action"] == "clustering"]

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            try:
                with anyio.fail_after(60):
                    while not (refused(no_meta) and refused(bad_sort)):
                        await anyio.sleep(0.02)
                    cycles = 0
                    last = daemon.last_cycle_end
                    while cycles < 5:  # polls after the refusal: none plans the clustering again
                        await anyio.sleep(0.02)
                        if daemon.last_cycle_end != last:
                            cycles, last = cycles + 1, daemon.last_cycle_end
            finally:
                daemon.request_stop("test done")

    anyio.run(main)
    for root, message in ((no_meta, "without meta fields"), (bad_sort, "sort column 'nope'")):
        outcomes = refused(root)
        assert len(outcomes) == 1, outcomes
        assert outcomes[0]["outcome"] == "unsupported" and message in outcomes[0]["message"]
        ts = daemon.tables[str(root)]
        assert message in ts.plan_notes[TableService.CLUSTERING]
        assert ts.quarantine is None
        assert _files(root) == before[root]

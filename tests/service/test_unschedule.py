"""``hoodied unschedule clustering|compaction TABLE --instant T`` on Apache Hudi's own tables (v6, v8, v9).

A requested clustering is rolled back (a completed rollback instant naming it, nothing to delete) and
its plan removed, as Hudi's writer removes a pending clustering it conflicts with; a requested
compaction's requested file is deleted, as Hudi's ``compaction unschedule`` does. The rows hudi-rs
reads do not change, ``hoodied timeline`` shows nothing pending, and the file groups are planned
again. An inflight plan, a completed one or an instant of another service is refused, one line,
with nothing written.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from hoodied.hoodie.filenames import LogFileName
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.plans import ClusteringPlan
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.clustering import ClusteringSettings, schedule_clustering
from hoodied.service.cli.exits import EXIT_ERROR, EXIT_UNSUPPORTED
from hoodied.service.cli.main import cli
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows, mor_table_writer

FAST = TimeSettings(max_expected_clock_skew_ms=5)
SKEW = ["--clock-skew-ms", "5"]


def _timeline(root: Path) -> Timeline:
    storage = LocalStorage(str(root))
    return Timeline.load(storage, load_table_config(storage))


def _files_of(root: Path, t: str) -> list[Path]:
    return [p for p in (root / ".hoodie").rglob(f"{t}*") if p.is_file() and ".aux" not in p.parts]


def _schedule_clustering(root: Path) -> tuple[str, ClusteringPlan]:
    storage = LocalStorage(str(root))
    lock = InProcessLock(str(root))
    inst, result = schedule_clustering(storage, lock, ClusteringSettings(), time_settings=FAST)
    assert inst is not None, result.summary()
    plan = _timeline(root).plan(inst)
    assert isinstance(plan, ClusteringPlan)
    return inst.requested_time, plan


def _pending(root: Path) -> list[dict[str, object]]:
    shown = CliRunner().invoke(cli, ["timeline", str(root), "--json"])
    assert shown.exit_code == 0, shown.output
    return [row for row in json.loads(shown.output) if row["state"] != "completed"]


@pytest.mark.parametrize("fid", ["cow/v6_nonpartitioned", "cow/v8_nonpartitioned",
                                 "mor/avro/v9_txns_simple_nometa"])
def test_unschedule_clustering_rolls_the_plan_back_and_removes_it(tmp_path: Path, fid: str) -> None:
    root = unzip_table(require_fixture(fid), tmp_path / "t")
    before = hudi_rs_rows(root)
    t, plan = _schedule_clustering(root)
    assert _pending(root)
    done = CliRunner().invoke(cli, ["unschedule", "clustering", str(root), "--instant", t, "--json", *SKEW])
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    timeline = _timeline(root)
    assert timeline.get(t) is None and not _files_of(root, t)
    rollback = timeline.get(out["rollback"])
    assert rollback is not None and rollback.action is Action.ROLLBACK and rollback.is_completed
    assert timeline.read_commit_metadata(rollback)["commitsRollback"] == [t]
    assert _pending(root) == [] and hudi_rs_rows(root) == before
    # the file groups are free again: the next plan takes them
    _, again = _schedule_clustering(root)
    assert plan.file_groups <= again.file_groups
    # a second unschedule of the same instant: it is gone, one line, exit 1
    gone = CliRunner().invoke(cli, ["unschedule", "clustering", str(root), "--instant", t, *SKEW])
    assert gone.exit_code == EXIT_ERROR and f"no clustering instant {t}" in gone.output, gone.output


@pytest.mark.parametrize("fid", ["mor/avro/v6_trips_8i1u", "mor/avro/v8_trips_8i3u1d", "v9"])
def test_unschedule_compaction_deletes_the_requested_plan(tmp_path: Path, fid: str) -> None:
    """Hudi's v6 and v8 tables with log files in their latest slices; no v9 fixture has one, so a
    v9 merge-on-read table is written."""
    if fid == "v9":
        root = tmp_path / "t"
        mor_table_writer(root, 9)
    else:
        root = unzip_table(require_fixture(fid), tmp_path / "t")
    before = hudi_rs_rows(root)
    planned = CliRunner().invoke(cli, ["schedule", "compaction", str(root), "--json", *SKEW,
                                       "-o", "hoodie.compact.inline.max.delta.commits=1"])
    assert planned.exit_code == 0, planned.output
    pending = _timeline(root).pending((Action.COMPACTION,))
    assert len(pending) == 1
    t = pending[0].requested_time
    done = CliRunner().invoke(cli, ["unschedule", "compaction", str(root), "--instant", t, *SKEW])
    assert done.exit_code == 0, done.output
    assert "its requested file deleted" in done.output
    timeline = _timeline(root)
    assert timeline.get(t) is None and not _files_of(root, t) and not timeline.pending((Action.ROLLBACK,))
    assert _pending(root) == [] and hudi_rs_rows(root) == before


def test_unschedule_refuses_an_inflight_plan_and_other_services(tmp_path: Path) -> None:
    root = unzip_table(require_fixture("cow/v8_nonpartitioned"), tmp_path / "t")
    t, _ = _schedule_clustering(root)
    storage = LocalStorage(str(root))
    wrong = CliRunner().invoke(cli, ["unschedule", "compaction", str(root), "--instant", t, *SKEW])
    assert wrong.exit_code == EXIT_ERROR and f"no compaction instant {t}" in wrong.output, wrong.output
    lock = InProcessLock(str(root))
    with lock:
        TimelineWriter(storage, load_table_config(storage), lock, time_settings=FAST).transition_to_inflight(
            t, Action.CLUSTERING)
    files = sorted(p.name for p in _files_of(root, t))
    refused = CliRunner().invoke(cli, ["unschedule", "clustering", str(root), "--instant", t, *SKEW])
    assert refused.exit_code == EXIT_ERROR and "is inflight" in refused.output, refused.output
    assert len(refused.output.strip().splitlines()) == 1
    inst = _timeline(root).get(t)
    assert inst is not None and inst.state is State.INFLIGHT
    assert sorted(p.name for p in _files_of(root, t)) == files
    assert not _timeline(root).pending((Action.ROLLBACK,))


def test_unschedule_of_a_version_6_compaction_whose_slice_has_a_log_file_is_refused(tmp_path: Path) -> None:
    """On table version 6 a writer appends to the slice a requested compaction opened: its log file
    is named after the compaction. Hudi's unschedule renames such files back; hoodied refuses."""
    root = unzip_table(require_fixture("mor/avro/v6_trips_8i1u"), tmp_path / "t")
    planned = CliRunner().invoke(cli, ["schedule", "compaction", str(root), *SKEW,
                                       "-o", "hoodie.compact.inline.max.delta.commits=1"])
    assert planned.exit_code == 0, planned.output
    (inst,) = _timeline(root).pending((Action.COMPACTION,))
    t = inst.requested_time
    log = next(p for p in root.rglob(".*.log.*") if ".hoodie" not in p.relative_to(root).parts)
    name = LogFileName.parse(log.name)
    assert name is not None
    shutil.copyfile(log, log.with_name(dataclasses.replace(name, instant_time=t).format()))
    refused = CliRunner().invoke(cli, ["unschedule", "compaction", str(root), "--instant", t, *SKEW])
    assert refused.exit_code == EXIT_UNSUPPORTED, refused.output
    assert "was written in the slice" in refused.output
    still = _timeline(root).get(t)
    assert still is not None and still.state is State.REQUESTED


@pytest.mark.parametrize("point", ["inflight", "deletes-done", "target-deleted"])
@pytest.mark.parametrize("again", ["unschedule", "rollback"])
def test_kill_9_during_unschedule_then_the_command_again(tmp_path: Path, point: str, again: str) -> None:
    """Killed at each step of the clustering's rollback: ``unschedule`` again (or ``rollback``) finishes
    that rollback, even once the clustering's own files are gone, and writes no second one."""
    root = unzip_table(require_fixture("cow/v8_nonpartitioned"), tmp_path / "t")
    before = hudi_rs_rows(root)
    t, _ = _schedule_clustering(root)
    args = ["unschedule", "clustering", str(root), "--instant", t, *SKEW]
    proc = start_paused("from hoodied.service.cli.main import main; main()", args, point, tmp_path / "ready",
                        timeout=120)
    kill_group(proc)
    (rollback,) = _timeline(root).pending((Action.ROLLBACK,))
    assert (_timeline(root).get(t) is None) == (point == "target-deleted")
    if point == "target-deleted":
        listed = CliRunner().invoke(cli, ["execute", str(root), *SKEW])  # runs nothing, says how to finish it
        assert f"finish it with `hoodied rollback TABLE --instant {t}`" in listed.stdout, listed.output
    command = args if again == "unschedule" else ["rollback", str(root), "--instant", t, *SKEW]
    done = CliRunner().invoke(cli, command)
    assert done.exit_code == 0, done.output
    assert rollback.requested_time in done.stdout, done.stdout
    timeline = _timeline(root)
    assert timeline.get(t) is None and not _files_of(root, t)
    assert [r.requested_time for r in timeline.completed((Action.ROLLBACK,))] == [rollback.requested_time]
    assert _pending(root) == [] and hudi_rs_rows(root) == before

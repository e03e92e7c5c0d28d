"""The daemon archives tables whose policy turns archival on, exactly as ``hoodied archive`` does.

Real ``hoodied run`` processes on real tables: a version-6 copy-on-write table written by
``hoodie.demo.writer`` (no metadata table), and Hudi's version-8 merge-on-read fixture with its
metadata table and 40 more delta commits written with their metadata-table delta commits (as
``tests/executors/test_archival_mdt.py`` builds it). Each table has a twin copy archived by
``hoodied archive`` with the same Hudi keys the policy maps to: the daemon's table must end with
the same active timelines (data and metadata table), the same history, and hudi-rs must read the
same rows as before. ``/status`` and ``hoodied_instants_archived_total`` report what moved.
Archival is off by default; a pending write that blocks it is "nothing due" with Hudi's reason;
two replicas on one real Redis never archive one table at once (the table lock keeps the second
out while the first is stopped half-way, and it finds nothing left to do afterwards).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.archived_v6 import ArchivedTimelineV6
from hoodied.hoodie.timeline.history import History
from hoodied.hoodie.timeline.instant import State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.archival import ArchivalSettings, StopReason
from hoodied.planners.clean import CleanSettings, schedule_clean
from hoodied.service.cli.main import cli
from hoodied.service.config import ConfigError, load_config
from tests.executors.test_archival import SCHEMA, Built, write_commits
from tests.executors.test_archival_mdt import V8, build, mdt_of
from tests.helpers.daemon_procs import events, get, get_or_none, hoodied, running, stop, timeline, wait_for
from tests.helpers.mor_tables import hudi_rs_rows
from tests.helpers.redis_server import RedisServer, free_port, redis_server  # noqa: F401  (fixture)

FAST = TimeSettings(max_expected_clock_skew_ms=5)
KEEP_MIN, KEEP_MAX = 5, 8
#: The daemon's settings: nothing but archival plans (no Spark), pending instants still executed.
SETTINGS: dict[str, Any] = {
    "clock_skew_ms": 5,
    "poll_interval_seconds": 0.2,
    "heartbeat": {"interval_ms": 500, "tolerable_misses": 2},
    "retry": {"backoff_seconds": 0.05, "backoff_max_seconds": 0.2},
    "log": {"format": "json"},
    "http": "off",  # several daemons at once (a test that reads /status gives a free port)
}
#: The Hudi keys ``services.archival`` maps to, with the cleaner's retention and the compaction
#: trigger of the same policy: what the twin's ``hoodied archive`` is given.
OPTIONS = {
    "hoodie.keep.min.commits": str(KEEP_MIN),
    "hoodie.keep.max.commits": str(KEEP_MAX),
    "hoodie.clean.commits.retained": "1",
    "hoodie.compact.inline.max.delta.commits": "1",
}


def policy(**archival: Any) -> dict[str, Any]:
    return {"services": {
        "clean": {"schedule": False, "commits_retained": 1},
        "compaction": {"enabled": False, "schedule": False, "delta_commits": 1},
        "archival": {"keep_min_commits": KEEP_MIN, "keep_max_commits": KEEP_MAX, **archival},
    }}


def settings_file(path: Path, tables: list[Path], pol: Mapping[str, Any], **values: Any) -> Path:
    path.write_text(yaml.safe_dump({**SETTINGS, "defaults": dict(pol), "tables": [str(t) for t in tables],
                                    **values}))
    return path


def run_once(config: Path, env: dict[str, str] | None = None) -> tuple[int, list[dict[str, Any]], str]:
    """``hoodied run --config CONFIG --once``: exit code, ``job ended`` events, standard error."""
    proc = hoodied("run", "--config", str(config), "--once", env=env)
    _, err = proc.communicate(timeout=180)
    return proc.returncode, [e for e in events(err) if e.get("event") == "job ended"], err


def archive_twin(twin: Path) -> dict[str, Any]:
    """``hoodied archive TWIN -o ... --json``: what the command archived."""
    opts = [a for k, v in OPTIONS.items() for a in ("-o", f"{k}={v}")]
    done = CliRunner().invoke(cli, ["archive", str(twin), *opts, "--json"])
    assert done.exit_code == 0, done.output
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def active(root: Path) -> list[tuple[str, str, State]]:
    return [(i.requested_time, i.action.value, i.state) for i in timeline(root).instants]


def mdt_active(root: Path) -> list[tuple[str, str, State]]:
    return [(i.requested_time, i.action.value, i.state) for i in Timeline.load(*mdt_of(root)).instants]


def history(storage: LocalStorage, metadata_table: bool = False) -> list[str]:
    config = load_table_config(storage, metadata_table=metadata_table)
    return sorted(e.instant.requested_time for e in History.load(storage, config).entries)


def v6_archived(root: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """The archive files and the archived instants of a version-6 table."""
    storage = LocalStorage(str(root))
    files = sorted(p.name for p in (root / ".hoodie" / "archived").iterdir())
    instants = ArchivedTimelineV6.load(storage, load_table_config(storage)).instants()
    return files, sorted((i.requested_time, i.action.value) for i in instants)


def v6_table(root: Path, commits: int) -> Built:
    spec = TableSpec("trips", SCHEMA, "id", "city", "ts", TableType.COPY_ON_WRITE, 6)
    built = Built(root, create_table(LocalStorage(str(root)), spec, max_file_rows=20), [])
    write_commits(built, commits)
    return built


def archival_ends(ended: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in ended if e["action"] == "archival"]


# ---------------------------------------------------------------------------- the policy


def test_the_policy_is_hudis_keys(tmp_path: Path) -> None:
    """``services.archival`` with the policy's cleaner and compaction trigger is exactly the keys the
    twins below are archived with; bounds Hudi refuses are a settings problem at start."""
    settings = load_config(settings_file(tmp_path / "a.yaml", [tmp_path], policy(enabled=True)))
    assert settings.tables[0].policy.services.archival_settings() == ArchivalSettings.from_options(OPTIONS)
    with pytest.raises(ConfigError, match="keep_max_commits must be greater than keep_min_commits"):
        load_config(settings_file(tmp_path / "b.yaml", [tmp_path], policy(keep_max_commits=KEEP_MIN)))


# ---------------------------------------------------------------------------- as the command does


def test_v6_daemon_archives_after_the_clean_as_the_command_does(tmp_path: Path) -> None:
    built = v6_table(tmp_path / "t", 24)
    storage = built.storage
    pending, _ = schedule_clean(storage, InProcessLock(storage.base_uri), CleanSettings(commits_retained=2),
                                time_settings=FAST)
    assert pending is not None
    twin = shutil.copytree(built.root, tmp_path / "twin")
    rows = hudi_rs_rows(built.root)

    code, ended, err = run_once(settings_file(tmp_path / "hoodied.yaml", [built.root], policy(enabled=True)))
    assert code == 0, err[-3000:]
    # the pending clean first, then the archival (Hudi archives after the clean, in postCommit)
    assert [(e["kind"], e["action"], e["outcome"]) for e in ended] == [
        ("execute", "clean", "success"), ("plan", "archival", "success"),
    ]
    executed = CliRunner().invoke(cli, ["execute", str(twin)])
    assert executed.exit_code == 0, executed.output
    document = archive_twin(twin)
    moved = [a["instant"] for a in document["archived"]]
    assert moved == built.commits[: 24 - KEEP_MIN]
    assert f"{len(moved)} instants to archive" in archival_ends(ended)[0]["message"]

    assert active(built.root) == active(twin)
    assert v6_archived(built.root) == v6_archived(twin)
    assert [t for t, _ in v6_archived(built.root)[1]] == moved
    assert hudi_rs_rows(built.root) == hudi_rs_rows(twin) == rows


def test_v8_daemon_archives_data_and_metadata_table_as_the_command_does(
    hudi_table: Any, tmp_path: Path
) -> None:
    root, _, _ = build(hudi_table, 40, V8)
    twin = shutil.copytree(root, tmp_path / "twin")
    rows = hudi_rs_rows(root, metadata=True)
    mdt_before = mdt_active(root)
    port = free_port()
    config = settings_file(tmp_path / "hoodied.yaml", [root], policy(enabled=True),
                           http=f"127.0.0.1:{port}")
    with running("run", "--config", str(config)) as proc:
        def archived() -> dict[str, Any] | None:
            answer = get_or_none(port, "/status")  # None until the daemon listens
            if answer is None:
                return None
            table: dict[str, Any] = json.loads(answer[1])["tables"][0]
            return table if table["last_archival"] is not None else None

        table = wait_for("the table archived", archived, 120, (proc,))
        metrics = get(port, "/metrics")[1]
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    document = archive_twin(twin)
    data_moved = [a["instant"] for a in document["archived"]]
    mdt_moved = [a["instant"] for a in document["metadata_table"]["archived"]]
    assert data_moved and mdt_moved  # both timelines move on this table

    # the same active timelines and histories as the command's, the same rows as before
    assert active(root) == active(twin)
    assert mdt_active(root) == mdt_active(twin) != mdt_before
    data_storage, mdt_storage = LocalStorage(str(root)), LocalStorage(str(root / METADATA_FOLDER))
    assert history(data_storage) == sorted(data_moved) == history(LocalStorage(str(twin)))
    assert history(mdt_storage, True) == sorted(mdt_moved)
    assert hudi_rs_rows(root, metadata=True) == hudi_rs_rows(root, metadata=False) == rows

    # /status: what moved, where each archival stopped and why, as the command reported it
    last = table["last_archival"]
    assert (last["archived"], last["stop"], last["stop_instant"]) == (
        len(data_moved), document["stops_at"]["reason"], document["stops_at"]["instant"])
    mdt_stop = document["metadata_table"]["stops_at"]
    assert (last["metadata_table"]["archived"], last["metadata_table"]["stop"]) == (
        len(mdt_moved), mdt_stop["reason"])
    moved = len(data_moved) + len(mdt_moved)
    assert table["instants_archived"] == moved
    # the metric counts every instant moved, the archival's plan job its outcome
    assert f'hoodied_instants_archived_total{{table="{root}"}} {moved}.0' in metrics
    assert f'hoodied_plans_total{{action="archival",outcome="success",table="{root}"}} 1.0' in metrics
    assert f'hoodied_plans_total{{action="archival",outcome="failed",table="{root}"}} 0.0' in metrics


# ---------------------------------------------------------------------------- when it does not archive


def test_archival_is_off_by_default(hudi_table: Any, tmp_path: Path) -> None:
    root, _, _ = build(hudi_table, 12, V8)
    files = sorted(str(p.relative_to(root)) for p in (root / ".hoodie").rglob("*") if p.is_file())
    # keep.max 8 is passed, but archival itself is not turned on
    code, ended, err = run_once(settings_file(tmp_path / "hoodied.yaml", [root], policy()))
    assert code == 0, err[-3000:]
    assert archival_ends(ended) == []
    after = sorted(str(p.relative_to(root)) for p in (root / ".hoodie").rglob("*") if p.is_file())
    assert after == files
    # the same table with archival on is archived: the default is what kept it untouched
    code, ended, err = run_once(settings_file(tmp_path / "on.yaml", [root], policy(enabled=True)))
    assert code == 0, err[-3000:]
    assert [e["outcome"] for e in archival_ends(ended)] == ["success"]


def test_archival_blocked_by_a_pending_write_is_nothing_due_with_the_reason(tmp_path: Path) -> None:
    built = v6_table(tmp_path / "t", 12)
    # the second commit failed as a writer leaves it: inflight, its completed file gone
    (built.root / ".hoodie" / f"{built.commits[1]}.commit").unlink()
    files = sorted(p.name for p in (built.root / ".hoodie").iterdir() if p.is_file())
    # a cleaner keeping file versions does not bound archival (by commits, the pending write would
    # raise keep.min above the commits there are: not-enough-commits)
    pol = policy(enabled=True)
    pol["services"]["clean"]["policy"] = "KEEP_LATEST_FILE_VERSIONS"
    code, ended, err = run_once(settings_file(tmp_path / "hoodied.yaml", [built.root], pol))
    assert code == 0, err[-3000:]
    ends = archival_ends(ended)
    # due by the count alone (11 completed commits > keep.max 8), blocked under the lock; a version-6
    # table may be asked twice in one pass (its first lock folder changes the names the poll sees)
    assert ends and {(e["kind"], e["outcome"]) for e in ends} == {("plan", "nothing_due")}
    for end in ends:
        assert f"stops at {StopReason.EARLIEST_PENDING_WRITE.value} at {built.commits[0]}" in end["message"]
    assert sorted(p.name for p in (built.root / ".hoodie").iterdir() if p.is_file()) == files
    assert not (built.root / ".hoodie" / "archived").exists() or not any(
        (built.root / ".hoodie" / "archived").iterdir())


# ---------------------------------------------------------------------------- two replicas


def test_a_second_replica_never_archives_the_table_at_the_same_time(
    redis_server: RedisServer, tmp_path: Path  # noqa: F811
) -> None:
    built = v6_table(tmp_path / "t", 14)
    twin = shutil.copytree(built.root, tmp_path / "twin")
    rows = hudi_rs_rows(built.root)
    config = settings_file(tmp_path / "hoodied.yaml", [built.root], policy(enabled=True),
                           lock={"url": redis_server.url, "wait_ms": 300, "retries": 0})
    ready, resume = tmp_path / "ready", tmp_path / "resume"
    # replica A stops inside its archival, the archive file written, holding the table lock
    with running("run", "--config", str(config), "--once", env={
        "HOODIED_TEST_PAUSE_AT": "archive-log-written", "HOODIED_TEST_PAUSE_READY": str(ready),
        "HOODIED_TEST_PAUSE_UNTIL": str(resume),
    }) as first:
        wait_for("replica A inside its archival", ready.exists, 120, (first,))
        # replica B finds archival due, waits for the table lock and gives up: it wrote nothing
        archive_file = sorted(p.name for p in (built.root / ".hoodie" / "archived").iterdir())
        active_files = sorted(p.name for p in (built.root / ".hoodie").iterdir() if p.is_file())
        code, ended, err = run_once(config)
        assert code == 1, err[-3000:]  # a pass that left work undone for the lock
        assert [(e["kind"], e["outcome"]) for e in archival_ends(ended)] == [("plan", "lock_unavailable")]
        assert sorted(p.name for p in (built.root / ".hoodie" / "archived").iterdir()) == archive_file
        assert sorted(p.name for p in (built.root / ".hoodie").iterdir() if p.is_file()) == active_files
        resume.touch()
        _, err_a = first.communicate(timeout=120)
    assert first.returncode == 0, err_a[-3000:]
    ended_a = [e for e in events(err_a) if e.get("event") == "job ended"]
    assert [e["outcome"] for e in archival_ends(ended_a)] == ["success"]

    # archived once, as the command archives the twin
    archive_twin(twin)
    assert active(built.root) == active(twin)
    assert v6_archived(built.root) == v6_archived(twin)
    assert len(v6_archived(built.root)[0]) == 1
    assert hudi_rs_rows(built.root) == rows
    # B again: nothing left to archive
    code, ended, err = run_once(config)
    assert code == 0, err[-3000:]
    assert all(e["outcome"] == "nothing_due" for e in archival_ends(ended))
    assert active(built.root) == active(twin)
    assert os.listdir(built.root / ".hoodie" / "archived") == v6_archived(twin)[0]

"""Archival of the metadata table's own timeline, after the data table's, as Hudi 1.x does it.

Tables: Hudi's version-8 MOR fixture with a metadata table (its MDT has five initialisation delta
commits and a compaction), plus 40 delta commits each written with its MDT delta commit by
hoodied's MDT writer, whose upkeep compacts the MDT every 10 delta commits and cleans it as Hudi
does. ``hoodied archive`` then archives the data table and, right after, the MDT.

The rule the MDT must follow (``TimelineArchiverV2`` with the MDT writer config of
``HoodieMetadataWriteUtils.createMetadataWriteConfig``), computed here on its own by
``expected_mdt_archival`` from the timelines before archival:

- keep.min/max of the MDT are the data table's plus one (6 / 9 with the data's 5 / 8), raised by
  the MDT cleaner, whose policy is the data table's with 1.2 times its retention, at least 20
  commits (KEEP_LATEST_COMMITS, max(20, 1 x 1.2) = 20 retained: 19 commits after its earliest
  commit to retain, + 2 = 21, so 21 / 24);
- nothing goes while the MDT holds at most keep.max completed commits (delta commits and
  compactions); otherwise the oldest go, at most (commits - keep.min) of them, stopping at the
  earliest of: the MDT compaction trigger (fewer than 10 delta commits since the latest MDT
  compaction: that compaction stays), and the data table's first active commit or first pending
  instant once the data table's own archival is done;
- completed MDT cleans and rollbacks requested before the last archived commit go with them.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pytest
from click.testing import CliRunner

from hoodied.executors.archival import PAUSE_POINTS_MDT, ArchivalResult, MdtArchival, execute_archival
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.metadata.reader import METADATA_FOLDER, MetadataTable
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.history import History, HistoryFileName, read_manifest
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from hoodied.planners.archival import (
    ArchivalPlan,
    ArchivalSettings,
    StopReason,
    archival_planner,
    mdt_archival_planner,
    mdt_archival_target,
)
from hoodied.service.cli.main import cli
from hoodied.service.cli.report import committed_listing_drift
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.mor_tables import hudi_rs_rows, multiset
from tests.hoodie.metadata.test_mdt_writer import V8, V9_MOR, Table, _add_base_file

#: The data table's settings: keep 5..8 commits, the MOR compaction trigger keeps the last delta
#: commit only, so the metadata table's compaction is the data table's binding boundary.
OPTIONS = {
    "hoodie.keep.min.commits": "5",
    "hoodie.keep.max.commits": "8",
    "hoodie.clean.commits.retained": "1",
    "hoodie.compact.inline.max.delta.commits": "1",
}
SETTINGS = ArchivalSettings.from_options(OPTIONS)
MDT_MIN, MDT_MAX = 21, 24  # (5 + 1, 8 + 1) raised by the MDT cleaner's 20 retained commits
MDT_DELTAS = 10  # hoodie.metadata.compact.max.delta.commits

Snapshot = dict[str, tuple[str, bytes | None, bytes | None]]


# ---------------------------------------------------------------------------- tables


def build(hudi_table: Any, commits: int = 40, fid: str = V8) -> tuple[Path, Table, str]:
    root: Path = hudi_table(fid)
    t = Table(root)
    base = next(p for p in sorted(root.rglob("*.parquet")) if ".hoodie" not in p.relative_to(root).parts)
    partition = base.parent.relative_to(root).as_posix()
    add_commits(t, partition, base.name, commits)
    return root, t, f"{partition}|{base.name}"


def add_commits(t: Table, partition: str, source: str, count: int) -> list[str]:
    with t.lock:
        return [_add_base_file(t, partition, source)[0] for _ in range(count)]


def more(t: Table, where: str, count: int) -> list[str]:
    partition, source = where.split("|")
    return add_commits(t, partition, source, count)


def mdt_of(root: Path) -> tuple[LocalStorage, TableConfig]:
    storage = LocalStorage(str(root / METADATA_FOLDER))
    return storage, load_table_config(storage, metadata_table=True)


def mdt_timeline(root: Path) -> Timeline:
    return Timeline.load(*mdt_of(root))


def data_timeline(root: Path) -> Timeline:
    storage = LocalStorage(str(root))
    return Timeline.load(storage, load_table_config(storage))


def mdt_files(root: Path) -> list[str]:
    folder = root / METADATA_FOLDER / ".hoodie" / "timeline"
    return sorted(p.name for p in folder.iterdir() if p.is_file())


def snapshot(storage: LocalStorage, config: TableConfig) -> Snapshot:
    """(completed action, completed bytes, plan bytes as Hudi archives them) of every completed instant."""
    timeline = Timeline.load(storage, config)
    out: Snapshot = {}
    for inst in timeline.completed():
        files = {s: storage.read(p) for s, p in timeline.state_files(inst).items()}
        plan = None
        if inst.action in (Action.CLEAN, Action.COMPACTION, Action.LOG_COMPACTION):
            plan = files.get(State.REQUESTED) or None
        out[inst.requested_time] = (inst.file_action.value, files[State.COMPLETED] or None, plan)
    return out


def assert_history_holds(storage: LocalStorage, config: TableConfig, expected: Snapshot) -> History:
    history = History.load(storage, config)
    for t, (action, metadata, plan) in expected.items():
        entry = history.get(t)
        assert entry is not None, f"{t} is not in the MDT history"
        assert entry.instant.file_action.value == action
        assert history.metadata_bytes(t) == metadata, t
        assert history.plan_bytes(t) == plan, t
    return history


def mdt_listing(root: Path) -> dict[str, dict[str, int]]:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    mdt = MetadataTable.open(storage, config, Timeline.load(storage, config))
    assert mdt is not None
    return mdt.all_files()


def readers(root: Path) -> tuple[Counter[Any], Counter[Any], dict[str, dict[str, int]]]:
    """hudi-rs through the MDT and by listing (must agree), hoodied's MDT listing (no drift)."""
    with_mdt = hudi_rs_rows(root, metadata=True)
    listed = hudi_rs_rows(root, metadata=False)
    assert with_mdt == listed
    assert committed_listing_drift(HoodieTable.open(str(root))).count == 0
    return with_mdt, listed, mdt_listing(root)


def as_of_rows(root: Path, as_of: str, *, metadata: bool) -> Counter[Any]:
    """hudi-rs as of ``as_of``, listing through the MDT or storage."""
    builder = hudi.HudiTableBuilder.from_base_uri(str(root)).with_hudi_option(
        "hoodie.metadata.enable", "true" if metadata else "false"
    )
    batches = builder.build().read(hudi.HudiReadOptions().with_as_of_timestamp(as_of))
    return multiset(pa.Table.from_batches(batches)) if batches else Counter()


def archive(root: Path, *, dry_run: bool = False) -> ArchivalResult[ArchivalPlan]:
    """What ``hoodied archive`` runs: the data table, then its metadata table, in one lock hold."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    target = mdt_archival_target(storage, config, SETTINGS)
    assert target is not None
    return execute_archival(
        storage,
        config,
        InProcessLock(storage.base_uri),
        archival_planner(SETTINGS),
        compaction_batch_size=SETTINGS.compaction_batch_size,
        dry_run=dry_run,
        mdt=MdtArchival(target[0], target[1], mdt_archival_planner(SETTINGS, storage, config)),
    )


# ---------------------------------------------------------------------------- the rule, on its own


def expected_mdt_archival(mdt: Timeline, data_after: Timeline) -> tuple[list[str], StopReason | None]:
    """The MDT requested times Hudi archives (module docstring), and the reason it stops."""
    commits = [i for i in mdt.instants if i.is_completed and i.action in WRITE_ACTIONS]
    if len(commits) <= MDT_MAX:
        return [], StopReason.NOT_ENOUGH_COMMITS
    bounds: dict[StopReason, str] = {}
    compactions = [i for i in commits if i.action is Action.COMPACTION]
    last = compactions[-1]
    deltas = [
        i for i in mdt.instants if i.action is Action.DELTA_COMMIT and i.requested_time > last.requested_time
    ]
    bounds[StopReason.COMPACTION_DELTA_COMMITS] = (
        last.requested_time if len(deltas) < MDT_DELTAS else deltas[len(deltas) - MDT_DELTAS].requested_time
    )
    first_data = next(
        i for i in data_after.instants if i.is_pending or (i.is_completed and i.action in WRITE_ACTIONS)
    )
    bounds[StopReason.DATA_TABLE_TIMELINE] = first_data.requested_time
    reason, bound = min(bounds.items(), key=lambda kv: kv[1])
    before = [c for c in commits if c.requested_time < bound]
    limit = len(commits) - MDT_MIN
    if len(before) > limit:
        before, reason = before[:limit], StopReason.MIN_COMMITS_TO_KEEP
    if not before:
        return [], reason
    cut = before[-1].requested_time
    services = [i for i in mdt.completed([Action.CLEAN, Action.ROLLBACK]) if i.requested_time < cut]
    return sorted(i.requested_time for i in before + services), reason


def _retained_data(root: Path) -> list[str]:
    return [i.requested_time for i in data_timeline(root).completed() if i.action in WRITE_ACTIONS]


# ---------------------------------------------------------------------------- archival as Hudi does it


#: (fixture, whether the data table's archival moves on: the version-9 table has a clustering no
#: clean has followed, so its data archival, and with it the MDT's, stops there for good)
CASES = [(V8, True), (V9_MOR, False)]


@pytest.mark.parametrize("fid,moves_on", CASES, ids=["v8-mor", "v9-mor-clustered"])
def test_mdt_archival_keeps_what_hudi_keeps(hudi_table: Any, fid: str, moves_on: bool) -> None:
    root, t, where = build(hudi_table, fid=fid)
    indexing = [i.requested_time for i in data_timeline(root).completed([Action.INDEXING])]
    mdt_storage, mdt_config = mdt_of(root)
    mdt_before = mdt_timeline(root)
    mdt_bytes = snapshot(mdt_storage, mdt_config)
    rows, _, listing = readers(root)
    as_of = {t_: as_of_rows(root, t_, metadata=True) for t_ in _retained_data(root)}

    # the dry run reports both tables with their boundaries and writes nothing
    files_before = mdt_files(root)
    opts = [a for k, v in OPTIONS.items() for a in ("-o", f"{k}={v}")]
    dry = CliRunner().invoke(cli, ["archive", str(root), *opts, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "\nmetadata table: dry run: " in dry.output
    mdt_part = dry.output.split("\nmetadata table:\n", 1)[1]
    assert f"boundary {StopReason.DATA_TABLE_TIMELINE.value} at " in mdt_part
    assert f"boundary {StopReason.COMPACTION_DELTA_COMMITS.value} at " in mdt_part
    assert mdt_files(root) == files_before
    assert not (root / METADATA_FOLDER / ".hoodie/timeline/history/_version_").exists()
    dry_result = archive(root, dry_run=True)
    assert dry_result.mdt is not None

    result = archive(root)
    assert result.mdt is not None
    data_after = data_timeline(root)
    archived, reason = expected_mdt_archival(mdt_before, data_after)
    # the dry run planned the MDT against the data timeline as the real run left it
    assert [i.requested_time for i in dry_result.mdt.plan.instants] == archived
    assert len(archived) > 10, archived  # the five initialisations, the fixture's instants, ...
    assert [i.requested_time for i in result.mdt.plan.instants] == archived
    assert result.mdt.plan.stop.reason is reason
    assert result.mdt.plan.min_to_keep == MDT_MIN and result.mdt.plan.max_to_keep == MDT_MAX
    assert {b.reason for b in result.mdt.plan.boundaries} >= {StopReason.DATA_TABLE_TIMELINE}

    # the MDT's active timeline: every other instant, all its files; nothing archived left
    kept = [i for i in mdt_before.instants if i.requested_time not in set(archived)]
    after = mdt_timeline(root)
    assert [(i.requested_time, i.action, i.state) for i in after.instants] == [
        (i.requested_time, i.action, i.state) for i in kept
    ]
    assert len(mdt_files(root)) == sum(len(mdt_before.state_files(i)) for i in kept)
    # the MDT keeps every instant from the data table's first active commit on (the data table's
    # completed indexing instants stay active forever and play no part)
    first_data = min(_retained_data(root))
    assert all(t < first_data for t in archived)
    assert [i.requested_time for i in data_after.completed([Action.INDEXING])] == indexing != []

    # the MDT history: the archived instants, byte for byte, in one level-0 layer
    history = assert_history_holds(mdt_storage, mdt_config, {t: mdt_bytes[t] for t in archived})
    assert sorted(e.instant.requested_time for e in history.entries) == archived
    assert result.mdt.layer == HistoryFileName(archived[0], archived[-1], 0).format()
    merged = Timeline.load(mdt_storage, mdt_config, include_history=True)
    assert {i.requested_time for i in merged.completed()} == set(mdt_bytes)

    # readers: the same rows through the MDT and by listing, the same MDT listing, no drift
    assert readers(root)[0] == rows
    assert mdt_listing(root) == listing
    # time travel to every data instant still active reads what it read before
    retained = _retained_data(root)
    assert retained and set(retained) <= set(as_of)
    for t_ in retained:
        assert as_of_rows(root, t_, metadata=True) == as_of[t_], t_
        assert as_of_rows(root, t_, metadata=False) == as_of[t_], t_

    # nothing more is due on either table
    again = archive(root)
    assert again.plan.instants == [] and again.mdt is not None and again.mdt.plan.instants == []

    # later writes and a second archival append a second layer to the MDT history
    more(t, where, 12)
    mdt_bytes.update(snapshot(mdt_storage, mdt_config))
    rows = readers(root)[0]
    second = archive(root)
    assert second.mdt is not None
    if not moves_on:
        # the data table still holds its first replacecommit: the MDT may not go past it
        assert second.plan.instants == [] and second.mdt.plan.instants == []
        assert second.mdt.plan.stop.reason is StopReason.DATA_TABLE_TIMELINE
        assert readers(root)[0] == rows
        return
    assert second.mdt.plan.instants
    assert second.mdt.layer is not None and second.mdt.layer != result.mdt.layer
    version = int((root / METADATA_FOLDER / ".hoodie/timeline/history/_version_").read_text())
    listed = sorted(n for n, _ in read_manifest(mdt_storage, mdt_config.history_path, version))
    assert listed == sorted([result.mdt.layer, second.mdt.layer])
    everything = archived + [i.requested_time for i in second.mdt.plan.instants]
    history = assert_history_holds(mdt_storage, mdt_config, {t: mdt_bytes[t] for t in everything})
    assert len(history.entries) == len(everything)
    assert readers(root)[0] == rows


def test_no_mdt_archival_when_metadata_disabled(hudi_table: Any) -> None:
    """``hoodie.metadata.enable=false``: no MDT writer runs, so its timeline is left alone."""
    root, _, _ = build(hudi_table, 30)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    off = ArchivalSettings.from_options({**OPTIONS, "hoodie.metadata.enable": "false"})
    assert mdt_archival_target(storage, config, off) is None
    files = mdt_files(root)
    done = CliRunner().invoke(
        cli,
        [
            "archive",
            str(root),
            *[a for k, v in OPTIONS.items() for a in ("-o", f"{k}={v}")],
            "-o",
            "hoodie.metadata.enable=false",
        ],
    )
    assert done.exit_code == 0, done.output
    assert "metadata table" not in done.output
    assert mdt_files(root) == files


def test_mdt_keeps_more_when_the_data_cleaner_retains_more(hudi_table: Any) -> None:
    """The MDT cleaner retains 1.2 x the data cleaner's commits (25 -> 30): the MDT keeps 29 + 2."""
    root, _, _ = build(hudi_table, 40)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    settings = ArchivalSettings.from_options({**OPTIONS, "hoodie.clean.commits.retained": "25"})
    target = mdt_archival_target(storage, config, settings)
    assert target is not None
    result = execute_archival(
        storage,
        config,
        InProcessLock(storage.base_uri),
        archival_planner(settings),
        dry_run=True,
        mdt=MdtArchival(target[0], target[1], mdt_archival_planner(settings, storage, config)),
    )
    assert result.mdt is not None
    assert (result.mdt.plan.min_to_keep, result.mdt.plan.max_to_keep) == (31, 34)
    commits = result.mdt.plan.completed_commits
    assert commits > 34 and len(result.mdt.plan.commits) <= commits - 31


# ---------------------------------------------------------------------------- kill -9

DRIVER = """
import sys
from hoodied.executors.archival import MdtArchival, execute_archival
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.planners.archival import (ArchivalSettings, archival_planner, mdt_archival_planner,
                                       mdt_archival_target)
storage = LocalStorage(sys.argv[1])
config = load_table_config(storage)
settings = ArchivalSettings.from_options(dict(a.split("=", 1) for a in sys.argv[2:]))
mdt_storage, mdt_config = mdt_archival_target(storage, config, settings)
mdt = MdtArchival(mdt_storage, mdt_config, mdt_archival_planner(settings, storage, config))
execute_archival(storage, config, InProcessLock(storage.base_uri), archival_planner(settings),
                 compaction_batch_size=settings.compaction_batch_size, mdt=mdt)
"""


def _state(root: Path) -> tuple[list[str], list[str], list[str]]:
    """(data timeline files, MDT active timeline files, MDT history entries)."""
    storage, config = mdt_of(root)
    data = sorted(p.name for p in (root / ".hoodie/timeline").iterdir() if p.is_file())
    history = sorted(e.instant.requested_time for e in History.load(storage, config).entries)
    return data, mdt_files(root), history


def _consistent(root: Path, written: Snapshot) -> None:
    """Every MDT instant is active or in its history (with its bytes); the history's manifest holds."""
    storage, config = mdt_of(root)
    active = {i.requested_time for i in Timeline.load(storage, config).completed()}
    history = History.load(storage, config)
    in_history = {e.instant.requested_time for e in history.entries}
    assert active | in_history == set(written)
    assert_history_holds(storage, config, {t: written[t] for t in in_history})
    folder = root / METADATA_FOLDER / ".hoodie/timeline/history"
    if (folder / "_version_").exists():
        version = int((folder / "_version_").read_text())
        for name, size in read_manifest(storage, config.history_path, version):
            assert (folder / name).stat().st_size == size


#: every step of the MDT's archival, and the end of the data table's (before the MDT's starts)
POINTS = (*PAUSE_POINTS_MDT, "archive-active-deleted")


@pytest.mark.parametrize("point", POINTS)
def test_kill_9_at_every_mdt_crash_point_converges(hudi_table: Any, tmp_path: Path, point: str) -> None:
    root, t, where = build(hudi_table, 30)
    # LSM compaction of the MDT history needs 10 level-0 layers (the MDT writer's default batch);
    # cleaning old snapshots needs more than 3 manifest versions
    prior = {"mdt-archive-compacted-written": 9, "mdt-archive-clean-manifests-deleted": 3}.get(point, 0)
    written: Snapshot = {}
    mdt_storage, mdt_config = mdt_of(root)
    for _ in range(prior):
        written.update(snapshot(mdt_storage, mdt_config))
        done = archive(root)
        assert done.mdt is not None and done.mdt.plan.instants
        more(t, where, 5)
    written.update(snapshot(mdt_storage, mdt_config))
    rows = readers(root)[0]
    twin = tmp_path / "twin" / root.name
    shutil.copytree(root, twin)
    expected = archive(twin)  # what an uninterrupted run leaves
    assert expected.mdt is not None and expected.mdt.plan.instants

    args = [str(root), *(f"{k}={v}" for k, v in OPTIONS.items())]
    proc = start_paused(DRIVER, args, point, tmp_path / "ready")
    kill_group(proc)

    # the state the crash left is consistent and readable
    _consistent(root, written)
    assert readers(root)[0] == rows

    # a re-run converges on what the uninterrupted run left
    archive(root)
    _consistent(root, written)
    assert _state(root) == _state(twin)
    assert readers(root)[0] == rows
    again = archive(root)
    assert again.mdt is not None and again.mdt.plan.instants == [] and not again.mdt.recovered


def test_interrupted_mdt_deletion_is_finished_by_the_next_run(hudi_table: Any) -> None:
    """An MDT completed file left behind (its instant already in the MDT history) is deleted first."""
    root, _, _ = build(hudi_table, 30)
    mdt_storage, mdt_config = mdt_of(root)
    written = snapshot(mdt_storage, mdt_config)
    before = mdt_timeline(root)
    result = archive(root)
    assert result.mdt is not None
    inst: Instant = next(i for i in result.mdt.plan.instants if i.action is Action.DELTA_COMMIT)
    name = Path(before.state_files(inst)[State.COMPLETED]).name
    (root / METADATA_FOLDER / ".hoodie/timeline" / name).write_bytes(written[inst.requested_time][1] or b"")
    assert mdt_timeline(root).get(inst.requested_time) is not None
    again = archive(root)
    assert again.mdt is not None and again.mdt.recovered == [inst.requested_time]
    assert mdt_timeline(root).get(inst.requested_time) is None
    _consistent(root, written)

"""The MDT cleaner's retention (HUDI-7402, ``HoodieMetadataWriteUtils.createMetadataWriteConfig``):
one rule for the MDT's own clean (``metadata.upkeep``) and the MDT archival planner."""

from __future__ import annotations

import inspect
import math

import pytest

from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.metadata.upkeep import (
    DATA_COMMITS_RETAINED,
    DATA_FILE_VERSIONS_RETAINED,
    DATA_HOURS_RETAINED,
    MDT_COMMITS_RETAINED,
    MdtCleanerRetention,
    clean_if_necessary,
    maintain,
    mdt_cleaner_retention,
    plan_mdt_clean,
)
from hoodied.hoodie.metadata.writer import MetadataWriter
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.planners.archival import ArchivalSettings, mdt_archival_settings
from hoodied.planners.clean import CleanPolicy
from tests.hoodie.metadata.test_mdt_writer import FAST, V9_MOR, Table, _add_base_file

#: (data hoodie.clean.commits.retained, MDT commits retained): max(20, (int) (n * 1.2))
COMMITS = [(1, 20), (10, 20), (16, 20), (17, 20), (18, 21), (20, 24), (25, 30), (30, 36), (100, 120)]
#: (data hoodie.clean.hours.retained, MDT hours retained): (int) ceil(n * 1.2)
HOURS = [(0, 0), (1, 2), (5, 6), (10, 12), (24, 29), (48, 58)]
#: (data hoodie.clean.fileversions.retained, MDT file versions retained): (int) ceil(n * 1.2)
FILE_VERSIONS = [(1, 2), (3, 4), (5, 6), (10, 12)]


@pytest.mark.parametrize(("data", "mdt"), COMMITS)
def test_commits_retained_is_the_larger_of_20_and_the_truncated_1_2_times(data: int, mdt: int) -> None:
    assert mdt_cleaner_retention(data_commits_retained=data).commits == mdt


@pytest.mark.parametrize(("data", "mdt"), HOURS)
def test_hours_retained_is_1_2_times_rounded_up(data: int, mdt: int) -> None:
    assert mdt_cleaner_retention(data_hours_retained=data).hours == mdt


@pytest.mark.parametrize(("data", "mdt"), FILE_VERSIONS)
def test_file_versions_retained_is_1_2_times_rounded_up(data: int, mdt: int) -> None:
    assert mdt_cleaner_retention(data_file_versions_retained=data).file_versions == mdt


def test_hudis_default_data_cleaner_gives_20_commits() -> None:
    assert (DATA_COMMITS_RETAINED, DATA_HOURS_RETAINED, DATA_FILE_VERSIONS_RETAINED) == (10, 24, 3)
    assert mdt_cleaner_retention() == MdtCleanerRetention(commits=20, hours=29, file_versions=4)
    assert MDT_COMMITS_RETAINED == 20


def test_the_floor_only_binds_up_to_16_data_commits() -> None:
    """The fixed 20 and HUDI-7402 agree up to 17 data commits (int(17 x 1.2) = 20); from 18 on the
    MDT keeps more than 20."""
    above = [n for n in range(1, 200) if mdt_cleaner_retention(n).commits > MDT_COMMITS_RETAINED]
    assert above[0] == 18 and above == list(range(18, 200))
    for n in range(1, 200):  # the same double arithmetic Hudi's Java does, never below the data table's
        got = mdt_cleaner_retention(n).commits
        assert got == max(20, math.floor(n * 1.2)) and got >= n


@pytest.mark.parametrize("bad", [{"data_commits_retained": 0}, {"data_hours_retained": -1},
                                 {"data_file_versions_retained": 0}])
def test_bad_data_retention_is_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="retention"):
        mdt_cleaner_retention(**bad)


def test_mdt_archival_uses_the_same_rule(hudi_table) -> None:
    data_config = load_table_config(LocalStorage(str(hudi_table(V9_MOR))))
    for policy in CleanPolicy:
        for commits, hours in [(1, 0), (10, 24), (16, 10), (17, 1), (18, 2), (25, 48), (60, 100)]:
            data = ArchivalSettings(
                clean_policy=policy, clean_commits_retained=commits, clean_hours_retained=hours
            )
            mdt = mdt_archival_settings(data, data_config)
            rule = mdt_cleaner_retention(commits, hours)
            assert mdt.clean_policy is policy  # the data table's policy, unchanged
            assert (mdt.clean_commits_retained, mdt.clean_hours_retained) == (rule.commits, rule.hours)


def test_upkeep_defaults_to_hudis_default_data_cleaner() -> None:
    expected = mdt_cleaner_retention(DATA_COMMITS_RETAINED).commits
    for fn in (maintain, clean_if_necessary, plan_mdt_clean):
        assert inspect.signature(fn).parameters["retained"].default == expected == 20


class _NoUpkeep(Table):
    """MDT delta commits without the MDT's own services, to plan MDT cleans by hand."""

    def mdt(self) -> MetadataWriter:
        return MetadataWriter(self.storage, self.config, self.lock, time_settings=FAST, upkeep=False)


def test_mdt_clean_plan_follows_the_retention(hudi_table) -> None:
    """A real Hudi 1.1 MOR table (20 MDT writes, Hudi's MDT compaction C the 13th) with 14 more MDT
    delta commits. The default retention (Hudi's default data cleaner: 20) puts the earliest commit
    to retain after C, so the slice before C goes (``CleanPlanner`` keeps the latest slice and the
    newest one before the ECTR, here both C's); a data table retaining 19 commits makes Hudi's MDT
    cleaner keep 22, which puts the ECTR at C: nothing to clean yet."""
    root = hudi_table(V9_MOR)
    t = _NoUpkeep(root)
    src = next(p.name for p in sorted((root / "region=eu").glob("*.parquet")))
    with t.lock:
        for _ in range(14):
            _add_base_file(t, "region=eu", src)
    storage = LocalStorage(str(root / METADATA_FOLDER))
    config = load_table_config(storage, metadata_table=True)
    timeline = Timeline.load(storage, config)
    assert not timeline.completed((Action.CLEAN,)) and not timeline.pending()
    writes = [i for i in timeline.completed() if i.action in (Action.DELTA_COMMIT, Action.COMPACTION)]
    assert len(writes) == 34 and writes[12].action is Action.COMPACTION
    hudis_compaction = writes[12].requested_time

    default = plan_mdt_clean(storage, config, timeline)
    assert default is not None and default["policy"] == "KEEP_LATEST_COMMITS"
    assert default["earliestInstantToRetain"]["timestamp"] == writes[-20].requested_time > hudis_compaction
    doomed = [i["filePath"] for i in default["filePathsToBeDeletedPerPartition"]["files"]]
    assert any(path.endswith("_00000000000000000.hfile") for path in doomed)
    # up to 16 data commits the floor of 20 holds; 18 gives 21, still after C
    for data in (1, 10, 16, 18):
        retained = mdt_cleaner_retention(data).commits
        plan = plan_mdt_clean(storage, config, timeline, retained)
        assert plan is not None and plan["filePathsToBeDeletedPerPartition"] == default[
            "filePathsToBeDeletedPerPartition"]
    for data in (19, 25):  # 22 and 30 MDT commits: the earliest commit to retain is C or earlier
        assert plan_mdt_clean(storage, config, timeline, mdt_cleaner_retention(data).commits) is None

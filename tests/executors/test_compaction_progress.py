"""Progress of a compaction job: ``run_operations`` reports operations done / total.

A local Spark session runs a compaction of a table with several file groups through
``service.compaction.run_compaction(progress=...)``; the callback hears non-decreasing counts
of done operations over the plan's total and ends with done == total. The CLI's bar
(``service.cli.schedule.progress_bar``) draws on a stream only when enabled.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hoodied.executors.engine import Session, spark_session
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction
from hoodied.service.cli.options import progress_bar
from hoodied.service.spark_jobs import run_compaction
from tests.helpers.mor_tables import written_mor_table

FAST = TimeSettings(max_expected_clock_skew_ms=5)


@pytest.fixture(scope="module")
def spark() -> Iterator[Session]:
    with spark_session("local[2]") as session:
        yield session


def test_progress_counts_operations(tmp_path: Path, spark: Session) -> None:
    root = tmp_path / "t"
    written_mor_table(root)
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    settings = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)
    inst, result = schedule_compaction(storage, lock, settings, time_settings=FAST)
    assert inst is not None, result.reason
    calls: list[tuple[int, int]] = []
    done = run_compaction(storage, lock, inst.requested_time, spark, time_settings=FAST,
                          progress=lambda d, n: calls.append((d, n)))
    total = len(done.write_stats)
    assert total >= 3 and calls and calls[-1] == (total, total)
    assert {n for _, n in calls} == {total}
    counts = [d for d, _ in calls]
    assert counts == sorted(counts) and all(0 <= d <= total for d in counts)


def test_progress_bar_only_when_enabled() -> None:
    with progress_bar("compaction", False) as progress:
        assert progress is None
    with progress_bar("compaction", True) as progress:
        assert progress is not None
        progress(1, 4)
        progress(4, 4)

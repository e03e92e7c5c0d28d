"""A clock that steps past the bound while a job runs: the job is handed back at its next safe point,
no job starts while the clock is skewed, and work resumes by itself once it is back in bounds.

In process, with the clock reference injected (a step of the wall clock in the middle of a job
cannot be timed from outside); the table, its requested clean and the daemon loop are real.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.clean import CleanSettings, schedule_clean
from hoodied.service.config import load_config
from hoodied.service.daemon.clock import ClockReading, ClockState
from hoodied.service.daemon.loop import Daemon
from hoodied.service.daemon.registry import JobContext, Registry, register_executor
from tests.helpers.fixtures import require_fixture, unzip_table


class _SteppedClock:
    """A reference whose offset the test sets (seconds); precise to a millisecond."""

    source = "test reference"

    def __init__(self) -> None:
        self.offset = 0.0

    def read(self) -> ClockReading:
        return ClockReading(self.offset, 0.002, 0.0)

    def close(self) -> None:
        pass


def test_a_skew_mid_job_hands_the_job_back_and_work_resumes_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = unzip_table(require_fixture("cow/v9_txns_simple_nometa"), tmp_path / "t0")
    storage = LocalStorage(str(root))
    inst, _ = schedule_clean(storage, InProcessLock(storage.base_uri), CleanSettings(commits_retained=2),
                             time_settings=TimeSettings(max_expected_clock_skew_ms=5))
    assert inst is not None
    started: list[float] = []
    handed_back = threading.Event()

    def waits_for_cancel(ctx: JobContext) -> str:
        started.append(time.monotonic())
        if len(started) > 1:
            return "second run"
        if not ctx.cancel.wait(20):
            return "never cancelled"
        handed_back.set()
        raise RuntimeError("stopped at a safe point")

    registry = Registry()
    register_executor(Action.CLEAN, waits_for_cancel, resumes_inflight=True, registry=registry)
    settings = load_config(overrides={
        "tables": [str(root)], "http": "off", "poll_interval_seconds": 0.1, "clock_skew_ms": 200,
        "defaults": {"services": {"clean": {"schedule": False}, "compaction": {"schedule": False}}},
    })
    daemon = Daemon(settings, registry=registry)
    clock = _SteppedClock()
    monkeypatch.setattr(daemon, "_clock_reference", lambda: clock)
    seen: dict[str, Any] = {}

    async def main() -> int:
        async def drive() -> None:
            with anyio.fail_after(30):
                while not started:
                    await anyio.sleep(0.02)
                assert daemon.clock.current.state is ClockState.IN_BOUNDS
                clock.offset = 30.0  # the wall clock steps 30 s ahead while the job runs
                while not handed_back.is_set() or daemon.running:
                    await anyio.sleep(0.02)
                assert daemon.clock.current.state is ClockState.SKEWED
                await anyio.sleep(1.0)  # ten poll cycles with the clean pending: nothing starts
                seen["starts_while_skewed"] = len(started)
                seen["outcome"] = daemon.tables[str(root)].outcomes[0]["outcome"]
                seen["status"] = daemon.status()["clock"]
                clock.offset = 0.05
                while len(started) < 2:
                    await anyio.sleep(0.02)
                seen["state_after"] = daemon.clock.current.state
            daemon.request_stop("test done")

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            code = await daemon.run()
        return code

    assert anyio.run(main) == 0
    assert seen["starts_while_skewed"] == 1
    assert seen["outcome"] == "handed_back"
    assert seen["status"]["state"] == "skewed" and seen["status"]["offset_seconds"] == 30.0
    assert not seen["status"]["takes_work"]
    assert seen["state_after"] is ClockState.IN_BOUNDS
    page = daemon.metrics.render().decode()
    assert "hoodied_clock_skewed 0.0" in page and "hoodied_clock_offset_seconds 0.05" in page

"""The steps every Spark table-service attempt shares: start it, run its job, check the results.

An attempt of instant T (compaction, log compaction, clustering) starts under the table lock
with its heartbeat, then the inflight transition (a failure there stops the heartbeat: nothing
ran); its Spark job then runs outside the lock (``executors.engine.run_operations``) and must
return at least one row for every operation. The crash points ``requested``, ``inflight`` and
``written`` (``hoodie.crashpoints``) mark the steps for the kill -9 tests.

(The compaction and log compaction executors still carry their own copy of these steps.)
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from executors.engine import OperationTask, Progress, run_operations
from hoodie.crashpoints import crash_point
from hoodie.errors import InstantStateError
from hoodie.heartbeat import Heartbeat
from hoodie.instant import Action
from hoodie.timeline_writer import TimelineWriter

__all__ = ["run_attempt", "start_attempt"]


def start_attempt(writer: TimelineWriter, heartbeat: Heartbeat, instant_time: str, action: Action) -> None:
    """Heartbeat first, then ``T.<action>.inflight`` (the caller holds the lock)."""
    heartbeat.start()
    try:
        crash_point("requested")
        writer.transition_to_inflight(instant_time, action)
    except BaseException:
        heartbeat.stop(delete=True)
        raise


def run_attempt(
    session: SparkSession,
    count: int,
    task: OperationTask,
    schema: pa.Schema,
    *,
    description: str,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """The rows of the attempt's job: one operation per task, every operation answered."""
    crash_point("inflight")
    table = run_operations(session, count, task, schema, progress=progress, description=description)
    rows = table.to_pylist()
    crash_point("written")
    answered = len({r["op"] for r in rows})
    if answered != count:
        raise InstantStateError(f"{description}: task results for {answered} of {count} operations")
    return rows

"""Per-operation work and who runs it: the seam between the format library and an engine.

A table service whose work splits into independent operations (one per file group) hands its
runner a picklable function of the operation's index and gets back each operation's small
result rows, as Hudi's ``HoodieEngineContext.map`` hands a function over a list of work items
to Spark or to a local executor (``HoodieLocalEngineContext``). The library itself depends on
no engine: ``run_in_process`` runs the operations one after the other in the calling process;
``executors.engine.SparkOperations`` runs them as one Spark job, one task per operation. The
caller picks the runner, the library only states what an operation is.

An operation function must be picklable (an instance of a module-level class holding plain
values and a ``Storage``, which pickles without secrets), must write only through write-once
creates (a retried or duplicate task attempt then finds the file instead of replacing it), and
returns one Arrow batch of rows of the runner's ``schema``; the driver keeps every decision
that needs the table lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import pyarrow as pa

from hoodied.hoodie.filenames import make_write_token

__all__ = ["OperationFunction", "OperationRunner", "run_in_process"]

#: An operation: (operation index, write token of the task running it) -> its result rows.
OperationFunction = Callable[[int, str], pa.RecordBatch]


class OperationRunner(Protocol):
    """Runs ``task`` once for every operation index in ``[0, count)``; returns all their rows
    (``schema``). A failing operation fails the call with its error."""

    def __call__(self, count: int, task: OperationFunction, schema: pa.Schema, *,
                 description: str = "") -> pa.Table: ...


def run_in_process(count: int, task: OperationFunction, schema: pa.Schema, *,
                   description: str = "") -> pa.Table:
    """``OperationRunner`` in the calling process: operation 0, then 1..., in index order."""
    del description  # nothing to show: no job to name
    batches = [task(index, make_write_token(index, 0, 0)).select(schema.names).cast(schema)
               for index in range(count)]
    return pa.Table.from_batches(batches, schema=schema)

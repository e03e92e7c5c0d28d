"""The Spark engine of the data-rewriting services: sessions, and one task per operation.

A service instant becomes one Spark job: a DataFrame with one row per operation (file group,
clustering group...) in its own partition, processed with ``mapInArrow``. The task function
receives the operation's index and the task's *write token* and returns Arrow rows (write
statistics); the driver collects them with ``toArrow``. Only DataFrame APIs that Spark
Connect also serves are used (no RDD, no ``SparkContext``), so the same code runs on

- ``local`` (default): an in-process ``local[*]`` session. The Python workers run this very
  interpreter (``PYSPARK_PYTHON``) with the project on their ``PYTHONPATH``; the UI and the
  console progress bar are off and shuffles use few partitions;
- ``sc://HOST:PORT``: a Spark Connect server. The ``hoodie`` and ``executors`` packages are
  zipped and shipped as Python artifacts of the session, so the server's workers import the
  same code as the driver.

Extra Spark settings (``spark_conf``, the CLI's ``--spark-conf k=v``) are applied to either.

Tables on object stores: a task receives the table's pickled ``Storage`` (its URI and client
settings, never a secret) and builds its client from the worker's own environment, so Spark's
Python workers need the credential variables the driver has (``AWS_*``, ``AZURE_*``,
``GOOGLE_*``, or an instance identity). A local session's workers inherit the environment the
driver had when it started Spark; on a cluster or a Spark Connect server they come from its
deployment (``spark.executorEnv.*``, instance profiles).

Progress: ``run_operations(progress=...)`` reports operations done / total while the job
runs: a Spark Connect session's progress handler, or a classic session's status tracker polled
for the job group the job runs in.

Write token: Hudi's ``<task partition>-<stage id>-<task attempt id>`` from
``pyspark.TaskContext``, so a retried or speculative attempt of an operation writes a file of
another name; the driver keeps the files named in the collected statistics and removes the
rest (markers reconciliation).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import uuid
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession

from hoodied.hoodie import errors
from hoodied.hoodie.errors import HoodieServiceError
from hoodied.hoodie.filenames import make_write_token

log = logging.getLogger(__name__)

__all__ = [
    "LOCAL",
    "OperationTask",
    "Progress",
    "Session",
    "SparkJobError",
    "current_write_token",
    "run_operations",
    "spark_ddl",
    "spark_session",
    "task_error",
]

LOCAL = "local"
#: What Spark Connect's Python workers need of hoodied: the format library and the executors.
_SHIPPED_PACKAGES = ("hoodied.hoodie", "hoodied.executors")
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"

#: Defaults of an embedded local session (overridable through ``spark_conf``).
LOCAL_DEFAULTS: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.log.level": "WARN",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}

#: The session type callers outside ``executors`` may name (they never import pyspark).
Session = SparkSession

#: The last line of a Python worker's traceback: ``module.Error: message``.
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$")


class SparkJobError(HoodieServiceError):
    """A Spark job failed for a reason that is not one of hoodied's own errors."""


#: A task: (operation index, write token) -> one Arrow batch of results.
OperationTask = Callable[[int, str], pa.RecordBatch]


def _package_folder(package: str) -> Path:
    """Where the installed ``package`` lives (a wheel install, an editable link tree or a zip's folder)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SparkJobError(f"{package} is not installed as a package; cannot ship it to Spark")
    return Path(next(iter(spec.submodule_search_locations)))


def _import_root() -> Path:
    """The folder holding the ``hoodied`` namespace, as this interpreter imports it."""
    return _package_folder("hoodied.hoodie").parent.parent


def _local_environment() -> None:
    """Python workers of a local session: this interpreter, hoodied importable as the driver imports it."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    root = str(_import_root())
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def _package_zip(folder: Path) -> Path:
    """``hoodied.hoodie`` and ``hoodied.executors`` as one zip (sources and package data) for Spark Connect.

    The packages are found where this interpreter imports them from, never by guessing a project
    root, and only their own files go in. ``hoodied`` is a namespace package (no ``__init__`` of
    its own), which zipimport finds only through a directory entry: every folder gets one.
    """
    target = folder / "hoodied-packages.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        folders: set[str] = set()

        def add_folder(name: Path) -> None:
            for part in reversed((name, *name.parents[:-1])):
                entry = part.as_posix() + "/"
                if entry not in folders:
                    folders.add(entry)
                    zf.writestr(entry, b"")

        for package in _SHIPPED_PACKAGES:
            base = _package_folder(package)
            prefix = Path(*package.split("."))
            for path in sorted(base.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    arcname = prefix / path.relative_to(base)
                    add_folder(arcname.parent)
                    zf.write(path, arcname.as_posix())
    return target


@contextmanager
def spark_session(spark: str = LOCAL, conf: Mapping[str, str] | None = None) -> Iterator[SparkSession]:
    """A session for ``spark`` (``local``, ``local[N]`` or ``sc://HOST:PORT``), stopped at the end.

    The local session is created here and stopped on exit, unless this process has an
    active session already: that one is used as it is and left running. A Spark Connect
    session is closed on exit (the server keeps running).
    """
    conf = dict(conf or {})
    # pyspark marks the process as a Connect client in the environment and leaves the mark after
    # the session stops: a later local session (and every child process) would then refuse to start
    leaked_mode = _CONNECT_MODE not in os.environ
    if spark.startswith("sc://"):
        builder = SparkSession.builder.remote(spark)
        for key, value in conf.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        tmp = Path(tempfile.mkdtemp(prefix="hoodied-artifacts-"))
        try:
            session.addArtifacts(str(_package_zip(tmp)), pyfile=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log.info("Spark Connect session on %s", spark)
    elif spark == LOCAL or spark.startswith("local["):
        active = SparkSession.getActiveSession()
        if active is not None:  # this process runs Spark already (tests, an embedding application)
            log.info("using the active Spark session (Spark %s)", active.version)
            yield active
            return
        _local_environment()
        master = "local[*]" if spark == LOCAL else spark
        builder = SparkSession.builder.master(master).appName("hoodied")
        for key, value in {**LOCAL_DEFAULTS, **conf}.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        log.info("local Spark session %s (Spark %s)", master, session.version)
    else:
        raise ValueError(f"--spark {spark!r}: expected 'local', 'local[N]' or sc://HOST:PORT")
    try:
        yield session
    finally:
        session.stop()
        if leaked_mode:
            os.environ.pop(_CONNECT_MODE, None)


def current_write_token() -> str:
    """Hudi's write token of the running Spark task (``0-0-0`` outside a task)."""
    ctx = TaskContext.get()
    if ctx is None:
        return make_write_token(0, 0, 0)
    return make_write_token(ctx.partitionId(), ctx.stageId(), ctx.taskAttemptId())


_DDL_TYPES = {
    pa.string(): "string",
    pa.int64(): "bigint",
    pa.int32(): "int",
    pa.float64(): "double",
    pa.bool_(): "boolean",
}


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL of a flat Arrow schema of strings, integers, doubles and booleans."""
    parts = []
    for f in schema:
        kind = _DDL_TYPES.get(f.type)
        if kind is None:
            raise ValueError(f"result column {f.name}: Arrow type {f.type} is not a result type")
        parts.append(f"`{f.name}` {kind}")
    return ", ".join(parts)


@dataclass(frozen=True)
class _PartitionRunner:
    """The ``mapInArrow`` function: each input row is an operation index; pickled to the workers."""

    task: OperationTask
    schema: pa.Schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        token = current_write_token()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                out = self.task(int(index), token)
                yield out.select(self.schema.names).cast(self.schema)


def run_operations(
    session: SparkSession,
    count: int,
    task: OperationTask,
    schema: pa.Schema,
    *,
    description: str = "",
    progress: Progress | None = None,
) -> pa.Table:
    """Run ``task`` once per operation index in ``[0, count)``, one Spark partition each.

    Returns the rows of every task (``schema``). A failing task fails the job; Spark's
    exception is raised as it comes (its message carries the task's Python error).
    ``progress(done, count)`` is called from another thread as operations complete (at most
    twice a second, and once with ``count`` at the end of a successful job).
    """
    if count == 0:
        return schema.empty_table()
    frame: Any = session.range(0, count, 1, numPartitions=count)
    if description:
        log.info("Spark job: %s (%d operations)", description, count)
    try:
        with _progress_reporting(session, count, progress):
            result = frame.mapInArrow(_PartitionRunner(task, schema), spark_ddl(schema)).toArrow()
    except HoodieServiceError:
        raise
    except Exception as exc:  # pyspark's errors carry the worker's traceback as text
        raise task_error(exc, description) from exc
    if progress is not None:
        progress(count, count)
    return result.select(schema.names).cast(schema)


#: A progress callback: (operations done, operations in the job).
Progress = Callable[[int, int], None]
_POLL_S = 0.5


@contextmanager
def _progress_reporting(session: SparkSession, count: int, progress: Progress | None) -> Iterator[None]:
    """Completed tasks of the job run inside, reported to ``progress``.

    Spark Connect pushes stage progress to the client (``registerProgressHandler``); a classic
    session's status tracker is polled for the stages of a job group set for this job.
    """
    if progress is None:
        yield
        return
    if type(session).__module__.startswith("pyspark.sql.connect"):  # a Spark Connect session
        # imported here: a classic session needs none of Spark Connect's client modules
        from pyspark.sql.connect.shell.progress import ProgressHandler, StageInfo

        report = progress

        class _TaskProgress(ProgressHandler):
            def __call__(
                self,
                stages: Iterable[StageInfo] | None,
                inflight_tasks: int,
                operation_id: str | None,
                done: bool,
            ) -> None:
                completed = sum(getattr(s, "num_completed_tasks", 0) for s in stages or ())
                report(min(completed, count), count)

        handler = _TaskProgress()
        session.registerProgressHandler(handler)
        try:
            yield
        finally:
            session.removeProgressHandler(handler)
        return
    context = session.sparkContext
    group = f"hoodied-{uuid.uuid4().hex}"
    context.setJobGroup(group, "hoodied operations", interruptOnCancel=False)
    stop = threading.Event()

    def poll() -> None:
        tracker = context.statusTracker()
        last = -1
        while not stop.wait(_POLL_S):
            done = 0
            for job_id in tracker.getJobIdsForGroup(group):
                job = tracker.getJobInfo(job_id)
                for stage_id in job.stageIds if job is not None else ():
                    stage = tracker.getStageInfo(stage_id)
                    done += stage.numCompletedTasks if stage is not None else 0
            if done != last:
                last = done
                progress(min(done, count), count)

    thread = threading.Thread(target=poll, name="hoodied-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


def task_error(exc: Exception, description: str) -> HoodieServiceError:
    """The error a failed job raises: hoodied's own error class of a task when it is one
    (its one-line message kept), else ``SparkJobError`` with the last line Spark reports."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        m = _ERROR_LINE.match(line)
        if m is None:
            continue
        kind = getattr(errors, m.group(1), None)
        message = re.sub(r"\s*SQLSTATE: \w+$", "", m.group(2))
        if isinstance(kind, type) and issubclass(kind, HoodieServiceError):
            return kind(message)
        return SparkJobError(f"{description or 'Spark job'} failed: {m.group(1)}: {message}")
    first = lines[0] if lines else type(exc).__name__
    return SparkJobError(f"{description or 'Spark job'} failed: {first}")

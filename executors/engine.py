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

Engine outages: a session start is bounded (``start_timeout_s``): for Spark Connect a short TCP
connect to HOST:PORT first (a closed port fails in milliseconds), then the gRPC handshake and the
upload of the packages under a deadline; a local session's JVM start under the same deadline.
pyspark's Connect client retries ``UNAVAILABLE`` for about ten minutes by default
(``pyspark.sql.connect.client.retries.DefaultPolicy``: 15 retries, backoff x4 from 50 ms up to
60 s) and releases finished executions from a pool of non-daemon threads with the same policy, so a
dead server kept a failed command waiting for minutes; worse, every client not closed calls the
server from an exit handler (an ML cache clean-up, with those retries), so the process did not exit
at all. Every session gets a policy bounded to ``retry_s`` instead, its exit handler is removed
(hoodied stops its sessions itself), and a session whose engine is lost has its policies set to no
retry before it is stopped. An unreachable server, one stopped mid-job (``UNAVAILABLE``,
an unknown server-side session after a restart), or a local JVM that died raise one
``EngineUnavailableError`` naming the engine and the cause (``engine_error``); stopping a session
never waits more than ``STOP_TIMEOUT_S``.

Write token: Hudi's ``<task partition>-<stage id>-<task attempt id>`` from
``pyspark.TaskContext``, so a retried or speculative attempt of an operation writes a file of
another name; the driver keeps the files named in the collected statistics and removes the
rest (markers reconciliation).
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
import warnings
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession

from hoodied.hoodie import errors
from hoodied.hoodie.errors import OUTAGE_ERRNOS, EngineUnavailableError, HoodieServiceError, StorageError
from hoodied.hoodie.filenames import make_write_token
from hoodied.hoodie.secrets import mask_secrets

log = logging.getLogger(__name__)

__all__ = [
    "CONNECT_DEFAULT_PORT",
    "DEFAULT_RETRY_S",
    "DEFAULT_START_TIMEOUT_S",
    "LOCAL",
    "STOP_TIMEOUT_S",
    "OperationTask",
    "Progress",
    "Session",
    "SparkJobError",
    "SparkOperations",
    "connect_address",
    "connect_problem",
    "current_write_token",
    "engine_error",
    "engine_gone",
    "is_engine_lost",
    "lost_error",
    "mark_lost",
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
    # The local JVM only schedules tasks: the data goes from Python to Python. Its C2 JIT
    # compiler cost about half of the JVM's CPU per job (0.28 against 0.14 CPU s for a trivial
    # 8-task job) for code that runs too little to gain from it; C1 alone is enough. The
    # "default" options are prepended to ``spark.driver.extraJavaOptions``, which the service
    # sets (log4j) and users may set too.
    "spark.driver.defaultJavaOptions": "-XX:TieredStopAtLevel=1",
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


#: Default bound of a session start: the TCP connect, the gRPC handshake and the upload of the
#: packages to a Spark Connect server, or a local session's JVM start.
DEFAULT_START_TIMEOUT_S = 120.0
#: Default time the Spark Connect client retries a call whose server does not answer before the
#: engine is declared unavailable (pyspark's own default is about ten minutes).
DEFAULT_RETRY_S = 30.0
#: Longest wait for a session to stop (the release of a Connect session, a local context).
STOP_TIMEOUT_S = 10.0
#: Spark Connect's port when the URL names none (``spark.connect.grpc.binding.port``).
CONNECT_DEFAULT_PORT = 15002
#: The reachability check of a Connect server: one TCP connect, at most this long.
_PROBE_TIMEOUT_S = 5.0
#: The Connect client's retry backoff: from 100 ms, doubled, at most 2 s between tries.
_FIRST_BACKOFF_MS = 100
_MAX_BACKOFF_MS = 2000

_T = TypeVar("_T")

# the Connect client warns when it gives up retrying; the error that follows says it in one line
warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]", category=UserWarning)

#: Sessions whose engine was lost (by ``id``): stopped without a release call and without retries.
_LOST: set[int] = set()
#: The engine address of each open session (by ``id``), for the messages of ``engine_error``.
_ADDRESSES: dict[int, str] = {}


def connect_address(url: str) -> tuple[str, int]:
    """HOST and PORT of a Spark Connect URL ``sc://HOST[:PORT][/;param=value...]``."""
    if not url.startswith("sc://"):
        raise ValueError(f"{mask_secrets(url)!r} is not a Spark Connect URL (sc://HOST:PORT)")
    parts = urlsplit("//" + url[len("sc://"):].split("/", 1)[0])
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{mask_secrets(url)!r}: the port is not a number") from None
    if not parts.hostname:
        raise ValueError(f"{mask_secrets(url)!r}: no host")
    return parts.hostname, port or CONNECT_DEFAULT_PORT


def connect_problem(url: str, timeout_s: float = _PROBE_TIMEOUT_S) -> str | None:
    """Why the Spark Connect server of ``url`` cannot be reached (one TCP connect), or ``None``."""
    host, port = connect_address(url)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no answer from {host}:{port} in {timeout_s:g} s"
    except OSError as exc:
        return f"cannot connect to {host}:{port}: {exc.strerror or exc}"


def _bounded(fn: Callable[[], _T], timeout_s: float, what: str,
             late: Callable[[_T], None] | None = None) -> _T:
    """``fn()`` in a daemon thread, waited for at most ``timeout_s``; its result or its exception.

    A call that does not return in time raises ``EngineUnavailableError``: it is left to finish on
    its own (a daemon thread never holds the process up) and ``late`` gets what it returns then
    (a session nobody will use is stopped there).
    """
    done = threading.Event()
    lock = threading.Lock()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            value = fn()
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc
        else:
            with lock:
                box["value"] = value
                given_up = box.get("given_up", False)
            if given_up and late is not None:
                try:
                    late(value)
                except Exception as exc:
                    log.warning("%s: cleaning up after the timeout failed: %s", what, exc)
        finally:
            done.set()

    threading.Thread(target=run, name="hoodied-engine-call", daemon=True).start()
    if not done.wait(timeout_s):
        with lock:
            box["given_up"] = True
            finished = "value" in box
        if not finished:
            raise EngineUnavailableError(f"{what}: no answer in {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    value: _T = box["value"]
    return value


#: The status and details of a gRPC error as pyspark words it (``str`` of the failed call).
_GRPC_STATUS = re.compile(r"status = StatusCode\.(\w+)")
_GRPC_DETAILS = re.compile(r'details = "([^"\n]*)"')


def _one_line(exc: BaseException) -> str:
    """What an error says in one line: a gRPC error's status and details (pyspark wraps the failed
    call, whose text spans lines), else the first line (pyspark's carry tracebacks, JVM stacks)."""
    for err in _chain(exc):
        details = getattr(err, "details", None)
        if callable(details) and type(err).__module__.startswith("grpc"):
            try:
                return f"{err.code().name}: {details()}"[:300]  # type: ignore[attr-defined]
            except Exception:
                continue
        text = str(err)
        found = _GRPC_DETAILS.search(text)
        if found is not None:
            status = _GRPC_STATUS.search(text)
            return (f"{status.group(1)}: " if status else "") + found.group(1)[:300]
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()[:300]
    return type(exc).__name__


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


#: gRPC status codes of a Spark Connect server that is gone or does not answer.
_LOST_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")
#: Texts of a local Spark whose JVM (or its context) is gone.
_LOST_TEXTS = (
    "Answer from Java side is empty",
    "Error while sending or receiving",
    "Error while receiving",
    "Java gateway process exited",
    "JAVA_GATEWAY_EXITED",
    "Cannot call methods on a stopped SparkContext",
    "SparkContext was shut down",
    "INVALID_HANDLE.SESSION_CHANGED",
    "INVALID_HANDLE.SESSION_NOT_FOUND",
    "INVALID_HANDLE.SESSION_CLOSED",
)


def is_engine_lost(exc: BaseException) -> bool:
    """The error says the engine is gone (server unreachable or restarted, JVM dead), not the job."""
    for err in _chain(exc):
        if isinstance(err, EngineUnavailableError):
            return True
        code: Any = None
        if callable(getattr(err, "getGrpcStatusCode", None)):  # pyspark's SparkConnectGrpcException
            code = err.getGrpcStatusCode()  # type: ignore[attr-defined]
        elif callable(getattr(err, "code", None)) and type(err).__module__.startswith("grpc"):
            try:
                code = err.code()  # type: ignore[attr-defined]
            except Exception:
                code = None
        if getattr(code, "name", None) in _LOST_CODES:
            return True
        if type(err).__name__ == "Py4JNetworkError":
            return True
        text = str(err)
        if any(t in text for t in _LOST_TEXTS):
            return True
    return False


def engine_gone(session: Any) -> str | None:
    """Why the engine of ``session`` is gone, asked of the engine itself, or ``None`` while it is there.

    A failed call says little on its own (a local JVM's death surfaces as a refused socket, a
    server's as a gRPC status or a text): a local session's JVM process has exited (pyspark's
    gateway keeps its ``Popen``), a Spark Connect server's port refuses a TCP connect.
    """
    if _is_connect(session):
        address = _ADDRESSES.get(id(session))
        return connect_problem(address, 2.0) if address is not None else None
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is None or proc is None:
        return None
    code = proc.poll()
    return None if code is None else f"the local Spark JVM exited (code {code})"


def lost_error(exc: BaseException, session: Any) -> EngineUnavailableError | None:
    """The error of a call on ``session`` that failed because its engine is gone, else ``None``."""
    if isinstance(exc, HoodieServiceError) and not isinstance(exc, EngineUnavailableError):
        return None
    address = _ADDRESSES.get(id(session), "session")
    gone = engine_gone(session)
    if gone is not None:
        return EngineUnavailableError(f"Spark engine {address} unavailable: {gone}")
    return engine_error(exc, address) if is_engine_lost(exc) else None


def engine_error(exc: BaseException, address: str) -> EngineUnavailableError:
    """The one-line error of a lost engine ``address`` (``sc://HOST:PORT``, ``local[N]``)."""
    if isinstance(exc, EngineUnavailableError):
        return exc
    return EngineUnavailableError(f"Spark engine {address} unavailable: {_one_line(exc)}")


def _retry_policy(retry_s: float) -> Any:
    """pyspark's ``DefaultPolicy`` with its retries bounded to about ``retry_s`` seconds in total."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    retries, total, wait = 0, 0.0, float(_FIRST_BACKOFF_MS)
    while total < retry_s * 1000:
        total += wait
        retries += 1
        wait = min(wait * 2, _MAX_BACKOFF_MS)
    return DefaultPolicy(
        max_retries=retries, initial_backoff=_FIRST_BACKOFF_MS, backoff_multiplier=2.0,
        max_backoff=_MAX_BACKOFF_MS, jitter=0, min_jitter_threshold=_MAX_BACKOFF_MS,
        max_server_retry_delay=_MAX_BACKOFF_MS,
    )


def _connect_session(spark: str, conf: Mapping[str, str], retry_s: float) -> SparkSession:
    """A Spark Connect session with bounded retries, its packages uploaded and ``conf`` applied."""
    # ``create()``, not ``getOrCreate()``: a new session (a stopped one may still be the active
    # session of another thread), and no call to the server before the retry policy is set
    session: Any = SparkSession.builder.remote(spark).create()
    # pyspark registers an exit handler per client that calls the server (an ML cache clean-up,
    # with the client's retries) unless the client was closed: with the server gone the process
    # could not exit for minutes. hoodied closes its sessions itself (``_stop``, bounded)
    atexit.unregister(session.client._on_exit)
    try:
        session.client.set_retry_policies([_retry_policy(retry_s)])
        tmp = Path(tempfile.mkdtemp(prefix="hoodied-artifacts-"))
        try:
            session.addArtifacts(str(_package_zip(tmp)), pyfile=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for key, value in conf.items():
            try:
                session.conf.set(key, value)
            except Exception as exc:
                if is_engine_lost(exc):
                    raise
                # as the builder's options: a setting the server refuses (a static one) is skipped
                log.warning("Spark Connect %s: setting %s not applied: %s", mask_secrets(spark), key,
                            _one_line(exc))
    except BaseException:
        _stop_now(session, lost=True)
        raise
    started: SparkSession = session
    return started


def _local_session(master: str, conf: Mapping[str, str], start_timeout_s: float) -> SparkSession:
    """A local session; its JVM's start is bounded by ``start_timeout_s``.

    pyspark waits without limit for the JVM it launches to report its gateway port: that launch
    runs in a daemon thread (``SparkContext._ensure_initialized``, with every setting, which
    ``spark-submit`` needs at launch: the driver's memory...). The session itself is then created
    in the calling thread, because pyspark's active session is per thread.
    """
    from pyspark import SparkConf, SparkContext

    _local_environment()
    settings = {"spark.master": master, "spark.app.name": "hoodied", **LOCAL_DEFAULTS, **conf}
    launch_conf = SparkConf().setAll(list(settings.items()))
    _bounded(lambda: SparkContext._ensure_initialized(conf=launch_conf), start_timeout_s,
             f"local Spark {master}: JVM start")
    builder = SparkSession.builder.master(master).appName("hoodied")
    for key, value in {**LOCAL_DEFAULTS, **conf}.items():
        builder = builder.config(key, value)
    session: SparkSession = builder.getOrCreate()
    return session


def _is_connect(session: Any) -> bool:
    return type(session).__module__.startswith("pyspark.sql.connect")


def mark_lost(session: Any) -> None:
    """The engine of ``session`` is gone: its calls stop retrying, its stop skips the release call."""
    _LOST.add(id(session))
    if _is_connect(session):
        try:
            session.release_session_on_close = False
            # the policy objects are shared with the retry loops under way (a job's reattach, the
            # release threads): none of them waits for another try
            for policy in session.client.get_retry_policies():
                policy.max_retries = 0
        except Exception as exc:  # a pyspark without these attributes: the stop is bounded anyway
            log.debug("Spark Connect session: retries not switched off: %s", exc)


def _stop_now(session: Any, *, lost: bool) -> None:
    if lost:
        mark_lost(session)
    try:
        session.stop()
    except Exception as exc:
        log.warning("Spark session not stopped cleanly: %s", _one_line(exc))
    finally:
        if lost and not _is_connect(session):
            _forget_dead_jvm()
        _LOST.discard(id(session))


def _forget_dead_jvm() -> None:
    """After the local JVM died: pyspark's cached gateway goes, so the next session starts a new JVM."""
    from pyspark import SparkContext

    for owner, name in ((SparkContext, "_gateway"), (SparkContext, "_jvm"),
                        (SparkContext, "_active_spark_context"), (SparkSession, "_instantiatedSession"),
                        (SparkSession, "_activeSession")):
        if hasattr(owner, name):
            setattr(owner, name, None)


def _stop(session: Any, address: str) -> None:
    """Stop ``session``, waiting at most ``STOP_TIMEOUT_S`` (a lost engine is not called at all)."""
    lost = id(session) in _LOST
    try:
        _bounded(lambda: _stop_now(session, lost=lost), STOP_TIMEOUT_S, f"stopping Spark {address}")
    except EngineUnavailableError as exc:
        mark_lost(session)
        log.warning("%s: the session is left to the engine", exc)
    finally:
        _LOST.discard(id(session))
        _ADDRESSES.pop(id(session), None)


@contextmanager
def spark_session(
    spark: str = LOCAL,
    conf: Mapping[str, str] | None = None,
    *,
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    retry_s: float = DEFAULT_RETRY_S,
) -> Iterator[SparkSession]:
    """A session for ``spark`` (``local``, ``local[N]`` or ``sc://HOST:PORT``), stopped at the end.

    The local session is created here and stopped on exit, unless this process has an
    active session already: that one is used as it is and left running. A Spark Connect
    session is closed on exit (the server keeps running). An engine that cannot be reached or
    started within ``start_timeout_s`` raises ``EngineUnavailableError`` (the module docstring);
    the Connect client retries a call for about ``retry_s`` seconds.
    """
    conf = dict(conf or {})
    # pyspark marks the process as a Connect client in the environment and leaves the mark after
    # the session stops: a later local session (and every child process) would then refuse to start
    leaked_mode = _CONNECT_MODE not in os.environ
    shown = mask_secrets(spark)  # a Connect URL may carry ;token=: never in a message or a log line
    if spark.startswith("sc://"):
        try:
            problem = connect_problem(spark, min(_PROBE_TIMEOUT_S, start_timeout_s))
        except ValueError as exc:
            raise ValueError(f"--spark {shown!r}: {exc}") from None
        if problem is not None:
            raise EngineUnavailableError(f"Spark Connect {shown} unreachable: {problem}")
        started = time.monotonic()
        try:
            session = _bounded(lambda: _connect_session(spark, conf, retry_s), start_timeout_s,
                               f"Spark Connect {shown}: session start",
                               late=lambda s: _stop_now(s, lost=True))
        except Exception as exc:
            if leaked_mode:
                os.environ.pop(_CONNECT_MODE, None)
            if not isinstance(exc, HoodieServiceError) and is_engine_lost(exc):
                raise engine_error(exc, shown) from exc
            raise
        log.info("Spark Connect session on %s (started in %.1f s)", shown, time.monotonic() - started)
    elif spark == LOCAL or spark.startswith("local["):
        active = SparkSession.getActiveSession()
        if active is not None:  # this process runs Spark already (tests, an embedding application)
            log.info("using the active Spark session (Spark %s)", active.version)
            yield active
            return
        master = "local[*]" if spark == LOCAL else spark
        try:
            session = _local_session(master, conf, start_timeout_s)
        except HoodieServiceError:
            raise
        except Exception as exc:
            raise engine_error(exc, master) from exc
        log.info("local Spark session %s (Spark %s)", master, session.version)
    else:
        raise ValueError(f"--spark {shown!r}: expected 'local', 'local[N]' or sc://HOST:PORT")
    _ADDRESSES[id(session)] = shown
    try:
        yield session
    finally:
        _stop(session, spark)
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
                try:
                    out = self.task(int(index), token)
                except OSError as exc:
                    if exc.errno in OUTAGE_ERRNOS:  # a full or read-only disk: an outage, as in the driver
                        raise StorageError(f"operation {index}: {exc}") from exc
                    raise
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
    if description:
        log.info("Spark job: %s (%d operations)", description, count)
    try:
        frame: Any = session.range(0, count, 1, numPartitions=count)
        with _progress_reporting(session, count, progress):
            result = frame.mapInArrow(_PartitionRunner(task, schema), spark_ddl(schema)).toArrow()
    except HoodieServiceError:
        raise
    except Exception as exc:  # pyspark's errors carry the worker's traceback as text
        lost = lost_error(exc, session)
        if lost is not None:
            # the server or the JVM is gone, not the job: the attempt stays as it is (inflight),
            # rolled back before its retry once the engine is back
            mark_lost(session)
            raise lost from exc
        raise task_error(exc, description) from exc
    if progress is not None:
        progress(count, count)
    return result.select(schema.names).cast(schema)


@dataclass(frozen=True)
class SparkOperations:
    """``hoodie.tasks.OperationRunner`` on ``session``: the format library's per-operation work
    (the operations of a metadata-table compaction, one per MDT file group) as one Spark job of
    ``run_operations``, one task per operation, in parallel across the session's cores."""

    session: SparkSession

    def __call__(self, count: int, task: OperationTask, schema: pa.Schema, *,
                 description: str = "") -> pa.Table:
        return run_operations(self.session, count, task, schema, description=description)


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

"""The daemon's Prometheus metrics (prefix ``hoodied_``), in a registry of its own.

Labels are ``table`` (the table's base path), ``action`` (timeline action of the job:
``clean``, ``compaction``..., or ``archival``, which has none) and ``outcome``; never instant
times, file ids or free text. Events (jobs, plans, lock waits, poll cycles) are counters and
histograms updated as they happen; state (pending instants, quarantine, ...) is read from the
daemon at scrape time by ``StateCollector``, so a table that is no longer watched disappears from
the page at once.

=================================================  =========  ==================================
name                                               type       labels
=================================================  =========  ==================================
hoodied_build_info                                 gauge      version, python
hoodied_tables_watched                             gauge
hoodied_tables_quarantined                         gauge
hoodied_table_quarantined                          gauge      table (1 while quarantined)
hoodied_table_paused                               gauge      table (1 while paused)
hoodied_pending_instants                           gauge      table, action
hoodied_oldest_pending_instant_age_seconds         gauge      table, action
hoodied_delta_commits_since_last_compaction        gauge      table (merge-on-read tables)
hoodied_last_success_timestamp_seconds             gauge      table, action
hoodied_running_jobs                               gauge      action
hoodied_draining                                   gauge      (1 after SIGTERM)
hoodied_engine_up                                  gauge      (0 while the Spark engine is down)
hoodied_last_poll_timestamp_seconds                gauge
hoodied_clock_offset_seconds                       gauge      (absent while unknown)
hoodied_clock_offset_uncertainty_seconds           gauge      (absent while unknown)
hoodied_clock_skewed                               gauge      (1 while the clock is past the bound)
hoodied_jobs_total                                 counter    table, action, outcome
hoodied_plans_total                                counter    table, action, outcome
hoodied_job_duration_seconds                       histogram  action, outcome
hoodied_lock_wait_seconds                          histogram  action
hoodied_poll_cycle_duration_seconds                histogram
hoodied_storage_requests_total                     counter    operation
hoodied_failed_writes_rolled_back_total            counter    table
hoodied_instants_archived_total                    counter    table
=================================================  =========  ==================================

``hoodied_storage_requests_total`` counts the requests this process sent to object stores
(``operation``: ``list``, ``get``, ``head``, ``put``, ``delete``; see
``hoodie.storage.RequestCounter``), polls and jobs alike; local tables send none. An unchanged
object-store table costs one ``list`` per poll cycle (``service.daemon.poll``), so
``rate(hoodied_storage_requests_total{operation="list"}[5m])`` against the poll interval
and the tables watched shows whether polling stays cheap. Without Redis, the clock check
(``service.daemon.clock``) adds one ``put`` and one ``list`` per poll cycle for the whole daemon.

Job outcomes: ``success``, ``failed`` (retried later), ``skipped`` (another executor's heartbeat
is alive), ``claimed`` (another replica holds the instant's lease, or took the instant over from
this attempt while it was paused: superseded, whatever its error; not a failure), ``already_done``
(completed by another executor since the poll, found before the executor ran or by the executor
under the table lock: nothing done, not a success), ``unsupported`` (left
untouched), ``corrupt`` (table quarantined), ``handed_back`` (daemon stopping, or its clock out of
bounds right before a time was taken: nothing written),
``lock_unavailable`` (the table lock or the lease could not be had or kept; retried, never a
quarantine), ``storage_unavailable`` (the storage failed: throttled, unreachable, denied, full or
read-only; retried, never a quarantine), ``engine_unavailable`` (the Spark engine could not be
reached or was lost mid-job; retried, never a quarantine). Plan outcomes: ``planned``, ``nothing_due``,
``failed``, ``unsupported``, ``corrupt``, ``lock_unavailable``, ``storage_unavailable``. After
its first poll, a table that is not paused has its job counters of ``success``, ``failed`` and
``corrupt`` and its plan counters of ``planned`` and ``failed`` at 0 for each service its policy
runs (``Metrics.track_table``), so ``increase()`` sees its first outcome; the other outcomes appear
when they first happen. A job whose process died right after its instant's completed file never
counts its ``success``: the replica whose poll then removes the instant's leftovers counts it
(``service.daemon.poll``).

``hoodied_table_quarantined`` and ``hoodied_table_paused`` are 0 or 1 for every watched table, so a
table that turns 1 shows as a change. A quarantine or a pause is shared by every replica
(``service.table_controls``), so each replica reports it: aggregate with ``max by (table)``. A table
is paused by its policy (``paused: true``) or by ``hoodied table pause`` / the HTTP API.

``hoodied_failed_writes_rolled_back_total`` counts the failed data writes rolled back before a
clean was planned or executed, on tables whose writers use ``hoodie.cleaner.policy.failed.writes=LAZY``
(``service.failed_writes``); it starts at 0 with the table's other counters.

Archival (``TableService.ARCHIVAL``) writes no instant: its one job is a plan job that archives, counted
in ``hoodied_plans_total{action="archival"}`` as ``success`` (instants moved), ``nothing_due`` (a boundary
stopped it: the reason is in ``/status``) or a failure outcome; ``success`` and ``failed`` start at 0 on
tables whose policy runs it. ``hoodied_instants_archived_total`` counts the instants its jobs moved
from the active timelines into the history, the metadata table's included; it starts at 0 with the
table's other counters.

``hoodied_engine_up`` is 0 while the Spark engine is known to be down (the last session start or
job found it unreachable or lost; ``/readyz`` answers 503 meanwhile), else 1, also before any
Spark job started a session.

``hoodied_clock_offset_seconds`` is this host's wall clock minus the shared reference's (Redis
``TIME``, else an object store's last-modified time; ``service.daemon.clock``) at the last check,
and ``hoodied_clock_offset_uncertainty_seconds`` how far the true offset may be from it (half the
round trip plus the reference's resolution). Both are absent while the offset is unknown: no
shared reference (local tables without Redis) or no check has succeeded yet.
``hoodied_clock_skewed`` is 1 while the offset is past ``clock_skew_ms`` even allowing for the
uncertainty: the replica then dispatches no job and ``/readyz`` answers 503.
"""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "Metrics", "StateSnapshot", "TableCounter", "TableSnapshot"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_JOB_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600)
_LOCK_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_POLL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass(slots=True)
class TableSnapshot:
    path: str
    quarantined: bool
    paused: bool = False
    """Paused by its policy or by a person (``hoodied table pause``)."""
    pending: dict[str, tuple[int, float]] = field(default_factory=dict)
    """action -> (pending instants, age of the oldest in seconds)."""
    delta_commits_since_compaction: int | None = None
    last_success: dict[str, float] = field(default_factory=dict)
    """action -> epoch seconds of the last successful job."""


@dataclass(slots=True)
class StateSnapshot:
    tables: list[TableSnapshot]
    running: dict[str, int]
    draining: bool
    last_poll: float | None
    storage_requests: dict[str, int] = field(default_factory=dict)
    """Object-store requests sent by this process so far, by operation."""
    engine_down: bool = False
    """The Spark engine is known to be unavailable (``service.spark_jobs.SparkEngine.up`` is False)."""
    clock_offset: tuple[float, float] | None = None
    """This host's clock minus the shared reference's and its uncertainty, in seconds (``None``: unknown)."""
    clock_skewed: bool = False
    """The clock is past the skew bound (``service.daemon.clock.ClockState.SKEWED``)."""


def _version() -> str:
    try:
        return metadata.version("hoodied")
    except metadata.PackageNotFoundError:
        return "unknown"


class StateCollector(Collector):
    """Gauges computed from the daemon's state when Prometheus scrapes."""

    def __init__(self, snapshot: Callable[[], StateSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        build = GaugeMetricFamily("hoodied_build_info", "Build of the running daemon (always 1).",
                                  labels=["version", "python"])
        build.add_metric([_version(), platform.python_version()], 1)
        yield build
        yield GaugeMetricFamily("hoodied_tables_watched", "Tables the daemon watches.", value=len(s.tables))
        yield GaugeMetricFamily("hoodied_tables_quarantined", "Tables quarantined (left untouched).",
                                value=sum(1 for t in s.tables if t.quarantined))
        quarantined = GaugeMetricFamily(
            "hoodied_table_quarantined", "1 while the table is quarantined (see /status).", labels=["table"]
        )
        pending = GaugeMetricFamily("hoodied_pending_instants", "Pending table-service instants.",
                                    labels=["table", "action"])
        age = GaugeMetricFamily("hoodied_oldest_pending_instant_age_seconds",
                                "Age of the oldest pending instant, from its requested time.",
                                labels=["table", "action"])
        deltas = GaugeMetricFamily("hoodied_delta_commits_since_last_compaction",
                                   "Completed delta commits after the last completed compaction.",
                                   labels=["table"])
        success = GaugeMetricFamily("hoodied_last_success_timestamp_seconds",
                                    "When a job of this action last succeeded on the table (epoch seconds).",
                                    labels=["table", "action"])
        paused = GaugeMetricFamily(
            "hoodied_table_paused", "1 while the table is paused: polled, never planned or executed.",
            labels=["table"],
        )
        for t in s.tables:
            quarantined.add_metric([t.path], 1 if t.quarantined else 0)
            paused.add_metric([t.path], 1 if t.paused else 0)
            for action, (count, oldest) in sorted(t.pending.items()):
                pending.add_metric([t.path, action], count)
                age.add_metric([t.path, action], oldest)
            if t.delta_commits_since_compaction is not None:
                deltas.add_metric([t.path], t.delta_commits_since_compaction)
            for action, when in sorted(t.last_success.items()):
                success.add_metric([t.path, action], when)
        yield from (quarantined, paused, pending, age, deltas, success)
        running = GaugeMetricFamily("hoodied_running_jobs", "Jobs running now.", labels=["action"])
        for action, n in sorted(s.running.items()):
            running.add_metric([action], n)
        yield running
        yield GaugeMetricFamily("hoodied_draining", "1 once the daemon stops taking work.",
                                value=1 if s.draining else 0)
        yield GaugeMetricFamily("hoodied_engine_up",
                                "0 while the Spark engine is unreachable or lost (see /readyz), else 1.",
                                value=0 if s.engine_down else 1)
        if s.clock_offset is not None:
            yield GaugeMetricFamily("hoodied_clock_offset_seconds",
                                    "This host's wall clock minus the shared reference clock (Redis or the "
                                    "object store) at the last check.", value=s.clock_offset[0])
            yield GaugeMetricFamily("hoodied_clock_offset_uncertainty_seconds",
                                    "How far the true clock offset may be from the measured one.",
                                    value=s.clock_offset[1])
        yield GaugeMetricFamily("hoodied_clock_skewed",
                                "1 while the clock is past clock_skew_ms: no job is dispatched.",
                                value=1 if s.clock_skewed else 0)
        if s.last_poll is not None:
            yield GaugeMetricFamily("hoodied_last_poll_timestamp_seconds",
                                    "When the last poll cycle ended (epoch seconds).", value=s.last_poll)
        # a counter kept by the storage layer and read here (prometheus_client adds ``_total``)
        requests = CounterMetricFamily("hoodied_storage_requests",
                                       "Requests sent to object stores (polls and jobs), by operation.",
                                       labels=["operation"])
        for operation, n in sorted(s.storage_requests.items()):
            requests.add_metric([operation], n)
        yield requests


class _Increment:
    """One series of a ``TableCounter`` (``labels()``): ``inc`` adds to it."""

    __slots__ = ("_counter", "_key")

    def __init__(self, counter: TableCounter, key: tuple[str, ...]) -> None:
        self._counter, self._key = counter, key

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        self._counter._add(self._key, amount)


class TableCounter(Collector):
    """A counter whose first label is ``table``, whose tracked tables' series exist from 0 without
    an object per series: ``track`` stores the table's (other label values) list, shared by every
    table of the same services, and ``collect`` reports each such series at 0 until it counts.

    Why not ``prometheus_client.Counter``: a child per series (21 per table, made at each table's
    first poll) cost about 0.27 ms and 1 KB each per table (bench/poll.py); the page is the same:
    ``<name>_total`` and ``<name>_created`` per series."""

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...],
                 registry: CollectorRegistry) -> None:
        self._name, self._documentation, self._labelnames = name, documentation, labelnames
        self._values: dict[tuple[str, ...], float] = {}
        self._created: dict[tuple[str, ...], float] = {}
        self._tracked: dict[str, tuple[tuple[tuple[str, ...], ...], float]] = {}
        """table -> (the other label values of its series that start at 0, when it was tracked)."""
        self._shapes: dict[tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def labels(self, *values: str) -> _Increment:
        if len(values) != len(self._labelnames):
            raise ValueError(f"{self._name}: {len(self._labelnames)} label values expected")
        return _Increment(self, tuple(str(v) for v in values))

    def _add(self, key: tuple[str, ...], amount: float) -> None:
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount
            if key not in self._created:
                tracked = self._tracked.get(key[0])
                zero = tracked is not None and key[1:] in tracked[0]
                self._created[key] = tracked[1] if tracked is not None and zero else time.time()

    def track(self, table: str, rests: Iterable[tuple[str, ...]]) -> None:
        """``table``'s series with these other label values at 0 from now on (counting ones go on)."""
        shape = tuple(rests)
        with self._lock:
            shape = self._shapes.setdefault(shape, shape)  # one tuple per distinct set of services
            self._tracked[table] = (shape, time.time())

    def remove(self, *values: str) -> None:
        key = tuple(values)
        with self._lock:
            self._values.pop(key, None)
            self._created.pop(key, None)

    def forget(self, table: str) -> None:
        """Every series of ``table`` gone from the page."""
        with self._lock:
            self._tracked.pop(table, None)
            for key in [k for k in self._values if k[0] == table]:
                del self._values[key]
                self._created.pop(key, None)

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            values, created, tracked = dict(self._values), dict(self._created), list(self._tracked.items())
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)
        for table, (rests, since) in tracked:
            for rest in rests:
                key = (table, *rest)
                family.add_metric(key, values.pop(key, 0.0), created.get(key, since))
        for key, value in values.items():
            family.add_metric(key, value, created.get(key))
        yield family


class Metrics:
    """The registry and the event metrics; ``render()`` is the ``/metrics`` page."""

    def __init__(self, snapshot: Callable[[], StateSnapshot]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.jobs = TableCounter("hoodied_jobs", "Jobs that executed a pending instant, by outcome.",
                                 ("table", "action", "outcome"), self.registry)
        self.plans = TableCounter("hoodied_plans", "Planning attempts, by outcome.",
                                  ("table", "action", "outcome"), self.registry)
        self.job_duration = Histogram("hoodied_job_duration_seconds", "Wall time of one job.",
                                      ["action", "outcome"], buckets=_JOB_BUCKETS, registry=self.registry)
        self.lock_wait = Histogram("hoodied_lock_wait_seconds", "Time spent waiting for a table lock.",
                                   ["action"], buckets=_LOCK_BUCKETS, registry=self.registry)
        self.failed_writes = TableCounter("hoodied_failed_writes_rolled_back",
                                          "Failed data writes rolled back before a clean (LAZY tables).",
                                          ("table",), self.registry)
        self.instants_archived = TableCounter(
            "hoodied_instants_archived", "Instants archived from the table's active timelines (MDT's too).",
            ("table",), self.registry,
        )
        self.poll_cycle = Histogram("hoodied_poll_cycle_duration_seconds",
                                    "Wall time of one poll cycle over every watched table.",
                                    buckets=_POLL_BUCKETS, registry=self.registry)
        self.registry.register(StateCollector(snapshot))

    def track_table(
        self, table: str, jobs: Mapping[str, Iterable[str]], plans: Mapping[str, Iterable[str]]
    ) -> None:
        """Start ``table``'s job and plan counters at 0 (action -> outcomes), before any job ends.

        A counter that appears at 1 hides its first increment from ``increase()`` and ``rate()``,
        so a table's first failure or success would not show on the dashboard or in the alerts.
        """
        for counter, outcomes in ((self.jobs, jobs), (self.plans, plans)):
            counter.track(table, [(action, o) for action, names in outcomes.items() for o in names])
        self.failed_writes.track(table, _NO_OTHER_LABELS)
        self.instants_archived.track(table, _NO_OTHER_LABELS)

    def forget_table(self, table: str) -> None:
        """Drop every counter series of a table the daemon no longer watches."""
        for counter in (self.jobs, self.plans, self.failed_writes, self.instants_archived):
            counter.forget(table)

    def render(self) -> bytes:
        return generate_latest(self.registry)


#: The one series of a counter labelled by ``table`` alone.
_NO_OTHER_LABELS: tuple[tuple[str, ...], ...] = ((),)

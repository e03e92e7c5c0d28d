"""The daemon's Prometheus metrics (prefix ``hoodied_``), in a registry of its own.

Labels are ``table`` (the table's base path), ``action`` (timeline action of the job:
``clean``, ``compaction``...) and ``outcome``; never instant times, file ids or free text.
Events (jobs, plans, lock waits, poll cycles) are counters and histograms updated as they
happen; state (pending instants, quarantine, ...) is read from the daemon at scrape time by
``StateCollector``, so a table that is no longer watched disappears from the page at once.

=================================================  =========  ==================================
name                                               type       labels
=================================================  =========  ==================================
hoodied_build_info                                 gauge      version, python
hoodied_tables_watched                             gauge
hoodied_tables_quarantined                         gauge
hoodied_table_quarantined                          gauge      table (1 while quarantined)
hoodied_pending_instants                           gauge      table, action
hoodied_oldest_pending_instant_age_seconds         gauge      table, action
hoodied_delta_commits_since_last_compaction        gauge      table (merge-on-read tables)
hoodied_last_success_timestamp_seconds             gauge      table, action
hoodied_running_jobs                               gauge      action
hoodied_draining                                   gauge      (1 after SIGTERM)
hoodied_last_poll_timestamp_seconds                gauge
hoodied_jobs_total                                 counter    table, action, outcome
hoodied_plans_total                                counter    table, action, outcome
hoodied_job_duration_seconds                       histogram  action, outcome
hoodied_lock_wait_seconds                          histogram  action
hoodied_poll_cycle_duration_seconds                histogram
=================================================  =========  ==================================

Job outcomes: ``success``, ``failed`` (retried later), ``skipped`` (another executor's heartbeat
is alive), ``claimed`` (another replica holds the instant's lease), ``already_done``
(completed by another executor since the poll), ``unsupported`` (left
untouched), ``corrupt`` (table quarantined), ``handed_back`` (daemon stopping),
``lock_unavailable`` (the table lock or the lease could not be had or kept; retried, never a
quarantine). Plan outcomes: ``planned``, ``nothing_due``, ``failed``, ``unsupported``,
``corrupt``, ``lock_unavailable``.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "Metrics", "StateSnapshot", "TableSnapshot"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_JOB_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600)
_LOCK_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_POLL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass(slots=True)
class TableSnapshot:
    path: str
    quarantined: bool
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
        for t in s.tables:
            quarantined.add_metric([t.path], 1 if t.quarantined else 0)
            for action, (count, oldest) in sorted(t.pending.items()):
                pending.add_metric([t.path, action], count)
                age.add_metric([t.path, action], oldest)
            if t.delta_commits_since_compaction is not None:
                deltas.add_metric([t.path], t.delta_commits_since_compaction)
            for action, when in sorted(t.last_success.items()):
                success.add_metric([t.path, action], when)
        yield from (quarantined, pending, age, deltas, success)
        running = GaugeMetricFamily("hoodied_running_jobs", "Jobs running now.", labels=["action"])
        for action, n in sorted(s.running.items()):
            running.add_metric([action], n)
        yield running
        yield GaugeMetricFamily("hoodied_draining", "1 once the daemon stops taking work.",
                                value=1 if s.draining else 0)
        if s.last_poll is not None:
            yield GaugeMetricFamily("hoodied_last_poll_timestamp_seconds",
                                    "When the last poll cycle ended (epoch seconds).", value=s.last_poll)


class Metrics:
    """The registry and the event metrics; ``render()`` is the ``/metrics`` page."""

    def __init__(self, snapshot: Callable[[], StateSnapshot]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.jobs = Counter("hoodied_jobs", "Jobs that executed a pending instant, by outcome.",
                            ["table", "action", "outcome"], registry=self.registry)
        self.plans = Counter("hoodied_plans", "Planning attempts, by outcome.",
                             ["table", "action", "outcome"], registry=self.registry)
        self.job_duration = Histogram("hoodied_job_duration_seconds", "Wall time of one job.",
                                      ["action", "outcome"], buckets=_JOB_BUCKETS, registry=self.registry)
        self.lock_wait = Histogram("hoodied_lock_wait_seconds", "Time spent waiting for a table lock.",
                                   ["action"], buckets=_LOCK_BUCKETS, registry=self.registry)
        self.poll_cycle = Histogram("hoodied_poll_cycle_duration_seconds",
                                    "Wall time of one poll cycle over every watched table.",
                                    buckets=_POLL_BUCKETS, registry=self.registry)
        self.registry.register(StateCollector(snapshot))

    def render(self) -> bytes:
        return generate_latest(self.registry)

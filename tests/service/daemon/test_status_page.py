"""The status page (``/``): the renderer on its own, then a real daemon's page in a real Chromium.

The renderer tests feed ``render_page`` documents shaped as ``/status`` serves them and read the
page back through ``html.parser``: what text each section holds and which elements exist, so an
unescaped string shows up as an element the page never makes. The browser test runs a real
``hoodied run`` (real Redis, fresh copies of the fixtures: a clean to finish, one held mid-job,
two corrupt tables, an indexing left waiting, a paused table), loads ``/`` in Debian's headless
Chromium, checks the rendered DOM and saves it (``status-page.html``) and a screenshot
(``status-page.png``) under
``HOODIED_TEST_ARTIFACTS`` when set, else the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.service.daemon.page import MAX_REFRESH_S, MIN_REFRESH_S, refresh_seconds, render_page
from tests.helpers.daemon_procs import get, running, stop, wait_for
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.redis_server import RedisServer, free_port, redis_server  # noqa: F401  (fixture)

NOW = 1_764_000_000.0
#: Every element the page is made of: any other one came from an unescaped string.
PAGE_TAGS = frozenset({
    "html", "head", "meta", "title", "style", "body", "header", "h1", "span", "nav", "a", "main", "dl",
    "div", "dt", "dd", "section", "h2", "table", "thead", "tbody", "tr", "th", "td", "p", "code", "b",
    "time", "br", "footer",
})
#: Elements whose text reads as separate words from their neighbours'.
_BLOCKS = frozenset({
    "td", "th", "tr", "dt", "dd", "div", "p", "section", "h1", "h2", "br", "header", "footer",
})


class _Page(HTMLParser):
    """The elements of a page and the text of each element that has an ``id``."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.text: dict[str, str] = {}
        self.all_text: list[str] = []
        self.meta: list[dict[str, str | None]] = []
        self.links: list[str] = []
        self._open: list[tuple[str, str | None]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag in _BLOCKS:
            self.handle_data(" ")
        found = dict(attrs)
        if tag == "meta":
            self.meta.append(found)
        if tag == "a" and found.get("href"):
            self.links.append(str(found["href"]))
        if tag not in ("meta", "br"):  # void elements never close
            self._open.append((tag, found.get("id")))
            if found.get("id"):
                self.text[str(found["id"])] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag in _BLOCKS:
            self.handle_data(" ")
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if any(t == "style" for t, _ in self._open):
            return
        self.all_text.append(data)
        for _, ident in self._open:
            if ident:
                self.text[ident] += data

    @property
    def words(self) -> str:
        return " ".join("".join(self.all_text).split())

    def section(self, ident: str) -> str:
        return " ".join(self.text[ident].split())


def _doc(tables: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    """A ``/status`` document as the daemon serves it (``status_document``, through JSON)."""
    doc: dict[str, Any] = {
        "replica": "hoodied-0", "started_at": NOW - 3 * 3600, "draining": False, "stop_reason": None,
        "once": False, "lock": "local", "workers": {"limit": 4, "busy": 0},
        "engine": {"master": "local[2]", "up": None, "problem": None},
        "clock": {"state": "unknown", "source": "local tables only", "summary": "clock offset unknown",
                  "offset_seconds": None, "uncertainty_seconds": None, "round_trip_seconds": None,
                  "bound_seconds": 0.2, "error": None, "checked_seconds_ago": 1.5, "takes_work": True},
        "last_poll": {"ended_at": NOW - 4, "seconds": 0.031, "age_seconds": 4.0,
                      "storage_requests": {"list": 3}},
        "tables_watched": len(tables), "tables_quarantined": sum(1 for t in tables if t.get("quarantined")),
        "tables": tables, "recent_errors": [],
    }
    doc.update(top)
    return json.loads(json.dumps(doc))


def _table(path: str, **values: Any) -> dict[str, Any]:
    table: dict[str, Any] = {
        "path": path, "source": "config", "name": "trips", "type": "COPY_ON_WRITE", "version": 9,
        "paused": False, "priority": 0, "quarantined": None, "quarantined_at": None, "poll_failures": 0,
        "pending": [], "running": None, "due": {}, "planning": {}, "last_outcomes": [],
        "failed_writes_rolled_back": 0, "delta_commits_since_compaction": None,
    }
    table.update(values)
    return table


def _pending(instant: str, action: str, age: float, status: str = "ready", note: str = "") -> dict[str, Any]:
    return {"instant": instant, "action": action, "state": "requested", "age_seconds": age, "status": status,
            "note": note, "failures": 0}


# ---------------------------------------------------------------------------- the renderer


def test_every_string_of_the_document_is_escaped() -> None:
    evil = "<script>alert(1)</script>"
    reason = "cannot read the table: <img src=x onerror=alert(1)> & 'quotes' \"too\""
    table = _table(
        f"/lake/{evil}", name="<b>trips</b>", quarantined=reason, quarantined_at=NOW - 60,
        pending=[_pending("20250101000000000", "clean", 30, "waiting", "<i>left</i> untouched")],
        planning={"compaction": "<u>nothing due</u>"},
        last_outcomes=[{"at": NOW - 5, "kind": "execute", "action": "clean", "instant": "20250101000000000",
                        "outcome": "failed", "message": "</td></tr></table><h1>broken</h1>", "seconds": 1.5}],
    )
    html = render_page(_doc([table], replica="<em>r</em>", lock="redis://<host>:6379/0",
                            recent_errors=[{"at": NOW - 2, "table": evil, "error": "<marquee>x</marquee>"}]),
                       now=NOW)
    page = _Page(html)
    assert page.tags <= PAGE_TAGS, page.tags - PAGE_TAGS
    for text in (evil, "<b>trips</b>", reason, "<i>left</i> untouched", "<u>nothing due</u>", "<em>r</em>",
                 "</td></tr></table><h1>broken</h1>", "redis://<host>:6379/0", "<marquee>x</marquee>"):
        assert text in page.words, text
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_ages_and_durations_read_as_people_say_them() -> None:
    table = _table(
        "/lake/trips",
        pending=[_pending("20250101000000000", "compaction", 3 * 3600 + 12 * 60 + 7),
                 _pending("20200101000000000", "indexing", 29_344_387, "waiting", "no metadata table")],
        running={"action": "clean", "instant": "20250102000000000", "kind": "execute", "seconds": 75.2},
        last_outcomes=[{"at": NOW - 42, "kind": "plan", "action": "clean", "instant": None,
                        "outcome": "planned", "message": "clean requested", "seconds": 0.37}],
    )
    page = _Page(render_page(_doc([table]), now=NOW))
    pending = page.section("pending")
    assert "3 h 12 min" in pending and "339 d" in pending, pending
    assert "11527" not in page.words and "29344387" not in page.words
    assert "1 min 15 s" in page.section("running")
    assert "42 s ago" in page.section("history") and "0.4 s" in page.section("history")
    assert "up 3 h" in page.words and "last cycle ended 4.0 s ago" in page.section("health")


def test_each_quarantine_reason_is_shown_once() -> None:
    reason = "clean 20991231235959000: 20991231235959000.clean.requested: not an Avro file"
    pending = [_pending(f"2099123123595{i}000", "clean", 10, "quarantined", reason) for i in range(4)]
    errors = [{"at": NOW - i, "table": "/lake/bad", "error": "poll failed: permission denied"}
              for i in range(3)]
    tables = [_table("/lake/bad", quarantined=reason, quarantined_at=NOW - 7200, pending=pending),
              _table("/lake/good")]
    page = _Page(render_page(_doc(tables, recent_errors=errors), now=NOW))
    assert page.words.count(reason) == 1, page.words
    assert reason in page.section("quarantines") and "2 h ago" in page.section("quarantines")
    assert page.section("pending").count("quarantined") == 4
    errors_text = page.section("errors")
    assert errors_text.count("poll failed: permission denied") == 1 and "3×" in errors_text
    summary = page.section("summary")
    assert "Tables watched 2" in summary and "Quarantined 1" in summary and "Pending instants 4" in summary


def test_an_empty_fleet_still_has_its_summary_health_and_links() -> None:
    html = render_page(_doc([]), now=NOW, refresh=7)
    page = _Page(html)
    assert page.tags <= PAGE_TAGS
    summary = page.section("summary")
    for tile in ("Tables watched 0", "Pending instants 0", "Running jobs 0", "Quarantined 0", "Paused 0"):
        assert tile in summary, summary
    assert "No table is watched." in page.section("tables")
    assert "No table is quarantined." in page.section("quarantines")
    assert "No job has finished yet." in page.section("history")
    assert set(page.links) == {"/status", "/metrics", "/healthz", "/readyz"}
    assert {"http-equiv": "refresh", "content": "7"} in page.meta
    assert {"charset": "utf-8"} in page.meta
    health = page.section("health")
    assert "Lock service local" in health and "Spark engine not started local[2]" in health
    assert "Clock unknown" in health


def test_lock_service_engine_and_clock_health_come_from_the_document() -> None:
    redis_ok = {"state": "in_bounds", "source": "redis TIME at 10.0.0.5:6379/0",
                "summary": "clock offset +0.001 s", "round_trip_seconds": 0.0004, "checked_seconds_ago": 2.0,
                "error": None, "takes_work": True}
    outage = [{"at": NOW - 9, "kind": "execute", "action": "clean", "instant": "20250101000000000",
               "outcome": "lock_unavailable", "message": "lock service unreachable", "seconds": 0.1}]
    up = _Page(render_page(_doc([_table("/lake/a", last_outcomes=outage)], lock="10.0.0.5:6379/0",
                                clock=redis_ok, engine={"master": "sc://spark:15002", "up": True}), now=NOW))
    health = up.section("health")
    assert "Lock service (Redis) answering 10.0.0.5:6379/0: TIME answered 2.0 s ago in 0.4 ms" in health
    assert "1 recent job(s) ended lock_unavailable" in health and "Spark engine up sc://spark:15002" in health
    down_clock = {**redis_ok, "state": "unchecked", "round_trip_seconds": None, "error": "Connection refused",
                  "summary": "clock not checked against redis", "takes_work": False}
    engine_down = {"master": "sc://spark:15002", "up": False, "problem": "connect refused"}
    down = _Page(render_page(_doc([], lock="10.0.0.5:6379/0", clock=down_clock, engine=engine_down,
                                  draining=True, stop_reason="received SIGTERM"), now=NOW))
    health = down.section("health")
    assert "Lock service (Redis) not answering 10.0.0.5:6379/0: Connection refused" in health
    assert "Clock unchecked clock not checked against redis; this replica takes no work" in health
    assert "Spark engine down sc://spark:15002: connect refused" in health
    assert "Draining: received SIGTERM." in down.words


def test_the_history_shows_every_table_newest_first() -> None:
    def job(at: float, outcome: str, message: str) -> dict[str, Any]:
        return {"at": at, "kind": "execute", "action": "clean", "instant": "20250101000000000",
                "outcome": outcome, "message": message, "seconds": 2.0}

    tables = [_table("/lake/a", last_outcomes=[job(NOW - 10, "success", "first-a"),
                                               job(NOW - 300, "failed", "x")]),
              _table("/lake/b", last_outcomes=[job(NOW - 60, "corrupt", "second-b")])]
    history = _Page(render_page(_doc(tables), now=NOW)).section("history")
    assert history.index("first-a") < history.index("second-b") < history.index(" x")
    assert "success" in history and "corrupt" in history and "5 min ago" in history


def test_shared_quarantine_pause_and_history_of_every_replica() -> None:
    reason = "compaction 20250101000000000 failed 3 times; last: ValueError: bad file"
    quarantine = {"reason": reason, "at": NOW - 600, "replica": "hoodied-1", "instant": "20250101000000000",
                  "retries": 2, "next_retry_at": NOW + 1200, "last_retry_error": reason}
    history = [{"kind": "retry", "action": "quarantine", "instant": "20250101000000000", "outcome": "failed",
                "seconds": 0.8, "message": "still failing", "replica": "hoodied-2", "finished_at": NOW - 120}]
    mine = [{"at": NOW - 1, "kind": "plan", "action": "clean", "instant": None, "outcome": "nothing_due",
             "message": "this replica's own", "seconds": 0.1}]
    pause = {"by": "alice@ops-1", "at": NOW - 3600, "reason": "backfill running"}
    tables = [_table("/lake/a", quarantined=reason, quarantined_at=NOW - 600, quarantine=quarantine,
                     history=history, last_outcomes=mine),
              _table("/lake/b", paused=True, pause=pause, history=[], last_outcomes=mine)]
    page = _Page(render_page(_doc(tables), now=NOW))
    quarantines = page.section("quarantines")
    assert "a 10 min ago hoodied-1 20250101000000000" in quarantines, quarantines
    assert "retried 2 times; next retry in 20 min" in quarantines and page.words.count(reason) == 1
    history_text = page.section("history")
    assert "a retry quarantine 20250101000000000 failed 0.8 s hoodied-2 still failing" in history_text
    # a table whose shared history is still empty shows this replica's outcomes
    assert history_text.count("this replica's own") == 1 and "b plan clean" in history_text
    assert "paused by alice@ops-1 1 h ago: backfill running" in page.section("tables")
    assert "Paused 1" in page.section("summary")


def test_paths_are_shown_from_the_folder_all_tables_share() -> None:
    tables = [_table("s3://bucket/<wh>/db/trips"), _table("s3://bucket/<wh>/db/orders"),
              _table("s3://bucket/<wh>/events")]
    html = render_page(_doc(tables, recent_errors=[
        {"at": NOW, "table": "s3://bucket/<wh>/events", "error": "poll failed"}]), now=NOW)
    page = _Page(html)
    assert "tables under s3://bucket/<wh>/" in page.words
    assert " db/trips " in page.section("tables") and " events " in page.section("tables")
    assert " events poll failed" in page.section("errors")
    assert 'title="s3://bucket/&lt;wh&gt;/db/orders"' in html  # the whole path as the tooltip
    alone = _Page(render_page(_doc([_table("/lake/trips")]), now=NOW))
    assert " /lake/trips " in alone.section("tables") and "tables under" not in alone.words


def test_the_reload_interval_follows_the_poll_interval_within_bounds() -> None:
    assert refresh_seconds(0.2) == MIN_REFRESH_S
    assert refresh_seconds(10) == 10 and refresh_seconds(9.5) == 10
    assert refresh_seconds(3600) == MAX_REFRESH_S


# ---------------------------------------------------------------------------- a real daemon, a real Chromium


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("chromium is not installed (tests/run.sh installs Debian's chromium with apt-get)")
    return found


def _browse(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with its own profile folder (nothing of the user's, nothing shared)."""
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--hide-scrollbars", f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=120,
    )


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _lake(tmp_path: Path) -> dict[str, Path]:
    """Six tables: a clean to finish, a clean held mid-job, two corrupt tables, an indexing left
    waiting and a paused table."""
    simple, meta = require_fixture("cow/v9_txns_simple_nometa"), require_fixture("cow/v9_txns_simple_meta")
    (tmp_path / "lake").mkdir()
    tables = {}
    for name in ("trips", "payments", "orders_<eu>&<uk>", "events", "users", "sessions"):
        unzipped = unzip_table(meta if name == "payments" else simple, tmp_path / "unzip" / name)
        tables[name] = unzipped.rename(tmp_path / "lake" / name)
    (tables["orders_<eu>&<uk>"] / ".hoodie" / "hoodie.properties").write_text("hoodie.table.name=x\n")
    plan_file = tables["events"] / ".hoodie" / "timeline" / "20991231235959000.clean.requested"
    plan_file.write_bytes(b"Obj\x01garbage")
    storage = LocalStorage(str(tables["users"]))
    plan = {"version": 1, "indexPartitionInfos": [{
        "version": 1, "metadataPartitionPath": "bloom_filters", "indexUptoInstant": "20200101000000000",
        "extraMetadata": {}}]}
    lock = InProcessLock(storage.base_uri)
    with lock:  # an index hoodied does not build, on a table without a metadata table: it waits
        TimelineWriter(storage, load_table_config(storage), lock, time_settings=TimeSettings(
            max_expected_clock_skew_ms=5)).create_requested(Action.INDEXING, "20200101000000000", plan)
    return tables


def test_a_real_daemon_s_page_in_headless_chromium(tmp_path: Path, redis_server: RedisServer) -> None:  # noqa: F811
    browser = _chromium()
    tables = _lake(tmp_path)
    port = free_port()
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({
        "tables": [*(str(p) for n, p in tables.items() if n != "sessions"),
                   {"path": str(tables["sessions"]), "policy": {"paused": True}}],
        "defaults": {"services": {"clean": {"commits_retained": 2}}},
        "lock": {"url": redis_server.url}, "http": f"127.0.0.1:{port}",
        "clock_skew_ms": 5, "poll_interval_seconds": 0.2, "grace_period_seconds": 2,
        "heartbeat": {"interval_ms": 500, "tolerable_misses": 2},
        "retry": {"backoff_seconds": 0.05, "backoff_max_seconds": 0.2}, "log": {"format": "json"},
    }))
    # the clean of the table with a metadata table stops once its metadata log block is written
    held = tmp_path / "held"
    with running("run", "--config", str(config), env={
        "HOODIED_TEST_PAUSE_AT": "mdt-log-written", "HOODIED_TEST_PAUSE_READY": str(held),
        "HOODIED_TEST_PAUSE_S": "120"}) as proc:
        def ready() -> dict[str, Any] | None:
            code, body = get(port, "/status") if held.exists() else (0, "")
            if code != 200:
                return None
            doc = json.loads(body)
            by = {Path(t["path"]).name: t for t in doc["tables"]}
            done = any(o["outcome"] == "success" for o in by["trips"]["last_outcomes"])
            waiting = [p["status"] for p in by["users"]["pending"]] == ["waiting"]
            quarantined = by["orders_<eu>&<uk>"]["quarantined"] and by["events"]["quarantined"]
            return doc if done and waiting and quarantined and by["payments"]["running"] else None

        doc = wait_for("a finished clean, a held one, 2 quarantines, a waiting indexing", ready, 60, (proc,))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
            assert response.headers["Content-Type"] == "text/html; charset=utf-8"
        dumped = _browse(browser, tmp_path / "profile", "--dump-dom", f"http://127.0.0.1:{port}/")
        assert dumped.returncode == 0 and "</html>" in dumped.stdout, dumped.stderr[-3000:]
        artifacts = Path(os.environ.get("HOODIED_TEST_ARTIFACTS") or tmp_path)
        artifacts.mkdir(parents=True, exist_ok=True)
        (artifacts / "status-page.html").write_text(dumped.stdout)
        shot = artifacts / "status-page.png"
        shot.unlink(missing_ok=True)
        taken = _browse(browser, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,1400",
                        f"http://127.0.0.1:{port}/")
        assert taken.returncode == 0 and shot.exists(), taken.stderr[-3000:]
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    assert _png_size(shot) == (1280, 1400)

    page = _Page(dumped.stdout)
    assert page.tags <= PAGE_TAGS, page.tags - PAGE_TAGS  # the table named with <eu> and <uk> made no element
    by = {Path(t["path"]).name: t for t in doc["tables"]}
    assert f"tables under {tmp_path / 'lake'}/" in page.words  # the paths are shown from there
    for name in tables:
        assert f" {name} " in page.section("tables"), name
    assert "Tables watched 6" in page.section("summary") and "Quarantined 2" in page.section("summary")
    assert "Paused 1" in page.section("summary") and "Running jobs 1" in page.section("summary")
    quarantines = page.section("quarantines")
    for name in ("orders_<eu>&<uk>", "events"):
        reason = " ".join(by[name]["quarantined"].split())
        assert reason in quarantines and page.words.count(reason) == 1, (name, reason)
    assert "cannot read the table" in quarantines and "clean 20991231235959000" in quarantines
    pending = page.section("pending")
    # an indexing requested in 2020, its age in days (not seconds), why it waits
    waiting = r"users 20200101000000000 indexing requested \d+ d waiting .*no metadata table"
    assert re.search(waiting, pending), pending
    assert "payments execute clean" in page.section("running")
    history = page.section("history")
    assert "trips execute clean" in history and "success" in history and "trips plan clean" in history
    health = page.section("health")
    assert f"Lock service (Redis) answering {redis_server.url}: TIME answered" in health, health
    assert "Spark engine not started" in health

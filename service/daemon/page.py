"""The daemon's status page (``/``): the ``/status`` document rendered as one HTML page.

``render_page`` is a pure function of the document, as ``/status`` serves it (JSON types only),
and of the time of the request, so the page shows nothing the JSON does not: a fleet summary, the
health of the lock service (Redis), the clock and the Spark engine, the quarantined tables with
their reasons, running jobs, pending instants with their ages, every table, the recent jobs and
the recent errors. Each quarantine reason is written once: a quarantined table's pending instants
only say ``quarantined`` (in the JSON each of them repeats the reason as its note), and a recent
error seen several times is one line with its count. Ages and durations read as people say them
(``hoodie.human.format_age``: "3 h 12 min", not 11520 seconds).

Redis's health is read from what the document holds: the replica measures its clock against Redis
``TIME`` every poll cycle (``service.daemon.clock``), so the clock check says whether Redis
answered, when, and its round trip; jobs that ended ``lock_unavailable`` are counted beside it.

The page is plain server-rendered HTML: inline CSS, no script and no external asset (it works
behind a port-forward with no internet access), reloaded by ``<meta http-equiv="refresh">``.
Every string of the document is escaped: table paths, names and error messages come from
storage and from exceptions, not from hoodied.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from hoodied.hoodie.human import format_age

__all__ = ["DEFAULT_REFRESH_S", "HISTORY_ROWS", "refresh_seconds", "render_page"]

#: Recent jobs shown, newest first, over all tables.
HISTORY_ROWS = 50
#: Bounds of the reload interval: nothing on the page changes faster than a poll cycle, and an
#: open tab should not be minutes behind.
MIN_REFRESH_S, MAX_REFRESH_S = 2, 60
#: The reload interval when the caller has no poll interval to go by.
DEFAULT_REFRESH_S = 10

Cell = str | tuple[str, str]
"""A table cell's HTML, already escaped, or ``(css class, html)``."""

_GOOD_OUTCOMES = frozenset({"success", "planned", "nothing_due", "already_done", "dropped"})
_BAD_OUTCOMES = frozenset({"failed", "corrupt"})
_QUIET_OUTCOMES = frozenset({"claimed", "skipped", "handed_back"})
_STATUS_TONES = {"ready": "ok", "running": "ok", "quarantined": "bad", "backoff": "warn"}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;
 color:#1d2430;background:#f4f6f9}
header{background:#1f2d3d;color:#fff;padding:14px 24px;display:flex;flex-wrap:wrap;gap:6px 24px;
 align-items:baseline}
header h1{font-size:20px;margin:0}
header .meta{color:#c9d4e0}
header nav{margin-left:auto}
header nav a{color:#9fd0ff;margin-left:14px}
main{padding:16px 24px;max-width:1500px}
.banner{background:#fff3cd;border:1px solid #e0c46c;padding:8px 12px;border-radius:6px;margin-bottom:12px}
dl.summary{display:flex;flex-wrap:wrap;gap:12px;margin:0 0 16px}
dl.summary div{background:#fff;border:1px solid #dde3ea;border-radius:8px;padding:10px 16px;min-width:130px}
dl.summary dt{color:#5b6778;font-size:12px;text-transform:uppercase;letter-spacing:.04em}
dl.summary dd{margin:2px 0 0;font-size:26px;font-weight:600}
dl.summary div.bad dd{color:#b42318}
dl.summary div.warn dd{color:#a15c00}
section{background:#fff;border:1px solid #dde3ea;border-radius:8px;padding:10px 16px 14px;margin-bottom:16px}
h2{font-size:15px;margin:4px 0 8px}
table{border-collapse:collapse;width:100%}
th{text-align:left;color:#5b6778;font-weight:600;font-size:12px;border-bottom:1px solid #dde3ea;
 padding:4px 8px}
td{border-bottom:1px solid #eef1f5;padding:5px 8px;vertical-align:top}
td.path{overflow-wrap:anywhere;min-width:9em;font-family:ui-monospace,"DejaVu Sans Mono",monospace;
 font-size:12.5px}
time{white-space:nowrap}
td.msg{overflow-wrap:anywhere;max-width:640px}
td.num{text-align:right;white-space:nowrap}
code{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12.5px}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;
 white-space:nowrap}
.ok{background:#dcfae6;color:#085d3a}.warn{background:#fef0c7;color:#93370d}
.bad{background:#fee4e2;color:#912018}.idle{background:#eaecf0;color:#344054}
.none{color:#5b6778;margin:2px 0}
footer{color:#5b6778;font-size:12px;padding:0 24px 20px}
"""


def refresh_seconds(poll_interval_seconds: float) -> int:
    """The page's reload interval for a daemon polling every ``poll_interval_seconds``."""
    return int(min(MAX_REFRESH_S, max(MIN_REFRESH_S, math.ceil(poll_interval_seconds))))


def _e(value: Any) -> str:
    return "" if value is None else escape(str(value), quote=True)


def _badge(text: str, tone: str) -> str:
    return f'<span class="badge {tone}">{_e(text)}</span>'


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _ago(at: float | None, now: float) -> str:
    """``3 h 12 min ago`` with the UTC time as its tooltip; ``never`` for None."""
    if at is None:
        return "never"
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    return f'<time datetime="{iso}" title="{_utc(at)}">{format_age(now - at)} ago</time>'


def _outcome_tone(outcome: str) -> str:
    if outcome in _GOOD_OUTCOMES:
        return "ok"
    if outcome in _BAD_OUTCOMES:
        return "bad"
    return "idle" if outcome in _QUIET_OUTCOMES else "warn"


def _table(head: Sequence[str], rows: Iterable[Sequence[Cell]], empty: str) -> str:
    """A table of ``rows`` under ``head``; the sentence ``empty`` when there is no row."""
    body = []
    for row in rows:
        cells = []
        for cell in row:
            cls, html = cell if isinstance(cell, tuple) else ("", cell)
            cells.append(f'<td class="{cls}">{html}</td>' if cls else f"<td>{html}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not body:
        return f'<p class="none">{_e(empty)}</p>'
    heads = "".join(f"<th>{_e(h)}</th>" for h in head)
    return f"<table><thead><tr>{heads}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _section(ident: str, title: str, content: str) -> str:
    return f'<section id="{ident}"><h2>{_e(title)}</h2>{content}</section>'


def _quarantine(t: Mapping[str, Any]) -> dict[str, Any] | None:
    """A quarantined table's ``quarantine`` record (the reason alone where the document has none);
    ``None`` when the table is not quarantined."""
    reason = t.get("quarantined")
    if not reason:
        return None
    stored = t.get("quarantine") or {}
    at = stored.get("at") or t.get("quarantined_at")
    return {**stored, "reason": stored.get("reason") or reason, "at": at}


def _jobs(t: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The table's recent jobs: its ``history`` (every replica's, kept across restarts) when the
    document has one, else this replica's ``last_outcomes``."""
    return list(t.get("history") or t.get("last_outcomes") or [])


def _finished_at(job: Mapping[str, Any]) -> float | None:
    at = job.get("finished_at", job.get("at"))  # ``at`` in ``last_outcomes``
    return None if at is None else float(at)


def _took(job: Mapping[str, Any]) -> float | None:
    seconds = job.get("seconds")
    return None if seconds is None else float(seconds)


def _common_root(paths: Sequence[str]) -> str:
    """The folder every table is under, ending in ``/`` (``""`` for fewer than two tables)."""
    if len(paths) < 2:
        return ""
    folders = [p.rstrip("/").split("/")[:-1] for p in paths]
    common = []
    for names in zip(*folders, strict=False):
        if len(set(names)) != 1:
            break
        common.append(names[0])
    root = "/".join(common)
    return f"{root}/" if root.strip("/") else ""


def _table_cell(t: Mapping[str, Any]) -> tuple[str, str]:
    """The table's path under the common root, the whole path as its tooltip."""
    path = str(t.get("path") or "")
    return "path", f'<span title="{_e(path)}">{_e(t.get("_label", path))}</span>'


def _summary(tables: Sequence[Mapping[str, Any]]) -> str:
    quarantined = sum(1 for t in tables if _quarantine(t))
    figures = [
        ("Tables watched", len(tables), ""),
        ("Pending instants", sum(len(t.get("pending") or []) for t in tables), ""),
        ("Running jobs", sum(1 for t in tables if t.get("running")), ""),
        ("Quarantined", quarantined, "bad" if quarantined else ""),
        ("Paused", sum(1 for t in tables if t.get("paused")), ""),
    ]
    tiles = "".join(f'<div class="{cls}"><dt>{_e(name)}</dt><dd>{value}</dd></div>'
                    for name, value, cls in figures)
    return f'<dl class="summary" id="summary">{tiles}</dl>'


def _lock_row(doc: Mapping[str, Any], tables: Sequence[Mapping[str, Any]]) -> list[Cell]:
    where = doc.get("lock") or "local"
    if where == "local":
        return ["Lock service", _badge("local", "idle"),
                "no lock service: each table's own lock (one replica)"]
    clock = doc.get("clock") or {}
    outages = sum(1 for t in tables for j in _jobs(t) if j.get("outcome") == "lock_unavailable")
    detail = f"<code>{_e(where)}</code>"
    if not str(clock.get("source") or "").startswith("redis"):
        tone, state = "idle", "not checked yet"
    elif clock.get("error"):
        tone, state = "bad", "not answering"
        detail += f": {_e(clock['error'])}"
    elif clock.get("round_trip_seconds") is not None:
        tone, state = "ok", "answering"
        ago = clock.get("checked_seconds_ago")
        when = "" if ago is None else f" {_e(format_age(ago))} ago"
        detail += f": TIME answered{when} in {clock['round_trip_seconds'] * 1000:.1f} ms"
    else:
        tone, state = "idle", "not checked yet"
    if outages:
        detail += f"; {outages} recent job(s) ended <code>lock_unavailable</code>"
        tone = "bad" if tone == "bad" else "warn"
    return ["Lock service (Redis)", _badge(state, tone), detail]


def _health(doc: Mapping[str, Any], tables: Sequence[Mapping[str, Any]], now: float) -> str:
    rows = [_lock_row(doc, tables)]
    clock = doc.get("clock") or {}
    state = str(clock.get("state") or "unknown")
    tone = {"in_bounds": "ok", "unknown": "idle"}.get(state, "bad")
    takes = "" if clock.get("takes_work", True) else "; this replica takes no work"
    rows.append(["Clock", _badge(state.replace("_", " "), tone), _e(clock.get("summary")) + takes])
    engine = doc.get("engine") or {}
    master = f"<code>{_e(engine.get('master'))}</code>"
    if engine.get("state") == "starting":
        rows.append(["Spark engine", _badge("starting", "idle"), f"{master}: session starting"])
    elif engine.get("up") is True:
        rows.append(["Spark engine", _badge("up", "ok"), master])
    elif engine.get("up") is False:
        rows.append(["Spark engine", _badge("down", "bad"), f"{master}: {_e(engine.get('problem'))}"])
    else:
        rows.append(["Spark engine", _badge("not started", "idle"),
                     f"{master}: started by the first Spark job"])
    poll = doc.get("last_poll") or {}
    if poll.get("ended_at") is None:
        rows.append(["Poll loop", _badge("starting", "idle"), "first poll cycle not done"])
    else:
        took = poll.get("seconds")
        took_text = "" if took is None else f", took {_e(format_age(took))}"
        requests = sum((poll.get("storage_requests") or {}).values())
        took_text += f", {requests} storage requests" if requests else ""
        ended = _ago(poll["ended_at"], now)
        rows.append(["Poll loop", _badge("polling", "ok"),
                     f"last cycle ended {ended}{took_text}"])
    workers = doc.get("workers") or {}
    rows.append(["Workers", _e(f"{workers.get('busy', 0)} / {workers.get('limit', 0)}"), "busy / limit"])
    return _section("health", "Health", _table(["", "State", "Detail"], rows, ""))


def _quarantines(tables: Sequence[Mapping[str, Any]], now: float) -> str:
    rows: list[list[Cell]] = []
    for t in tables:
        q = _quarantine(t)
        if q is None:
            continue
        since = _ago(q["at"], now) if q.get("at") is not None else ""
        instant = f"<code>{_e(q['instant'])}</code>" if q.get("instant") else ""
        retry = []
        if q.get("retries"):
            retry.append(f"retried {_e(q['retries'])} times")
        next_at = float(q.get("next_retry_at") or 0.0)  # 0: none planned
        if next_at > now:
            retry.append(f"next retry in {_e(format_age(next_at - now))}")
        elif next_at:
            retry.append("retry due")
        if q.get("last_retry_error") and q["last_retry_error"] != q["reason"]:
            retry.append(f"last retry: {_e(q['last_retry_error'])}")
        rows.append([_table_cell(t), since, _e(q.get("replica")), instant, ("msg", _e(q["reason"])),
                     ("msg", "; ".join(retry))])
    head = ["Table", "Since", "By replica", "Instant", "Reason", "Retry"]
    return _section("quarantines", "Quarantined tables", _table(head, rows, "No table is quarantined."))


def _running(tables: Sequence[Mapping[str, Any]]) -> str:
    rows: list[list[Cell]] = []
    for t in tables:
        r = t.get("running")
        if r:
            job = _e(f"{r.get('kind', '')} {r.get('action', '')}")
            took = ("num", _e(format_age(r.get("seconds") or 0)))
            rows.append([_table_cell(t), job, f"<code>{_e(r.get('instant'))}</code>", took])
    return _section("running", "Running jobs",
                    _table(["Table", "Job", "Instant", "For"], rows, "No job is running."))


def _pending(tables: Sequence[Mapping[str, Any]]) -> str:
    rows: list[list[Cell]] = []
    for t in tables:
        for p in t.get("pending") or []:
            status = str(p.get("status") or "")
            # a quarantined table's reason is shown once, in its own section
            note = "" if status == "quarantined" else _e(p.get("note"))
            if p.get("failures"):
                note = f"{_e(p['failures'])} failed attempt(s). {note}".strip()
            rows.append([_table_cell(t), f"<code>{_e(p.get('instant'))}</code>", _e(p.get("action")),
                         _e(p.get("state")), ("num", _e(format_age(p.get("age_seconds") or 0))),
                         _badge(status, _STATUS_TONES.get(status, "idle")), ("msg", note)])
    return _section("pending", "Pending instants", _table(
        ["Table", "Instant", "Action", "State", "Age", "Status", "Note"], rows, "No instant is pending."))


def _tables(tables: Sequence[Mapping[str, Any]], now: float) -> str:
    rows: list[list[Cell]] = []
    for t in tables:
        badges = []
        if _quarantine(t):
            badges.append(_badge("quarantined", "bad"))
        if t.get("paused"):
            badges.append(_badge("paused", "warn"))
            pause = t.get("pause") or {}
            if pause:
                when = f" {_ago(float(pause['at']), now)}" if pause.get("at") is not None else ""
                reason = f": {_e(pause['reason'])}" if pause.get("reason") else ""
                badges.append(f"by {_e(pause.get('by'))}{when}{reason}")
        if t.get("poll_failures"):
            badges.append(_badge(f"{t['poll_failures']} failed poll(s)", "warn"))
        if t.get("running"):
            badges.append(_badge("running", "ok"))
        if not badges:
            badges.append(_badge("ok", "ok"))
        version = f"v{t['version']}" if t.get("version") is not None else None
        what = ", ".join(_e(v) for v in (t.get("name"), t.get("type"), version) if v)
        due = ", ".join(_e(s) for s in t.get("due") or {})
        notes = "<br>".join(f"{_e(s)}: {_e(n)}" for s, n in (t.get("planning") or {}).items())
        rows.append([_table_cell(t), what, " ".join(badges), ("num", str(len(t.get("pending") or []))),
                     due, ("msg", notes)])
    head = ["Table", "Name, type, version", "State", "Pending", "Due", "Planning"]
    return _section("tables", "Tables", _table(head, rows, "No table is watched."))


def _history(tables: Sequence[Mapping[str, Any]], now: float) -> str:
    jobs = [(t, j) for t in tables for j in _jobs(t)]
    jobs.sort(key=lambda tj: _finished_at(tj[1]) or 0.0, reverse=True)
    rows: list[list[Cell]] = []
    for t, j in jobs[:HISTORY_ROWS]:
        outcome = str(j.get("outcome") or "")
        took = _took(j)
        instant = f"<code>{_e(j['instant'])}</code>" if j.get("instant") else ""
        took_text = "" if took is None else _e(format_age(took))
        job = _e(f"{j.get('kind') or ''} {j.get('action') or ''}".strip())
        rows.append([_ago(_finished_at(j), now), _table_cell(t), job, instant,
                     _badge(outcome, _outcome_tone(outcome)), ("num", took_text),
                     _e(j.get("replica")), ("msg", _e(j.get("message")))])
    return _section("history", "Recent jobs", _table(
        ["Finished", "Table", "Job", "Instant", "Outcome", "Took", "Replica", "Message"], rows,
        "No job has finished yet."))


def _errors(doc: Mapping[str, Any], tables: Sequence[Mapping[str, Any]], now: float) -> str:
    # the same error of the same table, seen in several cycles, is one line with its count; a
    # quarantine's error repeats its reason, which the quarantine section already shows
    shown = {(str(t.get("path")), f"quarantined: {q['reason']}") for t in tables if (q := _quarantine(t))}
    labels = {str(t.get("path")): str(t.get("_label")) for t in tables}
    seen: Counter[tuple[str, str]] = Counter()
    latest: dict[tuple[str, str], float] = {}
    for e in doc.get("recent_errors") or []:
        key = (str(e.get("table") or ""), str(e.get("error") or ""))
        if key in shown:
            key = (key[0], "quarantined (the reason is under Quarantined tables)")
        seen[key] += 1
        latest[key] = max(latest.get(key, 0.0), float(e.get("at") or 0.0))
    rows: list[list[Cell]] = [
        [_ago(latest[(table, error)] or None, now),
         _table_cell({"path": table, "_label": labels.get(table, table)}),
         ("num", f"{n}×" if n > 1 else ""), ("msg", _e(error))]
        for (table, error), n in seen.items()
    ]
    return _section("errors", "Recent errors",
                    _table(["Last", "Table", "Times", "Error"], rows, "No recent error."))


def render_page(doc: Mapping[str, Any], *, now: float, refresh: int = DEFAULT_REFRESH_S) -> str:
    """The status page of the ``/status`` document ``doc`` at the time ``now`` (epoch seconds),
    reloading itself every ``refresh`` seconds."""
    # paths under a long common folder (a bucket's warehouse) are shown from it; the folder once, on top
    root = _common_root([str(t.get("path") or "") for t in doc.get("tables") or []])
    tables = [{**t, "_label": str(t.get("path") or "")[len(root):]} for t in doc.get("tables") or []]
    replica = doc.get("replica") or ""
    started = doc.get("started_at")
    meta = [f"replica <b>{_e(replica)}</b>", f"lock <code>{_e(doc.get('lock'))}</code>"]
    if root:
        meta.append(f"tables under <code>{_e(root)}</code>")
    if started is not None:
        meta.append(f"up {_e(format_age(now - float(started)))}")
    if doc.get("once"):
        meta.append("one pass (--once)")
    links = "".join(f'<a href="{p}">{p}</a>' for p in ("/status", "/metrics", "/healthz", "/readyz"))
    banner = ""
    if doc.get("draining"):
        banner = f'<p class="banner">Draining: {_e(doc.get("stop_reason"))}. No new job is started.</p>'
    body = "".join([
        banner, _summary(tables), _health(doc, tables, now), _quarantines(tables, now), _running(tables),
        _pending(tables), _history(tables, now), _tables(tables, now), _errors(doc, tables, now),
    ])
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{int(refresh)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>hoodied · {_e(replica)}</title><style>{_CSS}</style></head>"
        f'<body><header><h1>hoodied</h1><span class="meta">{" · ".join(meta)}</span>'
        f"<nav>{links}</nav></header><main>{body}</main>"
        f"<footer>The <a href=\"/status\">/status</a> document at {_utc(now)}; "
        f"this page reloads every {int(refresh)} s.</footer></body></html>\n"
    )

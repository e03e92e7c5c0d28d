"""The HTTP write endpoints of the per-table controls: ``POST /tables/<table>/pause|resume|release``.

``<table>`` is the table's URI as ``/status`` shows it, percent-encoded or not, with or without the
leading ``/`` of a local path (``/tables/data/t1/pause``, ``/tables//data/t1/pause`` and
``/tables/s3%3A%2F%2Fbucket%2Ft1/pause`` all work), or its ``hoodie.table.name`` when one watched
table has it. ``pause`` takes ``?reason=...`` (and ``?by=...``, default ``http``).

Off unless ``controls.http_writes`` is set (403 meanwhile); then every request needs
``Authorization: Bearer <controls.http_token>`` (401 without it or with another token; compared in
constant time). An unknown table is 404, a method other than POST 405, the store unreachable 503.
A change is written to the shared store (``service.table_controls``) in a worker thread, and the
daemon is told to read the controls again (``DaemonView.controls_changed``), so every replica,
this one first, follows it. The answer is JSON: the table and what the store holds now.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import anyio
import structlog

from hoodied.service.daemon.status import DaemonView
from hoodied.service.table_controls import (
    ControlStore,
    ControlStoreError,
    Pause,
    UnknownTableError,
    resolve_table,
)

__all__ = ["ACTIONS", "PREFIX", "control_response"]

log = structlog.get_logger("hoodied.http")

PREFIX = "/tables/"
ACTIONS = ("pause", "resume", "release")

Answer = tuple[int, str, bytes]


def _json(status: int, doc: dict[str, Any]) -> Answer:
    return status, "application/json", (json.dumps(doc) + "\n").encode()


def _authorization(head: bytes) -> str | None:
    for line in head.split(b"\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == b"authorization":
            return value.strip().decode("latin-1")
    return None


def _resolve(daemon: DaemonView, table: str) -> str | None:
    """The watched table ``table`` names (URI, path or ``hoodie.table.name``), or ``None``."""
    for name in (table, "/" + table):  # /tables/data/t1/pause names /data/t1
        if name in daemon.tables:
            return name
    try:
        uri = resolve_table(daemon.settings, table, daemon.tables)
    except UnknownTableError:
        uri = None
    if uri is not None and uri in daemon.tables:
        return uri
    named = [u for u, ts in daemon.tables.items() if ts.poll is not None and ts.poll.config.name == table]
    return named[0] if len(named) == 1 else None


async def control_response(daemon: DaemonView, method: str, target: str, head: bytes) -> Answer:
    """The answer to a request whose path starts with ``PREFIX`` (see the module docstring)."""
    parts = urlsplit(target)
    table_part, _, action = parts.path[len(PREFIX):].rpartition("/")
    if action not in ACTIONS or not table_part:
        return _json(404, {"error": f"not found: expected {PREFIX}<table>/{'|'.join(ACTIONS)}"})
    if method != "POST":
        return _json(405, {"error": "POST only"})
    controls = daemon.settings.controls
    if not controls.http_writes or controls.http_token is None:
        return _json(403, {"error": "the write endpoints are off (controls.http_writes)"})
    given = _authorization(head) or ""
    scheme, _, token = given.partition(" ")
    expected = controls.http_token.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
        return _json(401, {"error": "a bearer token is required (Authorization: Bearer <token>)"})
    uri = _resolve(daemon, unquote(table_part))
    if uri is None:
        return _json(404, {"error": f"{unquote(table_part)}: not a table this daemon watches"})
    store = daemon.store
    if store is None:
        return _json(503, {"error": "the table controls are not open yet"})
    query = parse_qs(parts.query)
    reason = query.get("reason", [""])[0]
    by = query.get("by", ["http"])[0]
    try:
        doc = await anyio.to_thread.run_sync(_apply(store, action, uri, by, reason))
    except ControlStoreError as exc:
        return _json(503, {"error": str(exc)})
    log.info("table control changed over http", table=uri, action=action, by=by, reason=reason or None)
    daemon.controls_changed()
    return _json(200, {"table": uri, "action": action, **doc})


def _apply(store: ControlStore, action: str, uri: str, by: str, reason: str) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        if action == "pause":
            pause = Pause(by, time.time(), reason)
            store.pause(uri, pause)
            return {"pause": asdict(pause)}
        if action == "resume":
            return {"was_paused": store.resume(uri)}
        lifted = store.release(uri)
        return {"released": None if lifted is None else asdict(lifted)}

    return run

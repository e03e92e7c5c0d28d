"""The daemon's HTTP endpoint, served on its own event loop (no side thread, no framework).

Routes (GET or HEAD, but for the POSTs of ``/tables/``; anything else is 405, unknown paths 404):

- ``/metrics``: Prometheus text format (``service.daemon.metrics``).
- ``/healthz``: liveness. 200 while the last poll cycle ended (or the daemon started) less
  than ``liveness_seconds`` ago, else 503: a stuck loop gets the pod restarted.
- ``/readyz``: readiness. 503 while starting (no poll cycle yet), while draining after
  SIGTERM, when Redis (the lock service) does not answer, while the Spark engine is known to
  be down (``SparkEngine.up`` is False: the last session start or job found it unreachable or
  lost), or while this replica's clock is skewed or could not be checked (``service.daemon.clock``:
  the reason names the offset, its uncertainty and the bound); the Redis check is cached for
  ``READY_CACHE_S`` so probes cannot hammer it.
- ``/status``: the JSON document of ``service.daemon.status.status_document`` (what
  ``hoodied status`` shows).
- ``POST /tables/<table>/pause|resume|release``: the per-table controls, off unless
  ``controls.http_writes`` and behind a bearer token (``service.daemon.controls``).
- ``/``: the status page, that document as HTML (``service.daemon.page``), reloading itself.

HTTP/1.0-style: one request per connection, answered and closed. Requests larger than
``MAX_REQUEST`` bytes or slower than ``READ_TIMEOUT_S`` are dropped. The server handles no
signals; it stops when the daemon's task group is cancelled. It reads the daemon through
``service.daemon.status.DaemonView``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import structlog
from anyio.abc import Listener, SocketAttribute, SocketStream

from hoodied.hoodie.errors import HoodieServiceError
from hoodied.service.daemon.controls import PREFIX as CONTROLS_PREFIX
from hoodied.service.daemon.controls import control_response
from hoodied.service.daemon.metrics import CONTENT_TYPE
from hoodied.service.daemon.page import refresh_seconds, render_page
from hoodied.service.daemon.status import DaemonView, status_document

__all__ = ["HttpBindError", "listen", "serve_http"]

log = structlog.get_logger("hoodied.http")

MAX_REQUEST = 16 * 1024
READ_TIMEOUT_S = 5.0
READY_CACHE_S = 10.0

_REASONS = {
    200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 503: "Service Unavailable",
}


class _Ready:
    """Readiness of the lock service, cached (``READY_CACHE_S``)."""

    def __init__(self) -> None:
        self.checked_at = -1e18
        self.problem: str | None = None

    async def lock_service_problem(self, daemon: DaemonView) -> str | None:
        factory = daemon.factory
        if factory is None:
            return None
        if time.monotonic() - self.checked_at < READY_CACHE_S:
            return self.problem

        async def ping() -> bool:
            # the factory's client lives on its own loop thread; its coroutine runs there
            client = await factory._get_client()
            return bool(await client.ping())

        try:
            # the coroutine is made in the thread: if the thread never runs, none is left unawaited
            await anyio.to_thread.run_sync(lambda: factory.call(ping()))
            self.problem = None
        except Exception as exc:
            self.problem = f"lock service unreachable: {exc}"
        self.checked_at = time.monotonic()
        return self.problem


async def _respond(daemon: DaemonView, ready: _Ready, path: str) -> tuple[int, str, bytes]:
    if path == "/metrics":
        return 200, CONTENT_TYPE, daemon.metrics.render()
    if path == "/healthz":
        age = daemon.loop_heartbeat_age()
        limit = daemon.settings.liveness_seconds()
        if age > limit:
            text = f"loop stalled: no poll cycle for {age:.0f} s (limit {limit:.0f} s)\n"
            return 503, "text/plain", text.encode()
        return 200, "text/plain", f"ok: last poll cycle {age:.1f} s ago\n".encode()
    if path == "/readyz":
        if daemon.draining:
            return 503, "text/plain", f"draining: {daemon.stop_reason}\n".encode()
        if daemon.last_cycle_end is None:
            return 503, "text/plain", b"starting: first poll cycle not done\n"
        problem = await ready.lock_service_problem(daemon)
        if problem:
            return 503, "text/plain", f"{problem}\n".encode()
        if daemon.engine.up is False:
            return 503, "text/plain", f"spark engine unavailable: {daemon.engine.problem}\n".encode()
        check, now = daemon.clock.current, time.monotonic()
        if not check.allows_work:
            return 503, "text/plain", f"{check.describe()}\n".encode()
        if not check.fresh(now):
            return 503, "text/plain", f"clock not checked for {now - check.at:.0f} s\n".encode()
        return 200, "text/plain", b"ready\n"
    if path == "/status":
        body = json.dumps(status_document(daemon), default=str).encode()
        return 200, "application/json", body
    if path == "/":
        # rendered from the document as /status serves it (JSON types): it shows nothing /status does not
        doc = json.loads(json.dumps(status_document(daemon), default=str))
        refresh = refresh_seconds(daemon.settings.poll_interval_seconds)
        return 200, "text/html; charset=utf-8", render_page(doc, now=time.time(), refresh=refresh).encode()
    return 404, "text/plain", b"not found\n"


async def _read_head(stream: SocketStream) -> bytes:
    data = b""
    with anyio.fail_after(READ_TIMEOUT_S):
        while b"\r\n\r\n" not in data and b"\n\n" not in data:
            chunk = await stream.receive(4096)
            data += chunk
            if len(data) > MAX_REQUEST:
                raise ValueError("request too large")
    return data


async def _handle(daemon: DaemonView, ready: _Ready, stream: SocketStream) -> None:
    async with stream:
        try:
            head = await _read_head(stream)
        except (TimeoutError, ValueError, anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return
        parts = head.split(b"\r\n", 1)[0].split()
        status, ctype, body = 400, "text/plain", b"bad request\n"
        method = parts[0].decode("latin-1") if parts else ""
        if len(parts) >= 2:
            path = parts[1].decode("latin-1").split("?", 1)[0]
            if method not in ("GET", "HEAD") and not path.startswith(CONTROLS_PREFIX):
                status, ctype, body = 405, "text/plain", b"GET or HEAD only\n"
            else:
                try:
                    if path.startswith(CONTROLS_PREFIX):
                        target = parts[1].decode("latin-1")
                        status, ctype, body = await control_response(daemon, method, target, head)
                    else:
                        status, ctype, body = await _respond(daemon, ready, path)
                except Exception:
                    log.exception("http handler failed", path=path)
                    status, ctype, body = 503, "text/plain", b"internal error\n"
        header = (
            f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode("latin-1")
        try:
            await stream.send(header + (b"" if method == "HEAD" else body))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return


class HttpBindError(HoodieServiceError):
    """The HTTP address cannot be listened on (in use, not an address of this host)."""


async def listen(host: str, port: int) -> tuple[Listener[SocketStream], int]:
    """Bind ``host:port`` (port 0: any free port) before the daemon starts; the listener and its port."""
    try:
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    except OSError as exc:
        raise HttpBindError(f"http {host}:{port}: cannot listen: {exc.strerror or exc}") from None
    bound: Any = listener.extra(SocketAttribute.local_port)
    return listener, int(bound)


async def serve_http(listener: Listener[SocketStream], daemon: DaemonView) -> None:
    """Serve the routes on ``listener`` until cancelled."""
    ready = _Ready()

    async def handler(stream: SocketStream) -> None:
        await _handle(daemon, ready, stream)

    async with listener:
        await listener.serve(handler)

"""An S3 endpoint on loopback in front of the moto server that injects faults the server cannot make.

``FaultProxy`` forwards every request to moto unchanged, except those its current ``fault``
answers itself: a status and an S3 error code (``503 SlowDown`` for throttling, ``403
AccessDenied`` for a bucket policy refusing writes), for requests matching a method and a key
suffix. Tests switch the fault on and off while real processes talk to the proxy (their
``AWS_ENDPOINT_URL``), and read what it answered and what it forwarded.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.helpers.object_servers import MotoServer, moto_server  # noqa: F401  (fixture)

__all__ = ["SLOW_DOWN", "Fault", "FaultProxy", "fault_proxy"]


@dataclass(frozen=True)
class Fault:
    """Answer ``status`` with S3 error ``code`` to requests of ``methods`` whose key ends with ``suffix``."""

    status: int
    code: str
    methods: frozenset[str] = frozenset({"GET", "PUT", "POST", "DELETE", "HEAD"})
    suffix: str = ""

    def hits(self, method: str, key: str) -> bool:
        return method in self.methods and key.endswith(self.suffix)

    def body(self) -> bytes:
        return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{self.code}</Code>'
                f"<Message>{self.code}</Message></Error>").encode()


#: S3 throttling of every request (``503 SlowDown``).
SLOW_DOWN = Fault(503, "SlowDown")


class FaultProxy:
    """The proxy's state: the fault in force (``None``: forward everything) and what it answered."""

    def __init__(self, upstream: MotoServer) -> None:
        self.upstream = upstream
        self.fault: Fault | None = None
        self.answered: list[tuple[str, str, int]] = []
        #: (method, key, Range header or None) of every forwarded request
        self.forwarded: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                key = urlsplit(self.path).path
                fault = proxy.fault
                if fault is not None and fault.hits(self.command, key):
                    with proxy._lock:
                        proxy.answered.append((self.command, key, fault.status))
                    self._answer(fault.status, [("Content-Type", "application/xml")], fault.body())
                    return
                with proxy._lock:
                    proxy.forwarded.append((self.command, key, self.headers.get("Range")))
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream.port, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
                    response = conn.getresponse()
                    data = response.read()
                    # a HEAD's Content-Length is the object's size: kept as the store sent it
                    skip = {"transfer-encoding", "connection"}
                    if self.command != "HEAD":
                        skip.add("content-length")
                    self._answer(response.status,
                                 [(k, v) for k, v in response.getheaders() if k.lower() not in skip], data)
                finally:
                    conn.close()

            def _answer(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response_only(status)
                for k, v in headers:
                    self.send_header(k, v)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def faulted(self) -> int:
        """How many requests the proxy answered with a fault so far."""
        with self._lock:
            return len(self.answered)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def fault_proxy(moto_server: MotoServer) -> Iterator[FaultProxy]:  # noqa: F811
    proxy = FaultProxy(moto_server)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()

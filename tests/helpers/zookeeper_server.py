"""A real ZooKeeper server (Debian's ``zookeeper`` package) on a free loopback port, for the lock tests.

``zookeeper_server`` is one standalone server for the whole session (each test uses its own lock
path); a test that stops the server makes its own ``ZooKeeperServer``. The server runs from the
package's jar (its manifest names the jars it needs) with a generated ``zoo.cfg``: its own data
directory, the client port bound to 127.0.0.1, the admin HTTP server off, and a short tick so
that short session timeouts (down to two ticks) are allowed.

Also here: ``curator_holder``, the path of the compiled ``CuratorHolder`` Java program (a real
Apache Curator ``InterProcessMutex`` client, built from Debian's ``libcurator-recipes-java``).
tests/run.sh installs the packages and the JDK with apt-get.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.redis_server import free_port

__all__ = ["CuratorHolder", "ZooKeeperServer", "curator_holder", "zookeeper_server"]

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
CURATOR_JARS = [Path(f"/usr/share/java/curator-{n}.jar") for n in ("recipes", "framework", "client")]
TICK_MS = 100


class ZooKeeperServer:
    def __init__(self, workdir: Path) -> None:
        java = shutil.which("java")
        if java is None or not ZOOKEEPER_JAR.is_file():
            pytest.fail(
                "ZooKeeper is not installed (tests/run.sh installs the zookeeper package with apt-get)"
            )
        self.java = java
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={TICK_MS}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            f"minSessionTimeout={2 * TICK_MS}\n"
            "maxSessionTimeout=60000\n"
            "4lw.commands.whitelist=ruok\n"
        )
        self.proc = subprocess.Popen(
            [
                self.java,
                "-Xmx256m",
                "-cp",
                str(ZOOKEEPER_JAR),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(cfg),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"ZooKeeper exited with {self.proc.returncode} on port {self.port}")
            if self.ruok():
                return
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"ZooKeeper did not answer on port {self.port}")

    def ruok(self) -> bool:
        """The server's four-letter health check, over a raw socket (no client library)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(16) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


class CuratorHolder:
    """Runs the compiled ``CuratorHolder`` program: one Curator ``InterProcessMutex`` holding."""

    def __init__(self, java: str, classpath: str) -> None:
        self.java = java
        self.classpath = classpath

    def start(
        self,
        hosts: str,
        lock_path: str,
        *,
        session_ms: int = 10_000,
        wait_ms: int = 30_000,
        hold_ms: int = 60_000,
    ) -> subprocess.Popen[str]:
        """Start a holder; it prints ``held <node>`` once it has the lock (``timeout`` if not within
        ``wait_ms``), holds until its stdin closes or ``hold_ms`` passed, then prints ``released``."""
        return subprocess.Popen(
            [
                self.java,
                "-cp",
                self.classpath,
                "CuratorHolder",
                hosts,
                lock_path,
                str(session_ms),
                str(wait_ms),
                str(hold_ms),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )


@pytest.fixture(scope="session")
def curator_holder(tmp_path_factory: pytest.TempPathFactory) -> CuratorHolder:
    javac, java = shutil.which("javac"), shutil.which("java")
    missing = [str(j) for j in CURATOR_JARS if not j.is_file()]
    if javac is None or java is None or missing:
        pytest.fail(
            "the Curator test client needs javac (openjdk-17-jdk-headless) and libcurator-recipes-java "
            f"(missing: {', '.join(missing) or 'javac'}); tests/run.sh installs them with apt-get"
        )
    out = tmp_path_factory.mktemp("curator-holder")
    source = Path(__file__).with_name("CuratorHolder.java")
    jars = os.pathsep.join(str(j) for j in CURATOR_JARS)
    subprocess.run(
        [javac, "-nowarn", "-cp", jars, "-d", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    return CuratorHolder(java, os.pathsep.join([str(out), jars]))

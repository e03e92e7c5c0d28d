"""Real object-store servers on free loopback ports, for the object-storage tests (import the fixtures).

- S3: moto's server (``moto_server`` from PyPI ``moto[server]``; accepts any credentials); its
  request log (``MotoRequestLog``) is an independent count of the requests a test sent.
- Azure Blob: Azurite (npm ``azurite``, installed by ``tests/run.sh`` under ``.venv/azurite``),
  with its well-known development account.

The servers are started once per session; each test makes its own bucket or container
(``new_bucket()``), and the ``s3_env`` / ``azure_env`` fixtures set the standard credential
variables for one test, the way a deployment would.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.redis_server import free_port

__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "S3_SECRET",
    "AzuriteServer",
    "MotoRequestLog",
    "MotoServer",
    "azure_env",
    "azurite_server",
    "moto_server",
    "s3_env",
    "upload_tree",
]

PROJECT = Path(__file__).resolve().parents[2]
AZURITE_BIN = PROJECT / ".venv" / "azurite" / "node_modules" / ".bin" / "azurite-blob"

#: Azurite's well-known development account (public, the same in every Azurite).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: moto accepts any key; a distinctive one lets tests look for it where it must not be.
S3_KEY_ID = "hoodied-test-key-id"
S3_SECRET = "hoodied-test-secret-0123456789"


def _start(cmd: list[str], ready_url: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    """Start a server and wait until ``ready_url`` answers any HTTP status."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{name} exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            urllib.request.urlopen(ready_url, timeout=1).close()
            return proc
        except urllib.error.HTTPError:
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    pytest.fail(f"{name} did not answer on {ready_url}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@dataclass(frozen=True)
class MotoServer:
    port: int
    log: Path | None = None
    """The server's output: one line per request it served."""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def new_bucket(self, prefix: str = "lake") -> str:
        """A fresh, empty bucket (moto takes an unsigned ``PUT /bucket``)."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(req, timeout=10).close()
        return name

    def hudi_rs_options(self) -> dict[str, str]:
        return {
            "aws_endpoint_url": self.endpoint,
            "aws_allow_http": "true",
            "aws_access_key_id": S3_KEY_ID,
            "aws_secret_access_key": S3_SECRET,
            "aws_region": "us-east-1",
        }


class MotoRequestLog:
    """moto's request log (one line per request it served) for one bucket, from a mark on."""

    def __init__(self, server: MotoServer, bucket: str) -> None:
        assert server.log is not None
        self.path, self.bucket = server.log, bucket
        self.mark = self._lines()

    def _lines(self) -> int:
        return len(self.path.read_text(errors="replace").splitlines())

    def since_mark(self) -> list[str]:
        """The bucket's request lines since the mark (which moves to the end)."""
        time.sleep(0.3)  # the server logs after answering
        lines = self.path.read_text(errors="replace").splitlines()[self.mark:]
        self.mark += len(lines)
        return [line for line in lines if f"/{self.bucket}" in line]

    def kinds(self) -> dict[str, int]:
        """The requests since the mark by kind: ``list`` (ListObjectsV2), ``get``, ``head``, ``put``..."""
        out: dict[str, int] = {}
        for line in self.since_mark():
            m = re.search(r'"(GET|HEAD|PUT|DELETE|POST) (\S+)', line)
            assert m is not None, line
            kind = "list" if m.group(1) == "GET" and "list-type=2" in m.group(2) else m.group(1).lower()
            out[kind] = out.get(kind, 0) + 1
        return out


@dataclass(frozen=True)
class AzuriteServer:
    port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    def new_container(self, prefix: str = "lake") -> str:
        from azure.storage.blob import BlobServiceClient

        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        conn = (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={self.endpoint};"
        )
        with BlobServiceClient.from_connection_string(conn) as client:
            client.create_container(name)
        return name


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    binary = shutil.which("moto_server", path=str(PROJECT / ".venv" / "bin")) or shutil.which("moto_server")
    if binary is None:
        pytest.skip("moto_server is not installed (tests/run.sh installs moto[server])")
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    server = MotoServer(free_port(), log)
    proc = _start([binary, "-H", "127.0.0.1", "-p", str(server.port)], f"{server.endpoint}/moto-api/",
                  "moto_server", log)
    try:
        yield server
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteServer]:
    if not AZURITE_BIN.exists() or shutil.which("node") is None:
        where = AZURITE_BIN.relative_to(PROJECT)
        pytest.skip(f"Azurite is not installed at {where} (tests/run.sh installs it)")
    server = AzuriteServer(free_port())
    data = tmp_path_factory.mktemp("azurite")
    cmd = [str(AZURITE_BIN), "--blobHost", "127.0.0.1", "--blobPort", str(server.port),
           "--location", str(data), "--silent", "--skipApiVersionCheck", "--disableTelemetry"]
    proc = _start(cmd, f"http://127.0.0.1:{server.port}/", "azurite-blob", data / "azurite.log")
    try:
        yield server
    finally:
        _stop(proc)


@pytest.fixture
def s3_env(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> MotoServer:
    """The standard AWS variables pointing at the moto server, for one test."""
    for key, value in {
        "AWS_ENDPOINT_URL": moto_server.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": S3_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": S3_SECRET,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return moto_server


@pytest.fixture
def azure_env(azurite_server: AzuriteServer, monkeypatch: pytest.MonkeyPatch) -> AzuriteServer:
    """The standard Azure variables pointing at Azurite, for one test."""
    for key, value in {
        "AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT,
        "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
        "AZURE_STORAGE_ENDPOINT": azurite_server.endpoint,
        "AZURE_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(key, value)
    return azurite_server


def upload_tree(root: Path, bucket: str, prefix: str = "t", *, scheme: str = "s3") -> str:
    """Every file under ``root`` copied to ``bucket/prefix`` on the S3 server the standard AWS
    variables name; returns the copy's URI (``scheme`` ``s3a`` for the form Hadoop writers use)."""
    import obstore
    from obstore.store import S3Store

    store = S3Store.from_url(f"s3://{bucket}")
    for path in sorted(root.rglob("*")):
        if path.is_file():
            obstore.put(store, f"{prefix}/{path.relative_to(root).as_posix()}", path.read_bytes())
    return f"{scheme}://{bucket}/{prefix}"
